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
 * The wire format of each message (members marked ? are optional):
 *   routes    {"t","limits":{"max_connections","max_per_source","request_timeout","header_max"},
 *              "routes":[{"name","source","secrets":[BASE64,...],"header"?,"encoding"?,"prefix"?,
 *                         "datadog_auth"?,"delivery_field"?,"public_url"?,"max_body"}]}
 *   answer    {"t","seq","status","body"?,"content_type"?}
 *   hello     {"t","pid"}
 *   delivery  {"t","seq","route","id","event"?,"no_run","received_at","headers":{NAME:VALUE},
 *              "body_len","reply_body"?,"reply_type"?} and the body as the frame's tail
 *   stats     {"t","accepted","refused":[6 counts],"connections","dropped"}
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
	uint32_t len, json_len;

	if (avail < HOOK_FRAME_HEAD)
		return 0;
	len = get_be32(buf);
	json_len = get_be32(buf + 4);
	if (len > HOOK_FRAME_MAX || json_len < 2 || json_len > len)
		return -EMSGSIZE;
	return (long)(HOOK_FRAME_HEAD + len);
}

int hook_frame_encode(const json_t *msg, const void *tail, size_t tail_len, unsigned char **ret, size_t *len)
{
	size_t n;
	char *text;
	unsigned char *out;

	if (!json_is_object(msg) || (tail_len && !tail))
		return -EINVAL;
	if (tail_len > HOOK_FRAME_MAX)
		return -EMSGSIZE;
	/*
	 * One pass for the usual message (an answer, a delivery's JSON part):
	 * dumped into room for FRAME_GUESS bytes; json_dumpb says how much it
	 * needed, and only a larger one (a table of routes) is dumped again.
	 */
	out = malloc(HOOK_FRAME_HEAD + FRAME_GUESS + tail_len);
	if (!out)
		return -ENOMEM;
	text = (char *)out + HOOK_FRAME_HEAD;
	n = json_dumpb(msg, text, FRAME_GUESS, JSON_COMPACT | JSON_ENSURE_ASCII);
	if (n == 0 || n > HOOK_FRAME_MAX || tail_len > HOOK_FRAME_MAX - n) {
		explicit_bzero(out, HOOK_FRAME_HEAD + FRAME_GUESS);
		free(out);
		return n == 0 ? -ENOMEM : -EMSGSIZE;
	}
	if (n > FRAME_GUESS) {
		/* Not realloc: what was dumped so far may be a routes message's secrets, wiped before it is freed. */
		explicit_bzero(out, HOOK_FRAME_HEAD + FRAME_GUESS);
		free(out);
		if (!(out = malloc(HOOK_FRAME_HEAD + n + tail_len)))
			return -ENOMEM;
		text = (char *)out + HOOK_FRAME_HEAD;
		if (json_dumpb(msg, text, n, JSON_COMPACT | JSON_ENSURE_ASCII) != n) {
			free(out);
			return -ENOMEM;
		}
	}
	if (tail_len)
		memcpy(out + HOOK_FRAME_HEAD + n, tail, tail_len);
	put_be32(out, (uint32_t)(n + tail_len));
	put_be32(out + 4, (uint32_t)n);
	*ret = out;
	*len = HOOK_FRAME_HEAD + n + tail_len;
	return 0;
}

