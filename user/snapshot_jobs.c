/*
 * user/snapshot_jobs.c: snapshots of a user agent's home. Create and
 * restore copy on a worker (backend/worker.c; user/snapshot.c copies), the
 * agent frozen for the exact pass of a create; the loop finishes each job
 * (a restore swaps the homes there) and reports. While a job of an agent
 * runs, its other verbs are refused (user_job_busy). Removal is a rename
 * into a trash that a worker empties. At shutdown jobs are cancelled,
 * joined and reported; at init what a killed fleetd left is swept.
 *
 * <state_dir>/snapshots            0700 root
 *   NAME/                          0700 root, one per agent
 *     SNAP/                        0700 root, a finished snapshot
 *       home/                      the copy of the home, owners, modes and times kept
 *     .SNAP.tmp/                   a snapshot being made (a leading dot: never a valid snapshot name)
 *   .trash/                        what is being removed in the background
 * <state_dir>/users/NAME.restore   a restored home being built, swapped in whole
 * <state_dir>/users/.trash/        the homes a restore replaced, being removed (the users
 *                                  dir is a mount of its own: no rename leaves it)
 * <state_dir>/memfs/NAME.img.new   its memory store's file system, built beside it (user/memfs.c)
 *
 * The memory store is a file system of its own mounted on home/memory: a
 * snapshot walks into it (mount_child), a restore builds the home without
 * it (empty_child) and a new image from the snapshot's memory/, and the
 * loop swaps both: unmount, homes, images, mount.
 */
#include "user/internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "backend/worker.h"
#include "common/log.h"
#include "common/util.h"
#include "model/agent.h"
#include "model/config.h"
#include "model/fleetd.h"
#include "user/cgroup.h"
#include "user/snapshot.h"

enum snap_job_kind { JOB_CREATE, JOB_RESTORE, JOB_TRASH };

struct snap_job {
	struct snap_job *next;
	enum snap_job_kind kind;
	char *agent, *snap;		/* NULL for JOB_TRASH */
	struct agent *a;		/* restore: to relaunch the keeper */
	uid_t uid;
	const struct cgroup_host *cg;
	bool freeze;
	char *snaps_dir, *users_dir, *trash_dir, *memfs_dir, *netns_dir;	/* copies: the worker reads nothing of fleetd's */
	char *home_trash;		/* users/.trash: a home's trash, on the users mount (a rename cannot leave it) */
	long long memory_quota;		/* restore: the new store's size, bytes */
	struct worker_job *w;		/* until done: cancel, finish at shutdown */
	/* written by the worker, read on the loop once it is done */
	int r;
	char *why;
	struct user_snapshot_stats stats;
	long long size_bytes, frozen_usec, copy_usec;
	bool trashed;
	backend_snapshot_fn snap_done;
	backend_done_fn done;
	void *userdata;
};

static char *snaps_dir(struct fleetd *f)
{
	return xasprintf("%s/snapshots", config_get(&f->cfg, CFG_STATE_DIR));
}

/*
 * Move path out of sight at once: rename it into the trash, which a worker
 * empties. If it cannot be renamed (another file system), rm -rf it here.
 * 0 also when there was nothing. Safe on any thread.
 */
