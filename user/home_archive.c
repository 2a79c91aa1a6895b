/* home_archive: see home_archive.h. */
#include "user/home_archive.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/util.h"
#include "model/config.h"
#include "model/fleetd.h"
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
 * Run tar (argv after the program) as uid:uid in the directory dir_fd (opened
 * by root without following a link: the child enters it before it drops
 * root, so it may lie under directories the agent cannot traverse, as a
 * snapshot does), data_fd as its stdin
 * (unpack) or stdout (archive); the end of its stderr in *why on failure.
 * tar's exit 1 ("some files differ", a file changed while read) is success.
 */
static int tar_as(uid_t uid, int dir_fd, const char *const *args, int data_fd, bool data_is_stdout, char **why)
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
		if (fchdir(dir_fd) < 0)
			_exit(126);
		if (setgroups(0, NULL) < 0 || setgid(uid) < 0 || setuid(uid) < 0 || setuid(0) == 0)
			_exit(126);
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

/* dir, which must be a directory of uid's (not a link): an fd, or -errno with *why. */
static int open_tree(const char *dir, uid_t uid, char **why)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC), r;
	struct stat st;

	if (fd < 0) {
		r = -errno;
		*why = xasprintf("cannot open %s: %s", dir, strerror(errno));
		return r;
	}
	if (fstat(fd, &st) < 0 || st.st_uid != uid) {
		close(fd);
		*why = xasprintf("%s is not the agent's (uid %ld)", dir, (long)uid);
		return -EPERM;
	}
	return fd;
}

int user_home_archive(uid_t uid, const char *home, int out_fd, char **why)
{
	/* Sorted names and numeric owners: the same home gives the same bytes. */
	static const char *const args[] = { "--create", "--file=-", "--format=pax", "--numeric-owner", "--sort=name",
					    "--ignore-failed-read", "--warning=no-file-ignored",
					    "--warning=no-file-changed", ".", NULL };

	_cleanup_close_ int fd = open_tree(home, uid, why);

	if (fd < 0)
		return fd;
	return tar_as(uid, fd, args, out_fd, true, why);
}

int user_home_unpack(uid_t uid, const char *home, int in_fd, char **why)
{
	/* --no-overwrite-dir: the home and the memory store's root keep what provision gave them. */
	static const char *const args[] = { "--extract", "--file=-", "--no-same-owner", "--preserve-permissions",
					    "--no-overwrite-dir", NULL };

	_cleanup_close_ int fd = open_tree(home, uid, why);

	if (fd < 0)
		return fd;
	return tar_as(uid, fd, args, in_fd, false, why);
}

char *user_snapshot_home_path(struct fleetd *f, const char *agent, const char *snap)
{
	return xasprintf("%s/snapshots/%s/%s/home", config_get(&f->cfg, CFG_STATE_DIR), agent, snap);
}

int user_snapshot_unpack(struct fleetd *f, const char *agent, const char *snap, int in_fd, char **why)
{
	const char *state = config_get(&f->cfg, CFG_STATE_DIR);
	_cleanup_free_ char *sd = xasprintf("%s/snapshots", state), *ad = xasprintf("%s/%s", sd, agent);
	_cleanup_free_ char *tmp = xasprintf("%s/.%s.tmp", ad, snap), *final = xasprintf("%s/%s", ad, snap);
	_cleanup_free_ char *home = account_home_dir(f, agent), *hdir = xasprintf("%s/home", tmp);
	_cleanup_close_ int fd = -1;
	struct stat st;
	uid_t uid;
	int r;

	if ((r = account_lookup(f, agent, &uid)) < 0) {
		*why = xasprintf("its user is not there: %s", strerror(-r));
		return r;
	}
	if ((r = account_private_dir(sd, why)) < 0 || (r = account_private_dir(ad, why)) < 0)
		return r;
	/* The snapshot's home/ as a snapshot makes it: the agent's, with its home's mode. */
	if (lstat(home, &st) < 0)
		st.st_mode = 0700;
	if (mkdir(tmp, 0700) < 0 || mkdir(hdir, 0700) < 0 || lchown(hdir, uid, uid) < 0 ||
	    chmod(hdir, st.st_mode & 07777) < 0) {
		r = -errno;
		*why = xasprintf("cannot make %s: %s", hdir, strerror(errno));
		return r;
	}
	if ((fd = open_tree(hdir, uid, why)) < 0)
		return fd;
	if ((r = tar_as(uid, fd, (const char *const[]){ "--extract", "--file=-", "--no-same-owner",
							"--preserve-permissions", "--no-overwrite-dir", NULL },
			in_fd, false, why)) < 0)
		return r;
	if (rename(tmp, final) < 0) {
		r = -errno;
		*why = xasprintf("cannot rename %s: %s", tmp, strerror(errno));
		return r;
	}
	return 0;
}
