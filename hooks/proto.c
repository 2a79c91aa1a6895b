/*
 * proto: see proto.h. One concern: the socketpair messages between fleetd
 * and its webhook listener, built and checked member by member.
 *
 * Every parser follows the same rules: the message is an object whose "t"
 * is the expected type; every member is in the parser's list (anything else
 * is refused, so a newer peer is noticed rather than half understood), of
 * its JSON type and within its bounds; nothing is kept on failure. Strings
 * that end up in headers, logs or the database are printable ASCII.
 *
 * The JSON messages (members marked ? are optional; the binary delivery
 * and answer are described in proto.h):
 *   routes    {"t","limits":{"max_connections","max_per_source","request_timeout","header_max"},
 *              "routes":[{"name","source","secrets":[BASE64,...],"header"?,"encoding"?,"prefix"?,
 *                         "datadog_auth"?,"delivery_field"?,"public_url"?,"max_body"}]}
 *   hello     {"t","pid"}
 *   stats     {"t","accepted","refused":[6 counts],"connections","dropped","sig_failed":[a count per source]}
 */
#include "hooks/proto.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/base64.h"
#include "common/util.h"
#include "hooks/route.h"
#include "hooks/verify_common.h"

#define BODY_MAX (16u << 20)		/* a delivery's body, whatever its route says */
#define ANSWER_BODY_MAX (64u << 10)	/* fleetd's answers are short JSON, or a Slack challenge */
#define CTYPE_MAX 128			/* a Content-Type */
#define HEADER_VALUE_MAX 8192		/* one header value passed on */
#define URL_MAX 2048			/* a route's public_url */
#define FIELD_MAX 128			/* a prefix or a datadog delivery field */
#define COUNT_MAX (1LL << 53)		/* counters, seqs, times: what a double holds exactly */
#define FRAME_GUESS 2048		/* JSON bytes hook_frame_encode makes room for at first */
#define B64_LEN(n) (((size_t)(n) + 2) / 3 * 4)

/* ---- framing ---- */

static uint32_t get_be32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void put_be32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)(v >> 24);
	p[1] = (unsigned char)(v >> 16);
	p[2] = (unsigned char)(v >> 8);
	p[3] = (unsigned char)v;
}

long hook_frame_need(const unsigned char *buf, size_t avail)
{
	uint32_t len, part_len;

	if (avail < HOOK_FRAME_HEAD)
		return 0;
	len = get_be32(buf);
	part_len = get_be32(buf + 4);
	if (len > HOOK_FRAME_MAX || part_len < 1 || part_len > len)
		return -EMSGSIZE;
	return (long)(HOOK_FRAME_HEAD + len);
}

int hook_frame_kind(const unsigned char *frame, size_t len, const char **why)
{
	long need = hook_frame_need(frame, len);

	if (need <= 0 || (size_t)need != len) {
		*why = "frame length out of bounds";
		return -EBADMSG;
	}
	switch (frame[HOOK_FRAME_HEAD]) {
	case HOOK_KIND_DELIVERY:
	case HOOK_KIND_ANSWER:
	case HOOK_KIND_JSON:
		return frame[HOOK_FRAME_HEAD];
	default:
		*why = "a frame of an unknown kind";
		return -EBADMSG;
	}
}

int hook_frame_encode(const json_t *msg, unsigned char **ret, size_t *len)
{
	size_t n;
	char *text;
	unsigned char *out;

	if (!json_is_object(msg))
		return -EINVAL;
	/*
	 * One pass for the usual message (hello, stats): dumped into room for
	 * FRAME_GUESS bytes; json_dumpb says how much it needed, and only a
	 * larger one (a table of routes) is dumped again.
	 */
	out = malloc(HOOK_FRAME_HEAD + FRAME_GUESS);
	if (!out)
		return -ENOMEM;
	text = (char *)out + HOOK_FRAME_HEAD;
	n = json_dumpb(msg, text, FRAME_GUESS, JSON_COMPACT | JSON_ENSURE_ASCII);
	if (n == 0 || n > HOOK_FRAME_MAX) {
		explicit_bzero(out, HOOK_FRAME_HEAD + FRAME_GUESS);
		free(out);
		return n == 0 ? -ENOMEM : -EMSGSIZE;
	}
	if (n > FRAME_GUESS) {
		/* Not realloc: what was dumped so far may be a routes message's secrets, wiped before it is freed. */
		explicit_bzero(out, HOOK_FRAME_HEAD + FRAME_GUESS);
		free(out);
		if (!(out = malloc(HOOK_FRAME_HEAD + n)))
			return -ENOMEM;
		text = (char *)out + HOOK_FRAME_HEAD;
		if (json_dumpb(msg, text, n, JSON_COMPACT | JSON_ENSURE_ASCII) != n) {
			free(out);
			return -ENOMEM;
		}
	}
	put_be32(out, (uint32_t)n);
	put_be32(out + 4, (uint32_t)n);
	*ret = out;
	*len = HOOK_FRAME_HEAD + n;
	return 0;
}

