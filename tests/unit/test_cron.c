/*
 * cron specs: every syntax form, every refusal (with the field named), and
 * the next matching minute, in UTC, in New York, and across New York's DST
 * changes; a brute-force minute-by-minute search checks the skipping.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/cron.h"
#include "../tap.h"

#define NY "America/New_York"

static void set_tz(const char *tz)
{
	setenv("TZ", tz, 1);
	tzset();
}

/* Local "YYYY-MM-DD HH:MM[:SS]" to time_t; mktime picks for ambiguous times, so avoid them. */
static time_t at(const char *s)
{
	struct tm tm = { 0 };
	int n = sscanf(s, "%d-%d-%d %d:%d:%d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
		       &tm.tm_min, &tm.tm_sec);

	if (n < 5) {
		printf("# bad test time '%s'\n", s);
		exit(99);
	}
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	tm.tm_isdst = -1;
	return mktime(&tm);
}

/* "YYYY-MM-DD HH:MM" (with the zone abbreviation if zone) or "-1"; flags a nonzero second. */
static const char *show(time_t t, bool zone, char *buf, size_t len)
{
	struct tm tm;

	if (t == (time_t)-1)
		return "-1";
	localtime_r(&t, &tm);
	strftime(buf, len, zone ? "%Y-%m-%d %H:%M %Z" : "%Y-%m-%d %H:%M", &tm);
	if (tm.tm_sec)
		strcat(buf, " (seconds not zero)");
	return buf;
}

static bool parse_ok(const char *text, struct cron_spec *spec)
{
	char *why = NULL;
	int r = cron_parse(text, spec, &why);

	if (r < 0) {
		printf("# '%s': %s\n", text, why ? why : "?");
		free(why);
		return false;
	}
	return true;
}

/* cron_next(spec, at(after)) shows as want ("-1": none). */
static void next_is(const char *spec, const char *after, const char *want, bool zone, const char *tz)
{
	struct cron_spec s;
	char buf[64];

	if (!parse_ok(spec, &s)) {
		ok(0, "[%s] '%s' parses", tz, spec);
		return;
	}
	is_str(show(cron_next(&s, at(after)), zone, buf, sizeof(buf)), want, "[%s] '%s' after %s: %s", tz,
	       spec, after, want);
}

static uint64_t bits(const int *v)
{
	uint64_t b = 0;

	for (; *v >= 0; v++)
		b |= UINT64_C(1) << *v;
	return b;
}
#define BITS(...) bits((const int[]){ __VA_ARGS__, -1 })

