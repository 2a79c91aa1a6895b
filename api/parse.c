/* parse: see parse.h. */
#include "api/parse.h"

#include <event2/http.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

bool api_route_match(const char *pattern, const char *path, char bufs[2][256], const char *params[2])
{
	int k = 0;

	params[0] = params[1] = NULL;
	for (;;) {
		const char *pe = strchrnul(pattern, '/'), *se = strchrnul(path, '/');
		size_t plen = (size_t)(pe - pattern), slen = (size_t)(se - path);

		if (plen > 0 && pattern[0] == ':') {
			char *raw, *decoded;
			size_t dlen = 0;

			if (slen == 0 || k >= 2)
				return false;
			raw = xstrndup(path, slen);
			decoded = evhttp_uridecode(raw, 0, &dlen);
			free(raw);
			if (!decoded)
				return false;
			if (dlen != strlen(decoded) || dlen >= 256)
				snprintf(bufs[k], 256, "%s", "\x01");
			else
				memcpy(bufs[k], decoded, dlen + 1);
			free(decoded);
			params[k] = bufs[k];
			k++;
		} else if (plen != slen || strncmp(pattern, path, plen) != 0) {
			return false;
		}
		if (!*pe || !*se)
			return !*pe && !*se;
		pattern = pe + 1;
		path = se + 1;
	}
}

static json_t *refuse(struct api_parse_error *err, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static json_t *refuse(struct api_parse_error *err, const char *code, const char *fmt, ...)
{
	va_list ap;

	err->status = 400;
	err->code = code;
	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	va_end(ap);
	return NULL;
}

json_t *api_json_parse(const void *body, size_t len, const char *const *spec, struct api_parse_error *err)
{
	json_error_t jerr;
	const char *key;
	json_t *obj, *val;

	if (len == 0)
		return refuse(err, "bad_request", "request body is empty; a JSON object is expected");
	obj = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!obj)
		return refuse(err, "bad_json", "invalid JSON at line %d column %d: %s", jerr.line, jerr.column, jerr.text);
	if (!json_is_object(obj)) {
		json_decref(obj);
		return refuse(err, "bad_json", "request body must be a JSON object");
	}
	json_object_foreach(obj, key, val) {
		const char *const *s;
		size_t klen = strlen(key);
		char type = 0;

		for (s = spec; *s; s++)
			if (strncmp(*s, key, klen) == 0 && (*s)[klen] == ':') {
				type = (*s)[klen + 1];
				break;
			}
		if (!type) {
			refuse(err, "unknown_field", "unknown field '%.64s'", key);
			json_decref(obj);	/* after the message: key is obj's */
			return NULL;
		}
		if ((type == 's' && !json_is_string(val)) || (type == 'i' && !json_is_integer(val)) ||
		    (type == 'b' && !json_is_boolean(val)) || (type == 'a' && !json_is_array(val)) ||
		    (type == 'o' && !json_is_object(val))) {
			refuse(err, "wrong_type", "field '%.64s' must be %s", key,
			       type == 's' ? "a string" : type == 'i' ? "an integer" : type == 'b' ? "true or false" :
			       type == 'a' ? "an array" : "an object");
			json_decref(obj);
			return NULL;
		}
	}
	return obj;
}
