/*
 * test_hooks_proto: the socketpair protocol between fleetd and its webhook
 * listener (hooks/proto.c). Every message round-trips through a frame;
 * every bound is tried on both sides of its edge; truncated, oversized and
 * malformed frames are refused; and mutated or random frames, fed to every
 * parser, never crash (run it under valgrind to see nothing leaks either).
 * FLEET_PROTO_FUZZ sets the number of fuzz rounds (default 4000).
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

/*
 * msg and its tail -> frame -> msg, through the framing functions as a
 * reader would use them; the tail that came out into *out_tail (malloc'd,
 * never NULL on success) when out_tail is given.
 */
static json_t *through_frame_tail(const json_t *msg, const void *tail, size_t tail_len, unsigned char **out_tail,
				  size_t *out_len)
{
	unsigned char *buf;
	size_t len, tl = 0;
	const unsigned char *t = NULL;
	json_t *out = NULL;
	const char *why = NULL;

	if (hook_frame_encode(msg, tail, tail_len, &buf, &len) < 0)
		return NULL;
	if (hook_frame_need(buf, len) == (long)len)
		(void)hook_frame_decode(buf, len, &out, &t, &tl, &why);
	if (out && out_tail) {
		*out_tail = xmalloc(tl + 1);
		memcpy(*out_tail, t, tl);
		*out_len = tl;
	}
	free(buf);
	return out;
}

static json_t *through_frame(const json_t *msg)
{
	return through_frame_tail(msg, NULL, 0, NULL, NULL);
}

/* A frame's head: the length after it and of its JSON part. */
static void put_head(unsigned char *p, uint32_t len, uint32_t json_len)
{
	for (int i = 0; i < 4; i++) {
		p[i] = (unsigned char)(len >> (24 - 8 * i));
		p[4 + i] = (unsigned char)(json_len >> (24 - 8 * i));
	}
}

