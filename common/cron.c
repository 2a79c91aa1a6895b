/*
 * cron: see cron.h. Parsing never echoes a control character into a
 * message (they are refused first), and cron_next never walks minute by
 * minute: it looks for the next matching wall-clock minute by calendar
 * arithmetic, then moves real time by that distance, stopping at a UTC
 * offset change so no real minute is ever jumped over. Only localtime_r is
 * used, so the answer is always a real instant and gaps need no special
 * case. Nothing here may keep state between calls.
 */
#include "common/cron.h"
#include "common/util.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include <strings.h>

#define MINUTES_ALL	((UINT64_C(1) << 60) - 1)
#define HOURS_ALL	((UINT32_C(1) << 24) - 1)
#define MDAYS_ALL	(((UINT32_C(1) << 31) - 1) << 1)
#define MONTHS_ALL	((uint16_t)(((1u << 12) - 1) << 1))
#define WDAYS_ALL	((uint8_t)((1u << 7) - 1))

#define DAY_SECS	86400
#define SEARCH_SECS	((int64_t)(5 * 365 + 2) * DAY_SECS)	/* "5 years", leap days included */
#define MAX_JUMP_SECS	((int64_t)7 * DAY_SECS)		/* fewer than one offset change per jump */
#define TIME_LIMIT	((int64_t)1 << 40)		/* some 34,000 years: far from any overflow */

/* ---- parsing ------------------------------------------------------------ */

struct field {
	const char *name;
	int min, max;		/* accepted numbers */
	int star_max;		/* what '*' and a/n run up to (day-of-week: 6, not 7) */
	const char *const *names;	/* three-letter names for min, min+1, ... */
};

static const char *const month_names[] = { "jan", "feb", "mar", "apr", "may", "jun",
	"jul", "aug", "sep", "oct", "nov", "dec", NULL };
static const char *const wday_names[] = { "sun", "mon", "tue", "wed", "thu", "fri", "sat", NULL };

static const struct field fields[5] = {
	{ "minute", 0, 59, 59, NULL },
	{ "hour", 0, 23, 23, NULL },
	{ "day-of-month", 1, 31, 31, NULL },
	{ "month", 1, 12, 12, month_names },
	{ "day-of-week", 0, 7, 6, wday_names },
};

static const struct {
	const char *name, *spec;
} macros[] = {
	{ "@yearly", "0 0 1 1 *" },
	{ "@annually", "0 0 1 1 *" },
	{ "@monthly", "0 0 1 * *" },
	{ "@weekly", "0 0 * * 0" },
	{ "@daily", "0 0 * * *" },
	{ "@midnight", "0 0 * * *" },
	{ "@hourly", "0 * * * *" },
};

static int fail(char **why, const char *fmt, ...) _printf_(2, 3);
static int fail(char **why, const char *fmt, ...)
{
	char buf[CRON_SPEC_MAX + 160];
	va_list ap;

	if (why) {
		va_start(ap, fmt);
		vsnprintf(buf, sizeof(buf), fmt, ap);
		va_end(ap);
		*why = xstrdup(buf);
	}
	return -EINVAL;
}

