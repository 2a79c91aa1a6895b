/*
 * backend/spawn.c's spawn_start: a long-running child gets exactly the fds
 * it is given, in their places (even when one of them is a low number
 * another goes to), no other fd of ours, and is reaped through its pidfd
 * with its real wait status.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/spawn.h"
#include "common/util.h"
#include "tests/tap.h"

/* Read what fd holds until EOF (at most len - 1 bytes), NUL-terminated. */
static void read_all(int fd, char *buf, size_t len)
{
	size_t n = 0;
	ssize_t r;

	while (n < len - 1 && (r = read(fd, buf + n, len - 1 - n)) > 0)
		n += (size_t)r;
	buf[n] = '\0';
}

static int wait_exit(int pidfd, int *status)
{
	struct pollfd p = { .fd = pidfd, .events = POLLIN };

	(void)poll(&p, 1, 30000);
	return spawn_wait(pidfd, true, status);
}

int main(void)
{
	static const char *const envp[] = { "PATH=/usr/bin:/bin", "FLEET_X=1", NULL };
	const char *const argv[] = { "/bin/sh", "-c",
		"echo out; echo err >&2; echo three >&3; read line <&4; echo \"got $line\" >&3;"
		" ls /proc/self/fd | sort -n | tr '\\n' ' ' >&3; echo \"env $FLEET_X\" >&3; exit 7", NULL };
	int sp[2], lp[2], in[2], status = -1, pidfd = -1, stray;
	char buf[512];
	pid_t pid = 0;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0 || pipe2(lp, O_CLOEXEC) < 0 ||
	    pipe2(in, O_CLOEXEC) < 0)
		return 1;
	/* An fd of ours without O_CLOEXEC: the child must not get it all the same. */
	stray = open("/dev/null", O_RDONLY);
	{
		const int fds[] = { in[0], lp[1], lp[1], sp[1], in[0] };

		is_int(spawn_start(argv, envp, fds, 5, &pid, &pidfd), 0, "spawn_start a shell");
	}
	ok(pid > 0 && pidfd >= 0, "with a pid and a pidfd");
	close(sp[1]);
	close(lp[1]);
	close(in[0]);
	is_int(spawn_wait(pidfd, true, &status), -EAGAIN, "it is not reaped while it runs (waits for fd 4)");
	ok(write(in[1], "hello\n", 6) == 6, "write to what is its fd 0 and fd 4");
	close(in[1]);
	read_all(sp[0], buf, sizeof(buf));
	/* ls sees its own directory fd (5) too; a stray fd of ours would be there as well. */
	ok(strncmp(buf, "three\ngot hello\n0 1 2 3 4 5 env", strlen("three\ngot hello\n0 1 2 3 4 5 env")) == 0,
	   "fd 3 is our socket, fd 4 our pipe, and it has fds 0-4 only: %s", buf);
	ok(strstr(buf, "env 1\n") != NULL, "its environment is the one given");
	read_all(lp[0], buf, sizeof(buf));
	is_str(buf, "out\nerr\n", "fds 1 and 2 are the log pipe");
	is_int(wait_exit(pidfd, &status), 0, "reaped through its pidfd");
	ok(WIFEXITED(status) && WEXITSTATUS(status) == 7, "with its exit status 7");
	close(pidfd);

	/* Killed by a signal. */
	{
		const char *const sleeper[] = { "/bin/sleep", "60", NULL };
		const int none[] = { stray };

		is_int(spawn_start(sleeper, envp, none, 1, &pid, &pidfd), 0, "spawn_start a sleeper");
		ok(syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0) == 0, "kill it through its pidfd");
		is_int(wait_exit(pidfd, &status), 0, "reaped");
		ok(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "killed by SIGKILL");
		close(pidfd);
	}
	{
		const char *const rel[] = { "sh", NULL };
		const int none[] = { stray };

		is_int(spawn_start(rel, envp, none, 1, &pid, &pidfd), -EINVAL, "a relative path is refused");
	}
	close(stray);
	return tap_done();
}
