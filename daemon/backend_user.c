/*
 * backend_user: each agent is a system user fleet-NAME with uid == gid from
 * user_uid_min..user_uid_max, a 0700 home <state_dir>/users/NAME holding
 * memory/ and work/, and a cgroup with its limits. Every process of an
 * agent starts through user_launch; this file owns the users, homes and
 * cgroups, the long-lived "keeper" sandbox that makes an agent 'running',
 * and the asynchronous execs on fleetd's event loop.
 *
 * It must never touch a user, group or directory it did not create: a
 * fleet-NAME that is not in the uid range or whose home is elsewhere is
 * someone else's and is left alone.
 */
#include "backend_user.h"

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
#include <time.h>

#include "cgroup.h"
#include "config.h"
#include "fleetd.h"
#include "log.h"
#include "user_launch.h"
#include "util.h"

#define USER_PREFIX "fleet-"

/* The long-lived sandbox of a started agent. */
struct keeper {
	char *agent;
	pid_t pid;
	int pidfd;
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

static struct user_state {
	struct fleetd *f;
	struct cgroup_host *cg;
	struct keeper *keepers;
	struct exec_handle *execs;
	struct pending_op *ops;
} *us;

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

/* The first id in [min, max] that is neither a uid nor a gid; -ENOSPC. */
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

static void on_keeper_exit(evutil_socket_t fd, short what, void *arg)
{
	struct keeper *k = arg;
	_cleanup_free_ char *agent = xstrdup(k->agent);

	if (!keeper_alive(agent))
		log_debug("agent '%s': keeper exited", agent);
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
		*why = xasprintf("cannot create a sandbox (PID and mount namespaces): %s", strerror(-r));
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
	return 0;
}

static int user_init(struct fleetd *f, char **why)
{
	_cleanup_free_ char *cg = NULL;
	int r;

	if ((r = ensure_init(f, why)) < 0)
		return r;
	cg = cgroup_host_describe(us->cg);
	log_info("user backend: cgroups: %s", cg);
	if (!cgroup_host_has(us->cg, "memory") || !cgroup_host_has(us->cg, "pids"))
		log_warning("user backend: no memory or pids cgroup; limits rely on rlimits only");
	return 0;
}

static void exec_finish(struct exec_handle *h);
static void op_finish(struct pending_op *op);
static void stop_force(struct pending_op *op);

static void user_shutdown(struct fleetd *f)
{
	if (!us)
		return;
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
	long id = 0;
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
	if (cgroup_host_usable(us->cg) && cgroup_exists(us->cg, a->name)) {
		/* Left over from a crash: reuse nothing, but an empty one is safe to drop. */
		if (cgroup_count(us->cg, a->name) > 0 || cgroup_remove(us->cg, a->name) < 0) {
			*why = xasprintf("a cgroup for '%s' already exists and has processes", a->name);
			return -EBUSY;
		}
	}

	/* Another fleetd may take the same id between the scan and useradd: try the next one. */
	for (int attempt = 0;; attempt++) {
		char ids[32];
		_cleanup_free_ char *gecos = xasprintf("fleet agent %s", a->name);

		if (pick_id(min, max, &id) < 0) {
			*why = xasprintf("no free uid/gid left in user_uid_min..user_uid_max (%ld..%ld)", min, max);
			return -ENOSPC;
		}
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
	if (uid != 0 && (r = remove_user(user, ret ? NULL : why)) < 0 && ret == 0)
		ret = r;
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

static int user_start(struct fleetd *f, const struct agent *a, backend_done_fn done, void *userdata, char **why)
{
	struct user_launch_spec spec = { .stdin_fd = -1, .stdout_fd = -1, .stderr_fd = -1 };
	struct user_launch_proc proc;
	struct user_launch_report rep = { 0 };
	struct keeper *k;
	uid_t uid;
	ssize_t n;
	int r;

	if ((r = ensure_init(f, why)) < 0)
		return r;
	if ((r = agent_user(f, a->name, &uid)) < 0) {
		*why = xstrdup("has no user environment (not provisioned?)");
		return r == -EPERM ? -ENOENT : r;
	}
	if (keeper_alive(a->name)) {
		op_schedule(f, a->name, uid, false, 0, done, userdata);
		return 0;
	}
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
	op_schedule(f, a->name, uid, false, 0, done, userdata);
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
	if ((r = agent_user(f, a->name, &uid)) < 0) {
		*why = xstrdup("has no user environment (not provisioned?)");
		return r == -EPERM ? -ENOENT : r;
	}
	/* Clean: SIGTERM to every sandbox init, which passes it to everything in its namespace. */
	if ((k = *keeper_find(a->name)))
		(void)syscall(SYS_pidfd_send_signal, k->pidfd, SIGTERM, NULL, 0);
	for (struct exec_handle *h = us->execs; h; h = h->next)
		if (!h->reaped && strcmp(h->agent, a->name) == 0)
			(void)syscall(SYS_pidfd_send_signal, h->proc.pidfd, SIGTERM, NULL, 0);
	op_schedule(f, a->name, uid, true, timeout_s, done, userdata);
	return 0;
}

static int user_state(struct fleetd *f, const struct agent *a, enum agent_state *ret)
{
	_cleanup_free_ char *why = NULL;
	uid_t uid;
	int r;

	if ((r = ensure_init(f, &why)) < 0)
		return r;
	if ((r = agent_user(f, a->name, &uid)) < 0)
		return r == -EPERM ? -ENOENT : r;
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

static void on_timeout(evutil_socket_t fd, short what, void *arg)
{
	struct exec_handle *h = arg;

	h->timed_out = true;
	h->killed = true;
	(void)syscall(SYS_pidfd_send_signal, h->proc.pidfd, SIGKILL, NULL, 0);
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
	if ((r = agent_user(f, a->name, &uid)) < 0) {
		*why = xstrdup("has no user environment (not provisioned?)");
		return r == -EPERM ? -ENOENT : r;
	}
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
	if (!h || h->reaped)
		return;
	h->killed = true;
	(void)syscall(SYS_pidfd_send_signal, h->proc.pidfd, SIGKILL, NULL, 0);
}

const struct backend_ops backend_user_ops = {
	.name = "user",
	.init = user_init,
	.shutdown = user_shutdown,
	.provision = user_provision,
	.destroy = user_destroy,
	.start = user_start,
	.stop = user_stop,
	.state = user_state,
	.exec = user_exec,
	.exec_cancel = user_exec_cancel,
};
