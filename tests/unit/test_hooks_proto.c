/*
 * test_hooks_proto: the socketpair protocol between fleetd and its webhook
 * listener (hooks/proto.c). Every message round-trips through a frame;
 * every bound is tried on both sides of its edge; truncated, oversized and
 * malformed frames are refused (the binary delivery and answer are built
 * here byte by byte, independently of the encoder, so hostile ones can be
 * too); and mutated or random frames, fed to every parser, never crash
 * (run it under valgrind to see nothing leaks either). FLEET_PROTO_FUZZ
 * sets the number of fuzz rounds (default 4000).
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/base64.h"
#include "common/util.h"
#include "hooks/proto.h"
#include "hooks/route.h"
#include "tests/tap.h"

static const struct hook_limits limits = { 512, 64, 10, 32768 };

/* A JSON msg -> frame -> msg, through the framing functions as a reader would use them; NULL if refused. */
static json_t *through_frame(const json_t *msg)
{
	unsigned char *buf;
	size_t len;
	json_t *out = NULL;
	const char *why = NULL;

	if (hook_frame_encode(msg, &buf, &len) < 0)
		return NULL;
	if (hook_frame_need(buf, len) == (long)len)
		(void)hook_frame_decode(buf, len, &out, &why);
	free(buf);
	return out;
}

static void put_be(unsigned char *p, uint64_t v, int bytes)
{
	for (int i = 0; i < bytes; i++)
		p[i] = (unsigned char)(v >> (8 * (bytes - 1 - i)));
}

/* A frame's head: the length after it and of its message part. */
static void put_head(unsigned char *p, uint32_t len, uint32_t part_len)
{
	put_be(p, len, 4);
	put_be(p + 4, part_len, 4);
}

/* Decode text (a JSON part) and tail_len bytes of tail as one frame; NULL if refused. */
static json_t *decode_text_tail(const char *text, const char *tail, size_t tail_len)
{
	size_t n = strlen(text);
	unsigned char *buf = xmalloc(HOOK_FRAME_HEAD + n + tail_len);
	json_t *out = NULL;
	const char *why = NULL;

	put_head(buf, (uint32_t)(n + tail_len), (uint32_t)n);
	memcpy(buf + HOOK_FRAME_HEAD, text, n);
	if (tail_len)
		memcpy(buf + HOOK_FRAME_HEAD + n, tail, tail_len);
	if (hook_frame_decode(buf, HOOK_FRAME_HEAD + n + tail_len, &out, &why) < 0)
		out = NULL;
	free(buf);
	return out;
}

static json_t *decode_text(const char *text)
{
	return decode_text_tail(text, NULL, 0);
}

static char *repeat(char c, size_t n)
{
	char *s = xmalloc(n + 1);

	memset(s, c, n);
	s[n] = '\0';
	return s;
}

/* ---- a binary message written by hand: the test's own writer, not the encoder ---- */

struct bw {
	unsigned char *buf;	/* the head's room first */
	size_t len;
};

static void bw_bytes(struct bw *w, const void *p, size_t n)
{
	w->buf = xrealloc(w->buf, w->len + n + 1);
	if (n)
		memcpy(w->buf + w->len, p, n);
	w->len += n;
}

static void bw_int(struct bw *w, uint64_t v, int bytes)
{
	unsigned char b[8];

	put_be(b, v, bytes);
	bw_bytes(w, b, (size_t)bytes);
}

/* A string with its length in width bytes (2 or 4). */
static void bw_str(struct bw *w, const char *s, size_t n, int width)
{
	bw_int(w, n, width);
	bw_bytes(w, s, n);
}

static void bw_start(struct bw *w, int kind, int flags)
{
	*w = (struct bw){ 0 };
	bw_bytes(w, "\0\0\0\0\0\0\0\0", HOOK_FRAME_HEAD);
	bw_int(w, (uint64_t)kind, 1);
	bw_int(w, (uint64_t)flags, 1);
}

/* Close the message part: its head says so; tail_len bytes of tail follow. The frame is w->buf, w->len bytes. */
static void bw_end(struct bw *w, const void *tail, size_t tail_len)
{
	size_t part = w->len - HOOK_FRAME_HEAD;

	bw_bytes(w, tail, tail_len);
	put_head(w->buf, (uint32_t)(w->len - HOOK_FRAME_HEAD), (uint32_t)part);
}

/* Whether the frame decodes as a delivery: 0, or the error (-1000 when a refusal does not say why). */
static int delivery_result(const unsigned char *frame, size_t len)
{
	struct hook_delivery d;
	const char *why = NULL;
	int r = hook_delivery_decode(frame, len, &d, &why);

	if (r == 0)
		hook_delivery_clear(&d);
	else if (!why || !*why)
		r = -1000;
	return r;
}

static int answer_result(const unsigned char *frame, size_t len)
{
	struct hook_answer a;
	const char *why = NULL;
	int r = hook_answer_decode(frame, len, &a, &why);

	if (r == 0)
		hook_answer_clear(&a);
	else if (!why || !*why)
		r = -1000;
	return r;
}

/* Parse msg as routes; returns the error (0 when accepted) and frees what it got. */
static int routes_result(json_t *msg)
{
	struct hook_route_set *s = NULL;
	const char *why = NULL;
	int r = hook_msg_routes_parse(msg, &s, &why);

	if (r == 0)
		hook_route_set_free(s);
	else if (!why)
		r = -1000;	/* a refusal must say why */
	return r;
}

static int stats_result(json_t *msg)
{
	struct hook_stats s;
	const char *why = NULL;
	int r = hook_msg_stats_parse(msg, &s, &why);

	return r < 0 && !why ? -1000 : r;
}

static int hello_result(json_t *msg)
{
	long pid;
	const char *why = NULL;
	int r = hook_msg_hello_parse(msg, &pid, &why);

	return r < 0 && !why ? -1000 : r;
}

