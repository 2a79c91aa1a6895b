/* spawn: see spawn.h. */
#include "backend/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"

#define OUTPUT_MAX (64 * 1024)

char *spawn_which(const char *name, const char *const *dirs)
{
	for (size_t i = 0; dirs && dirs[i]; i++) {
		char *p = xasprintf("%s/%s", dirs[i], name);
		if (access(p, X_OK) == 0)
			return p;
		free(p);
	}
	return NULL;
}

/* argv0 as a path to execute: as given when it has a '/', else found in search or $PATH; NULL if not found. */
static char *resolve(const char *argv0, const char *const *search)
{
	_cleanup_free_ char *copy = NULL;
	const char **dirs;
	char *ret, *save = NULL;
	size_t n = 0;

	if (strchr(argv0, '/'))
		return xstrdup(argv0);
	if (search)
		return spawn_which(argv0, search);
	copy = xstrdup(getenv("PATH") ? getenv("PATH") : "/usr/local/bin:/usr/bin:/bin");
	dirs = xcalloc(strlen(copy) / 2 + 2, sizeof(*dirs));
	for (char *d = strtok_r(copy, ":", &save); d; d = strtok_r(NULL, ":", &save))
		dirs[n++] = d;
	ret = spawn_which(argv0, dirs);
	free(dirs);
	return ret;
}

pid_t spawn_clone(int *pidfd)
{
	struct clone_args args = { .flags = CLONE_PIDFD, .pidfd = (uint64_t)(uintptr_t)pidfd, .exit_signal = 0 };
	pid_t pid = (pid_t)syscall(SYS_clone3, &args, sizeof(args));

	/* clone(2) with no stack is fork-like; the low byte of its flags, the exit signal, is 0 too. */
	if (pid < 0 && errno == ENOSYS)
		pid = (pid_t)syscall(SYS_clone, (unsigned long)CLONE_PIDFD, NULL, pidfd, NULL, 0UL);
	return pid;
}

/* A child that nobody's waitpid(-1) can reap (spawn_clone), with *pidfd; fork() before Linux 5.2 (*pidfd -1). */
static pid_t clone_child(int *pidfd)
{
	pid_t pid = spawn_clone(pidfd);

	if (pid < 0 && (errno == ENOSYS || errno == EINVAL)) {
		*pidfd = -1;
		return fork();
	}
	return pid;
}

/* Wait for the child; 0 with its wait status, or -errno. */
static int wait_child(pid_t pid, int pidfd, int *status)
{
	if (pidfd < 0) {
		while (waitpid(pid, status, 0) < 0)
			if (errno != EINTR)
				return -errno;
		return 0;
	}
	return spawn_wait(pidfd, false, status);
}

/* The child: system calls only (fleetd has threads), then execve. */
static void __attribute__((noreturn)) child(const char *path, const char *const argv[], char *const *envp, int out)
{
	struct sigaction dfl = { .sa_handler = SIG_DFL };
	sigset_t none;
	int null = open("/dev/null", O_RDONLY | O_CLOEXEC);

	/* fleetd ignores SIGPIPE and a worker thread blocks everything: neither may reach the tool. */
	for (int s = 1; s < NSIG; s++)
		(void)sigaction(s, &dfl, NULL);
	sigemptyset(&none);
	(void)sigprocmask(SIG_SETMASK, &none, NULL);
	if (null < 0 || dup2(null, STDIN_FILENO) < 0 || dup2(out, STDOUT_FILENO) < 0 || dup2(out, STDERR_FILENO) < 0)
		_exit(126);
	(void)syscall(SYS_close_range, 3U, ~0U, 0);
	execve(path, (char *const *)argv, envp);
	(void)!write(STDERR_FILENO, "cannot run ", 11);
	(void)!write(STDERR_FILENO, argv[0], strlen(argv[0]));
	(void)!write(STDERR_FILENO, ": exec failed\n", 14);
	_exit(127);
}

/* A spawn_start child: its fds in place (0..n-1), the rest closed; system calls only, then execve. */
static void __attribute__((noreturn)) child_fds(const char *const argv[], char *const *envp, const int *fds,
						size_t n)
{
	struct sigaction dfl = { .sa_handler = SIG_DFL };
	int tmp[SPAWN_FDS_MAX];
	sigset_t none;

	for (int s = 1; s < NSIG; s++)
		(void)sigaction(s, &dfl, NULL);
	sigemptyset(&none);
	(void)sigprocmask(SIG_SETMASK, &none, NULL);
	/* Out of the way first (fds[i] may be a low number another one goes to), then each to its place. */
	for (size_t i = 0; i < n; i++)
		if ((tmp[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, (int)n)) < 0)
			_exit(126);
	for (size_t i = 0; i < n; i++)
		if (dup2(tmp[i], (int)i) < 0)	/* the new fd has no O_CLOEXEC */
			_exit(126);
	(void)syscall(SYS_close_range, (unsigned)n, ~0U, 0);
	execve(argv[0], (char *const *)argv, envp);
	(void)!write(STDERR_FILENO, "cannot run ", 11);
	(void)!write(STDERR_FILENO, argv[0], strlen(argv[0]));
	(void)!write(STDERR_FILENO, ": exec failed\n", 14);
	_exit(127);
}