int hook_frame_decode(const unsigned char *frame, size_t len, json_t **ret, const char **why)
{
	int kind = hook_frame_kind(frame, len, why);
	size_t part_len;
	json_t *j;

	if (kind < 0)
		return kind;
	if (kind != HOOK_KIND_JSON) {
		*why = "a binary frame where a JSON one was expected";
		return -EBADMSG;
	}
	part_len = get_be32(frame + 4);
	if (len != HOOK_FRAME_HEAD + part_len) {
		*why = "only a delivery has bytes after its message";
		return -EBADMSG;
	}
	/* Depth-checked first, duplicate members refused, NUL in strings refused (jansson's default). */
	j = hv_json_object(frame + HOOK_FRAME_HEAD, part_len);
	if (!j) {
		*why = "frame is not one JSON object";
		return -EBADMSG;
	}
	if (!hook_msg_type(j)) {
		json_decref(j);
		*why = "message has no type";
		return -EBADMSG;
	}
	*ret = j;
	return 0;
}

const char *hook_msg_type(const json_t *msg)
{
	return json_string_value(json_object_get(msg, "t"));
}

/* ---- checks shared by the parsers ---- */

/* Is every member of o one of the NULL-terminated keys? */
static bool only_keys(const json_t *o, const char *const *keys)
{
	const char *key;
	json_t *v;

	json_object_foreach((json_t *)o, key, v) {
		const char *const *k;

		for (k = keys; *k && strcmp(*k, key) != 0; k++)
			;
		if (!*k)
			return false;
	}
	return true;
}

/* Is msg an object of type t with only the given members? */
static bool msg_is(const json_t *msg, const char *t, const char *const *keys, const char **why)
{
	const char *type = hook_msg_type(msg);

	if (!json_is_object(msg) || !type || strcmp(type, t) != 0) {
		*why = "message is not of the expected type";
		return false;
	}
	if (!only_keys(msg, keys)) {
		*why = "message has an unknown member";
		return false;
	}
	return true;
}

/* Integer member key within [min, max] into *out. */
static bool get_int(const json_t *o, const char *key, long long min, long long max, long long *out)
{
	json_t *v = json_object_get(o, key);

	if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max)
		return false;
	*out = json_integer_value(v);
	return true;
}

/* Printable ASCII (tab too when tab is true), no other control byte, no DEL, no NUL. */
static bool printable(const char *s, size_t len, bool tab)
{
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if (!((c >= 0x20 && c < 0x7f) || (tab && c == '\t')))
			return false;
	}
	return true;
}

/*
 * String member key: 1..max printable bytes (*out points into o), or, when
 * optional, absent or null (*out NULL).
 */
static bool get_str(const json_t *o, const char *key, size_t max, bool optional, const char **out)
{
	json_t *v = json_object_get(o, key);
	size_t len;

	if (!v || json_is_null(v)) {
		*out = NULL;
		return optional;
	}
	if (!json_is_string(v))
		return false;
	len = json_string_length(v);
	if (len == 0 || len > max || !printable(json_string_value(v), len, false))
		return false;
	*out = json_string_value(v);
	return true;
}

/* Zero a buffer in a way the compiler may not drop. */
static void wipe(void *p, size_t n)
{
	if (p)
		explicit_bzero(p, n);
}

/* ---- routes ---- */

static const char *const encoding_names[] = { [HOOK_HEX] = "hex", [HOOK_BASE64] = "base64" };
static const char *const auth_names[] = { [HOOK_DATADOG_HEADER] = "header", [HOOK_DATADOG_BASIC] = "basic" };

/* Index of s in names (n of them), or -1. */
static int word_index(const char *const *names, int n, const char *s)
{
	for (int i = 0; s && i < n; i++)
		if (strcmp(names[i], s) == 0)
			return i;
	return -1;
}

json_t *hook_msg_routes(const struct hook_route *routes, size_t n, const struct hook_limits *limits)
{
	json_t *arr = json_array();
	json_t *msg = json_pack("{s:s, s:{s:I, s:I, s:I, s:I}, s:o}", "t", "routes", "limits",
				"max_connections", (json_int_t)limits->max_connections,
				"max_per_source", (json_int_t)limits->max_per_source,
				"request_timeout", (json_int_t)limits->request_timeout_s,
				"header_max", (json_int_t)limits->header_max, "routes", arr);

	if (!msg)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		const struct hook_route *r = &routes[i];
		json_t *secrets = json_array(), *o;

		if (!secrets) {
			json_decref(msg);
			return NULL;
		}
		for (int k = 0; k < r->n_secrets && k < HOOK_SECRETS_MAX; k++) {
			char *b64 = base64_encode(r->secrets[k], r->secret_lens[k]);

			json_array_append_new(secrets, json_string(b64));
			wipe(b64, strlen(b64));
			free(b64);
		}
		o = json_pack("{s:s, s:s, s:o, s:s, s:s, s:I}", "name", r->name,
			      "source", hook_source_to_string(r->source), "secrets", secrets,
			      "encoding", encoding_names[r->encoding == HOOK_BASE64],
			      "datadog_auth", auth_names[r->datadog_auth == HOOK_DATADOG_BASIC],
			      "max_body", (json_int_t)r->max_body);
		if (!o || (r->header && json_object_set_new(o, "header", json_string(r->header)) < 0) ||
		    (r->prefix && json_object_set_new(o, "prefix", json_string(r->prefix)) < 0) ||
		    (r->delivery_field && json_object_set_new(o, "delivery_field", json_string(r->delivery_field)) < 0) ||
		    (r->public_url && json_object_set_new(o, "public_url", json_string(r->public_url)) < 0) ||
		    json_array_append_new(arr, o) < 0) {
			json_decref(msg);
			return NULL;
		}
	}
	return msg;
}