static void test_framing(void)
{
	unsigned char head[8] = { 0 };
	json_t *msg = hook_msg_hello(42), *out;
	unsigned char *buf;
	size_t len;
	const char *why = NULL;

	is_int(hook_frame_need(head, 0), 0, "need: no bytes yet");
	is_int(hook_frame_need(head, 7), 0, "need: 7 of the 8 head bytes");
	is_int(hook_frame_need(head, 8), -EMSGSIZE, "need: a length of 0 is refused");
	put_head(head, 1, 0);
	is_int(hook_frame_need(head, 8), -EMSGSIZE, "need: an empty message part is refused");
	put_head(head, 1, 1);
	is_int(hook_frame_need(head, 8), 9, "need: a length of 1 is the smallest");
	put_head(head, 2, 3);
	is_int(hook_frame_need(head, 8), -EMSGSIZE, "need: a message part longer than the frame is refused");
	put_head(head, 100, 2);
	is_int(hook_frame_need(head, 8), 108, "need: a message part and a tail");
	put_head(head, HOOK_FRAME_MAX, 2);
	is_int(hook_frame_need(head, 8), HOOK_FRAME_HEAD + HOOK_FRAME_MAX, "need: HOOK_FRAME_MAX exactly");
	put_head(head, HOOK_FRAME_MAX + 1, 2);
	is_int(hook_frame_need(head, 8), -EMSGSIZE, "need: HOOK_FRAME_MAX + 1 is refused");
	put_head(head, 0xffffffffu, 0xffffffffu);
	is_int(hook_frame_need(head, 8), -EMSGSIZE, "need: 4 GiB is refused");

	ok(hook_frame_encode(msg, &buf, &len) == 0, "encode hello");
	is_int(hook_frame_need(buf, len), (long)len, "need of an encoded frame is its length");
	is_int(hook_frame_kind(buf, len, &why), HOOK_KIND_JSON, "its kind is JSON");
	is_int(hook_frame_need(buf, 2), 0, "need of a truncated head is 0");
	ok(hook_frame_decode(buf, len - 1, &out, &why) == -EBADMSG && why, "a truncated frame is refused");
	ok(hook_frame_kind(buf, len - 1, &why) == -EBADMSG && why, "...and has no kind");
	ok(hook_frame_decode(buf, len + 0, &out, &why) == 0, "the whole frame decodes");
	is_str(hook_msg_type(out), "hello", "its type");
	json_decref(out);
	free(buf);
	out = json_array();
	ok(hook_frame_encode(out, &buf, &len) == -EINVAL, "encode refuses what is not an object");
	json_decref(out);
	json_decref(msg);

	/* Oversized: a message whose JSON is over HOOK_FRAME_MAX is refused by encode. */
	{
		char *big = repeat('a', HOOK_FRAME_MAX);
		json_t *m = json_pack("{s:s, s:s}", "t", "x", "pad", big);

		ok(hook_frame_encode(m, &buf, &len) == -EMSGSIZE, "encode refuses a frame over HOOK_FRAME_MAX");
		json_decref(m);
		free(big);
	}

	ok(!decode_text_tail("{\"t\":\"hello\",\"pid\":1}", "\0\1\2", 3), "decode: a JSON message with a tail is refused");
	{
		unsigned char kinds[] = { 0x00, 0x03, '[', ' ', 0xff };

		for (size_t i = 0; i < sizeof(kinds); i++) {
			unsigned char f[HOOK_FRAME_HEAD + 2] = { 0 };

			put_head(f, 2, 2);
			f[HOOK_FRAME_HEAD] = kinds[i];
			f[HOOK_FRAME_HEAD + 1] = '}';
			why = NULL;
			ok(hook_frame_kind(f, sizeof(f), &why) == -EBADMSG && why,
			   "kind: a message starting with byte 0x%02x is refused", kinds[i]);
		}
	}
	ok(!decode_text("[1,2]"), "decode: an array is refused");
	ok(!decode_text("{\"x\":1}"), "decode: an object without t is refused");
	ok(!decode_text("{\"t\":5}"), "decode: a t that is no string is refused");
	ok(!decode_text("{\"t\":\"hello\",\"t\":\"stats\"}"), "decode: duplicate members are refused");
	ok(!decode_text("{\"t\":\"hello\"} {}"), "decode: trailing data is refused");
	ok(!decode_text("{\"t\":\"hel\\u0000lo\"}"), "decode: NUL inside a string is refused");
	ok(!decode_text("{\"t\":\"\xff\xfe\"}"), "decode: invalid UTF-8 is refused");
	ok(!decode_text("{\"t\":\"hello\",\"pid\":1e999}"), "decode: a number out of range is refused");
	{
		char *deep = xmalloc(20000 + 20);
		size_t n = 0;

		n += (size_t)sprintf(deep, "{\"t\":\"x\",\"a\":");
		for (int i = 0; i < 5000; i++)
			deep[n++] = '[';
		for (int i = 0; i < 5000; i++)
			deep[n++] = ']';
		deep[n++] = '}';
		deep[n] = '\0';
		ok(!decode_text(deep), "decode: nesting 5000 deep is refused");
		free(deep);
	}
	out = decode_text("{\"t\":\"future\",\"x\":1}");
	ok(out != NULL, "decode: an unknown t decodes (the reader decides)");
	is_str(hook_msg_type(out), "future", "...and is named");
	is_int(routes_result(out) + stats_result(out) + hello_result(out), -3 * EBADMSG, "...and every parser refuses it");
	json_decref(out);
	out = decode_text("{\"t\":\"delivery\",\"seq\":1}");
	ok(out && routes_result(out) + stats_result(out) + hello_result(out) == -3 * EBADMSG,
	   "decode: a delivery in JSON (the old format) is no message any parser takes");
	json_decref(out);
}

/* Secrets of n bytes, byte values from seed. */
static unsigned char *secret_bytes(size_t n, int seed)
{
	unsigned char *s = xmalloc(n ? n : 1);

	for (size_t i = 0; i < n; i++)
		s[i] = (unsigned char)(i * 7 + (size_t)seed);
	return s;
}

static void test_routes(void)
{
	unsigned char *s1 = secret_bytes(16, 1), *s2 = secret_bytes(512, 2), *s3 = secret_bytes(40, 3);
	struct hook_route in[4] = {
		{ .name = "gh", .source = HOOK_GITHUB, .secrets = { s1, s2 }, .secret_lens = { 16, 512 }, .n_secrets = 2,
		  .max_body = 1 << 20 },
		{ .name = "h-1_x", .source = HOOK_HMAC, .secrets = { s3 }, .secret_lens = { 40 }, .n_secrets = 1,
		  .header = "X-Sig", .encoding = HOOK_BASE64, .prefix = "sha256=", .max_body = 1 },
		{ .name = "dd", .source = HOOK_DATADOG, .secrets = { s3 }, .secret_lens = { 40 }, .n_secrets = 1,
		  .datadog_auth = HOOK_DATADOG_BASIC, .delivery_field = "id", .max_body = 16 << 20 },
		{ .name = "tw", .source = HOOK_TWILIO, .secrets = { s1 }, .secret_lens = { 16 }, .n_secrets = 1,
		  .public_url = "https://hooks.example.com/base", .max_body = 4096 },
	};
	struct hook_route_set *set = NULL;
	const char *why = NULL;
	json_t *msg = hook_msg_routes(in, 4, &limits), *back = msg ? through_frame(msg) : NULL;

	ok(back != NULL, "routes: builds and survives a frame");
	ok(back && hook_msg_routes_parse(back, &set, &why) == 0, "routes: parses back");
	if (set) {
		is_int(set->n, 4, "routes: 4 of them");
		is_int(set->limits.max_connections, 512, "limits.max_connections");
		is_int(set->limits.max_per_source, 64, "limits.max_per_source");
		is_int(set->limits.request_timeout_s, 10, "limits.request_timeout_s");
		is_int(set->limits.header_max, 32768, "limits.header_max");
		for (size_t i = 0; i < 4 && i < set->n; i++) {
			const struct hook_route *a = &in[i], *b = &set->routes[i];
			bool same = strcmp(a->name, b->name) == 0 && a->source == b->source && a->n_secrets == b->n_secrets &&
				    a->encoding == b->encoding && a->datadog_auth == b->datadog_auth && a->max_body == b->max_body;

			for (int k = 0; same && k < a->n_secrets; k++)
				same = a->secret_lens[k] == b->secret_lens[k] &&
				       memcmp(a->secrets[k], b->secrets[k], a->secret_lens[k]) == 0;
			same = same && !a->header == !b->header && (!a->header || strcmp(a->header, b->header) == 0);
			same = same && !a->prefix == !b->prefix && (!a->prefix || strcmp(a->prefix, b->prefix) == 0);
			same = same && !a->delivery_field == !b->delivery_field &&
			       (!a->delivery_field || strcmp(a->delivery_field, b->delivery_field) == 0);
			same = same && !a->public_url == !b->public_url &&
			       (!a->public_url || strcmp(a->public_url, b->public_url) == 0);
			ok(same, "routes: route %zu (%s) round-trips field by field", i, a->name);
		}
		hook_route_set_free(set);
	}
	json_decref(back);
	json_decref(msg);

	/* An empty table is a table: every route gone. */
	msg = hook_msg_routes(NULL, 0, &limits);
	set = NULL;
	ok(hook_msg_routes_parse(msg, &set, &why) == 0 && set && set->n == 0, "routes: an empty table parses");
	hook_route_set_free(set);
	json_decref(msg);

	free(s1);
	free(s2);
	free(s3);
}

