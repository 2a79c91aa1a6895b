/*
 * memdisk: a VM agent's memory store is a disk of its own (#12), so the
 * guest's kernel holds every write into ~/memory to the quota, the agent's
 * own command included.
 *
 *   <state_dir>/vms/NAME/memory.qcow2   root's 0600; ext4 (label fleet-memory), the guest's /dev/vdc
 *
 * fleetd makes it on the host (mke2fs on a raw file of ours, then qemu-img
 * convert), never inside the guest and never from a path the agent names:
 * the file is in the agent's root-owned directory, under a fixed name. The
 * guest's initramfs mounts it on /home/agent/memory before anything of the
 * agent runs; a fresh one still has mke2fs's lost+found, which tells the
 * initramfs to copy what the root disk's ~/memory held into it first (so an
 * agent made before memory disks loses nothing), see images/build-image.sh.
 * It is a qcow2 disk so libvirt's internal snapshots cover it with the root
 * disk: a rollback rolls the memory back.
 *
 * mke2fs and the conversion run on a worker thread before the first boot
 * that needs the disk (vm_start), never on fleetd's loop.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/spawn.h"
#include "common/log.h"
#include "common/util.h"
#include "model/agent.h"
#include "model/fleetd.h"
#include "vm/vm_internal.h"

#define MIB (1LL << 20)

int vm_memdisk_mib(int quota_mib)
{
	int q = quota_mib > 0 ? quota_mib : MEMORY_QUOTA_DEFAULT;

	/*
	 * What ext4 (4 KiB blocks, a 4 MiB journal, an inode per 16 KiB) takes
	 * for itself on top of the data: measured at 1..256 MiB, the file
	 * system then holds the quota and at most about 4% + 4 MiB more.
	 */
	return q + q / 25 + 8;
}

