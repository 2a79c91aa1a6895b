/*
 * fuzz_cron: cron specs (common/cron.c) as fleetd takes them from
 * `fleetctl schedule` and the API: cron_parse, then cron_next and cron_due
 * as core/schedules.c and core/cron_triggers.c call them (in UTC here; the
 * zones' own parsing is fuzz_names'). Checks: a refusal says why and
 * writes nothing; an accepted spec has bits only inside each field's range
 * and at least one in each; cron_next is strictly later, on a whole minute,
 * matches the spec, and is stable (cron_next of the minute before it is it).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/cron.h"

#define FAIL(what) do { fprintf(stderr, "fuzz_cron: %s\n", what); abort(); } while (0)

static bool matches(const struct cron_spec *s, time_t t)
{
	struct tm tm;
	bool mday, wday, day;

	gmtime_r(&t, &tm);
	mday = s->mdays >> tm.tm_mday & 1;
	wday = s->wdays >> tm.tm_wday & 1;
	day = (s->mday_any || s->wday_any) ? (mday && wday) : (mday || wday);
	return (s->minutes >> tm.tm_min & 1) && (s->hours >> tm.tm_hour & 1) && day && (s->months >> (tm.tm_mon + 1) & 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool utc;
	struct cron_spec spec, untouched;
	char *text, *why = NULL;
	time_t base = 1764600000;	/* 2025-12-01 */

	if (!utc) {
		setenv("TZ", "UTC", 1);
		tzset();
		utc = true;
	}
	if (size > 4 * CRON_SPEC_MAX)
		return 0;
	text = strndup((const char *)data, size);
	memset(&spec, 0xa5, sizeof(spec));
	untouched = spec;
	if (cron_parse(text, &spec, &why) < 0) {
		if (!why || !*why)
			FAIL("a refused spec without a why");
		if (memcmp(&spec, &untouched, sizeof(spec)) != 0)
			FAIL("a refused spec wrote the spec");
		free(why);
		free(text);
		return 0;
	}
	if (why)
		FAIL("an accepted spec with a why");
	if ((spec.minutes >> 60) || !spec.minutes || (spec.hours >> 24) || !spec.hours || (spec.mdays & 1) ||
	    !spec.mdays || (spec.months & ~0x1ffeu) || !spec.months || (spec.wdays >> 7) || !spec.wdays)
		FAIL("an accepted spec with bits outside a field's range, or none");
	if (size > 0 && data[0] % 4 == 0)	/* cron_next searches up to 5 years: not on every input */
		base += (time_t)data[size - 1] * 86400 * 37;
	time_t next = cron_next(&spec, base);
	if (next != (time_t)-1) {
		if (next <= base || next % 60 != 0)
			FAIL("cron_next not strictly later, or not on a minute");
		if (!matches(&spec, next))
			FAIL("cron_next returned a minute the spec does not match");
		if (cron_next(&spec, next - 60) != next)
			FAIL("cron_next not stable");
		time_t slot;
		enum cron_due d = cron_due(&spec, CRON_CATCH_UP_ONCE, next - 60, next - 60, next, &slot);
		if (d != CRON_DUE_FIRE || slot != next)
			FAIL("cron_due does not fire a slot that is due");
	}
	free(text);
	return 0;
}