/* A valid routes message with one route, for the bound tests to break one member at a time. */
static json_t *one_route(void)
{
	char *sec = base64_encode("0123456789abcdef", 16);
	json_t *m = json_pack("{s:s, s:{s:i, s:i, s:i, s:i}, s:[{s:s, s:s, s:[s], s:i}]}", "t", "routes", "limits",
			      "max_connections", 512, "max_per_source", 64, "request_timeout", 10, "header_max", 32768,
			      "routes", "name", "r1", "source", "github", "secrets", sec, "max_body", 1024);

	free(sec);
	return m;
}

static json_t *route0(json_t *m)
{
	return json_array_get(json_object_get(m, "routes"), 0);
}

static char *b64_of_len(size_t n)
{
	unsigned char *raw = secret_bytes(n, 9);
	char *s = base64_encode(raw, n);

	free(raw);
	return s;
}

static void test_routes_bounds(void)
{
	json_t *m;
	char *s;

	m = one_route();
	is_int(routes_result(m), 0, "bounds: the base route is valid");
	json_decref(m);

#define LIMIT_CASE(key, val, want, what) do { \
	m = one_route(); \
	json_object_set_new(json_object_get(m, "limits"), key, json_integer(val)); \
	is_int(routes_result(m), want, "bounds: " what); \
	json_decref(m); \
} while (0)
	LIMIT_CASE("max_connections", 0, -EBADMSG, "max_connections 0 refused");
	LIMIT_CASE("max_connections", 1, 0, "max_connections 1 accepted");
	LIMIT_CASE("max_connections", 65536, 0, "max_connections 65536 accepted");
	LIMIT_CASE("max_connections", 65537, -EBADMSG, "max_connections 65537 refused");
	LIMIT_CASE("max_per_source", 0, -EBADMSG, "max_per_source 0 refused");
	LIMIT_CASE("max_per_source", 65537, -EBADMSG, "max_per_source 65537 refused");
	LIMIT_CASE("request_timeout", 0, -EBADMSG, "request_timeout 0 refused");
	LIMIT_CASE("request_timeout", 600, 0, "request_timeout 600 accepted");
	LIMIT_CASE("request_timeout", 601, -EBADMSG, "request_timeout 601 refused");
	LIMIT_CASE("header_max", 4095, -EBADMSG, "header_max 4095 refused");
	LIMIT_CASE("header_max", 4096, 0, "header_max 4096 accepted");
	LIMIT_CASE("header_max", 1 << 20, 0, "header_max 1 MiB accepted");
	LIMIT_CASE("header_max", (1 << 20) + 1, -EBADMSG, "header_max 1 MiB + 1 refused");
	m = one_route();
	json_object_set_new(json_object_get(m, "limits"), "extra", json_integer(1));
	is_int(routes_result(m), -EBADMSG, "bounds: an unknown limit refused");
	json_decref(m);
	m = one_route();
	json_object_del(json_object_get(m, "limits"), "header_max");
	is_int(routes_result(m), -EBADMSG, "bounds: a missing limit refused");
	json_decref(m);
	m = one_route();
	json_object_set_new(json_object_get(m, "limits"), "max_connections", json_real(512.0));
	is_int(routes_result(m), -EBADMSG, "bounds: a real where an integer is due refused");
	json_decref(m);

#define ROUTE_CASE(key, val, want, what) do { \
	m = one_route(); \
	json_object_set_new(route0(m), key, val); \
	is_int(routes_result(m), want, "bounds: " what); \
	json_decref(m); \
} while (0)
	s = repeat('a', HOOK_ROUTE_NAME_MAX);
	ROUTE_CASE("name", json_string(s), 0, "a 48-character name accepted");
	free(s);
	s = repeat('a', HOOK_ROUTE_NAME_MAX + 1);
	ROUTE_CASE("name", json_string(s), -EBADMSG, "a 49-character name refused");
	free(s);
	ROUTE_CASE("name", json_string("Upper"), -EBADMSG, "an upper-case name refused");
	ROUTE_CASE("name", json_string("../x"), -EBADMSG, "a name with a slash refused");
	ROUTE_CASE("name", json_string(""), -EBADMSG, "an empty name refused");
	ROUTE_CASE("name", json_integer(1), -EBADMSG, "a name that is no string refused");
	ROUTE_CASE("source", json_string("gitlab"), -EBADMSG, "an unknown source refused");
	ROUTE_CASE("source", json_string("standard"), 0, "source standard accepted");
	s = b64_of_len(HOOK_SECRET_MIN - 1);
	ROUTE_CASE("secrets", json_pack("[s]", s), -EBADMSG, "a 15-byte secret refused");
	free(s);
	s = b64_of_len(HOOK_SECRET_MAX);
	ROUTE_CASE("secrets", json_pack("[s]", s), 0, "a 512-byte secret accepted");
	free(s);
	s = b64_of_len(HOOK_SECRET_MAX + 1);
	ROUTE_CASE("secrets", json_pack("[s]", s), -EBADMSG, "a 513-byte secret refused");
	free(s);
	s = b64_of_len(20);
	ROUTE_CASE("secrets", json_pack("[s,s]", s, s), 0, "two secrets accepted");
	ROUTE_CASE("secrets", json_pack("[s,s,s]", s, s, s), -EBADMSG, "three secrets refused");
	ROUTE_CASE("secrets", json_pack("[s,s]", s, "!!!!"), -EBADMSG, "a second secret that is no base64 refused");
	free(s);
	ROUTE_CASE("secrets", json_array(), -EBADMSG, "no secret refused");
	ROUTE_CASE("secrets", json_string("MDEyMzQ1Njc4OWFiY2RlZg=="), -EBADMSG, "secrets that are no array refused");
	ROUTE_CASE("secrets", json_pack("[s]", "MDEyMzQ1Njc4OWFiY2RlZg="), -EBADMSG, "a secret with bad padding refused");
	ROUTE_CASE("secrets", json_pack("[i]", 5), -EBADMSG, "a secret that is no string refused");
	ROUTE_CASE("header", json_string("X-Hub-Signature-256"), 0, "a header name accepted");
	ROUTE_CASE("header", json_string("X Sig"), -EBADMSG, "a header with a space refused");
	ROUTE_CASE("header", json_string("X-Sig\r\nEvil: 1"), -EBADMSG, "a header with CRLF refused");
	ROUTE_CASE("header", json_null(), 0, "a null header is no header");
	ROUTE_CASE("encoding", json_string("base64"), 0, "encoding base64 accepted");
	ROUTE_CASE("encoding", json_string("base32"), -EBADMSG, "encoding base32 refused");
	ROUTE_CASE("datadog_auth", json_string("basic"), 0, "datadog_auth basic accepted");
	ROUTE_CASE("datadog_auth", json_string("token"), -EBADMSG, "datadog_auth token refused");
	ROUTE_CASE("prefix", json_string("v1=\x01"), -EBADMSG, "a prefix with a control byte refused");
	s = repeat('p', 129);
	ROUTE_CASE("prefix", json_string(s), -EBADMSG, "a 129-byte prefix refused");
	free(s);
	s = repeat('u', 2049);
	ROUTE_CASE("public_url", json_string(s), -EBADMSG, "a 2049-byte public_url refused");
	free(s);
	ROUTE_CASE("delivery_field", json_string("event_id"), 0, "a delivery_field accepted");
	ROUTE_CASE("max_body", json_integer(0), -EBADMSG, "max_body 0 refused");
	ROUTE_CASE("max_body", json_integer(16 << 20), 0, "max_body 16 MiB accepted");
	ROUTE_CASE("max_body", json_integer((16 << 20) + 1), -EBADMSG, "max_body 16 MiB + 1 refused");
	ROUTE_CASE("max_body", json_string("1024"), -EBADMSG, "max_body as a string refused");
	ROUTE_CASE("secret", json_string("x"), -EBADMSG, "an unknown route member refused");

	m = one_route();
	json_object_del(route0(m), "max_body");
	is_int(routes_result(m), -EBADMSG, "bounds: a route without max_body refused");
	json_decref(m);
	m = one_route();
	json_array_append(json_object_get(m, "routes"), route0(m));
	is_int(routes_result(m), -EBADMSG, "bounds: two routes of one name refused");
	json_decref(m);
	m = one_route();
	json_array_append_new(json_object_get(m, "routes"), json_string("r2"));
	is_int(routes_result(m), -EBADMSG, "bounds: a route that is no object refused");
	json_decref(m);
	m = one_route();
	json_object_set_new(m, "extra", json_true());
	is_int(routes_result(m), -EBADMSG, "bounds: an unknown message member refused");
	json_decref(m);
	m = one_route();
	json_object_set_new(m, "t", json_string("answer"));
	is_int(routes_result(m), -EBADMSG, "bounds: a routes parser refuses another type");
	json_decref(m);

	/* HOOK_PROTO_ROUTES_MAX routes, then one more. */
	m = one_route();
	{
		json_t *arr = json_object_get(m, "routes"), *proto = json_deep_copy(route0(m));
		char name[32];

		json_array_clear(arr);
		for (int i = 0; i < HOOK_PROTO_ROUTES_MAX; i++) {
			json_t *r = json_deep_copy(proto);

			snprintf(name, sizeof(name), "r%d", i);
			json_object_set_new(r, "name", json_string(name));
			json_array_append_new(arr, r);
		}
		is_int(routes_result(m), 0, "bounds: 4096 routes accepted");
		json_object_set_new(proto, "name", json_string("one-more"));
		json_array_append_new(arr, proto);
		is_int(routes_result(m), -EBADMSG, "bounds: 4097 routes refused");
	}
	json_decref(m);
}

