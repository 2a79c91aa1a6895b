/*
 * agentd memory: see memory.h. Everything is opened relative to the store's
 * directory fd with O_NOFOLLOW: the agent may have planted links in
 * ~/memory, and although this runs as the agent (so it can reach only what
 * the agent can), a link must never make a put, rm or import land elsewhere.
 * Writes are atomic and durable: a temp file in the same directory, fsync,
 * rename, fsync of the directory; a kill -9 at any point leaves the old
 * value or the new one. Import stages the whole archive beside the store
 * and swaps it in with one renameat2(RENAME_EXCHANGE).
 *
 * A put's temp file and an import's staging directory are flock()ed by
 * their writer for as long as it works on them; what a killed writer left
 * (the lock went with it) is swept by the next put, rm or import, so it
 * neither piles up nor counts against the quota.
 */
#include "agentd/memory.h"
#include "common/users.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define STORE_NAME "memory"
#define MAX_DEPTH 32			/* directories inside the store, for export and import */
#define MAX_ENTRIES 100000		/* an import's entries */
#define IMPORT_PATH_MAX 1024
#define BUF_SIZE 65536

__attribute__((format(printf, 2, 3))) static int fail(int code, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "agentd: memory: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return code;
}

/*
 * libarchive, loaded when an export or import needs it, not linked: agentd
 * is the guest's control channel (relay, run-as, health), and the
 * initramfs installs a newer agentd onto the disks of agents made from
 * older images, whose libraries are the disk's. Linked, an agentd on a disk
 * without libarchive would not start at all; loaded, only export and import
 * say they are unavailable there.
 */
static struct {
	__typeof__(archive_entry_filetype) *archive_entry_filetype;
	__typeof__(archive_entry_free) *archive_entry_free;
	__typeof__(archive_entry_hardlink) *archive_entry_hardlink;
	__typeof__(archive_entry_mode) *archive_entry_mode;
	__typeof__(archive_entry_mtime) *archive_entry_mtime;
	__typeof__(archive_entry_new) *archive_entry_new;
	__typeof__(archive_entry_pathname) *archive_entry_pathname;
	__typeof__(archive_entry_set_filetype) *archive_entry_set_filetype;
	__typeof__(archive_entry_set_gid) *archive_entry_set_gid;
	__typeof__(archive_entry_set_mtime) *archive_entry_set_mtime;
	__typeof__(archive_entry_set_pathname) *archive_entry_set_pathname;
	__typeof__(archive_entry_set_perm) *archive_entry_set_perm;
	__typeof__(archive_entry_set_size) *archive_entry_set_size;
	__typeof__(archive_entry_set_uid) *archive_entry_set_uid;
	__typeof__(archive_entry_size) *archive_entry_size;
	__typeof__(archive_entry_size_is_set) *archive_entry_size_is_set;
	__typeof__(archive_entry_symlink) *archive_entry_symlink;
	__typeof__(archive_error_string) *archive_error_string;
	__typeof__(archive_read_data_block) *archive_read_data_block;
	__typeof__(archive_read_free) *archive_read_free;
	__typeof__(archive_read_new) *archive_read_new;
	__typeof__(archive_read_next_header) *archive_read_next_header;
	__typeof__(archive_read_open_fd) *archive_read_open_fd;
	__typeof__(archive_read_support_filter_gzip) *archive_read_support_filter_gzip;
	__typeof__(archive_read_support_filter_none) *archive_read_support_filter_none;
	__typeof__(archive_read_support_format_tar) *archive_read_support_format_tar;
	__typeof__(archive_write_close) *archive_write_close;
	__typeof__(archive_write_data) *archive_write_data;
	__typeof__(archive_write_free) *archive_write_free;
	__typeof__(archive_write_header) *archive_write_header;
	__typeof__(archive_write_new) *archive_write_new;
	__typeof__(archive_write_open_fd) *archive_write_open_fd;
	__typeof__(archive_write_set_format_pax_restricted) *archive_write_set_format_pax_restricted;
} la;

#if defined(__x86_64__) && defined(__linux__)
#define ABI_LOADER "/lib64/ld-linux-x86-64.so.2"	/* the x86-64 psABI's PT_INTERP */
#endif

static int archive_load(void)
{
	static const char *const names[] = { "libarchive.so.13", "libarchive.so" };
	void *h = NULL;

	if (la.archive_read_new)
		return 0;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && !h; i++)
		h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
#ifdef ABI_LOADER
	/*
	 * A static agentd (configure.ac) has no dynamic loader mapped, and
	 * libc.so needs one: its own dlopen finds it only in the library
	 * directories, where the guest image has none (it is at the ABI path,
	 * the one every dynamic program names). Load it from there first.
	 */
	if (!h && dlopen(ABI_LOADER, RTLD_NOW | RTLD_LOCAL))
		for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && !h; i++)
			h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
#endif
	if (!h)
		return fail(MEMORY_EXIT_FAIL, "export and import need libarchive, which this environment does not have (%s)",
			    dlerror());
