/*
 * vm/snapshot_rehome.c: a snapshot's definition, as libvirt 9 writes it for
 * a checkpoint of a running guest (<domain> and <inactiveDomain>) and for a
 * disk snapshot (<domain> only), made fit for the same domain on another
 * host: every embedded domain is the new host's, nothing else changes, and
 * what is not a snapshot definition is refused with a reason.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vm/snapshot_rehome.h"
#include "../tap.h"

static const char old_dom[] =
	"<domain type='qemu' id='3'>\n"
	"  <name>fleet-mv</name>\n"
	"  <uuid>0b9f4b6e-1d0c-4c8e-9d43-7b0a0c3f1a11</uuid>\n"
	"  <devices>\n"
	"    <disk type='file' device='disk'><source file='/var/lib/fleet/vms/mv/disk.qcow2'/><target dev='vda'/></disk>\n"
	"    <serial type='file'><source path='/var/lib/fleet/vms/mv/console.log'/></serial>\n"
	"    <channel type='unix'><source mode='bind' path='/var/lib/fleet/vms/mv/ctl.sock'/></channel>\n"
	"  </devices>\n"
	"</domain>\n";

static const char new_dom[] =
	"<domain type='qemu'>\n"
	"  <name>fleet-mv</name>\n"
	"  <uuid>0b9f4b6e-1d0c-4c8e-9d43-7b0a0c3f1a11</uuid>\n"
	"  <devices>\n"
	"    <disk type='file' device='disk'><source file='/var/lib/libvirt/fleet/agent-mv.disk.qcow2'/><target dev='vda'/></disk>\n"
	"    <serial type='pty'/>\n"
	"    <channel type='unix'><source mode='bind'/></channel>\n"
	"  </devices>\n"
	"</domain>\n";

static char *snapshot(bool running)
{
	char *s = NULL;

	if (asprintf(&s,
		     "<domainsnapshot>\n"
		     "  <name>s1</name>\n"
		     "  <state>%s</state>\n"
		     "  <parent><name>s0</name></parent>\n"
		     "  <creationTime>1764720000</creationTime>\n"
		     "  <memory snapshot='internal'/>\n"
		     "  <disks><disk name='vda' snapshot='internal'/></disks>\n"
		     "%s%s%s"
		     "</domainsnapshot>\n",
		     running ? "running" : "shutoff", old_dom, running ? "<inactiveDomain>\n  <name>fleet-mv</name>\n  "
		     "<devices><disk type='file' device='disk'><source file='/var/lib/fleet/vms/mv/disk.qcow2'/>"
		     "</disk></devices>\n</inactiveDomain>\n" : "", "") < 0)
		abort();
	return s;
}

static int count(const char *hay, const char *needle)
{
	int n = 0;

	for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
		n++;
	return n;
}

int main(void)
{
	char *why = NULL, *out = NULL, *snap;

	for (int running = 0; running <= 1; running++) {
		snap = snapshot(running);
		is_int(vm_snapshot_rehome(snap, new_dom, &out, &why), 0, "%s snapshot: rehomed", running ? "a running" : "a disk");
		ok(out && !strstr(out, "/var/lib/fleet/vms/mv/"), "  no path of the old host is left in it");
		is_int(out ? count(out, "/var/lib/libvirt/fleet/agent-mv.disk.qcow2") : 0, running ? 2 : 1,
		       "  each embedded domain names the disk's volume on the new host");
		ok(out && strstr(out, "<name>s1</name>") && strstr(out, "<parent>") && strstr(out, "<state>") &&
			   strstr(out, "<creationTime>1764720000</creationTime>") &&
			   strstr(out, "<disk name=\"vda\" snapshot=\"internal\"/>") && strstr(out, "<memory snapshot=\"internal\"/>"),
		   "  its name, parent, state, time, memory and disks are kept");
		ok(out && count(out, "<inactiveDomain") == running && count(out, "<domain ") == 1 + 0 &&
			   strstr(out, "0b9f4b6e-1d0c-4c8e-9d43-7b0a0c3f1a11"),
		   "  the same elements, the domain's UUID kept");
		ok(out && strstr(out, "<serial type=\"pty\"/>") && !strstr(out, "console.log"), "  the new host's console (a pty)");
		free(out);
		out = NULL;
		free(snap);
	}
	is_int(vm_snapshot_rehome("<domain/>", new_dom, &out, &why), -EINVAL, "a domain is not a snapshot definition");
	ok(why && strstr(why, "domainsnapshot"), "  it says so: %s", why ? why : "");
	free(why);
	why = NULL;
	is_int(vm_snapshot_rehome("<domainsnapshot><name>x</name></domainsnapshot>", new_dom, &out, &why), -EINVAL,
	       "a definition without its domain is refused (libvirt could not revert to it)");
	free(why);
	why = NULL;
	is_int(vm_snapshot_rehome("<domainsnapshot><name>x</name>", new_dom, &out, &why), -EINVAL, "cut-short XML is refused");
	free(why);
	why = NULL;
	is_int(vm_snapshot_rehome("<!DOCTYPE d [<!ENTITY e SYSTEM 'file:///etc/shadow'>]><domainsnapshot><name>&e;</name>"
				  "<domain/></domainsnapshot>", new_dom, &out, &why), 0,
	       "an external entity is kept as a reference, never read");
	ok(out && !strstr(out, "root:"), "  nothing of /etc/shadow in it");
	free(out);
	free(why);
	return tap_done();
}