int spawn_start(const char *const argv[], const char *const *envp, const int *fds, size_t n_fds, pid_t *pid,
		int *pidfd)
{
	pid_t p;

	if (n_fds > SPAWN_FDS_MAX || !argv[0] || argv[0][0] != '/')
		return -EINVAL;
	p = spawn_clone(pidfd);
	if (p < 0)
		return -errno;
	if (p == 0)
		child_fds(argv, (char *const *)envp, fds, n_fds);
	*pid = p;
	return 0;
}

int spawn_wait(int pidfd, bool nohang, int *status)
{
	siginfo_t si = { 0 };

	while (waitid((idtype_t)P_PIDFD, (id_t)pidfd, &si, WEXITED | __WALL | (nohang ? WNOHANG : 0)) < 0)
		if (errno != EINTR)
			return -errno;
	if (si.si_pid == 0)
		return -EAGAIN;
	if (si.si_code == CLD_EXITED)
		*status = (si.si_status & 0xff) << 8;
	else
		*status = (si.si_status & 0x7f) | (si.si_code == CLD_DUMPED ? 0x80 : 0);
	return 0;
}

int spawn_signal(int pidfd, int sig)
{
	char path[64], line[128];
	long pid = 0;
	FILE *fp;

	if (syscall(SYS_pidfd_send_signal, pidfd, sig, NULL, 0) == 0)
		return 0;
	if (errno != ENOSYS)
		return -errno;
	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", pidfd);
	if (!(fp = fopen(path, "re")))
		return -errno;
	while (fgets(line, sizeof(line), fp))
		if (sscanf(line, "Pid: %ld", &pid) == 1)
			break;
	fclose(fp);
	if (pid <= 0)	/* -1: it exited; 0: not in our PID namespace */
		return -ESRCH;
	return kill((pid_t)pid, sig) < 0 ? -errno : 0;
}

/* Keep at most max bytes of what arrives: the first ones, or with tail the last ones. */
static void keep(char *buf, size_t *len, size_t max, bool tail, const char *in, size_t n)
{
	if (!tail) {
		size_t take = n < max - *len ? n : max - *len;
		memcpy(buf + *len, in, take);
		*len += take;
		return;
	}
	if (n >= max) {
		memcpy(buf, in + n - max, max);
		*len = max;
		return;
	}
	if (*len + n > max) {
		size_t drop = *len + n - max;
		memmove(buf, buf + drop, *len - drop);
		*len -= drop;
	}
	memcpy(buf + *len, in, n);
	*len += n;
}

/* Run argv: 0 and its wait status in *status (output in *output if asked), or -errno (-ENOENT: not found). */
static int run(const char *const argv[], const struct spawn_opts *o, char **output, int *status)
{
	extern char **environ;
	size_t max = o->output_max ? o->output_max : OUTPUT_MAX, len = 0;
	_cleanup_free_ char *path = resolve(argv[0], o->search);
	char *const *envp = o->envp ? (char *const *)o->envp : environ;
	int p[2], pidfd = -1, r;
	char *buf;
	pid_t pid;

	if (!path)
		return -ENOENT;
	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	pid = clone_child(&pidfd);
	if (pid < 0) {
		r = -errno;
		close(p[0]);
		close(p[1]);
		return r;
	}
	if (pid == 0)
		child(path, argv, envp, p[1]);
	close(p[1]);
	buf = xmalloc(max + 1);
	for (;;) {
		char tmp[4096];
		ssize_t n = read(p[0], tmp, sizeof(tmp));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		keep(buf, &len, max, o->keep_tail, tmp, (size_t)n);
	}
	close(p[0]);
	buf[len] = '\0';
	r = wait_child(pid, pidfd, status);
	if (pidfd >= 0)
		close(pidfd);
	if (r < 0) {
		free(buf);
		return r;
	}
	log_debug("spawn: %s: wait status %d: %s", argv[0], *status, buf);
	if (output)
		*output = buf;
	else
		free(buf);
	return 0;
}

int spawn_tool(const char *const argv[], const struct spawn_opts *o, char **output)
{
	static const struct spawn_opts none;
	int status, r;

	if (output)
		*output = NULL;
	if ((r = run(argv, o ? o : &none, output, &status)) < 0)
		return r;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int spawn_run(const char *const argv[], char **output)
{
	static const struct spawn_opts none;
	int status, r = run(argv, &none, output, &status);

	if (r == -ENOENT) {
		/* as if the exec had failed in the child: a tool that is not installed */
		if (output)
			*output = xasprintf("cannot run %s: %s\n", argv[0], strerror(ENOENT));
		return 127;
	}
	if (r < 0)
		return r;
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	return -EINTR;
}
