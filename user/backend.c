/*
 * backend_user: each agent is a system user fleet-NAME with uid == gid from
 * user_uid_min..user_uid_max, a 0700 home <state_dir>/users/NAME holding
 * memory/ and work/, and a cgroup with its limits. Every process of an
 * agent starts through user_launch; this file owns the users, homes and
 * cgroups, the long-lived "keeper" sandbox that makes an agent 'running',
 * and the asynchronous execs on fleetd's event loop, and its snapshots:
 * copies of the home under <state_dir>/snapshots/NAME, made and restored
 * on worker threads (user_snapshot.c copies) that report through a pipe.
 *
 * It must never touch a user, group or directory it did not create: a
 * fleet-NAME that is not in the uid range or whose home is elsewhere is
 * someone else's and is left alone.
 */
#include "user/backend.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <dirent.h>
#include <ftw.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

#include "user/cgroup.h"
#include "model/config.h"
#include "model/fleetd.h"
#include "common/log.h"
#include "user/launch.h"
#include "user/snapshot.h"
#include "common/util.h"

#define USER_PREFIX "fleet-"

/* The long-lived sandbox of a started agent. */
struct keeper {
	char *agent;
	pid_t pid;
	int pidfd;
	bool asked;		/* fleet told it to stop: its exit is no failure */
	struct event *ev;
	struct keeper *next;
};

struct exec_handle {
	struct exec_handle *next;
	char *agent;
	struct exec_callbacks cb;
	struct user_launch_proc proc;
	int out_fd, err_fd, in_fd;
	struct event *ev_out, *ev_err, *ev_in, *ev_report, *ev_pid, *ev_timer, *ev_done;
	char *stdin_data;
	size_t stdin_len, stdin_off;
	char report_buf[sizeof(struct user_launch_report)];
	size_t report_len;
	struct user_launch_report report;	/* the last FAILED or EXITED record */
	bool have_report, reaped, timed_out, killed;
	bool paused;		/* the reader is slow: out and err are not read (ev_out, ev_err not added) */
	int init_status;
};

/*
 * A start or stop in progress: done() is always called from the loop,
 * never from inside start() or stop(). A stop polls every 20 ms until the
 * agent's processes are gone or its clean period is over, then forces.
 */
struct pending_op {
	struct pending_op *next;
	char *agent;
	uid_t uid;
	bool is_stop;
	long long deadline;	/* stop: end of the clean period (usec, monotonic) */
	backend_done_fn done;
	void *userdata;
	int r;
	char *why;
	struct event *ev;
};

struct snap_job;

static struct user_state {
	struct fleetd *f;
	struct cgroup_host *cg;
	struct keeper *keepers;
	struct exec_handle *execs;
	struct pending_op *ops;
	struct snap_job *jobs;		/* snapshot creates and restores in flight, at most one per agent */
	struct snap_job *trash_job;	/* the worker emptying the trash, if one runs */
	bool trash_again;		/* more was trashed while it ran */
	bool stopping;
	backend_event_fn on_event;	/* lifecycle_on_event: a keeper that died unasked */
	char **shared_dirs;		/* other world-writable host directories, private in each sandbox */
	size_t n_shared_dirs;
} *us;

static void exec_watch_output(struct exec_handle *h);

static bool job_busy(const char *agent, char **why);
static void thaw_leftover(const char *agent);
static void snapshots_sweep(struct fleetd *f);
static void snapshots_forget(struct fleetd *f, const char *agent);
static void jobs_shutdown(void);

static const char *const tool_path_dirs[] = { "/usr/sbin", "/sbin", "/usr/bin", "/bin" };

/* ---- small helpers ---- */

static char *user_name(const char *agent)
{
	return xasprintf(USER_PREFIX "%s", agent);
}

static char *users_dir(struct fleetd *f)
{
	return xasprintf("%s/users", config_get(&f->cfg, CFG_STATE_DIR));
}

static char *home_dir(struct fleetd *f, const char *agent)
{
	return xasprintf("%s/users/%s", config_get(&f->cfg, CFG_STATE_DIR), agent);
}

static char *find_tool(const char *name)
{
	for (size_t i = 0; i < ARRAY_SIZE(tool_path_dirs); i++) {
		char *p = xasprintf("%s/%s", tool_path_dirs[i], name);
		if (access(p, X_OK) == 0)
			return p;
		free(p);
	}
	return NULL;
}

/*
 * Run a host tool (useradd, rm, ...) with a fixed environment; returns its
 * exit status (or 128+signal), with what it printed in *out. Short and
 * synchronous, as backend.h allows for provision and destroy.
 */
