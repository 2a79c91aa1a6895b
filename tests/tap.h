/*
 * tap: a minimal TAP producer for the C unit tests (automake's tap-driver
 * reads it). Plan at the end, so tests need not count their checks.
 */
#ifndef FLEET_TAP_H
#define FLEET_TAP_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int tap_n, tap_failed;

#define ok(cond, ...) do { \
	int _c = !!(cond); \
	printf("%sok %d - ", _c ? "" : "not ", ++tap_n); \
	printf(__VA_ARGS__); \
	putchar('\n'); \
	if (!_c) { tap_failed++; printf("#   failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); } \
} while (0)

#define is_int(got, want, ...) do { \
	long long _g = (long long)(got), _w = (long long)(want); \
	ok(_g == _w, __VA_ARGS__); \
	if (_g != _w) printf("#   got %lld, want %lld\n", _g, _w); \
} while (0)

#define is_str(got, want, ...) do { \
	const char *_g = (got), *_w = (want); \
	int _same = (_g && _w) ? strcmp(_g, _w) == 0 : _g == _w; \
	ok(_same, __VA_ARGS__); \
	if (!_same) printf("#   got '%s', want '%s'\n", _g ? _g : "(null)", _w ? _w : "(null)"); \
} while (0)

/* Skip the whole file for a missing prerequisite; under CI (CI=true) that is a failure. */
__attribute__((noreturn)) static inline void tap_skip_all(const char *why)
{
	if (getenv("CI") && strcmp(getenv("CI"), "true") == 0) {
		printf("not ok 1 - prerequisite missing under CI: %s\n1..1\n", why);
		exit(1);
	}
	printf("1..0 # SKIP %s\n", why);
	exit(0);
}

static inline int tap_done(void)
{
	printf("1..%d\n", tap_n);
	return tap_failed ? 1 : 0;
}

#endif
