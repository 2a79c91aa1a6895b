/*
 * move: `fleetctl move AGENT HOST`, the offline move of a stopped VM agent
 * to another hypervisor host (#15, docs/multi-host.md "Moving an agent").
 * Through libvirt only: each of its disks (the overlay with its internal
 * snapshots, the seed, the memory disk) is staged in its directory here
 * (a local source: a copy; a remote one: virStorageVolDownload), its
 * overlay's backing path rewritten for the target (`qemu-img rebase -u` on
 * the staged copy, never on a host of libvirt's), then put in place (a
 * local target: renamed; a remote one: virStorageVolUpload into the fleet
 * pool, the image ensured there first). The domain is defined there with
 * the same UUID, and each snapshot's definition redefined there
 * (snapshot_rehome.c). All of that runs on a worker thread; fleetd's loop
 * serves other requests meanwhile, and the agent's struct vm is busy (no
 * start, exec or snapshot).
 *
 * The commit point is fleet's record of the agent's host (core/move.c,
 * after the worker's success); only then is the agent removed from its old
 * host (vm_move_finish). A record in <state_dir>/moves/NAME ("FROM\nTO\n",
 * written and synced before the first byte is copied, removed last) says a
 * move was under way: at fleetd's start, vm_move_recover removes the copy
 * on whichever host the agent is not recorded on (a half-copied target, or
 * the source left by a kill after the commit).
 *
 * A --network nat agent's policy is its host's kind (vm/egress.c): on
 * another host its network filter there, defined before its domain there
 * names it; here its rules in fleetd's firewall, applied at the commit (and
 * again at each start). Whatever of it a copy had goes with that copy
 * (remove_copy), so a failed or undone move leaves the source's intact.
 */
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/firewall.h"
#include "common/log.h"
#include "common/names.h"
#include "common/util.h"
#include "model/fleetd.h"
#include "model/move.h"
#include "vm/images.h"
#include "vm/snapshot_rehome.h"
#include "vm/vm_internal.h"

/* An agent's disks, as files in its directory here and volumes agent-NAME.FILE in a pool there. */
static const struct move_disk {
	const char *file;
	bool backed;		/* a qcow2 overlay on the image's base: its backing path is the host's */
	bool optional;		/* an agent never started has no memory disk yet */
} move_disks[] = {
	{ "disk.qcow2", true, false },
	{ "seed.img", false, false },
	{ MEMDISK, false, true },
};

#define STAGE_SUFFIX ".move"

struct move_job {
	struct vm *vm;
	struct vm_backend *b;
	struct agent *agent;		/* a copy */
	char *from, *to;
	struct virt *src, *dst;
	bool src_remote, dst_remote;
	char *image, *boot_image;
	char uuid[37];
	int r;
	char *why;
	backend_done_fn done;
	void *userdata;
};

static bool host_is_local(const char *host)
{
	return !host || strcmp(host, HOST_LOCAL) == 0;
}

static char *record_path(struct vm_backend *b, const char *agent)
{
	return agent ? xasprintf("%s/moves/%s", b->state_dir, agent) : xasprintf("%s/moves", b->state_dir);
}

/* The record, on disk before anything is copied: "FROM\nTO\n". -errno with *why. */
static int record_write(struct vm_backend *b, const char *agent, const char *from, const char *to, char **why)
{
	_cleanup_free_ char *dir = record_path(b, NULL), *path = record_path(b, agent);
	_cleanup_free_ char *tmp = xasprintf("%s.tmp", path), *text = xasprintf("%s\n%s\n", from, to);
	_cleanup_close_ int fd = -1, dfd = -1;
	int r;

	if ((r = mkdir_p(dir, 0700)) < 0)
		goto fail;
	(void)unlink(tmp);
	if ((fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600)) < 0 ||
	    write_all(fd, text, strlen(text)) < 0 || fsync(fd) < 0 || rename(tmp, path) < 0 ||
	    (dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0 || fsync(dfd) < 0) {
		r = -errno;
		(void)unlink(tmp);
		goto fail;
	}
	return 0;
fail:
	*why = xasprintf("cannot record the move in %s: %s", dir, strerror(-r));
	return r;
}

static void record_remove(struct vm_backend *b, const char *agent)
{
	_cleanup_free_ char *path = record_path(b, agent);

	if (unlink(path) < 0 && errno != ENOENT)
		log_warning("agent '%s': cannot remove %s: %s", agent, path, strerror(errno));
}