void hook_route_set_free(struct hook_route_set *s)
{
	size_t i, k;
	json_t *r;

	if (!s)
		return;
	/* Every decoded secret is one route's (route_parse wiped the one it refused): wiped through the route. */
	for (k = 0; k < s->n; k++) {
		hook_mac_cache_free(s->routes[k].macs);
		for (int m = 0; m < s->routes[k].n_secrets; m++)
			wipe((void *)s->routes[k].secrets[m], s->routes[k].secret_lens[m]);
	}
	for (i = 0; i < s->n_secret_bufs; i++)
		free(s->secret_bufs[i]);
	/* The base64 text of the secrets in our copy of the message: wiped too. */
	json_array_foreach(json_object_get(s->backing, "routes"), i, r) {
		json_t *sec;

		json_array_foreach(json_object_get(r, "secrets"), k, sec)
			if (json_is_string(sec))
				wipe((char *)json_string_value(sec), json_string_length(sec));
	}
	json_decref(s->backing);
	free(s->secret_bufs);
	free(s->routes);
	free(s);
}

static const char *const route_keys[] = { "name", "source", "secrets", "header", "encoding", "prefix",
					  "datadog_auth", "delivery_field", "public_url", "max_body", NULL };

/* One route object into *r and its decoded secrets into s (strings point into o); false with *why. */
static bool route_parse(const json_t *o, struct hook_route *r, struct hook_route_set *s, const char **why)
{
	const char *source, *encoding, *auth;
	json_t *secrets = json_object_get(o, "secrets"), *sec;
	long long max_body;
	size_t i;
	int src;

	if (!json_is_object(o) || !only_keys(o, route_keys)) {
		*why = "a route is not an object of known members";
		return false;
	}
	if (!get_str(o, "name", HOOK_ROUTE_NAME_MAX, false, &r->name) || hook_route_name_check(r->name, why) < 0) {
		*why = "a route's name is missing or invalid";
		return false;
	}
	if (!get_str(o, "source", 32, false, &source) || (src = hook_source_from_string(source)) < 0) {
		*why = "a route's source is missing or unknown";
		return false;
	}
	r->source = (enum hook_source)src;
	if (!json_is_array(secrets) || json_array_size(secrets) < 1 || json_array_size(secrets) > HOOK_SECRETS_MAX) {
		*why = "a route has no secrets array of 1 or 2";
		return false;
	}
	json_array_foreach(secrets, i, sec) {
		unsigned char *buf;
		size_t len;

		if (!json_is_string(sec) || json_string_length(sec) > B64_LEN(HOOK_SECRET_MAX) ||
		    base64_decode(json_string_value(sec), json_string_length(sec), &buf, &len) < 0) {
			*why = "a route's secret is not base64";
			return false;
		}
		s->secret_bufs[s->n_secret_bufs++] = buf;	/* freed (wiped) with the set, even on failure */
		if (len < HOOK_SECRET_MIN || len > HOOK_SECRET_MAX) {
			wipe(buf, len);
			*why = "a route's secret is out of bounds (16 to 512 bytes)";
			return false;
		}
		r->secrets[i] = buf;
		r->secret_lens[i] = len;
		r->n_secrets = (int)i + 1;
	}
	if (!get_str(o, "header", 64, true, &r->header) || (r->header && hook_header_check(r->header, why) < 0)) {
		*why = "a route's header is not a header name";
		return false;
	}
	if (!get_str(o, "encoding", 16, true, &encoding) ||
	    (encoding && word_index(encoding_names, 2, encoding) < 0)) {
		*why = "a route's encoding is not hex or base64";
		return false;
	}
	r->encoding = encoding ? (enum hook_encoding)word_index(encoding_names, 2, encoding) : HOOK_HEX;
	if (!get_str(o, "datadog_auth", 16, true, &auth) || (auth && word_index(auth_names, 2, auth) < 0)) {
		*why = "a route's datadog_auth is not header or basic";
		return false;
	}
	r->datadog_auth = auth ? (enum hook_datadog_auth)word_index(auth_names, 2, auth) : HOOK_DATADOG_HEADER;
	if (!get_str(o, "prefix", FIELD_MAX, true, &r->prefix) ||
	    !get_str(o, "delivery_field", FIELD_MAX, true, &r->delivery_field) ||
	    !get_str(o, "public_url", URL_MAX, true, &r->public_url)) {
		*why = "a route's prefix, delivery_field or public_url is not a short printable string";
		return false;
	}
	if (!get_int(o, "max_body", 1, BODY_MAX, &max_body)) {
		*why = "a route's max_body is not 1 to 16 MiB";
		return false;
	}
	r->max_body = (long)max_body;
	return true;
}