static bool is_blank(char c)
{
	return c == ' ' || c == '\t';
}

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static bool is_alpha(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* One number or name at *p (before end) into *ret; advances *p. */
static int parse_value(const struct field *f, const char **p, const char *end, int *ret, char **why)
{
	const char *s = *p, *q = s;
	long v = 0;

	if (q < end && is_digit(*q)) {
		for (; q < end && is_digit(*q); q++)
			if (v <= f->max)	/* saturate: anything past max is out of range anyway */
				v = v * 10 + (*q - '0');
		if (v < f->min || v > f->max)
			return fail(why, "%s field: %.*s is out of range %d-%d", f->name, (int)(q - s), s,
				    f->min, f->max);
		*p = q;
		*ret = (int)v;
		return 0;
	}
	if (q < end && is_alpha(*q)) {
		while (q < end && is_alpha(*q))
			q++;
		if (!f->names)
			return fail(why, "%s field: '%.*s' is not a number", f->name, (int)(q - s), s);
		int i;

		for (i = 0; f->names[i]; i++)
			if (q - s == 3 && strncasecmp(s, f->names[i], 3) == 0) {
				*p = q;
				*ret = f->min + i;
				return 0;
			}
		return fail(why, "%s field: unknown name '%.*s' (use %s..%s)", f->name, (int)(q - s), s,
			    f->names[0], f->names[i - 1]);
	}
	if (q == end)
		return fail(why, "%s field: a number is missing", f->name);
	return fail(why, "%s field: unexpected '%c'", f->name, *q);
}

/* One list item: '*', a value or a range, then an optional /step. */
static int parse_item(const struct field *f, const char *s, const char *end, uint64_t *bits, char **why)
{
	const char *p = s;
	int lo, hi, step = 1, r;
	bool single = false;

	if (p == end)
		return fail(why, "%s field: empty list item", f->name);
	if (*p == '*') {
		p++;
		lo = f->min;
		hi = f->star_max;
	} else {
		if ((r = parse_value(f, &p, end, &lo, why)) < 0)
			return r;
		hi = lo;
		single = true;
		if (p < end && *p == '-') {
			p++;
			if ((r = parse_value(f, &p, end, &hi, why)) < 0)
				return r;
			if (hi < lo)
				return fail(why, "%s field: range %.*s is reversed", f->name, (int)(p - s), s);
			single = false;
		}
	}
	if (p < end && *p == '/') {
		const char *n = ++p;
		long v = 0;

		for (; p < end && is_digit(*p); p++)
			if (v <= f->max)
				v = v * 10 + (*p - '0');
		if (p == n)
			return fail(why, "%s field: '/' must be followed by a number", f->name);
		if (v == 0)
			return fail(why, "%s field: step 0 is not allowed", f->name);
		if (v > f->max)
			return fail(why, "%s field: step %.*s is out of range 1-%d", f->name, (int)(p - n), n,
				    f->max);
		step = (int)v;
		if (single)		/* a/n: from a to the end of the field, as cronie */
			hi = f->star_max > lo ? f->star_max : lo;
	}
	if (p < end)
		return fail(why, "%s field: unexpected '%c' in '%.*s'", f->name, *p, (int)(end - s), s);
	for (int v = lo; v <= hi; v += step)
		*bits |= UINT64_C(1) << v;
	return 0;
}

/* One field: items separated by ','. *any: the field was '*' (or its equal, star-slash-1). */
static int parse_field(const struct field *f, const char *s, const char *end, uint64_t *ret, bool *any,
		       char **why)
{
	uint64_t bits = 0;
	const char *p = s;
	int r;

	for (;;) {
		const char *comma = memchr(p, ',', (size_t)(end - p));
		const char *e = comma ? comma : end;

		if ((r = parse_item(f, p, e, &bits, why)) < 0)
			return r;
		if (!comma)
			break;
		p = comma + 1;
	}
	*any = s[0] == '*' && !memchr(s, ',', (size_t)(end - s)) &&
	       (end - s == 1 || (end - s == 3 && s[1] == '/' && s[2] == '1'));
	*ret = bits;
	return 0;
}

static int parse_fields(const char *text, struct cron_spec *spec, char **why)
{
	const char *start[6], *end[6];
	struct cron_spec out = { 0 };
	uint64_t bits[5];
	bool any[5];
	int n = 0, r;

	for (const char *p = text; *p;) {
		while (is_blank(*p))
			p++;
		if (!*p)
			break;
		if (n < 6)
			start[n] = p;
		while (*p && !is_blank(*p))
			p++;
		if (n < 6)
			end[n] = p;
		n++;
	}
	if (n == 0)
		return fail(why, "cron spec is empty");
	if (start[0][0] == '@') {
		int len = (int)(end[0] - start[0]);

		if (len == 7 && strncasecmp(start[0], "@reboot", 7) == 0)
			return fail(why, "@reboot is not supported: schedules are times, not events");
		for (size_t i = 0; i < ARRAY_SIZE(macros); i++)
			if ((size_t)len == strlen(macros[i].name) &&
			    strncasecmp(start[0], macros[i].name, (size_t)len) == 0) {
				if (n > 1)
					return fail(why, "%s takes no other fields", macros[i].name);
				return parse_fields(macros[i].spec, spec, why);
			}
		return fail(why, "unknown macro '%.*s' (use @yearly, @annually, @monthly, @weekly, @daily, "
			    "@midnight or @hourly)", len, start[0]);
	}
	if (n != 5)
		return fail(why, "expected 5 fields, got %d", n);
	for (int i = 0; i < 5; i++)
		if ((r = parse_field(&fields[i], start[i], end[i], &bits[i], &any[i], why)) < 0)
			return r;
	out.minutes = bits[0] & MINUTES_ALL;
	out.hours = (uint32_t)bits[1] & HOURS_ALL;
	out.mdays = (uint32_t)bits[2] & MDAYS_ALL;
	out.months = (uint16_t)(bits[3] & MONTHS_ALL);
	out.wdays = (uint8_t)((bits[4] | bits[4] >> 7) & WDAYS_ALL);	/* 7 is Sunday */
	out.mday_any = any[2];
	out.wday_any = any[4];
	*spec = out;
	return 0;
}

int cron_parse(const char *text, struct cron_spec *spec, char **why)
{
	size_t len;

	if (!text || !*text)
		return fail(why, "cron spec is empty");
	len = strnlen(text, CRON_SPEC_MAX + 1);
	if (len > CRON_SPEC_MAX)
		return fail(why, "cron spec is longer than %d characters", CRON_SPEC_MAX);
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)text[i];

		if ((c < 0x20 && c != '\t') || c == 0x7f)
			return fail(why, "cron spec contains a control character (0x%02x) at offset %zu", c, i);
		if (c >= 0x80)
			return fail(why, "cron spec contains a non-ASCII byte at offset %zu", i);
	}
	return parse_fields(text, spec, why);
}

