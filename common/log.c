/* log: see log.h. */
#include "common/log.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static const char *log_ident = "fleet";
static int log_max = LOG_INFO;
static int log_fd = STDERR_FILENO;
static int log_tee_fd = -1;

static const char *const level_names[] = {
	[LOG_EMERG] = "emerg", [LOG_ALERT] = "alert", [LOG_CRIT] = "crit",
	[LOG_ERR] = "err", [LOG_WARNING] = "warning", [LOG_NOTICE] = "notice",
	[LOG_INFO] = "info", [LOG_DEBUG] = "debug",
};

void log_setup(const char *ident, int max_priority)
{
	log_ident = ident;
	log_max = max_priority;
}

void log_set_max_priority(int max_priority)
{
	log_max = max_priority;
}

void log_set_fd(int fd)
{
	log_fd = fd;
}

void log_set_tee_fd(int fd)
{
	log_tee_fd = fd;
}

int log_level_from_string(const char *s)
{
	for (size_t i = 0; i < ARRAY_SIZE(level_names); i++)
		if (strcmp(s, level_names[i]) == 0)
			return (int)i;
	if (strcmp(s, "error") == 0)
		return LOG_ERR;
	return -EINVAL;
}

const char *log_level_to_string(int priority)
{
	if (priority < 0 || priority >= (int)ARRAY_SIZE(level_names))
		return "unknown";
	return level_names[priority];
}

bool log_enabled(int priority)
{
	return priority <= log_max;
}

void log_msg(int priority, const char *fmt, ...)
{
	char line[4096];
	va_list ap;
	int n, saved = errno;

	if (priority > log_max)
		return;
	n = snprintf(line, sizeof(line), "<%d>%s: ", priority, log_ident);
	va_start(ap, fmt);
	if (n >= 0 && (size_t)n < sizeof(line))
		vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	va_end(ap);
	/* One write per line so concurrent writers do not interleave. */
	n = (int)strnlen(line, sizeof(line) - 2);
	line[n++] = '\n';
	(void)write_all(log_fd, line, (size_t)n);
	if (log_tee_fd >= 0)
		(void)write_all(log_tee_fd, line, (size_t)n);
	errno = saved;
}