static const char *const routes_keys[] = { "t", "limits", "routes", NULL };
static const char *const limits_keys[] = { "max_connections", "max_per_source", "request_timeout", "header_max", NULL };

int hook_msg_routes_parse(const json_t *msg, struct hook_route_set **ret, const char **why)
{
	json_t *limits, *routes, *o;
	struct hook_route_set *s;
	long long v[4];
	size_t i;

	if (!msg_is(msg, "routes", routes_keys, why))
		return -EBADMSG;
	limits = json_object_get(msg, "limits");
	routes = json_object_get(msg, "routes");
	/* The ranges of the hooks_* keys in model/config.c. */
	if (!json_is_object(limits) || !only_keys(limits, limits_keys) ||
	    !get_int(limits, "max_connections", 1, 65536, &v[0]) || !get_int(limits, "max_per_source", 1, 65536, &v[1]) ||
	    !get_int(limits, "request_timeout", 1, 600, &v[2]) || !get_int(limits, "header_max", 4096, 1 << 20, &v[3])) {
		*why = "the limits are missing, unknown or out of bounds";
		return -EBADMSG;
	}
	if (!json_is_array(routes) || json_array_size(routes) > HOOK_PROTO_ROUTES_MAX) {
		*why = "routes is not an array of at most 4096";
		return -EBADMSG;
	}
	s = xcalloc(1, sizeof(*s));
	s->limits = (struct hook_limits){ (long)v[0], (long)v[1], (long)v[2], (long)v[3] };
	/* Our own copy: the strings of the routes point into it, and its secrets are wiped with it. */
	s->backing = json_deep_copy(msg);
	if (!s->backing) {
		free(s);
		*why = "out of memory";
		return -ENOMEM;
	}
	routes = json_object_get(s->backing, "routes");
	s->routes = xcalloc(json_array_size(routes) + 1, sizeof(*s->routes));
	s->secret_bufs = xcalloc(json_array_size(routes) * HOOK_SECRETS_MAX + 1, sizeof(*s->secret_bufs));
	json_array_foreach(routes, i, o) {
		s->n = i + 1;		/* counted before parsing: a failure still frees what it decoded */
		if (!route_parse(o, &s->routes[i], s, why)) {
			hook_route_set_free(s);
			return -EBADMSG;
		}
		for (size_t k = 0; k < i; k++)
			if (strcmp(s->routes[k].name, s->routes[i].name) == 0) {
				hook_route_set_free(s);
				*why = "two routes have the same name";
				return -EBADMSG;
			}
		s->routes[i].macs = hook_mac_cache_new();	/* keyed at its first check */
	}
	*ret = s;
	return 0;
}

/* ---- hello ---- */

json_t *hook_msg_hello(long pid)
{
	return json_pack("{s:s, s:I}", "t", "hello", "pid", (json_int_t)pid);
}

static const char *const hello_keys[] = { "t", "pid", NULL };

int hook_msg_hello_parse(const json_t *msg, long *pid, const char **why)
{
	long long v;

	if (!msg_is(msg, "hello", hello_keys, why))
		return -EBADMSG;
	if (!get_int(msg, "pid", 1, INT_MAX, &v)) {
		*why = "hello's pid is missing or out of bounds";
		return -EBADMSG;
	}
	*pid = (long)v;
	return 0;
}

/* ---- the binary messages: delivery and answer ---- */

enum {
	D_NO_RUN = 1, D_EVENT = 2, D_REPLY_BODY = 4, D_REPLY_TYPE = 8,	/* a delivery's flags */
	A_BODY = 1, A_CTYPE = 2,					/* an answer's */
};
#define DELIVERY_FIXED (1 + 1 + 8 + 8)	/* kind, flags, seq, received_at */
#define ANSWER_FIXED (1 + 1 + 8 + 2)	/* kind, flags, seq, status */

static uint64_t get_be64(const unsigned char *p)
{
	return (uint64_t)get_be32(p) << 32 | get_be32(p + 4);
}

static void put_be64(unsigned char *p, uint64_t v)
{
	put_be32(p, (uint32_t)(v >> 32));
	put_be32(p + 4, (uint32_t)v);
}

/* Headers a delivery never carries, whatever the listener says: credentials. */
static bool header_secret(const char *name)
{
	return strcasecmp(name, "Authorization") == 0 || strcasecmp(name, "Proxy-Authorization") == 0 ||
	       strcasecmp(name, "Cookie") == 0;
}

/* -- writing: into a buffer sized beforehand, so no bounds to check while writing -- */