/* An answer frame written by hand: seq 3, the status, body and content type when not NULL, extra bytes after. */
static void answer_frame(struct bw *w, int flags, uint64_t status, const char *body, size_t body_len, const char *ctype,
			 size_t ctype_len, const char *extra, size_t extra_len)
{
	bw_start(w, HOOK_KIND_ANSWER, flags);
	bw_int(w, 3, 8);
	bw_int(w, status, 2);
	if (body)
		bw_str(w, body, body_len, 4);
	if (ctype)
		bw_str(w, ctype, ctype_len, 2);
	bw_bytes(w, extra, extra_len);
	bw_end(w, NULL, 0);
}

static void test_answer(void)
{
	struct hook_answer in = { .seq = UINT64_MAX, .status = 202,
				  .body = "{\"status\":\"accepted\",\"delivery\":7,\"runs\":2}",
				  .content_type = "application/json" }, out = { 0 };
	const char *why = NULL;
	unsigned char *buf;
	size_t len;
	struct bw w;
	char *s;

	ok(hook_answer_encode(&in, &buf, &len) == 0, "answer: encodes");
	is_int(hook_frame_need(buf, len), (long)len, "answer: need of its frame is its length");
	is_int(hook_frame_kind(buf, len, &why), HOOK_KIND_ANSWER, "answer: its kind");
	ok(hook_answer_decode(buf, len, &out, &why) == 0, "answer: round trip decodes");
	ok(out.seq == in.seq && out.status == 202, "answer: seq (all 64 bits) and status");
	is_str(out.body, in.body, "answer: body");
	is_str(out.content_type, in.content_type, "answer: content_type");
	hook_answer_clear(&out);
	{
		json_t *j = NULL;

		ok(hook_frame_decode(buf, len, &j, &why) == -EBADMSG && why, "answer: not taken as JSON");
		is_int(delivery_result(buf, len), -EBADMSG, "answer: not taken as a delivery");
	}
	for (size_t cut = HOOK_FRAME_HEAD + 1; cut < len; cut++) {
		/* Truncated with the head saying so: the message part ends early. */
		unsigned char *t = xmalloc(cut);

		memcpy(t, buf, cut);
		put_head(t, (uint32_t)(cut - HOOK_FRAME_HEAD), (uint32_t)(cut - HOOK_FRAME_HEAD));
		if (answer_result(t, cut) != -EBADMSG) {
			ok(false, "answer: cut to %zu bytes refused", cut);
			free(t);
			break;
		}
		free(t);
		if (cut == len - 1)
			ok(true, "answer: cut anywhere (%zu lengths), refused", len - HOOK_FRAME_HEAD - 1);
	}
	free(buf);

	in = (struct hook_answer){ .seq = 0, .status = 503 };
	ok(hook_answer_encode(&in, &buf, &len) == 0 && hook_answer_decode(buf, len, &out, &why) == 0 &&
	   out.status == 503 && !out.body && !out.content_type, "answer: without body or content_type");
	hook_answer_clear(&out);
	free(buf);
	in = (struct hook_answer){ .seq = 1, .status = 200, .body = "caf\xc3\xa9 \xe2\x9c\x93" };
	ok(hook_answer_encode(&in, &buf, &len) == 0 && hook_answer_decode(buf, len, &out, &why) == 0 && out.body &&
	   strcmp(out.body, in.body) == 0, "answer: a UTF-8 body round-trips byte for byte");
	hook_answer_clear(&out);
	free(buf);
	in = (struct hook_answer){ .seq = 1, .status = 200, .body = "" };
	ok(hook_answer_encode(&in, &buf, &len) == 0 && hook_answer_decode(buf, len, &out, &why) == 0 && out.body &&
	   !*out.body, "answer: an empty body stays an empty body, not none");
	hook_answer_clear(&out);
	free(buf);
	in = (struct hook_answer){ .seq = 1, .status = 70000 };
	is_int(hook_answer_encode(&in, &buf, &len), -EINVAL, "answer: encode refuses a status over 16 bits");

#define ANSWER_CASE(flags, status, body, blen, ct, clen, extra, elen, want, what) do { \
	answer_frame(&w, flags, status, body, blen, ct, clen, extra, elen); \
	is_int(answer_result(w.buf, w.len), want, "answer: " what); \
	free(w.buf); \
} while (0)
	ANSWER_CASE(0, 200, NULL, 0, NULL, 0, "", 0, 0, "a bare 200 accepted");
	ANSWER_CASE(0, 199, NULL, 0, NULL, 0, "", 0, -EBADMSG, "status 199 refused");
	ANSWER_CASE(0, 599, NULL, 0, NULL, 0, "", 0, 0, "status 599 accepted");
	ANSWER_CASE(0, 600, NULL, 0, NULL, 0, "", 0, -EBADMSG, "status 600 refused");
	ANSWER_CASE(4, 200, NULL, 0, NULL, 0, "", 0, -EBADMSG, "an unknown flag refused");
	ANSWER_CASE(0x80, 200, NULL, 0, NULL, 0, "", 0, -EBADMSG, "the top flag refused");
	ANSWER_CASE(0, 200, NULL, 0, NULL, 0, "x", 1, -EBADMSG, "a byte after the last field refused");
	ANSWER_CASE(1, 200, NULL, 0, NULL, 0, "", 0, -EBADMSG, "a body flagged but missing refused");
	ANSWER_CASE(1, 200, NULL, 0, NULL, 0, "\0\0\0\5ab", 6, -EBADMSG, "a body length past the frame refused");
	ANSWER_CASE(1, 200, NULL, 0, NULL, 0, "\xff\xff\xff\xff" "ab", 6, -EBADMSG, "a body length of 4 GiB refused");
	ANSWER_CASE(1, 200, "a\0b", 3, NULL, 0, "", 0, -EBADMSG, "a NUL in the body refused");
	ANSWER_CASE(2, 200, NULL, 0, "text/plain\r\nSet-Cookie: x", 24, "", 0, -EBADMSG, "a content_type with CRLF refused");
	ANSWER_CASE(2, 200, NULL, 0, "", 0, "", 0, -EBADMSG, "an empty content_type refused");
	ANSWER_CASE(2, 200, NULL, 0, "text\0plain", 10, "", 0, -EBADMSG, "a NUL in the content_type refused");
	ANSWER_CASE(3, 200, "ok", 2, "text/plain", 10, "", 0, 0, "body and content_type accepted");
	ANSWER_CASE(1, 200, "ok", 2, "text/plain", 10, "", 0, -EBADMSG, "a content_type not flagged is trailing bytes");
	s = repeat('c', 128);
	ANSWER_CASE(2, 200, NULL, 0, s, 128, "", 0, 0, "a 128-byte content_type accepted");
	ANSWER_CASE(2, 200, NULL, 0, s, 129, "", 0, -EBADMSG, "a 129-byte content_type refused");
	free(s);
	s = repeat('b', (64 << 10) + 1);
	ANSWER_CASE(1, 200, s, 64 << 10, NULL, 0, "", 0, 0, "a 64 KiB body accepted");
	ANSWER_CASE(1, 200, s, (64 << 10) + 1, NULL, 0, "", 0, -EBADMSG, "a 64 KiB + 1 body refused");
	free(s);
	answer_frame(&w, 0, 200, NULL, 0, NULL, 0, "", 0);
	bw_bytes(&w, "tail", 4);
	put_head(w.buf, (uint32_t)(w.len - HOOK_FRAME_HEAD), (uint32_t)(w.len - HOOK_FRAME_HEAD - 4));
	is_int(answer_result(w.buf, w.len), -EBADMSG, "answer: a tail refused");
	free(w.buf);
}

