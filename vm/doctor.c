/*
 * vm/doctor.c: what `fleetctl doctor` asks of the VM backend: is libvirtd
 * reachable (and which versions), and do guests get KVM or the slow TCG
 * fallback. The guest image is core's check (core/doctor.c), through the
 * image store (images.h).
 */
#include <string.h>
#include <unistd.h>

#include "model/fleetd.h"
#include "vm/vm_internal.h"

void vm_doctor(struct fleetd *f, struct doctor_report *r)
{
	struct vm_backend *b = vm_backend_of(f);
	char lib[32], hv[32];
	_cleanup_free_ char *why = NULL, *virt_type = NULL;

	if (!b)
		return;
	if (virt_versions(b->virt, lib, hv, &why) == 0)
		doctor_add(r, "libvirt", DOCTOR_OK, NULL, "libvirtd %s reachable at %s (hypervisor %s)", lib,
			   virt_uri(b->virt), hv);
	else
		doctor_add(r, "libvirt", DOCTOR_FAIL,
			   "start libvirtd (systemctl start libvirtd), or set libvirt_uri in fleetd.conf to one that "
			   "answers; fleetd reconnects by itself",
			   "cannot reach libvirtd at %s: %s", virt_uri(b->virt), why ? why : "not connected");
	if (strcmp(b->domain_type, "kvm") == 0) {
		doctor_add(r, "kvm", DOCTOR_OK, NULL, "guests run under KVM (/dev/kvm usable)");
		return;
	}
	virt_type = vm_virt_type_file(b);
	if (access(virt_type, F_OK) == 0)
		doctor_add(r, "kvm", DOCTOR_WARN,
			   "make KVM run nested guests (kvm_intel nested=1 or kvm_amd nested=1 on the outer host), "
			   "then remove that file and restart fleetd",
			   "TCG fallback in force: a KVM guest never booted here (remembered in %s); guests are "
			   "several times slower", virt_type);
	else
		doctor_add(r, "kvm", DOCTOR_WARN,
			   "enable virtualisation in the firmware and load kvm_intel or kvm_amd (modprobe), or "
			   "give fleetd's user access to /dev/kvm; then restart fleetd",
			   "/dev/kvm is missing or unusable: guests run under TCG, several times slower");
}