/* The record's two host names, checked as names; -errno. */
static int record_read(struct vm_backend *b, const char *agent, char **from, char **to)
{
	_cleanup_free_ char *path = record_path(b, agent);
	_cleanup_close_ int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	char buf[2 * 64 + 8] = { 0 }, *nl;
	const char *reason;
	ssize_t n;

	if (fd < 0)
		return -errno;
	if ((n = read(fd, buf, sizeof(buf) - 1)) <= 0)
		return n < 0 ? -errno : -EINVAL;
	if (!(nl = strchr(buf, '\n')))
		return -EINVAL;
	*nl = '\0';
	buf[strcspn(buf, "\n")] = '\0';
	nl[1 + strcspn(nl + 1, "\n")] = '\0';
	if (agent_name_check(buf, &reason) < 0 || agent_name_check(nl + 1, &reason) < 0)
		return -EINVAL;
	*from = xstrdup(buf);
	*to = xstrdup(nl + 1);
	return 0;
}

/* --- removing one host's copy ----------------------------------------------------------- */

static void vol_delete_quiet(struct virt *v, const char *agent, const char *file)
{
	_cleanup_free_ char *vol = vm_remote_agent_vol(agent, file), *why = NULL;
	int r = virt_vol_delete(v, VM_POOL, vol, &why);

	if (r < 0 && r != -ENOENT)
		log_warning("agent '%s': cannot delete volume %s on %s: %s", agent, vol, virt_uri(v), why ? why : strerror(-r));
}

/*
 * The agent's copy on host (connection v) removed: its domain there
 * (undefined with its snapshots' metadata), and its disks (a remote host's
 * volumes; here its disk and memory disk, the seed and keys staying, as a
 * remote agent has them), and any staged copy; for a NAT agent (nat) its
 * policy there too (a remote host's network filter, or here its rules in
 * fleetd's firewall). 0, or -errno with *why (the domain is there and
 * cannot be removed).
 */
static int remove_copy(struct vm_backend *b, struct virt *v, bool remote, const char *agent, bool nat, char **why)
{
	_cleanup_free_ char *dom = vm_domain_name(agent);
	enum virt_state st;
	int r;

	if ((r = virt_domain_state(v, dom, &st)) == 0) {
		if (st != VIRT_OFF) {
			*why = xasprintf("domain %s on %s is %s; fleet will not remove a copy that runs", dom, virt_uri(v),
					 virt_state_to_string(st));
			return -EBUSY;
		}
		if ((r = virt_domain_undefine(v, dom, why)) < 0 && r != -ENOENT)
			return r;
	} else if (r != -ENOENT) {
		*why = xasprintf("cannot reach %s to remove domain %s there", virt_uri(v), dom);
		return r;
	}
	for (size_t i = 0; i < ARRAY_SIZE(move_disks); i++) {
		_cleanup_free_ char *stage_name = xasprintf("%s" STAGE_SUFFIX, move_disks[i].file);
		_cleanup_free_ char *stage = vm_path(b, agent, stage_name);

		(void)unlink(stage);
		if (remote)
			vol_delete_quiet(v, agent, move_disks[i].file);
		else if (move_disks[i].backed || move_disks[i].optional) {
			_cleanup_free_ char *path = vm_path(b, agent, move_disks[i].file);
			(void)unlink(path);
		}
	}
	if (!remote) {
		static const char *const leftovers[] = { CONSOLE_LOG, "ctl.sock" };

		for (size_t i = 0; i < ARRAY_SIZE(leftovers); i++) {
			_cleanup_free_ char *path = vm_path(b, agent, leftovers[i]);
			(void)unlink(path);
		}
	}
	/* Its domain there is gone: nothing names the filter any more, no tap of its name runs here. */
	if (nat && remote) {
		vm_remote_nat_remove(v, agent);
	} else if (nat) {
		_cleanup_free_ char *fwhy = NULL;

		if (firewall_vm_agent_remove(agent, &fwhy) < 0)
			log_warning("agent '%s': cannot remove its egress rules here: %s", agent, fwhy ? fwhy : "?");
	}
	return 0;
}

/* --- the copy, on a worker --------------------------------------------------------------- */

/* The target's path of the base the overlay sits on; -errno with *why. */
static int target_base(struct move_job *j, char **ret, char **why)
{
	struct stat st;

	if (j->dst_remote)
		return vm_remote_image_path(j->dst, j->image, "base.qcow2", ret, why);
	*ret = image_store_path(j->b->state_dir, j->image, "base.qcow2");
	if (stat(*ret, &st) < 0) {
		int r = -errno;
		*why = xasprintf("its image sha256:%.12s is not in fleetd's image store (%s): %s", j->image, *ret,
				 strerror(-r));
		return r;
	}
	return 0;
}

