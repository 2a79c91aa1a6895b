/*
 * remote_boot: before a remote agent's boot (#15), what vm_prepare_boot and
 * vm_memdisk_fit do for a local one. Its domain names its boot image's
 * kernel and initramfs (after `fleetctl upgrade`, or a revert to a snapshot
 * taken before one): that image is uploaded to its host first, through the
 * same upload-once path as a create (remote_disks.c: hashed, its marker
 * last), and the domain redefined (same UUID, its disk still on the base it
 * was made on). Its memory disk's volume is grown back to its quota's size
 * (a revert may have brought back a smaller one; the file system follows at
 * the boot, as for a local agent). What takes long (an upload, a pool
 * refresh, qemu-img there) runs on a worker; the agent is busy meanwhile.
 * It touches only its job there; the host's connection is thread-safe.
 * Then the boot itself (vm_remote_boot): started paused until its console
 * streams here, resumed.
 */
#include <errno.h>
#include <string.h>

#include "common/log.h"
#include "model/fleetd.h"
#include "vm/virt_xml.h"
#include "vm/vm_internal.h"

#define MIB (1LL << 20)

struct remote_boot_job {
	struct vm *vm;
	struct virt *virt;
	struct agent *agent;		/* a copy */
	char *image, *boot_image;
	bool redefine;			/* its domain names another boot image than its record */
	int memdisk_mib;		/* its memory disk's size to fit (0: not asked) */
	bool grew;
	char uuid[40];
	int r;
	char *why;
	void (*done)(struct vm *v, int r, const char *why, void *userdata);
	void *userdata;
};

static int boot_work_run(struct remote_boot_job *j, char **why)
{
	struct vm_backend *b = j->vm->b;
	_cleanup_free_ char *xml = NULL;
	int r;

	if (j->redefine) {
		if ((r = vm_remote_image(b, j->virt, j->boot_image, why)) < 0 ||
		    (r = vm_remote_domain_xml(b, j->virt, j->agent, j->image, j->boot_image, j->uuid, &xml, why)) < 0 ||
		    (r = virt_domain_define(j->virt, xml, why)) < 0)
			return r;
	}
	if (j->memdisk_mib) {
		_cleanup_free_ char *vol = vm_remote_agent_vol(j->agent->name, MEMDISK);

		r = virt_vol_grow_qcow2(j->virt, VM_POOL, vol, (long long)j->memdisk_mib * MIB, why);
		if (r == -ENOENT) {	/* made there before agents had one: its store is on its root disk */
			free(*why);
			*why = NULL;
			r = 0;
		}
		if (r < 0)
			return r;
		j->grew = r > 0;
	}
	return 0;
}

static void boot_work(void *arg)
{
	struct remote_boot_job *j = arg;

	j->r = boot_work_run(j, &j->why);
}

static void boot_done(void *arg)
{
	struct remote_boot_job *j = arg;
	struct vm *v = j->vm;

	v->busy = false;
	if (j->r == 0) {
		v->remote_boot_ready = true;	/* the start that waits goes on to the boot */
		if (j->redefine)
			log_notice("agent '%s': its domain on host %s boots image sha256:%.12s", v->name, j->agent->host,
				   j->boot_image);
		if (j->memdisk_mib)
			v->memdisk_mib = j->memdisk_mib;
		if (j->grew)
			log_notice("agent '%s': its memory disk on host %s grew back to %d MiB (its quota; a snapshot had "
				   "it smaller)", v->name, j->agent->host, j->memdisk_mib);
	}
	j->done(v, j->r, j->why, j->userdata);
	agent_free(j->agent);
	free(j->image);
	free(j->boot_image);
	free(j->why);
	free(j);
}