static void test_hello(void)
{
	json_t *msg = hook_msg_hello(4194304), *back = through_frame(msg), *m;
	long pid = 0;
	const char *why = NULL;

	ok(back && hook_msg_hello_parse(back, &pid, &why) == 0 && pid == 4194304, "hello: round trip");
	json_decref(back);
	json_decref(msg);
	m = hook_msg_hello(0);
	is_int(hello_result(m), -EBADMSG, "hello: pid 0 refused");
	json_decref(m);
	m = hook_msg_hello(-5);
	is_int(hello_result(m), -EBADMSG, "hello: a negative pid refused");
	json_decref(m);
	m = json_pack("{s:s, s:s}", "t", "hello", "pid", "12");
	is_int(hello_result(m), -EBADMSG, "hello: a pid as a string refused");
	json_decref(m);
	m = json_pack("{s:s, s:i, s:i}", "t", "hello", "pid", 12, "uid", 0);
	is_int(hello_result(m), -EBADMSG, "hello: an unknown member refused");
	json_decref(m);
}

/* A string with its length, NULs allowed: S("a\0b"). */
struct str {
	const char *p;
	size_t n;
};
#define S(lit) ((struct str){ (lit), sizeof(lit) - 1 })
#define STR(s) ((struct str){ (s), strlen(s) })

/* A delivery as the test writes it: every field, right or wrong. */
struct dspec {
	int flags;
	uint64_t seq, at;
	struct str route, id, event, reply_body, reply_type;
	uint64_t count;			/* the header count written; the pairs are names/values[0..n) */
	size_t n;
	struct str names[HOOK_PROTO_HEADERS_MAX + 2], values[HOOK_PROTO_HEADERS_MAX + 2];
	struct str extra;		/* bytes after the last field */
	struct str body;
};

static struct dspec good_spec(void)
{
	return (struct dspec){
		.flags = 2, .seq = 5, .at = 1780000000, .route = S("gh"), .id = S("d-1"), .event = S("push"),
		.count = 2, .n = 2, .names = { S("X-GitHub-Event"), S("User-Agent") },
		.values = { S("push"), S("GitHub-Hookshot/1\tx") }, .body = S("{\"a\":1}"),
	};
}

static void spec_frame(struct bw *w, const struct dspec *d)
{
	bw_start(w, HOOK_KIND_DELIVERY, d->flags);
	bw_int(w, d->seq, 8);
	bw_int(w, d->at, 8);
	bw_str(w, d->route.p, d->route.n, 2);
	bw_str(w, d->id.p, d->id.n, 2);
	if (d->flags & 2)
		bw_str(w, d->event.p, d->event.n, 2);
	bw_int(w, d->count, 2);
	for (size_t i = 0; i < d->n; i++) {
		bw_str(w, d->names[i].p, d->names[i].n, 2);
		bw_str(w, d->values[i].p, d->values[i].n, 2);
	}
	if (d->flags & 4)
		bw_str(w, d->reply_body.p, d->reply_body.n, 4);
	if (d->flags & 8)
		bw_str(w, d->reply_type.p, d->reply_type.n, 2);
	bw_bytes(w, d->extra.p, d->extra.n);
	bw_end(w, d->body.p, d->body.n);
}

static int spec_result(const struct dspec *d)
{
	struct bw w;
	int r;

	spec_frame(&w, d);
	r = delivery_result(w.buf, w.len);
	free(w.buf);
	return r;
}