int hook_frame_decode(const unsigned char *frame, size_t len, json_t **ret, const unsigned char **tail,
		      size_t *tail_len, const char **why)
{
	long need = hook_frame_need(frame, len);
	size_t json_len;
	const char *type;
	json_t *j;

	if (need <= 0 || (size_t)need != len) {
		*why = "frame length out of bounds";
		return -EBADMSG;
	}
	json_len = get_be32(frame + 4);
	/* Depth-checked first, duplicate members refused, NUL in strings refused (jansson's default). */
	j = hv_json_object(frame + HOOK_FRAME_HEAD, json_len);
	if (!j) {
		*why = "frame is not one JSON object";
		return -EBADMSG;
	}
	if (!(type = hook_msg_type(j))) {
		json_decref(j);
		*why = "message has no type";
		return -EBADMSG;
	}
	if (len > HOOK_FRAME_HEAD + json_len && strcmp(type, "delivery") != 0) {
		json_decref(j);
		*why = "only a delivery has bytes after its JSON";
		return -EBADMSG;
	}
	*ret = j;
	*tail = frame + HOOK_FRAME_HEAD + json_len;
	*tail_len = len - HOOK_FRAME_HEAD - json_len;
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

/* ---- answer ---- */

json_t *hook_msg_answer(const struct hook_answer *a)
{
	json_t *msg = json_pack("{s:s, s:I, s:i}", "t", "answer", "seq", (json_int_t)a->seq, "status", a->status);

	if (msg && a->body && json_object_set_new(msg, "body", json_stringn(a->body, strlen(a->body))) < 0)
		goto fail;
	if (msg && a->content_type && json_object_set_new(msg, "content_type", json_string(a->content_type)) < 0)
		goto fail;
	return msg;
fail:
	json_decref(msg);
	return NULL;
}

void hook_answer_clear(struct hook_answer *a)
{
	free(a->body);
	free(a->content_type);
	*a = (struct hook_answer){ 0 };
}

static const char *const answer_keys[] = { "t", "seq", "status", "body", "content_type", NULL };

int hook_msg_answer_parse(const json_t *msg, struct hook_answer *a, const char **why)
{
	json_t *body;
	long long seq, status;
	const char *ctype;

	if (!msg_is(msg, "answer", answer_keys, why))
		return -EBADMSG;
	if (!get_int(msg, "seq", 0, COUNT_MAX, &seq) || !get_int(msg, "status", 200, 599, &status)) {
		*why = "an answer's seq or status is missing or out of bounds";
		return -EBADMSG;
	}
	body = json_object_get(msg, "body");
	/* A body is any UTF-8 text (jansson checked it) without NUL, up to 64 KiB; it goes out as is. */
	if (body && !json_is_null(body) && (!json_is_string(body) || json_string_length(body) > ANSWER_BODY_MAX ||
					    strlen(json_string_value(body)) != json_string_length(body))) {
		*why = "an answer's body is not text of at most 64 KiB";
		return -EBADMSG;
	}
	if (!get_str(msg, "content_type", CTYPE_MAX, true, &ctype)) {
		*why = "an answer's content_type is not a short printable string";
		return -EBADMSG;
	}
	*a = (struct hook_answer){
		.seq = (uint64_t)seq,
		.status = (int)status,
		.body = json_is_string(body) ? xstrdup(json_string_value(body)) : NULL,
		.content_type = ctype ? xstrdup(ctype) : NULL,
	};
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

/* ---- delivery ---- */

/* Headers a delivery never carries, whatever the listener says: credentials. */
static bool header_secret(const char *name)
{
	return strcasecmp(name, "Authorization") == 0 || strcasecmp(name, "Proxy-Authorization") == 0 ||
	       strcasecmp(name, "Cookie") == 0;
}

json_t *hook_msg_delivery(const struct hook_delivery *d)
{
	json_t *headers = json_is_object(d->headers) ? json_incref(d->headers) : json_object();
	json_t *msg;

	msg = json_pack("{s:s, s:I, s:s, s:s, s:b, s:I, s:o, s:I}", "t", "delivery", "seq", (json_int_t)d->seq,
			"route", d->route, "id", d->delivery_id, "no_run", d->no_run,
			"received_at", (json_int_t)d->received_at, "headers", headers,
			"body_len", (json_int_t)d->body_len);
	if (msg && d->event_type && json_object_set_new(msg, "event", json_string(d->event_type)) < 0)
		goto fail;
	if (msg && d->reply_body && json_object_set_new(msg, "reply_body", json_string(d->reply_body)) < 0)
		goto fail;
	if (msg && d->reply_type && json_object_set_new(msg, "reply_type", json_string(d->reply_type)) < 0)
		goto fail;
	return msg;
fail:
	json_decref(msg);
	return NULL;
}

void hook_delivery_clear(struct hook_delivery *d)
{
	free(d->route);
	free(d->delivery_id);
	free(d->event_type);
	json_decref(d->headers);
	free(d->body);
	free(d->reply_body);
	free(d->reply_type);
	*d = (struct hook_delivery){ 0 };
}

/* The headers object: at most HOOK_PROTO_HEADERS_MAX of token -> printable value, no credential, no twice. */
static bool headers_ok(const json_t *h)
{
	const char *name, *why, *names[HOOK_PROTO_HEADERS_MAX];
	size_t n = 0;
	json_t *v;

	if (!json_is_object(h) || json_object_size(h) > HOOK_PROTO_HEADERS_MAX)
		return false;
	json_object_foreach((json_t *)h, name, v) {
		if (hook_header_check(name, &why) < 0 || header_secret(name) || !json_is_string(v) ||
		    json_string_length(v) > HEADER_VALUE_MAX ||
		    !printable(json_string_value(v), json_string_length(v), true))
			return false;
		for (size_t k = 0; k < n; k++)
			if (strcasecmp(names[k], name) == 0)
				return false;
		names[n++] = name;
	}
	return true;
}

static const char *const delivery_keys[] = { "t", "seq", "route", "id", "event", "no_run", "received_at",
					     "headers", "body_len", "reply_body", "reply_type", NULL };

int hook_msg_delivery_parse(const json_t *msg, const unsigned char *body, size_t body_len, struct hook_delivery *d,
			    const char **why)
{
	const char *route, *id, *event, *rtype, *name_why;
	json_t *no_run = json_object_get(msg, "no_run"), *headers = json_object_get(msg, "headers");
	json_t *reply = json_object_get(msg, "reply_body");
	long long seq, at, len;
	unsigned char *copy;

	if (!msg_is(msg, "delivery", delivery_keys, why))
		return -EBADMSG;
	if (!get_int(msg, "seq", 0, COUNT_MAX, &seq) || !get_int(msg, "received_at", 0, COUNT_MAX, &at)) {
		*why = "a delivery's seq or received_at is missing or out of bounds";
		return -EBADMSG;
	}
	if (!get_str(msg, "route", HOOK_ROUTE_NAME_MAX, false, &route) || hook_route_name_check(route, &name_why) < 0) {
		*why = "a delivery's route is missing or invalid";
		return -EBADMSG;
	}
	if (!get_str(msg, "id", HV_ID_MAX, false, &id) || !hv_id_ok(id) ||
	    !get_str(msg, "event", HV_ID_MAX, true, &event) || (event && !hv_id_ok(event))) {
		*why = "a delivery's id or event is missing or invalid";
		return -EBADMSG;
	}
	if (!json_is_boolean(no_run)) {
		*why = "a delivery's no_run is not true or false";
		return -EBADMSG;
	}
	if (!headers_ok(headers)) {
		*why = "a delivery's headers are not at most 64 distinct names with printable values, without credentials";
		return -EBADMSG;
	}
	if (reply && !json_is_null(reply) && (!json_is_string(reply) || json_string_length(reply) > ANSWER_BODY_MAX ||
					      strlen(json_string_value(reply)) != json_string_length(reply))) {
		*why = "a delivery's reply_body is not text of at most 64 KiB";
		return -EBADMSG;
	}
	if (!get_str(msg, "reply_type", CTYPE_MAX, true, &rtype)) {
		*why = "a delivery's reply_type is not a short printable string";
		return -EBADMSG;
	}
	if (!get_int(msg, "body_len", 0, BODY_MAX, &len) || (size_t)len != body_len || (body_len && !body)) {
		*why = "a delivery's body_len is not that of its body, of at most 16 MiB";
		return -EBADMSG;
	}
	copy = xmalloc(body_len + 1);	/* never NULL, even when empty */
	if (body_len)
		memcpy(copy, body, body_len);
	*d = (struct hook_delivery){
		.seq = (uint64_t)seq,
		.route = xstrdup(route),
		.delivery_id = xstrdup(id),
		.event_type = event ? xstrdup(event) : NULL,
		.no_run = json_is_true(no_run),
		.received_at = (int64_t)at,
		.headers = json_incref((json_t *)headers),
		.body = copy,
		.body_len = body_len,
		.reply_body = json_is_string(reply) ? xstrdup(json_string_value(reply)) : NULL,
		.reply_type = rtype ? xstrdup(rtype) : NULL,
	};
	return 0;
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
