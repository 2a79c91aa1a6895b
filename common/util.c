/*
 * util: see util.h. Allocation failure aborts: fleetd cannot do anything
 * useful without memory, and call sites stay readable.
 */
#include "common/util.h"

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static _noreturn_ void oom(void)
{
	fputs("out of memory\n", stderr);
	abort();
}

void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p)
		oom();
	return p;
}

void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);
	if (!p)
		oom();
	return p;
}

void *xrealloc(void *p, size_t n)
{
	p = realloc(p, n ? n : 1);
	if (!p)
		oom();
	return p;
}

char *xstrdup(const char *s)
{
	char *p = strdup(s);
	if (!p)
		oom();
	return p;
}

char *xstrndup(const char *s, size_t n)
{
	char *p = strndup(s, n);
	if (!p)
		oom();
	return p;
}

char *xasprintf(const char *fmt, ...)
{
	va_list ap;
	char *s;

	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0)
		oom();
	va_end(ap);
	return s;
}

char **strv_copy(const char *const *v)
{
	size_t n = 0;
	char **c;

	if (!v)
		return NULL;
	while (v[n])
		n++;
	c = xcalloc(n + 1, sizeof(*c));
	for (size_t i = 0; i < n; i++)
		c[i] = xstrdup(v[i]);
	return c;
}

void strv_free(char **v)
{
	/* Wiped: an exec's env vector holds the agent's secrets. */
	for (char **p = v; p && *p; p++) {
		explicit_bzero(*p, strlen(*p));
		free(*p);
	}
	free(v);
}

int parse_long(const char *s, long min, long max, long *ret)
{
	char *end;
	long v;

	if (!s || !*s)
		return -EINVAL;
	errno = 0;
	v = strtol(s, &end, 10);
	if (*end || end == s)
		return -EINVAL;
	if (errno == ERANGE || v < min || v > max)
		return -ERANGE;
	*ret = v;
	return 0;
}

int write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len > 0) {
		ssize_t n = write(fd, p, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static char *executable_or_free(char *p)
{
	if (access(p, X_OK) == 0)
		return p;
	free(p);
	return NULL;
}

char *find_own_program(const char *name, const char *build_dir, const char *installed)
{
	char self[PATH_MAX], *dir, *p;
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	if (n > 0) {
		size_t dl;

		self[n] = '\0';
		dir = dirname(self);
		dl = strlen(dir);
		if ((p = executable_or_free(xasprintf("%s/%s", dir, name))))
			return p;
		if (build_dir && (p = executable_or_free(xasprintf("%s/../%s/%s", dir, build_dir, name))))
			return p;
		if (build_dir && dl >= 11 && strcmp(dir + dl - 11, "/tests/unit") == 0 &&
		    (p = executable_or_free(xasprintf("%.*s/%s/%s", (int)(dl - 11), dir, build_dir, name))))
			return p;
	}
	return installed && access(installed, X_OK) == 0 ? xstrdup(installed) : NULL;
}

int mkdir_p(const char *path, mode_t mode)
{
	char buf[PATH_MAX];
	size_t len = strlen(path);

	if (len == 0 || len >= sizeof(buf))
		return -ENAMETOOLONG;
	memcpy(buf, path, len + 1);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, mode) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(buf, mode) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

long long now_usec(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000LL + ts.tv_nsec / 1000;
}

const char *format_utc(long long secs, char *buf, size_t len)
{
	time_t t = (time_t)secs;
	struct tm tm;

	if (!gmtime_r(&t, &tm) || strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
		snprintf(buf, len, "%lld", secs);
	return buf;
}