int vm_remote_boot_prepare(struct vm *v, const struct agent *a, bool off,
			   void (*done)(struct vm *v, int r, const char *why, void *userdata), void *userdata, char **why)
{
	_cleanup_free_ char *dom = vm_domain_name(a->name), *cur = NULL, *want = NULL, *kernel = NULL;
	_cleanup_images_ struct agent_images im = { 0 };
	const char *boot;
	struct remote_boot_job *j;
	bool redefine;
	int mib = 0, r;

	if (v->remote_boot_ready) {
		v->remote_boot_ready = false;
		return 0;
	}
	if (vm_load_images(v->b, a->name, &im) < 0 || !im.image)
		return 0;	/* boot as defined */
	boot = im.boot_image ? im.boot_image : im.image;
	if (virt_domain_xml(v->virt, dom, &cur) < 0)
		return 0;	/* the start reports what is wrong */
	/* The volume's name is the image's: the path around it is the pool's, whatever it is there. */
	want = xasprintf("/image-%s.vmlinuz", boot);
	if (virt_xml_string(cur, "string(/domain/os/kernel)", &kernel) < 0) {
		*why = xasprintf("the definition of domain %s on host %s is not XML libxml2 can read", dom, a->host);
		return -EINVAL;
	}
	redefine = !kernel || strlen(kernel) < strlen(want) || strcmp(kernel + strlen(kernel) - strlen(want), want) != 0;
	if (off && v->memdisk_mib < vm_memdisk_mib(a->memory_quota_mib))
		mib = vm_memdisk_mib(a->memory_quota_mib);
	if (!redefine && !mib)
		return 0;
	j = xcalloc(1, sizeof(*j));
	if (redefine && (r = virt_domain_uuid(v->virt, dom, j->uuid)) < 0) {
		*why = xasprintf("cannot read the UUID of domain %s on host %s", dom, a->host);
		free(j);
		return r;
	}
	j->vm = v;
	j->virt = v->virt;
	j->agent = agent_copy(a);
	j->image = xstrdup(im.image);
	j->boot_image = xstrdup(boot);
	j->redefine = redefine;
	j->memdisk_mib = mib;
	j->done = done;
	j->userdata = userdata;
	/* busy: no destroy, exec, snapshot or second start meanwhile. */
	v->busy = true;
	if ((r = vm_worker_run(v->b, boot_work, boot_done, j)) < 0) {
		v->busy = false;
		*why = xasprintf("cannot start a worker thread: %s", strerror(-r));
		agent_free(j->agent);
		free(j->image);
		free(j->boot_image);
		free(j);
		return r;
	}
	if (redefine)
		log_info("agent '%s': bringing its domain on host %s to image sha256:%.12s before its boot (off the loop)",
			 a->name, a->host, boot);
	return 1;
}

/* The type a defined domain boots as ("kvm" or "qemu"), from its definition; "qemu" if unknown. */
static const char *domain_type_of(struct virt *virt, const char *dom)
{
	_cleanup_free_ char *xml = NULL, *type = NULL;

	if (virt_domain_xml(virt, dom, &xml) < 0 || virt_xml_string(xml, "string(/domain/@type)", &type) < 0)
		return "qemu";
	return type && strcmp(type, "kvm") == 0 ? "kvm" : "qemu";
}

int vm_remote_boot(struct vm *v, const struct agent *a, char **why)
{
	_cleanup_free_ char *dom = vm_domain_name(a->name), *cwhy = NULL;
	int r;

	/* Paused until its console streams here (remote_console.c), so its log holds the whole boot. */
	if ((r = virt_domain_start_paused(v->virt, dom, why)) < 0)
		return r;
	vm_remote_console_close(v);	/* the last run's, if its end was not seen yet */
	if (vm_remote_console_open(v, &cwhy) < 0)
		log_notice("agent '%s': its console is not logged yet (%s); fleetd tries again every few seconds",
			   a->name, cwhy ? cwhy : "?");
	if ((r = virt_domain_resume(v->virt, dom, why)) < 0) {
		v->stopping = true;	/* not a crash: it never ran */
		(void)virt_domain_destroy(v->virt, dom, NULL);
		return r;
	}
	/* What the watchdog needs if KVM there turns out to run no guest (channel.c). */
	v->booted_type = domain_type_of(v->virt, dom);
	v->started_at = now_usec();
	if (a != v->boot_agent) {	/* the watchdog boots again with the copy it has */
		agent_free(v->boot_agent);
		v->boot_agent = agent_copy(a);
	}
	return 0;
}