static int run_tool(const char *const *argv, char **out)
{
	static const char *const env[] = { "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", NULL };
	_cleanup_free_ char *path = argv[0][0] == '/' ? xstrdup(argv[0]) : find_tool(argv[0]);
	int p[2], pidfd = -1, status = 0, r;
	char buf[4096];
	size_t len = 0;
	pid_t pid;

	*out = NULL;
	if (!path)
		return -ENOENT;
	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	pid = user_launch_fork(&pidfd);
	if (pid < 0) {
		r = -errno;
		close(p[0]);
		close(p[1]);
		return r;
	}
	if (pid == 0) {
		int devnull = open("/dev/null", O_RDONLY);
		if (devnull < 0 || dup2(devnull, 0) < 0 || dup2(p[1], 1) < 0 || dup2(p[1], 2) < 0)
			_exit(126);
		syscall(SYS_close_range, 3U, ~0U, 0);
		execve(path, (char *const *)argv, (char *const *)env);
		_exit(127);
	}
	close(p[1]);
	for (;;) {
		ssize_t n = read(p[0], buf + len, sizeof(buf) - 1 - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
		if (len == sizeof(buf) - 1)
			len = 0;	/* keep the tail; only the last words matter */
	}
	close(p[0]);
	buf[len] = '\0';
	while (len > 0 && buf[len - 1] == '\n')
		buf[--len] = '\0';
	r = user_launch_wait(pidfd, false, &status);
	close(pidfd);
	if (r < 0)
		return r;
	*out = xstrdup(buf);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* Run a tool and fold a failure into *why; 0 or the (positive) exit status. */
static int tool(char **why, const char *const *argv)
{
	_cleanup_free_ char *out = NULL;
	int r = run_tool(argv, &out);

	if (r < 0) {
		if (why && !*why)
			*why = xasprintf("cannot run %s: %s", argv[0], strerror(-r));
		return 126;
	}
	if (r != 0) {
		log_debug("user: %s exited %d: %s", argv[0], r, out ? out : "");
		if (why && !*why)
			*why = xasprintf("%s failed (exit %d): %s", argv[0], r, out && *out ? out : "no message");
	}
	return r;
}

/*
 * The passwd entry of an agent's user, if it is fleet's: in the uid range,
 * gid == uid, home where fleet puts it. -ENOENT when there is no such user,
 * -EPERM when the name belongs to someone else.
 */
static int agent_user(struct fleetd *f, const char *agent, uid_t *uid)
{
	_cleanup_free_ char *name = user_name(agent), *home = home_dir(f, agent);
	long min = config_get_long(&f->cfg, CFG_USER_UID_MIN), max = config_get_long(&f->cfg, CFG_USER_UID_MAX);
	struct passwd *pw;

	errno = 0;
	if (!(pw = getpwnam(name)))
		return errno && errno != ENOENT && errno != ESRCH ? -errno : -ENOENT;
	if ((long)pw->pw_uid < min || (long)pw->pw_uid > max || pw->pw_gid != pw->pw_uid || strcmp(pw->pw_dir, home) != 0)
		return -EPERM;
	*uid = pw->pw_uid;
	return 0;
}

static int cmp_id(const void *a, const void *b)
{
	long x = *(const long *)a, y = *(const long *)b;

	return (x > y) - (x < y);
}

struct id_set {
	long *v;
	size_t n, cap;
};

static void id_add(struct id_set *s, long id, long min, long max)
{
	if (id < min || id > max)
		return;
	if (s->n == s->cap)
		s->v = xrealloc(s->v, (s->cap = s->cap ? 2 * s->cap : 64) * sizeof(*s->v));
	s->v[s->n++] = id;
}

/* The first id in [min, max] that is neither a uid nor a gid; -ENOSPC. min may lie above max. */
static int pick_id(long min, long max, long *ret)
{
	struct id_set used = { 0 };
	struct passwd *pw;
	struct group *gr;
	long want = min;

	setpwent();
	while ((pw = getpwent()))
		id_add(&used, (long)pw->pw_uid, min, max);
	endpwent();
	setgrent();
	while ((gr = getgrent()))
		id_add(&used, (long)gr->gr_gid, min, max);
	endgrent();
	if (used.n)
		qsort(used.v, used.n, sizeof(*used.v), cmp_id);
	for (size_t i = 0; i < used.n && used.v[i] <= want; i++)
		if (used.v[i] == want)
			want++;
	free(used.v);
	if (want > max)
		return -ENOSPC;
	*ret = want;
	return 0;
}

/*
 * The uid high-water mark: <state_dir>/user-uid-next holds the lowest uid
 * this fleetd may still hand out. Uids are never reused: a new agent must
 * not inherit what a removed one left anywhere on the host under its uid
 * (files in shared places, a stray process). It is raised, durably, before
 * useradd runs. Missing: nothing handed out yet (or a state dir from before
 * the mark existed).
 */
static char *uid_mark_path(struct fleetd *f)
{
	return xasprintf("%s/user-uid-next", config_get(&f->cfg, CFG_STATE_DIR));
}

/* The mark in *ret (0 if there is none yet); -errno with *why if it cannot be read or makes no sense. */
static int uid_mark_read(struct fleetd *f, long *ret, char **why)
{
	_cleanup_free_ char *path = uid_mark_path(f);
	_cleanup_close_ int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	char buf[32], *end;
	struct stat st;
	ssize_t n;
	long v;

	*ret = 0;
	if (fd < 0 && errno == ENOENT)
		return 0;
	if (fd < 0 || fstat(fd, &st) < 0 || (n = read(fd, buf, sizeof(buf) - 1)) < 0) {
		int r = -errno;
		*why = xasprintf("cannot read %s: %s", path, strerror(-r));
		return r;
	}
	buf[n] = '\0';
	errno = 0;
	v = strtol(buf, &end, 10);
	if (!S_ISREG(st.st_mode) || st.st_uid != 0 || errno || end == buf || (*end && *end != '\n') || v < 0) {
		*why = xasprintf("%s is not root's file holding a uid; fix or remove it", path);
		return -EINVAL;
	}
	*ret = v;
	return 0;
}

/* Set the mark to next: written aside, synced, renamed over, directory synced. */
static int uid_mark_write(struct fleetd *f, long next, char **why)
{
	_cleanup_free_ char *path = uid_mark_path(f), *tmp = xasprintf("%s.tmp", path), *text = xasprintf("%ld\n", next);
	_cleanup_free_ char *dir = xstrdup(config_get(&f->cfg, CFG_STATE_DIR));
	_cleanup_close_ int dfd = -1;
	int fd, r = 0;

	(void)unlink(tmp);
	if ((fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600)) < 0)
		r = -errno;
	else {
		if (write_all(fd, text, strlen(text)) < 0 || fsync(fd) < 0)
			r = -errno;
		if (close(fd) < 0 && r == 0)
			r = -errno;
	}
	if (r == 0 && rename(tmp, path) < 0)
		r = -errno;
	if (r == 0 && ((dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0 || fsync(dfd) < 0))
		r = -errno;
	if (r < 0) {
		(void)unlink(tmp);
		*why = xasprintf("cannot record the next free uid in %s: %s", path, strerror(-r));
	}
	return r;
}

/* ---- keepers ---- */

static struct keeper **keeper_find(const char *agent)
{
	struct keeper **k = &us->keepers;

	while (*k && strcmp((*k)->agent, agent) != 0)
		k = &(*k)->next;
	return k;
}

static void keeper_free(struct keeper *k)
{
	if (k->ev)
		event_free(k->ev);
	if (k->pidfd >= 0)
		close(k->pidfd);
	free(k->agent);
	free(k);
}

/* Reap the keeper of agent if it has exited; true while it is alive. */
static bool keeper_alive(const char *agent)
{
	struct keeper **kp = keeper_find(agent), *k = *kp;
	int status;

	if (!k)
		return false;
	if (user_launch_wait(k->pidfd, true, &status) == -EAGAIN)
		return true;
	*kp = k->next;
	keeper_free(k);
	return false;
}

/*
 * A keeper's pidfd became readable: it exited. Unless fleet stopped it
 * (stop, remove and restore reap theirs before this runs), report the stop
 * upward, so the restart policy acts for user agents as for VMs.
 */
static void on_keeper_exit(evutil_socket_t fd, short what, void *arg)
{
	struct keeper *k = arg, **kp = keeper_find(k->agent);
	_cleanup_free_ char *agent = xstrdup(k->agent);
	bool asked = k->asked || us->stopping;
	int status = 0;

	(void)fd;
	(void)what;
	if (*kp != k || user_launch_wait(k->pidfd, true, &status) == -EAGAIN)
		return;
	*kp = k->next;
	keeper_free(k);
	log_debug("agent '%s': keeper exited", agent);
	if (!asked && us->on_event) {
		_cleanup_free_ char *detail = WIFSIGNALED(status) ? xasprintf("its sandbox was killed by signal %d",
									      WTERMSIG(status))
								  : xasprintf("its sandbox exited with status %d",
									      WEXITSTATUS(status));
		struct backend_event ev = { .kind = BACKEND_EV_STOPPED, .backend = BACKEND_USER, .agent = agent,
					    .clean = false, .detail = detail };
		us->on_event(us->f, &ev);
	}
}

static bool exec_active(const char *agent)
{
	for (struct exec_handle *h = us->execs; h; h = h->next)
		if (!h->reaped && strcmp(h->agent, agent) == 0)
			return true;
	return false;
}

/* Does any process of the agent live? */
static bool agent_busy(const char *agent, uid_t uid)
{
	if (keeper_alive(agent) || exec_active(agent))
		return true;
	if (cgroup_host_usable(us->cg))
		return cgroup_count(us->cg, agent) > 0;
	return user_launch_uid_alive(uid);
}

/* SIGKILL every process of the agent: its sandboxes, its cgroup, its uid. */
static int kill_everything(const char *agent, uid_t uid)
{
	struct keeper *k = *keeper_find(agent);
	int r = 0, q;

	if (k)
		(void)syscall(SYS_pidfd_send_signal, k->pidfd, SIGKILL, NULL, 0);
	for (struct exec_handle *h = us->execs; h; h = h->next)
		if (!h->reaped && strcmp(h->agent, agent) == 0) {
			h->killed = true;
			(void)syscall(SYS_pidfd_send_signal, h->proc.pidfd, SIGKILL, NULL, 0);
			exec_watch_output(h);
		}
	if (cgroup_host_usable(us->cg) && (q = cgroup_kill(us->cg, agent, 2000)) < 0)
		r = q;
	/* Belt and braces: nothing may keep running under a uid that is about to be freed or reused. */
	if ((q = user_launch_kill_uid(uid, 2000)) < 0 && r == 0)
		r = q;
	if (k) {
		int status;
		(void)user_launch_wait(k->pidfd, false, &status);
		(void)keeper_alive(agent);
	}
	return r;
}

/* ---- init ---- */

static char *report_why(const struct user_launch_report *rep, const char *what)
{
	return xasprintf("cannot %s%s%s: %s", user_launch_stage_to_string((enum user_launch_stage)rep->stage),
			 what ? " " : "", what ? what : "", strerror(rep->value));
}

/* Can this host make a sandbox (namespaces, mounts)? An idle one as nobody, killed once READY. */
static int probe_sandbox(char **why)
{
	static const char *const env[] = { "PATH=" USER_LAUNCH_PATH, NULL };
	struct user_launch_spec spec = { .uid = 65534, .gid = 65534, .home = "/", .envp = env,
					 .stdin_fd = -1, .stdout_fd = -1, .stderr_fd = -1, .tmp_size_mib = 1 };
	struct user_launch_report rep = { 0 };
	struct user_launch_proc proc;
	int r, status;
	ssize_t n;

	if ((r = user_launch(&spec, &proc)) < 0) {
		*why = xasprintf("cannot create a sandbox (PID, mount, IPC and network namespaces): %s", strerror(-r));
		return r;
	}
	while ((n = read(proc.report_fd, &rep, sizeof(rep))) < 0 && errno == EINTR)
		;
	(void)syscall(SYS_pidfd_send_signal, proc.pidfd, SIGKILL, NULL, 0);
	(void)user_launch_wait(proc.pidfd, false, &status);
	close(proc.pidfd);
	close(proc.report_fd);
	if (n != sizeof(rep) || rep.kind != LAUNCH_REPORT_READY) {
		*why = n == sizeof(rep) && rep.kind == LAUNCH_REPORT_FAILED ? report_why(&rep, "in a test sandbox")
									 : xstrdup("a test sandbox died while starting");
		return -EOPNOTSUPP;
	}
	return 0;
}

/*
 * World-writable directories beyond those the launcher always replaces
 * (/tmp, /var/tmp, /dev/shm, /run): found once at init on the root file
 * system, so each sandbox gets its own empty one and no agent can leave a
 * file there for another. Only what an agent could reach is searched: a
 * directory others cannot traverse is not entered, nor is a world-writable
 * one (the whole of it is replaced), nor the state dir (homes are private).
 */
#define SHARED_DIRS_MAX 64
#define SHARED_DIRS_DEPTH 5
static const char *scan_state_dir;
static char **scan_found;
static size_t scan_n;

static int scan_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	static const char *const skip[] = { "/proc", "/sys", "/tmp", "/var/tmp", "/dev", "/run" };

	if (type != FTW_D)
		return FTW_CONTINUE;
	for (size_t i = 0; i < ARRAY_SIZE(skip); i++)
		if (strcmp(path, skip[i]) == 0)
			return FTW_SKIP_SUBTREE;
	if (strcmp(path, scan_state_dir) == 0 || !(st->st_mode & S_IXOTH))
		return FTW_SKIP_SUBTREE;
	if (st->st_mode & S_IWOTH) {
		if (scan_n == SHARED_DIRS_MAX) {
			log_warning("user backend: more than %d world-writable directories; %s and later ones stay shared",
				    SHARED_DIRS_MAX, path);
			return FTW_STOP;
		}
		scan_found[scan_n++] = xstrdup(path);
		return FTW_SKIP_SUBTREE;
	}
	return ftw->level >= SHARED_DIRS_DEPTH ? FTW_SKIP_SUBTREE : FTW_CONTINUE;
}

/* Fill us->shared_dirs; a failed walk only loses what it did not reach. fleetd's loop is not running yet. */
static void scan_shared_dirs(struct fleetd *f)
{
	scan_state_dir = config_get(&f->cfg, CFG_STATE_DIR);
	scan_found = xcalloc(SHARED_DIRS_MAX, sizeof(*scan_found));
	scan_n = 0;
	if (nftw("/", scan_one, 16, FTW_PHYS | FTW_MOUNT | FTW_ACTIONRETVAL) < 0)
		log_warning("user backend: looking for world-writable directories: %s", strerror(errno));
	us->shared_dirs = scan_found;
	us->n_shared_dirs = scan_n;
	scan_found = NULL;
	for (size_t i = 0; i < us->n_shared_dirs; i++)
		log_info("user backend: %s is world-writable: each sandbox gets its own", us->shared_dirs[i]);
}

static int ensure_init(struct fleetd *f, char **why)
{
	static const char *const tools[] = { "useradd", "userdel", "groupadd", "groupdel", "rm" };
	int r;

	if (us) {
		us->f = f;
		return 0;
	}
	if (geteuid() != 0) {
		*why = xstrdup("user agents need fleetd to run as root (it creates users and drops to them)");
		return -EPERM;
	}
	for (size_t i = 0; i < ARRAY_SIZE(tools); i++) {
		_cleanup_free_ char *p = find_tool(tools[i]);
		if (!p) {
			*why = xasprintf("%s not found (Debian package 'passwd')", tools[i]);
			return -ENOENT;
		}
	}
	if (access("/usr/sbin/nologin", X_OK) < 0) {
		*why = xstrdup("/usr/sbin/nologin not found");
		return -ENOENT;
	}
	if ((r = probe_sandbox(why)) < 0)
		return r;
	us = xcalloc(1, sizeof(*us));
	us->f = f;
	cgroup_host_detect(&us->cg);
	scan_shared_dirs(f);
	return 0;
}

static int user_init(struct fleetd *f, const struct backend_host *host, char **why)
{
	_cleanup_free_ char *cg = NULL;
	int r;

	if ((r = ensure_init(f, why)) < 0)
		return r;
	us->on_event = host ? host->on_event : NULL;
	cg = cgroup_host_describe(us->cg);
	log_info("user backend: cgroups: %s", cg);
	if (!cgroup_host_has(us->cg, "memory") || !cgroup_host_has(us->cg, "pids"))
		log_warning("user backend: no memory or pids cgroup; limits rely on rlimits only");
	if (!cgroup_host_can_freeze(us->cg))
		log_warning("user backend: no cgroup freezer; a running user agent cannot be snapshotted");
	snapshots_sweep(f);
	return 0;
}

static void exec_finish(struct exec_handle *h);
static void op_finish(struct pending_op *op);
static void stop_force(struct pending_op *op);

static void user_shutdown(struct fleetd *f)
{
	if (!us)
		return;
	/* Snapshot work is cancelled (its worker thaws and cleans up) and reported. */
	jobs_shutdown();
	/* Starts and stops in flight complete now; a stop ends forced. */
	while (us->ops) {
		if (us->ops->is_stop && us->ops->r == 0)
			stop_force(us->ops);
		op_finish(us->ops);
	}
	/* Execs die with fleetd (their clients are gone); keepers outlive it, like VM domains. */
	while (us->execs) {
		struct exec_handle *h = us->execs;
		int status;

		(void)syscall(SYS_pidfd_send_signal, h->proc.pidfd, SIGKILL, NULL, 0);
		h->killed = true;
		if (!h->reaped && user_launch_wait(h->proc.pidfd, false, &status) == 0) {
			h->reaped = true;
			h->init_status = status;
		}
		exec_finish(h);
	}
	while (us->keepers) {
		struct keeper *k = us->keepers;
		us->keepers = k->next;
		keeper_free(k);
	}
	cgroup_host_free(us->cg);
	for (size_t i = 0; i < us->n_shared_dirs; i++)
		free(us->shared_dirs[i]);
	free(us->shared_dirs);
	free(us);
	us = NULL;
}

/* ---- provision / destroy ---- */

/* <state_dir>/users: a real directory, root's, 0711 (agents traverse it, cannot list it). */
static int ensure_users_dir(struct fleetd *f, char **why)
{
	_cleanup_free_ char *dir = users_dir(f);
	struct stat st;

	if (mkdir(dir, 0711) < 0 && errno != EEXIST) {
		int r = -errno;
		*why = xasprintf("cannot create %s: %s", dir, strerror(-r));
		return r;
	}
	if (lstat(dir, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != 0) {
		*why = xasprintf("%s is not a directory owned by root", dir);
		return -EPERM;
	}
	if (chmod(dir, 0711) < 0) {
		int r = -errno;
		*why = xasprintf("cannot chmod %s: %s", dir, strerror(-r));
		return r;
	}
	return 0;
}

static int make_home(const char *home, uid_t uid, char **why)
{
	static const char *const subdirs[] = { "memory", "work" };
	_cleanup_close_ int fd = -1;
	int r;

	if (mkdir(home, 0700) < 0) {
		r = -errno;
		*why = r == -EEXIST ? xasprintf("home %s already exists", home)
				    : xasprintf("cannot create home %s: %s", home, strerror(-r));
		return r;
	}
	fd = open(home, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || fchown(fd, uid, uid) < 0 || fchmod(fd, 0700) < 0)
		goto fail;
	for (size_t i = 0; i < ARRAY_SIZE(subdirs); i++)
		if (mkdirat(fd, subdirs[i], 0700) < 0 || fchownat(fd, subdirs[i], uid, uid, AT_SYMLINK_NOFOLLOW) < 0 ||
		    fchmodat(fd, subdirs[i], 0700, 0) < 0)
			goto fail;
	return 0;
fail:
	r = -errno;
	*why = xasprintf("cannot set up home %s: %s", home, strerror(-r));
	return r;
}

/* Remove a home tree as root without following links or leaving the file system. */
static int remove_home(const char *home, char **why)
{
	const char *const argv[] = { "rm", "-rf", "--one-file-system", "--", home, NULL };

	return tool(why, argv) == 0 ? 0 : -EIO;
}

static int remove_user(const char *user, char **why)
{
	const char *const del_user[] = { "userdel", user, NULL };
	const char *const del_group[] = { "groupdel", user, NULL };
	int r = 0;

	if (getpwnam(user) && tool(why, del_user) != 0)
		r = -EIO;
	if (getgrnam(user) && tool(why, del_group) != 0)
		r = -EIO;
	return r;
}

static int user_provision(struct fleetd *f, const struct agent *a, char **why)
{
	_cleanup_free_ char *user = user_name(a->name), *home = home_dir(f, a->name);
	long min = config_get_long(&f->cfg, CFG_USER_UID_MIN), max = config_get_long(&f->cfg, CFG_USER_UID_MAX);
	struct cgroup_limits lim = {
		.memory_bytes = (uint64_t)a->memory_mib << 20,
		.pids_max = USER_AGENT_PIDS_MAX,
		.cpus = a->vcpus,
	};
	long id = 0, mark = 0, from = min;
	int r;

	if ((r = ensure_init(f, why)) < 0)
		return r;
	if (strlen(a->name) > USER_AGENT_NAME_MAX) {
		*why = xasprintf("name is too long for a user agent (at most %d characters, so that '%s' + name "
				 "is a valid user name)", USER_AGENT_NAME_MAX, USER_PREFIX);
		return -ENAMETOOLONG;
	}
	if (getpwnam(user)) {
		*why = xasprintf("a system user '%s' already exists", user);
		return -EEXIST;
	}
	if (getgrnam(user)) {
		*why = xasprintf("a system group '%s' already exists", user);
		return -EEXIST;
	}
	if ((r = ensure_users_dir(f, why)) < 0)
		return r;
	if (access(home, F_OK) == 0) {
		*why = xasprintf("home %s already exists", home);
		return -EEXIST;
	}
	/* Snapshots of an earlier agent of this name (a destroy that did not finish) are not this one's. */
	snapshots_forget(f, a->name);
	if (cgroup_host_usable(us->cg) && cgroup_exists(us->cg, a->name)) {
		/* Left over from a crash: reuse nothing, but an empty one is safe to drop. */
		if (cgroup_count(us->cg, a->name) > 0 || cgroup_remove(us->cg, a->name) < 0) {
			*why = xasprintf("a cgroup for '%s' already exists and has processes", a->name);
			return -EBUSY;
		}
	}

	if ((r = uid_mark_read(f, &mark, why)) < 0)
		return r;
	if (mark > from)
		from = mark;
	/* Another fleetd may take the same id between the scan and useradd: try the next one. */
	for (int attempt = 0;; attempt++, from = id + 1) {
		char ids[32];
		_cleanup_free_ char *gecos = xasprintf("fleet agent %s", a->name);

		if (pick_id(from, max, &id) < 0) {
			*why = xasprintf("no free uid/gid left in user_uid_min..user_uid_max (%ld..%ld): the uids of removed "
					 "agents are never handed out again; widen the range", min, max);
			return -ENOSPC;
		}
		/* Burnt before use: a crash after useradd must not hand this uid out twice. */
		if ((r = uid_mark_write(f, id + 1, why)) < 0)
			return r;
		snprintf(ids, sizeof(ids), "%ld", id);
		const char *const groupadd[] = { "groupadd", "-g", ids, user, NULL };
		const char *const useradd[] = {
			"useradd", "--system", "-u", ids, "-g", ids, "-M", "-N", "-l",
			"-d", home, "-s", "/usr/sbin/nologin", "-c", gecos, user, NULL,
		};
		_cleanup_free_ char *gwhy = NULL, *uwhy = NULL;

		r = tool(&gwhy, groupadd);
		if (r == 4 && attempt < 8)	/* GID not unique */
			continue;
		if (r != 0) {
			*why = r == 9 ? xasprintf("a system group '%s' already exists", user) : TAKE_PTR(gwhy);
			return r == 9 ? -EEXIST : -EIO;
		}
		r = tool(&uwhy, useradd);
		if (r == 0)
			break;
		(void)remove_user(user, NULL);	/* the group just made */
		if (r == 4 && attempt < 8)	/* UID already in use */
			continue;
		*why = r == 9 ? xasprintf("a system user '%s' already exists", user) : TAKE_PTR(uwhy);
		return r == 9 ? -EEXIST : -EIO;
	}

	if ((r = make_home(home, (uid_t)id, why)) < 0)
		goto undo_user;
	if (cgroup_host_usable(us->cg) && (r = cgroup_create(us->cg, a->name, &lim, why)) < 0)
		goto undo_home;
	log_debug("agent '%s': user %s uid %ld, home %s", a->name, user, id, home);
	return 0;

undo_home:
	(void)remove_home(home, NULL);
undo_user:
	(void)remove_user(user, NULL);
	return r;
}

static int user_destroy(struct fleetd *f, const struct agent *a, bool force, char **why)
{
	_cleanup_free_ char *user = user_name(a->name), *home = home_dir(f, a->name);
	uid_t uid = 0;
	int r, ret = 0;

	if ((r = ensure_init(f, why)) < 0)
		return r;
	r = agent_user(f, a->name, &uid);
	if (r == -EPERM) {
		/* A fleet-NAME fleet did not make (provision refused it): not ours to remove. */
		log_debug("agent '%s': user %s is not fleet's; leaving it", a->name, user);
		if (cgroup_host_usable(us->cg) && cgroup_count(us->cg, a->name) == 0)
			(void)cgroup_remove(us->cg, a->name);
		return 0;
	}
	if (r < 0 && r != -ENOENT) {
		*why = xasprintf("cannot look up user %s: %s", user, strerror(-r));
		return r;
	}
	if (job_busy(a->name, why))
		return -EBUSY;
	if (r == 0 && agent_busy(a->name, uid) && !force) {
		*why = xstrdup("is running; stop it first or use --force");
		return -EBUSY;
	}
	if (r == 0 && (r = kill_everything(a->name, uid)) < 0) {
		*why = xasprintf("cannot kill every process of %s: %s", user, strerror(-r));
		return r;
	}
	if (cgroup_host_usable(us->cg) && (r = cgroup_remove(us->cg, a->name)) < 0 && ret == 0) {
		*why = xasprintf("cannot remove the cgroup: %s", strerror(-r));
		ret = r;
	}
	/* Only a home that belongs to the agent's uid is ours (a pre-existing one made provision fail). */
	struct stat st;
	if (uid != 0 && lstat(home, &st) == 0 && st.st_uid == uid && (r = remove_home(home, ret ? NULL : why)) < 0 && ret == 0)
		ret = r;
	/*
	 * Its user was deleted by hand (the agent is 'missing'): the home is
	 * still ours if its owner is a uid of fleet's range that no user has
	 * any more (fleet never hands a uid out twice); anything else is left.
	 */
	if (uid == 0 && lstat(home, &st) == 0 && S_ISDIR(st.st_mode) &&
	    (long)st.st_uid >= config_get_long(&f->cfg, CFG_USER_UID_MIN) &&
	    (long)st.st_uid <= config_get_long(&f->cfg, CFG_USER_UID_MAX) && !getpwuid(st.st_uid) &&
	    (r = remove_home(home, ret ? NULL : why)) < 0 && ret == 0)
		ret = r;
	if (uid != 0 && (r = remove_user(user, ret ? NULL : why)) < 0 && ret == 0)
		ret = r;
	snapshots_forget(f, a->name);	/* its snapshots and a half-made restore; removed in the background */
	return ret;
}

/* ---- start / stop / state ---- */

static int launch(struct fleetd *f, const struct agent *a, uid_t uid, const struct user_launch_spec *tmpl,
		  const char *const *extra_env, struct user_launch_proc *proc, char **why)
{
	_cleanup_free_ char *user = user_name(a->name), *home = home_dir(f, a->name);
	struct user_launch_spec spec = *tmpl;
	char **env = NULL;
	int cg_fds[8], n_cg = 0, r;

	if (user_launch_env(a->name, user, home, extra_env, &env) < 0) {
		*why = xstrdup("invalid environment entry (want NAME=VALUE)");
		return -EINVAL;
	}
	if (cgroup_host_usable(us->cg) && (n_cg = cgroup_open_join_fds(us->cg, a->name, cg_fds, ARRAY_SIZE(cg_fds))) < 0) {
		r = n_cg;
		*why = xasprintf("cannot open the agent's cgroup: %s", strerror(-r));
		user_launch_env_free(env);
		return r;
	}
	spec.uid = uid;
	spec.gid = uid;
	spec.home = home;
	spec.envp = (const char *const *)env;
	spec.cgroup_fds = cg_fds;
	spec.n_cgroup_fds = (size_t)n_cg;
	spec.rlimit_nproc = USER_AGENT_PIDS_MAX;
	spec.rlimit_nofile = USER_AGENT_NOFILE_MAX;
	spec.tmp_size_mib = a->memory_mib;
	spec.shared_dirs = (const char *const *)us->shared_dirs;
	spec.n_shared_dirs = us->n_shared_dirs;
	r = user_launch(&spec, proc);
	for (int i = 0; i < n_cg; i++)
		close(cg_fds[i]);
	user_launch_env_free(env);
	if (r < 0)
		*why = xasprintf("cannot create the sandbox: %s", strerror(-r));
	return r;
}


static void op_finish(struct pending_op *op)
{
	for (struct pending_op **p = &us->ops; *p; p = &(*p)->next)
		if (*p == op) {
			*p = op->next;
			break;
		}
	op->done(op->userdata, op->r, op->why);
	event_free(op->ev);
	free(op->why);
	free(op->agent);
	free(op);
}

/* Forced end of a stop: whatever is left, double forks and strays included. */
static void stop_force(struct pending_op *op)
{
	int r = kill_everything(op->agent, op->uid);

	if (r < 0) {
		op->r = r;
		op->why = xasprintf("cannot kill every process: %s", strerror(-r));
	}
}

static bool agent_procs_left(const char *agent, uid_t uid)
{
	return keeper_alive(agent) ||
	       (cgroup_host_usable(us->cg) ? cgroup_count(us->cg, agent) > 0 : user_launch_uid_alive(uid));
}

static void on_op_tick(evutil_socket_t fd, short what, void *arg)
{
	struct pending_op *op = arg;

	if (op->is_stop && op->r == 0) {
		if (agent_procs_left(op->agent, op->uid) && now_usec() < op->deadline) {
			struct timeval tv = { 0, 20000 };
			evtimer_add(op->ev, &tv);
			return;
		}
		stop_force(op);
	}
	op_finish(op);
}

static void op_schedule(struct fleetd *f, const char *agent, uid_t uid, bool is_stop, int timeout_s,
			backend_done_fn done, void *userdata)
{
	struct pending_op *op = xcalloc(1, sizeof(*op));

	op->agent = xstrdup(agent);
	op->uid = uid;
	op->is_stop = is_stop;
	op->deadline = now_usec() + (long long)(timeout_s > 0 ? timeout_s : 0) * 1000000;
	op->done = done;
	op->userdata = userdata;
	op->ev = evtimer_new(f->base, on_op_tick, op);
	event_active(op->ev, EV_TIMEOUT, 0);
	op->next = us->ops;
	us->ops = op;
}

static int keeper_launch(struct fleetd *f, const struct agent *a, uid_t uid, char **why);

/*
 * What every verb on a provisioned agent checks first: it has its user (uid
 * in *uid), no snapshot or restore of it is under way, and nothing of it is
 * left frozen by a fleetd that was killed mid-snapshot.
 */
static int agent_ready(struct fleetd *f, const struct agent *a, uid_t *uid, char **why)
{
	int r;

	if ((r = agent_user(f, a->name, uid)) < 0) {
		*why = xstrdup("has no user environment (not provisioned?)");
		return r == -EPERM ? -ENOENT : r;
	}
	if (job_busy(a->name, why))
		return -EBUSY;
	thaw_leftover(a->name);
	return 0;
}

static int user_start(struct fleetd *f, const struct agent *a, backend_done_fn done, void *userdata, char **why)
{
	uid_t uid;
	int r;

	if ((r = ensure_init(f, why)) < 0)
		return r;
	if ((r = agent_ready(f, a, &uid, why)) < 0)
		return r;
	if (keeper_alive(a->name)) {
		op_schedule(f, a->name, uid, false, 0, done, userdata);
		return 0;
	}
	if ((r = keeper_launch(f, a, uid, why)) < 0)
		return r;
	op_schedule(f, a->name, uid, false, 0, done, userdata);
	return 0;
}

/* Launch the keeper sandbox of a and wait for its READY (a few ms); it is then tracked in us->keepers. */
static int keeper_launch(struct fleetd *f, const struct agent *a, uid_t uid, char **why)
{
	struct user_launch_spec spec = { .stdin_fd = -1, .stdout_fd = -1, .stderr_fd = -1 };
	struct user_launch_proc proc;
	struct user_launch_report rep = { 0 };
	struct keeper *k;
	ssize_t n;
	int r;

	if ((r = launch(f, a, uid, &spec, NULL, &proc, why)) < 0)
		return r;
	/* The keeper reports once its sandbox is set up (READY) or why it failed: a few ms. */
	while ((n = read(proc.report_fd, &rep, sizeof(rep))) < 0 && errno == EINTR)
		;
	close(proc.report_fd);
	if (n != sizeof(rep) || rep.kind != LAUNCH_REPORT_READY) {
		int status;
		*why = n == sizeof(rep) && rep.kind == LAUNCH_REPORT_FAILED ? report_why(&rep, NULL)
									 : xstrdup("the sandbox died while starting");
		(void)syscall(SYS_pidfd_send_signal, proc.pidfd, SIGKILL, NULL, 0);
		(void)user_launch_wait(proc.pidfd, false, &status);
		close(proc.pidfd);
		return -EIO;
	}
	k = xcalloc(1, sizeof(*k));
	k->agent = xstrdup(a->name);
	k->pid = proc.pid;
	k->pidfd = proc.pidfd;
	k->ev = event_new(f->base, proc.pidfd, EV_READ, on_keeper_exit, k);
	event_add(k->ev, NULL);
	k->next = us->keepers;
	us->keepers = k;
	return 0;
}

static int user_stop(struct fleetd *f, const struct agent *a, int timeout_s, backend_done_fn done, void *userdata,
		     char **why)
{
	struct keeper *k;
	uid_t uid;
	int r;

	if ((r = ensure_init(f, why)) < 0)
		return r;
	/* agent_ready thaws: a frozen process would not see its SIGTERM. */
	if ((r = agent_ready(f, a, &uid, why)) < 0)
		return r;
	/* Clean: SIGTERM to every sandbox init, which passes it to everything in its namespace. */
	if ((k = *keeper_find(a->name))) {
		k->asked = true;
		(void)syscall(SYS_pidfd_send_signal, k->pidfd, SIGTERM, NULL, 0);
	}
	for (struct exec_handle *h = us->execs; h; h = h->next)
		if (!h->reaped && strcmp(h->agent, a->name) == 0)
			(void)syscall(SYS_pidfd_send_signal, h->proc.pidfd, SIGTERM, NULL, 0);
	op_schedule(f, a->name, uid, true, timeout_s, done, userdata);
	return 0;
}

static int user_state(struct fleetd *f, const struct agent *a, enum agent_state *ret, char **gone)
{
	_cleanup_free_ char *why = NULL, *home = NULL;
	struct stat st;
	uid_t uid;
	int r;

	if ((r = ensure_init(f, &why)) < 0)
		return r;
	if ((r = agent_user(f, a->name, &uid)) < 0) {
		if (gone && r == -ENOENT)
			*gone = xasprintf("its Unix user " USER_PREFIX "%s is gone", a->name);
		else if (gone && r == -EPERM)
			*gone = xasprintf("its Unix user " USER_PREFIX "%s is no longer fleet's", a->name);
		return r == -EPERM ? -ENOENT : r;
	}
	/* The home is the environment too: without it nothing of the agent is left to start. */
	home = home_dir(f, a->name);
	if (lstat(home, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != uid) {
		if (gone)
			*gone = xasprintf("its home %s is gone", home);
		return -ENOENT;
	}
	*ret = agent_busy(a->name, uid) ? AGENT_RUNNING : AGENT_STOPPED;
	return 0;
}

/* ---- exec ---- */

static void exec_free(struct exec_handle *h)
{
	struct event *evs[] = { h->ev_out, h->ev_err, h->ev_in, h->ev_report, h->ev_pid, h->ev_timer, h->ev_done };
	int fds[] = { h->out_fd, h->err_fd, h->in_fd, h->proc.report_fd, h->proc.pidfd };

	for (size_t i = 0; i < ARRAY_SIZE(evs); i++)
		if (evs[i])
			event_free(evs[i]);
	for (size_t i = 0; i < ARRAY_SIZE(fds); i++)
		if (fds[i] >= 0)
			close(fds[i]);
	free(h->stdin_data);
	free(h->agent);
	free(h);
}

/* Deliver done() once and free h. */
static void exec_finish(struct exec_handle *h)
{
	struct exec_result res = { .exit_code = -1, .timed_out = h->timed_out };
	_cleanup_free_ char *why = NULL;

	for (struct exec_handle **p = &us->execs; *p; p = &(*p)->next)
		if (*p == h) {
			*p = h->next;
			break;
		}
	if (h->have_report && h->report.kind == LAUNCH_REPORT_FAILED) {
		res.error = -h->report.value;
		res.why = why = report_why(&h->report, h->report.stage == LAUNCH_STAGE_EXEC ? "the command" : NULL);
	} else if (h->have_report && h->report.kind == LAUNCH_REPORT_EXITED) {
		int st = h->report.value;
		if (WIFEXITED(st))
			res.exit_code = WEXITSTATUS(st);
		else
			res.signal = WTERMSIG(st);
	} else if (h->reaped && WIFSIGNALED(h->init_status)) {
		res.signal = WTERMSIG(h->init_status);	/* the sandbox was killed: timeout, cancel, stop */
	} else {
		res.error = -EIO;
		res.why = "the sandbox ended without a status";
	}
	h->cb.done(h->cb.userdata, &res);
	exec_free(h);
}

static void on_done_event(evutil_socket_t fd, short what, void *arg)
{
	exec_finish(arg);
}

static void exec_maybe_done(struct exec_handle *h)
{
	if (!h->reaped || h->out_fd >= 0 || h->err_fd >= 0 || h->proc.report_fd >= 0 || h->ev_done)
		return;
	/* Finish from the loop, never from inside exec() or exec_cancel(). */
	h->ev_done = evtimer_new(us->f->base, on_done_event, h);
	event_active(h->ev_done, EV_TIMEOUT, 0);
}

static void close_stream(struct exec_handle *h, int *fd, struct event **ev)
{
	if (*ev) {
		event_free(*ev);
		*ev = NULL;
	}
	if (*fd >= 0) {
		close(*fd);
		*fd = -1;
	}
}

static void on_output(evutil_socket_t fd, short what, void *arg)
{
	struct exec_handle *h = arg;
	bool is_out = fd == h->out_fd;
	char buf[65536];
	ssize_t n = read(fd, buf, sizeof(buf));

	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		if (is_out)
			close_stream(h, &h->out_fd, &h->ev_out);
		else
			close_stream(h, &h->err_fd, &h->ev_err);
		exec_maybe_done(h);
		return;
	}
	h->cb.output(h->cb.userdata, is_out ? EXEC_STDOUT : EXEC_STDERR, buf, (size_t)n);
}

static void on_stdin(evutil_socket_t fd, short what, void *arg)
{
	struct exec_handle *h = arg;
	ssize_t n = write(fd, h->stdin_data + h->stdin_off, h->stdin_len - h->stdin_off);

	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n > 0)
		h->stdin_off += (size_t)n;
	if (n < 0 || h->stdin_off >= h->stdin_len)	/* done, or the command closed its stdin (EPIPE) */
		close_stream(h, &h->in_fd, &h->ev_in);
}

static void on_report(evutil_socket_t fd, short what, void *arg)
{
	struct exec_handle *h = arg;
	ssize_t n = read(fd, h->report_buf + h->report_len, sizeof(h->report_buf) - h->report_len);

	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		close_stream(h, &h->proc.report_fd, &h->ev_report);
		exec_maybe_done(h);
		return;
	}
	h->report_len += (size_t)n;
	if (h->report_len == sizeof(h->report_buf)) {
		struct user_launch_report r;

		memcpy(&r, h->report_buf, sizeof(r));
		/* A FAILED from the payload is followed by EXITED 127 from the init: keep the reason. */
		if (r.kind == LAUNCH_REPORT_FAILED ||
		    (r.kind == LAUNCH_REPORT_EXITED && !(h->have_report && h->report.kind == LAUNCH_REPORT_FAILED))) {
			h->report = r;
			h->have_report = true;
		}
		h->report_len = 0;
	}
}