static int trash_path(const char *trash, const char *path, bool *trashed)
{
	static atomic_uint seq;
	_cleanup_free_ char *to = xasprintf("%s/%lld-%ld-%u", trash, now_usec(), (long)getpid(), atomic_fetch_add(&seq, 1));
	const char *const argv[] = { "rm", "-rf", "--one-file-system", "--", path, NULL };
	_cleanup_free_ char *out = NULL;
	struct stat st;

	if (lstat(path, &st) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (rename(path, to) == 0) {
		*trashed = true;
		return 0;
	}
	return account_run_tool(argv, &out) == 0 ? 0 : -EIO;
}

static char *home_trash_dir(const char *users_dir)
{
	return xasprintf("%s/.trash", users_dir);
}

/*
 * trash_path for a path in the users dir (a restore's NAME.restore): its
 * trash is users/.trash (0700 root, made here), since the users dir is a
 * mount of its own (account_users_mount) and a rename into the snapshots'
 * trash would fail EXDEV and become an rm -rf of a whole home on the loop.
 */
static int trash_home(const char *home_trash, const char *path, bool *trashed)
{
	_cleanup_free_ char *why = NULL;

	(void)account_private_dir(home_trash, &why);	/* failing, trash_path removes path itself */
	return trash_path(home_trash, path, trashed);
}

static void job_free(struct snap_job *j)
{
	agent_free(j->a);
	free(j->agent);
	free(j->snap);
	free(j->snaps_dir);
	free(j->users_dir);
	free(j->trash_dir);
	free(j->home_trash);
	free(j->memfs_dir);
	free(j->netns_dir);
	free(j->why);
	free(j);
}

static void trash_worker(void *arg)
{
	struct snap_job *j = arg;
	const char *const trashes[] = { j->trash_dir, j->home_trash };

	for (size_t i = 0; i < ARRAY_SIZE(trashes); i++) {
		DIR *d = opendir(trashes[i]);
		struct dirent *de;

		while (d && (de = readdir(d)) && !atomic_load(worker_cancel_flag())) {
			if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
				continue;
			_cleanup_free_ char *p = xasprintf("%s/%s", trashes[i], de->d_name), *out = NULL;
			const char *const argv[] = { "rm", "-rf", "--one-file-system", "--", p, NULL };
			if (account_run_tool(argv, &out) != 0 && !j->why)
				j->why = xasprintf("cannot remove %s: %s", p, out && *out ? out : "rm failed");
		}
		if (d)
			closedir(d);
	}
}

/* A second before t: files modified after it are never trusted to be unchanged (see user_snapshot.h). */
static struct timespec before(struct timespec t)
{
	t.tv_sec -= 1;
	return t;
}

/* Copy the home into .SNAP.tmp with the agent frozen, then rename it to SNAP. */
static void create_worker(void *arg)
{
	struct snap_job *j = arg;
	_cleanup_free_ char *adir = xasprintf("%s/%s", j->snaps_dir, j->agent), *tmp = xasprintf(".%s.tmp", j->snap);
	_cleanup_free_ char *tmp_path = xasprintf("%s/%s", adir, tmp), *prev = NULL;
	_cleanup_close_ int afd = -1, ufd = -1, tfd = -1, pfd = -1, pre_fd = -1;
	struct user_snapshot_copy c = { .prev_fd = -1, .src_name = j->agent, .dst_name = "home", .cancel = worker_cancel_flag(),
					.mount_child = "memory" };
	struct timespec started, ts[2];
	bool frozen = false;
	long long t0, t_all = now_usec();
	struct stat st;
	DIR *d;
	struct dirent *de;
	int r;

	afd = open(adir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	ufd = open(j->users_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (afd < 0 || ufd < 0) {
		j->r = -errno;
		j->why = xasprintf("cannot open %s: %s", afd < 0 ? adir : j->users_dir, strerror(-j->r));
		goto out;
	}
	/* No other job of this agent runs: every .*.tmp here is a leftover of a fleetd killed mid-way. */
	if ((d = fdopendir(dup(afd)))) {
		while ((de = readdir(d)))
			if (de->d_name[0] == '.' && strlen(de->d_name) > 5 &&
			    strcmp(de->d_name + strlen(de->d_name) - 4, ".tmp") == 0) {
				_cleanup_free_ char *p = xasprintf("%s/%s", adir, de->d_name);
				(void)trash_path(j->trash_dir, p, &j->trashed);
			}
		closedir(d);
	}
	if (mkdirat(afd, tmp, 0700) < 0 || (tfd = openat(afd, tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
		j->r = -errno;
		j->why = xasprintf("cannot create %s: %s", tmp_path, strerror(-j->r));
		goto out;
	}
	if (user_snapshot_newest(afd, &prev) == 0) {
		_cleanup_free_ char *p = xasprintf("%s/home", prev);
		pfd = openat(afd, p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		/* a snapshot's mtime is when its copy began (set below) */
		if (pfd >= 0 && fstatat(afd, prev, &st, AT_SYMLINK_NOFOLLOW) == 0)
			c.prev_before = before(st.st_mtim);
	}
	c.src_dir = ufd;
	c.dst_dir = tfd;
	c.prev_fd = pfd;
	if (j->freeze) {
		/*
		 * Pre-pass while the agent runs: copy what can be copied, tolerating
		 * a tree that changes. The exact pass, frozen, then only walks the
		 * home and links whatever the pre-pass got right, so the agent is
		 * frozen for the changes, not for the whole home.
		 */
		struct user_snapshot_copy pre = c;
		struct user_snapshot_stats pst;
		_cleanup_free_ char *pwhy = NULL;

		clock_gettime(CLOCK_REALTIME, &started);
		pre.dst_name = "pre";
		pre.tolerant = true;
		j->r = user_snapshot_copy(&pre, &pst, &pwhy);
		pre_fd = openat(tfd, "pre", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);	/* also half-made: removed below */
		if (j->r == -ECANCELED) {
			j->why = TAKE_PTR(pwhy);
			goto out;
		}
		if (j->r == 0 && pre_fd >= 0) {
			c.prev_fd = pre_fd;
			c.prev_before = before(started);
		}
		j->r = 0;	/* without a pre-pass, the exact pass copies everything itself */
	}
	t0 = now_usec();
	clock_gettime(CLOCK_REALTIME, &started);
	if (j->freeze) {
		if ((r = cgroup_freeze(j->cg, j->agent, 5000)) < 0) {
			j->r = r;
			j->why = r == -ETIMEDOUT ? xstrdup("cannot freeze the agent's processes within 5 s (one is stuck in the kernel?)")
						 : xasprintf("cannot freeze the agent's processes: %s", strerror(-r));
			goto out;
		}
		frozen = true;
	}
	j->r = user_snapshot_copy(&c, &j->stats, &j->why);
	if (frozen) {
		/* Whatever happened, the agent runs again. */
		for (int i = 0; (r = cgroup_thaw(j->cg, j->agent)) < 0 && i < 100; i++)
			usleep(10000);
		j->frozen_usec = now_usec() - t0;
		if (r < 0 && j->r == 0) {
			j->r = r;
			j->why = xasprintf("cannot thaw the agent's processes: %s", strerror(-r));
		}
	}
	j->copy_usec = now_usec() - t_all;
	if (pre_fd >= 0) {
		/* here, not in the trash: until it is gone, link counts in the snapshot are off by one */
		_cleanup_free_ char *p = xasprintf("%s/pre", tmp_path), *out = NULL;
		const char *const argv[] = { "rm", "-rf", "--one-file-system", "--", p, NULL };
		if (account_run_tool(argv, &out) != 0 && j->r == 0) {
			j->r = -EIO;
			j->why = xasprintf("cannot remove %s: %s", p, out && *out ? out : "rm failed");
		}
	}
	if (j->r < 0)
		goto out;
	/* Durable before it is named: a snapshot that exists is whole, also after a power loss. */
	ts[0] = ts[1] = started;
	if (syncfs(tfd) < 0 || futimens(tfd, ts) < 0 ||
	    renameat2(afd, tmp, afd, j->snap, RENAME_NOREPLACE) < 0) {
		j->r = -errno;
		j->why = xasprintf("cannot complete %s: %s", tmp_path, strerror(-j->r));
		goto out;
	}
	if (fsync(afd) < 0) {
		/* Named, but the name may not last: a failed snapshot must not stay behind under it, unlisted. */
		_cleanup_free_ char *p = xasprintf("%s/%s", adir, j->snap);

		j->r = -errno;
		j->why = xasprintf("cannot complete %s: %s", p, strerror(-j->r));
		(void)trash_path(j->trash_dir, p, &j->trashed);
		goto out;
	}
	/* what the snapshot holds alone: after the pre-pass, the copies it made are counted here */
	if (user_snapshot_usage(tfd, &j->size_bytes) < 0)
		j->size_bytes = -1;
out:
	if (j->r < 0 && tfd >= 0)
		(void)trash_path(j->trash_dir, tmp_path, &j->trashed);
}

/* Build <home>.restore from SNAP/home: new files (never links into the snapshot), owners and modes as they were. */
static void restore_worker(void *arg)
{
	struct snap_job *j = arg;
	_cleanup_free_ char *sdir = xasprintf("%s/%s/%s", j->snaps_dir, j->agent, j->snap);
	_cleanup_free_ char *rname = xasprintf("%s.restore", j->agent);
	_cleanup_free_ char *rpath = xasprintf("%s/%s", j->users_dir, rname);
	_cleanup_close_ int sfd = -1, ufd = -1;
	struct user_snapshot_copy c = {
		.prev_fd = -1, .src_name = "home", .dst_name = rname, .top_root = true, .cancel = worker_cancel_flag(),
		.empty_child = "memory",
	};
	long long t0 = now_usec();

	(void)trash_home(j->home_trash, rpath, &j->trashed);	/* a leftover of a fleetd killed mid-way */
	sfd = open(sdir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	ufd = open(j->users_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (sfd < 0 || ufd < 0) {
		j->r = -errno;
		j->why = xasprintf("cannot open %s: %s", sfd < 0 ? sdir : j->users_dir, strerror(-j->r));
		goto out;
	}
	c.src_dir = sfd;
	c.dst_dir = ufd;
	j->r = user_snapshot_copy(&c, &j->stats, &j->why);
	if (j->r == 0 && syncfs(ufd) < 0) {
		j->r = -errno;
		j->why = xasprintf("cannot sync %s: %s", rpath, strerror(-j->r));
	}
	/* the snapshot's memory/ into a new store (a snapshot without one: an empty store) */
	if (j->r == 0)
		j->r = memfs_build(j->memfs_dir, j->users_dir, j->netns_dir, j->agent, j->uid, j->memory_quota, sfd,
				   faccessat(sfd, "home/memory", F_OK, AT_SYMLINK_NOFOLLOW) == 0 ? "home/memory" : NULL,
				   &j->why);
	j->copy_usec = now_usec() - t0;
	if (j->r < 0)
		(void)trash_home(j->home_trash, rpath, &j->trashed);
out:
}

static void on_job_done(void *arg);

/* Start j's worker; the job is listed in us->jobs (or is the trash job) by the caller. */
static int job_start(struct fleetd *f, struct snap_job *j, void (*fn)(void *), char **why)
{
	int r = worker_start(f->base, fn, on_job_done, j, &j->w);

	if (r < 0 && why)
		*why = xasprintf("cannot start a worker thread: %s", strerror(-r));
	return r;
}

static struct snap_job *job_new(struct fleetd *f, enum snap_job_kind kind, const char *agent, const char *snap)
{
	struct snap_job *j = xcalloc(1, sizeof(*j));

	/*
	 * A job's agent keeps no spare: a create freezes its cgroups, and a spare made
	 * before the job is taken without the leftover-freeze check (keeper.c,
	 * sandbox_launch_command); no exec, so no new spare, while the job runs.
	 */
	if (agent)
		spare_drop(agent);
	j->kind = kind;
	j->agent = agent ? xstrdup(agent) : NULL;
	j->snap = snap ? xstrdup(snap) : NULL;
	j->cg = us->cg;
	j->snaps_dir = snaps_dir(f);
	j->users_dir = account_users_dir(f);
	j->trash_dir = xasprintf("%s/.trash", j->snaps_dir);
	j->home_trash = home_trash_dir(j->users_dir);
	j->memfs_dir = memfs_dir(f);
	j->netns_dir = netns_dir(f);
	return j;
}

/* Empty the trash on a worker; if one is at it already, it goes again when it ends. */
static void trash_kick(void)
{
	struct snap_job *j;

	if (!us || us->stopping)
		return;
	if (us->trash_job) {
		us->trash_again = true;
		return;
	}
	us->trash_again = false;
	j = job_new(us->f, JOB_TRASH, NULL, NULL);
	if (job_start(us->f, j, trash_worker, NULL) < 0) {
		job_free(j);
		return;
	}
	us->trash_job = j;
}

static void job_unlink(struct snap_job *j)
{
	for (struct snap_job **p = &us->jobs; *p; p = &(*p)->next)
		if (*p == j) {
			*p = j->next;
			break;
		}
}

/* The loop half of a restore: stop the agent, swap the homes, restart the keeper. Sets j->r, j->why. */
static void restore_swap(struct snap_job *j)
{
	_cleanup_free_ char *rname = xasprintf("%s.restore", j->agent);
	_cleanup_free_ char *rpath = xasprintf("%s/%s", j->users_dir, rname);
	_cleanup_close_ int ufd = -1;
	_cleanup_free_ char *kwhy = NULL;
	bool was_running;
	int r;

	if (j->r < 0)
		return;	/* the worker removed what it built */
	if (us->stopping) {
		j->r = -ECANCELED;
		j->why = xstrdup("cancelled (fleetd is stopping)");
		(void)trash_home(j->home_trash, rpath, &j->trashed);
		return;
	}
	/* Running also when fleetd restarted since the start: the keeper lives on, not in our list. */
	was_running = user_agent_busy(j->agent, j->uid);
	if (user_exec_active(j->agent)) {
		r = -EBUSY;	/* refused while the job ran; cannot happen */
		j->why = xstrdup("a command is running");
		goto fail;
	}
	if ((r = user_kill_everything(j->agent, j->uid)) < 0) {
		j->why = xasprintf("cannot stop the agent's processes: %s", strerror(-r));
		goto fail;
	}
	if ((r = memfs_umount(us->f, j->agent, &j->why)) < 0)
		goto fail;
	/* Handed to the agent only now that none of its processes is left to write into it early. */
	if ((ufd = open(j->users_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0 ||
	    fchownat(ufd, rname, j->uid, j->uid, AT_SYMLINK_NOFOLLOW) < 0 || fchmodat(ufd, rname, 0700, 0) < 0 ||
	    renameat2(ufd, rname, ufd, j->agent, RENAME_EXCHANGE) < 0) {
		r = -errno;
		j->why = xasprintf("cannot swap in the restored home: %s", strerror(-r));
		goto fail;
	}
	(void)fsync(ufd);
	/* A crash from here on leaves the old image unmounted: fleetd's start mounts what is there again. */
	if ((r = memfs_swap_in(us->f, j->agent, &j->why)) < 0 ||
	    (r = memfs_mount(us->f, j->agent, j->uid, j->memory_quota, &j->why)) < 0) {
		log_warning("agent '%s': restored, but its memory store is not mounted: %s", j->agent, j->why);
		j->r = r;
		(void)trash_home(j->home_trash, rpath, &j->trashed);
		return;
	}
	/* rname is now the old home; in the trash the agent cannot reach it any more. */
	if (trash_home(j->home_trash, rpath, &j->trashed) < 0)
		log_warning("agent '%s': cannot remove the home replaced by the restore (%s)", j->agent, rpath);
	if (was_running && keeper_launch(us->f, j->a, j->uid, &kwhy) < 0)
		log_warning("agent '%s': restored, but cannot start it again: %s", j->agent, kwhy ? kwhy : "");
	return;
fail:
	j->r = r;
	{
		_cleanup_free_ char *mwhy = NULL;	/* the old store back on the old home */
		if (memfs_mount(us->f, j->agent, j->uid, j->memory_quota, &mwhy) < 0)
			log_warning("agent '%s': cannot mount its memory store again: %s", j->agent, mwhy ? mwhy : "?");
	}
	(void)trash_home(j->home_trash, rpath, &j->trashed);
	if (was_running && !keeper_alive(j->agent) && keeper_launch(us->f, j->a, j->uid, &kwhy) < 0)
		log_warning("agent '%s': cannot start it again: %s", j->agent, kwhy ? kwhy : "");
}

/* On the loop, after the worker ended (and was joined): report and free. */
static void job_finish(struct snap_job *j)
{
	bool trashed = j->trashed;

	j->w = NULL;
	if (j->kind == JOB_TRASH) {
		if (j->why)
			log_warning("user backend: %s", j->why);
		us->trash_job = NULL;
		job_free(j);
		if (us->trash_again)
			trash_kick();
		return;
	}
	job_unlink(j);
	if (j->kind == JOB_CREATE) {
		struct snapshot_result res = { .error = j->r, .why = j->why, .kind = SNAPSHOT_KIND_DIR,
					       .size_bytes = j->r == 0 ? j->size_bytes : -1 };
		if (j->r == 0)
			log_debug("agent '%s': snapshot '%s': %lld files (%lld unchanged and linked, %lld reflinked, "
				  "%lld copied), %lld bytes added, frozen %lld ms, copy %lld ms", j->agent, j->snap,
				  j->stats.files, j->stats.shared, j->stats.reflinked, j->stats.copied, j->size_bytes,
				  j->frozen_usec / 1000, j->copy_usec / 1000);
		j->snap_done(j->userdata, &res);
	} else {
		restore_swap(j);
		trashed |= j->trashed;
		if (j->r == 0)
			log_debug("agent '%s': restored '%s': %lld files copied in %lld ms", j->agent, j->snap,
				  j->stats.files, j->copy_usec / 1000);
		j->done(j->userdata, j->r, j->why);
	}
	job_free(j);
	if (trashed)
		trash_kick();
}

static void on_job_done(void *arg)
{
	job_finish(arg);
}

bool user_job_busy(const char *agent, char **why)
{
	for (struct snap_job *j = us ? us->jobs : NULL; j; j = j->next)
		if (strcmp(j->agent, agent) == 0) {
			if (why && !*why)
				*why = xasprintf("a %s of snapshot '%s' is in progress",
						 j->kind == JOB_CREATE ? "creation" : "restore", j->snap);
			return true;
		}
	return false;
}

/* A group left frozen by a fleetd killed during a snapshot: thaw it before the agent is used. */
void user_thaw_leftover(const char *agent)
{
	if (!cgroup_host_can_freeze(us->cg) || user_job_busy(agent, NULL))
		return;
	if (cgroup_frozen(us->cg, agent) == 1)
		log_warning("agent '%s': was left frozen (fleetd stopped during a snapshot?); thawing it", agent);
	(void)cgroup_thaw(us->cg, agent);	/* also a group stuck half-way (FREEZING) */
}

void user_jobs_shutdown(void)
{
	us->stopping = true;
	for (struct snap_job *j = us->jobs; j; j = j->next)
		worker_cancel(j->w);
	if (us->trash_job)
		worker_cancel(us->trash_job->w);
	while (us->jobs)
		worker_finish(us->jobs->w);	/* joins the worker, which thaws and removes what it made; job_finish */
	if (us->trash_job)
		worker_finish(us->trash_job->w);
}

/* Clean what a fleetd killed mid-way left: half-made snapshots and restores. At init, before any job. */
void user_snapshots_sweep(struct fleetd *f)
{
	_cleanup_free_ char *sd = snaps_dir(f), *ud = account_users_dir(f), *trash = xasprintf("%s/.trash", sd);
	_cleanup_free_ char *why = NULL, *htrash = home_trash_dir(ud);
	bool trashed = false;
	DIR *d;
	struct dirent *de;

	if (access(sd, F_OK) < 0)
		return;	/* no snapshot was ever made */
	if (account_private_dir(sd, &why) < 0 || account_private_dir(trash, &why) < 0) {
		log_warning("user backend: %s", why);
		return;
	}
	if ((d = opendir(ud))) {
		while ((de = readdir(d))) {
			size_t n = strlen(de->d_name);
			if (n > 8 && strcmp(de->d_name + n - 8, ".restore") == 0) {
				_cleanup_free_ char *p = xasprintf("%s/%s", ud, de->d_name);
				log_info("user backend: removing %s, an unfinished restore", p);
				(void)trash_home(htrash, p, &trashed);
			}
		}
		closedir(d);
	}
	if ((d = opendir(sd))) {
		while ((de = readdir(d))) {
			if (de->d_name[0] == '.')
				continue;
			_cleanup_free_ char *ad = xasprintf("%s/%s", sd, de->d_name);
			DIR *d2 = opendir(ad);
			struct dirent *e2;

			while (d2 && (e2 = readdir(d2))) {
				size_t n = strlen(e2->d_name);
				if (e2->d_name[0] == '.' && n > 5 && strcmp(e2->d_name + n - 4, ".tmp") == 0) {
					_cleanup_free_ char *p = xasprintf("%s/%s", ad, e2->d_name);
					log_info("user backend: removing %s, an unfinished snapshot", p);
					(void)trash_path(trash, p, &trashed);
				}
			}
			if (d2)
				closedir(d2);
		}
		closedir(d);
	}
	trash_kick();	/* also whatever an earlier fleetd left in the trash */
}

/* Drop every snapshot of agent and a half-made restore of its home (destroy, or a stale name at provision). */
void user_snapshots_forget(struct fleetd *f, const char *agent)
{
	_cleanup_free_ char *sd = snaps_dir(f), *trash = xasprintf("%s/.trash", sd);
	_cleanup_free_ char *ud = account_users_dir(f), *htrash = home_trash_dir(ud);
	_cleanup_free_ char *ad = xasprintf("%s/%s", sd, agent), *rp = xasprintf("%s/%s.restore", ud, agent);
	_cleanup_free_ char *why = NULL;
	bool trashed = false;

	if (access(ad, F_OK) < 0 && access(rp, F_OK) < 0)
		return;
	if (account_private_dir(sd, &why) < 0 || account_private_dir(trash, &why) < 0) {
		log_warning("agent '%s': cannot remove its snapshots: %s", agent, why);
		return;
	}
	if (trash_path(trash, ad, &trashed) < 0 || trash_home(htrash, rp, &trashed) < 0)
		log_warning("agent '%s': cannot remove its snapshots in %s", agent, ad);
	if (trashed)
		trash_kick();
}

/* <state_dir>/snapshots, its trash and NAME/ within it, all 0700 root. */
static int ensure_agent_snaps_dir(struct fleetd *f, const char *agent, char **why)
{
	_cleanup_free_ char *sd = snaps_dir(f), *trash = xasprintf("%s/.trash", sd), *ad = xasprintf("%s/%s", sd, agent);
	int r;

	if ((r = account_private_dir(sd, why)) < 0 || (r = account_private_dir(trash, why)) < 0 ||
	    (r = account_private_dir(ad, why)) < 0)
		return r;
	return 0;
}

static char *snap_path(struct fleetd *f, const char *agent, const char *snap)
{
	return xasprintf("%s/snapshots/%s/%s", config_get(&f->cfg, CFG_STATE_DIR), agent, snap);
}

/* Checks shared by create and restore; the agent's uid in *uid. */
static int snapshot_preflight(struct fleetd *f, const struct agent *a, uid_t *uid, char **why)
{
	int r;

	if ((r = user_ensure_init(f, why)) < 0)
		return r;
	if ((r = user_agent_ready(f, a, uid, why)) < 0)
		return r;
	if (user_exec_active(a->name)) {
		*why = xstrdup("a command is running; snapshots wait until it ends");
		return -EBUSY;
	}
	return ensure_agent_snaps_dir(f, a->name, why);
}

int user_snapshot_create(struct fleetd *f, const struct agent *a, const char *snap,
			 backend_snapshot_fn done, void *userdata, char **why)
{
	_cleanup_free_ char *path = NULL;
	struct snap_job *j;
	struct stat st;
	bool procs;
	uid_t uid;
	int r;

	if ((r = snapshot_preflight(f, a, &uid, why)) < 0)
		return r;
	path = snap_path(f, a->name, snap);
	if (lstat(path, &st) == 0) {
		*why = xasprintf("snapshot '%s' already exists", snap);
		return -EEXIST;
	}
	/* Its processes (the keeper, strays in its cgroup) hold still while the home is copied. */
	procs = keeper_alive(a->name) ||
		(cgroup_host_usable(us->cg) ? cgroup_count(us->cg, a->name) > 0 : user_launch_uid_alive(uid));
	if (procs && !cgroup_host_can_freeze(us->cg)) {
		*why = xstrdup("is running and this host has no cgroup freezer to hold it still; stop it first");
		return -EOPNOTSUPP;
	}
	j = job_new(f, JOB_CREATE, a->name, snap);
	j->uid = uid;
	j->freeze = cgroup_host_can_freeze(us->cg) && cgroup_exists(us->cg, a->name);
	j->snap_done = done;
	j->userdata = userdata;
	if ((r = job_start(f, j, create_worker, why)) < 0) {
		job_free(j);
		return r;
	}
	j->next = us->jobs;
	us->jobs = j;
	return 0;
}

int user_snapshot_restore(struct fleetd *f, const struct agent *a, const char *snap,
			  backend_done_fn done, void *userdata, char **why)
{
	_cleanup_free_ char *path = NULL, *home = NULL;
	struct snap_job *j;
	struct stat st;
	uid_t uid;
	int r;

	if ((r = snapshot_preflight(f, a, &uid, why)) < 0)
		return r;
	path = snap_path(f, a->name, snap);
	home = xasprintf("%s/home", path);
	if (lstat(home, &st) < 0 || !S_ISDIR(st.st_mode)) {
		*why = xasprintf("has no snapshot '%s'", snap);
		return -ENOENT;
	}
	j = job_new(f, JOB_RESTORE, a->name, snap);
	j->uid = uid;
	j->a = agent_copy(a);
	j->memory_quota = memfs_quota(a);
	j->done = done;
	j->userdata = userdata;
	if ((r = job_start(f, j, restore_worker, why)) < 0) {
		job_free(j);
		return r;
	}
	j->next = us->jobs;
	us->jobs = j;
	return 0;
}

int user_snapshot_delete(struct fleetd *f, const struct agent *a, const char *snap, char **why)
{
	_cleanup_free_ char *path = NULL, *tmp = NULL, *trash = NULL;
	bool trashed = false;
	struct stat st;
	int r;

	if ((r = user_ensure_init(f, why)) < 0)
		return r;
	if (user_job_busy(a->name, why))
		return -EBUSY;
	path = snap_path(f, a->name, snap);
	tmp = xasprintf("%s/snapshots/%s/.%s.tmp", config_get(&f->cfg, CFG_STATE_DIR), a->name, snap);
	trash = xasprintf("%s/snapshots/.trash", config_get(&f->cfg, CFG_STATE_DIR));
	if (lstat(path, &st) < 0 && lstat(tmp, &st) < 0) {
		*why = xasprintf("has no snapshot '%s'", snap);
		return -ENOENT;
	}
	if ((r = account_private_dir(trash, why)) < 0)
		return r;
	if ((r = trash_path(trash, path, &trashed)) < 0 || (r = trash_path(trash, tmp, &trashed)) < 0) {
		*why = xasprintf("cannot remove %s", path);
		return r;
	}
	if (trashed)
		trash_kick();
	return 0;
}

int user_snapshot_exists(struct fleetd *f, const struct agent *a, const char *snap)
{
	_cleanup_free_ char *path = snap_path(f, a->name, snap), *home = xasprintf("%s/home", path);
	struct stat st;

	if (lstat(home, &st) == 0)
		return S_ISDIR(st.st_mode) ? 1 : 0;
	return errno == ENOENT || errno == ENOTDIR ? 0 : -errno;
}

