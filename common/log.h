/*
 * log: one line per message on stderr (or a log file when fleetd runs
 * detached), prefixed with the syslog priority as "<3>" so journald files
 * each line at the right level. Secrets must never be passed here.
 */
#ifndef FLEET_LOG_H
#define FLEET_LOG_H

#include <stdbool.h>
#include <syslog.h>
#include "common/util.h"

/* Set the program name and the most verbose priority that is printed. */
void log_setup(const char *ident, int max_priority);
void log_set_max_priority(int max_priority);
/* Send log lines to fd instead of stderr (fleetd when detached). */
void log_set_fd(int fd);
/* Also copy log lines to fd (-1: stop); fleetd shows startup errors on the terminal this way. */
void log_set_tee_fd(int fd);
/* Map "debug", "info", "notice", "warning", "err" to a priority; -EINVAL. */
int log_level_from_string(const char *s);
const char *log_level_to_string(int priority);

void log_msg(int priority, const char *fmt, ...) _printf_(2, 3);
/* Whether a line at priority would be printed: to skip building one that would not. */
bool log_enabled(int priority);

#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_notice(...) log_msg(LOG_NOTICE, __VA_ARGS__)
#define log_warning(...) log_msg(LOG_WARNING, __VA_ARGS__)
#define log_error(...) log_msg(LOG_ERR, __VA_ARGS__)

#endif