/* ---- the calendar ------------------------------------------------------- */

struct civil {
	int64_t y;
	int mon, d, h, min;	/* 1-12, 1-31, 0-23, 0-59 */
};

/* Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil). */
static int64_t days_from_civil(int64_t y, int m, int d)
{
	int64_t era, yoe, doy, doe;

	y -= m <= 2;
	era = (y >= 0 ? y : y - 399) / 400;
	yoe = y - era * 400;
	doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
	doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + doe - 719468;
}

static int days_in_month(int64_t y, int m)
{
	static const int dim[12] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
	bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;

	return m == 2 && leap ? 29 : dim[m - 1];
}

/* Wall-clock time as seconds on a uniform scale (the epoch as if the zone were UTC). */
static int64_t civil_secs(const struct civil *c)
{
	return days_from_civil(c->y, c->mon, c->d) * DAY_SECS + c->h * 3600 + c->min * 60;
}

/* The lowest set bit at or above from, or -1. */
static int next_bit(uint64_t mask, int from)
{
	if (from > 63)
		return -1;
	mask &= ~UINT64_C(0) << from;
	return mask ? __builtin_ctzll(mask) : -1;
}

static bool day_matches(const struct cron_spec *s, const struct civil *c)
{
	int64_t wd = (days_from_civil(c->y, c->mon, c->d) % 7 + 11) % 7;	/* 1970-01-01: Thursday */
	bool mday = s->mdays >> c->d & 1, wday = s->wdays >> wd & 1;

	return s->mday_any || s->wday_any ? mday && wday : mday || wday;
}

/*
 * Move *c to the first wall-clock minute at or after it that the spec
 * matches, whole months, days and hours at a time; false if there is none
 * before year_limit.
 */
static bool civil_next(const struct cron_spec *s, struct civil *c, int64_t year_limit)
{
	uint64_t months = s->months & MONTHS_ALL, hours = s->hours & HOURS_ALL;
	uint64_t minutes = s->minutes & MINUTES_ALL;
	int v;

	if (!months || !hours || !minutes || (!(s->mdays & MDAYS_ALL) && !(s->wdays & WDAYS_ALL)))
		return false;
	for (;;) {
		if (c->min > 59)
			c->h++, c->min = 0;
		if (c->h > 23)
			c->d++, c->h = 0;
		if (c->d > days_in_month(c->y, c->mon))
			c->mon++, c->d = 1;
		if (c->mon > 12)
			c->y++, c->mon = 1;
		if (c->y > year_limit)
			return false;
		if ((v = next_bit(months, c->mon)) < 0) {
			c->y++, c->mon = 1, c->d = 1, c->h = 0, c->min = 0;
			continue;
		}
		if (v != c->mon)
			c->mon = v, c->d = 1, c->h = 0, c->min = 0;
		if (!day_matches(s, c)) {
			c->d++, c->h = 0, c->min = 0;
			continue;
		}
		if ((v = next_bit(hours, c->h)) < 0) {
			c->d++, c->h = 0, c->min = 0;
			continue;
		}
		if (v != c->h)
			c->h = v, c->min = 0;
		if ((v = next_bit(minutes, c->min)) < 0) {
			c->h++, c->min = 0;
			continue;
		}
		c->min = v;
		return true;
	}
}

/* ---- real time ---------------------------------------------------------- */

/* Local wall clock at t; false if t is not representable. */
static bool local(int64_t t, struct civil *c, int *sec)
{
	time_t tt = (time_t)t;
	struct tm tm;

	if ((int64_t)tt != t || !localtime_r(&tt, &tm))
		return false;
	c->y = (int64_t)tm.tm_year + 1900;
	c->mon = tm.tm_mon + 1;
	c->d = tm.tm_mday;
	c->h = tm.tm_hour;
	c->min = tm.tm_min;
	*sec = tm.tm_sec;
	return true;
}