/* Decode text (and tail_len bytes of tail after it) as one frame; NULL if refused. */
static json_t *decode_text_tail(const char *text, const char *tail, size_t tail_len)
{
	size_t n = strlen(text);
	unsigned char *buf = xmalloc(HOOK_FRAME_HEAD + n + tail_len);
	const unsigned char *t;
	size_t tl;
	json_t *out = NULL;
	const char *why = NULL;

	put_head(buf, (uint32_t)(n + tail_len), (uint32_t)n);
	memcpy(buf + HOOK_FRAME_HEAD, text, n);
	if (tail_len)
		memcpy(buf + HOOK_FRAME_HEAD + n, tail, tail_len);
	if (hook_frame_decode(buf, HOOK_FRAME_HEAD + n + tail_len, &out, &t, &tl, &why) < 0)
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

static int delivery_result_tail(json_t *msg, const unsigned char *tail, size_t tail_len)
{
	struct hook_delivery d = { 0 };
	const char *why = NULL;
	int r = hook_msg_delivery_parse(msg, tail, tail_len, &d, &why);

	if (r == 0)
		hook_delivery_clear(&d);
	else if (!why)
		r = -1000;
	return r;
}

/* As a delivery with the tail its body_len says (of zeros), so only the JSON decides. */
static int delivery_result(json_t *msg)
{
	json_t *len = json_object_get(msg, "body_len");
	size_t n = json_is_integer(len) && json_integer_value(len) >= 0 && json_integer_value(len) <= (17 << 20)
			   ? (size_t)json_integer_value(len) : 0;
	unsigned char *tail = xcalloc(1, n + 1);
	int r = delivery_result_tail(msg, tail, n);

	free(tail);
	return r;
}

static int answer_result(json_t *msg)
{
	struct hook_answer a = { 0 };
	const char *why = NULL;
	int r = hook_msg_answer_parse(msg, &a, &why);

	if (r == 0)
		hook_answer_clear(&a);
	else if (!why)
		r = -1000;
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
	const unsigned char *tail;
	size_t len, tail_len;
	const char *why = NULL;

	is_int(hook_frame_need(head, 0), 0, "need: no bytes yet");
	is_int(hook_frame_need(head, 7), 0, "need: 7 of the 8 head bytes");
	is_int(hook_frame_need(head, 8), -EMSGSIZE, "need: a length of 0 is refused");
	put_head(head, 1, 1);
	is_int(hook_frame_need(head, 8), -EMSGSIZE, "need: a JSON part of 1 byte is refused");
	put_head(head, 2, 2);
	is_int(hook_frame_need(head, 8), 10, "need: a length of 2 is the smallest");
	put_head(head, 2, 3);
	is_int(hook_frame_need(head, 8), -EMSGSIZE, "need: a JSON part longer than the frame is refused");
	put_head(head, 100, 2);
	is_int(hook_frame_need(head, 8), 108, "need: a JSON part and a tail");
	put_head(head, HOOK_FRAME_MAX, 2);
	is_int(hook_frame_need(head, 8), HOOK_FRAME_HEAD + HOOK_FRAME_MAX, "need: HOOK_FRAME_MAX exactly");
	put_head(head, HOOK_FRAME_MAX + 1, 2);
	is_int(hook_frame_need(head, 8), -EMSGSIZE, "need: HOOK_FRAME_MAX + 1 is refused");
	put_head(head, 0xffffffffu, 0xffffffffu);
	is_int(hook_frame_need(head, 8), -EMSGSIZE, "need: 4 GiB is refused");

	ok(hook_frame_encode(msg, NULL, 0, &buf, &len) == 0, "encode hello");
	is_int(hook_frame_need(buf, len), (long)len, "need of an encoded frame is its length");
	is_int(hook_frame_need(buf, 2), 0, "need of a truncated head is 0");
	ok(hook_frame_decode(buf, len - 1, &out, &tail, &tail_len, &why) == -EBADMSG && why,
	   "a truncated frame is refused");
	ok(hook_frame_decode(buf, len + 0, &out, &tail, &tail_len, &why) == 0 && tail_len == 0,
	   "the whole frame decodes, without a tail");
	is_str(hook_msg_type(out), "hello", "its type");
	json_decref(out);
	free(buf);
	ok(hook_frame_encode(msg, "abc", 3, &buf, &len) == 0, "encode hello with a tail");
	ok(hook_frame_decode(buf, len, &out, &tail, &tail_len, &why) == -EBADMSG && why,
	   "decode: a tail on a message other than a delivery is refused");
	free(buf);
	ok(hook_frame_encode(msg, NULL, 3, &buf, &len) == -EINVAL, "encode refuses a tail length without a tail");
	out = json_array();
	ok(hook_frame_encode(out, NULL, 0, &buf, &len) == -EINVAL, "encode refuses what is not an object");
	json_decref(out);
	json_decref(msg);

	/* Oversized: a message whose JSON is over HOOK_FRAME_MAX is refused by encode, and so is one whose tail makes it so. */
	{
		char *big = repeat('a', HOOK_FRAME_MAX);
		json_t *m = json_pack("{s:s, s:s}", "t", "x", "pad", big);

		ok(hook_frame_encode(m, NULL, 0, &buf, &len) == -EMSGSIZE, "encode refuses a frame over HOOK_FRAME_MAX");
		json_decref(m);
		m = json_pack("{s:s}", "t", "delivery");
		ok(hook_frame_encode(m, big, HOOK_FRAME_MAX, &buf, &len) == -EMSGSIZE,
		   "encode refuses a tail that takes the frame over HOOK_FRAME_MAX");
		json_decref(m);
		free(big);
	}

	out = decode_text_tail("{\"t\":\"delivery\"}", "\0\1\2", 3);
	ok(out != NULL, "decode: a delivery may have a tail (any bytes)");
	json_decref(out);
	ok(!decode_text("[1,2]"), "decode: an array is refused");
	ok(!decode_text("{\"x\":1}"), "decode: an object without t is refused");
	ok(!decode_text("{\"t\":5}"), "decode: a t that is no string is refused");
	ok(!decode_text("{\"t\":\"hello\",\"t\":\"answer\"}"), "decode: duplicate members are refused");
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
	is_int(routes_result(out) + answer_result(out) + delivery_result(out) + stats_result(out) + hello_result(out),
	       -5 * EBADMSG, "...and every parser refuses it");
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

static void test_answer(void)
{
	struct hook_answer in = { .seq = (1ULL << 53), .status = 202,
				  .body = "{\"status\":\"accepted\",\"delivery\":7,\"runs\":2}",
				  .content_type = "application/json" }, out = { 0 };
	const char *why = NULL;
	json_t *msg = hook_msg_answer(&in), *back = through_frame(msg), *m;
	char *s;

	ok(back && hook_msg_answer_parse(back, &out, &why) == 0, "answer: round trip parses");
	ok(out.seq == in.seq && out.status == 202, "answer: seq and status");
	is_str(out.body, in.body, "answer: body");
	is_str(out.content_type, in.content_type, "answer: content_type");
	hook_answer_clear(&out);
	json_decref(back);
	json_decref(msg);

	in = (struct hook_answer){ .seq = 0, .status = 503 };
	msg = hook_msg_answer(&in);
	back = through_frame(msg);
	ok(back && hook_msg_answer_parse(back, &out, &why) == 0 && out.status == 503 && !out.body && !out.content_type,
	   "answer: without body or content_type");
	hook_answer_clear(&out);
	json_decref(back);
	json_decref(msg);

	in = (struct hook_answer){ .seq = 1, .status = 200, .body = "caf\xc3\xa9 \xe2\x9c\x93" };
	msg = hook_msg_answer(&in);
	back = through_frame(msg);
	ok(back && hook_msg_answer_parse(back, &out, &why) == 0 && out.body && strcmp(out.body, in.body) == 0,
	   "answer: a UTF-8 body round-trips (through \\u escapes)");
	hook_answer_clear(&out);
	json_decref(back);
	json_decref(msg);

#define ANSWER_CASE(key, val, want, what) do { \
	m = json_pack("{s:s, s:i, s:i}", "t", "answer", "seq", 3, "status", 200); \
	json_object_set_new(m, key, val); \
	is_int(answer_result(m), want, "answer: " what); \
	json_decref(m); \
} while (0)
	ANSWER_CASE("status", json_integer(199), -EBADMSG, "status 199 refused");
	ANSWER_CASE("status", json_integer(200), 0, "status 200 accepted");
	ANSWER_CASE("status", json_integer(599), 0, "status 599 accepted");
	ANSWER_CASE("status", json_integer(600), -EBADMSG, "status 600 refused");
	ANSWER_CASE("seq", json_integer(-1), -EBADMSG, "a negative seq refused");
	ANSWER_CASE("seq", json_integer((1LL << 53) + 1), -EBADMSG, "a seq past 2^53 refused");
	ANSWER_CASE("seq", json_string("3"), -EBADMSG, "a seq as a string refused");
	s = repeat('b', 64 << 10);
	ANSWER_CASE("body", json_string(s), 0, "a 64 KiB body accepted");
	free(s);
	s = repeat('b', (64 << 10) + 1);
	ANSWER_CASE("body", json_string(s), -EBADMSG, "a 64 KiB + 1 body refused");
	free(s);
	ANSWER_CASE("body", json_integer(1), -EBADMSG, "a body that is no string refused");
	ANSWER_CASE("content_type", json_string("text/plain\r\nSet-Cookie: x"), -EBADMSG, "a content_type with CRLF refused");
	ANSWER_CASE("content_type", json_string(""), -EBADMSG, "an empty content_type refused");
	ANSWER_CASE("extra", json_integer(1), -EBADMSG, "an unknown member refused");
	m = json_pack("{s:s, s:i}", "t", "answer", "seq", 3);
	is_int(answer_result(m), -EBADMSG, "answer: no status refused");
	json_decref(m);
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

static void test_delivery(void)
{
	unsigned char body[256];
	struct hook_delivery in = {
		.seq = 77, .route = "gh", .delivery_id = "72d3162e-cc78-11e3-81ab-4c9367dc0958",
		.event_type = "pull_request.opened", .no_run = false, .received_at = 1780000000,
		.headers = json_pack("{s:s, s:s}", "X-GitHub-Event", "pull_request", "User-Agent", "GitHub-Hookshot/1\tx"),
		.body = body, .body_len = sizeof(body),
	}, out = { 0 };
	const char *why = NULL;
	json_t *msg, *back, *h, *m;
	unsigned char *tail = NULL;
	size_t tail_len = 0;
	char *s;

	for (size_t i = 0; i < sizeof(body); i++)
		body[i] = (unsigned char)i;
	msg = hook_msg_delivery(&in);
	json_decref(in.headers);
	back = through_frame_tail(msg, in.body, in.body_len, &tail, &tail_len);
	ok(back && hook_msg_delivery_parse(back, tail, tail_len, &out, &why) == 0, "delivery: round trip parses");
	ok(tail_len == sizeof(body) && json_integer_value(json_object_get(back, "body_len")) == (json_int_t)sizeof(body) &&
	   !json_object_get(back, "body"), "delivery: the body is the frame's tail, its length in the JSON");
	free(tail);
	ok(out.seq == 77 && out.received_at == 1780000000 && !out.no_run, "delivery: seq, received_at, no_run");
	is_str(out.route, "gh", "delivery: route");
	is_str(out.delivery_id, in.delivery_id, "delivery: id");
	is_str(out.event_type, in.event_type, "delivery: event type");
	ok(out.body_len == sizeof(body) && memcmp(out.body, body, sizeof(body)) == 0, "delivery: every byte value of the body");
	h = out.headers;
	ok(json_is_object(h) && json_object_size(h) == 2 &&
	   strcmp(json_string_value(json_object_get(h, "User-Agent")), "GitHub-Hookshot/1\tx") == 0,
	   "delivery: headers, a JSON object");
	ok(json_is_object(json_object_get(back, "headers")), "delivery: headers travel as an object, not as text");
	ok(!out.reply_body && !out.reply_type, "delivery: no reply");
	hook_delivery_clear(&out);
	json_decref(back);
	json_decref(msg);

	in = (struct hook_delivery){ .seq = 0, .route = "sl", .delivery_id = "Ev1", .no_run = true, .received_at = 0,
				     .headers = NULL, .body = NULL, .body_len = 0,
				     .reply_body = "{\"challenge\":\"abc\"}", .reply_type = "application/json" };
	msg = hook_msg_delivery(&in);
	back = through_frame_tail(msg, NULL, 0, &tail, &tail_len);
	ok(back && hook_msg_delivery_parse(back, tail, tail_len, &out, &why) == 0,
	   "delivery: a no_run one with a reply parses");
	free(tail);
	ok(out.no_run && out.body_len == 0 && out.body && !out.event_type, "delivery: no_run, empty body, no event");
	ok(json_is_object(out.headers) && json_object_size(out.headers) == 0, "delivery: no headers is {}");
	is_str(out.reply_body, in.reply_body, "delivery: reply_body");
	is_str(out.reply_type, in.reply_type, "delivery: reply_type");
	hook_delivery_clear(&out);
	json_decref(back);

#define DELIVERY_CASE(key, val, want, what) do { \
	m = json_deep_copy(msg); \
	json_object_set_new(m, key, val); \
	is_int(delivery_result(m), want, "delivery: " what); \
	json_decref(m); \
} while (0)
#define HEADERS_CASE(hdrs, want, what) DELIVERY_CASE("headers", hdrs, want, what)
	DELIVERY_CASE("seq", json_integer(-1), -EBADMSG, "a negative seq refused");
	DELIVERY_CASE("received_at", json_integer(-1), -EBADMSG, "a negative received_at refused");
	DELIVERY_CASE("route", json_string("No"), -EBADMSG, "an invalid route refused");
	DELIVERY_CASE("id", json_string("a b"), -EBADMSG, "an id with a space refused");
	DELIVERY_CASE("id", json_string(""), -EBADMSG, "an empty id refused");
	s = repeat('i', 256);
	DELIVERY_CASE("id", json_string(s), 0, "a 256-byte id accepted");
	DELIVERY_CASE("event", json_string(s), 0, "a 256-byte event accepted");
	free(s);
	s = repeat('i', 257);
	DELIVERY_CASE("id", json_string(s), -EBADMSG, "a 257-byte id refused");
	DELIVERY_CASE("event", json_string(s), -EBADMSG, "a 257-byte event refused");
	free(s);
	DELIVERY_CASE("event", json_string("push\n"), -EBADMSG, "an event with a newline refused");
	DELIVERY_CASE("no_run", json_integer(1), -EBADMSG, "no_run as a number refused");
	DELIVERY_CASE("body", json_string("AAA"), -EBADMSG, "a body member (base64, as before) refused");
	DELIVERY_CASE("body_len", json_string("0"), -EBADMSG, "a body_len that is no number refused");
	DELIVERY_CASE("body_len", json_integer(-1), -EBADMSG, "a negative body_len refused");
	m = json_deep_copy(msg);
	json_object_del(m, "body_len");
	is_int(delivery_result(m), -EBADMSG, "delivery: without body_len refused");
	json_decref(m);
	m = json_deep_copy(msg);
	json_object_set_new(m, "body_len", json_integer(3));
	is_int(delivery_result_tail(m, (const unsigned char *)"abcd", 4), -EBADMSG,
	       "delivery: a tail longer than body_len refused");
	is_int(delivery_result_tail(m, (const unsigned char *)"ab", 2), -EBADMSG,
	       "delivery: a tail shorter than body_len refused");
	is_int(delivery_result_tail(m, (const unsigned char *)"abc", 3), 0, "delivery: a tail of body_len accepted");
	json_decref(m);
	DELIVERY_CASE("reply_body", json_integer(0), -EBADMSG, "a reply_body that is no string refused");
	DELIVERY_CASE("reply_type", json_string("a\tb"), -EBADMSG, "a reply_type with a tab refused");
	DELIVERY_CASE("secret", json_string("x"), -EBADMSG, "an unknown member refused");
	HEADERS_CASE(json_pack("{s:s}", "Authorization", "Bearer x"), -EBADMSG, "Authorization refused");
	HEADERS_CASE(json_pack("{s:s}", "proxy-authorization", "x"), -EBADMSG, "Proxy-Authorization refused");
	HEADERS_CASE(json_pack("{s:s}", "COOKIE", "a=b"), -EBADMSG, "Cookie refused, whatever its case");
	HEADERS_CASE(json_pack("{s:s, s:s}", "X-A", "1", "x-a", "2"), -EBADMSG, "a name twice (case aside) refused");
	HEADERS_CASE(json_pack("{s:s}", "X A", "1"), -EBADMSG, "a name that is no token refused");
	HEADERS_CASE(json_pack("{s:s}", "X-A", "1\r\n2"), -EBADMSG, "a value with CRLF refused");
	HEADERS_CASE(json_pack("{s:i}", "X-A", 1), -EBADMSG, "a value that is no string refused");
	HEADERS_CASE(json_pack("[s]", "X-A"), -EBADMSG, "headers that are no object refused");
	s = repeat('v', 8192);
	HEADERS_CASE(json_pack("{s:s}", "X-A", s), 0, "an 8192-byte value accepted");
	free(s);
	s = repeat('v', 8193);
	HEADERS_CASE(json_pack("{s:s}", "X-A", s), -EBADMSG, "an 8193-byte value refused");
	free(s);
	{
		json_t *hs = json_object();
		char name[16];

		for (int i = 0; i < HOOK_PROTO_HEADERS_MAX; i++) {
			snprintf(name, sizeof(name), "X-H%d", i);
			json_object_set_new(hs, name, json_string("v"));
		}
		HEADERS_CASE(json_deep_copy(hs), 0, "64 headers accepted");
		json_object_set_new(hs, "X-One-More", json_string("v"));
		HEADERS_CASE(hs, -EBADMSG, "65 headers refused");
	}
	json_decref(msg);

	/* The body's bound: 16 MiB exactly, then one byte more. */
	{
		unsigned char *big = xcalloc(1, (16u << 20) + 1);

		in = (struct hook_delivery){ .seq = 1, .route = "big", .delivery_id = "d1", .received_at = 1,
					     .body = big, .body_len = 16u << 20 };
		msg = hook_msg_delivery(&in);
		back = through_frame_tail(msg, in.body, in.body_len, &tail, &tail_len);
		ok(back != NULL, "delivery: a 16 MiB body fits a frame");
		is_int(back ? delivery_result_tail(back, tail, tail_len) : -1, 0, "delivery: a 16 MiB body accepted");
		free(back ? tail : NULL);
		json_decref(back);
		json_decref(msg);
		in.body_len++;
		msg = hook_msg_delivery(&in);
		is_int(delivery_result_tail(msg, big, in.body_len), -EBADMSG, "delivery: a 16 MiB + 1 body refused");
		json_decref(msg);
		free(big);
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

/* Every parser on whatever decodes from buf; none may crash, and each must answer 0 or a refusal. */
static bool parse_all(const unsigned char *buf, size_t len)
{
	json_t *msg = NULL;
	const char *why = NULL;
	bool sane = true;
	long need = hook_frame_need(buf, len);
	const unsigned char *tail;
	size_t tail_len;

	if (need > 0 && (size_t)need <= len && hook_frame_decode(buf, (size_t)need, &msg, &tail, &tail_len, &why) == 0) {
		int r[5] = { routes_result(msg), answer_result(msg), delivery_result_tail(msg, tail, tail_len),
			     stats_result(msg), hello_result(msg) };

		for (int i = 0; i < 5; i++)
			sane = sane && (r[i] == 0 || r[i] == -EBADMSG);
		json_decref(msg);
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
	struct hook_delivery d = { .seq = 9, .route = "f", .delivery_id = "x", .event_type = "e", .received_at = 5,
				   .headers = json_pack("{s:s}", "A", "b"), .body = s1, .body_len = 20, .reply_body = "r" };
	struct hook_answer a = { .seq = 9, .status = 202, .body = "{}", .content_type = "application/json" };
	struct hook_stats st = { .accepted = 1 };
	json_t *msgs[5];
	unsigned char *frames[5];
	size_t lens[5];
	long survived = 0, parsed_ok = 0;

	memset(s1, 'k', sizeof(s1));
	msgs[0] = hook_msg_routes(&rt, 1, &limits);
	msgs[1] = hook_msg_delivery(&d);
	msgs[2] = hook_msg_answer(&a);
	msgs[3] = hook_msg_stats(&st);
	msgs[4] = hook_msg_hello(1);
	json_decref(d.headers);
	for (int i = 0; i < 5; i++) {
		if (hook_frame_encode(msgs[i], i == 1 ? d.body : NULL, i == 1 ? d.body_len : 0, &frames[i], &lens[i]) < 0)
			abort();
		parsed_ok += parse_all(frames[i], lens[i]);
	}
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
			static const char tokens[] = "{}[]\",:0-1e\\ntfa\x00\xff";

			buf[at] = rand() % 2 ? (unsigned char)rand() : (unsigned char)tokens[rand() % (int)(sizeof(tokens) - 1)];
		}
		if (rand() % 4 == 0) {		/* truncated, with the head saying so (the JSON part's length as it was) */
			size_t cut = HOOK_FRAME_HEAD + 2 + (size_t)rand() % (len - HOOK_FRAME_HEAD - 2);

			buf[0] = (unsigned char)((cut - HOOK_FRAME_HEAD) >> 24);
			buf[1] = (unsigned char)((cut - HOOK_FRAME_HEAD) >> 16);
			buf[2] = (unsigned char)((cut - HOOK_FRAME_HEAD) >> 8);
			buf[3] = (unsigned char)(cut - HOOK_FRAME_HEAD);
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
		/* The total true, the JSON part's length anything up to it: random JSON and random tails. */
		put_head(buf, (uint32_t)(len - HOOK_FRAME_HEAD), 2 + (uint32_t)rand() % (uint32_t)(len - HOOK_FRAME_HEAD - 1));
		survived += parse_all(buf, len);
		free(buf);
	}
	is_int(survived, rounds, "fuzz: %ld random frames, no crash", rounds);
	for (int i = 0; i < 5; i++) {
		json_decref(msgs[i]);
		free(frames[i]);
	}
}

int main(void)
{
	test_framing();
	test_routes();
	test_routes_bounds();
	test_answer();
	test_hello();
	test_delivery();
	test_stats();
	test_fuzz();
	return tap_done();
}