#define LOAD(sym) if (!(la.sym = (__typeof__(la.sym))dlsym(h, #sym))) goto bad
	LOAD(archive_entry_filetype);
	LOAD(archive_entry_free);
	LOAD(archive_entry_hardlink);
	LOAD(archive_entry_mode);
	LOAD(archive_entry_mtime);
	LOAD(archive_entry_new);
	LOAD(archive_entry_pathname);
	LOAD(archive_entry_set_filetype);
	LOAD(archive_entry_set_gid);
	LOAD(archive_entry_set_mtime);
	LOAD(archive_entry_set_pathname);
	LOAD(archive_entry_set_perm);
	LOAD(archive_entry_set_size);
	LOAD(archive_entry_set_uid);
	LOAD(archive_entry_size);
	LOAD(archive_entry_size_is_set);
	LOAD(archive_entry_symlink);
	LOAD(archive_error_string);
	LOAD(archive_read_data_block);
	LOAD(archive_read_free);
	LOAD(archive_read_new);
	LOAD(archive_read_next_header);
	LOAD(archive_read_open_fd);
	LOAD(archive_read_support_filter_gzip);
	LOAD(archive_read_support_filter_none);
	LOAD(archive_read_support_format_tar);
	LOAD(archive_write_close);
	LOAD(archive_write_data);
	LOAD(archive_write_free);
	LOAD(archive_write_header);
	LOAD(archive_write_new);
	LOAD(archive_write_open_fd);
	LOAD(archive_write_set_format_pax_restricted);
#undef LOAD
	return 0;
bad:
	memset(&la, 0, sizeof(la));
	dlclose(h);
	return fail(MEMORY_EXIT_FAIL, "this libarchive lacks a function agentd needs%s", "");
}

/* --- the store's directory --- */

struct store {
	int parent;		/* the directory holding the store (the home) */
	char name[256];		/* the store's name in it ("memory") */
	int dir;		/* the store, or -1 when it does not exist (yet) */
	long long quota;	/* bytes; 0: none */
};

/*
 * Open the store: DIR when given (tests, tools), else ~/memory of the user
 * we run as (passwd, not $HOME: the caller's environment is not trusted).
 * create: make it (0700) when missing. Returns 0 or an exit status.
 */
