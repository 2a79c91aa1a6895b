/* health: see health.h. libc only. */
#include "agentd/health.h"

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agentd/health_memo.h"
#include "common/users.h"

#define HEALTH_SHELL "/bin/sh"	/* the program that must start */
#define HEALTH_KEPT_NAME ".fleet-health"	/* in the home: the file the write check syncs */
#define HEALTH_KEPT_MAX 16	/* bytes: more, and it is not the check's (left alone) */

static int unhealthy(const char *why, const char *what)
{
	printf("unhealthy: %s%s%s\n", why, what ? ": " : "", what ? what : "");
	return 1;
}

/*
 * The shell's start, begun before the home's checks and reaped after them:
 * in a guest its exec overlaps the fsync's wait. -1 when it could not
 * be started (the check then fails on it).
 */
static pid_t health_shell_start(void)
{
	static char *const sh_argv[] = { "sh", "-c", "exit 0", NULL };
	extern char **environ;
	pid_t pid;

	return posix_spawn(&pid, HEALTH_SHELL, NULL, NULL, sh_argv, environ) == 0 ? pid : -1;
}

static bool health_shell_ran(pid_t pid)
{
	int status;

	if (pid < 0)
		return false;
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return false;
	return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/*
 * The kept file the home's write is synced through (HEALTH_KEPT_NAME), open
 * for writing, or -1 when it is missing or not the check's own: a regular
 * file of this user's, one link, a few bytes. It is in a home the agent
 * owns: no link is followed, a FIFO does not block, nothing else is written.
 */
static int kept_open(const char *path)
{
	struct stat st;
	int fd = open(path, O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);

	if (fd < 0)
		return -1;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() || st.st_nlink != 1 ||
	    st.st_size > HEALTH_KEPT_MAX) {
		close(fd);
		return -1;
	}
	return fd;
}

/*
 * The home takes a new file (the directory is writable, an inode is free)
 * and a write that reaches the disk. The new file is removed unsynced and
 * the sync goes through the kept file, overwritten in place: its
 * fdatasync is a data write and a flush, where a new file's fsync also
 * commits the file system's journal (1.6 against 3.3-3.9 ms in a TCG
 * guest, the check's critical path). Without a usable kept file the new
 * file is synced, and becomes the kept file if that name is free.
 */
static const char *home_write(const char *home, const char **what)
{
	char path[4096], kept[4096];
	int fd, kfd;

	*what = NULL;
	snprintf(path, sizeof(path), "%s/.fleet-health.%ld", home, (long)getpid());
	snprintf(kept, sizeof(kept), "%s/" HEALTH_KEPT_NAME, home);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return *what = strerror(errno), "cannot write to the home";
	if (write(fd, "ok\n", 3) != 3) {
		*what = strerror(errno);
		close(fd);
		unlink(path);
		return "cannot write to the home";
	}
	if ((kfd = kept_open(kept)) >= 0) {
		close(fd);
		unlink(path);
		if (pwrite(kfd, "ok\n", 3, 0) != 3 || fdatasync(kfd) < 0) {
			*what = strerror(errno);
			close(kfd);
			return "cannot write to the home";
		}
		close(kfd);
		return NULL;
	}
	if (fsync(fd) < 0) {
		*what = strerror(errno);
		close(fd);
		unlink(path);
		return "cannot write to the home";
	}
	close(fd);
	(void)link(path, kept);	/* fails when the name is taken: the next check syncs a new file again */
	unlink(path);
	return NULL;
}

/* The home's checks: it has room and takes a write that reaches the disk. NULL, or why not (*what: detail). */
static const char *health_home(const char **what)
{
	/* The home passwd names, not $HOME: this may run as root with the caller's environment. */
	struct user u = { .buf = NULL };
	bool known = user_by_uid(USERS_PASSWD, geteuid(), &u) == 0;
	static char home[2048];
	struct statvfs vfs;

	*what = NULL;
	if ((size_t)snprintf(home, sizeof(home), "%s", known && *u.pw.pw_dir ? u.pw.pw_dir : "/") >= sizeof(home)) {
		user_free(&u);
		return "the home's path is too long";
	}
	user_free(&u);
	if (statvfs(home, &vfs) < 0)
		return *what = strerror(errno), "cannot stat the home file system";
	if ((unsigned long long)vfs.f_bavail * vfs.f_frsize < (1ULL << 20))
		return *what = home, "less than 1 MiB free in";
	if (vfs.f_files > 0 && vfs.f_favail < 16)
		return *what = home, "no free inodes in";
	return home_write(home, what);
}

/*
 * Each failure says which check failed. One process and the shell; with a
 * memo (the health service's), the shell only when the memo does not hold
 * a passing start with the same key (health_memo.h), read before the start.
 */
int health_run(struct health_memo *memo)
{
	struct health_memo_key *key = memo ? health_memo_key_read(HEALTH_SHELL) : NULL;
	bool kept = health_memo_holds(memo, key);
	pid_t sh = kept ? -1 : health_shell_start();
	const char *what, *why = health_home(&what);
	bool sh_ok = kept || health_shell_ran(sh);	/* reaped on every path */

	if (!kept)
		health_memo_update(memo, key, sh_ok);
	free(key);
	if (why)
		return unhealthy(why, what);
	if (!sh_ok)
		return unhealthy("/bin/sh does not run", NULL);
	puts("healthy");
	return 0;
}
