/*
 * user_snapshot: see user_snapshot.h. One recursive walk with a directory
 * fd per level on each side (source, destination, previous snapshot), all
 * opened relative to their parent with O_NOFOLLOW, so a path is never
 * resolved twice and a symlink is never followed, wherever it points.
 *
 * Per regular file, in this order:
 *  1. a second name of an inode already copied in this walk: linkat to the
 *     new copy (hard links inside the tree stay hard links);
 *  2. unchanged since the previous snapshot (size, mtime, mode, uid, gid,
 *     and that mtime older than prev_before): linkat to the previous
 *     snapshot's file: no data, no new inode;
 *  3. FICLONE (btrfs, xfs, ...): shares the blocks, copy-on-write;
 *  4. a plain copy: copy_file_range over the data segments (SEEK_DATA /
 *     SEEK_HOLE, so sparse files stay sparse), read/write if that fails.
 * Hard links come before reflinks because an unchanged file then costs
 * nothing at all, while a reflink still costs an inode and extent refs.
 */
#include "user/snapshot.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"

#define STR_(x) #x
#define STR(x) STR_(x)
#define DEPTH_MAX_STR STR(USER_SNAPSHOT_DEPTH_MAX)

struct ino_ent {
	dev_t dev;
	ino_t ino;
	char *path;	/* relative to the new top directory */
};

struct walk {
	const struct user_snapshot_copy *c;
	struct user_snapshot_stats *st;
	dev_t dev;		/* the source tree's file system */
	int top;		/* the new top directory */
	bool no_reflink;	/* FICLONE failed as unsupported once: do not ask again */
	struct ino_ent *inos;	/* hash (open addressing) of inodes with more than one name, seen so far */
	size_t n_inos, cap_inos;	/* cap: a power of two, at least twice n */
	char *path;		/* relative path of the entry at hand, for links and messages */
	size_t path_len, path_cap;
	char *why;
};

static void path_push(struct walk *w, const char *name, size_t *saved)
{
	size_t n = strlen(name);

	*saved = w->path_len;
	if (w->path_len + n + 2 > w->path_cap)
		w->path = xrealloc(w->path, w->path_cap = 2 * (w->path_len + n + 2));
	if (w->path_len)
		w->path[w->path_len++] = '/';
	memcpy(w->path + w->path_len, name, n + 1);
	w->path_len += n;
}

static void path_pop(struct walk *w, size_t saved)
{
	w->path_len = saved;
	w->path[saved] = '\0';
}

static int fail(struct walk *w, int r, const char *what)
{
	if (!w->why)
		w->why = xasprintf("cannot %s %s: %s", what, w->path_len ? w->path : ".", strerror(-r));
	return r;
}

static bool cancelled(const struct walk *w)
{
	return w->c->cancel && atomic_load(w->c->cancel);
}

/* chown before chmod: chown clears set-id bits. */
static int set_meta(int fd, const struct stat *s)
{
	struct timespec ts[2] = { s->st_atim, s->st_mtim };

	if (fchown(fd, s->st_uid, s->st_gid) < 0 || fchmod(fd, s->st_mode & 07777) < 0 || futimens(fd, ts) < 0)
		return -errno;
	return 0;
}

static int set_meta_at(int dir, const char *name, const struct stat *s)
{
	struct timespec ts[2] = { s->st_atim, s->st_mtim };

	if (fchownat(dir, name, s->st_uid, s->st_gid, AT_SYMLINK_NOFOLLOW) < 0)
		return -errno;
	if (!S_ISLNK(s->st_mode) && fchmodat(dir, name, s->st_mode & 07777, 0) < 0)
		return -errno;
	if (utimensat(dir, name, ts, AT_SYMLINK_NOFOLLOW) < 0)
		return -errno;
	return 0;
}