static void on_init_exit(evutil_socket_t fd, short what, void *arg)
{
	struct exec_handle *h = arg;
	int status;

	if (user_launch_wait(h->proc.pidfd, true, &status) < 0)
		return;
	h->reaped = true;
	h->init_status = status;
	event_free(h->ev_pid);
	h->ev_pid = NULL;
	if (h->ev_timer) {
		event_free(h->ev_timer);
		h->ev_timer = NULL;
	}
	close_stream(h, &h->in_fd, &h->ev_in);
	exec_maybe_done(h);
}

/* Watch the output pipes, or stop: a pause holds unless the exec is being killed. */
static void exec_watch_output(struct exec_handle *h)
{
	bool read = !h->paused || h->killed;

	if (h->ev_out)
		read ? event_add(h->ev_out, NULL) : event_del(h->ev_out);
	if (h->ev_err)
		read ? event_add(h->ev_err, NULL) : event_del(h->ev_err);
}

static void on_timeout(evutil_socket_t fd, short what, void *arg)
{
	struct exec_handle *h = arg;

	h->timed_out = true;
	h->killed = true;
	(void)syscall(SYS_pidfd_send_signal, h->proc.pidfd, SIGKILL, NULL, 0);
	exec_watch_output(h);	/* what is left in the pipes is read to the end */
}

