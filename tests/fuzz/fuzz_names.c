/*
 * fuzz_names: the name checks that stand between outside input and host
 * paths, user names and libvirt names: agent and snapshot names, memory
 * keys, environment entries (common/names.c), webhook route names, header
 * names and event filters (hooks/route.c), and time zone names (common/tz.c,
 * which then opens a file of that name under /usr/share/zoneinfo). Each
 * accepted name is checked here against its documented alphabet (a reading
 * independent of the code), and none may lead out of its directory.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/names.h"
#include "common/tz.h"
#include "hooks/route.h"

#define FAIL(what) do { fprintf(stderr, "fuzz_names: %s\n", what); abort(); } while (0)

/* Every byte of s in set (a string of allowed characters plus ranges given as "az" pairs in ranges). */
static bool all_in(const char *s, const char *ranges, const char *extra)
{
	for (; *s; s++) {
		bool ok = strchr(extra, *s) != NULL;
		for (const char *r = ranges; !ok && r[0] && r[1]; r += 2)
			ok = *s >= r[0] && *s <= r[1];
		if (!ok)
			return false;
	}
	return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = strndup((const char *)data, size), *tzwhy = NULL;
	size_t n = strlen(s);
	const char *why = NULL;

	if (agent_name_check(s, &why) == 0) {
		if (n < 1 || n > 32 || !(s[0] >= 'a' && s[0] <= 'z') || !all_in(s, "az09", "-"))
			FAIL("an agent name outside [a-z][a-z0-9-]{0,31} accepted");
	} else if (!why) {
		FAIL("an agent name refused without a why");
	}
	why = NULL;
	if (snapshot_name_check(s, &why) == 0) {
		if (n < 1 || n > 64 || s[0] == '.' || s[0] == '-' || s[0] == '_' || !all_in(s, "azAZ09", "._-") ||
		    strstr(s, ".."))
			FAIL("a snapshot name outside [a-zA-Z0-9][a-zA-Z0-9._-]{0,63} or with .. accepted");
	} else if (!why) {
		FAIL("a snapshot name refused without a why");
	}
	if (memory_key_valid(s) && (n < 1 || n > MEMORY_KEY_MAX || s[0] == '.' || !all_in(s, "azAZ09", "._-")))
		FAIL("a memory key that is no plain file name accepted");
	if (env_entry_valid(s)) {
		const char *eq = strchr(s, '=');
		char *name = eq ? strndup(s, (size_t)(eq - s)) : NULL;
		if (!name || !*name || (name[0] >= '0' && name[0] <= '9') || !all_in(name, "azAZ09", "_"))
			FAIL("an environment entry without a shell variable name accepted");
		free(name);
	}
	why = NULL;
	if (hook_route_name_check(s, &why) == 0) {
		if (n < 1 || n > HOOK_ROUTE_NAME_MAX || !all_in(s, "az09", "-_") || s[0] == '-' || s[0] == '_')
			FAIL("a route name outside its alphabet accepted");
	} else if (!why) {
		FAIL("a route name refused without a why");
	}
	why = NULL;
	if (hook_header_check(s, &why) == 0) {
		if (n < 1 || n > 64 || !all_in(s, "azAZ09", "!#$%&'*+-.^_`|~"))
			FAIL("a header name that is not a token accepted");
	} else if (!why) {
		FAIL("a header name refused without a why");
	}
	why = NULL;
	if (hook_events_check(s, &why) == 0) {
		if (!all_in(s, "azAZ09", "_.:-,"))
			FAIL("an event filter outside [A-Za-z0-9_.:-,] accepted");
		/* A filter that lists a type takes it. */
		const char *comma = strchr(s, ',');
		char *first = strndup(s, comma ? (size_t)(comma - s) : n);
		if (*first && !hook_events_match(s, first))
			FAIL("an event filter does not take a type it lists");
		free(first);
	} else if (!why) {
		FAIL("an event filter refused without a why");
	}
	if (tz_check(s, &tzwhy) == 0) {
		if (s[0] == '/' || strstr(s, "/../") || strncmp(s, "../", 3) == 0 || strcmp(s, "..") == 0 ||
		    (n >= 3 && strcmp(s + n - 3, "/..") == 0) || !all_in(s, "azAZ09", "._+-/"))
			FAIL("a zone name that leaves the zone database accepted");
	} else {
		if (!tzwhy)
			FAIL("a zone refused without a why");
		free(tzwhy);
	}
	free(s);
	return 0;
}