/* Stage one disk of the source in its directory here; 1 staged, 0 none (optional), -errno with *why. */
static int stage_fetch(struct move_job *j, const struct move_disk *d, const char *stage, char **why)
{
	_cleanup_close_ int fd = -1;
	struct stat st;
	int r;

	(void)unlink(stage);
	if (!j->src_remote) {
		_cleanup_free_ char *path = vm_path(j->b, j->agent->name, d->file);
		const char *const cp[] = { "cp", "--sparse=always", "--reflink=auto", "--", path, stage, NULL };

		if (lstat(path, &st) < 0) {
			r = -errno;
			if (r == -ENOENT && d->optional)
				return 0;
			*why = xasprintf("cannot find its %s here: %s", d->file, strerror(-r));
			return r;
		}
		if (!S_ISREG(st.st_mode)) {
			*why = xasprintf("its %s is not a regular file here", d->file);
			return -EINVAL;
		}
		return (r = vm_run_tool(cp, "copying a disk", why)) < 0 ? r : 1;
	} else {
		_cleanup_free_ char *vol = vm_remote_agent_vol(j->agent->name, d->file);
		long long size;

		if ((r = virt_vol_size(j->src, VM_POOL, vol, &size, why)) == -ENOENT && d->optional) {
			free(*why);
			*why = NULL;
			return 0;
		}
		if (r < 0)
			return r;
		if ((fd = open(stage, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600)) < 0) {
			r = -errno;
			*why = xasprintf("cannot create %s: %s", stage, strerror(-r));
			return r;
		}
		if ((r = virt_vol_download(j->src, VM_POOL, vol, fd, why)) < 0)
			return r;
		return 1;
	}
}

