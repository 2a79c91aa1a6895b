/*
 * cron triggers' decisions (common/cron.c cron_due) with no clock: every
 * time is passed in. Nothing due, an on-time slot, slots missed while
 * fleetd was down (once: one run, skip: none, never one per slot), a slot
 * after restart among missed ones, restarts with nothing missed; then
 * named zones (common/tz.c): the check of a zone name, and the next slot in
 * Asia/Kolkata (UTC+05:30) against UTC.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/cron.h"
#include "common/tz.h"
#include "../tap.h"

/* "YYYY-MM-DD HH:MM:SS" in UTC. */
static time_t utc(const char *s)
{
	struct tm tm = { 0 };

	if (sscanf(s, "%d-%d-%d %d:%d:%d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min,
		   &tm.tm_sec) != 6) {
		printf("# bad test time '%s'\n", s);
		exit(99);
	}
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	return timegm(&tm);
}

static struct cron_spec spec_of(const char *text)
{
	struct cron_spec s;

	if (cron_parse(text, &s, NULL) < 0) {
		printf("# bad test spec '%s'\n", text);
		exit(99);
	}
	return s;
}

static const char *due_name(enum cron_due d)
{
	return d == CRON_DUE_NONE ? "none" : d == CRON_DUE_FIRE ? "fire" : d == CRON_DUE_SKIP ? "skip"
		: d == CRON_DUE_CLOCK_BACK ? "clock-back" : "?";
}

/* cron_due(spec, cu, last, since, now) is want, with slot want_slot ("-" for none). */
static void due_is(const char *spec, enum cron_catch_up cu, const char *last, const char *since, const char *now,
		   enum cron_due want, const char *want_slot, const char *what)
{
	struct cron_spec s = spec_of(spec);
	time_t slot;
	enum cron_due d = cron_due(&s, cu, utc(last), utc(since), utc(now), &slot);

	is_str(due_name(d), due_name(want), "%s: '%s' catch-up %s", what, spec, cron_catch_up_to_string(cu));
	ok(strcmp(want_slot, "-") == 0 ? slot == (time_t)-1 : slot == utc(want_slot),
	   "%s: slot %s (got %lld)", what, want_slot, (long long)slot);
}

