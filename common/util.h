/*
 * util: allocation wrappers that abort on failure, cleanup helpers for
 * __attribute__((cleanup)), and small string helpers shared by fleetd,
 * fleetctl and agentd. Nothing here may depend on a third-party library.
 */
#ifndef FLEET_UTIL_H
#define FLEET_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define _cleanup_(f) __attribute__((cleanup(f)))
#define _printf_(a, b) __attribute__((format(printf, a, b)))
#define _noreturn_ __attribute__((noreturn))
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* Hand ownership out of a cleanup-managed variable. */
#define TAKE_PTR(p) ({ __typeof__(p) _p = (p); (p) = NULL; _p; })
#define TAKE_FD(fd) ({ int _fd = (fd); (fd) = -1; _fd; })

void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
char *xasprintf(const char *fmt, ...) _printf_(1, 2);

static inline void freep(void *p) { free(*(void **)p); }
static inline void closep(int *fd) { if (*fd >= 0) close(*fd); }
static inline void fclosep(FILE **f) { if (*f) fclose(*f); }
#define _cleanup_free_ _cleanup_(freep)
#define _cleanup_close_ _cleanup_(closep)
#define _cleanup_fclose_ _cleanup_(fclosep)

/* Deep copy of a NULL-terminated string vector (NULL stays NULL); strv_free wipes and frees one. */
char **strv_copy(const char *const *v);
void strv_free(char **v);

/* Parse a decimal integer within [min, max]; -EINVAL or -ERANGE. */
int parse_long(const char *s, long min, long max, long *ret);

/* Write all of buf to fd, retrying on EINTR and short writes; -errno. */
int write_all(int fd, const void *buf, size_t len);

/* Create every missing directory of path with mode; -errno. */
int mkdir_p(const char *path, mode_t mode);

/*
 * One of fleet's own programs, found as fleetd finds it: beside the running
 * executable (installed together, or a build tree's daemon/), in the build
 * tree's build_dir/ (when not NULL) from daemon/ or tests/unit/, else at
 * installed. A new string, or NULL when none is executable.
 */
char *find_own_program(const char *name, const char *build_dir, const char *installed);

/* Format unix seconds as "2026-01-31T12:00:00Z" into buf (at least 21 bytes). */
const char *format_utc(long long secs, char *buf, size_t len);

/* Microseconds on the monotonic clock. */
long long now_usec(void);

#endif
