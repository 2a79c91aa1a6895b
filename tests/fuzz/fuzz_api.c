/*
 * fuzz_api: what fleetd's control API reads from a request before any
 * handler runs (api/parse.c, under api/server.c): the path matched against
 * every route pattern of api/routes.c, its ":name" segments percent-decoded,
 * and the body checked as a JSON object against every field spec the
 * handlers give api_body_object. The patterns and specs are taken from
 * those files when the harness is built (build.sh writes api_table.inc), so
 * they stay the daemon's. The input: the path, one line, then the body.
 * Checks: a decoded parameter is a C string under 256 bytes; encoded again
 * (evhttp_uriencode) it matches to itself; an accepted body is an object
 * whose every field is in the spec with its type, which prints and parses
 * back equal; a refused one says 400 with a code and a message.
 */
#include <event2/http.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/parse.h"

#define FAIL(what) do { fprintf(stderr, "fuzz_api: %s\n", what); abort(); } while (0)

#include "api_table.inc"	/* static const char *const patterns[]; static const char *const *const specs[] */

static void check_match(const char *pattern, const char *path)
{
	char bufs[2][256], again_bufs[2][256];
	const char *p[2], *q[2];
	int want = 0;

	if (!api_route_match(pattern, path, bufs, p))
		return;
	for (const char *s = pattern; (s = strchr(s, ':')); s++)
		want++;
	for (int k = 0; k < 2; k++) {
		if ((k < want) != (p[k] != NULL))
			FAIL("a match with a parameter count unlike its pattern's");
		if (p[k] && (strlen(p[k]) == 0 || strlen(p[k]) >= 256))
			FAIL("a decoded parameter empty or over 255 bytes");
	}
	if ((p[0] && p[0][0] == '\x01') || (p[1] && p[1][0] == '\x01'))
		return;	/* refused by every name check */
	/* The path rebuilt from the pattern with the parameters encoded again matches to the same parameters. */
	char path2[4096] = "";
	int k = 0;
	for (const char *s = pattern; *s;) {
		size_t n = strcspn(s, "/");
		if (s[0] == ':') {
			char *enc = evhttp_uriencode(p[k++], -1, 0);
			if (!enc)
				FAIL("evhttp_uriencode");
			strncat(path2, enc, sizeof(path2) - strlen(path2) - 1);
			free(enc);
		} else {
			strncat(path2, s, n < sizeof(path2) - strlen(path2) - 1 ? n : sizeof(path2) - strlen(path2) - 1);
		}
		s += n;
		if (*s == '/') {
			strncat(path2, "/", sizeof(path2) - strlen(path2) - 1);
			s++;
		}
	}
	if (!api_route_match(pattern, path2, again_bufs, q))
		FAIL("a path rebuilt from its decoded parameters does not match");
	for (k = 0; k < want; k++)
		if (strcmp(p[k], q[k]) != 0)
			FAIL("a parameter changed through encode and decode");
}

static char spec_type(const char *const *spec, const char *key)
{
	size_t klen = strlen(key);

	for (; *spec; spec++)
		if (strlen(*spec) == klen + 2 && strncmp(*spec, key, klen) == 0 && (*spec)[klen] == ':')
			return (*spec)[klen + 1];
	return 0;
}

static void check_body(const uint8_t *body, size_t len, const char *const *spec)
{
	struct api_parse_error err = { 0 };
	json_t *obj = api_json_parse(body, len, spec, &err), *val, *back;
	const char *key;
	char *text;

	if (!obj) {
		if (err.status != 400 || !err.code || !*err.code || !err.msg[0])
			FAIL("a refused body without 400, a code and a message");
		return;
	}
	if (!json_is_object(obj))
		FAIL("an accepted body that is no object");
	json_object_foreach(obj, key, val) {
		char t = spec_type(spec, key);
		bool good = (t == 's' && json_is_string(val)) || (t == 'i' && json_is_integer(val)) ||
			    (t == 'b' && json_is_boolean(val)) || (t == 'a' && json_is_array(val)) ||
			    (t == 'o' && json_is_object(val));
		if (!good)
			FAIL("an accepted body with a field not in the spec, or of the wrong type");
	}
	text = json_dumps(obj, JSON_COMPACT | JSON_ENCODE_ANY);
	if (!text)
		FAIL("an accepted body does not print");
	back = api_json_parse(text, strlen(text), spec, &err);
	if (!back || !json_equal(obj, back))
		FAIL("an accepted body does not parse back equal");
	json_decref(back);
	free(text);
	json_decref(obj);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *nl = memchr(data, '\n', size);
	size_t plen = nl ? (size_t)(nl - data) : size;
	char *path = strndup((const char *)data, plen);
	const uint8_t *body = nl ? nl + 1 : data + size;
	size_t blen = (size_t)(data + size - body);
	/* The body in a buffer of its own size, so ASan sees a read past it. */
	uint8_t *copy = malloc(blen ? blen : 1);

	memcpy(copy, body, blen);
	/* server.c matches the path without its query. */
	path[strcspn(path, "?")] = '\0';
	for (size_t i = 0; i < sizeof(patterns) / sizeof(*patterns); i++)
		check_match(patterns[i], path);
	for (size_t i = 0; i < sizeof(specs) / sizeof(*specs); i++)
		check_body(copy, blen, specs[i]);
	free(copy);
	free(path);
	return 0;
}
