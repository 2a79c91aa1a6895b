/*
 * snapshots: the backend's snapshot verbs on libvirt's internal qcow2
 * snapshots, the blocking libvirt calls on a worker thread
 * (backend/worker.c), with the checks that keep a full host disk from
 * leaving a half-written checkpoint behind.
 */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "model/fleetd.h"
#include "common/log.h"
#include "common/util.h"
#include "vm/virt.h"
#include "vm/vm_internal.h"

#define DISK_FULL_BYTES (4LL << 20)	/* less free than this where a disk lives: the host disk is full */

/*
 * libvirt's internal qcow2 snapshots: a running guest gets a full checkpoint
 * (RAM and disk), a stopped one a disk snapshot. The blocking libvirt calls
 * run on a worker thread. fleetd's SSH session stays open across a
 * checkpoint (no exec is running on it: checked): the guest carries on
 * after the checkpoint as if nothing happened, so the next exec needs no
 * new session. A revert drops it (the guest goes back in time, in its QEMU
 * or in a new one); the restored guest's
 * relay is then inside the session the checkpoint held, and starts a new
 * sshd connection when fleetd's new banner arrives (agentd/relay.c,
 * docs/vm-backend.md "Reconnecting to a running guest").
 */
struct snap_job {
	struct vm *vm;
	struct virt *virt;
	char *domain, *snap;
	char *disk;			/* the disk's file here; NULL: a volume on the agent's host (remote) */
	char *disk_vol;			/* that volume's name, for its size */
	struct agent *agent;		/* a copy: where its disk lives, for a failed checkpoint's message */
	char *memdisk;			/* non-NULL: make the memory disk first (an agent never started yet) */
	int memdisk_mib;
	bool revert, was_running;
	int run_id;			/* create: the QEMU run it was taken in; revert: that run, if it is the current one */
	bool in_place;			/* a revert loaded in the running QEMU (virt_snapshot_load_in_place) */
	int in_place_r;			/* what virt_snapshot_load_in_place() returned, when it was asked */
	char *not_in_place;		/* and why not */
	long long size_before;
	long long libvirt_usec;		/* how long the libvirt call took, on the worker */
	int r;
	char *why;
	backend_snapshot_fn created;
	backend_done_fn reverted;
	void *userdata;
};

static long long disk_bytes(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 ? (long long)st.st_blocks * 512 : -1;
}

/* The agent's disk's bytes before and after: its file here, or its volume's size there; -1 unknown. */
static long long job_disk_bytes(struct snap_job *j)
{
	_cleanup_free_ char *why = NULL;
	long long size;

	if (j->disk)
		return disk_bytes(j->disk);
	return virt_vol_size(j->virt, VM_POOL, j->disk_vol, &size, &why) == 0 ? size : -1;
}

static void snap_job_work(void *arg)
{
	struct snap_job *j = arg;

	/* Its domain names the memory disk: libvirt would find no file to snapshot. */
	if (j->memdisk && (j->r = vm_memdisk_build(j->memdisk, j->memdisk_mib, &j->why)) < 0)
		return;
	long long t0 = now_usec();

	/*
	 * A running guest's revert loads the checkpoint in its running QEMU
	 * when that is all libvirt's revert would do, and goes through libvirt
	 * (a new QEMU) otherwise, also after a failed loadvm: that replaces
	 * whatever the failure left.
	 */
	if (!j->revert) {
		j->r = virt_snapshot_create(j->virt, j->domain, j->snap, &j->why);
		if (j->r == 0 && j->was_running && virt_domain_run_id(j->virt, j->domain, &j->run_id) < 0)
			j->run_id = 0;
	} else if (j->was_running && j->run_id > 0 &&
		   (j->in_place_r = virt_snapshot_load_in_place(j->virt, j->domain, j->snap, j->run_id,
								&j->not_in_place)) == 0)
		j->in_place = true;
	else if (j->was_running && j->run_id > 0 && j->in_place_r == -ENOENT) {
		j->r = -ENOENT;		/* no such snapshot (or domain): libvirt's revert would say the same */
		j->why = j->not_in_place;
		j->not_in_place = NULL;
	} else
		j->r = virt_snapshot_revert(j->virt, j->domain, j->snap, &j->why);
	j->libvirt_usec = now_usec() - t0;
}