static void test_delivery(void)
{
	unsigned char body[256];
	struct hook_header hs[2] = { { "X-GitHub-Event", "pull_request" }, { "User-Agent", "GitHub-Hookshot/1\tx" } };
	struct hook_delivery in = {
		.seq = 77, .route = "gh", .delivery_id = "72d3162e-cc78-11e3-81ab-4c9367dc0958",
		.event_type = "pull_request.opened", .no_run = false, .received_at = 1780000000,
		.headers = hs, .n_headers = 2, .body = body, .body_len = sizeof(body),
	}, out = { 0 };
	const char *why = NULL;
	unsigned char *buf;
	size_t len;
	struct dspec d;
	struct bw w;
	char *s;

	for (size_t i = 0; i < sizeof(body); i++)
		body[i] = (unsigned char)i;
	ok(hook_delivery_encode(&in, &buf, &len) == 0, "delivery: encodes");
	is_int(hook_frame_kind(buf, len, &why), HOOK_KIND_DELIVERY, "delivery: its kind");
	ok(hook_delivery_decode(buf, len, &out, &why) == 0, "delivery: round trip decodes");
	ok(len > sizeof(body) && memcmp(buf + len - sizeof(body), body, sizeof(body)) == 0,
	   "delivery: the body is the frame's tail, as is");
	ok(out.seq == 77 && out.received_at == 1780000000 && !out.no_run, "delivery: seq, received_at, no_run");
	is_str(out.route, "gh", "delivery: route");
	is_str(out.delivery_id, in.delivery_id, "delivery: id");
	is_str(out.event_type, in.event_type, "delivery: event type");
	ok(out.body_len == sizeof(body) && memcmp(out.body, body, sizeof(body)) == 0, "delivery: every byte value of the body");
	ok(out.n_headers == 2 && strcmp(out.headers[0].name, "X-GitHub-Event") == 0 &&
	   strcmp(out.headers[1].value, "GitHub-Hookshot/1\tx") == 0, "delivery: headers, in order");
	ok(!out.reply_body && !out.reply_type, "delivery: no reply");
	hook_delivery_clear(&out);
	ok(!out.block && !out.route, "delivery: clear frees the one block and empties it");
	{
		json_t *j = NULL;

		ok(hook_frame_decode(buf, len, &j, &why) == -EBADMSG && why, "delivery: not taken as JSON");
		is_int(answer_result(buf, len), -EBADMSG, "delivery: not taken as an answer");
	}
	{
		/* Truncated anywhere in its message part (the head saying so, the body after it), refused. */
		size_t part = len - HOOK_FRAME_HEAD - sizeof(body), bad = 0;

		for (size_t cut = 1; cut < part; cut++) {
			unsigned char *t = xmalloc(HOOK_FRAME_HEAD + cut + sizeof(body));

			memcpy(t, buf, HOOK_FRAME_HEAD + cut);
			memcpy(t + HOOK_FRAME_HEAD + cut, body, sizeof(body));
			put_head(t, (uint32_t)(cut + sizeof(body)), (uint32_t)cut);
			bad += delivery_result(t, HOOK_FRAME_HEAD + cut + sizeof(body)) != -EBADMSG;
			free(t);
		}
		ok(bad == 0, "delivery: its message part cut at each of %zu lengths, refused", part - 1);
	}
	free(buf);

	in = (struct hook_delivery){ .seq = 0, .route = "sl", .delivery_id = "Ev1", .no_run = true, .received_at = 0,
				     .reply_body = "{\"challenge\":\"abc\"}", .reply_type = "application/json" };
	ok(hook_delivery_encode(&in, &buf, &len) == 0 && hook_delivery_decode(buf, len, &out, &why) == 0,
	   "delivery: a no_run one with a reply round-trips");
	ok(out.no_run && out.body_len == 0 && out.body && !out.event_type, "delivery: no_run, empty body (not NULL), no event");
	ok(out.n_headers == 0, "delivery: no headers");
	is_str(out.reply_body, in.reply_body, "delivery: reply_body");
	is_str(out.reply_type, in.reply_type, "delivery: reply_type");
	hook_delivery_clear(&out);
	free(buf);
	in = (struct hook_delivery){ .route = "sl", .delivery_id = "Ev1", .reply_body = "" };
	ok(hook_delivery_encode(&in, &buf, &len) == 0 && hook_delivery_decode(buf, len, &out, &why) == 0 &&
	   out.reply_body && !*out.reply_body, "delivery: an empty reply_body stays one");
	hook_delivery_clear(&out);
	free(buf);
	{
		struct hook_header many[HOOK_PROTO_HEADERS_MAX + 1];

		for (size_t i = 0; i < HOOK_PROTO_HEADERS_MAX + 1; i++)
			many[i] = (struct hook_header){ "X-A", "v" };
		in = (struct hook_delivery){ .route = "a", .delivery_id = "b", .headers = many,
					     .n_headers = HOOK_PROTO_HEADERS_MAX + 1 };
		is_int(hook_delivery_encode(&in, &buf, &len), -EINVAL, "delivery: encode refuses 65 headers");
		s = repeat('v', 70000);
		many[0].value = s;
		in.n_headers = 1;
		is_int(hook_delivery_encode(&in, &buf, &len), -EINVAL, "delivery: encode refuses a value over 64 KiB");
		free(s);
	}

	d = good_spec();
	is_int(spec_result(&d), 0, "delivery: the test's own frame decodes");
#define DCASE(field, val, want, what) do { \
	d = good_spec(); \
	d.field = val; \
	is_int(spec_result(&d), want, "delivery: " what); \
} while (0)
	DCASE(flags, 0x10, -EBADMSG, "an unknown flag refused");
	DCASE(flags, 0x82, -EBADMSG, "the top flag refused");
	DCASE(flags, 0, 0, "no event flagged: a delivery without one");
	DCASE(at, (1ULL << 53) + 1, -EBADMSG, "a received_at past 2^53 refused");
	DCASE(at, UINT64_MAX, -EBADMSG, "a received_at that would be negative refused");
	DCASE(seq, UINT64_MAX, 0, "any seq accepted");
	DCASE(route, S("No"), -EBADMSG, "an invalid route refused");
	DCASE(route, S(""), -EBADMSG, "an empty route refused");
	DCASE(route, S("g\0h"), -EBADMSG, "a NUL in the route refused");
	DCASE(id, S("a b"), -EBADMSG, "an id with a space refused");
	DCASE(id, S(""), -EBADMSG, "an empty id refused");
	DCASE(id, S("d\0-1"), -EBADMSG, "a NUL in the id refused");
	DCASE(event, S("push\n"), -EBADMSG, "an event with a newline refused");
	DCASE(event, S(""), -EBADMSG, "an empty (flagged) event refused");
	s = repeat('i', 257);
	DCASE(id, ((struct str){ s, 256 }), 0, "a 256-byte id accepted");
	DCASE(event, ((struct str){ s, 256 }), 0, "a 256-byte event accepted");
	DCASE(id, ((struct str){ s, 257 }), -EBADMSG, "a 257-byte id refused");
	DCASE(event, ((struct str){ s, 257 }), -EBADMSG, "a 257-byte event refused");
	free(s);
	DCASE(extra, S("x"), -EBADMSG, "a byte after the last field refused");
	DCASE(extra, S("\0"), -EBADMSG, "a NUL byte after the last field refused");
	DCASE(names[1], S("Authorization"), -EBADMSG, "Authorization refused");
	DCASE(names[1], S("proxy-authorization"), -EBADMSG, "Proxy-Authorization refused");
	DCASE(names[1], S("COOKIE"), -EBADMSG, "Cookie refused, whatever its case");
	DCASE(names[1], S("x-github-event"), -EBADMSG, "a name twice (case aside) refused");
	DCASE(names[1], S("X A"), -EBADMSG, "a name that is no token refused");
	DCASE(names[1], S(""), -EBADMSG, "an empty name refused");
	DCASE(names[1], S("X-A\0B"), -EBADMSG, "a NUL in a name refused");
	DCASE(values[1], S("1\r\n2"), -EBADMSG, "a value with CRLF refused");
	DCASE(values[1], S("a\0b"), -EBADMSG, "a NUL in a value refused");
	DCASE(values[1], S(""), 0, "an empty value accepted");
	s = repeat('v', 8193);
	DCASE(values[1], ((struct str){ s, 8192 }), 0, "an 8192-byte value accepted");
	DCASE(values[1], ((struct str){ s, 8193 }), -EBADMSG, "an 8193-byte value refused");
	free(s);
	s = repeat('n', 65);
	DCASE(names[1], ((struct str){ s, 64 }), 0, "a 64-byte name accepted");
	DCASE(names[1], ((struct str){ s, 65 }), -EBADMSG, "a 65-byte name refused");
	free(s);
	DCASE(count, 3, -EBADMSG, "a header count over the pairs there are refused");
	DCASE(count, 1, -EBADMSG, "a header count under them (the rest trailing) refused");
	DCASE(count, 0xffff, -EBADMSG, "a header count of 65535 refused");
	d = good_spec();
	d.flags |= 4 | 8;
	d.reply_body = S("{\"challenge\":\"abc\"}");
	d.reply_type = S("application/json");
	is_int(spec_result(&d), 0, "delivery: a reply body and type accepted");
	d.reply_body = S("ab\0c");
	is_int(spec_result(&d), -EBADMSG, "delivery: a NUL in the reply_body refused");
	d.reply_body = S("abc");
	d.reply_type = S("a\tb");
	is_int(spec_result(&d), -EBADMSG, "delivery: a reply_type with a tab refused");
	d.reply_type = S("");
	is_int(spec_result(&d), -EBADMSG, "delivery: an empty (flagged) reply_type refused");
	{
		char big[(64 << 10) + 1];

		memset(big, 'r', sizeof(big));
		d = good_spec();
		d.flags |= 4;
		d.reply_body = (struct str){ big, 64 << 10 };
		is_int(spec_result(&d), 0, "delivery: a 64 KiB reply_body accepted");
		d.reply_body = (struct str){ big, sizeof(big) };
		is_int(spec_result(&d), -EBADMSG, "delivery: a 64 KiB + 1 reply_body refused");
	}
	{
		/* HOOK_PROTO_HEADERS_MAX headers, then one more (the count and the pairs agreeing). */
		char names[HOOK_PROTO_HEADERS_MAX + 1][16];

		d = good_spec();
		for (size_t i = 0; i < HOOK_PROTO_HEADERS_MAX + 1; i++) {
			snprintf(names[i], sizeof(names[i]), "X-H%zu", i);
			d.names[i] = STR(names[i]);
			d.values[i] = S("v");
		}
		d.count = d.n = HOOK_PROTO_HEADERS_MAX;
		is_int(spec_result(&d), 0, "delivery: 64 headers accepted");
		d.count = d.n = HOOK_PROTO_HEADERS_MAX + 1;
		is_int(spec_result(&d), -EBADMSG, "delivery: 65 headers refused");
	}
	{
		/* A string's length that runs past the message part, into the body: refused, not read. */
		d = good_spec();
		d.count = 0;
		d.n = 0;
		spec_frame(&w, &d);
		/* The id's length (after kind, flags, seq, received_at, the route's 2 + 2 bytes) made 0xffff. */
		w.buf[HOOK_FRAME_HEAD + 18 + 4] = 0xff;
		w.buf[HOOK_FRAME_HEAD + 18 + 5] = 0xff;
		is_int(delivery_result(w.buf, w.len), -EBADMSG, "delivery: an id length of 65535 (past its part) refused");
		free(w.buf);
	}

	/* The body's bound: 16 MiB exactly, then one byte more. */
	{
		unsigned char *big = xcalloc(1, (16u << 20) + 1);

		in = (struct hook_delivery){ .seq = 1, .route = "big", .delivery_id = "d1", .received_at = 1,
					     .body = big, .body_len = 16u << 20 };
		ok(hook_delivery_encode(&in, &buf, &len) == 0, "delivery: a 16 MiB body fits a frame");
		is_int(delivery_result(buf, len), 0, "delivery: a 16 MiB body accepted");
		free(buf);
		in.body_len++;
		ok(hook_delivery_encode(&in, &buf, &len) == 0, "delivery: a 16 MiB + 1 body still fits a frame");
		is_int(delivery_result(buf, len), -EBADMSG, "delivery: a 16 MiB + 1 body refused");
		free(buf);
		in.body_len = HOOK_FRAME_MAX;
		is_int(hook_delivery_encode(&in, &buf, &len), -EMSGSIZE, "delivery: encode refuses a frame over HOOK_FRAME_MAX");
		free(big);
	}
}

