/*
 * user_launch: see user_launch.h. The parent half prepares every string
 * and fd; the child half (launch_init, launch_payload) makes only system
 * calls, through syscall(2) where glibc would broadcast to threads that do
 * not exist in the child (setgroups, setresuid, setresgid).
 */
#include "user/launch.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <net/if.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>

#include "backend/spawn.h"
#include "common/names.h"
#include "common/util.h"

#ifndef P_PIDFD
#define P_PIDFD 3
#endif
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

static const char *const stage_names[LAUNCH_STAGE__COUNT] = {
	[LAUNCH_STAGE_CGROUP] = "join cgroup",
	[LAUNCH_STAGE_MOUNT] = "make mounts private",
	[LAUNCH_STAGE_PROC] = "mount /proc",
	[LAUNCH_STAGE_TMP] = "mount private /tmp",
	[LAUNCH_STAGE_RLIMIT] = "set rlimits",
	[LAUNCH_STAGE_FORK] = "fork",
	[LAUNCH_STAGE_FDS] = "set up fds",
	[LAUNCH_STAGE_GROUPS] = "drop groups",
	[LAUNCH_STAGE_GID] = "set gid",
	[LAUNCH_STAGE_UID] = "set uid",
	[LAUNCH_STAGE_NO_NEW_PRIVS] = "set no_new_privs",
	[LAUNCH_STAGE_CHDIR] = "enter home",
	[LAUNCH_STAGE_EXEC] = "execute",
	[LAUNCH_STAGE_NET] = "bring up loopback",
	[LAUNCH_STAGE_RUN] = "mount private /run",
	[LAUNCH_STAGE_SECRETS] = "write the secret files",
	[LAUNCH_STAGE_DNS] = "set up /etc/resolv.conf",
};

const char *user_launch_stage_to_string(enum user_launch_stage s)
{
	return s >= 0 && s < LAUNCH_STAGE__COUNT ? stage_names[s] : "?";
}

static bool env_is_fixed(const char *e)
{
	static const char *const fixed[] = { "HOME=", "USER=", "PATH=", "FLEET_AGENT=" };

	for (size_t i = 0; i < ARRAY_SIZE(fixed); i++)
		if (strncmp(e, fixed[i], strlen(fixed[i])) == 0)
			return true;
	return false;
}

int user_launch_env(const char *agent, const char *user, const char *home,
		    const char *const *extra, char ***ret)
{
	size_t n = 0, k = 0;
	char **env;

	for (; extra && extra[n]; n++)
		if (!env_entry_valid(extra[n]))
			return -EINVAL;
	env = xcalloc(n + 5, sizeof(*env));
	for (size_t i = 0; i < n; i++)
		if (!env_is_fixed(extra[i]))	/* what identifies the agent is not the caller's to choose */
			env[k++] = xstrdup(extra[i]);
	env[k++] = xasprintf("HOME=%s", home);
	env[k++] = xasprintf("USER=%s", user);
	env[k++] = xstrdup("PATH=" USER_LAUNCH_PATH);
	env[k++] = xasprintf("FLEET_AGENT=%s", agent);
	*ret = env;
	return 0;
}

void user_launch_env_free(char **env)
{
	for (size_t i = 0; env && env[i]; i++) {
		explicit_bzero(env[i], strlen(env[i]));	/* the agent's secrets are among them */
		free(env[i]);
	}
	free(env);
}

static pid_t clone3_pidfd(uint64_t flags, int *pidfd)
{
	struct clone_args args = {
		.flags = flags | CLONE_PIDFD,
		.pidfd = (uint64_t)(uintptr_t)pidfd,
		.exit_signal = 0,	/* a clone child: invisible to waitpid(-1) elsewhere in fleetd */
	};

	return (pid_t)syscall(SYS_clone3, &args, sizeof(args));
}

pid_t user_launch_fork(int *pidfd)
{
	return clone3_pidfd(0, pidfd);
}