static void test_parse_forms(void)
{
	struct cron_spec s, m;
	char *why = (char *)"untouched";

	ok(cron_parse("* * * * *", &s, &why) == 0, "'* * * * *' parses");
	is_str(why, "untouched", "*why untouched on success");
	ok(s.minutes == (UINT64_C(1) << 60) - 1 && s.hours == (1u << 24) - 1 && s.mdays == 0xfffffffeu &&
	   s.months == 0x1ffe && s.wdays == 0x7f, "'*' sets every value of every field");
	ok(s.mday_any && s.wday_any, "'*' day fields are unrestricted");

	ok(parse_ok("*/15 0-23/6 1,15 jan-mar,dec mon-fri", &s), "steps, ranges, lists and names parse");
	ok(s.minutes == BITS(0, 15, 30, 45), "*/15: 0,15,30,45");
	ok(s.hours == BITS(0, 6, 12, 18), "0-23/6: 0,6,12,18");
	ok(s.mdays == BITS(1, 15), "1,15");
	ok(s.months == BITS(1, 2, 3, 12), "jan-mar,dec");
	ok(s.wdays == BITS(1, 2, 3, 4, 5), "mon-fri");
	ok(!s.mday_any && !s.wday_any, "restricted day fields are not '*'");

	ok(parse_ok("1-10/3 5 7 8 2", &s) && s.minutes == BITS(1, 4, 7, 10) && s.hours == BITS(5) &&
	   s.mdays == BITS(7) && s.months == BITS(8) && s.wdays == BITS(2), "a-b/n and single numbers");
	ok(parse_ok("10/20 3/8 28/2 11/1 5/1", &s) && s.minutes == BITS(10, 30, 50) &&
	   s.hours == BITS(3, 11, 19) && s.mdays == BITS(28, 30) && s.months == BITS(11, 12) &&
	   s.wdays == BITS(5, 6), "a/n runs to the end of the field (day-of-week: to 6)");
	ok(parse_ok("0 0 * * 7", &s) && s.wdays == BITS(0), "day-of-week 7 is Sunday");
	ok(parse_ok("0 0 * * 5-7", &s) && s.wdays == BITS(0, 5, 6), "5-7: Friday to Sunday");
	ok(parse_ok("0 0 * * 0,7", &s) && s.wdays == BITS(0), "0,7: Sunday once");
	ok(parse_ok("0 0 * * */2", &s) && s.wdays == BITS(0, 2, 4, 6), "day-of-week */2: 0,2,4,6");
	ok(parse_ok("0 0 * JAN,Jul SUN,sAt", &s) && s.months == BITS(1, 7) && s.wdays == BITS(0, 6),
	   "names are case-insensitive");
	ok(parse_ok("0 0 * feb-apr/2 tue-thu", &s) && s.months == BITS(2, 4) && s.wdays == BITS(2, 3, 4),
	   "name ranges with a step");
	ok(parse_ok("05 007 01 012 00", &s) && s.minutes == BITS(5) && s.hours == BITS(7) &&
	   s.mdays == BITS(1) && s.months == BITS(12) && s.wdays == BITS(0), "leading zeros");
	ok(parse_ok("  0\t0 \t *  *\t* ", &s) && s.minutes == BITS(0) && s.hours == BITS(0),
	   "spaces and tabs separate fields; leading and trailing ones are ignored");
	ok(parse_ok("59 23 31 12 6", &s) && s.minutes == UINT64_C(1) << 59 && s.hours == 1u << 23 &&
	   s.mdays == 1u << 31 && s.months == 1u << 12 && s.wdays == 1u << 6, "each field's maximum");
	ok(parse_ok("0-59 0-23 1-31 1-12 0-6", &s) && s.minutes == (UINT64_C(1) << 60) - 1 &&
	   !s.mday_any && !s.wday_any, "full ranges set every bit but are not '*'");
	ok(parse_ok("0 0 */1 * */1", &s) && s.mday_any && s.wday_any, "*/1 counts as '*'");
	ok(parse_ok("0 0 */2 * *", &s) && !s.mday_any && s.wday_any, "*/2 is a restriction");
	ok(parse_ok("1,2-4,*/30 * * * *", &s) && s.minutes == BITS(0, 1, 2, 3, 4, 30),
	   "list mixing values, ranges and steps");

	static const struct {
		const char *macro, *same;
	} macros[] = {
		{ "@yearly", "0 0 1 1 *" }, { "@annually", "0 0 1 1 *" }, { "@monthly", "0 0 1 * *" },
		{ "@weekly", "0 0 * * 0" }, { "@daily", "0 0 * * *" },	  { "@midnight", "0 0 * * *" },
		{ "@hourly", "0 * * * *" }, { " @Daily ", "0 0 * * *" },
	};
	for (size_t i = 0; i < sizeof(macros) / sizeof(*macros); i++)
		ok(parse_ok(macros[i].macro, &s) && parse_ok(macros[i].same, &m) &&
		   s.minutes == m.minutes && s.hours == m.hours && s.mdays == m.mdays &&
		   s.months == m.months && s.wdays == m.wdays && s.mday_any == m.mday_any &&
		   s.wday_any == m.wday_any, "'%s' is '%s'", macros[i].macro, macros[i].same);

	char longest[CRON_SPEC_MAX + 1];
	memset(longest, ' ', CRON_SPEC_MAX);
	memcpy(longest, "* * * * *", 9);
	longest[CRON_SPEC_MAX] = '\0';
	ok(cron_parse(longest, &s, NULL) == 0, "%d characters accepted", CRON_SPEC_MAX);
}