/* hook_headers_json: one JSON object of the headers, escaped, readable back as the same object. */
static void test_headers_json(void)
{
	struct hook_header h[] = { { "X-GitHub-Event", "push" }, { "X-Q", "say \"hi\" \\ back\tthere" },
				   { "User-Agent", "" }, { "A!#$%&'*+-.^_`|~z", " ~/<>" } };
	json_t *o = json_object(), *back;
	char *mine, *theirs;

	for (size_t i = 0; i < ARRAY_SIZE(h); i++)
		json_object_set_new(o, h[i].name, json_string(h[i].value));
	theirs = json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII);
	mine = hook_headers_json(h, ARRAY_SIZE(h));
	is_str(mine, theirs, "headers json: the same text as jansson's, quotes, backslashes and tabs escaped");
	back = mine ? json_loads(mine, 0, NULL) : NULL;
	ok(back && json_equal(back, o), "headers json: jansson reads it back as the same object");
	json_decref(back);
	free(mine);
	free(theirs);
	json_decref(o);
	mine = hook_headers_json(NULL, 0);
	is_str(mine, "{}", "headers json: none is {}");
	free(mine);
	{
		/* Not what a delivery carries (a UTF-8 value, a name that is no token): still JSON. */
		struct hook_header odd[] = { { "X A", "caf\xc3\xa9" } };

		mine = hook_headers_json(odd, 1);
		is_str(mine, "{\"X A\":\"caf\\u00E9\"}", "headers json: a UTF-8 value escaped");
		free(mine);
	}
}