/* ---- the child: system calls only from here to the end of launch_init ---- */

/* What the child needs, computed by the parent. */
struct launch_prep {
	const struct user_launch_spec *spec;
	int report_fd;
	char tmp_opts[160];	/* the agent's private tmpfs: /tmp, /var/tmp, /dev/shm */
	char run_opts[160];	/* a root-owned 0755 tmpfs for /run */
	char shared_opts[160];	/* a root-owned 1777 tmpfs for spec->shared_dirs */
	char secrets_opts[160];	/* the agent's 0700 tmpfs for spec->files, just big enough */
	char home_copy[4096];	/* writable copy of spec->home */
};

static volatile sig_atomic_t got_term;

static void on_term(int sig)
{
	got_term = 1;
}

static void on_chld(int sig)
{
}

_noreturn_ static void child_fail(int fd, enum user_launch_stage stage, int err)
{
	struct user_launch_report r = { LAUNCH_REPORT_FAILED, (int32_t)stage, err };

	(void)!write(fd, &r, sizeof(r));
	_exit(127);
}

static void close_from(int lowest)
{
	if (syscall(SYS_close_range, (unsigned)lowest, ~0U, 0) == 0)
		return;
	struct rlimit rl;
	long max = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ? (long)rl.rlim_cur : 65536;
	for (long fd = lowest; fd < max; fd++)
		close((int)fd);
}

/* Run argv[0] from USER_LAUNCH_PATH with a fixed environment; returns only on failure, with errno. */
static int exec_search(const char *const *argv, const char *const *envp)
{
	const char *file = argv[0], *p = USER_LAUNCH_PATH;
	char buf[4096];
	bool eacces = false;

	if (strchr(file, '/')) {
		execve(file, (char *const *)argv, (char *const *)envp);
		return errno;
	}
	if (strlen(file) > sizeof(buf) - 64)
		return ENAMETOOLONG;
	while (*p) {
		size_t dl = strcspn(p, ":"), fl = strlen(file);

		memcpy(buf, p, dl);
		buf[dl] = '/';
		memcpy(buf + dl + 1, file, fl + 1);
		execve(buf, (char *const *)argv, (char *const *)envp);
		if (errno == EACCES)
			eacces = true;
		else if (errno != ENOENT && errno != ENOTDIR)
			return errno;
		p += dl + (p[dl] == ':');
	}
	return eacces ? EACCES : ENOENT;
}