/* Bytes of an s16 (wide false) or s32 field for s; 0 when s does not fit it. */
static size_t str_size(const char *s, bool wide, size_t *n)
{
	*n = strlen(s);
	if (*n > (wide ? (size_t)UINT32_MAX : (size_t)UINT16_MAX))
		return 0;
	return (wide ? 4 : 2) + *n;
}

static unsigned char *put_str(unsigned char *p, const char *s, bool wide)
{
	size_t n = strlen(s);

	if (wide) {
		put_be32(p, (uint32_t)n);
		p += 4;
	} else {
		p[0] = (unsigned char)(n >> 8);
		p[1] = (unsigned char)n;
		p += 2;
	}
	memcpy(p, s, n);
	return p + n;
}

/* A frame's head and kind byte in a new buffer of part_len + tail_len bytes after the head; NULL when out of memory. */
static unsigned char *frame_new(size_t part_len, size_t tail_len, int kind)
{
	unsigned char *out = malloc(HOOK_FRAME_HEAD + part_len + tail_len);

	if (!out)
		return NULL;
	put_be32(out, (uint32_t)(part_len + tail_len));
	put_be32(out + 4, (uint32_t)part_len);
	out[HOOK_FRAME_HEAD] = (unsigned char)kind;
	return out;
}

int hook_delivery_encode(const struct hook_delivery *d, unsigned char **ret, size_t *len)
{
	const char *strs[3] = { d->route, d->delivery_id, d->event_type };
	size_t part = DELIVERY_FIXED + 2, n, sz;
	unsigned char *out, *p;
	int flags = (d->no_run ? D_NO_RUN : 0) | (d->event_type ? D_EVENT : 0) | (d->reply_body ? D_REPLY_BODY : 0) |
		    (d->reply_type ? D_REPLY_TYPE : 0);

	if (!d->route || !d->delivery_id || d->n_headers > HOOK_PROTO_HEADERS_MAX || (d->n_headers && !d->headers) ||
	    (d->body_len && !d->body) || d->received_at < 0)
		return -EINVAL;
	for (size_t i = 0; i < 3; i++) {
		if (strs[i] && !(sz = str_size(strs[i], false, &n)))
			return -EINVAL;
		part += strs[i] ? sz : 0;
	}
	for (size_t i = 0; i < d->n_headers; i++) {
		if (!(sz = str_size(d->headers[i].name, false, &n)))
			return -EINVAL;
		part += sz;
		if (!(sz = str_size(d->headers[i].value, false, &n)))
			return -EINVAL;
		part += sz;
	}
	if (d->reply_body) {
		if (!(sz = str_size(d->reply_body, true, &n)))
			return -EINVAL;
		part += sz;
	}
	if (d->reply_type) {
		if (!(sz = str_size(d->reply_type, false, &n)))
			return -EINVAL;
		part += sz;
	}
	if (part > HOOK_FRAME_MAX || d->body_len > HOOK_FRAME_MAX - part)
		return -EMSGSIZE;
	if (!(out = frame_new(part, d->body_len, HOOK_KIND_DELIVERY)))
		return -ENOMEM;
	p = out + HOOK_FRAME_HEAD + 1;
	*p++ = (unsigned char)flags;
	put_be64(p, d->seq);
	put_be64(p + 8, (uint64_t)d->received_at);
	p += 16;
	p = put_str(p, d->route, false);
	p = put_str(p, d->delivery_id, false);
	if (d->event_type)
		p = put_str(p, d->event_type, false);
	*p++ = (unsigned char)(d->n_headers >> 8);
	*p++ = (unsigned char)d->n_headers;
	for (size_t i = 0; i < d->n_headers; i++) {
		p = put_str(p, d->headers[i].name, false);
		p = put_str(p, d->headers[i].value, false);
	}
	if (d->reply_body)
		p = put_str(p, d->reply_body, true);
	if (d->reply_type)
		p = put_str(p, d->reply_type, false);
	if (d->body_len)
		memcpy(p, d->body, d->body_len);
	*ret = out;
	*len = HOOK_FRAME_HEAD + part + d->body_len;
	return 0;
}

int hook_answer_encode(const struct hook_answer *a, unsigned char **ret, size_t *len)
{
	size_t part = ANSWER_FIXED, n, sz;
	unsigned char *out, *p;

	if (a->status < 0 || a->status > UINT16_MAX)
		return -EINVAL;
	if (a->body) {
		if (!(sz = str_size(a->body, true, &n)))
			return -EINVAL;
		part += sz;
	}
	if (a->content_type) {
		if (!(sz = str_size(a->content_type, false, &n)))
			return -EINVAL;
		part += sz;
	}
	if (part > HOOK_FRAME_MAX)
		return -EMSGSIZE;
	if (!(out = frame_new(part, 0, HOOK_KIND_ANSWER)))
		return -ENOMEM;
	p = out + HOOK_FRAME_HEAD + 1;
	*p++ = (unsigned char)((a->body ? A_BODY : 0) | (a->content_type ? A_CTYPE : 0));
	put_be64(p, a->seq);
	p[8] = (unsigned char)(a->status >> 8);
	p[9] = (unsigned char)a->status;
	p += 10;
	if (a->body)
		p = put_str(p, a->body, true);
	if (a->content_type)
		p = put_str(p, a->content_type, false);
	*ret = out;
	*len = HOOK_FRAME_HEAD + part;
	return 0;
}

