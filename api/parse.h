/*
 * parse: the pure part of reading a control-API request, under server.c:
 * matching a path to a route pattern (decoding its ":name" segments) and
 * checking a JSON body against a handler's field spec. No connection, no
 * fleetd: server.c calls these, and the fuzz harness (tests/fuzz/fuzz_api.c)
 * calls them directly.
 */
#ifndef FLEET_API_PARSE_H
#define FLEET_API_PARSE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/*
 * Match path against pattern segment by segment; a pattern segment starting
 * with ':' matches any one non-empty path segment, which is percent-decoded
 * into bufs[k] and pointed to by params[k] (at most two). A segment that
 * decodes to something containing NUL, or is too long, becomes "\x01", which
 * no name check accepts.
 */
bool api_route_match(const char *pattern, const char *path, char bufs[2][256], const char *params[2]);

/* Why a body was refused: the HTTP status, the error code and message the API answers with. */
struct api_parse_error {
	int status;
	const char *code;	/* static */
	char msg[256];
};
/*
 * The body (len bytes) as a JSON object whose fields must all appear in
 * spec (NULL-terminated "name:type" strings, type one of s (string),
 * i (integer), b (boolean), a (array), o (object)); duplicate keys refused.
 * The object (caller decrefs), or NULL with *err filled.
 */
json_t *api_json_parse(const void *body, size_t len, const char *const *spec, struct api_parse_error *err);

#endif