int main(void)
{
	char *why = NULL;

	setenv("TZ", "UTC", 1);
	tzset();

	/* Running all along (since long ago). */
	due_is("* * * * *", CRON_CATCH_UP_ONCE, "2026-03-01 12:00:02", "2026-03-01 08:00:00", "2026-03-01 12:00:30",
	       CRON_DUE_NONE, "-", "no slot since the last firing");
	due_is("* * * * *", CRON_CATCH_UP_ONCE, "2026-03-01 12:00:02", "2026-03-01 08:00:00", "2026-03-01 12:01:03",
	       CRON_DUE_FIRE, "2026-03-01 12:01:00", "the next minute, on time");
	due_is("* * * * *", CRON_CATCH_UP_SKIP, "2026-03-01 12:00:02", "2026-03-01 08:00:00", "2026-03-01 12:01:03",
	       CRON_DUE_FIRE, "2026-03-01 12:01:00", "on time fires whatever the catch-up");
	due_is("0 9 * * *", CRON_CATCH_UP_ONCE, "2026-03-01 09:00:04", "2026-03-01 08:00:00", "2026-03-01 23:59:59",
	       CRON_DUE_NONE, "-", "a daily slot already fired today");
	/* A new schedule: slots before its creation (last) do not count. */
	due_is("0 * * * *", CRON_CATCH_UP_ONCE, "2026-03-01 12:10:00", "2026-03-01 08:00:00", "2026-03-01 12:59:59",
	       CRON_DUE_NONE, "-", "created after this hour's slot");

	/* fleetd was down from before 12:05 until 13:00:30: twelve five-minute slots missed. */
	due_is("*/5 * * * *", CRON_CATCH_UP_ONCE, "2026-03-01 12:00:02", "2026-03-01 13:00:30", "2026-03-01 13:00:35",
	       CRON_DUE_FIRE, "2026-03-01 12:05:00", "missed slots, catch-up once: one run");
	due_is("*/5 * * * *", CRON_CATCH_UP_SKIP, "2026-03-01 12:00:02", "2026-03-01 13:00:30", "2026-03-01 13:00:35",
	       CRON_DUE_SKIP, "2026-03-01 12:05:00", "missed slots, catch-up skip: none");
	/* The caller records now as last: the other eleven missed slots are not run one by one. */
	due_is("*/5 * * * *", CRON_CATCH_UP_ONCE, "2026-03-01 13:00:35", "2026-03-01 13:00:30", "2026-03-01 13:04:59",
	       CRON_DUE_NONE, "-", "after the catch-up run, nothing until the next slot");
	due_is("*/5 * * * *", CRON_CATCH_UP_SKIP, "2026-03-01 13:00:35", "2026-03-01 13:00:30", "2026-03-01 13:05:01",
	       CRON_DUE_FIRE, "2026-03-01 13:05:00", "after a skip, the next slot fires on time");
	/* Back just before a slot: the missed ones and the live one make one run, the live one's. */
	due_is("*/5 * * * *", CRON_CATCH_UP_SKIP, "2026-03-01 12:00:02", "2026-03-01 12:59:50", "2026-03-01 13:00:04",
	       CRON_DUE_FIRE, "2026-03-01 13:00:00", "a slot after restart fires even with skip");
	due_is("*/5 * * * *", CRON_CATCH_UP_ONCE, "2026-03-01 12:00:02", "2026-03-01 12:59:50", "2026-03-01 13:00:04",
	       CRON_DUE_FIRE, "2026-03-01 13:00:00", "missed and live slots: one run");
	/* Restarted with no slot missed. */
	due_is("0 * * * *", CRON_CATCH_UP_ONCE, "2026-03-01 12:00:03", "2026-03-01 12:30:00", "2026-03-01 12:30:05",
	       CRON_DUE_NONE, "-", "a restart between slots");
	/* Down for two days: a daily schedule runs once. */
	due_is("@daily", CRON_CATCH_UP_ONCE, "2026-03-01 00:00:05", "2026-03-03 10:00:00", "2026-03-03 10:00:05",
	       CRON_DUE_FIRE, "2026-03-02 00:00:00", "two days down, @daily, once");
	due_is("@daily", CRON_CATCH_UP_SKIP, "2026-03-01 00:00:05", "2026-03-03 10:00:00", "2026-03-03 10:00:05",
	       CRON_DUE_SKIP, "2026-03-02 00:00:00", "two days down, @daily, skip");
	/* A slot exactly at since is live (fleetd was up for it). */
	due_is("0 13 * * *", CRON_CATCH_UP_SKIP, "2026-03-01 00:00:00", "2026-03-01 13:00:00", "2026-03-01 13:00:00",
	       CRON_DUE_FIRE, "2026-03-01 13:00:00", "a slot at the start second");

	/*
	 * The clock jumps (#13). Forward by a day while running: like downtime,
	 * one run (the first slot after last, which came while watching), never
	 * one per slot passed over.
	 */
	due_is("*/5 * * * *", CRON_CATCH_UP_ONCE, "2026-03-01 12:00:02", "2026-03-01 08:00:00", "2026-03-02 12:00:30",
	       CRON_DUE_FIRE, "2026-03-01 12:05:00", "clock a day forward: one run");
	due_is("*/5 * * * *", CRON_CATCH_UP_ONCE, "2026-03-02 12:00:30", "2026-03-01 08:00:00", "2026-03-02 12:01:30",
	       CRON_DUE_NONE, "-", "then nothing until the next slot by the new clock");
	/* Back by a minute (an NTP step) just after a slot fired: it does not fire again. */
	due_is("* * * * *", CRON_CATCH_UP_ONCE, "2026-03-01 12:00:02", "2026-03-01 08:00:00", "2026-03-01 11:59:30",
	       CRON_DUE_NONE, "-", "clock back 32 s: the slot already fired does not repeat");
	due_is("* * * * *", CRON_CATCH_UP_ONCE, "2026-03-01 12:00:02", "2026-03-01 08:00:00", "2026-03-01 12:01:01",
	       CRON_DUE_FIRE, "2026-03-01 12:01:00", "and the next one fires on time");
	/* Back by at most CRON_CLOCK_BACK_MAX_S: waits, as cron(8), repeating nothing. */
	due_is("0 * * * *", CRON_CATCH_UP_ONCE, "2026-03-01 12:00:02", "2026-03-01 08:00:00", "2026-03-01 10:30:00",
	       CRON_DUE_NONE, "-", "clock back 1.5 h: no slot repeats");
	/* Further back: no stall until the clock passes last again; it goes on from now. */
	due_is("0 * * * *", CRON_CATCH_UP_ONCE, "2026-03-02 12:00:02", "2026-03-01 08:00:00", "2026-03-01 10:30:00",
	       CRON_DUE_CLOCK_BACK, "-", "clock back a day: recorded, no run");
	due_is("0 * * * *", CRON_CATCH_UP_SKIP, "2026-03-01 10:30:00", "2026-03-01 08:00:00", "2026-03-01 11:00:01",
	       CRON_DUE_FIRE, "2026-03-01 11:00:00", "then the next slot by the new clock fires");

	/* Catch-up words. */
	is_int(cron_catch_up_from_string("once"), CRON_CATCH_UP_ONCE, "'once' parses");
	is_int(cron_catch_up_from_string("skip"), CRON_CATCH_UP_SKIP, "'skip' parses");
	is_int(cron_catch_up_from_string("all"), -EINVAL, "'all' is refused");
	is_int(cron_catch_up_from_string(NULL), -EINVAL, "no word is refused");

	/* Zone names: only names inside the tz database, and only zone files. */
	{
		static const char *const bad[] = { "", "Mars/Olympus", "../../etc/passwd", "/etc/localtime", "Asia//Kolkata",
			"Asia/./Kolkata", "Asia/Kolkata/", "Asia/Kolkata;rm", "Asia", NULL };
		bool have = access("/usr/share/zoneinfo/Asia/Kolkata", R_OK) == 0;

		for (size_t i = 0; bad[i]; i++) {
			is_int(tz_check(bad[i], &why), -EINVAL, "zone '%s' is refused", bad[i]);
			ok(why && *why, "  with a reason: %s", why ? why : "(none)");
			free(why);
			why = NULL;
		}
		if (!have) {
			printf("ok %d # SKIP no /usr/share/zoneinfo/Asia/Kolkata (tzdata)\n", ++tap_n);
			return tap_done();
		}
		is_int(tz_check("Asia/Kolkata", &why), 0, "zone Asia/Kolkata is known");
		is_int(tz_check("UTC", &why), 0, "zone UTC is known");
		if (access("/usr/share/zoneinfo/zone.tab", R_OK) == 0) {
			is_int(tz_check("zone.tab", &why), -EINVAL, "zone.tab (a file, not a zone) is refused");
			free(why);
			why = NULL;
		}
	}

	/* The same spec in two zones: 09:30 in Kolkata is 04:00 UTC. */
	{
		struct cron_spec s = spec_of("30 9 * * *");
		time_t after = utc("2026-03-01 00:00:00"), t;

		tz_enter("Asia/Kolkata");
		t = cron_next(&s, after);
		tz_leave();
		ok(t == utc("2026-03-01 04:00:00"), "'30 9 * * *' in Asia/Kolkata is 04:00 UTC (got %lld)", (long long)t);
		t = cron_next(&s, after);
		ok(t == utc("2026-03-01 09:30:00"), "and 09:30 UTC once the zone is left (got %lld)", (long long)t);
		ok(getenv("TZ") && strcmp(getenv("TZ"), "UTC") == 0, "tz_leave puts TZ back");
		tz_enter(NULL);
		t = cron_next(&s, after);
		tz_leave();
		ok(t == utc("2026-03-01 09:30:00"), "tz_enter(NULL) keeps the host's zone");
		/* A missed slot in Kolkata, decided in its zone. */
		tz_enter("Asia/Kolkata");
		{
			time_t slot;
			enum cron_due d = cron_due(&s, CRON_CATCH_UP_ONCE, utc("2026-03-01 00:00:00"),
						   utc("2026-03-01 05:00:00"), utc("2026-03-01 05:00:05"), &slot);

			tz_leave();
			is_str(due_name(d), "fire", "Kolkata's 09:30 missed while down: catch-up once fires");
			ok(slot == utc("2026-03-01 04:00:00"), "  for the 04:00 UTC slot");
		}
	}
	/* An unset TZ (the host's zone) is set to what libc reads then, and stays set: never removed. */
	{
		struct cron_spec s = spec_of("30 9 * * *");
		time_t after = utc("2026-03-01 00:00:00"), host;

		unsetenv("TZ");
		tzset();
		host = cron_next(&s, after);
		tz_enter("Asia/Kolkata");
		tz_leave();
		is_str(getenv("TZ") ? getenv("TZ") : "(unset)", ":/etc/localtime", "an unset TZ comes back as :/etc/localtime");
		ok(cron_next(&s, after) == host, "which is the same zone as before");
	}
	return tap_done();
}