static void test_parse_errors(void)
{
	static const struct {
		const char *text, *want;	/* want: the whole message if it starts with '=' */
	} bad[] = {
		{ "", "=cron spec is empty" },
		{ " \t ", "=cron spec is empty" },
		{ "0 0 * * *\n", "control character" },
		{ "0\x01 0 * * *", "control character" },
		{ "0 0 * * *\x7f", "control character" },
		{ "0 0 * * \xc3\xa9", "non-ASCII" },
		{ "* * * *", "=expected 5 fields, got 4" },
		{ "*", "=expected 5 fields, got 1" },
		{ "* * * * * *", "=expected 5 fields, got 6" },
		{ "0 0 * * * # nightly", "=expected 5 fields, got 7" },
		{ "61 * * * *", "=minute field: 61 is out of range 0-59" },
		{ "60 * * * *", "=minute field: 60 is out of range 0-59" },
		{ "* 24 * * *", "=hour field: 24 is out of range 0-23" },
		{ "* * 0 * *", "=day-of-month field: 0 is out of range 1-31" },
		{ "* * 32 * *", "=day-of-month field: 32 is out of range 1-31" },
		{ "* * * 0 *", "=month field: 0 is out of range 1-12" },
		{ "* * * 13 *", "=month field: 13 is out of range 1-12" },
		{ "* * * * 8", "=day-of-week field: 8 is out of range 0-7" },
		{ "1-60 * * * *", "=minute field: 60 is out of range 0-59" },
		{ "99999999999999999999999 * * * *",
		  "=minute field: 99999999999999999999999 is out of range 0-59" },
		{ "* 18446744073709551617 * * *", "=hour field: 18446744073709551617 is out of range 0-23" },
		{ "5-2 * * * *", "=minute field: range 5-2 is reversed" },
		{ "* * * dec-jan *", "=month field: range dec-jan is reversed" },
		{ "* * * * fri-mon", "=day-of-week field: range fri-mon is reversed" },
		{ "5x * * * *", "=minute field: unexpected 'x' in '5x'" },
		{ "* 1-2x * * *", "=hour field: unexpected 'x' in '1-2x'" },
		{ "* * 1/2/3 * *", "=day-of-month field: unexpected '/' in '1/2/3'" },
		{ "** * * * *", "=minute field: unexpected '*' in '**'" },
		{ "*-5 * * * *", "=minute field: unexpected '-' in '*-5'" },
		{ "-1 * * * *", "=minute field: unexpected '-'" },
		{ "1,,2 * * * *", "=minute field: empty list item" },
		{ ",1 * * * *", "=minute field: empty list item" },
		{ "* 1, * * *", "=hour field: empty list item" },
		{ "*/0 * * * *", "=minute field: step 0 is not allowed" },
		{ "* * * * 1-5/0", "=day-of-week field: step 0 is not allowed" },
		{ "*/60 * * * *", "=minute field: step 60 is out of range 1-59" },
		{ "* */99999999999999999999 * * *", "=hour field: step 99999999999999999999 is out of range 1-23" },
		{ "*/ * * * *", "=minute field: '/' must be followed by a number" },
		{ "*/x * * * *", "=minute field: '/' must be followed by a number" },
		{ "* * * * 1-", "=day-of-week field: a number is missing" },
		{ "* jan * * *", "=hour field: 'jan' is not a number" },
		{ "* * mon * *", "=day-of-month field: 'mon' is not a number" },
		{ "* * * janu *", "=month field: unknown name 'janu' (use jan..dec)" },
		{ "* * * * sunday", "=day-of-week field: unknown name 'sunday' (use sun..sat)" },
		{ "* * * * */mon", "=day-of-week field: '/' must be followed by a number" },
		{ "@reboot", "@reboot is not supported" },
		{ "@REBOOT", "@reboot is not supported" },
		{ "@daily 0", "=@daily takes no other fields" },
		{ "@often", "unknown macro '@often'" },
		{ "@", "unknown macro '@'" },
	};
	struct cron_spec s, before;
	char *why;

	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		const char *want = bad[i].want;
		bool good;

		memset(&s, 0xa5, sizeof(s));
		before = s;
		why = NULL;
		good = cron_parse(bad[i].text, &s, &why) == -EINVAL && why && !strchr(why, '\n') &&
		       (want[0] == '=' ? strcmp(why, want + 1) == 0 : strstr(why, want) != NULL) &&
		       memcmp(&s, &before, sizeof(s)) == 0;
		ok(good, "refused: %s", why ? why : "(no message)");
		if (!good)
			printf("#   want '%s'\n", want);
		free(why);
	}

	char toolong[CRON_SPEC_MAX + 2];
	memset(toolong, ' ', CRON_SPEC_MAX + 1);
	memcpy(toolong, "* * * * *", 9);
	toolong[CRON_SPEC_MAX + 1] = '\0';
	why = NULL;
	ok(cron_parse(toolong, &s, &why) == -EINVAL && why && strstr(why, "longer than 128"),
	   "%d characters refused: %s", CRON_SPEC_MAX + 1, why ? why : "?");
	free(why);
	why = NULL;
	ok(cron_parse(NULL, &s, &why) == -EINVAL && why && strcmp(why, "cron spec is empty") == 0,
	   "NULL refused as empty");
	free(why);
	ok(cron_parse("61 * * * *", &s, NULL) == -EINVAL, "why may be NULL");
}