/* Local wall clock minus real time at t (the UTC offset); INT64_MIN if unknown. */
static int64_t offset_at(int64_t t)
{
	struct civil c;
	int sec;

	if (!local(t, &c, &sec))
		return INT64_MIN;
	return civil_secs(&c) + sec - t;
}

/* The first second in (lo, hi] whose offset is not off; off(lo) == off != off(hi). */
static int64_t offset_change(int64_t lo, int64_t hi, int64_t off)
{
	while (hi - lo > 1) {
		int64_t mid = lo + (hi - lo) / 2;

		if (offset_at(mid) == off)
			lo = mid;
		else
			hi = mid;
	}
	return hi;
}

/* Whether the wall-clock minute at t (wall) already happened earlier: a fall-back's second pass. */
static bool repeated(int64_t t, int64_t wall)
{
	static const int64_t back[] = { 1800, 3600, 7200 };	/* the sizes of real-world fall-backs */
	struct civil c;
	int sec;

	for (size_t i = 0; i < ARRAY_SIZE(back); i++)
		if (local(t - back[i], &c, &sec) && civil_secs(&c) + sec == wall)
			return true;
	return false;
}

time_t cron_next(const struct cron_spec *spec, time_t after)
{
	int64_t t, end;

	if (!spec || (int64_t)after > TIME_LIMIT || (int64_t)after < -TIME_LIMIT)
		return (time_t)-1;
	t = (int64_t)after;
	t = (t - ((t % 60) + 60) % 60) + 60;	/* the next whole minute of real time */
	end = (int64_t)after + SEARCH_SECS;
	while (t <= end) {
		struct civil c, want;
		int64_t wall, off, next;
		int sec;

		if (!local(t, &c, &sec))
			return (time_t)-1;
		if (sec) {			/* an offset with seconds: go to the wall clock's minute */
			t += 60 - sec;
			continue;
		}
		wall = civil_secs(&c);
		off = wall - t;
		want = c;
		if (!civil_next(spec, &want, c.y + 6))
			return (time_t)-1;
		if (civil_secs(&want) == wall) {
			if ((spec->hours & HOURS_ALL) != HOURS_ALL && repeated(t, wall)) {
				t += 60;	/* fixed hours fire in a repeated hour's first pass only */
				continue;
			}
			return (time_t)t;
		}
		/*
		 * Every wall-clock minute before want fails, so move real time by
		 * the same distance if the offset stays put; if it changes, stop
		 * at the change and look again from there.
		 */
		next = t + (civil_secs(&want) - wall);
		if (next - t > MAX_JUMP_SECS)
			next = t + MAX_JUMP_SECS;
		if (offset_at(next) != off) {
			next = offset_change(t, next, off);
			next += ((60 - next % 60) % 60 + 60) % 60;	/* round up to a whole minute */
		}
		t = next;
	}
	return (time_t)-1;
}

/* ---- cron triggers ------------------------------------------------------ */

static const char *const catch_up_names[] = {
	[CRON_CATCH_UP_ONCE] = "once",
	[CRON_CATCH_UP_SKIP] = "skip",
};

const char *cron_catch_up_to_string(enum cron_catch_up c)
{
	return (size_t)c < ARRAY_SIZE(catch_up_names) ? catch_up_names[c] : NULL;
}

int cron_catch_up_from_string(const char *s)
{
	for (size_t i = 0; s && i < ARRAY_SIZE(catch_up_names); i++)
		if (strcmp(s, catch_up_names[i]) == 0)
			return (int)i;
	return -EINVAL;
}

enum cron_due cron_due(const struct cron_spec *spec, enum cron_catch_up catch_up, time_t last, time_t since,
		       time_t now, time_t *slot)
{
	time_t first = cron_next(spec, last), live;

	if (slot)
		*slot = (time_t)-1;
	if (last > now && last - now > CRON_CLOCK_BACK_MAX_S)
		return CRON_DUE_CLOCK_BACK;
	if (first == (time_t)-1 || first > now)
		return CRON_DUE_NONE;
	/* A slot no earlier than since came while this fleetd was watching: on time. */
	live = cron_next(spec, (last > since - 1 ? last : since - 1));
	if (live != (time_t)-1 && live <= now) {
		if (slot)
			*slot = live;
		return CRON_DUE_FIRE;
	}
	if (slot)
		*slot = first;
	return catch_up == CRON_CATCH_UP_ONCE ? CRON_DUE_FIRE : CRON_DUE_SKIP;
}