static int user_exec(struct fleetd *f, const struct agent *a, const struct exec_request *req,
		     const struct exec_callbacks *cb, struct exec_handle **ret, char **why)
{
	struct user_launch_spec spec = { .argv = req->argv, .stdin_fd = -1, .die_with_parent = true };
	int out[2] = { -1, -1 }, err[2] = { -1, -1 }, in[2] = { -1, -1 };
	struct exec_handle *h;
	uid_t uid;
	int r;

	if ((r = ensure_init(f, why)) < 0)
		return r;
	if (!req->argv || !req->argv[0] || !*req->argv[0]) {
		*why = xstrdup("no command given");
		return -EINVAL;
	}
	if (req->root) {
		*why = xstrdup("a user agent has no root; commands run as the agent's user");
		return -EPERM;
	}
	/* A command must not change the home while it is copied, nor run in a home about to be swapped. */
	if ((r = agent_ready(f, a, &uid, why)) < 0)
		return r;
	if (pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0 ||
	    (req->stdin_len > 0 && pipe2(in, O_CLOEXEC) < 0)) {
		r = -errno;
		*why = xasprintf("cannot create pipes: %s", strerror(-r));
		goto fail;
	}
	spec.stdout_fd = out[1];
	spec.stderr_fd = err[1];
	spec.stdin_fd = in[0];
	h = xcalloc(1, sizeof(*h));
	if ((r = launch(f, a, uid, &spec, req->env, &h->proc, why)) < 0) {
		free(h);
		goto fail;
	}
	close(out[1]);
	close(err[1]);
	if (in[0] >= 0)
		close(in[0]);
	h->agent = xstrdup(a->name);
	h->cb = *cb;
	h->out_fd = out[0];
	h->err_fd = err[0];
	h->in_fd = in[1];
	fcntl(h->out_fd, F_SETFL, O_NONBLOCK);
	fcntl(h->err_fd, F_SETFL, O_NONBLOCK);
	fcntl(h->proc.report_fd, F_SETFL, O_NONBLOCK);
	h->ev_out = event_new(f->base, h->out_fd, EV_READ | EV_PERSIST, on_output, h);
	h->ev_err = event_new(f->base, h->err_fd, EV_READ | EV_PERSIST, on_output, h);
	h->ev_report = event_new(f->base, h->proc.report_fd, EV_READ | EV_PERSIST, on_report, h);
	h->ev_pid = event_new(f->base, h->proc.pidfd, EV_READ, on_init_exit, h);
	event_add(h->ev_out, NULL);
	event_add(h->ev_err, NULL);
	event_add(h->ev_report, NULL);
	event_add(h->ev_pid, NULL);
	if (h->in_fd >= 0) {
		fcntl(h->in_fd, F_SETFL, O_NONBLOCK);
		h->stdin_data = xmalloc(req->stdin_len);
		memcpy(h->stdin_data, req->stdin_data, req->stdin_len);
		h->stdin_len = req->stdin_len;
		h->ev_in = event_new(f->base, h->in_fd, EV_WRITE | EV_PERSIST, on_stdin, h);
		event_add(h->ev_in, NULL);
	}
	if (req->timeout_s > 0) {
		struct timeval tv = { req->timeout_s, 0 };
		h->ev_timer = evtimer_new(f->base, on_timeout, h);
		evtimer_add(h->ev_timer, &tv);
	}
	h->next = us->execs;
	us->execs = h;
	*ret = h;
	return 0;
fail:
	for (int i = 0; i < 2; i++) {
		if (out[i] >= 0)
			close(out[i]);
		if (err[i] >= 0)
			close(err[i]);
		if (in[i] >= 0)
			close(in[i]);
	}
	return r;
}