/* -- reading: a cursor over the message part; every read checks what is left -- */

struct reader {
	const unsigned char *p, *end;
};

/* A string's bytes, in the frame (not NUL-ended). */
struct slice {
	const unsigned char *p;
	size_t n;
};

static bool rd_bytes(struct reader *r, size_t n, const unsigned char **out)
{
	if ((size_t)(r->end - r->p) < n)
		return false;
	*out = r->p;
	r->p += n;
	return true;
}

static bool rd_u16(struct reader *r, uint16_t *v)
{
	const unsigned char *b;

	if (!rd_bytes(r, 2, &b))
		return false;
	*v = (uint16_t)(b[0] << 8 | b[1]);
	return true;
}

static bool rd_u64(struct reader *r, uint64_t *v)
{
	const unsigned char *b;

	if (!rd_bytes(r, 8, &b))
		return false;
	*v = get_be64(b);
	return true;
}

/* An s16 (wide false) or s32 string of min..max bytes, none of them NUL. */
static bool rd_str(struct reader *r, bool wide, size_t min, size_t max, struct slice *s)
{
	const unsigned char *b;
	size_t n;

	if (!rd_bytes(r, wide ? 4 : 2, &b))
		return false;
	n = wide ? get_be32(b) : (size_t)(b[0] << 8 | b[1]);
	if (n < min || n > max || !rd_bytes(r, n, &s->p))
		return false;
	s->n = n;
	return memchr(s->p, '\0', n) == NULL;
}

/* The message part of a whole frame of kind: a reader over it and the frame's tail, or -EBADMSG. */
static int rd_start(const unsigned char *frame, size_t len, int kind, struct reader *r, struct slice *tail,
		    const char **why)
{
	int k = hook_frame_kind(frame, len, why);
	size_t part_len;

	if (k < 0)
		return k;
	if (k != kind) {
		*why = "a frame of another kind than expected";
		return -EBADMSG;
	}
	part_len = get_be32(frame + 4);
	r->p = frame + HOOK_FRAME_HEAD + 1;
	r->end = frame + HOOK_FRAME_HEAD + part_len;
	tail->p = r->end;
	tail->n = len - HOOK_FRAME_HEAD - part_len;
	return 0;
}

/* A copy of s, NUL-ended, at *at (advanced past it). */
static const char *put_copy(char **at, const struct slice *s)
{
	char *out = *at;

	memcpy(out, s->p, s->n);
	out[s->n] = '\0';
	*at += s->n + 1;
	return out;
}

/* The delivery's fields as the frame has them, checked for shape only (lengths, flags, what is left). */
struct delivery_view {
	int flags;
	uint64_t seq, at;
	struct slice route, id, event, reply_body, reply_type, body;
	struct slice names[HOOK_PROTO_HEADERS_MAX], values[HOOK_PROTO_HEADERS_MAX];
	size_t n_headers;
};

static bool delivery_view(struct reader *r, struct delivery_view *v, const char **why)
{
	const unsigned char *b;
	uint16_t count;

	if (!rd_bytes(r, 1, &b) || !rd_u64(r, &v->seq) || !rd_u64(r, &v->at)) {
		*why = "a delivery cut short in its fixed fields";
		return false;
	}
	v->flags = b[0];
	v->event = v->reply_body = v->reply_type = (struct slice){ 0 };	/* absent unless flagged */
	if (v->flags & ~(D_NO_RUN | D_EVENT | D_REPLY_BODY | D_REPLY_TYPE)) {
		*why = "a delivery with an unknown flag";
		return false;
	}
	if (v->at > (uint64_t)COUNT_MAX) {
		*why = "a delivery's received_at is out of bounds";
		return false;
	}
	if (!rd_str(r, false, 1, HOOK_ROUTE_NAME_MAX, &v->route) || !rd_str(r, false, 1, HV_ID_MAX, &v->id) ||
	    ((v->flags & D_EVENT) && !rd_str(r, false, 1, HV_ID_MAX, &v->event))) {
		*why = "a delivery's route, id or event is cut short, empty, too long or has a NUL";
		return false;
	}
	if (!rd_u16(r, &count) || count > HOOK_PROTO_HEADERS_MAX) {
		*why = "a delivery's header count is missing or over 64";
		return false;
	}
	v->n_headers = count;
	for (size_t i = 0; i < count; i++)
		if (!rd_str(r, false, 1, 64, &v->names[i]) || !rd_str(r, false, 0, HEADER_VALUE_MAX, &v->values[i])) {
			*why = "a delivery's header is cut short, too long or has a NUL";
			return false;
		}
	if (((v->flags & D_REPLY_BODY) && !rd_str(r, true, 0, ANSWER_BODY_MAX, &v->reply_body)) ||
	    ((v->flags & D_REPLY_TYPE) && !rd_str(r, false, 1, CTYPE_MAX, &v->reply_type))) {
		*why = "a delivery's reply_body (64 KiB) or reply_type (128 bytes) is cut short, too long or has a NUL";
		return false;
	}
	if (r->p != r->end) {
		*why = "a delivery has bytes after its last field";
		return false;
	}
	if (v->body.n > BODY_MAX) {
		*why = "a delivery's body is over 16 MiB";
		return false;
	}
	return true;
}

