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

/* What a cron trigger does about the slots it missed while fleetd was down. */
enum cron_catch_up {
	CRON_CATCH_UP_ONCE,	/* one run for all of them (the default) */
	CRON_CATCH_UP_SKIP,	/* none */
};
/* "once" or "skip"; NULL for a value out of range. */
const char *cron_catch_up_to_string(enum cron_catch_up c);
/* -EINVAL for a word that is neither. */
int cron_catch_up_from_string(const char *s);

enum cron_due {
	CRON_DUE_NONE,		/* no slot since the last one dealt with */
	CRON_DUE_FIRE,		/* queue one run */
	CRON_DUE_SKIP,		/* slots were missed and catch-up is skip: record, queue nothing */
	CRON_DUE_CLOCK_BACK,	/* last is far in the future: the clock went back; record now, queue nothing */
};

/*
 * A clock stepped back by at most this much (an NTP correction, a wrong
 * clock put right) repeats no slot: slots up to what was already dealt
 * with wait for the clock to pass it again, as cron(8) does. Further back,
 * waiting would stall the schedule for as long: it starts over from now.
 */
#define CRON_CLOCK_BACK_MAX_S (3 * 3600)

/*
 * A cron trigger's decision at now, in the host's local time zone (as
 * cron_next). last: the end of what was already dealt with (the time the
 * last slot fired or was skipped, or the trigger's creation); since: when
 * this fleetd began watching (slots before it were missed). A slot in
 * [since, now] fires; if only missed slots are due, `once` fires one run
 * for all of them and `skip` none, never one per missed slot. Whatever is
 * due, the caller then records now as the new last, so no slot is dealt
 * with twice. *slot (if not NULL) is the slot decided on, or (time_t)-1.
 * last more than CRON_CLOCK_BACK_MAX_S after now (the clock went back) is
 * CRON_DUE_CLOCK_BACK: the caller records now, and the next slot after now
 * fires. A clock that jumps forward is like downtime: one run at most.
 */
enum cron_due cron_due(const struct cron_spec *spec, enum cron_catch_up catch_up, time_t last, time_t since,
		       time_t now, time_t *slot);

#endif
