/*
 * cron: the five-field cron(8) schedule syntax, for snapshot schedules and
 * cron triggers. cron_parse() turns text into bit sets; cron_next() finds
 * the next minute a schedule fires in the host's local time zone. Pure
 * functions: no global state, no I/O, no logging, safe from any thread.
 */
#ifndef FLEET_CRON_H
#define FLEET_CRON_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#define CRON_SPEC_MAX 128		/* longest accepted text */

struct cron_spec {
	uint64_t minutes;	/* bit n: minute n (0-59) */
	uint32_t hours;		/* 0-23 */
	uint32_t mdays;		/* 1-31 */
	uint16_t months;	/* 1-12 */
	uint8_t wdays;		/* 0-6, Sunday 0 (7 accepted in input as Sunday) */
	bool mday_any, wday_any;	/* field was '*' (for the cron(8) day-of-month OR day-of-week rule) */
};

/*
 * Parse standard 5-field cron text (minute hour day-of-month month
 * day-of-week): '*', numbers, ranges a-b, steps ('*' or a-b followed by /n;
 * a/n runs from a to the field's end), lists a,b,c, month names jan..dec and
 * day names sun..sat (case-insensitive, also in ranges), and the macros
 * @yearly @annually @monthly @weekly @daily @midnight @hourly. Fields are
 * separated by spaces or tabs. Day-of-week 7 is Sunday. 0, or -EINVAL with *why (if why is not NULL) set to a malloc'd
 * one-line message naming the bad field, e.g. "minute field: 61 is out of
 * range 0-59". *spec and *why are written only on the outcome they belong to.
 */
int cron_parse(const char *text, struct cron_spec *spec, char **why);

/*
 * The first minute strictly after `after` that matches, in the host's local
 * time zone (call tzset() after changing TZ), seconds zero; (time_t)-1 if
 * nothing matches within the next 5 years. If both day fields are
 * restricted, a day matches when either does (cron(8)). Across DST: local
 * times in a spring-forward gap do not exist and are skipped; in the
 * repeated hour of a fall-back, a spec whose hour field covers every hour
 * matches both passes (hourly and every-N-minutes keep their interval), any
 * other spec only the first pass (a daily job runs once, as in cron(8)).
 */
time_t cron_next(const struct cron_spec *spec, time_t after);

#endif
