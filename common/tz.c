/* tz: see tz.h. */
#include "common/tz.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"

#define TZ_DIR "/usr/share/zoneinfo"

static bool name_ok(const char *zone)
{
	size_t len = strlen(zone);

	if (len == 0 || len > TZ_NAME_MAX)
		return false;
	for (const char *part = zone;;) {
		size_t n = strcspn(part, "/");

		/* No empty, "." or ".." part: the name stays inside the database. */
		if (n == 0 || (n == 1 && part[0] == '.') || (n == 2 && part[0] == '.' && part[1] == '.'))
			return false;
		for (size_t i = 0; i < n; i++) {
			char c = part[i];

			if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
			      c == '_' || c == '+' || c == '-' || c == '.'))
				return false;
		}
		if (!part[n])
			return true;
		part += n + 1;
	}
}

int tz_check(const char *zone, char **why)
{
	_cleanup_free_ char *path = NULL;
	char magic[4];
	struct stat st;
	ssize_t got;
	int fd;

	if (!zone || !name_ok(zone)) {
		*why = xasprintf("'%s' is not a time zone name (like Europe/Berlin or UTC)", zone ? zone : "");
		return -EINVAL;
	}
	path = xasprintf(TZ_DIR "/%s", zone);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)) < 0) {
		*why = xasprintf("unknown time zone '%s' (not in " TZ_DIR ")", zone);
		return -EINVAL;
	}
	got = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? read(fd, magic, sizeof(magic)) : -1;
	close(fd);
	if (got != (ssize_t)sizeof(magic) || memcmp(magic, "TZif", 4) != 0) {
		*why = xasprintf("unknown time zone '%s' (" TZ_DIR "/%s is not a zone file)", zone, zone);
		return -EINVAL;
	}
	return 0;
}

static pthread_mutex_t tz_lock = PTHREAD_MUTEX_INITIALIZER;
static char *tz_saved;		/* TZ before tz_enter */
static bool tz_swapped;

/*
 * TZ is only ever replaced, never added or removed while fleetd runs
 * threads: glibc's setenv of a variable that exists swaps one pointer in
 * environ, while adding or removing one moves the array other threads may
 * be reading (getenv, or environ handed to a spawned tool). So an unset TZ
 * becomes ":/etc/localtime" (what libc reads when TZ is unset) at the first
 * swap and stays set.
 */
void tz_enter(const char *zone)
{
	const char *old;

	pthread_mutex_lock(&tz_lock);
	tz_swapped = zone != NULL;
	if (!zone)
		return;
	if (!(old = getenv("TZ"))) {
		setenv("TZ", ":/etc/localtime", 1);
		old = getenv("TZ");
	}
	tz_saved = xstrdup(old);
	setenv("TZ", zone, 1);
	tzset();
}

void tz_leave(void)
{
	if (tz_swapped) {
		setenv("TZ", tz_saved, 1);
		tzset();
		free(tz_saved);
		tz_saved = NULL;
		tz_swapped = false;
	}
	pthread_mutex_unlock(&tz_lock);
}
