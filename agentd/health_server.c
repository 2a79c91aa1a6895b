/* health_server: see health_server.h. libc only. */
#include "agentd/health_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agentd/become.h"
#include "agentd/health.h"
#include "agentd/health_memo.h"
#include "common/users.h"

#define REQUEST_MAX 64
#define USER_NAME_MAX 32
#define NEXT_AFTER_MS 20	/* the next child is forked when a check ends, or this long after it began */

/* A user name as useradd makes them, and as fleetd sends it: [a-z_][a-z0-9_-]*, at most 32. */
static bool user_name_valid(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > USER_NAME_MAX || !((s[0] >= 'a' && s[0] <= 'z') || s[0] == '_'))
		return false;
	return strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789_-") == n;
}

/* The request line into buf (NUL for the newline); false on EOF, an error, or a line too long. */
static bool read_request(int fd, char *buf, size_t size)
{
	size_t len = 0;

	while (len < size - 1) {
		ssize_t n = read(fd, buf + len, 1);	/* one byte at a time: the line is short and ends the request */

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return false;
		if (buf[len] == '\n') {
			buf[len] = '\0';
			return true;
		}
		len++;
	}
	return false;
}

/*
 * What every exec of fleetd's starts in the guest is root's login shell
 * (agentd: shell.h). A check that bypasses it must still fail when it
 * cannot run (deleted, not executable), as the exec's check did.
 */
static const char *root_shell_broken(const char **path)
{
	static char shell[1024];
	struct user root = { .buf = NULL };
	struct stat st;
	int r = user_by_uid(USERS_PASSWD, 0, &root);

	*path = NULL;
	if (r < 0)
		return "cannot read root's entry in " USERS_PASSWD;
	snprintf(shell, sizeof(shell), "%s", root.pw.pw_shell && *root.pw.pw_shell ? root.pw.pw_shell : "/bin/sh");
	user_free(&root);
	*path = shell;
	if (stat(shell, &st) < 0 || !S_ISREG(st.st_mode) || !(st.st_mode & 0111))
		return "root's login shell cannot run, so no command of fleet's would start";
	return NULL;
}

/* One connection, in a child of its own: the answer on fd; the exit status is the check's. */
static int serve_one(int fd, struct health_memo *memo)
{
	char req[REQUEST_MAX];
	const char *user, *why, *what;
	struct user u;
	gid_t *groups;
	size_t ngroups;
	int r;

	alarm(HEALTH_SERVER_MAX_S);	/* SIGALRM's default action ends everything this connection started */
	if (!read_request(fd, req, sizeof(req)))
		req[0] = '\0';
	/* The answer is what the check prints, and what it says on stderr too (a failed drop). */
	if (setsid() < 0 || dup2(fd, STDOUT_FILENO) < 0 || dup2(fd, STDERR_FILENO) < 0)
		return 126;
	if (fd > STDERR_FILENO)
		close(fd);
	if (strncmp(req, "health ", 7) != 0 || !user_name_valid(req + 7)) {
		puts("agentd: health service: the request is not 'health USER'");
		return 2;
	}
	user = req + 7;
	if ((why = root_shell_broken(&what))) {
		printf("unhealthy: %s%s%s\n", why, what ? ": " : "", what ? what : "");
		return 1;
	}
	if ((r = become_lookup(user, &u, &groups, &ngroups)) != 0)
		return r;
	if (u.pw.pw_uid == 0) {
		puts("agentd: health service: checks run as a user, not as root");
		return 2;
	}
	r = become_user(user, &u.pw, groups, ngroups);
	free(groups);
	user_free(&u);
	if (r != 0)
		return r;
	return health_run(memo);
}

static volatile sig_atomic_t running;	/* connections being served */

/*
 * A child forked ahead of its connection: it waits in accept, so a check
 * does not wait for a fork (0.9 ms in a TCG guest). It closes taken (its
 * end of the loop's pipe) once it has one, and serves it; the exit status
 * is the check's.
 */
