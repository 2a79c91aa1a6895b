/*
 * fleet-init: PID 1 of a user agent's sandbox (user/launch.h says what the
 * sandbox is). user_launch() clones fleetd into the new namespaces sharing
 * its memory (CLONE_VM | CLONE_VFORK: no copy-on-write of fleetd's heap)
 * and that child only places the fds below and execs this program, which
 * does the whole setup in its own small address space:
 *
 *   0, 1, 2   the payload's stdin, stdout, stderr
 *   3         the report pipe (struct user_launch_report records)
 *   4         a memfd: the spec as JSON (launch.c's spec_json()); a spare's
 *             command comes later, on 5, in the message itself up to
 *             USER_LAUNCH_HAND_INLINE_MAX, else in a memfd
 *   5         a memfd: the secret files' bytes, one after another (only with files);
 *             a spare's: a socket where its command comes (await_command)
 *   6...      the cgroup.procs files to join, in the spec's order
 *
 * Everything here runs as root in the sandbox's namespaces and never runs
 * agent code; the payload is cloned from here as posix_spawn does
 * (CLONE_VM | CLONE_VFORK, start_payload): nothing of ours is copied.
 * Not meant to be run by hand: without the fds above it reports nothing and
 * exits 127.
 */
#include "user/launch.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <linux/sched.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

#include "common/procstatus.h"
#include "common/util.h"

#define FD_REPORT 3
#define FD_SPEC 4
#define FD_FILES 5
#define FD_CTL 5	/* a spare's */
#define FD_CGROUP0 6
#define SPEC_MAX (64L << 20)	/* far above any argv + environment execve takes */