static bool older(const struct timespec *a, const struct timespec *b)
{
	return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

/* A snapshot's files mostly have several names (shared with other snapshots): a restore meets many. */
static size_t ino_slot(const struct ino_ent *t, size_t cap, dev_t dev, ino_t ino)
{
	size_t i = (size_t)((ino * 0x9E3779B97F4A7C15ULL) ^ dev) & (cap - 1);

	while (t[i].path && !(t[i].ino == ino && t[i].dev == dev))
		i = (i + 1) & (cap - 1);
	return i;
}

static struct ino_ent *ino_find(struct walk *w, const struct stat *s)
{
	size_t i;

	if (!w->cap_inos)
		return NULL;
	i = ino_slot(w->inos, w->cap_inos, s->st_dev, s->st_ino);
	return w->inos[i].path ? &w->inos[i] : NULL;
}

static void ino_add(struct walk *w, const struct stat *s)
{
	if (2 * (w->n_inos + 1) > w->cap_inos) {
		size_t cap = w->cap_inos ? 2 * w->cap_inos : 64;
		struct ino_ent *t = xcalloc(cap, sizeof(*t));

		for (size_t i = 0; i < w->cap_inos; i++)
			if (w->inos[i].path)
				t[ino_slot(t, cap, w->inos[i].dev, w->inos[i].ino)] = w->inos[i];
		free(w->inos);
		w->inos = t;
		w->cap_inos = cap;
	}
	w->inos[ino_slot(w->inos, w->cap_inos, s->st_dev, s->st_ino)] =
		(struct ino_ent){ s->st_dev, s->st_ino, xstrdup(w->path) };
	w->n_inos++;
}

/* Copy size bytes of data from in to out, keeping holes. */
static int copy_data(int in, int out, off_t size)
{
	bool cfr = true;
	off_t off = 0;

	while (off < size) {
		off_t data = lseek(in, off, SEEK_DATA), hole;

		if (data < 0) {
			if (errno == ENXIO)
				break;		/* the rest is a hole */
			data = off;		/* no SEEK_DATA: all of it is data */
			hole = size;
		} else if ((hole = lseek(in, data, SEEK_HOLE)) < 0 || hole > size) {
			hole = size;
		}
		off_t pin = data, pout = data;
		while (pin < hole) {
			ssize_t n;

			if (cfr) {
				n = copy_file_range(in, &pin, out, &pout, (size_t)(hole - pin), 0);
				if (n < 0 && (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP)) {
					cfr = false;
					continue;
				}
			} else {
				char chunk[65536];
				size_t want = (size_t)(hole - pin) < sizeof(chunk) ? (size_t)(hole - pin) : sizeof(chunk);

				n = pread(in, chunk, want, pin);
				if (n > 0) {
					for (ssize_t done = 0, m; done < n; done += m)
						if ((m = pwrite(out, chunk + done, (size_t)(n - done), pout + done)) < 0) {
							if (errno == EINTR) {
								m = 0;
								continue;
							}
							return -errno;
						}
					pin += n;
					pout += n;
				}
			}
			if (n < 0) {
				if (errno == EINTR)
					continue;
				return -errno;
			}
			if (n == 0)
				break;	/* shorter than it said: keep what there is */
		}
		off = hole;
	}
	if (ftruncate(out, size) < 0)	/* a trailing hole */
		return -errno;
	return 0;
}

static int copy_file(struct walk *w, int src, int dst, int prev, const char *name, const struct stat *s)
{
	_cleanup_close_ int in = -1, out = -1;
	struct ino_ent *e;
	struct stat ps, is;
	int r;

	if (s->st_nlink > 1 && (e = ino_find(w, s))) {
		if (linkat(w->top, e->path, dst, name, 0) == 0) {
			w->st->inner_links++;
			return 0;
		}	/* too long a path, too many links: a copy of its own */
	}
	if (prev >= 0 && fstatat(prev, name, &ps, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(ps.st_mode) &&
	    ps.st_size == s->st_size && ps.st_mtim.tv_sec == s->st_mtim.tv_sec &&
	    ps.st_mtim.tv_nsec == s->st_mtim.tv_nsec && ps.st_mode == s->st_mode && ps.st_uid == s->st_uid &&
	    ps.st_gid == s->st_gid && older(&s->st_mtim, &w->c->prev_before) && linkat(prev, name, dst, name, 0) == 0) {
		w->st->shared++;
		goto remember;
	}

	/* O_NONBLOCK: if it is no longer a regular file (it cannot be, frozen), open must not hang on a FIFO. */
	in = openat(src, name, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_NOATIME | O_CLOEXEC);
	if (in < 0 && errno == EPERM)
		in = openat(src, name, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
	if (in < 0)
		return fail(w, -errno, "open");
	if (fstat(in, &is) < 0)
		return fail(w, -errno, "stat");
	if (!S_ISREG(is.st_mode) || is.st_ino != s->st_ino || is.st_dev != s->st_dev)
		return fail(w, -ESTALE, "copy (it changed while being copied)");
	out = openat(dst, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (out < 0)
		return fail(w, -errno, "create");
	if (!w->no_reflink && is.st_size > 0) {
		if (ioctl(out, FICLONE, in) == 0) {
			w->st->reflinked++;
			goto meta;
		}
		if (errno == EOPNOTSUPP || errno == ENOTTY || errno == EXDEV || errno == EINVAL || errno == ENOSYS)
			w->no_reflink = true;
	}
	if ((r = copy_data(in, out, is.st_size)) < 0)
		return fail(w, r, "copy");
	w->st->copied++;
meta:
	if ((r = set_meta(out, s)) < 0)
		return fail(w, r, "set owner, mode and times of");
remember:
	if (s->st_nlink > 1)
		ino_add(w, s);
	return 0;
}

static int copy_dir(struct walk *w, int src, int dst, int prev, int depth);

static int copy_entry(struct walk *w, int src, int dst, int prev, const char *name, int depth)
{
	struct stat s;
	int r;

	if (fstatat(src, name, &s, AT_SYMLINK_NOFOLLOW) < 0)
		return fail(w, -errno, "stat");
	bool top_child = depth == 1 && S_ISDIR(s.st_mode);
	if (s.st_dev != w->dev && !(top_child && w->c->mount_child && strcmp(name, w->c->mount_child) == 0)) {
		w->st->skipped++;	/* a mount point: another file system is not the home's */
		return 0;
	}
	switch (s.st_mode & S_IFMT) {
	case S_IFREG: {
		long long before = w->st->copied;
		struct stat ns;

		w->st->files++;
		if ((r = copy_file(w, src, dst, prev, name, &s)) < 0)
			return r;
		if (w->st->copied > before && fstatat(dst, name, &ns, AT_SYMLINK_NOFOLLOW) == 0)
			w->st->bytes_added += (long long)ns.st_blocks * 512;
		return 0;
	}
	case S_IFDIR: {
		_cleanup_close_ int sfd = -1, dfd = -1, pfd = -1;
		struct stat ns;

		if (depth >= USER_SNAPSHOT_DEPTH_MAX)
			return fail(w, -ELOOP, "copy (nested too deep: at most " DEPTH_MAX_STR " directories)");
		w->st->dirs++;
		sfd = openat(src, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (sfd < 0)
			return fail(w, -errno, "open");
		if (mkdirat(dst, name, 0700) < 0)
			return fail(w, -errno, "create");
		dfd = openat(dst, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (dfd < 0)
			return fail(w, -errno, "open the copy of");
		if (prev >= 0)
			pfd = openat(prev, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (!(top_child && w->c->empty_child && strcmp(name, w->c->empty_child) == 0)) {
			dev_t outer = w->dev;

			w->dev = s.st_dev;	/* the same, or the one other file system allowed (mount_child) */
			r = copy_dir(w, sfd, dfd, pfd, depth + 1);
			w->dev = outer;
			if (r < 0)
				return r;
		}
		/* after its entries, which change its mtime */
		if ((r = set_meta(dfd, &s)) < 0)
			return fail(w, r, "set owner, mode and times of");
		if (fstat(dfd, &ns) == 0)
			w->st->bytes_added += (long long)ns.st_blocks * 512;
		return 0;
	}
	case S_IFLNK: {
		_cleanup_free_ char *target = xmalloc((size_t)s.st_size + 2);
		ssize_t n = readlinkat(src, name, target, (size_t)s.st_size + 1);

		if (n < 0)
			return fail(w, -errno, "read the link");
		if (n > s.st_size)
			return fail(w, -ESTALE, "read the link (it changed)");
		target[n] = '\0';
		w->st->symlinks++;
		if (symlinkat(target, dst, name) < 0)
			return fail(w, -errno, "create the link");
		if ((r = set_meta_at(dst, name, &s)) < 0)
			return fail(w, r, "set owner and times of");
		return 0;
	}
	case S_IFIFO:
		w->st->others++;
		if (mknodat(dst, name, S_IFIFO | 0600, 0) < 0)
			return fail(w, -errno, "create the FIFO");
		if ((r = set_meta_at(dst, name, &s)) < 0)
			return fail(w, r, "set owner, mode and times of");
		return 0;
	default:
		w->st->skipped++;	/* sockets mean nothing without their listener; device nodes are never copied */
		return 0;
	}
}

static int copy_dir(struct walk *w, int src, int dst, int prev, int depth)
{
	int fd = dup(src);
	DIR *d;
	struct dirent *de;
	int r = 0;

	if (fd < 0 || !(d = fdopendir(fd))) {
		r = -errno;
		if (fd >= 0)
			close(fd);
		return fail(w, r, "list");
	}
	for (;;) {
		size_t saved;

		errno = 0;
		if (!(de = readdir(d))) {
			if (errno)
				r = fail(w, -errno, "list");
			break;
		}
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (cancelled(w)) {
			r = -ECANCELED;
			if (!w->why)
				w->why = xstrdup("cancelled (fleetd is stopping)");
			break;
		}
		path_push(w, de->d_name, &saved);
		r = copy_entry(w, src, dst, prev, de->d_name, depth);
		path_pop(w, saved);
		if (r < 0 && r != -ECANCELED && w->c->tolerant) {
			/* changed under the walk (or cannot be copied): the exact pass will see it */
			w->st->skipped++;
			free(w->why);
			w->why = NULL;
			r = 0;
		}
		if (r < 0)
			break;
	}
	closedir(d);
	return r;
}

int user_snapshot_copy(const struct user_snapshot_copy *c, struct user_snapshot_stats *st, char **why)
{
	struct walk w = { .c = c, .st = st, .top = -1 };
	_cleanup_close_ int sfd = -1, pfd = -1;
	struct stat s, ns;
	int r;

	memset(st, 0, sizeof(*st));
	w.path = xstrdup("");
	sfd = openat(c->src_dir, c->src_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (sfd < 0 || fstat(sfd, &s) < 0) {
		r = fail(&w, -errno, "open");
		goto out;
	}
	w.dev = s.st_dev;
	if (mkdirat(c->dst_dir, c->dst_name, 0700) < 0) {
		r = fail(&w, -errno, "create the copy of");
		goto out;
	}
	w.top = openat(c->dst_dir, c->dst_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (w.top < 0) {
		r = fail(&w, -errno, "open the copy of");
		goto out;
	}
	if (c->prev_fd >= 0)
		pfd = dup(c->prev_fd);
	st->dirs++;
	if ((r = copy_dir(&w, sfd, w.top, pfd, 1)) < 0)
		goto out;
	if (c->top_root) {
		struct timespec ts[2] = { s.st_atim, s.st_mtim };
		if (fchown(w.top, 0, 0) < 0 || fchmod(w.top, 0700) < 0 || futimens(w.top, ts) < 0)
			r = fail(&w, -errno, "set owner, mode and times of");
	} else if ((r = set_meta(w.top, &s)) < 0) {
		r = fail(&w, r, "set owner, mode and times of");
	}
	if (r == 0 && fstat(w.top, &ns) == 0)
		st->bytes_added += (long long)ns.st_blocks * 512;
out:
	if (w.top >= 0)
		close(w.top);
	for (size_t i = 0; i < w.cap_inos; i++)
		free(w.inos[i].path);
	free(w.inos);
	free(w.path);
	if (r < 0 && why)
		*why = TAKE_PTR(w.why);
	free(w.why);
	return r;
}

int user_snapshot_newest(int dir, char **ret)
{
	int fd = dup(dir);
	DIR *d;
	struct dirent *de;
	struct timespec best = { 0, 0 };
	char *name = NULL;

	if (fd < 0 || !(d = fdopendir(fd))) {
		int r = -errno;
		if (fd >= 0)
			close(fd);
		return r;
	}
	rewinddir(d);
	while ((de = readdir(d))) {
		struct stat s;

		if (de->d_name[0] == '.' || fstatat(dir, de->d_name, &s, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(s.st_mode))
			continue;
		if (!name || s.st_mtim.tv_sec > best.tv_sec ||
		    (s.st_mtim.tv_sec == best.tv_sec && s.st_mtim.tv_nsec > best.tv_nsec)) {
			free(name);
			name = xstrdup(de->d_name);
			best = s.st_mtim;
		}
	}
	closedir(d);
	if (!name)
		return -ENOENT;
	*ret = name;
	return 0;
}

struct usage_ent {
	dev_t dev;
	ino_t ino;
	nlink_t nlink;
	long long bytes;
};

struct usage {
	long long total;
	struct usage_ent *v;
	size_t n, cap;
};

static int usage_cmp(const void *a, const void *b)
{
	const struct usage_ent *x = a, *y = b;

	if (x->dev != y->dev)
		return x->dev < y->dev ? -1 : 1;
	return (x->ino > y->ino) - (x->ino < y->ino);
}

static int usage_dir(struct usage *u, int dir, int depth)
{
	int fd = dup(dir), r = 0;
	struct dirent *de;
	DIR *d;

	if (depth > USER_SNAPSHOT_DEPTH_MAX)
		return -ELOOP;
	if (fd < 0 || !(d = fdopendir(fd))) {
		r = -errno;
		if (fd >= 0)
			close(fd);
		return r;
	}
	while (r == 0 && (de = readdir(d))) {
		struct stat s;

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (fstatat(dir, de->d_name, &s, AT_SYMLINK_NOFOLLOW) < 0) {
			r = -errno;
			break;
		}
		if (S_ISDIR(s.st_mode)) {
			int sub = openat(dir, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub < 0) {
				r = -errno;
				break;
			}
			u->total += (long long)s.st_blocks * 512;
			r = usage_dir(u, sub, depth + 1);
			close(sub);
		} else if (s.st_nlink > 1) {
			if (u->n == u->cap)
				u->v = xrealloc(u->v, (u->cap = u->cap ? 2 * u->cap : 256) * sizeof(*u->v));
			u->v[u->n++] = (struct usage_ent){ s.st_dev, s.st_ino, s.st_nlink, (long long)s.st_blocks * 512 };
		} else {
			u->total += (long long)s.st_blocks * 512;
		}
	}
	closedir(d);
	return r;
}

int user_snapshot_usage(int dir, long long *ret)
{
	struct usage u = { 0 };
	struct stat s;
	int r;

	if (fstat(dir, &s) < 0)
		return -errno;
	u.total = (long long)s.st_blocks * 512;
	if ((r = usage_dir(&u, dir, 0)) == 0) {
		if (u.n)
			qsort(u.v, u.n, sizeof(*u.v), usage_cmp);
		/* an inode counts when every one of its names is inside the tree: nothing else holds it */
		for (size_t i = 0, j; i < u.n; i = j) {
			for (j = i + 1; j < u.n && u.v[j].ino == u.v[i].ino && u.v[j].dev == u.v[i].dev; j++)
				;
			if ((nlink_t)(j - i) >= u.v[i].nlink)
				u.total += u.v[i].bytes;
		}
		*ret = u.total;
	}
	free(u.v);
	return r;
}