static void user_exec_cancel(struct exec_handle *h)
{
	if (!h)
		return;
	h->killed = true;
	if (!h->reaped)
		(void)syscall(SYS_pidfd_send_signal, h->proc.pidfd, SIGKILL, NULL, 0);
	exec_watch_output(h);	/* also when it ended but paused output still waits in the pipes */
}

/*
 * Unread output waits in the pipes (64 KiB each by default), and the
 * command blocks writing once they are full: that is the whole bound.
 */
static void user_exec_pause(struct exec_handle *h, bool paused)
{
	h->paused = paused;
	exec_watch_output(h);
}

/* ---- snapshots ----
 *
 * <state_dir>/snapshots            0700 root
 *   NAME/                          0700 root, one per agent
 *     SNAP/                        0700 root, a finished snapshot
 *       home/                      the copy of the home, owners, modes and times kept
 *     .SNAP.tmp/                   a snapshot being made (a leading dot: never a valid snapshot name)
 *   .trash/                        what is being removed in the background
 * <state_dir>/users/NAME.restore   a restored home being built, swapped in whole
 *
 * create and restore run their copy on a worker thread; the worker writes
 * one byte on the job's pipe when it is done and the loop finishes the job
 * (joins the thread, swaps, calls done()), so done() always comes from the
 * loop, after create()/restore() returned. Removal is a rename into the
 * trash (instant) and a worker that empties it.
 */