static int serve_next(int fd, int taken, pid_t service, struct health_memo *memo, const sigset_t *none)
{
	int c, r;

	/* Waiting, it is part of the service: it ends with it (a killed service leaves no listener). */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != service)
		return 126;
	/* The check waits for its own shell: no handler of ours may reap it. */
	signal(SIGCHLD, SIG_DFL);
	sigprocmask(SIG_SETMASK, none, NULL);
	while ((c = accept4(fd, NULL, NULL, SOCK_CLOEXEC)) < 0) {
		if (errno != EINTR && errno != ECONNABORTED) {
			sleep(1);	/* out of fds or memory: the loop forks the next after this */
			return 126;
		}
	}
	prctl(PR_SET_PDEATHSIG, 0);	/* a check begun runs to its end, as it always did */
	close(taken);
	close(fd);
	r = serve_one(c, memo);
	fflush(NULL);	/* the answer: stdout is the connection, and _exit flushes nothing */
	return r;
}

/* Reap at once: a finished check leaves no zombie in the guest (nor in a snapshot of it). */
static void on_child(int sig)
{
	int saved = errno;

	(void)sig;
	while (waitpid(-1, NULL, WNOHANG) > 0)
		running--;
	errno = saved;
}

int health_server_run(int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	struct sigaction sact = { .sa_handler = on_child };	/* no SA_RESTART: the loop's waits return on a child's end */
	struct health_memo *memo = health_memo_new();	/* NULL: every check starts the shell */
	pid_t self = getpid();
	sigset_t none, chld;
	int fd, one = 1;

	/* A child of the relay inherits its blocked SIGIO and the rest: none of it is ours. */
	sigemptyset(&none);
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_SETMASK, &chld, NULL);
	signal(SIGPIPE, SIG_DFL);
	sigaction(SIGCHLD, &sact, NULL);
	inet_pton(AF_INET, HEALTH_SERVER_ADDR, &sa.sin_addr);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 16) < 0) {
		fprintf(stderr, "agentd health-server: cannot listen on " HEALTH_SERVER_ADDR ":%d: %s\n", port,
			strerror(errno));
		if (fd >= 0)
			close(fd);
		return 1;
	}
	for (;;) {
		struct timespec settle = { 0, NEXT_AFTER_MS * 1000000L };
		char byte;
		pid_t pid;
		int p[2];

		/* SIGCHLD is blocked but in the waits below: running changes only there. */
		while (running >= HEALTH_SERVER_MAX)
			sigsuspend(&none);
		if (pipe2(p, O_CLOEXEC) < 0) {
			sleep(1);	/* out of fds: do not spin */
			continue;
		}
		pid = fork();
		if (pid == 0) {
			close(p[0]);
			_exit(serve_next(fd, p[1], self, memo, &none));
		}
		close(p[1]);
		if (pid > 0) {
			running++;
			/* Until it has a connection (or has ended): its end of the pipe closes. */
			sigprocmask(SIG_SETMASK, &none, NULL);
			while (read(p[0], &byte, 1) < 0 && errno == EINTR)
				;
			sigprocmask(SIG_SETMASK, &chld, NULL);
			/*
			 * The next is forked once this check ends, or NEXT_AFTER_MS
			 * on: a fork beside the check would take the guest's one
			 * vCPU from it. SIGCHLD (any child's end) cuts the wait.
			 */
			ppoll(NULL, 0, &settle, &none);
		} else {
			sleep(1);
		}
		close(p[0]);
	}
}

void health_server_start(void)
{
	pid_t pid = fork();

	if (pid < 0)
		return;		/* no service: fleetd runs its check over an exec */
	if (pid > 0) {
		/* Reaped at once: the service itself is the grandchild, init's to reap. */
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
		return;
	}
	if (fork() != 0)
		_exit(0);
	prctl(PR_SET_NAME, "agentd-health");
	_exit(health_server_run(HEALTH_SERVER_PORT));
}