/* The values of a decoded delivery (its strings NUL-ended now): false and *why if one is out of bounds. */
static bool delivery_values_ok(const struct hook_delivery *d, const char **why)
{
	const char *name_why;

	if (hook_route_name_check(d->route, &name_why) < 0) {
		*why = "a delivery's route is not a route name";
		return false;
	}
	if (!hv_id_ok(d->delivery_id) || (d->event_type && !hv_id_ok(d->event_type))) {
		*why = "a delivery's id or event is not printable ASCII without spaces";
		return false;
	}
	for (size_t i = 0; i < d->n_headers; i++) {
		const struct hook_header *h = &d->headers[i];

		if (hook_header_check(h->name, &name_why) < 0 || header_secret(h->name) ||
		    !printable(h->value, strlen(h->value), true)) {
			*why = "a delivery's header is not a token name with a printable value, or is a credential";
			return false;
		}
		for (size_t k = 0; k < i; k++)
			if (strcasecmp(d->headers[k].name, h->name) == 0) {
				*why = "a delivery has a header name twice";
				return false;
			}
	}
	if (d->reply_type && !printable(d->reply_type, strlen(d->reply_type), false)) {
		*why = "a delivery's reply_type is not printable";
		return false;
	}
	return true;
}

int hook_delivery_decode(const unsigned char *frame, size_t len, struct hook_delivery *d, const char **why)
{
	struct delivery_view v;
	struct reader rd;
	struct hook_header *headers;
	size_t size;
	char *at;
	int r;

	if ((r = rd_start(frame, len, HOOK_KIND_DELIVERY, &rd, &v.body, why)) < 0)
		return r;
	if (!delivery_view(&rd, &v, why))
		return -EBADMSG;
	/*
	 * One allocation for all of it: the header array, then the strings
	 * NUL-ended, then the body (and a NUL, so it is never NULL, even empty).
	 */
	size = v.n_headers * sizeof(*headers) + v.route.n + 1 + v.id.n + 1 + v.event.n + 1 + v.reply_body.n + 1 +
	       v.reply_type.n + 1 + v.body.n + 1;
	for (size_t i = 0; i < v.n_headers; i++)
		size += v.names[i].n + 1 + v.values[i].n + 1;
	headers = xmalloc(size);
	at = (char *)(headers + v.n_headers);
	*d = (struct hook_delivery){
		.seq = v.seq,
		.no_run = v.flags & D_NO_RUN,
		.received_at = (int64_t)v.at,
		.headers = headers,
		.n_headers = v.n_headers,
		.block = headers,
	};
	d->route = put_copy(&at, &v.route);
	d->delivery_id = put_copy(&at, &v.id);
	d->event_type = v.flags & D_EVENT ? put_copy(&at, &v.event) : NULL;
	for (size_t i = 0; i < v.n_headers; i++) {
		headers[i].name = put_copy(&at, &v.names[i]);
		headers[i].value = put_copy(&at, &v.values[i]);
	}
	d->reply_body = v.flags & D_REPLY_BODY ? put_copy(&at, &v.reply_body) : NULL;
	d->reply_type = v.flags & D_REPLY_TYPE ? put_copy(&at, &v.reply_type) : NULL;
	d->body = (const unsigned char *)put_copy(&at, &v.body);
	d->body_len = v.body.n;
	if (!delivery_values_ok(d, why)) {
		hook_delivery_clear(d);
		return -EBADMSG;
	}
	return 0;
}

void hook_delivery_clear(struct hook_delivery *d)
{
	free(d->block);
	*d = (struct hook_delivery){ 0 };
}

int hook_answer_decode(const unsigned char *frame, size_t len, struct hook_answer *a, const char **why)
{
	struct reader r;
	struct slice tail, body = { 0 }, ctype = { 0 };
	const unsigned char *b;
	uint64_t seq;
	uint16_t status;
	int rc;

	if ((rc = rd_start(frame, len, HOOK_KIND_ANSWER, &r, &tail, why)) < 0)
		return rc;
	if (tail.n) {
		*why = "an answer has bytes after its message";
		return -EBADMSG;
	}
	if (!rd_bytes(&r, 1, &b) || !rd_u64(&r, &seq) || !rd_u16(&r, &status)) {
		*why = "an answer cut short in its fixed fields";
		return -EBADMSG;
	}
	if (b[0] & ~(A_BODY | A_CTYPE)) {
		*why = "an answer with an unknown flag";
		return -EBADMSG;
	}
	if (status < 200 || status > 599) {
		*why = "an answer's status is not 200 to 599";
		return -EBADMSG;
	}
	/* A body is any bytes but NUL, up to 64 KiB; it goes out as is. */
	if ((b[0] & A_BODY) && !rd_str(&r, true, 0, ANSWER_BODY_MAX, &body)) {
		*why = "an answer's body is cut short, over 64 KiB or has a NUL";
		return -EBADMSG;
	}
	if ((b[0] & A_CTYPE) && (!rd_str(&r, false, 1, CTYPE_MAX, &ctype) ||
				 !printable((const char *)ctype.p, ctype.n, false))) {
		*why = "an answer's content_type is cut short, over 128 bytes or not printable";
		return -EBADMSG;
	}
	if (r.p != r.end) {
		*why = "an answer has bytes after its last field";
		return -EBADMSG;
	}
	*a = (struct hook_answer){
		.seq = seq,
		.status = status,
		.body = b[0] & A_BODY ? xstrndup((const char *)body.p, body.n) : NULL,
		.content_type = b[0] & A_CTYPE ? xstrndup((const char *)ctype.p, ctype.n) : NULL,
	};
	return 0;
}