/* What the setup needs: the spec and the mount options derived from it. */
struct launch_prep {
	struct user_launch_spec *spec;
	int report_fd;
	char tmp_opts[160];	/* the agent's private tmpfs: /tmp, /var/tmp, /dev/shm */
	char run_opts[160];	/* a root-owned 0755 tmpfs for /run */
	char shared_opts[160];	/* a root-owned 1777 tmpfs for spec->shared_dirs */
	char secrets_opts[160];	/* the agent's 0700 tmpfs for spec->files, just big enough */
	char home_copy[4096];	/* writable copy of spec->home */
	bool ignored_known;	/* ignored holds the signals fleet-init inherited as ignored */
	uint64_t ignored;	/* bit n-1: signal n (fleetd's SIGPIPE...) */
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

/*
 * Signal sig back to its default action, through the kernel's rt_sigaction:
 * glibc's sigaction refuses its own two (32 and 33), which may reach us
 * ignored all the same. SIGKILL and SIGSTOP fail, harmlessly.
 */
static void signal_default(int sig)
{
	struct {
		void *handler;	/* SIG_DFL: NULL */
		unsigned long flags;
		void *restorer;
		uint64_t mask;
	} k = { 0 };

	(void)syscall(SYS_rt_sigaction, sig, &k, NULL, sizeof(k.mask));
}

_noreturn_ static void launch_payload(const struct launch_prep *p)
{
	const struct user_launch_spec *s = p->spec;
	int src[4] = { s->stdin_fd, s->stdout_fd, s->stderr_fd, p->report_fd };
	sigset_t none;
	int devnull = -1, err;

	/*
	 * fleetd ignores SIGPIPE; an ignored signal would survive execve. Our own
	 * handlers go too: one must not run here between the unblock below and
	 * execve (which resets them anyway), on this stack and in PID 1's memory,
	 * which we share until then (start_payload). Only those, when main()
	 * could tell which were ignored: every signal one by one is 64 system calls.
	 */
	if (p->ignored_known) {
		signal_default(SIGTERM);
		signal_default(SIGCHLD);
		for (int sig = 1; sig <= 64; sig++)
			if (p->ignored & (UINT64_C(1) << (sig - 1)))
				signal_default(sig);
	} else {
		for (int sig = 1; sig <= 64; sig++)
			signal_default(sig);
	}
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	setsid();

	/*
	 * A source at 0..3 could be clobbered by a dup2 onto its number (or kept
	 * close-on-exec by a dup2 onto itself): lift every source above 10 first
	 * then. The usual case has none (a spare's come as it waited: above 3;
	 * the report fd is 3 already), and each move is a system call.
	 */
	for (int i = 0; i < 4; i++)
		if (src[i] < 0) {
			if (devnull < 0 && (devnull = open("/dev/null", O_RDWR | O_CLOEXEC)) < 0)
				child_fail(p->report_fd, LAUNCH_STAGE_FDS, errno);
			src[i] = devnull;
		}
	if (src[0] <= 3 || src[1] <= 3 || src[2] <= 3 || src[3] < 3)
		for (int i = 0; i < 4; i++)
			if ((src[i] = fcntl(src[i], F_DUPFD_CLOEXEC, 10)) < 0)
				child_fail(p->report_fd, LAUNCH_STAGE_FDS, errno);
	for (int i = 0; i < 3; i++)
		if (dup2(src[i], i) < 0)
			child_fail(src[3], LAUNCH_STAGE_FDS, errno);
	/* The report fd: gone at execve. */
	if (src[3] == 3 ? fcntl(3, F_SETFD, FD_CLOEXEC) < 0 : dup3(src[3], 3, O_CLOEXEC) < 0)
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

static int payload_main(void *arg)
{
	launch_payload(arg);
}

/* launch_payload and exec_search use about 5 KiB; the rest is room for libc's wrappers and sanitizers. */
enum { STACK_SIZE = 64 * 1024, GUARD = 4096, STACK_WARM = 16 * 1024 };
static char *payload_stack;	/* mapped ahead by a spare (payload_stack_map), else by start_payload */

/*
 * The payload's stack, its lowest page a guard: an overflow faults (SIGSEGV
 * kills the child) instead of writing over our memory. A spare maps it
 * while it waits, and touches the top pages the child's frames use: each
 * first touch is a page fault the command's start would wait for.
 */
static void payload_stack_map(int report_fd, bool warm)
{
	char *stack = mmap(NULL, STACK_SIZE + GUARD, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);

	if (stack == MAP_FAILED)
		child_fail(report_fd, LAUNCH_STAGE_FORK, errno);
	if (mprotect(stack, GUARD, PROT_NONE) < 0)
		child_fail(report_fd, LAUNCH_STAGE_FORK, errno);
	if (warm)
		memset(stack + GUARD + STACK_SIZE - STACK_WARM, 0, STACK_WARM);
	payload_stack = stack;
}

/*
 * Start the command as posix_spawn does: clone(CLONE_VM | CLONE_VFORK), the
 * child on a stack of its own in our memory until its execve, so nothing of
 * ours is copied (a fork copied our page tables and then took copy-on-write
 * faults in both). We are suspended until the child's execve or _exit,
 * which is why the READY report now follows the command's execve. The
 * child writes nothing of ours but errno (launch_payload: system calls,
 * locals, no malloc) and reports a failure through the report fd as a
 * forked one did. Every signal is blocked across the clone, and the child
 * resets the handlers (ours: on_term, on_chld) before it unblocks any: a
 * handler of ours must not run on its stack, in our memory. The stack is
 * returned once the child no longer uses it (execve or _exit: the vfork
 * wait is over). Returns the child's PID; a failure to clone is reported
 * here, as the fork's was.
 */
static pid_t start_payload(struct launch_prep *p)
{
	sigset_t all, old;
	char *stack;
	pid_t pid;
	int err = 0;

	if (!payload_stack)
		payload_stack_map(p->report_fd, false);
	stack = payload_stack;
	payload_stack = NULL;
	sigfillset(&all);
	sigprocmask(SIG_SETMASK, &all, &old);
	pid = clone(payload_main, stack + GUARD + STACK_SIZE, CLONE_VM | CLONE_VFORK | SIGCHLD, p);
	if (pid < 0)
		err = errno;
	sigprocmask(SIG_SETMASK, &old, NULL);
#if defined(__SANITIZE_ADDRESS__)
	/* The child's frames never returned (execve): their redzones' poison must not outlive the mapping. */
	ASAN_UNPOISON_MEMORY_REGION(stack + GUARD, STACK_SIZE);
#endif
	(void)munmap(stack, STACK_SIZE + GUARD);
	if (pid < 0)
		child_fail(p->report_fd, LAUNCH_STAGE_FORK, err);
	return pid;
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

/* The mount options of the secret files' tmpfs: just big enough for them. */
static void prep_secrets_opts(struct launch_prep *p)
{
	const struct user_launch_spec *s = p->spec;
	size_t bytes = 4096;	/* a page per file at least: tmpfs counts pages */

	for (size_t i = 0; i < s->n_files; i++)
		bytes += (s->files[i].len + 4095) / 4096 * 4096 + 4096;
	snprintf(p->secrets_opts, sizeof(p->secrets_opts), "mode=0700,uid=%lu,gid=%lu,size=%zu,nr_inodes=%zu",
		 (unsigned long)s->uid, (unsigned long)s->gid, bytes, s->n_files + 8);
}

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

/*
 * fleetd's agentd, opened by its host path before any private mount can
 * hide it (a build tree in /tmp); -1 when the spec names none. A path of
 * fleetd's, not the agent's.
 */
static int open_agentd(const struct launch_prep *p)
{
	struct stat st;
	int fd;

	if (!p->spec->agentd_path)
		return -1;
	if ((fd = open(p->spec->agentd_path, O_PATH | O_CLOEXEC)) < 0 || fstat(fd, &st) < 0)
		child_fail(p->report_fd, LAUNCH_STAGE_AGENTD, errno);
	if (!S_ISREG(st.st_mode))
		child_fail(p->report_fd, LAUNCH_STAGE_AGENTD, EINVAL);
	return fd;
}

/* agentd_fd at USER_AGENTD_PATH in the fresh /run: read-only, in a root-owned 0755 directory. */
static void install_agentd(const struct launch_prep *p, int agentd_fd)
{
	char src[64], dir[] = USER_AGENTD_DIR;
	int rep = p->report_fd, fd;

	/* Each directory chmod'ed: our umask is fleetd's (077) and would leave the agent unable to traverse. */
	for (char *c = dir + 1;; c++) {
		bool last = *c == '\0';

		if (*c != '/' && !last)
			continue;
		*c = '\0';
		if ((mkdir(dir, 0755) < 0 && errno != EEXIST) || chmod(dir, 0755) < 0)
			child_fail(rep, LAUNCH_STAGE_AGENTD, errno);
		if (last)
			break;
		*c = '/';
	}
	if ((fd = open(USER_AGENTD_PATH, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0755)) < 0)
		child_fail(rep, LAUNCH_STAGE_AGENTD, errno);
	close(fd);
	proc_fd_path(src, agentd_fd);
	if (mount(src, USER_AGENTD_PATH, NULL, MS_BIND, NULL) < 0 ||
	    mount(NULL, USER_AGENTD_PATH, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) < 0)
		child_fail(rep, LAUNCH_STAGE_AGENTD, errno);
	close(agentd_fd);
}

/*
 * Detach dir's mount with everything mounted below it, and put back a bare
 * copy of it (nothing below) and, with keep (a path below dir), a copy of
 * keep with what is mounted below it: three or five system calls, whatever
 * the number of mounts that go. Until the detach nothing has changed: any
 * failure before it (EINVAL: no mount point there; ENOSYS: no open_tree)
 * leaves every mount as it was, and the sandbox works all the same.
 */
static void detach_keeping(int rep, const char *dir, const char *keep, enum user_launch_stage stage)
{
	int bare, kept = -1;

	if ((bare = (int)open_tree(AT_FDCWD, dir, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_SYMLINK_NOFOLLOW)) < 0)
		return;
	if ((keep && (kept = (int)open_tree(AT_FDCWD, keep, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE |
							       AT_SYMLINK_NOFOLLOW)) < 0) ||
	    umount2(dir, MNT_DETACH | UMOUNT_NOFOLLOW) < 0) {
		close(bare);
		if (kept >= 0)
			close(kept);
		return;
	}
	if (move_mount(bare, "", AT_FDCWD, dir, MOVE_MOUNT_F_EMPTY_PATH) < 0 ||
	    (kept >= 0 && move_mount(kept, "", AT_FDCWD, keep, MOVE_MOUNT_F_EMPTY_PATH) < 0))
		child_fail(rep, stage, errno);
	close(bare);
	if (kept >= 0)
		close(kept);
}

/*
 * Keep no other agent's memory store: a copy of B's store mount here kept
 * B's old file system, loop device and image alive long after fleetd
 * unmounted it (a restore, a removal), for as long as this sandbox lives
 * (a keeper: weeks). Every store is mounted below spec->users_dir, which
 * fleetd makes a mount of its own (account.c's account_users_mount), so
 * one detach takes them all: the home with its own store comes back.
 */
static void drop_other_stores(const struct launch_prep *p)
{
	const struct user_launch_spec *s = p->spec;
	size_t ul;

	if (!s->users_dir)
		return;
	ul = strlen(s->users_dir);
	if (strncmp(s->home, s->users_dir, ul) != 0 || s->home[ul] != '/')
		return;	/* a home elsewhere (the host probe's "/"): nothing to keep from below users */
	detach_keeping(p->report_fd, s->users_dir, s->home, LAUNCH_STAGE_STORES);
}

/*
 * Nor any agent's network namespace mount (<state_dir>/netns/NAME, every
 * NAT agent's in fleetd's namespace): a copy of B's here is a handle on
 * B's network (its veth end, addresses, nft state) for as long as this
 * sandbox lives, and every sandbox copied one per NAT agent. This sandbox
 * joined its own already (setns, by an fd since closed), and nothing here
 * opens the path again: none of them comes back (netns.c's netns_dir_mount).
 */
static void drop_netns_mounts(const struct launch_prep *p)
{
	if (p->spec->netns_dir)
		detach_keeping(p->report_fd, p->spec->netns_dir, NULL, LAUNCH_STAGE_NETNS);
}

static void await_command(struct launch_prep *p);

/* PID 1 of the sandbox. Runs as root in the new namespaces; never runs agent code. */
_noreturn_ static void launch_init(struct launch_prep *p)
{
	const struct user_launch_spec *s = p->spec;
	/* Every world-writable directory of a usual host gets a fresh one here; /run/lock (and /var/lock) below. */
	static const char *const private_dirs[] = { "/tmp", "/var/tmp", "/dev/shm" };
	sigset_t none;
	int rep = p->report_fd, agentd_fd;
	pid_t payload = 0;
	struct stat st;

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

	agentd_fd = open_agentd(p);
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		child_fail(rep, LAUNCH_STAGE_MOUNT, errno);
	/* A fresh proc for the new PID namespace: only this sandbox's processes, and of those only the agent's own. */
	if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=invisible") < 0 &&
	    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=2") < 0)
		child_fail(rep, LAUNCH_STAGE_PROC, errno);
	/* Before the private /tmp: a home below /tmp (a test's) is bound back into it from what this leaves. */
	drop_other_stores(p);
	drop_netns_mounts(p);
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
	if (agentd_fd >= 0)
		install_agentd(p, agentd_fd);
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

	/* A spare is set up: now it waits for its one command (and that command's secret files). */
	if (s->spare)
		await_command(p);

	if (s->argv) {
		payload = start_payload(p);
		/* A spare that took its command is a sandbox like any other; only now, with a child (is_keeper). */
		if (s->spare)
			(void)prctl(PR_SET_NAME, "fleet-init");
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


/* ---- reading the spec ---- */

/* A NULL-terminated array of arr's strings (pointers into arr); NULL if arr is not an array of strings. */
static const char **str_array(json_t *arr, size_t *n)
{
	const char **v;
	size_t i;
	json_t *e;

	if (!json_is_array(arr))
		return NULL;
	v = xcalloc(json_array_size(arr) + 1, sizeof(*v));
	json_array_foreach(arr, i, e) {
		if (!(v[i] = json_string_value(e))) {
			free(v);
			return NULL;
		}
	}
	if (n)
		*n = json_array_size(arr);
	return v;
}

static const char *opt_string(json_t *root, const char *key)
{
	return json_string_value(json_object_get(root, key));	/* NULL when absent or null */
}

/* Read exactly len bytes of fd from its start into a new buffer; NULL on a short or failed read. */
static unsigned char *read_all(int fd, size_t len)
{
	unsigned char *buf = xmalloc(len ? len : 1);
	size_t got = 0;

	while (got < len) {
		ssize_t n = pread(fd, buf + got, len - got, (off_t)got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			explicit_bzero(buf, got);
			free(buf);
			return NULL;
		}
		got += (size_t)n;
	}
	return buf;
}

/* The JSON object in the memfd fd (closed here), parsed where it lies; NULL if it is none. */
static json_t *load_json_fd(int fd)
{
	json_error_t jerr;
	json_t *root = NULL;
	struct stat st;

	/* json_loadfd would read it one byte per system call, hundreds of them on every exec. */
	if (fstat(fd, &st) == 0 && st.st_size > 0 && st.st_size <= SPEC_MAX) {
		void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);

		if (m != MAP_FAILED) {
			root = json_loadb(m, (size_t)st.st_size, JSON_REJECT_DUPLICATES, &jerr);
			munmap(m, (size_t)st.st_size);
		}
	}
	close(fd);
	if (!json_is_object(root)) {
		json_decref(root);
		return NULL;
	}
	return root;
}

/*
 * The payload's part of the spec from root (argv, envp, files) and the
 * files' bytes from files_fd (closed here when read); strings point into
 * root, the bytes into *blobp.
 */
static int read_payload(struct user_launch_spec *s, json_t *root, int files_fd, unsigned char **blobp)
{
	json_t *files, *f;
	size_t total = 0, i;
	struct exec_file *fv;

	if (!json_is_null(json_object_get(root, "argv")) && !(s->argv = str_array(json_object_get(root, "argv"), NULL)))
		return -EINVAL;
	if (!(s->envp = str_array(json_object_get(root, "envp"), NULL)))
		return -EINVAL;
	files = json_object_get(root, "files");
	if (!json_is_array(files) || json_array_size(files) == 0)
		return 0;
	fv = xcalloc(json_array_size(files), sizeof(*fv));
	json_array_foreach(files, i, f) {
		json_int_t len = json_integer_value(json_object_get(f, "len"));

		if (!(fv[i].name = opt_string(f, "name")) || len < 0 || (size_t)len > (64u << 20))
			return -EINVAL;
		fv[i].len = (size_t)len;
		total += (size_t)len;
	}
	if (!(*blobp = read_all(files_fd, total)))
		return -EIO;
	close(files_fd);
	for (i = 0, total = 0; i < json_array_size(files); i++) {
		fv[i].data = *blobp + total;
		total += fv[i].len;
	}
	s->files = fv;
	s->n_files = json_array_size(files);
	return 0;
}

/*
 * Fill spec from the JSON on FD_SPEC and the files on FD_FILES; the
 * strings point into *rootp, the files' bytes into *blobp. Both live as
 * long as this process (it never returns from launch_init).
 */
static int read_spec(struct user_launch_spec *s, json_t **rootp, unsigned char **blobp)
{
	json_t *root = load_json_fd(FD_SPEC);
	size_t n_cg = 0, i;
	int r;

	if (!root)
		return -EINVAL;
	*rootp = root;
	s->uid = (uid_t)json_integer_value(json_object_get(root, "uid"));
	s->gid = (gid_t)json_integer_value(json_object_get(root, "gid"));
	s->home = opt_string(root, "home");
	s->spare = json_is_true(json_object_get(root, "spare"));
	s->stdin_fd = 0;
	s->stdout_fd = 1;
	s->stderr_fd = 2;
	n_cg = (size_t)json_integer_value(json_object_get(root, "cgroups"));
	if (n_cg > 64)
		return -EINVAL;
	if (n_cg > 0) {
		int *cg = xcalloc(n_cg, sizeof(*cg));

		for (i = 0; i < n_cg; i++)
			cg[i] = FD_CGROUP0 + (int)i;
		s->cgroup_fds = cg;
		s->n_cgroup_fds = n_cg;
	}
	s->rlimit_nproc = (long)json_integer_value(json_object_get(root, "rlimit_nproc"));
	s->rlimit_nofile = (long)json_integer_value(json_object_get(root, "rlimit_nofile"));
	s->tmp_size_mib = (long)json_integer_value(json_object_get(root, "tmp_size_mib"));
	if (json_object_get(root, "shared_dirs") &&
	    !(s->shared_dirs = (const char *const *)str_array(json_object_get(root, "shared_dirs"), &s->n_shared_dirs)))
		return -EINVAL;
	s->netns_path = opt_string(root, "netns_path");
	s->resolv_conf = opt_string(root, "resolv_conf");
	s->agentd_path = opt_string(root, "agentd");
	s->users_dir = opt_string(root, "users_dir");
	s->netns_dir = opt_string(root, "netns_dir");
	/* A spare's payload comes later (await_command); its FD_FILES is the socket it comes on. */
	if (!s->spare && (r = read_payload(s, root, FD_FILES, blobp)) < 0)
		return r;
	return s->home && s->home[0] == '/' ? 0 : -EINVAL;
}

/*
 * A spare, set up: wait for its one command on FD_CTL (launch.c's
 * user_launch_hand: the payload's spec in the message, or in a memfd when
 * it is larger; stdin, stdout, stderr and the files' bytes as fds) and take
 * it as if it had been in the spec from the start. fleetd closing its end instead (the spare is dropped) ends us
 * here, before anything of an agent's ran. Nothing of a command was here
 * before: a spare serves one command and never another.
 */
static void await_command(struct launch_prep *p)
{
	enum { HAND_SPEC, HAND_STDIN, HAND_STDOUT, HAND_STDERR, HAND_FILES, HAND__COUNT };
	struct user_launch_spec *s = p->spec;
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int) * HAND__COUNT)];
	} cm;
	/* The spec, when it comes in the message (USER_LAUNCH_HAND_INLINE_MAX); its first page touched ahead. */
	static char msg[USER_LAUNCH_HAND_INLINE_MAX];
	int fds[HAND__COUNT], rep = p->report_fd, r;
	struct iovec iov = { msg, sizeof(msg) };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf, .msg_controllen = sizeof(cm.buf) };
	struct cmsghdr *c;
	unsigned char *blob = NULL;
	json_t *root;
	ssize_t n;

	payload_stack_map(rep, true);	/* now, not after the command came */
	memset(msg, 0, 4096);
	while ((n = recvmsg(FD_CTL, &m, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR)
		;
	if (n == 0)
		_exit(0);	/* dropped unused */
	if (n < 0)
		child_fail(rep, LAUNCH_STAGE_INIT, errno);
	c = CMSG_FIRSTHDR(&m);
	if ((m.msg_flags & (MSG_CTRUNC | MSG_TRUNC)) || !c || c->cmsg_level != SOL_SOCKET ||
	    c->cmsg_type != SCM_RIGHTS || c->cmsg_len != CMSG_LEN(sizeof(fds)))
		child_fail(rep, LAUNCH_STAGE_INIT, EPROTO);
	memcpy(fds, CMSG_DATA(c), sizeof(fds));
	close(FD_CTL);
	if (msg[0] == '{') {	/* the spec is the message; its fd is /dev/null */
		json_error_t jerr;

		close(fds[HAND_SPEC]);
		root = json_loadb(msg, (size_t)n, JSON_REJECT_DUPLICATES, &jerr);
		explicit_bzero(msg, (size_t)n);	/* the environment, secrets among it: in root now */
		if (!json_is_object(root)) {
			json_decref(root);
			child_fail(rep, LAUNCH_STAGE_INIT, EINVAL);
		}
	} else if (n != 1 || msg[0] != 'c' || !(root = load_json_fd(fds[HAND_SPEC]))) {
		child_fail(rep, LAUNCH_STAGE_INIT, EINVAL);
	}
	if ((r = read_payload(s, root, fds[HAND_FILES], &blob)) < 0 || !s->argv || !s->argv[0])
		child_fail(rep, LAUNCH_STAGE_INIT, r < 0 ? -r : EINVAL);
	s->stdin_fd = fds[HAND_STDIN];
	s->stdout_fd = fds[HAND_STDOUT];
	s->stderr_fd = fds[HAND_STDERR];
	prep_secrets_opts(p);
	if (s->n_files > 0)
		write_secret_files(p);
}

/* The signals we inherited as ignored, from /proc/self/status (common/procstatus.h); false: unknown. */
static bool read_ignored_signals(uint64_t *mask)
{
	char buf[8192];
	size_t len = 0;
	int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return false;
	while (len < sizeof(buf)) {
		ssize_t n = read(fd, buf + len, sizeof(buf) - len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	return proc_status_sigmask(buf, len, "SigIgn", mask) == 0;
}

int main(int argc, char **argv)
{
	struct sigaction sa_term = { .sa_handler = on_term }, sa_chld = { .sa_handler = on_chld };
	struct user_launch_spec spec = { 0 };
	struct launch_prep prep = { .spec = &spec, .report_fd = FD_REPORT };
	unsigned char *blob = NULL;
	json_t *root = NULL;
	sigset_t block;
	long size;
	int r;

	(void)argc;
	(void)argv;
	/* SIGTERM and SIGCHLD only wake launch_init's sigsuspend, so none is lost, not even during the setup. */
	sigemptyset(&block);
	sigaddset(&block, SIGTERM);
	sigaddset(&block, SIGCHLD);
	sigprocmask(SIG_SETMASK, &block, NULL);
	sigaction(SIGTERM, &sa_term, NULL);
	sigaction(SIGCHLD, &sa_chld, NULL);
	if (fcntl(FD_REPORT, F_GETFD) < 0)
		return 127;	/* not started by user_launch() */
	(void)fcntl(FD_REPORT, F_SETFD, FD_CLOEXEC);
	prep.ignored_known = read_ignored_signals(&prep.ignored);
	/* jansson would open /dev/urandom for its hash seed: the spec is fleetd's, its keys a fixed few. */
	json_object_seed(1);
	if ((r = read_spec(&spec, &root, &blob)) < 0)
		child_fail(FD_REPORT, LAUNCH_STAGE_INIT, -r);
	if (strlen(spec.home) >= sizeof(prep.home_copy))
		child_fail(FD_REPORT, LAUNCH_STAGE_INIT, ENAMETOOLONG);
	memcpy(prep.home_copy, spec.home, strlen(spec.home) + 1);
	size = spec.tmp_size_mib > 0 ? spec.tmp_size_mib : 64;
	snprintf(prep.tmp_opts, sizeof(prep.tmp_opts), "mode=0700,uid=%lu,gid=%lu,size=%ldm,nr_inodes=%ld",
		 (unsigned long)spec.uid, (unsigned long)spec.gid, size, size * 256);
	snprintf(prep.run_opts, sizeof(prep.run_opts), "mode=0755,uid=0,gid=0,size=%ldm,nr_inodes=%ld", size, size * 256);
	snprintf(prep.shared_opts, sizeof(prep.shared_opts), "mode=1777,uid=0,gid=0,size=%ldm,nr_inodes=%ld", size, size * 256);
	prep_secrets_opts(&prep);
	/* A spare is not a keeper (keeper.c's is_keeper): named apart until it has its command. */
	if (spec.spare)
		(void)prctl(PR_SET_NAME, "fleet-spare");
	launch_init(&prep);
}
