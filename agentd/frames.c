/* frames: see frames.h. */
#include "agentd/frames.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/names.h"

int frame_read(const char *magic, size_t max, char **ret, size_t *len)
{
	size_t m = strlen(magic), h = 0, n, got = 0;
	char head[48], *buf, *end;

	for (;;) {
		ssize_t r = read(STDIN_FILENO, head + h, 1);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0 || h + 1 >= sizeof(head))
			return -1;
		if (head[h++] == '\n')
			break;
	}
	head[h - 1] = '\0';
	if (strncmp(head, magic, m) != 0 || !isdigit((unsigned char)head[m]))
		return -1;
	errno = 0;
	n = strtoul(head + m, &end, 10);
	if (errno || *end || n > max || !(buf = malloc(n + 1)))
		return -1;
	while (got < n) {
		ssize_t r = read(STDIN_FILENO, buf + got, n - got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			free(buf);
			return -1;
		}
		got += (size_t)r;
	}
	buf[n] = '\0';
	*ret = buf;
	*len = n;
	return 0;
}

static int fail(const char *what, int err)
{
	fprintf(stderr, "agentd: run-as: --files-stdin: %s%s%s\n", what, err ? ": " : "", err ? strerror(err) : "");
	return -1;
}

/* NAME=x is a valid environment entry exactly when NAME is a valid name. */
static int name_valid(const char *name)
{
	char entry[160];

	return strlen(name) < sizeof(entry) - 2 && snprintf(entry, sizeof(entry), "%s=", name) > 0 &&
	       env_entry_valid(entry);
}

int files_install(char *body, size_t len, const char *dir, uid_t uid, gid_t gid)
{
	char opts[96];
	struct stat st;
	size_t off = 0;
	int dfd, r = -1;

	/* A mount namespace of this command's own: the tmpfs is seen by it and what it starts, no one else. */
	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		return fail("cannot make a mount namespace", errno);
	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		return fail("cannot make the secrets directory", errno);
	if (lstat(dir, &st) < 0 || !S_ISDIR(st.st_mode))
		return fail("the secrets directory is not a directory", 0);
	snprintf(opts, sizeof(opts), "mode=0700,uid=%u,gid=%u,size=%zu", (unsigned)uid, (unsigned)gid,
		 len + (64u << 10));
	if (mount("tmpfs", dir, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, opts) < 0)
		return fail("cannot mount a tmpfs on the secrets directory", errno);
	if ((dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
		return fail("cannot open the secrets directory", errno);
	while (off < len) {
		const char *name = body + off, *digits;
		size_t nlen = strnlen(name, len - off), dlen, size;
		char *end;
		int fd;

		if (nlen == len - off || !name_valid(name))
			goto bad;
		digits = name + nlen + 1;
		dlen = strnlen(digits, len - off - nlen - 1);
		if (dlen == 0 || dlen == len - off - nlen - 1 || dlen > 20 || !isdigit((unsigned char)digits[0]))
			goto bad;
		errno = 0;
		size = strtoul(digits, &end, 10);
		if (errno || *end || size > len - off - nlen - 1 - dlen - 1)
			goto bad;
		fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0400);
		if (fd < 0) {
			fail("cannot create a file", errno);
			goto out;
		}
		for (const char *d = digits + dlen + 1, *stop = d + size; d < stop;) {
			ssize_t w = write(fd, d, (size_t)(stop - d));

			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0) {
				fail("cannot write a file", w < 0 ? errno : EIO);
				close(fd);
				goto out;
			}
			d += w;
		}
		if (fchown(fd, uid, gid) < 0) {
			fail("cannot hand a file to the user", errno);
			close(fd);
			goto out;
		}
		close(fd);
		off += nlen + 1 + dlen + 1 + size;
	}
	r = 0;
	goto out;
bad:
	fail("stdin does not hold a valid files frame", 0);
out:
	close(dfd);
	explicit_bzero(body, len);
	return r;
}