enum snap_job_kind { JOB_CREATE, JOB_RESTORE, JOB_TRASH };

struct snap_job {
	struct snap_job *next;
	enum snap_job_kind kind;
	char *agent, *snap;		/* NULL for JOB_TRASH */
	struct agent *a;		/* restore: to relaunch the keeper */
	uid_t uid;
	const struct cgroup_host *cg;
	bool freeze;
	char *snaps_dir, *users_dir, *trash_dir;	/* copies: the worker reads nothing of fleetd's */
	pthread_t thread;
	bool thread_live;
	int pipe[2];
	struct event *ev;
	atomic_bool cancel;
	/* written by the worker before it writes the pipe */
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

/* A directory of fleet's: made if missing, root's, mode 0700 (set again if someone loosened it). */
static int ensure_private_dir(const char *dir, char **why)
{
	struct stat st;

	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		int r = -errno;
		*why = xasprintf("cannot create %s: %s", dir, strerror(-r));
		return r;
	}
	if (lstat(dir, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != 0) {
		*why = xasprintf("%s is not a directory owned by root", dir);
		return -EPERM;
	}
	if ((st.st_mode & 07777) != 0700 && chmod(dir, 0700) < 0) {
		int r = -errno;
		*why = xasprintf("cannot chmod %s: %s", dir, strerror(-r));
		return r;
	}
	return 0;
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
	return run_tool(argv, &out) == 0 ? 0 : -EIO;
}

static void job_free(struct snap_job *j)
{
	if (j->ev)
		event_free(j->ev);
	for (int i = 0; i < 2; i++)
		if (j->pipe[i] >= 0)
			close(j->pipe[i]);
	agent_free(j->a);
	free(j->agent);
	free(j->snap);
	free(j->snaps_dir);
	free(j->users_dir);
	free(j->trash_dir);
	free(j->why);
	free(j);
}

static void worker_done(struct snap_job *j)
{
	char c = 1;

	while (write(j->pipe[1], &c, 1) < 0 && errno == EINTR)
		;
}

static void *trash_worker(void *arg)
{
	struct snap_job *j = arg;
	DIR *d = opendir(j->trash_dir);
	struct dirent *de;

	while (d && (de = readdir(d)) && !atomic_load(&j->cancel)) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		_cleanup_free_ char *p = xasprintf("%s/%s", j->trash_dir, de->d_name), *out = NULL;
		const char *const argv[] = { "rm", "-rf", "--one-file-system", "--", p, NULL };
		if (run_tool(argv, &out) != 0 && !j->why)
			j->why = xasprintf("cannot remove %s: %s", p, out && *out ? out : "rm failed");
	}
	if (d)
		closedir(d);
	worker_done(j);
	return NULL;
}