void vm_run_snaps_forget(struct vm *v)
{
	for (size_t i = 0; i < v->n_run_snaps; i++)
		free(v->run_snaps[i]);
	free(v->run_snaps);
	v->run_snaps = NULL;
	v->n_run_snaps = 0;
	v->run_id = 0;
}

static bool run_snaps_has(const struct vm *v, const char *snap)
{
	for (size_t i = 0; i < v->n_run_snaps; i++)
		if (strcmp(v->run_snaps[i], snap) == 0)
			return true;
	return false;
}

static void run_snaps_remove(struct vm *v, const char *snap)
{
	for (size_t i = 0; i < v->n_run_snaps; i++)
		if (strcmp(v->run_snaps[i], snap) == 0) {
			free(v->run_snaps[i]);
			v->run_snaps[i] = v->run_snaps[--v->n_run_snaps];
			return;
		}
}

/* Snapshot snap was taken in QEMU run run_id: a new run forgets the last one's. */
static void run_snaps_add(struct vm *v, int run_id, const char *snap)
{
	if (v->run_id != run_id)
		vm_run_snaps_forget(v);
	v->run_id = run_id;
	if (run_snaps_has(v, snap))
		return;
	v->run_snaps = xrealloc(v->run_snaps, (v->n_run_snaps + 1) * sizeof(*v->run_snaps));
	v->run_snaps[v->n_run_snaps++] = xstrdup(snap);
}

static void snap_job_free(struct snap_job *j)
{
	free(j->domain);
	free(j->snap);
	free(j->disk);
	free(j->disk_vol);
	free(j->memdisk);
	free(j->why);
	free(j->not_in_place);
	agent_free(j->agent);
	free(j);
}

/*
 * Bytes free for QEMU (not root) where the agent's disk lives: the file
 * system of its dir here, or the fleet pool on its other host (through
 * libvirt: a refresh and a query of that pool); -1 if unknown. *where
 * (caller frees) names the place for a message.
 */
static long long disk_free(struct vm_backend *b, const struct agent *a, char **where)
{
	struct statvfs s;
	struct virt *virt;
	long long avail;

	if (vm_agent_remote(a)) {
		*where = xasprintf("pool %s on host %s", VM_POOL, a->host);
		return (virt = vm_agent_virt(b, a, NULL)) && virt_pool_free(virt, VM_POOL, &avail, NULL) == 0 ? avail : -1;
	}
	*where = vm_path(b, a->name, NULL);
	return statvfs(*where, &s) == 0 ? (long long)s.f_bavail * (long long)s.f_frsize : -1;
}

static void snap_created(void *arg)
{
	struct snap_job *j = arg;
	long long after = job_disk_bytes(j), avail;
	_cleanup_free_ char *why = NULL, *where = NULL, *dir = NULL;
	struct snapshot_result res = {
		.error = j->r, .why = j->why, .kind = j->was_running ? SNAPSHOT_KIND_FULL : SNAPSHOT_KIND_DISK,
		.size_bytes = (after >= 0 && j->size_before >= 0 && after >= j->size_before) ? after - j->size_before : -1,
	};

	/*
	 * QEMU reports a checkpoint that ran out of space as a bare I/O error
	 * ("failed to save SaveStateEntry ... -5"), and keeps the part it wrote
	 * allocated in disk.qcow2; say what happened.
	 */
	avail = j->r < 0 && j->agent ? disk_free(j->vm->b, j->agent, &dir) : -1;
	if (j->r < 0 && ((avail >= 0 && avail < DISK_FULL_BYTES) || (j->why && strstr(j->why, "No space left")))) {
		where = avail >= 0 ? xasprintf("%.1f MiB free in %s", (double)avail / (1 << 20), dir)
				   : xasprintf("in %s", dir ? dir : "its disk's place");
		why = xasprintf("the host disk is full (%s)%s; %s", where,
				j->was_running ? "; the guest may pause (I/O error) when it next needs disk space" : "",
				j->why ? j->why : strerror(-j->r));
		res.error = -ENOSPC;
		res.why = why;
	}
	j->vm->busy = false;
	if (j->r == 0 && j->run_id > 0)
		run_snaps_add(j->vm, j->run_id, j->snap);
	log_debug("agent '%s': libvirt's snapshot create took %.3f s", j->vm->name, j->libvirt_usec / 1e6);
	j->created(j->userdata, &res);
	snap_job_free(j);
}