static int store_open(struct store *s, const char *dir, bool create)
{
	char parent[PATH_MAX];
	const char *slash;

	if (dir) {
		slash = strrchr(dir, '/');
		if (!slash || !slash[1] || (size_t)(slash - dir) >= sizeof(parent) || strlen(slash + 1) >= sizeof(s->name))
			return fail(MEMORY_EXIT_USAGE, "--dir needs an absolute path to a directory, not '%s'", dir);
		memcpy(parent, dir, (size_t)(slash - dir));
		parent[slash - dir] = '\0';
		if (!*parent)
			strcpy(parent, "/");
		strcpy(s->name, slash + 1);
	} else {
		/* /etc/passwd's, without NSS (a static agentd: users.h). */
		struct user u;
		int r = user_by_uid(USERS_PASSWD, geteuid(), &u);
		bool home = r == 0 && u.pw.pw_dir[0] == '/' && strlen(u.pw.pw_dir) < sizeof(parent);

		if (home)
			strcpy(parent, u.pw.pw_dir);
		if (r == 0)
			user_free(&u);
		if (r < 0 && r != -ENOENT)
			return fail(MEMORY_EXIT_FAIL, "cannot read " USERS_PASSWD ": %s", strerror(-r));
		if (!home)
			return fail(MEMORY_EXIT_FAIL, "this user has no home");
		strcpy(s->name, STORE_NAME);
	}
	s->parent = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (s->parent < 0)
		return fail(MEMORY_EXIT_FAIL, "cannot open %s: %s", parent, strerror(errno));
	s->dir = openat(s->parent, s->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (s->dir < 0 && errno == ENOENT && create) {
		if (mkdirat(s->parent, s->name, 0700) < 0 && errno != EEXIST)
			return fail(MEMORY_EXIT_FAIL, "cannot create the store: %s", strerror(errno));
		(void)fsync(s->parent);
		s->dir = openat(s->parent, s->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	}
	if (s->dir < 0 && (errno != ENOENT || create))
		return fail(MEMORY_EXIT_FAIL, "cannot open the store %s: %s", s->name,
			    errno == ELOOP || errno == ENOTDIR ? "not a directory (a link?)" : strerror(errno));
	return 0;
}

/* Bytes of every regular file under dir (links and the rest count nothing); -1 on error. */
static long long tree_bytes(int dir, int depth)
{
	long long sum = 0;
	struct dirent *d;
	DIR *dp;
	int fd;

	if (depth > MAX_DEPTH || (fd = dup(dir)) < 0)
		return -1;
	if (!(dp = fdopendir(fd))) {
		close(fd);
		return -1;
	}
	rewinddir(dp);
	while ((d = readdir(dp))) {
		struct stat st;

		if (strcmp(d->d_name, ".") == 0 || strcmp(d->d_name, "..") == 0)
			continue;
		if (fstatat(dir, d->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		if (S_ISREG(st.st_mode)) {
			sum += st.st_size;
		} else if (S_ISDIR(st.st_mode)) {
			int sub = openat(dir, d->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			long long n = sub >= 0 ? tree_bytes(sub, depth + 1) : -1;

			if (sub >= 0)
				close(sub);
			if (n < 0) {
				closedir(dp);
				return -1;
			}
			sum += n;
		}
	}
	closedir(dp);
	return sum;
}

/* Remove name (a file, or a directory and everything in it) under dir, following no link. */
static int remove_tree(int dir, const char *name, int depth)
{
	struct dirent *d;
	DIR *dp;
	int sub;

	if (unlinkat(dir, name, 0) == 0 || errno == ENOENT)
		return 0;
	if ((errno != EISDIR && errno != EPERM) || depth > MAX_DEPTH)
		return -1;
	if ((sub = openat(dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
		return -1;
	if (!(dp = fdopendir(sub))) {
		close(sub);
		return -1;
	}
	while ((d = readdir(dp)))
		if (strcmp(d->d_name, ".") != 0 && strcmp(d->d_name, "..") != 0 &&
		    remove_tree(dirfd(dp), d->d_name, depth + 1) < 0) {
			closedir(dp);
			return -1;
		}
	closedir(dp);
	return unlinkat(dir, name, AT_REMOVEDIR);
}

static int write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len > 0) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/*
 * A temp name's unique part. Not the pid: each exec of a user agent is a new
 * PID namespace, where agentd is always pid 2, so a put killed once would
 * leave a name every later put of the key collides with (O_EXCL).
 */
static void unique_suffix(char *buf, size_t len)
{
	unsigned long long r = 0;

	if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r)) {
		struct timespec ts;

		clock_gettime(CLOCK_MONOTONIC, &ts);
		r = ((unsigned long long)ts.tv_nsec << 20) ^ (unsigned long long)ts.tv_sec ^ (unsigned long long)getpid();
	}
	snprintf(buf, len, "%016llx", r);
}

/* A put's temp file: ".put-KEY.UNIQUE.tmp" in the store. */
static bool is_put_temp(const char *name)
{
	size_t n = strlen(name);

	return strncmp(name, ".put-", 5) == 0 && n > 4 && strcmp(name + n - 4, ".tmp") == 0;
}

/* An import's staging directory: ".STORE.import-UNIQUE" beside the store. */
static bool is_import_stage(const struct store *s, const char *name)
{
	size_t n = strlen(s->name);

	return name[0] == '.' && strncmp(name + 1, s->name, n) == 0 && strncmp(name + 1 + n, ".import-", 8) == 0;
}

/*
 * Lock what this process just created under name in dir (fd open on it),
 * for as long as fd is open. False when a sweep removed it between the
 * create and the lock: the caller makes another.
 */
static bool claim(int fd)
{
	struct stat st;

	while (flock(fd, LOCK_EX) < 0)
		if (errno != EINTR)
			return true;	/* no locks here (some filesystem): work without */
	return fstat(fd, &st) == 0 && st.st_nlink > 0;
}

/* Remove name in dir if nobody holds its lock (its writer is gone). */
static void sweep_one(int dir, const char *name, bool is_dir)
{
	int fd = openat(dir, name, (is_dir ? O_RDONLY | O_DIRECTORY : O_RDONLY | O_NONBLOCK) | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;

	if (fd < 0)
		return;
	/* Only what a put or an import makes: a file, or a directory (anything else planted there is left). */
	if (fstat(fd, &st) < 0 || (is_dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode))) {
		close(fd);
		return;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
		if (is_dir ? remove_tree(dir, name, 0) < 0 : unlinkat(dir, name, 0) < 0)
			fprintf(stderr, "agentd: memory: could not remove the leftover %s: %s\n", name, strerror(errno));
	}
	close(fd);
}

/*
 * A store that is a file system of its own (a user agent's, mounted by
 * fleetd) cannot be renamed: an import stages inside it, ".import-U", and
 * swaps entry by entry with a commit point that a crash cannot cut:
 *   1. extract into .import-U (locked), fsync;
 *   2. move every other top-level entry into .import-U.old;
 *   3. rename .import-U to .import-U.commit (the commit point), fsync;
 *   4. move the entries of .import-U.commit up, then remove .old and .commit.
 * A leftover (its lock free) is finished by the next put, rm or import:
 * a .commit goes on with 4; a .old without its .commit is moved back (1-2
 * undone). Both old and new store must fit in the file system meanwhile.
 */
static bool is_inner_import(const char *name)
{
	return strncmp(name, ".import-", 8) == 0;
}

static bool has_suffix(const char *name, const char *suffix)
{
	size_t n = strlen(name), k = strlen(suffix);

	return n > k && strcmp(name + n - k, suffix) == 0;
}

/* Move every entry of sub (a directory in store) up into store; replace: over what is there, else keep that. */
static int move_up(int store, const char *sub, bool replace)
{
	int fd = openat(store, sub, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC), r = 0;
	struct dirent *d;
	DIR *dp;

	if (fd < 0)
		return errno == ENOENT ? 0 : -1;
	if (!(dp = fdopendir(fd))) {
		close(fd);
		return -1;
	}
	while ((d = readdir(dp))) {
		if (strcmp(d->d_name, ".") == 0 || strcmp(d->d_name, "..") == 0)
			continue;
		if (replace && remove_tree(store, d->d_name, 0) < 0)
			r = -1;
		else if (renameat2(fd, d->d_name, store, d->d_name, RENAME_NOREPLACE) < 0 && errno != EEXIST)
			r = -1;
	}
	closedir(dp);
	(void)fsync(store);
	return r;
}

/* Steps 2-4 of an in-store import (or their end, for a leftover). */
static int inner_commit(int store, const char *stage)
{
	char old[320], commit[320];
	struct dirent *d;
	DIR *dp;
	int fd;

	snprintf(old, sizeof(old), "%s.old", stage);
	snprintf(commit, sizeof(commit), "%s.commit", stage);
	if (mkdirat(store, old, 0700) < 0 && errno != EEXIST)
		return -1;
	if ((fd = dup(store)) < 0 || !(dp = fdopendir(fd))) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	rewinddir(dp);
	while ((d = readdir(dp))) {
		int ofd;

		if (strcmp(d->d_name, ".") == 0 || strcmp(d->d_name, "..") == 0 || is_inner_import(d->d_name) ||
		    is_put_temp(d->d_name))
			continue;
		if ((ofd = openat(store, old, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0 ||
		    renameat(store, d->d_name, ofd, d->d_name) < 0) {
			if (ofd >= 0)
				close(ofd);
			closedir(dp);
			return -1;
		}
		close(ofd);
	}
	closedir(dp);
	(void)fsync(store);
	if (renameat(store, stage, store, commit) < 0)
		return -1;
	(void)fsync(store);
	if (move_up(store, commit, true) < 0)
		return -1;
	(void)remove_tree(store, old, 0);
	return remove_tree(store, commit, 0);
}

/* Finish or undo what a killed in-store import left (its lock is free). */
static void inner_recover(int store)
{
	struct dirent *d;
	DIR *dp;
	int fd;

	for (int pass = 0; pass < 3; pass++) {
		if ((fd = dup(store)) < 0)
			return;
		if (!(dp = fdopendir(fd))) {
			close(fd);
			return;
		}
		rewinddir(dp);
		while ((d = readdir(dp))) {
			char base[300];
			int lfd;

			if (!is_inner_import(d->d_name))
				continue;
			if ((lfd = openat(store, d->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
				continue;
			if (flock(lfd, LOCK_EX | LOCK_NB) < 0) {	/* a live import's */
				close(lfd);
				continue;
			}
			snprintf(base, sizeof(base), "%s", d->d_name);
			if (pass == 0 && has_suffix(d->d_name, ".commit")) {
				base[strlen(base) - 7] = '\0';
				if (move_up(store, d->d_name, true) == 0) {
					char old[320];
					snprintf(old, sizeof(old), "%s.old", base);
					(void)remove_tree(store, old, 0);
					(void)remove_tree(store, d->d_name, 0);
				}
			} else if (pass == 1 && has_suffix(d->d_name, ".old")) {
				char commit[320], stage[320];
				struct stat st;

				base[strlen(base) - 4] = '\0';
				snprintf(commit, sizeof(commit), "%s.commit", base);
				snprintf(stage, sizeof(stage), "%s", base);
				int sfd = openat(store, stage, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
				bool live = sfd >= 0 && flock(sfd, LOCK_EX | LOCK_NB) < 0;
				if (sfd >= 0)
					close(sfd);
				if (!live && fstatat(store, commit, &st, AT_SYMLINK_NOFOLLOW) < 0 &&
				    move_up(store, d->d_name, false) == 0)
					(void)remove_tree(store, d->d_name, 0);	/* never committed: the old store back */
			} else if (pass == 2 && !has_suffix(d->d_name, ".old") && !has_suffix(d->d_name, ".commit")) {
				(void)remove_tree(store, d->d_name, 0);	/* a staging tree never committed */
			}
			close(lfd);
		}
		closedir(dp);
	}
}

/* What killed puts and imports left: their temp files in the store, their staging trees beside it. */
static void sweep_leftovers(const struct store *s)
{
	if (s->dir >= 0)
		inner_recover(s->dir);
	struct dirent *d;
	DIR *dp;
	int fd;

	for (int pass = 0; pass < 2; pass++) {
		int dir = pass == 0 ? s->dir : s->parent;

		if (dir < 0 || (fd = dup(dir)) < 0)
			continue;
		if (!(dp = fdopendir(fd))) {
			close(fd);
			continue;
		}
		rewinddir(dp);
		while ((d = readdir(dp))) {
			if (pass == 0 && is_put_temp(d->d_name))
				sweep_one(dir, d->d_name, false);
			else if (pass == 1 && is_import_stage(s, d->d_name))
				sweep_one(dir, d->d_name, true);
		}
		closedir(dp);
	}
}

/* --- ls, get, put, rm --- */

static int name_cmp(const struct dirent **a, const struct dirent **b)
{
	return strcmp((*a)->d_name, (*b)->d_name);
}

static int only_keys(const struct dirent *d)
{
	return memory_key_valid(d->d_name);
}

/* One line per key, sorted: KEY TAB SIZE TAB MTIME (seconds since the epoch). Keys need no quoting. */
static int cmd_ls(struct store *s)
{
	struct dirent **list;
	int n;

	if (s->dir < 0)
		return MEMORY_EXIT_OK;
	if ((n = scandirat(s->dir, ".", &list, only_keys, name_cmp)) < 0)
		return fail(MEMORY_EXIT_FAIL, "cannot list the store: %s", strerror(errno));
	for (int i = 0; i < n; i++) {
		struct stat st;

		if (fstatat(s->dir, list[i]->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
			printf("%s\t%lld\t%lld\n", list[i]->d_name, (long long)st.st_size, (long long)st.st_mtime);
		free(list[i]);
	}
	free(list);
	return fflush(stdout) == 0 ? MEMORY_EXIT_OK : MEMORY_EXIT_FAIL;
}

static int cmd_get(struct store *s, const char *key)
{
	char buf[BUF_SIZE];
	struct stat st;
	ssize_t n;
	int fd;

	if (s->dir < 0)
		return fail(MEMORY_EXIT_NOKEY, "no key '%s'", key);
	/* O_NONBLOCK: a FIFO planted under the key's name must not hang us. */
	fd = openat(s->dir, key, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT)
		return fail(MEMORY_EXIT_NOKEY, "no key '%s'", key);
	if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		if (fd >= 0)
			close(fd);
		return fail(MEMORY_EXIT_FAIL, "'%s' is not a value (a link or a special file?)", key);
	}
	while ((n = read(fd, buf, sizeof(buf))) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 || write_all(STDOUT_FILENO, buf, (size_t)n) < 0) {
			close(fd);
			return fail(MEMORY_EXIT_FAIL, "reading '%s': %s", key, strerror(errno));
		}
	}
	close(fd);
	return MEMORY_EXIT_OK;
}

/* The new value from stdin into a temp file, then the rename: old or new, never half. */
static int cmd_put(struct store *s, const char *key)
{
	char tmp[MEMORY_KEY_MAX + 40], uniq[20], buf[BUF_SIZE];
	long long base = 0, written = 0;
	struct stat st;
	ssize_t n;
	int fd, code;

	if (s->quota > 0) {
		if ((base = tree_bytes(s->dir, 0)) < 0)
			return fail(MEMORY_EXIT_FAIL, "cannot measure the store");
		if (fstatat(s->dir, key, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
			base -= st.st_size;	/* the old value goes */
	}
	/* A leading dot: never a key, so ls and get never see a half-written value. */
	do {
		unique_suffix(uniq, sizeof(uniq));
		snprintf(tmp, sizeof(tmp), ".put-%s.%s.tmp", key, uniq);
		fd = openat(s->dir, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0)
			return fail(MEMORY_EXIT_FAIL, "cannot write into the store: %s", strerror(errno));
	} while (!claim(fd) && close(fd) == 0);
	while ((n = read(STDIN_FILENO, buf, sizeof(buf))) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			code = fail(MEMORY_EXIT_FAIL, "reading the value: %s", strerror(errno));
			goto fail;
		}
		written += n;
		if (s->quota > 0 && base + written > s->quota) {
			char q[32];

			snprintf(q, sizeof(q), "%lld", s->quota);
			code = fail(MEMORY_EXIT_QUOTA, "memory store full: '%s' would take it over its quota of %s bytes",
				    key, q);
			goto fail;
		}
		if (write_all(fd, buf, (size_t)n) < 0) {
			code = fail(errno == ENOSPC || errno == EDQUOT ? MEMORY_EXIT_QUOTA : MEMORY_EXIT_FAIL,
				    "writing '%s': %s", key, strerror(errno));
			goto fail;
		}
	}
	if (fsync(fd) < 0) {
		code = fail(MEMORY_EXIT_FAIL, "writing '%s': %s", key, strerror(errno));
		goto fail;
	}
	/*
	 * rename replaces a planted link or file itself, never what a link points
	 * to; a directory refuses. fd (and its lock) stays open until the rename.
	 */
	if (renameat(s->dir, tmp, s->dir, key) < 0) {
		code = fail(MEMORY_EXIT_FAIL, "cannot store '%s': %s", key, strerror(errno));
		goto fail;
	}
	if (close(fd) < 0 || fsync(s->dir) < 0)
		return fail(MEMORY_EXIT_FAIL, "syncing the store: %s", strerror(errno));
	return MEMORY_EXIT_OK;
fail:
	unlinkat(s->dir, tmp, 0);
	close(fd);
	return code;
}

static int cmd_rm(struct store *s, const char *key)
{
	struct stat st;

	if (s->dir < 0 || fstatat(s->dir, key, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return fail(MEMORY_EXIT_NOKEY, "no key '%s'", key);
	if (S_ISDIR(st.st_mode))
		return fail(MEMORY_EXIT_FAIL, "'%s' is a directory, not a value", key);
	if (unlinkat(s->dir, key, 0) < 0)
		return fail(MEMORY_EXIT_FAIL, "cannot remove '%s': %s", key, strerror(errno));
	if (fsync(s->dir) < 0)
		return fail(MEMORY_EXIT_FAIL, "syncing the store: %s", strerror(errno));
	return MEMORY_EXIT_OK;
}

/* --- export: the store as a tar archive (pax) on stdout --- */

static int export_dir(struct archive *ar, int dir, const char *prefix, int depth)
{
	struct dirent **list;
	int n, r = 0;

	if (depth > MAX_DEPTH)
		return fail(MEMORY_EXIT_FAIL, "the store nests deeper than %d levels", MAX_DEPTH);
	if ((n = scandirat(dir, ".", &list, NULL, name_cmp)) < 0)
		return fail(MEMORY_EXIT_FAIL, "cannot list %s: %s", *prefix ? prefix : ".", strerror(errno));
	for (int i = 0; i < n; i++) {
		const char *name = list[i]->d_name;
		char path[IMPORT_PATH_MAX + 256];
		struct archive_entry *e;
		struct stat st;
		int fd = -1;

		if (r || strcmp(name, ".") == 0 || strcmp(name, "..") == 0 ||
		    (depth == 0 && (is_put_temp(name) || is_inner_import(name))))
			goto next;
		if (snprintf(path, sizeof(path), "%s%s", prefix, name) >= IMPORT_PATH_MAX) {
			fprintf(stderr, "agentd: memory: export: skipped a path longer than %d bytes\n", IMPORT_PATH_MAX);
			goto next;
		}
		fd = openat(dir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		if (fd < 0 || fstat(fd, &st) < 0 || !(S_ISREG(st.st_mode) || S_ISDIR(st.st_mode))) {
			/* Links, FIFOs, sockets: an import would refuse them, so they are not exported. */
			fprintf(stderr, "agentd: memory: export: skipped '%s' (not a file or directory)\n", path);
			goto next;
		}
		e = la.archive_entry_new();
		la.archive_entry_set_pathname(e, path);
		/* No owner: the store is its agent's wherever it goes; the same content exports the same bytes. */
		la.archive_entry_set_uid(e, 0);
		la.archive_entry_set_gid(e, 0);
		la.archive_entry_set_mtime(e, st.st_mtime, 0);
		la.archive_entry_set_perm(e, st.st_mode & 0777);
		la.archive_entry_set_filetype(e, S_ISDIR(st.st_mode) ? AE_IFDIR : AE_IFREG);
		la.archive_entry_set_size(e, S_ISREG(st.st_mode) ? st.st_size : 0);
		if (la.archive_write_header(ar, e) != ARCHIVE_OK) {
			r = fail(MEMORY_EXIT_FAIL, "export: %s", la.archive_error_string(ar));
		} else if (S_ISREG(st.st_mode)) {
			char buf[BUF_SIZE];
			long long left = st.st_size;
			ssize_t got;

			/* Exactly the size in the header, even if the file changes meanwhile. */
			while (left > 0 && (got = read(fd, buf, left < (long long)sizeof(buf) ? (size_t)left : sizeof(buf))) > 0) {
				if (la.archive_write_data(ar, buf, (size_t)got) < 0)
					break;
				left -= got;
			}
			if (left > 0)
				r = fail(MEMORY_EXIT_FAIL, "export: '%s' changed while being read", path);
		} else {
			char sub[IMPORT_PATH_MAX + 258];

			snprintf(sub, sizeof(sub), "%s/", path);
			r = export_dir(ar, fd, sub, depth + 1);
		}
		la.archive_entry_free(e);
next:
		if (fd >= 0)
			close(fd);
		free(list[i]);
	}
	free(list);
	return r;
}

static int cmd_export(struct store *s)
{
	struct archive *ar;
	int r = 0;

	if ((r = archive_load()) != 0)
		return r;
	ar = la.archive_write_new();

	if (la.archive_write_set_format_pax_restricted(ar) != ARCHIVE_OK || la.archive_write_open_fd(ar, STDOUT_FILENO) != ARCHIVE_OK) {
		r = fail(MEMORY_EXIT_FAIL, "export: %s", la.archive_error_string(ar));
		la.archive_write_free(ar);
		return r;
	}
	if (s->dir >= 0)
		r = export_dir(ar, s->dir, "", 0);
	if (la.archive_write_close(ar) != ARCHIVE_OK && !r)
		r = fail(MEMORY_EXIT_FAIL, "export: %s", la.archive_error_string(ar));
	la.archive_write_free(ar);
	return r;
}

/* --- import: an archive from stdin replaces the whole store, or nothing changes --- */

/*
 * Walk path's directories from root, making each missing one (0700); the
 * last component goes to *last (NULL when the path names that directory
 * itself: "./"). Refuses an absolute path, "..", and any step through
 * something that is not a directory (O_NOFOLLOW). Returns the fd of the
 * last directory, or -1 with *why set.
 */
static int import_walk(int root, char *path, char **last, const char **why)
{
	int fd = dup(root), depth = 0;
	char *save = NULL, *comp, *next;

	*last = NULL;
	if (fd < 0) {
		*why = "out of file descriptors";
		return -1;
	}
	if (path[0] == '/') {
		*why = "an absolute path";
		goto bad;
	}
	comp = strtok_r(path, "/", &save);
	if (!comp) {
		*why = "an empty path";
		goto bad;
	}
	while (comp) {
		next = strtok_r(NULL, "/", &save);
		if (strcmp(comp, "..") == 0) {
			*why = "a path with '..'";
			goto bad;
		}
		if (strcmp(comp, ".") == 0) {
			comp = next;
			continue;
		}
		if (!next) {
			*last = comp;
			return fd;
		}
		if (++depth > MAX_DEPTH) {
			*why = "a path nested too deep";
			goto bad;
		}
		if (mkdirat(fd, comp, 0700) < 0 && errno != EEXIST) {
			*why = "a directory that cannot be made";
			goto bad;
		}
		int sub = openat(fd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

		close(fd);
		if ((fd = sub) < 0) {
			*why = "a path through something that is not a directory";
			return -1;
		}
		comp = next;
	}
	/* Only "." after the last directory ("./", as `tar -C DIR .` writes first, or "a/."): that directory itself. */
	return fd;
bad:
	close(fd);
	return -1;
}

/* Directories' mtimes, set once everything is in (writing a file changes its directory's mtime). */
struct dir_times {
	char **path;
	time_t *mtime;
	size_t n;
};

static void dir_times_add(struct dir_times *dt, const char *path, time_t mtime)
{
	char **p = realloc(dt->path, (dt->n + 1) * sizeof(*p));
	time_t *m = p ? realloc(dt->mtime, (dt->n + 1) * sizeof(*m)) : NULL;

	if (p)
		dt->path = p;
	if (!p || !m || !(p[dt->n] = strdup(path)))
		return;	/* out of memory: the mtime is not kept, nothing worse */
	dt->mtime = m;
	m[dt->n++] = mtime;
}

/* Deepest first (reverse order of the archive), each reached without following a link. */
static void dir_times_apply(struct dir_times *dt, int stage)
{
	for (size_t i = dt->n; i-- > 0;) {
		char buf[IMPORT_PATH_MAX + 1], *last;
		const char *why;
		int dir, fd;

		snprintf(buf, sizeof(buf), "%s", dt->path[i]);
		if ((dir = import_walk(stage, buf, &last, &why)) < 0)
			continue;
		fd = last ? openat(dir, last, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
		if (fd >= 0) {
			struct timespec ts[2] = { { dt->mtime[i], 0 }, { dt->mtime[i], 0 } };

			(void)futimens(fd, ts);
			close(fd);
		}
		close(dir);
	}
}

static void dir_times_free(struct dir_times *dt)
{
	for (size_t i = 0; i < dt->n; i++)
		free(dt->path[i]);
	free(dt->path);
	free(dt->mtime);
}

/* One archive entry into the staging tree; 0 or an exit status (said on stderr). */
static int import_entry(struct archive *ar, struct archive_entry *e, int stage, long long *total, long long quota,
			struct dir_times *dt)
{
	const char *raw = la.archive_entry_pathname(e), *why = NULL;
	char path[IMPORT_PATH_MAX + 1], *last;
	mode_t type = la.archive_entry_filetype(e), mode = la.archive_entry_mode(e);
	int dir, fd, code = MEMORY_EXIT_REFUSED;

	if (!raw || !*raw || strlen(raw) > IMPORT_PATH_MAX)
		return fail(MEMORY_EXIT_REFUSED, "import refused: an entry with no name or a name over 1024 bytes");
	strcpy(path, raw);
	if (la.archive_entry_hardlink(e))
		return fail(MEMORY_EXIT_REFUSED, "import refused: '%s' is a hard link", raw);
	if (type == AE_IFLNK || la.archive_entry_symlink(e))
		return fail(MEMORY_EXIT_REFUSED, "import refused: '%s' is a symbolic link", raw);
	if (type != AE_IFREG && type != AE_IFDIR)
		return fail(MEMORY_EXIT_REFUSED, "import refused: '%s' is a device, FIFO or socket", raw);
	if (mode & (S_ISUID | S_ISGID | S_ISVTX))
		return fail(MEMORY_EXIT_REFUSED, "import refused: '%s' has a setuid, setgid or sticky bit", raw);
	if ((dir = import_walk(stage, path, &last, &why)) < 0)
		return fail(MEMORY_EXIT_REFUSED, "import refused: '%s' is %s", raw, why);
	if (!last) {
		close(dir);
		return MEMORY_EXIT_OK;	/* "." or "./": the store itself */
	}
	if (type == AE_IFDIR) {
		if (mkdirat(dir, last, mode & 0700 ? mode & 0777 : 0700) < 0 && errno != EEXIST) {
			code = fail(MEMORY_EXIT_FAIL, "import: cannot make '%s': %s", raw, strerror(errno));
		} else {
			code = MEMORY_EXIT_OK;
			dir_times_add(dt, raw, la.archive_entry_mtime(e));
		}
		close(dir);
		return code;
	}
	if (la.archive_entry_size_is_set(e) && quota > 0 && *total + la.archive_entry_size(e) > quota) {
		close(dir);
		return fail(MEMORY_EXIT_QUOTA, "import refused: the archive is larger than the memory quota (at '%s')", raw);
	}
	fd = openat(dir, last, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode & 0777);
	close(dir);
	if (fd < 0)
		return fail(MEMORY_EXIT_REFUSED, "import refused: '%s' is there twice or cannot be made: %s", raw, strerror(errno));
	for (;;) {
		const void *buf;
		size_t len;
		la_int64_t off;
		int r = la.archive_read_data_block(ar, &buf, &len, &off);

		if (r == ARCHIVE_EOF)
			break;
		if (r != ARCHIVE_OK) {
			code = fail(MEMORY_EXIT_REFUSED, "import refused: a broken archive at '%s': %s", raw, la.archive_error_string(ar));
			goto out;
		}
		*total += (long long)len;
		if (quota > 0 && *total > quota) {
			code = fail(MEMORY_EXIT_QUOTA, "import refused: the archive is larger than the memory quota (at '%s')", raw);
			goto out;
		}
		/* Sparse entries come with offsets; write where they say. */
		if (pwrite(fd, buf, len, off) != (ssize_t)len) {
			code = fail(errno == ENOSPC || errno == EDQUOT ? MEMORY_EXIT_QUOTA : MEMORY_EXIT_FAIL,
				    "import: writing '%s': %s", raw, strerror(errno));
			goto out;
		}
	}
	if (ftruncate(fd, la.archive_entry_size(e)) < 0 || fsync(fd) < 0) {
		code = fail(MEMORY_EXIT_FAIL, "import: writing '%s': %s", raw, strerror(errno));
		goto out;
	}
	{
		struct timespec ts[2] = { { la.archive_entry_mtime(e), 0 }, { la.archive_entry_mtime(e), 0 } };

		(void)futimens(fd, ts);
	}
	code = MEMORY_EXIT_OK;
out:
	close(fd);
	return code;
}

/* fsync every directory of the staged tree, so the swap brings in entries that are on disk. */
static void fsync_tree(int dir, int depth)
{
	struct dirent *d;
	DIR *dp;
	int fd;

	if (depth > MAX_DEPTH || (fd = dup(dir)) < 0)
		return;
	if (!(dp = fdopendir(fd))) {
		close(fd);
		return;
	}
	while ((d = readdir(dp))) {
		int sub;

		if (d->d_type != DT_DIR || strcmp(d->d_name, ".") == 0 || strcmp(d->d_name, "..") == 0)
			continue;
		if ((sub = openat(dir, d->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) >= 0) {
			fsync_tree(sub, depth + 1);
			close(sub);
		}
	}
	closedir(dp);
	(void)fsync(dir);
}

static int cmd_import(struct store *s)
{
	char stage_name[300], uniq[20];
	struct archive *ar;
	struct archive_entry *e;
	struct dir_times dt = { 0 };
	long long total = 0;
	int stage = -1, code = MEMORY_EXIT_OK, r, n = 0;
	struct stat ps, ds;
	/* A store with a file system of its own is no name the home can rename: stage inside it. */
	bool inner = s->dir >= 0 && fstat(s->parent, &ps) == 0 && fstat(s->dir, &ds) == 0 && ps.st_dev != ds.st_dev;
	int where = inner ? s->dir : s->parent;

	if ((code = archive_load()) != 0)
		return code;
	ar = la.archive_read_new();
	do {
		if (stage >= 0)
			close(stage);
		unique_suffix(uniq, sizeof(uniq));
		if (inner)
			snprintf(stage_name, sizeof(stage_name), ".import-%s", uniq);
		else
			snprintf(stage_name, sizeof(stage_name), ".%s.import-%s", s->name, uniq);
		if (mkdirat(where, stage_name, 0700) < 0 ||
		    (stage = openat(where, stage_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
			int err = errno;
			bool full = err == ENOSPC || err == EDQUOT;

			la.archive_read_free(ar);
			/* A store that is its own file system and full: the quota's error, as for a put. */
			return fail(full ? MEMORY_EXIT_QUOTA : MEMORY_EXIT_FAIL, "import: cannot make a staging directory: %s%s",
				    strerror(err), full ? " (the memory store is full: it holds its quota)" : "");
		}
	} while (!claim(stage));
	/* tar in its forms, plain or gzip'd; no filter that runs an external program. */
	la.archive_read_support_format_tar(ar);
	la.archive_read_support_filter_none(ar);
	la.archive_read_support_filter_gzip(ar);
	if (la.archive_read_open_fd(ar, STDIN_FILENO, BUF_SIZE) != ARCHIVE_OK) {
		code = fail(MEMORY_EXIT_REFUSED, "import refused: not a tar archive: %s", la.archive_error_string(ar));
		goto out;
	}
	while ((r = la.archive_read_next_header(ar, &e)) != ARCHIVE_EOF) {
		if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
			code = fail(MEMORY_EXIT_REFUSED, "import refused: not a valid tar archive: %s", la.archive_error_string(ar));
			goto out;
		}
		if (++n > MAX_ENTRIES) {
			code = fail(MEMORY_EXIT_REFUSED, "import refused: more than %d entries", MAX_ENTRIES);
			goto out;
		}
		if ((code = import_entry(ar, e, stage, &total, s->quota, &dt)) != MEMORY_EXIT_OK)
			goto out;
	}
	dir_times_apply(&dt, stage);
	fsync_tree(stage, 0);
	if (inner) {
		if (inner_commit(s->dir, stage_name) < 0) {
			code = fail(errno == ENOSPC || errno == EDQUOT ? MEMORY_EXIT_QUOTA : MEMORY_EXIT_FAIL,
				    "import: cannot swap the new store in: %s", strerror(errno));
			close(stage);
			stage = -1;
			inner_recover(s->dir);	/* our lock is gone: undo (or finish) like any leftover */
		}
		goto out;
	}
	/* The swap: the new store in, the old one out to the staging name, in one step. */
	if (s->dir >= 0)
		r = renameat2(s->parent, stage_name, s->parent, s->name, RENAME_EXCHANGE);
	else
		r = renameat(s->parent, stage_name, s->parent, s->name);
	if (r < 0) {
		code = fail(MEMORY_EXIT_FAIL, "import: cannot swap the new store in: %s", strerror(errno));
		goto out;
	}
	(void)fsync(s->parent);
out:
	/* On failure the staging tree (nothing of it reached the store); on success the old store. */
	if (stage >= 0 && remove_tree(where, stage_name, 0) < 0)
		fprintf(stderr, "agentd: memory: import: could not remove %s: %s\n", stage_name, strerror(errno));
	if (stage >= 0)
		close(stage);	/* its lock: a later sweep may take what could not be removed */
	la.archive_read_free(ar);
	dir_times_free(&dt);
	return code;
}

static int usage(void)
{
	fputs("agentd: usage: agentd memory [--dir DIR] [--quota BYTES] ls | get KEY | put KEY | rm KEY | export | import\n",
	      stderr);
	return MEMORY_EXIT_USAGE;
}

int memory_main(int argc, char **argv)
{
	struct store s = { .parent = -1, .dir = -1 };
	const char *dir = NULL, *verb, *key = NULL;
	bool writes;
	int i = 1, code;

	for (; i + 1 < argc && argv[i][0] == '-'; i += 2) {
		if (strcmp(argv[i], "--dir") == 0) {
			dir = argv[i + 1];
		} else if (strcmp(argv[i], "--quota") == 0) {
			char *end;

			errno = 0;
			s.quota = strtoll(argv[i + 1], &end, 10);
			if (errno || *end || s.quota < 0)
				return usage();
		} else {
			return usage();
		}
	}
	if (i >= argc)
		return usage();
	verb = argv[i++];
	if (strcmp(verb, "get") == 0 || strcmp(verb, "put") == 0 || strcmp(verb, "rm") == 0) {
		if (i >= argc)
			return usage();
		key = argv[i++];
		if (!memory_key_valid(key))
			return fail(MEMORY_EXIT_USAGE,
				    "invalid key '%.140s': 1 to 128 of A-Z a-z 0-9 . _ -, not starting with a dot", key);
	} else if (strcmp(verb, "ls") != 0 && strcmp(verb, "export") != 0 && strcmp(verb, "import") != 0) {
		return usage();
	}
	if (i != argc)
		return usage();
	writes = strcmp(verb, "put") == 0;
	if ((code = store_open(&s, dir, writes)) != 0)
		goto out;
	if (writes || strcmp(verb, "rm") == 0 || strcmp(verb, "import") == 0)
		sweep_leftovers(&s);
	if (strcmp(verb, "ls") == 0)
		code = cmd_ls(&s);
	else if (strcmp(verb, "get") == 0)
		code = cmd_get(&s, key);
	else if (strcmp(verb, "put") == 0)
		code = cmd_put(&s, key);
	else if (strcmp(verb, "rm") == 0)
		code = cmd_rm(&s, key);
	else if (strcmp(verb, "export") == 0)
		code = cmd_export(&s);
	else
		code = cmd_import(&s);
out:
	if (s.dir >= 0)
		close(s.dir);
	if (s.parent >= 0)
		close(s.parent);
	return code;
}