/* Cases whose answers are the same wall-clock times in any zone (none is near 02:00 on a DST day). */
static void test_next_common(const char *tz)
{
	static const struct {
		const char *spec, *after, *want;
	} cases[] = {
		{ "* * * * *", "2027-01-01 00:00", "2027-01-01 00:01" },
		{ "* * * * *", "2027-01-01 00:00:30", "2027-01-01 00:01" },
		{ "* * * * *", "2027-12-31 23:59:59", "2028-01-01 00:00" },
		{ "*/15 * * * *", "2027-01-01 00:00", "2027-01-01 00:15" },
		{ "*/15 * * * *", "2027-01-01 00:14:59", "2027-01-01 00:15" },
		{ "*/15 * * * *", "2027-01-01 23:50", "2027-01-02 00:00" },
		{ "30 2 * * 1-5", "2027-01-01 12:00", "2027-01-04 02:30" },	/* Friday noon -> Monday */
		{ "30 2 * * 1-5", "2027-01-04 02:29", "2027-01-04 02:30" },
		{ "30 2 * * 1-5", "2027-01-04 02:30", "2027-01-05 02:30" },
		{ "30 2 * * mon-fri", "2027-01-08 03:00", "2027-01-11 02:30" },
		{ "0 0 1 * *", "2027-01-31 12:00", "2027-02-01 00:00" },
		{ "0 0 1 * *", "2027-02-01 00:00", "2027-03-01 00:00" },
		{ "0 0 1 * *", "2027-12-15 00:00", "2028-01-01 00:00" },
		{ "0 0 1 * *", "2027-12-31 23:59", "2028-01-01 00:00" },
		{ "0 0 29 2 *", "2027-03-01 00:00", "2028-02-29 00:00" },
		{ "0 0 29 2 *", "2028-02-29 00:00", "2032-02-29 00:00" },
		{ "0 0 29 2 *", "2096-03-01 00:00", "-1" },	/* 2100 is not a leap year */
		{ "0 0 29 2 *", "2399-03-01 00:00", "2400-02-29 00:00" },	/* 2400 is */
		{ "0 0 30 2 *", "2027-01-01 00:00", "-1" },
		{ "0 0 31 4,6,9,11 *", "2027-01-01 00:00", "-1" },
		{ "0 0 31 * *", "2027-04-01 00:00", "2027-05-31 00:00" },
		{ "0 0 13 * 5", "2027-01-01 00:00", "2027-01-08 00:00" },	/* a Friday */
		{ "0 0 13 * 5", "2027-01-08 00:00", "2027-01-13 00:00" },	/* a Wednesday, the 13th */
		{ "0 0 13 * 5", "2027-01-13 00:00", "2027-01-15 00:00" },
		{ "0 0 13 * *", "2027-01-01 00:00", "2027-01-13 00:00" },
		{ "0 0 * * 5", "2027-01-08 00:00", "2027-01-15 00:00" },
		{ "0 0 */2 * 5", "2027-01-01 00:00", "2027-01-03 00:00" },	/* a stepped day field restricts: OR */
		{ "0 0 1 * 1", "2027-01-01 00:00", "2027-01-04 00:00" },
		{ "0 9 * jan,jul mon", "2027-01-01 00:00", "2027-01-04 09:00" },
		{ "0 9 * jan,jul mon", "2027-01-25 09:00", "2027-07-05 09:00" },
		{ "0 9 * JAN,JUL Mon", "2027-07-26 09:00", "2028-01-03 09:00" },
		{ "0 0 * * 7", "2027-01-01 00:00", "2027-01-03 00:00" },
		{ "0 0 * * 0", "2027-01-01 00:00", "2027-01-03 00:00" },
		{ "0 0 * * sun", "2027-01-03 00:00", "2027-01-10 00:00" },
		{ "59 23 31 12 *", "2027-12-31 23:59", "2028-12-31 23:59" },
		{ "0 0 1 1 *", "2027-01-01 00:00", "2028-01-01 00:00" },
		{ "@yearly", "2027-06-01 00:00", "2028-01-01 00:00" },
		{ "@monthly", "2027-06-15 00:00", "2027-07-01 00:00" },
		{ "@weekly", "2027-01-01 00:00", "2027-01-03 00:00" },
		{ "@daily", "2027-01-01 00:00", "2027-01-02 00:00" },
		{ "@hourly", "2027-01-01 00:59:59", "2027-01-01 01:00" },
		{ "15,45 9-17 * * 1-5", "2027-01-01 17:45", "2027-01-04 09:15" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++)
		next_is(cases[i].spec, cases[i].after, cases[i].want, false, tz);

	/* a step chain: each answer is the next "after" */
	struct cron_spec s;
	time_t t = at("2027-01-01 00:07"), prev;
	bool steady = true;

	parse_ok("*/15 * * * *", &s);
	prev = cron_next(&s, t);
	for (int i = 0; i < 200; i++) {
		t = cron_next(&s, prev);
		steady = steady && t - prev == 900;
		prev = t;
	}
	ok(steady, "[%s] '*/15' 200 times: 15 minutes apart", tz);
}

/* Minute-by-minute reference: the definition cron_next must meet. */
static time_t brute_next(const struct cron_spec *s, time_t after, long minutes)
{
	bool all_hours = (s->hours & 0xffffff) == 0xffffff;
	time_t t = after - ((after % 60) + 60) % 60 + 60;

	for (long i = 0; i < minutes; i++, t += 60) {
		struct tm tm, prev;
		time_t back = t - 3600;
		bool mday, wday;

		localtime_r(&t, &tm);
		mday = s->mdays >> tm.tm_mday & 1;
		wday = s->wdays >> tm.tm_wday & 1;
		if (!(s->minutes >> tm.tm_min & 1) || !(s->hours >> tm.tm_hour & 1) ||
		    !(s->months >> (tm.tm_mon + 1) & 1) ||
		    !(s->mday_any || s->wday_any ? mday && wday : mday || wday))
			continue;
		localtime_r(&back, &prev);
		if (!all_hours && prev.tm_hour == tm.tm_hour && prev.tm_min == tm.tm_min &&
		    prev.tm_mday == tm.tm_mday)
			continue;	/* a repeated hour's second pass */
		return t;
	}
	return (time_t)-1;
}

static void test_next_brute(const char *tz)
{
	static const char *const specs[] = { "* * * * *", "*/7 * * * *", "0 * * * *", "30 * * * *",
		"15,45 * * * *", "30 2 * * *", "0 1 * * *", "30 1 * * *", "*/20 1-3 * * *", "59 23 * * *",
		"0 0 * * *", "5 */2 * * *", "0 9 * * 1-5", "0 0 13 * 5", "0 12 1,15 * *",
		"*/10 0-4 * mar,nov sun", "0 2 * * sun", "45 0-6/3 * * *", "0 0 */3 * *" };
	static const char *const starts[] = { "2027-03-13 12:00", "2027-03-14 00:00", "2027-03-14 01:45",
		"2027-03-14 03:10", "2027-11-06 23:59", "2027-11-07 00:40", "2027-11-07 01:20",
		"2027-11-07 03:00", "2027-01-01 00:00", "2027-12-31 22:10", "2028-02-28 23:00",
		"2027-06-30 23:59" };
	const long window = 3 * 24 * 60;

	for (size_t i = 0; i < sizeof(specs) / sizeof(*specs); i++) {
		struct cron_spec s;
		int bad = 0;

		if (!parse_ok(specs[i], &s)) {
			ok(0, "'%s' parses", specs[i]);
			continue;
		}
		for (size_t j = 0; j < sizeof(starts) / sizeof(*starts); j++) {
			/* also from the second pass of New York's repeated hour (01:20 EST) */
			for (int k = 0; k < 2; k++) {
				time_t after = at(starts[j]) + k * 3600, want, got;
				char a[64], b[64];

				if (k == 1 && strcmp(starts[j], "2027-11-07 01:20") != 0)
					continue;
				want = brute_next(&s, after, window);
				got = cron_next(&s, after);
				if (want == (time_t)-1 ? got != (time_t)-1 && got <= after + window * 60
						       : got != want) {
					bad++;
					printf("# '%s' after %s: got %s, brute force %s\n", specs[i], starts[j],
					       show(got, true, a, sizeof(a)), show(want, true, b, sizeof(b)));
				}
			}
		}
		ok(bad == 0, "[%s] '%s' agrees with a minute-by-minute search", tz, specs[i]);
	}
}

static void test_dst(void)
{
	struct cron_spec s;
	time_t t, prev;
	char buf[64];
	bool rising, whole;
	int n;

	/* spring forward: 2027-03-14 02:00 EST becomes 03:00 EDT */
	next_is("30 2 * * *", "2027-03-13 03:00", "2027-03-15 02:30 EDT", true, NY);
	next_is("30 2 * * *", "2027-03-14 00:00", "2027-03-15 02:30 EDT", true, NY);
	next_is("30 2 * * *", "2027-03-14 01:59", "2027-03-15 02:30 EDT", true, NY);
	next_is("*/15 2 * * *", "2027-03-14 01:00", "2027-03-15 02:00 EDT", true, NY);
	next_is("0 * * * *", "2027-03-14 00:30", "2027-03-14 01:00 EST", true, NY);
	next_is("0 * * * *", "2027-03-14 01:00", "2027-03-14 03:00 EDT", true, NY);
	next_is("59 1 * * *", "2027-03-14 00:00", "2027-03-14 01:59 EST", true, NY);
	next_is("0 3 * * *", "2027-03-14 01:59", "2027-03-14 03:00 EDT", true, NY);
	next_is("*/5 * * * *", "2027-03-14 01:57", "2027-03-14 03:00 EDT", true, NY);
	next_is("0 0 14 3 *", "2027-01-01 00:00", "2027-03-14 00:00 EST", true, NY);

	/* fall back: 2027-11-07 02:00 EDT becomes 01:00 EST; every hour still fires once an hour */
	parse_ok("0 * * * *", &s);
	prev = at("2027-11-06 22:30");
	rising = whole = true;
	printf("# '0 * * * *' across the fall-back:");
	for (n = 0; n < 8; n++) {
		t = cron_next(&s, prev);
		printf(" %s,", show(t, true, buf, sizeof(buf)) + 11);
		rising = rising && t > prev;
		whole = whole && (n == 0 || t - prev == 3600);
		prev = t;
	}
	printf("\n");
	ok(rising && whole, "'0 * * * *' across the fall-back: rising, one hour apart");
	next_is("0 * * * *", "2027-11-07 00:30", "2027-11-07 01:00 EDT", true, NY);
	is_str(show(cron_next(&s, at("2027-11-07 00:30") + 3600), true, buf, sizeof(buf)),
	       "2027-11-07 01:00 EST", "[" NY "] '0 * * * *' after 01:30 EDT: 01:00 EST (the hour repeats)");

	parse_ok("*/30 * * * *", &s);
	prev = at("2027-11-06 23:10");
	rising = true;
	for (n = 0; n < 12; n++) {
		t = cron_next(&s, prev);
		rising = rising && (n == 0 || t - prev == 1800);
		prev = t;
	}
	ok(rising, "'*/30 * * * *' across the fall-back: 30 minutes apart");

	/* a fixed time in the repeated hour fires once */
	next_is("30 1 * * *", "2027-11-06 12:00", "2027-11-07 01:30 EDT", true, NY);
	parse_ok("30 1 * * *", &s);
	t = cron_next(&s, at("2027-11-06 12:00"));
	is_str(show(cron_next(&s, t), true, buf, sizeof(buf)), "2027-11-08 01:30 EST",
	       "[" NY "] '30 1 * * *' does not fire again in the repeated hour");
	is_str(show(cron_next(&s, t + 3600 - 60), true, buf, sizeof(buf)), "2027-11-08 01:30 EST",
	       "[" NY "] ... nor when asked from inside the second pass");

	/* daily midnight across both changes: one a day, always at 00:00 */
	parse_ok("0 0 * * *", &s);
	prev = at("2027-03-10 12:00");
	rising = true;
	for (n = 0; n < 250; n++) {
		struct tm tm;

		t = cron_next(&s, prev);
		localtime_r(&t, &tm);
		rising = rising && t > prev && tm.tm_hour == 0 && tm.tm_min == 0 && tm.tm_sec == 0 &&
			 (n == 0 || t - prev == 86400 || t - prev == 82800 || t - prev == 90000);
		prev = t;
	}
	ok(rising, "'0 0 * * *' for 250 days across both changes: every local midnight");
}

int main(void)
{
	struct cron_spec s;
	bool have_ny = access("/usr/share/zoneinfo/" NY, R_OK) == 0;

	set_tz("UTC");
	test_parse_forms();
	test_parse_errors();

	test_next_common("UTC");
	test_next_brute("UTC");
	parse_ok("0 0 1 1 *", &s);
	is_int(cron_next(&s, at("1969-06-01 00:00")), 0, "[UTC] before the epoch: 1970-01-01 is 0");
	parse_ok("* * * * *", &s);
	is_int(cron_next(&s, (time_t)-1), 0, "[UTC] one second before the epoch: 0");
	is_int(cron_next(&s, (time_t)-61), -60, "[UTC] negative times round to whole minutes");
	memset(&s, 0, sizeof(s));
	is_int(cron_next(&s, 0), -1, "an empty spec never matches");
	is_int(cron_next(NULL, 0), -1, "NULL spec");

	if (have_ny) {
		set_tz(NY);
		test_next_common(NY);
		test_next_brute(NY);
		test_dst();
	} else {
		printf("ok %d # SKIP no /usr/share/zoneinfo/%s (tzdata)\n", ++tap_n, NY);
	}
	return tap_done();
}