static void snap_reverted_ready(void *userdata, int r, const char *why)
{
	struct snap_job *j = userdata;

	j->vm->stopping = false;
	j->reverted(j->userdata, r, why);
	snap_job_free(j);
}

static void snap_reverted(void *arg)
{
	struct snap_job *j = arg;
	enum virt_state st;

	j->vm->busy = false;
	vm_memdisk_forget(j->vm);	/* the snapshot's memory disk may be smaller (even a failed revert's) */
	if (j->in_place)
		log_debug("agent '%s': checkpoint loaded in its running QEMU in %.3f s", j->vm->name,
			  j->libvirt_usec / 1e6);
	else {
		vm_run_snaps_forget(j->vm);	/* libvirt's revert: a new QEMU process (or none) */
		if (j->not_in_place && j->in_place_r != -EOPNOTSUPP)
			log_warning("agent '%s': loading snapshot '%s' in the running QEMU failed (%s); libvirt's "
				    "revert (a new QEMU) took %.3f s in all", j->vm->name, j->snap, j->not_in_place,
				    j->libvirt_usec / 1e6);
		else
			log_debug("agent '%s': libvirt's revert took %.3f s%s%s%s", j->vm->name,
				  j->libvirt_usec / 1e6, j->not_in_place ? " (not loaded in place: " : "",
				  j->not_in_place ? j->not_in_place : "", j->not_in_place ? ")" : "");
	}
	if (j->r < 0) {
		j->reverted(j->userdata, j->r, j->why);
		snap_job_free(j);
		return;
	}
	/*
	 * A restored checkpoint runs again: answer once its control channel
	 * does, so exec works at once. 'stopping' stays set until then: the
	 * revert's own stop event may still be on its way.
	 */
	if (virt_domain_state(j->virt, j->domain, &st) == 0 && st == VIRT_RUNNING) {
		vm_wait_ready(j->vm, snap_reverted_ready, j);
		return;
	}
	j->reverted(j->userdata, 0, NULL);
	snap_job_free(j);
}

static struct snap_job *snap_job_new(struct vm_backend *b, const struct agent *a, const char *snap, char **why)
{
	struct vm *v = vm_get(b, a->name);
	struct virt *virt = vm_agent_virt(b, a, why);
	struct snap_job *j;
	enum virt_state st;

	if (!virt)
		return NULL;
	if (v->execs > 0 || v->busy) {
		*why = v->busy ? xstrdup("a snapshot, restore or move is already under way")
			       : xasprintf("%d command%s running in it; wait for %s to finish", v->execs,
					   v->execs == 1 ? " is" : "s are", v->execs == 1 ? "it" : "them");
		return NULL;
	}
	j = xcalloc(1, sizeof(*j));
	j->vm = v;
	j->virt = virt;		/* its host's: internal qcow2 snapshots work the same on a volume there */
	j->domain = vm_domain_name(a->name);
	j->snap = xstrdup(snap);
	j->agent = agent_copy(a);
	if (vm_agent_remote(a))
		j->disk_vol = vm_remote_agent_vol(a->name, "disk.qcow2");
	else
		j->disk = vm_path(b, a->name, "disk.qcow2");
	j->was_running = virt_domain_state(virt, j->domain, &st) == 0 && st == VIRT_RUNNING;
	/* An agent on another host has no memory disk (docs/multi-host.md). */
	if (j->disk && !j->was_running && vm_memdisk_exists(b, a->name) == 0) {
		j->memdisk = vm_path(b, a->name, MEMDISK);
		j->memdisk_mib = vm_memdisk_mib(a->memory_quota_mib);
	}
	return j;
}

static int snap_job_start(struct vm_backend *b, struct snap_job *j, char **why)
{
	int r;

	j->vm->busy = true;
	/* A revert ends the session with its QEMU; waiting execs are none (checked). */
	if (j->revert)
		vm_drop_session(j->vm);
	if ((r = vm_worker_run(b, snap_job_work, j->revert ? snap_reverted : snap_created, j)) < 0) {
		j->vm->busy = false;
		*why = xasprintf("cannot start a worker thread: %s", strerror(-r));
		snap_job_free(j);
	}
	return r;
}