static void test_stats(void)
{
	struct hook_stats in = { .accepted = 5, .refused = { 1, 2, 3, 4, 5, 6 }, .connections = 7, .dropped = 8,
				 .sig_failed = { 9, 10, 11, 12, 13, 14 } }, out;
	const char *why = NULL;
	json_t *msg = hook_msg_stats(&in), *back = through_frame(msg), *m;

	ok(back && hook_msg_stats_parse(back, &out, &why) == 0 && memcmp(&in, &out, sizeof(in)) == 0,
	   "stats: round trip, every counter");
	json_decref(back);
	json_decref(msg);
	m = json_pack("{s:s, s:i, s:[i,i,i,i,i], s:i, s:i}", "t", "stats", "accepted", 1, "refused", 1, 2, 3, 4, 5,
		      "connections", 0, "dropped", 0);
	is_int(stats_result(m), -EBADMSG, "stats: 5 refusal counts refused");
	json_decref(m);
	m = json_pack("{s:s, s:i, s:[i,i,i,i,i,i], s:i, s:i}", "t", "stats", "accepted", 1, "refused", 1, 2, 3, 4, 5, -1,
		      "connections", 0, "dropped", 0);
	is_int(stats_result(m), -EBADMSG, "stats: a negative count refused");
	json_decref(m);
	m = json_pack("{s:s, s:i, s:[i,i,i,i,i,i], s:i}", "t", "stats", "accepted", 1, "refused", 1, 2, 3, 4, 5, 6,
		      "connections", 0);
	is_int(stats_result(m), -EBADMSG, "stats: without dropped refused");
	json_decref(m);
	m = json_pack("{s:s, s:I, s:[i,i,i,i,i,i], s:i, s:i, s:[i,i,i,i,i,i]}", "t", "stats", "accepted",
		      (json_int_t)(1LL << 53), "refused", 1, 2, 3, 4, 5, 6, "connections", 0, "dropped", 0,
		      "sig_failed", 1, 0, 0, 0, 0, 0);
	is_int(stats_result(m), 0, "stats: 2^53 accepted");
	json_decref(m);
	/* Signature failures: one count per source (HOOK_SOURCE__COUNT), no more, no fewer. */
	m = json_pack("{s:s, s:i, s:[i,i,i,i,i,i], s:i, s:i, s:[i,i,i,i,i]}", "t", "stats", "accepted", 1,
		      "refused", 1, 2, 3, 4, 5, 6, "connections", 0, "dropped", 0, "sig_failed", 1, 0, 0, 0, 0);
	is_int(stats_result(m), -EBADMSG, "stats: 5 signature failure counts refused");
	json_decref(m);
	m = json_pack("{s:s, s:i, s:[i,i,i,i,i,i], s:i, s:i}", "t", "stats", "accepted", 1, "refused", 1, 2, 3, 4, 5, 6,
		      "connections", 0, "dropped", 0);
	is_int(stats_result(m), -EBADMSG, "stats: without sig_failed refused");
	json_decref(m);
}


/* Every parser on whatever frame is at the start of buf; none may crash, and each must answer 0 or a refusal. */
static bool parse_all(const unsigned char *buf, size_t len)
{
	json_t *msg = NULL;
	const char *why = NULL;
	bool sane = true;
	long need = hook_frame_need(buf, len);
	int r;

	if (need <= 0 || (size_t)need > len)
		return true;
	r = delivery_result(buf, (size_t)need);
	sane = r == 0 || r == -EBADMSG;
	r = answer_result(buf, (size_t)need);
	sane = sane && (r == 0 || r == -EBADMSG);
	if (hook_frame_decode(buf, (size_t)need, &msg, &why) == 0) {
		int rs[3] = { routes_result(msg), stats_result(msg), hello_result(msg) };

		for (int i = 0; i < 3; i++)
			sane = sane && (rs[i] == 0 || rs[i] == -EBADMSG);
		json_decref(msg);
	} else {
		sane = sane && why;
	}
	return sane;
}

static void test_fuzz(void)
{
	const char *env = getenv("FLEET_PROTO_FUZZ");
	long rounds = env ? strtol(env, NULL, 10) : 4000;
	unsigned char s1[20];
	struct hook_route rt = { .name = "f", .source = HOOK_HMAC, .secrets = { s1 }, .secret_lens = { 20 },
				 .n_secrets = 1, .header = "X-S", .max_body = 100 };
	struct hook_header hs[2] = { { "A", "b" }, { "X-Long", "a value of some length\there" } };
	struct hook_delivery d = { .seq = 9, .route = "f", .delivery_id = "x", .event_type = "e", .received_at = 5,
				   .headers = hs, .n_headers = 2, .body = s1, .body_len = 20, .reply_body = "r",
				   .reply_type = "text/plain" };
	struct hook_answer a = { .seq = 9, .status = 202, .body = "{}", .content_type = "application/json" };
	struct hook_stats st = { .accepted = 1 };
	json_t *msgs[3];
	unsigned char *frames[5];
	size_t lens[5];
	long survived = 0, parsed_ok = 0;

	memset(s1, 'k', sizeof(s1));
	msgs[0] = hook_msg_routes(&rt, 1, &limits);
	msgs[1] = hook_msg_stats(&st);
	msgs[2] = hook_msg_hello(1);
	for (int i = 0; i < 3; i++)
		if (hook_frame_encode(msgs[i], &frames[i], &lens[i]) < 0)
			abort();
	if (hook_delivery_encode(&d, &frames[3], &lens[3]) < 0 || hook_answer_encode(&a, &frames[4], &lens[4]) < 0)
		abort();
	for (int i = 0; i < 5; i++)
		parsed_ok += parse_all(frames[i], lens[i]);
	is_int(parsed_ok, 5, "fuzz: the five seed frames are sane");
	srand(11);
	for (long n = 0; n < rounds; n++) {
		int which = rand() % 5;
		size_t len = lens[which];
		unsigned char *buf = xmalloc(len + 8);
		int flips = 1 + rand() % 4;

		memcpy(buf, frames[which], len);
		for (int f = 0; f < flips; f++) {
			/* Anywhere but the total length (a frame that claims more than there is is never decoded). */
			size_t at = 4 + (size_t)rand() % (len - 4);
			static const char tokens[] = "{}[]\",:0-1e\\ntfa\x00\x01\x02\x40\x7f\xff";

			buf[at] = rand() % 2 ? (unsigned char)rand() : (unsigned char)tokens[rand() % (int)(sizeof(tokens) - 1)];
		}
		if (rand() % 4 == 0) {		/* truncated, with the head saying so (the message part's length as it was) */
			size_t cut = HOOK_FRAME_HEAD + 1 + (size_t)rand() % (len - HOOK_FRAME_HEAD - 1);

			put_be(buf, cut - HOOK_FRAME_HEAD, 4);
			len = cut;
		}
		survived += parse_all(buf, len);
		free(buf);
	}
	is_int(survived, rounds, "fuzz: %ld mutated frames, every parser answered 0 or -EBADMSG", rounds);
	survived = 0;
	for (long n = 0; n < rounds; n++) {
		size_t len = HOOK_FRAME_HEAD + 2 + (size_t)(rand() % 200);
		unsigned char *buf = xmalloc(len);

		for (size_t i = 0; i < len; i++)
			buf[i] = (unsigned char)rand();
		/* The total true, the message part's length anything up to it; a kind byte half the time. */
		put_head(buf, (uint32_t)(len - HOOK_FRAME_HEAD), 1 + (uint32_t)rand() % (uint32_t)(len - HOOK_FRAME_HEAD));
		if (rand() % 2)
			buf[HOOK_FRAME_HEAD] = (unsigned char)(1 + rand() % 2);
		survived += parse_all(buf, len);
		free(buf);
	}
	is_int(survived, rounds, "fuzz: %ld random frames, no crash", rounds);
	for (int i = 0; i < 5; i++)
		free(frames[i]);
	for (int i = 0; i < 3; i++)
		json_decref(msgs[i]);
}

int main(void)
{
	test_framing();
	test_routes();
	test_routes_bounds();
	test_answer();
	test_hello();
	test_delivery();
	test_headers_json();
	test_stats();
	test_fuzz();
	return tap_done();
}