_noreturn_ static void launch_payload(const struct launch_prep *p)
{
	const struct user_launch_spec *s = p->spec;
	int src[4] = { s->stdin_fd, s->stdout_fd, s->stderr_fd, p->report_fd };
	struct sigaction dfl = { .sa_handler = SIG_DFL };
	sigset_t none;
	int devnull = -1, err;

	/* fleetd ignores SIGPIPE; an ignored signal would survive execve. */
	for (int sig = 1; sig < NSIG; sig++)
		(void)sigaction(sig, &dfl, NULL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	setsid();

	/* Lift every source above 10 first, so dup2 onto 0..3 cannot clobber one. */
	for (int i = 0; i < 4; i++) {
		if (src[i] < 0) {
			if (devnull < 0 && (devnull = open("/dev/null", O_RDWR | O_CLOEXEC)) < 0)
				child_fail(p->report_fd, LAUNCH_STAGE_FDS, errno);
			src[i] = devnull;
		}
		if ((src[i] = fcntl(src[i], F_DUPFD_CLOEXEC, 10)) < 0)
			child_fail(p->report_fd, LAUNCH_STAGE_FDS, errno);
	}
	for (int i = 0; i < 3; i++)
		if (dup2(src[i], i) < 0)
			child_fail(src[3], LAUNCH_STAGE_FDS, errno);
	if (dup3(src[3], 3, O_CLOEXEC) < 0)	/* the report fd: gone at execve */
		child_fail(src[3], LAUNCH_STAGE_FDS, errno);
	close_from(4);

	if (syscall(SYS_setgroups, 0, NULL) < 0)
		child_fail(3, LAUNCH_STAGE_GROUPS, errno);
	if (syscall(SYS_setresgid, s->gid, s->gid, s->gid) < 0)
		child_fail(3, LAUNCH_STAGE_GID, errno);
	if (syscall(SYS_setresuid, s->uid, s->uid, s->uid) < 0)
		child_fail(3, LAUNCH_STAGE_UID, errno);
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		child_fail(3, LAUNCH_STAGE_NO_NEW_PRIVS, errno);
	umask(077);
	if (chdir(s->home) < 0)
		child_fail(3, LAUNCH_STAGE_CHDIR, errno);
	err = exec_search(s->argv, s->envp);
	child_fail(3, LAUNCH_STAGE_EXEC, err);
}

/* "/proc/self/fd/N" without snprintf (not async-signal-safe). */
static void proc_fd_path(char *buf, int fd)
{
	char digits[16];
	size_t n = 0;

	memcpy(buf, "/proc/self/fd/", 14);
	do
		digits[n++] = (char)('0' + fd % 10);
	while ((fd /= 10) > 0);
	for (size_t i = 0; i < n; i++)
		buf[14 + i] = digits[n - 1 - i];
	buf[14 + n] = '\0';
}

static void set_limit(int fd, int resource, long value)
{
	struct rlimit rl = { (rlim_t)value, (rlim_t)value };

	if (setrlimit(resource, &rl) < 0)
		child_fail(fd, LAUNCH_STAGE_RLIMIT, errno);
}

/*
 * Mount a fresh tmpfs with opts on dir. A home below dir (a test's state
 * dir in /tmp) would vanish under it: it is bound back in at the same path.
 */
static void mount_private(const struct launch_prep *p, const char *dir, const char *opts, enum user_launch_stage stage)
{
	const struct user_launch_spec *s = p->spec;
	size_t dl = strlen(dir);
	bool home_below = strncmp(s->home, dir, dl) == 0 && s->home[dl] == '/';
	int rep = p->report_fd, home_fd = -1;

	if (home_below && (home_fd = open(s->home, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0)
		child_fail(rep, stage, errno);
	if (mount("tmpfs", dir, "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0)
		child_fail(rep, stage, errno);
	if (home_fd >= 0) {
		char path[sizeof(p->home_copy)], fdpath[64];

		memcpy(path, p->home_copy, sizeof(path));
		for (char *c = path + dl + 1; *c; c++)
			if (*c == '/') {
				*c = '\0';
				/* chmod too: fleetd's umask (077) would leave the agent unable to traverse */
				if (mkdir(path, 0711) == 0)
					(void)chmod(path, 0711);
				*c = '/';
			}
		(void)mkdir(path, 0700);
		proc_fd_path(fdpath, home_fd);
		if (mount(fdpath, path, NULL, MS_BIND | MS_REC, NULL) < 0)
			child_fail(rep, stage, errno);
		close(home_fd);
	}
}

/* Make path (a directory or a link to one, e.g. /var/run) show target, unless it already resolves into it. */
/*
 * The secret files: a tmpfs of the agent's (0700) on USER_SECRETS_DIR in
 * the fresh /run, each file 0400 and the agent's. In this mount namespace
 * only: it goes when the sandbox does, and never touches a disk.
 */
static void write_secret_files(const struct launch_prep *p)
{
	const struct user_launch_spec *s = p->spec;
	int rep = p->report_fd, dfd;

	if (mkdir(USER_SECRETS_DIR, 0700) < 0 ||
	    mount("tmpfs", USER_SECRETS_DIR, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, p->secrets_opts) < 0 ||
	    (dfd = open(USER_SECRETS_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
		child_fail(rep, LAUNCH_STAGE_SECRETS, errno);
	for (size_t i = 0; i < s->n_files; i++) {
		const unsigned char *d = s->files[i].data;
		size_t left = s->files[i].len;
		int fd = openat(dfd, s->files[i].name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0400);

		if (fd < 0)
			child_fail(rep, LAUNCH_STAGE_SECRETS, errno);
		while (left > 0) {
			ssize_t w = write(fd, d, left);

			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0)
				child_fail(rep, LAUNCH_STAGE_SECRETS, w < 0 ? errno : EIO);
			d += w;
			left -= (size_t)w;
		}
		if (fchown(fd, s->uid, s->gid) < 0)
			child_fail(rep, LAUNCH_STAGE_SECRETS, errno);
		close(fd);
	}
	close(dfd);
}

static void bind_alias(int rep, const char *target, const char *path)
{
	struct stat t, st;

	if (stat(path, &st) < 0)
		return;	/* not on this host */
	if (stat(target, &t) < 0)
		child_fail(rep, LAUNCH_STAGE_RUN, errno);
	if (st.st_dev == t.st_dev && st.st_ino == t.st_ino)
		return;
	if (mount(target, path, NULL, MS_BIND, NULL) < 0)	/* mount(2) follows a link in path */
		child_fail(rep, LAUNCH_STAGE_RUN, errno);
}

/* path with "." and ".." taken out, lexically (no link is looked at); false if it does not fit. */
static bool normalize_path(const char *path, char *out, size_t size)
{
	size_t len = 0;

	for (const char *p = path; *p;) {
		size_t n = strcspn(p, "/");

		if (n == 2 && p[0] == '.' && p[1] == '.') {
			while (len > 0 && out[--len] != '/')
				;
		} else if (n > 0 && !(n == 1 && p[0] == '.')) {
			if (len + 1 + n + 1 > size)
				return false;
			out[len++] = '/';
			memcpy(out + len, p, n);
			len += n;
		}
		p += n + (p[n] == '/');
	}
	if (len == 0)
		out[len++] = '/';
	out[len] = '\0';
	return true;
}

/* mkdir -p of path's parent directories (0755, root's: the agent may read, not write). */
static int make_parents(char *path)
{
	for (char *c = path + 1; (c = strchr(c, '/')); c++) {
		*c = '\0';
		if (mkdir(path, 0755) < 0 && errno != EEXIST) {
			*c = '/';
			return -1;
		}
		*c = '/';
	}
	return 0;
}

/*
 * The agent's resolv.conf (its NAT network cannot reach the host's
 * loopback resolver). Where the host's /etc/resolv.conf is a link into
 * /run (systemd-resolved's stub, resolvconf), the link's target is made in
 * this sandbox's fresh /run, where it would otherwise dangle; else a file
 * in /run is bound, read-only, over /etc/resolv.conf. In this mount
 * namespace only; the file is root's, 0644. Host paths only: the agent
 * controls none of them.
 */
static void install_resolv_conf(const struct launch_prep *p)
{
	const char *text = p->spec->resolv_conf;
	char link[PATH_MAX], full[PATH_MAX + 8], target[PATH_MAX] = "/run/fleet-resolv.conf";
	ssize_t n = readlink("/etc/resolv.conf", link, sizeof(link) - 1);
	bool bind = true;
	size_t left = strlen(text);
	struct stat st;
	int rep = p->report_fd, fd;

	if (n > 0) {
		link[n] = '\0';
		snprintf(full, sizeof(full), "%s%s", link[0] == '/' ? "" : "/etc/", link);
		if (normalize_path(full, target, sizeof(target)) &&
		    (strncmp(target, "/run/", 5) == 0 || strncmp(target, "/var/run/", 9) == 0))
			bind = false;
		else
			snprintf(target, sizeof(target), "%s", "/run/fleet-resolv.conf");
	} else if (lstat("/etc/resolv.conf", &st) < 0) {
		return;	/* the host has none: there is no file to show it on */
	}
	if (!bind && make_parents(target) < 0)
		child_fail(rep, LAUNCH_STAGE_DNS, errno);
	fd = open(target, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0 || fchmod(fd, 0644) < 0)
		child_fail(rep, LAUNCH_STAGE_DNS, errno);
	while (left > 0) {
		ssize_t w = write(fd, text, left);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			child_fail(rep, LAUNCH_STAGE_DNS, w < 0 ? errno : EIO);
		text += w;
		left -= (size_t)w;
	}
	close(fd);
	if (bind && (mount(target, "/etc/resolv.conf", NULL, MS_BIND, NULL) < 0 ||
		     mount(NULL, "/etc/resolv.conf", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) < 0))
		child_fail(rep, LAUNCH_STAGE_DNS, errno);
}

/* The new network namespace has only lo, down: bring it up, so an agent's own local services work. */
static void loopback_up(int rep)
{
	struct ifreq ifr = { 0 };
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		child_fail(rep, LAUNCH_STAGE_NET, errno);
	memcpy(ifr.ifr_name, "lo", 3);
	if (ioctl(fd, SIOCGIFFLAGS, &ifr) < 0)
		child_fail(rep, LAUNCH_STAGE_NET, errno);
	ifr.ifr_flags |= IFF_UP;
	if (ioctl(fd, SIOCSIFFLAGS, &ifr) < 0)
		child_fail(rep, LAUNCH_STAGE_NET, errno);
	close(fd);
}

/* PID 1 of the sandbox. Runs as root in the new namespaces; never runs agent code. */
_noreturn_ static void launch_init(const struct launch_prep *p)
{
	const struct user_launch_spec *s = p->spec;
	/* Every world-writable directory of a usual host gets a fresh one here; /run/lock (and /var/lock) below. */
	static const char *const private_dirs[] = { "/tmp", "/var/tmp", "/dev/shm" };
	struct sigaction sa_term = { .sa_handler = on_term }, sa_chld = { .sa_handler = on_chld };
	sigset_t block, none;
	int rep = p->report_fd;
	pid_t payload = 0;
	struct stat st;

	if (s->die_with_parent)
		(void)prctl(PR_SET_PDEATHSIG, SIGKILL);
	(void)prctl(PR_SET_NAME, "fleet-init", 0, 0, 0);

	for (size_t i = 0; i < s->n_cgroup_fds; i++)
		if (write(s->cgroup_fds[i], "0", 1) < 0)
			child_fail(rep, LAUNCH_STAGE_CGROUP, errno);
	/* A NAT agent's own persistent namespace replaces the empty one (before the mounts: path is the host's). */
	if (s->netns_path) {
		int nsfd = open(s->netns_path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);

		if (nsfd < 0 || syscall(SYS_setns, nsfd, CLONE_NEWNET) < 0)
			child_fail(rep, LAUNCH_STAGE_NET, errno);
		close(nsfd);
	}
	loopback_up(rep);

	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		child_fail(rep, LAUNCH_STAGE_MOUNT, errno);
	/* A fresh proc for the new PID namespace: only this sandbox's processes, and of those only the agent's own. */
	if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=invisible") < 0 &&
	    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=2") < 0)
		child_fail(rep, LAUNCH_STAGE_PROC, errno);
	for (size_t i = 0; i < ARRAY_SIZE(private_dirs); i++) {
		if (i > 0 && stat(private_dirs[i], &st) < 0)
			continue;	/* /var/tmp or /dev/shm may be missing on a small host */
		mount_private(p, private_dirs[i], p->tmp_opts, LAUNCH_STAGE_TMP);
	}
	/*
	 * A fresh /run: no host daemon's socket (libvirt, D-Bus, fleetd) exists
	 * in it, and its only content is an empty, world-writable /run/lock of
	 * this sandbox. /var/run and /var/lock resolve into it.
	 */
	mount_private(p, "/run", p->run_opts, LAUNCH_STAGE_RUN);
	if (mkdir("/run/lock", 01777) < 0 || chmod("/run/lock", 01777) < 0)	/* chmod: our umask is fleetd's */
		child_fail(rep, LAUNCH_STAGE_RUN, errno);
	if (s->n_files > 0)
		write_secret_files(p);
	bind_alias(rep, "/run", "/var/run");
	bind_alias(rep, "/run/lock", "/var/lock");
	if (s->resolv_conf)
		install_resolv_conf(p);
	/* Whatever else is world-writable on this host (found by the caller): empty, and this sandbox's own. */
	for (size_t i = 0; i < s->n_shared_dirs; i++)
		if (lstat(s->shared_dirs[i], &st) == 0 && S_ISDIR(st.st_mode))
			mount_private(p, s->shared_dirs[i], p->shared_opts, LAUNCH_STAGE_TMP);
	/* POSIX message queues of the new IPC namespace, not the host's, where a host mounts them. */
	if (stat("/dev/mqueue", &st) == 0 &&
	    mount("mqueue", "/dev/mqueue", "mqueue", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
		child_fail(rep, LAUNCH_STAGE_TMP, errno);

	set_limit(rep, RLIMIT_CORE, 0);
	if (s->rlimit_nofile > 0)
		set_limit(rep, RLIMIT_NOFILE, s->rlimit_nofile);
	if (s->rlimit_nproc > 0)
		set_limit(rep, RLIMIT_NPROC, s->rlimit_nproc);

	/* SIGTERM and SIGCHLD only wake sigsuspend below, so none is lost. */
	sigemptyset(&block);
	sigaddset(&block, SIGTERM);
	sigaddset(&block, SIGCHLD);
	sigprocmask(SIG_BLOCK, &block, NULL);
	sigaction(SIGTERM, &sa_term, NULL);
	sigaction(SIGCHLD, &sa_chld, NULL);

	if (s->argv) {
		struct clone_args args = { .exit_signal = SIGCHLD };

		payload = (pid_t)syscall(SYS_clone3, &args, sizeof(args));
		if (payload < 0)
			child_fail(rep, LAUNCH_STAGE_FORK, errno);
		if (payload == 0)
			launch_payload(p);
	}
	{
		struct user_launch_report r = { LAUNCH_REPORT_READY, 0, 0 };
		(void)!write(rep, &r, sizeof(r));
	}
	/* Keep nothing of the agent's: no stdio, no cgroup files, only the report pipe. */
	if (rep > 0)
		(void)syscall(SYS_close_range, 0U, (unsigned)rep - 1, 0);
	close_from(rep + 1);

	sigemptyset(&none);
	for (;;) {
		int status;
		pid_t w;

		while ((w = waitpid(-1, &status, WNOHANG | __WALL)) > 0)
			if (w == payload) {
				struct user_launch_report r = { LAUNCH_REPORT_EXITED, 0, status };

				(void)!write(rep, &r, sizeof(r));
				_exit(0);	/* the kernel now kills whatever is left in the namespace */
			}
		if (got_term) {
			got_term = 0;
			if (!payload)
				_exit(0);
			(void)kill(-1, SIGTERM);	/* every process of this namespace but us */
		}
		sigsuspend(&none);
	}
}

/* ---- the parent ---- */

int user_launch(const struct user_launch_spec *spec, struct user_launch_proc *ret)
{
	struct launch_prep prep = { .spec = spec };
	int rep[2], pidfd = -1;
	long size = spec->tmp_size_mib > 0 ? spec->tmp_size_mib : 64;
	pid_t pid;

	if (!spec->home || spec->home[0] != '/' || strlen(spec->home) >= sizeof(prep.home_copy) ||
	    !spec->envp || (spec->argv && !spec->argv[0]))
		return -EINVAL;
	memcpy(prep.home_copy, spec->home, strlen(spec->home) + 1);
	snprintf(prep.tmp_opts, sizeof(prep.tmp_opts), "mode=0700,uid=%lu,gid=%lu,size=%ldm,nr_inodes=%ld",
		 (unsigned long)spec->uid, (unsigned long)spec->gid, size, size * 256);
	snprintf(prep.run_opts, sizeof(prep.run_opts), "mode=0755,uid=0,gid=0,size=%ldm,nr_inodes=%ld", size, size * 256);
	snprintf(prep.shared_opts, sizeof(prep.shared_opts), "mode=1777,uid=0,gid=0,size=%ldm,nr_inodes=%ld", size, size * 256);
	{
		size_t bytes = 4096;	/* a page per file at least: tmpfs counts pages */

		for (size_t i = 0; i < spec->n_files; i++)
			bytes += (spec->files[i].len + 4095) / 4096 * 4096 + 4096;
		snprintf(prep.secrets_opts, sizeof(prep.secrets_opts), "mode=0700,uid=%lu,gid=%lu,size=%zu,nr_inodes=%zu",
			 (unsigned long)spec->uid, (unsigned long)spec->gid, bytes, spec->n_files + 8);
	}
	if (pipe2(rep, O_CLOEXEC) < 0)
		return -errno;
	prep.report_fd = rep[1];

	/* CLONE_NEWNET: no host network at all (loopback services, abstract sockets, metadata service). */
	pid = clone3_pidfd(CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWNET, &pidfd);
	if (pid < 0) {
		int r = -errno;
		close(rep[0]);
		close(rep[1]);
		return r;
	}
	if (pid == 0)
		launch_init(&prep);
	close(rep[1]);
	ret->pid = pid;
	ret->pidfd = pidfd;
	ret->report_fd = rep[0];
	return 0;
}

bool user_launch_uid_alive(uid_t uid)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	bool found = false;

	if (!d)
		return false;
	while (!found && (de = readdir(d))) {
		char path[300], line[256];
		bool zombie = false;
		FILE *f;

		if (de->d_name[0] < '1' || de->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/status", de->d_name);
		if (!(f = fopen(path, "re")))
			continue;	/* gone meanwhile */
		while (fgets(line, sizeof(line), f)) {
			unsigned long r, e, sv, fs;

			if (strncmp(line, "State:", 6) == 0 && strchr(line, 'Z'))
				zombie = true;	/* runs nothing; its parent reaps it */
			else if (sscanf(line, "Uid: %lu %lu %lu %lu", &r, &e, &sv, &fs) == 4) {
				found = !zombie && (r == uid || e == uid || sv == uid || fs == uid);
				break;
			}
		}
		fclose(f);
	}
	closedir(d);
	return found;
}

int user_launch_kill_uid(uid_t uid, int timeout_ms)
{
	long long deadline = now_usec() + (long long)timeout_ms * 1000;

	if (uid == 0)
		return -EINVAL;
	for (int pass = 1;; pass++) {
		int pidfd = -1, status = 0, r;
		pid_t pid;

		if (!user_launch_uid_alive(uid))
			return pass;
		if ((pid = user_launch_fork(&pidfd)) < 0)
			return -errno;
		if (pid == 0) {
			/* kill(-1) as uid reaches exactly the processes of that uid, in every namespace below ours. */
			if (syscall(SYS_setgroups, 0, NULL) < 0 || syscall(SYS_setresgid, 65534, 65534, 65534) < 0 ||
			    syscall(SYS_setresuid, uid, uid, uid) < 0)
				_exit(2);
			(void)kill(-1, SIGKILL);
			_exit(0);
		}
		r = spawn_wait(pidfd, false, &status);
		close(pidfd);
		if (r < 0)
			return r;
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			return -EPERM;
		if (now_usec() > deadline)
			return -ETIMEDOUT;
		struct timespec ts = { 0, 2000000 };
		nanosleep(&ts, NULL);
	}
}