int vm_snapshot_create(struct fleetd *f, const struct agent *a, const char *snap,
			      backend_snapshot_fn done, void *userdata, char **why)
{
	struct vm_backend *b = vm_backend_of(f);
	_cleanup_free_ char *dir = NULL;
	struct snap_job *j;
	long long avail, need;

	if (!(j = snap_job_new(b, a, snap, why)))
		return -EBUSY;
	/*
	 * A checkpoint writes the guest's memory into disk.qcow2: up to all of
	 * it (zero pages are skipped), plus device state and qcow2 metadata.
	 * QEMU (7.2) that runs out of space half-way keeps what it wrote
	 * allocated, so the host disk stays full and the guest pauses at its
	 * next write. Refuse unless the worst case fits.
	 */
	need = ((long long)a->memory_mib + a->memory_mib / 16 + 16) << 20;
	if (j->was_running && (avail = disk_free(b, a, &dir)) >= 0 && avail < need) {
		*why = xasprintf("the host disk is nearly full: %.1f MiB free in %s, and a checkpoint of the running "
				 "guest may need up to %lld MiB for its memory; free some space, or stop the agent "
				 "for a disk-only snapshot", (double)avail / (1 << 20), dir, need >> 20);
		snap_job_free(j);
		return -ENOSPC;
	}
	j->created = done;
	j->userdata = userdata;
	j->size_before = job_disk_bytes(j);
	return snap_job_start(b, j, why);
}

int vm_snapshot_restore(struct fleetd *f, const struct agent *a, const char *snap,
			       backend_done_fn done, void *userdata, char **why)
{
	struct vm_backend *b = vm_backend_of(f);
	struct snap_job *j;

	if (!(j = snap_job_new(b, a, snap, why)))
		return -EBUSY;
	j->revert = true;
	j->run_id = run_snaps_has(j->vm, snap) ? j->vm->run_id : 0;
	if (j->was_running && !j->run_id) {
		j->in_place_r = -EOPNOTSUPP;	/* not asked: said in the debug log, not a failure */
		j->not_in_place = xstrdup("not taken in the guest's current QEMU process since fleetd started");
	}
	j->reverted = done;
	j->userdata = userdata;
	/* Reverting is fleet's doing: the guest's stop and start are not a crash. */
	j->vm->stopping = true;
	return snap_job_start(b, j, why);
}

int vm_snapshot_delete(struct fleetd *f, const struct agent *a, const char *snap, char **why)
{
	_cleanup_free_ char *dom = vm_domain_name(a->name);
	struct virt *virt = vm_agent_virt(vm_backend_of(f), a, why);
	_cleanup_free_ char *dir = NULL;
	long long avail;

	if (!virt)
		return -ENOTCONN;
	avail = disk_free(vm_backend_of(f), a, &dir);
	/*
	 * Dropping a snapshot rewrites the snapshot table of disk.qcow2, which
	 * needs a little space. When QEMU or qemu-img fails there, libvirt
	 * (9.0) still removes its record and reports success: the snapshot
	 * would stay in the image, holding its space, known to no one.
	 */
	if (avail >= 0 && avail < DISK_FULL_BYTES) {
		*why = xasprintf("the host disk is full (%.1f MiB free in %s); deleting a snapshot needs a little "
				 "space to rewrite the disk image's snapshot table: free some space first",
				 (double)avail / (1 << 20), dir);
		return -ENOSPC;
	}
	run_snaps_remove(vm_get(vm_backend_of(f), a->name), snap);	/* gone or not: never loaded in place */
	return virt_snapshot_delete(virt, dom, snap, why);
}

int vm_snapshot_exists(struct fleetd *f, const struct agent *a, const char *snap)
{
	_cleanup_free_ char *dom = vm_domain_name(a->name);

	struct virt *virt = vm_agent_virt(vm_backend_of(f), a, NULL);

	return virt ? virt_snapshot_exists(virt, dom, snap) : -ENOTCONN;
}