void hook_answer_clear(struct hook_answer *a)
{
	free(a->body);
	free(a->content_type);
	*a = (struct hook_answer){ 0 };
}

/*
 * The headers as one JSON object's text, through jansson (json_dumps of the
 * decoded list, once per delivery): a hand-made writer was measured at ~18k
 * instructions less per delivery, not worth a second JSON encoder.
 */
char *hook_headers_json(const struct hook_header *h, size_t n)
{
	json_t *o = json_object();
	char *text;

	if (!o)
		return NULL;
	for (size_t i = 0; i < n; i++)
		if (json_object_set_new(o, h[i].name, json_string(h[i].value)) < 0) {
			json_decref(o);
			return NULL;
		}
	text = json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII);
	json_decref(o);
	return text;
}

/* ---- stats ---- */

/* counts[0..n) as a JSON array, or NULL (out of memory). */
static json_t *count_array(const int64_t *counts, size_t n)
{
	json_t *a = json_array();

	if (!a)
		return NULL;
	for (size_t i = 0; i < n; i++)
		if (json_array_append_new(a, json_integer((json_int_t)counts[i])) < 0) {
			json_decref(a);
			return NULL;
		}
	return a;
}

/* An array of exactly n counts from 0 to COUNT_MAX into out; false if it is not one. */
static bool count_array_parse(const json_t *a, int64_t *out, size_t n)
{
	json_t *v;
	size_t i;

	if (!json_is_array(a) || json_array_size(a) != n)
		return false;
	json_array_foreach(a, i, v) {
		if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > COUNT_MAX)
			return false;
		out[i] = json_integer_value(v);
	}
	return true;
}

json_t *hook_msg_stats(const struct hook_stats *s)
{
	json_t *refused = count_array(s->refused, ARRAY_SIZE(s->refused));
	json_t *sig = count_array(s->sig_failed, ARRAY_SIZE(s->sig_failed));

	if (!refused || !sig) {
		json_decref(refused);
		json_decref(sig);
		return NULL;
	}
	return json_pack("{s:s, s:I, s:o, s:I, s:I, s:o}", "t", "stats", "accepted", (json_int_t)s->accepted,
			 "refused", refused, "connections", (json_int_t)s->connections,
			 "dropped", (json_int_t)s->dropped, "sig_failed", sig);
}

static const char *const stats_keys[] = { "t", "accepted", "refused", "connections", "dropped", "sig_failed", NULL };

int hook_msg_stats_parse(const json_t *msg, struct hook_stats *s, const char **why)
{
	json_t *refused, *v;
	struct hook_stats out = { 0 };
	long long x;
	size_t i;

	if (!msg_is(msg, "stats", stats_keys, why))
		return -EBADMSG;
	refused = json_object_get(msg, "refused");
	if (!json_is_array(refused) || json_array_size(refused) != ARRAY_SIZE(out.refused)) {
		*why = "stats' refused is not an array of 6 counts";
		return -EBADMSG;
	}
	json_array_foreach(refused, i, v) {
		if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > COUNT_MAX) {
			*why = "stats' refused counts are out of bounds";
			return -EBADMSG;
		}
		out.refused[i] = json_integer_value(v);
	}
	if (!get_int(msg, "accepted", 0, COUNT_MAX, &x)) {
		*why = "stats' accepted is missing or out of bounds";
		return -EBADMSG;
	}
	out.accepted = x;
	if (!get_int(msg, "connections", 0, COUNT_MAX, &x)) {
		*why = "stats' connections is missing or out of bounds";
		return -EBADMSG;
	}
	out.connections = x;
	if (!get_int(msg, "dropped", 0, COUNT_MAX, &x)) {
		*why = "stats' dropped is missing or out of bounds";
		return -EBADMSG;
	}
	out.dropped = x;
	if (!count_array_parse(json_object_get(msg, "sig_failed"), out.sig_failed, ARRAY_SIZE(out.sig_failed))) {
		*why = "stats' sig_failed is not an array of a count per source";
		return -EBADMSG;
	}
	*s = out;
	return 0;
}