/* A second before t: files modified after it are never trusted to be unchanged (see user_snapshot.h). */
static struct timespec before(struct timespec t)
{
	t.tv_sec -= 1;
	return t;
}

/* Copy the home into .SNAP.tmp with the agent frozen, then rename it to SNAP. */
static void *create_worker(void *arg)
{
	struct snap_job *j = arg;
	_cleanup_free_ char *adir = xasprintf("%s/%s", j->snaps_dir, j->agent), *tmp = xasprintf(".%s.tmp", j->snap);
	_cleanup_free_ char *tmp_path = xasprintf("%s/%s", adir, tmp), *prev = NULL;
	_cleanup_close_ int afd = -1, ufd = -1, tfd = -1, pfd = -1, pre_fd = -1;
	struct user_snapshot_copy c = { .prev_fd = -1, .src_name = j->agent, .dst_name = "home", .cancel = &j->cancel };
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
		if (run_tool(argv, &out) != 0 && j->r == 0) {
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
	worker_done(j);
	return NULL;
}

/* Build <home>.restore from SNAP/home: new files (never links into the snapshot), owners and modes as they were. */
static void *restore_worker(void *arg)
{
	struct snap_job *j = arg;
	_cleanup_free_ char *sdir = xasprintf("%s/%s/%s", j->snaps_dir, j->agent, j->snap);
	_cleanup_free_ char *rname = xasprintf("%s.restore", j->agent);
	_cleanup_free_ char *rpath = xasprintf("%s/%s", j->users_dir, rname);
	_cleanup_close_ int sfd = -1, ufd = -1;
	struct user_snapshot_copy c = {
		.prev_fd = -1, .src_name = "home", .dst_name = rname, .top_root = true, .cancel = &j->cancel,
	};
	long long t0 = now_usec();

	(void)trash_path(j->trash_dir, rpath, &j->trashed);	/* a leftover of a fleetd killed mid-way */
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
	j->copy_usec = now_usec() - t0;
	if (j->r < 0)
		(void)trash_path(j->trash_dir, rpath, &j->trashed);
out:
	worker_done(j);
	return NULL;
}

static void on_job_done(evutil_socket_t fd, short what, void *arg);

/* Start j's worker; the job is listed in us->jobs (or is the trash job) by the caller. */
static int job_start(struct fleetd *f, struct snap_job *j, void *(*fn)(void *), char **why)
{
	sigset_t all, old;
	int r;

	j->ev = event_new(f->base, j->pipe[0], EV_READ, on_job_done, j);
	/* Signals are for the loop's thread: the worker blocks them all. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	r = pthread_create(&j->thread, NULL, fn, j);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r != 0) {
		if (why)
			*why = xasprintf("cannot start a worker thread: %s", strerror(r));
		return -r;
	}
	j->thread_live = true;
	event_add(j->ev, NULL);
	return 0;
}

static struct snap_job *job_new(struct fleetd *f, enum snap_job_kind kind, const char *agent, const char *snap)
{
	struct snap_job *j = xcalloc(1, sizeof(*j));

	j->kind = kind;
	j->agent = agent ? xstrdup(agent) : NULL;
	j->snap = snap ? xstrdup(snap) : NULL;
	j->cg = us->cg;
	j->snaps_dir = snaps_dir(f);
	j->users_dir = users_dir(f);
	j->trash_dir = xasprintf("%s/.trash", j->snaps_dir);
	j->pipe[0] = j->pipe[1] = -1;
	atomic_init(&j->cancel, false);
	if (pipe2(j->pipe, O_CLOEXEC | O_NONBLOCK) < 0) {
		job_free(j);
		return NULL;
	}
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
	if (!(j = job_new(us->f, JOB_TRASH, NULL, NULL)))
		return;
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
		(void)trash_path(j->trash_dir, rpath, &j->trashed);
		return;
	}
	/* Running also when fleetd restarted since the start: the keeper lives on, not in our list. */
	was_running = agent_busy(j->agent, j->uid);
	if (exec_active(j->agent)) {
		r = -EBUSY;	/* refused while the job ran; cannot happen */
		j->why = xstrdup("a command is running");
		goto fail;
	}
	if ((r = kill_everything(j->agent, j->uid)) < 0) {
		j->why = xasprintf("cannot stop the agent's processes: %s", strerror(-r));
		goto fail;
	}
	/* Handed to the agent only now that none of its processes is left to write into it early. */
	if ((ufd = open(j->users_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0 ||
	    fchownat(ufd, rname, j->uid, j->uid, AT_SYMLINK_NOFOLLOW) < 0 || fchmodat(ufd, rname, 0700, 0) < 0 ||
	    renameat2(ufd, rname, ufd, j->agent, RENAME_EXCHANGE) < 0) {
		r = -errno;
		j->why = xasprintf("cannot swap in the restored home: %s", strerror(-r));
		goto fail;
	}
	(void)fsync(ufd);
	/* rname is now the old home; in the trash the agent cannot reach it any more. */
	if (trash_path(j->trash_dir, rpath, &j->trashed) < 0)
		log_warning("agent '%s': cannot remove the home replaced by the restore (%s)", j->agent, rpath);
	if (was_running && keeper_launch(us->f, j->a, j->uid, &kwhy) < 0)
		log_warning("agent '%s': restored, but cannot start it again: %s", j->agent, kwhy ? kwhy : "");
	return;
fail:
	j->r = r;
	(void)trash_path(j->trash_dir, rpath, &j->trashed);
	if (was_running && !keeper_alive(j->agent) && keeper_launch(us->f, j->a, j->uid, &kwhy) < 0)
		log_warning("agent '%s': cannot start it again: %s", j->agent, kwhy ? kwhy : "");
}

/* On the loop, after the worker ended: report and free. */
static void job_finish(struct snap_job *j)
{
	bool trashed = j->trashed;

	if (j->thread_live) {
		pthread_join(j->thread, NULL);
		j->thread_live = false;
	}
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
		struct snapshot_result res = { .error = j->r, .why = j->why, .kind = "dir",
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

static void on_job_done(evutil_socket_t fd, short what, void *arg)
{
	job_finish(arg);
}

static bool job_busy(const char *agent, char **why)
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
static void thaw_leftover(const char *agent)
{
	if (!cgroup_host_can_freeze(us->cg) || job_busy(agent, NULL))
		return;
	if (cgroup_frozen(us->cg, agent) == 1)
		log_warning("agent '%s': was left frozen (fleetd stopped during a snapshot?); thawing it", agent);
	(void)cgroup_thaw(us->cg, agent);	/* also a group stuck half-way (FREEZING) */
}

static void jobs_shutdown(void)
{
	us->stopping = true;
	for (struct snap_job *j = us->jobs; j; j = j->next)
		atomic_store(&j->cancel, true);
	if (us->trash_job)
		atomic_store(&us->trash_job->cancel, true);
	while (us->jobs)
		job_finish(us->jobs);	/* joins the worker, which thaws and removes what it made */
	if (us->trash_job)
		job_finish(us->trash_job);
}

/* Clean what a fleetd killed mid-way left: half-made snapshots and restores. At init, before any job. */
static void snapshots_sweep(struct fleetd *f)
{
	_cleanup_free_ char *sd = snaps_dir(f), *ud = users_dir(f), *trash = xasprintf("%s/.trash", sd);
	_cleanup_free_ char *why = NULL;
	bool trashed = false;
	DIR *d;
	struct dirent *de;

	if (access(sd, F_OK) < 0)
		return;	/* no snapshot was ever made */
	if (ensure_private_dir(sd, &why) < 0 || ensure_private_dir(trash, &why) < 0) {
		log_warning("user backend: %s", why);
		return;
	}
	if ((d = opendir(ud))) {
		while ((de = readdir(d))) {
			size_t n = strlen(de->d_name);
			if (n > 8 && strcmp(de->d_name + n - 8, ".restore") == 0) {
				_cleanup_free_ char *p = xasprintf("%s/%s", ud, de->d_name);
				log_info("user backend: removing %s, an unfinished restore", p);
				(void)trash_path(trash, p, &trashed);
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
static void snapshots_forget(struct fleetd *f, const char *agent)
{
	_cleanup_free_ char *sd = snaps_dir(f), *trash = xasprintf("%s/.trash", sd);
	_cleanup_free_ char *ad = xasprintf("%s/%s", sd, agent), *rp = xasprintf("%s/users/%s.restore",
										   config_get(&f->cfg, CFG_STATE_DIR), agent);
	_cleanup_free_ char *why = NULL;
	bool trashed = false;

	if (access(ad, F_OK) < 0 && access(rp, F_OK) < 0)
		return;
	if (ensure_private_dir(sd, &why) < 0 || ensure_private_dir(trash, &why) < 0) {
		log_warning("agent '%s': cannot remove its snapshots: %s", agent, why);
		return;
	}
	if (trash_path(trash, ad, &trashed) < 0 || trash_path(trash, rp, &trashed) < 0)
		log_warning("agent '%s': cannot remove its snapshots in %s", agent, ad);
	if (trashed)
		trash_kick();
}

/* <state_dir>/snapshots, its trash and NAME/ within it, all 0700 root. */
static int ensure_agent_snaps_dir(struct fleetd *f, const char *agent, char **why)
{
	_cleanup_free_ char *sd = snaps_dir(f), *trash = xasprintf("%s/.trash", sd), *ad = xasprintf("%s/%s", sd, agent);
	int r;

	if ((r = ensure_private_dir(sd, why)) < 0 || (r = ensure_private_dir(trash, why)) < 0 ||
	    (r = ensure_private_dir(ad, why)) < 0)
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

	if ((r = ensure_init(f, why)) < 0)
		return r;
	if ((r = agent_ready(f, a, uid, why)) < 0)
		return r;
	if (exec_active(a->name)) {
		*why = xstrdup("a command is running; snapshots wait until it ends");
		return -EBUSY;
	}
	return ensure_agent_snaps_dir(f, a->name, why);
}

static int user_snapshot_create(struct fleetd *f, const struct agent *a, const char *snap,
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
	if (!(j = job_new(f, JOB_CREATE, a->name, snap))) {
		r = -errno;
		*why = xasprintf("cannot create a pipe: %s", strerror(-r));
		return r;
	}
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

static int user_snapshot_restore(struct fleetd *f, const struct agent *a, const char *snap,
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
	if (!(j = job_new(f, JOB_RESTORE, a->name, snap))) {
		r = -errno;
		*why = xasprintf("cannot create a pipe: %s", strerror(-r));
		return r;
	}
	j->uid = uid;
	j->a = agent_copy(a);
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

static int user_snapshot_delete(struct fleetd *f, const struct agent *a, const char *snap, char **why)
{
	_cleanup_free_ char *path = NULL, *tmp = NULL, *trash = NULL;
	bool trashed = false;
	struct stat st;
	int r;

	if ((r = ensure_init(f, why)) < 0)
		return r;
	if (job_busy(a->name, why))
		return -EBUSY;
	path = snap_path(f, a->name, snap);
	tmp = xasprintf("%s/snapshots/%s/.%s.tmp", config_get(&f->cfg, CFG_STATE_DIR), a->name, snap);
	trash = xasprintf("%s/snapshots/.trash", config_get(&f->cfg, CFG_STATE_DIR));
	if (lstat(path, &st) < 0 && lstat(tmp, &st) < 0) {
		*why = xasprintf("has no snapshot '%s'", snap);
		return -ENOENT;
	}
	if ((r = ensure_private_dir(trash, why)) < 0)
		return r;
	if ((r = trash_path(trash, path, &trashed)) < 0 || (r = trash_path(trash, tmp, &trashed)) < 0) {
		*why = xasprintf("cannot remove %s", path);
		return r;
	}
	if (trashed)
		trash_kick();
	return 0;
}

static int user_snapshot_exists(struct fleetd *f, const struct agent *a, const char *snap)
{
	_cleanup_free_ char *path = snap_path(f, a->name, snap), *home = xasprintf("%s/home", path);
	struct stat st;

	if (lstat(home, &st) == 0)
		return S_ISDIR(st.st_mode) ? 1 : 0;
	return errno == ENOENT || errno == ENOTDIR ? 0 : -errno;
}

/* agentd's checks, in the shell (no agentd in a user agent's sandbox): the home takes a write, a shell runs. */
static const char *const user_health_default[] = {
	"/bin/sh", "-c",
	"f=\"$HOME/.fleet-health.$$\" && echo ok > \"$f\" && rm -f \"$f\" && echo healthy || "
	"{ echo \"unhealthy: cannot write to $HOME\"; exit 1; }",
	NULL,
};

const struct backend_ops backend_user_ops = {
	.name = "user",
	.env_word = "sandbox",
	.health_default = user_health_default,
	.has_network = false,	/* nothing to give a user agent: --network nat is for guests */
	.init = user_init,
	.shutdown = user_shutdown,
	.provision = user_provision,
	.destroy = user_destroy,
	.start = user_start,
	.stop = user_stop,
	.state = user_state,
	.exec = user_exec,
	.snapshot_create = user_snapshot_create,
	.snapshot_restore = user_snapshot_restore,
	.snapshot_delete = user_snapshot_delete,
	.snapshot_exists = user_snapshot_exists,
	.exec_cancel = user_exec_cancel,
	.exec_pause = user_exec_pause,
};
