/* spawn: see spawn.h. */
#include "backend/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"

#define OUTPUT_MAX (64 * 1024)

int spawn_run(const char *const argv[], char **output)
{
	int p[2], status;
	size_t len = 0;
	char *buf = xmalloc(OUTPUT_MAX + 1);
	pid_t pid;

	if (pipe2(p, O_CLOEXEC) < 0) {
		free(buf);
		return -errno;
	}
	pid = fork();
	if (pid < 0) {
		int r = -errno;
		close(p[0]);
		close(p[1]);
		free(buf);
		return r;
	}
	if (pid == 0) {
		int null = open("/dev/null", O_RDONLY);
		sigset_t none;

		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		signal(SIGPIPE, SIG_DFL);
		if (null >= 0)
			dup2(null, STDIN_FILENO);
		dup2(p[1], STDOUT_FILENO);
		dup2(p[1], STDERR_FILENO);
		execvp(argv[0], (char *const *)argv);
		dprintf(STDERR_FILENO, "cannot run %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	close(p[1]);
	for (;;) {
		char tmp[4096];
		ssize_t n = read(p[0], tmp, sizeof(tmp));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		if (len < OUTPUT_MAX) {
			size_t take = (size_t)n < OUTPUT_MAX - len ? (size_t)n : OUTPUT_MAX - len;
			memcpy(buf + len, tmp, take);
			len += take;
		}
	}
	close(p[0]);
	buf[len] = '\0';
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR) {
			free(buf);
			return -errno;
		}
	log_debug("spawn: %s exited %d: %s", argv[0], WIFEXITED(status) ? WEXITSTATUS(status) : -1, buf);
	if (output)
		*output = buf;
	else
		free(buf);
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	return -EINTR;
}