/* Put one staged disk where the target's domain will name it. -errno with *why. */
static int stage_deliver(struct move_job *j, const struct move_disk *d, const char *stage, char **why)
{
	_cleanup_close_ int fd = open(stage, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;
	int r;

	if (fd < 0 || fstat(fd, &st) < 0) {
		r = -errno;
		*why = xasprintf("cannot open %s: %s", stage, strerror(-r));
		return r;
	}
	if (j->dst_remote) {
		_cleanup_free_ char *vol = vm_remote_agent_vol(j->agent->name, d->file);

		vol_delete_quiet(j->dst, j->agent->name, d->file);	/* a leftover of a move that failed */
		if ((r = virt_vol_upload(j->dst, VM_POOL, vol, fd, (long long)st.st_size, NULL, NULL, why)) < 0)
			return r;
		(void)unlink(stage);
		return 0;
	} else {
		_cleanup_free_ char *path = vm_path(j->b, j->agent->name, d->file);

		/* On disk before fleet records the agent here. */
		if (fchmod(fd, 0600) < 0 || fsync(fd) < 0 || rename(stage, path) < 0) {
			r = -errno;
			*why = xasprintf("cannot put %s in place: %s", path, strerror(-r));
			return r;
		}
		return 0;
	}
}

/* Its disks to the target, each through a staged copy here. -errno with *why. */
static int copy_disks(struct move_job *j, char **why)
{
	_cleanup_free_ char *base = NULL;
	int r;

	if (j->dst_remote) {
		/* The image once per host, as at create; the boot image too if an upgrade made it another. */
		if ((r = vm_remote_image(j->b, j->dst, j->image, why)) < 0 ||
		    (strcmp(j->boot_image, j->image) != 0 && (r = vm_remote_image(j->b, j->dst, j->boot_image, why)) < 0))
			return r;
	}
	if ((r = target_base(j, &base, why)) < 0)
		return r;
	for (size_t i = 0; i < ARRAY_SIZE(move_disks); i++) {
		const struct move_disk *d = &move_disks[i];
		_cleanup_free_ char *stage_name = xasprintf("%s" STAGE_SUFFIX, d->file);
		_cleanup_free_ char *stage = vm_path(j->b, j->agent->name, stage_name);
		const char *const rebase[] = { "qemu-img", "rebase", "-u", "-f", "qcow2", "-F", "qcow2", "-b", base, stage, NULL };

		if ((r = stage_fetch(j, d, stage, why)) < 0)
			goto fail;
		if (r == 0)
			continue;
		/* The header names the base by path: the target's, written here, before it travels. */
		if (d->backed && (r = vm_run_tool(rebase, "qemu-img rebase of the moved disk", why)) < 0)
			goto fail;
		if ((r = stage_deliver(j, d, stage, why)) < 0)
			goto fail;
		continue;
fail:
		(void)unlink(stage);
		return r;
	}
	return 0;
}

/* The domain definition for the target (same name and UUID), its disks there. */
static int target_xml(struct move_job *j, char **ret, char **why)
{
	struct agent_images im = { .image = j->image, .boot_image = j->boot_image };

	if (!j->dst_remote) {
		/* Here an agent's memory disk is made at its next start if it has none yet. */
		*ret = vm_domain_xml(j->b, j->agent, &im, j->uuid);
		return 0;
	}
	return vm_remote_domain_xml(j->b, j->dst, j->agent, j->image, j->boot_image, j->uuid, ret, why);
}

/* Each snapshot's definition, parents first, given to the target's domain with its disks there. */
static int copy_snapshots(struct move_job *j, const char *dom, char **why)
{
	_cleanup_free_ char *dom_xml = NULL;
	char **names = NULL;
	int r;

	if ((r = virt_snapshot_names(j->src, dom, &names, why)) < 0)
		return r;
	if (names[0] && (r = virt_domain_xml(j->dst, dom, &dom_xml)) < 0)
		*why = xasprintf("cannot read domain %s back from %s", dom, virt_uri(j->dst));
	for (size_t i = 0; r == 0 && names[i]; i++) {
		_cleanup_free_ char *xml = NULL, *moved = NULL;

		if ((r = virt_snapshot_xml(j->src, dom, names[i], &xml, why)) < 0 ||
		    (r = vm_snapshot_rehome(xml, dom_xml, &moved, why)) < 0 ||
		    (r = virt_snapshot_redefine(j->dst, dom, moved, why)) < 0) {
			char *inner = *why;
			*why = xasprintf("snapshot %s: %s", names[i], inner ? inner : strerror(-r));
			free(inner);
		}
	}
	for (size_t i = 0; names[i]; i++)
		free(names[i]);
	free(names);
	return r;
}

static void move_work(void *arg)
{
	struct move_job *j = arg;
	_cleanup_free_ char *dom = vm_domain_name(j->agent->name), *xml = NULL, *cwhy = NULL;
	long long t0 = now_usec();

	if ((j->r = copy_disks(j, &j->why)) < 0 ||
	    /* A NAT guest's network and filter there before its domain names them (as at create). */
	    (j->dst_remote && j->agent->network == NETWORK_NAT &&
	     (j->r = vm_remote_nat_apply(j->dst, j->agent->name, j->agent->egress_allow, &j->why)) < 0) ||
	    (j->r = target_xml(j, &xml, &j->why)) < 0 ||
	    (j->r = virt_domain_define(j->dst, xml, &j->why)) < 0 ||
	    (j->r = copy_snapshots(j, dom, &j->why)) < 0) {
		/* The source was only read: the agent is whole there. What reached the target goes. */
		if (remove_copy(j->b, j->dst, j->dst_remote, j->agent->name, j->agent->network == NETWORK_NAT, &cwhy) < 0)
			log_warning("agent '%s': after a failed move, its copy on %s stays: %s (removed at fleetd's "
				    "next start)", j->agent->name, j->to, cwhy ? cwhy : "?");
		else
			record_remove(j->b, j->agent->name);
		return;
	}
	log_info("agent '%s': copied to host %s in %.1f s", j->agent->name, j->to, (now_usec() - t0) / 1e6);
}

static void move_job_free(struct move_job *j)
{
	agent_free(j->agent);
	free(j->from);
	free(j->to);
	free(j->image);
	free(j->boot_image);
	free(j->why);
	free(j);
}

static void move_done(void *arg)
{
	struct move_job *j = arg;

	j->vm->busy = false;
	if (j->r < 0)
		log_warning("agent '%s': move to host %s failed; it stays on %s: %s", j->agent->name, j->to, j->from,
			    j->why ? j->why : strerror(-j->r));
	j->done(j->userdata, j->r, j->why);
	move_job_free(j);
}

/* --- the ops --------------------------------------------------------------------------- */

int vm_move(struct fleetd *f, const struct agent *a, const char *host, backend_done_fn done, void *userdata, char **why)
{
	struct vm_backend *b = vm_backend_of(f);
	_cleanup_free_ char *dom = vm_domain_name(a->name);
	_cleanup_free_ char *old_from = NULL, *old_to = NULL;
	_cleanup_images_ struct agent_images im = { 0 };
	struct virt *src = NULL, *dst = NULL;
	struct move_job *j;
	enum virt_state st;
	struct vm *v;
	int r;

	if (!b)
		return *why = xstrdup("the vm backend is not running"), -EOPNOTSUPP;
	/* What an earlier move that was cut short left there goes first (its record says where). */
	if (record_read(b, a->name, &old_from, &old_to) == 0) {
		(void)vm_move_recover_one(b, a->name);
		free(old_from);
		free(old_to);
		old_from = old_to = NULL;
		if (record_read(b, a->name, &old_from, &old_to) == 0) {
			*why = xasprintf("an earlier move of it to %s left a copy that cannot be removed yet (see fleetd's log)",
					 old_to);
			return -EBUSY;
		}
	}
	if ((r = vm_host_virt(b, a->host, &src, why)) < 0 || (r = vm_host_virt(b, host, &dst, why)) < 0)
		return r;
	if ((r = virt_connect(src, why)) < 0 || (r = virt_connect(dst, why)) < 0) {
		char *inner = *why;
		*why = xasprintf("cannot reach libvirt on %s: %s", r == 0 ? host : a->host, inner ? inner : "");
		free(inner);
		return -EHOSTDOWN;
	}
	v = vm_get(b, a->name);
	if (v->busy || v->execs > 0) {
		*why = xstrdup(v->busy ? "a snapshot, restore or move is under way" : "a command is running in it");
		return -EBUSY;
	}
	if ((r = virt_domain_state(src, dom, &st)) < 0) {
		*why = r == -ENOENT ? xasprintf("its domain %s is gone from %s", dom, a->host)
				    : xasprintf("cannot read its domain's state on %s", a->host);
		return r;
	}
	if (st != VIRT_OFF) {
		*why = xasprintf("its domain is %s; stop it first (or move --stop)", virt_state_to_string(st));
		return -EBUSY;
	}
	if (virt_domain_state(dst, dom, &st) == 0) {
		*why = xasprintf("a libvirt domain named %s already exists on host %s; fleet will not take it over", dom, host);
		return -EEXIST;
	}
	if ((r = vm_load_images(b, a->name, &im)) < 0 || !im.image) {
		*why = xstrdup("its image is not recorded (an agent from before the image store): start it once first");
		return r < 0 ? r : -EINVAL;
	}
	j = xcalloc(1, sizeof(*j));
	if ((r = virt_domain_uuid(src, dom, j->uuid)) < 0) {
		*why = xasprintf("cannot read the UUID of %s", dom);
		free(j);
		return r;
	}
	if ((r = record_write(b, a->name, a->host ? a->host : HOST_LOCAL, host, why)) < 0) {
		free(j);
		return r;
	}
	j->vm = v;
	j->b = b;
	j->agent = agent_copy(a);
	j->from = xstrdup(a->host ? a->host : HOST_LOCAL);
	j->to = xstrdup(host);
	j->src = src;
	j->dst = dst;
	j->src_remote = !host_is_local(j->from);
	j->dst_remote = !host_is_local(host);
	j->image = xstrdup(im.image);
	j->boot_image = xstrdup(im.boot_image ? im.boot_image : im.image);
	j->done = done;
	j->userdata = userdata;
	/* busy: no start, exec, snapshot or remove while it is copied. */
	v->busy = true;
	vm_drop_session(v);
	if ((r = vm_worker_run(b, move_work, move_done, j)) < 0) {
		v->busy = false;
		record_remove(b, a->name);
		*why = xasprintf("cannot start a worker thread: %s", strerror(-r));
		move_job_free(j);
		return r;
	}
	log_info("agent '%s': moving from host %s to %s", a->name, j->from, host);
	return 0;
}

int vm_move_finish(struct fleetd *f, const struct agent *a, const char *from, char **why)
{
	struct vm_backend *b = vm_backend_of(f);
	struct virt *src = NULL;
	struct vm *v;
	int r;

	if (!b)
		return *why = xstrdup("the vm backend is not running"), -EOPNOTSUPP;
	/* The next start finds the agent's new host: no session or connection of the old one is kept. */
	if ((v = vm_find(b, a->name)) && !v->busy)
		vm_free(v);
	/*
	 * A NAT agent now here: its rules in fleetd's firewall at once, as its
	 * start would make them (a failure is said and its start tries again).
	 */
	if (a->network == NETWORK_NAT && !vm_agent_remote(a) && strcmp(from, HOST_LOCAL) != 0) {
		_cleanup_free_ char *ewhy = NULL;

		if (vm_egress_apply(b, a, &ewhy) < 0)
			log_warning("agent '%s': cannot apply its egress rules here yet (its start will): %s", a->name,
				    ewhy ? ewhy : "?");
	}
	if ((r = vm_host_virt(b, from, &src, why)) < 0 ||
	    (r = remove_copy(b, src, !host_is_local(from), a->name, a->network == NETWORK_NAT, why)) < 0) {
		log_warning("agent '%s': its old copy on host %s stays for now (removed at fleetd's next start): %s",
			    a->name, from, *why ? *why : strerror(-r));
		return r;
	}
	record_remove(b, a->name);
	log_info("agent '%s': its copy on host %s removed (it is on %s)", a->name, from, a->host ? a->host : HOST_LOCAL);
	return 0;
}

/* --- after a kill ---------------------------------------------------------------------- */

int vm_move_recover_one(struct vm_backend *b, const char *agent)
{
	_cleanup_free_ char *from = NULL, *to = NULL, *why = NULL, *host = NULL;
	struct agent **list = NULL;
	struct virt *v = NULL;
	const char *stale;
	bool nat = false;
	int r;

	if ((r = record_read(b, agent, &from, &to)) < 0) {
		if (r != -ENOENT) {
			log_warning("agent '%s': its move record is unreadable (%s); removed", agent, strerror(-r));
			record_remove(b, agent);
		}
		return r == -ENOENT ? 0 : r;
	}
	if ((r = b->host->list_agents(b->f, BACKEND_VM, &list)) < 0)
		return r;
	for (size_t i = 0; list[i]; i++)
		if (strcmp(list[i]->name, agent) == 0) {
			host = xstrdup(list[i]->host ? list[i]->host : HOST_LOCAL);
			nat = list[i]->network == NETWORK_NAT;
		}
	agent_list_free(list);
	if (!host) {
		/* Removed since: its copies went with fleetctl rm, on the host it was recorded on. */
		log_warning("agent '%s': a move record for an agent fleet no longer has; removed", agent);
		record_remove(b, agent);
		return 0;
	}
	/* Fleet's record is the truth: the copy on the other host is the stale one. */
	stale = move_stale_host(from, to, host);
	if (!stale) {
		log_warning("agent '%s': its move record (%s to %s) names neither its host %s; removed", agent, from, to,
			    host);
		record_remove(b, agent);
		return 0;
	}
	if ((r = vm_host_virt(b, stale, &v, &why)) < 0 || (r = virt_connect(v, &why)) < 0 ||
	    (r = remove_copy(b, v, !host_is_local(stale), agent, nat, &why)) < 0) {
		log_warning("agent '%s': a move from %s to %s was cut short; its copy on %s cannot be removed yet: %s",
			    agent, from, to, stale, why ? why : strerror(-r));
		return r;
	}
	record_remove(b, agent);
	log_notice("agent '%s': a move from %s to %s was cut short; it is on %s, its copy on %s removed", agent, from,
		   to, host, stale);
	return 0;
}

int vm_host_busy(struct fleetd *f, const char *host, char **why)
{
	struct vm_backend *b = vm_backend_of(f);
	_cleanup_free_ char *dir = NULL;
	const char *reason;
	struct dirent *e;
	int r = 0;
	DIR *d;

	if (!b || !(d = opendir(dir = record_path(b, NULL))))
		return 0;
	while (r == 0 && (e = readdir(d))) {
		_cleanup_free_ char *from = NULL, *to = NULL;

		if (e->d_name[0] == '.' || agent_name_check(e->d_name, &reason) < 0 ||
		    record_read(b, e->d_name, &from, &to) < 0 || strcmp(to, host) != 0)
			continue;
		*why = xasprintf("a move of agent '%s' to host '%s' is under way; remove the host when it is done",
				 e->d_name, host);
		r = -EBUSY;
	}
	closedir(d);
	return r;
}

void vm_move_recover(struct vm_backend *b)
{
	_cleanup_free_ char *dir = record_path(b, NULL);
	DIR *d = opendir(dir);
	struct dirent *e;
	const char *reason;

	if (!d)
		return;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		if (agent_name_check(e->d_name, &reason) < 0) {
			(void)unlinkat(dirfd(d), e->d_name, 0);	/* record_write's temp file */
			continue;
		}
		(void)vm_move_recover_one(b, e->d_name);
	}
	closedir(d);
}