/* Build path (ext4 of mib MiB, as a qcow2 file) through temp files beside it; blocking. 0 or -errno with *why. */
int vm_memdisk_build(const char *path, int mib, char **why)
{
	_cleanup_free_ char *raw = xasprintf("%s.raw.tmp", path), *tmp = xasprintf("%s.tmp", path);
	_cleanup_free_ char *size = xasprintf("%dM", mib);
	/* root_owner: the agent user (uid 1000 in every fleet guest) owns the store's root. */
	const char *const mk[] = { "mke2fs", "-q", "-F", "-t", "ext4", "-m", "0", "-b", "4096", "-i", "16384",
				   "-J", "size=4", "-L", "fleet-memory", "-E", "root_owner=1000:1000,nodiscard",
				   raw, size, NULL };
	const char *const conv[] = { "qemu-img", "convert", "-q", "-f", "raw", "-O", "qcow2", raw, tmp, NULL };
	int fd, r;

	/* Ours and fresh: a leftover of a killed build is replaced, a link there is not followed. */
	(void)unlink(raw);
	(void)unlink(tmp);
	if ((fd = open(raw, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600)) < 0) {
		r = -errno;
		*why = xasprintf("cannot create %s: %s", raw, strerror(-r));
		return r;
	}
	r = ftruncate(fd, (off_t)mib * MIB) < 0 ? -errno : 0;
	close(fd);
	if (r < 0) {
		*why = xasprintf("cannot size %s: %s", raw, strerror(-r));
		goto out;
	}
	if ((r = vm_run_tool(mk, "mke2fs for the memory disk", why)) < 0 ||
	    (r = vm_run_tool(conv, "qemu-img convert for the memory disk", why)) < 0)
		goto out;
	if (chmod(tmp, 0600) < 0 || (fd = open(tmp, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
		r = -errno;
		*why = xasprintf("cannot open %s: %s", tmp, strerror(-r));
		goto out;
	}
	/* On disk before it has its name: a crash never leaves a half disk called memory.qcow2. */
	r = fsync(fd) < 0 ? -errno : 0;
	close(fd);
	if (r == 0 && rename(tmp, path) < 0)
		r = -errno;
	if (r < 0)
		*why = xasprintf("cannot put the memory disk in place at %s: %s", path, strerror(-r));
out:
	(void)unlink(raw);
	if (r < 0)
		(void)unlink(tmp);
	return r;
}

/*
 * At fleetd's start, before any build: what a build cut short left (fleetd
 * stopped or killed during mke2fs or the conversion), in every agent's
 * directory. Only the two temp names vm_memdisk_build uses: a finished disk
 * has its own name and is never touched. A link in place of an agent's
 * directory is not followed.
 */
void vm_memdisk_sweep(struct vm_backend *b)
{
	static const char *const leftovers[] = { MEMDISK ".tmp", MEMDISK ".raw.tmp" };
	_cleanup_free_ char *vms = xasprintf("%s/vms", b->state_dir);
	DIR *d = opendir(vms);
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d))) {
		_cleanup_close_ int dfd = -1;
		struct stat st;

		if (e->d_name[0] == '.')
			continue;
		if ((dfd = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
			continue;
		for (size_t i = 0; i < ARRAY_SIZE(leftovers); i++)
			if (fstatat(dfd, leftovers[i], &st, AT_SYMLINK_NOFOLLOW) == 0 && unlinkat(dfd, leftovers[i], 0) == 0)
				log_info("agent '%s': removed %s, left by a memory disk build that was cut short",
					 e->d_name, leftovers[i]);
	}
	closedir(d);
}

/* 1: the agent has its memory disk, 0: not yet, -errno: something else is there. */
int vm_memdisk_exists(struct vm_backend *b, const char *agent)
{
	_cleanup_close_ int dfd = vm_dir_open(b, agent);
	struct stat st;

	if (dfd < 0)
		return dfd;
	if (fstatat(dfd, MEMDISK, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : -errno;
	return S_ISREG(st.st_mode) ? 1 : -EINVAL;
}

/* The disk's virtual size in bytes, as qemu-img says; -errno with *why. */
static int virtual_size(const char *path, long long *ret, char **why)
{
	const char *const argv[] = { "qemu-img", "info", "--output=json", "-f", "qcow2", path, NULL };
	_cleanup_free_ char *out = NULL;
	json_error_t err;
	json_t *j, *v;
	int r;

	if ((r = spawn_run(argv, &out)) != 0) {
		if (out)
			out[strcspn(out, "\n")] = '\0';
		*why = xasprintf("qemu-img info %s failed: %s", path, out && *out ? out : r < 0 ? strerror(-r) : "no message");
		return r < 0 ? r : -EIO;
	}
	if (!(j = json_loads(out ? out : "", 0, &err))) {
		*why = xasprintf("qemu-img info %s: not JSON: %s", path, err.text);
		return -EIO;
	}
	v = json_object_get(j, "virtual-size");
	r = json_is_integer(v) ? 0 : -EIO;
	if (r == 0)
		*ret = json_integer_value(v);
	else
		*why = xasprintf("qemu-img info %s: no virtual-size", path);
	json_decref(j);
	return r;
}

/*
 * Before a boot of a stopped agent: the disk at least as large as its quota
 * wants. A revert to a snapshot taken before the quota grew brings the disk
 * (and its file system) back to the size it had then; it grows again here,
 * its file system when agentd starts. Asking qemu-img is a spawn per boot,
 * so the size fleetd made, grew or read last is kept (struct vm) until a
 * revert forgets it: only the first boot after fleetd's start or after a
 * revert asks. 0 or -errno with *why.
 */
int vm_memdisk_fit(struct vm_backend *b, const struct agent *a, char **why)
{
	_cleanup_free_ char *path = vm_path(b, a->name, MEMDISK);
	_cleanup_free_ char *size = xasprintf("%dM", vm_memdisk_mib(a->memory_quota_mib));
	const char *const grow[] = { "qemu-img", "resize", "-q", "-f", "qcow2", path, size, NULL };
	int want = vm_memdisk_mib(a->memory_quota_mib);
	struct vm *v = vm_find(b, a->name);
	long long have = 0;
	int r;

	if (v && v->memdisk_mib >= want)
		return 0;
	if ((r = virtual_size(path, &have, why)) < 0)
		return r;
	if (have < (long long)want * MIB) {
		if ((r = vm_run_tool(grow, "qemu-img resize of the memory disk", why)) < 0)
			return r;
		log_notice("agent '%s': its memory disk grew back to %s (its quota; a snapshot had it smaller)", a->name, size);
		have = (long long)want * MIB;
	}
	if (v)
		v->memdisk_mib = (int)(have / MIB);
	return 0;
}

void vm_memdisk_forget(struct vm *v)
{
	v->memdisk_mib = 0;
}

struct memdisk_job {
	struct vm *vm;
	char *path;
	int mib;
	int r;
	char *why;
	void (*done)(struct vm *v, int r, const char *why, void *userdata);
	void *userdata;
};

static void memdisk_work(void *arg)
{
	struct memdisk_job *j = arg;

	j->r = vm_memdisk_build(j->path, j->mib, &j->why);
}

static void memdisk_done(void *arg)
{
	struct memdisk_job *j = arg;

	j->vm->busy = false;
	if (j->r == 0) {
		j->vm->memdisk_mib = j->mib;
		log_info("agent '%s': made its memory disk (%d MiB, ext4)", j->vm->name, j->mib);
	}
	j->done(j->vm, j->r, j->why, j->userdata);
	free(j->path);
	free(j->why);
	free(j);
}

int vm_memdisk_make(struct vm *v, const struct agent *a, void (*done)(struct vm *v, int r, const char *why, void *userdata),
		    void *userdata, char **why)
{
	struct memdisk_job *j = xcalloc(1, sizeof(*j));
	int r;

	j->vm = v;
	j->path = vm_path(v->b, a->name, MEMDISK);
	j->mib = vm_memdisk_mib(a->memory_quota_mib);
	j->done = done;
	j->userdata = userdata;
	/* busy: no destroy, exec, snapshot or second start while the disk is made. */
	v->busy = true;
	if ((r = vm_worker_run(v->b, memdisk_work, memdisk_done, j)) < 0) {
		v->busy = false;
		*why = xasprintf("cannot start making the memory disk: %s", strerror(-r));
		free(j->path);
		free(j);
		return r;
	}
	return 0;
}

int vm_memory_quota_apply(struct fleetd *f, const struct agent *a, int old_mib, char **why)
{
	struct vm_backend *b = vm_backend_of(f);
	_cleanup_free_ char *dom = vm_domain_name(a->name), *path = vm_path(b, a->name, MEMDISK);
	_cleanup_free_ char *size = xasprintf("%dM", vm_memdisk_mib(a->memory_quota_mib));
	const char *const grow[] = { "qemu-img", "resize", "-q", "-f", "qcow2", path, size, NULL };
	int newq = a->memory_quota_mib > 0 ? a->memory_quota_mib : MEMORY_QUOTA_DEFAULT;
	int oldq = old_mib > 0 ? old_mib : MEMORY_QUOTA_DEFAULT;
	struct vm *v = vm_find(b, a->name);
	struct virt *virt;
	enum virt_state st;
	int r;

	if (newq == oldq)
		return 0;
	if (newq < oldq) {
		/* qcow2 keeps its snapshots at their size: the disk cannot shrink under them. */
		*why = xasprintf("a VM agent's memory store cannot shrink (its disk is %d MiB, and its snapshots "
				 "keep that size); to make it smaller, export it, recreate the agent and import it",
				 vm_memdisk_mib(oldq));
		return -EBUSY;
	}
	if (v && v->busy) {
		*why = xstrdup("a snapshot, restore or move is under way; try again when it is done");
		return -EBUSY;
	}
	if (!(virt = vm_agent_virt(b, a, why)))
		return -ENOTCONN;
	if ((r = virt_domain_state(virt, dom, &st)) < 0) {
		*why = xasprintf("cannot reach libvirt on host %s (is libvirtd running there?)", a->host ? a->host : HOST_LOCAL);
		return r;
	}
	if (st != VIRT_OFF) {
		*why = xstrdup("its memory disk grows while the agent is stopped: stop the agent first");
		return -EBUSY;
	}
	if (vm_agent_remote(a)) {
		/* Its volume in that host's pool, grown there by libvirt (qemu-img resize on that host). */
		_cleanup_free_ char *vol = vm_remote_agent_vol(a->name, MEMDISK);

		r = virt_vol_grow_qcow2(virt, VM_POOL, vol, (long long)vm_memdisk_mib(newq) * MIB, why);
		if (r == -ENOENT) {	/* made there before agents had one: its store is on its root disk */
			free(*why);
			*why = NULL;
			return 0;
		}
		if (r < 0)
			return r;
		if (v)
			v->memdisk_mib = vm_memdisk_mib(newq);
		log_info("agent '%s': its memory disk on host %s grows to %s (quota %d MiB)", a->name, a->host, size, newq);
		return 0;
	}
	if ((r = vm_memdisk_exists(b, a->name)) <= 0)
		return r;	/* none yet: the next start makes it at the new size */
	/* The file system follows at the next boot: agentd grows it to the disk (agentd/memdisk.c). */
	if ((r = vm_run_tool(grow, "qemu-img resize of the memory disk", why)) < 0)
		return r;
	if (v)
		v->memdisk_mib = vm_memdisk_mib(newq);
	log_info("agent '%s': its memory disk grows to %s (quota %d MiB)", a->name, size, newq);
	return 0;
}
