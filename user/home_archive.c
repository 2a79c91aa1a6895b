/* home_archive: see home_archive.h. */
#include "user/home_archive.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/util.h"
#include "user/internal.h"

int user_home_of(struct fleetd *f, const char *agent, uid_t *uid, char **home)
{
	int r = account_lookup(f, agent, uid);

	if (r < 0)
		return r;
	*home = account_home_dir(f, agent);
	return 0;
}

/*
 * Run tar (argv after the program) as uid:uid in home, data_fd as its stdin
 * (unpack) or stdout (archive); the end of its stderr in *why on failure.
 * tar's exit 1 ("some files differ", a file changed while read) is success.
 */
static int tar_as(uid_t uid, const char *home, const char *const *args, int data_fd, bool data_is_stdout, char **why)
{
	_cleanup_free_ char *tar = account_find_tool("tar");
	static const char *const env[] = { "PATH=/usr/bin:/bin", "LC_ALL=C", "HOME=/", NULL };
	const char *argv[16];
	char err[1024], scratch[256];
	size_t n = 0, got = 0;
	int p[2], status, null_fd;
	pid_t pid;

	if (!tar) {
		*why = xstrdup("no tar on this host");
		return -ENOENT;
	}
	argv[n++] = "tar";
	for (size_t i = 0; args[i] && n < ARRAY_SIZE(argv) - 1; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	if ((null_fd = open("/dev/null", O_RDWR | O_CLOEXEC)) < 0)
		return -errno;
	if (pipe2(p, O_CLOEXEC) < 0) {
		close(null_fd);
		return -errno;
	}
	pid = fork();
	if (pid < 0) {
		int r = -errno;
		close(p[0]); close(p[1]); close(null_fd);
		return r;
	}
	if (pid == 0) {
		/* Only async-signal-safe calls: fleetd has threads. dup2 clears O_CLOEXEC on 0-2. */
		if (dup2(data_is_stdout ? null_fd : data_fd, 0) < 0 || dup2(data_is_stdout ? data_fd : null_fd, 1) < 0 ||
		    dup2(p[1], 2) < 0)
			_exit(126);
		if (setgroups(0, NULL) < 0 || setgid(uid) < 0 || setuid(uid) < 0 || setuid(0) == 0)
			_exit(126);
		if (chdir(home) < 0) {
			static const char msg[] = "cannot enter the home\n";
			(void)!write(2, msg, sizeof(msg) - 1);
			_exit(126);
		}
		execve(tar, (char *const *)argv, (char *const *)env);
		_exit(127);
	}
	close(p[1]);
	close(null_fd);
	for (;;) {
		/* Keep the first words; read the rest to the end so tar never blocks on a full pipe. */
		ssize_t k = got < sizeof(err) - 1 ? read(p[0], err + got, sizeof(err) - 1 - got)
						  : read(p[0], scratch, sizeof(scratch));
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		if (got < sizeof(err) - 1)
			got += (size_t)k;
	}
	err[got] = '\0';
	close(p[0]);
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -errno;
	if (WIFEXITED(status) && WEXITSTATUS(status) <= 1)
		return 0;
	while (got && (err[got - 1] == '\n'))
		err[--got] = '\0';
	*why = xasprintf("tar %s as uid %ld: %s", data_is_stdout ? "create" : "extract", (long)uid,
			 *err ? err : WIFEXITED(status) ? "failed" : "killed");
	return -EIO;
}

int user_home_archive(uid_t uid, const char *home, int out_fd, char **why)
{
	/* Sorted names and numeric owners: the same home gives the same bytes. */
	static const char *const args[] = { "--create", "--file=-", "--format=pax", "--numeric-owner", "--sort=name",
					    "--ignore-failed-read", "--warning=no-file-ignored",
					    "--warning=no-file-changed", ".", NULL };

	return tar_as(uid, home, args, out_fd, true, why);
}

int user_home_unpack(uid_t uid, const char *home, int in_fd, char **why)
{
	/* --no-overwrite-dir: the home and the memory store's root keep what provision gave them. */
	static const char *const args[] = { "--extract", "--file=-", "--no-same-owner", "--preserve-permissions",
					    "--no-overwrite-dir", NULL };

	return tar_as(uid, home, args, in_fd, false, why);
}
