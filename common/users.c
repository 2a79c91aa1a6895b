/*
 * users: see users.h. libc only, and none of its NSS: fgetpwent_r and
 * fgetgrent_r parse one line of the files, as nss_files does (malformed
 * lines are skipped), and say ERANGE, with the stream back at the line's
 * start, when the buffer is too small: it doubles up to LINE_MAX_BUF.
 */
#include "common/users.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LINE_MIN_BUF 4096
#define LINE_MAX_BUF (1u << 20)

/* path opened for reading: no symlink, a regular file (O_NONBLOCK: a FIFO cannot block the open). NULL and errno set. */
static FILE *open_db(const char *path)
{
	struct stat st;
	FILE *f = NULL;
	int e, fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);

	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) < 0)
		e = errno;
	else if (!S_ISREG(st.st_mode))
		e = EINVAL;
	else if (!(f = fdopen(fd, "re")))
		e = errno;
	else
		return f;
	close(fd);
	errno = e;
	return NULL;
}

/* Double *buf (of *len bytes) for a line that did not fit: 0, or -E2BIG past LINE_MAX_BUF, -ENOMEM. */
static int grow(char **buf, size_t *len)
{
	size_t want = *len ? *len * 2 : LINE_MIN_BUF;
	char *b;

	if (want > LINE_MAX_BUF)
		return -E2BIG;
	if (!(b = realloc(*buf, want)))
		return -ENOMEM;
	*buf = b;
	*len = want;
	return 0;
}

/* The first passwd entry that name (when not NULL) or uid matches; see users.h. */
static int user_find(const char *path, const char *name, uid_t uid, struct user *ret)
{
	struct passwd pw, *found;
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_db(path);
	int r;

	if (!f)
		return -errno;
	r = grow(&buf, &len);
	while (r == 0) {
		int e = fgetpwent_r(f, &pw, buf, len, &found);

		if (e == ERANGE) {
			r = grow(&buf, &len);
		} else if (e != 0) {
			r = e == ENOENT ? -ENOENT : -e;
		} else if (name ? strcmp(pw.pw_name, name) == 0 : pw.pw_uid == uid) {
			ret->pw = pw;
			ret->buf = buf;
			fclose(f);
			return 0;
		}
	}
	free(buf);
	fclose(f);
	return r;
}

int user_by_name(const char *path, const char *name, struct user *ret)
{
	/* An empty name would match nothing real; "+"/"-" lines are NIS compat, which the files are not. */
	if (!*name || *name == '+' || *name == '-')
		return -ENOENT;
	return user_find(path, name, 0, ret);
}

int user_by_uid(const char *path, uid_t uid, struct user *ret)
{
	return user_find(path, NULL, uid, ret);
}

void user_free(struct user *u)
{
	free(u->buf);
	u->buf = NULL;
}

static bool has_gid(const gid_t *v, size_t n, gid_t gid)
{
	for (size_t i = 0; i < n; i++)
		if (v[i] == gid)
			return true;
	return false;
}

int user_groups(const char *path, const char *user, gid_t gid, gid_t **ret, size_t *n)
{
	struct group gr, *found;
	gid_t *v = malloc(sizeof(*v)), *nv;
	size_t count = 1, room = 1;
	char *buf = NULL;
	size_t len = 0;
	FILE *f;
	int r;

	if (!v)
		return -ENOMEM;
	v[0] = gid;
	if (!(f = open_db(path))) {
		r = -errno;
		free(v);
		return r;
	}
	r = grow(&buf, &len);
	while (r == 0) {
		int e = fgetgrent_r(f, &gr, buf, len, &found);

		if (e == ERANGE) {
			r = grow(&buf, &len);
			continue;
		}
		if (e != 0) {
			r = e == ENOENT ? 1 : -e;
			break;
		}
		for (char **m = gr.gr_mem; m && *m; m++) {
			if (strcmp(*m, user) != 0 || has_gid(v, count, gr.gr_gid))
				continue;
			if (count == room) {
				if (!(nv = reallocarray(v, room * 2, sizeof(*v)))) {
					r = -ENOMEM;
					break;
				}
				v = nv;
				room *= 2;
			}
			v[count++] = gr.gr_gid;
			break;
		}
	}
	free(buf);
	fclose(f);
	if (r < 0) {
		free(v);
		return r;
	}
	*ret = v;
	*n = count;
	return 0;
}

int group_name_by_gid(const char *path, gid_t gid, char *buf, size_t size)
{
	struct group gr, *found;
	char *line = NULL;
	size_t len = 0;
	FILE *f;
	int r;

	if (size == 0)
		return -ERANGE;
	buf[0] = '\0';
	if (!(f = open_db(path)))
		return -errno;
	r = grow(&line, &len);
	while (r == 0) {
		int e = fgetgrent_r(f, &gr, line, len, &found);

		if (e == ERANGE) {
			r = grow(&line, &len);
		} else if (e != 0) {
			r = e == ENOENT ? -ENOENT : -e;
		} else if (gr.gr_gid == gid) {
			size_t n = strlen(gr.gr_name);

			if (n >= size) {
				r = -ERANGE;
			} else {
				memcpy(buf, gr.gr_name, n + 1);
				r = 1;
			}
		}
	}
	free(line);
	fclose(f);
	return r < 0 ? r : 0;
}
