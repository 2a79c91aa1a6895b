/*
 * fuzz_proto: the fleetd <-> fleet-hooksd link (hooks/proto.c), both
 * directions. The input is a byte stream read as both readers read theirs
 * (core/listener.c on_link, listener/link.c): hook_frame_need on what is
 * there, hook_frame_kind of each whole frame, then its decoder: the binary
 * delivery and answer (hook_delivery_decode, hook_answer_decode), or
 * hook_frame_decode and the parser of the JSON message's type (hello,
 * stats, routes). Every message a decoder accepts must survive a round
 * trip through its encoder (or builder and a frame) and its decoder again,
 * with the same contents.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hooks/proto.h"

#define FAIL(what) do { fprintf(stderr, "fuzz_proto: %s\n", what); abort(); } while (0)

/* A JSON msg -> frame -> msg again, as a reader would take it; aborts if the frame is refused. */
static json_t *reframe(const json_t *msg, unsigned char **frame)
{
	size_t len;
	json_t *back = NULL;
	const char *why = NULL;

	if (hook_frame_encode(msg, frame, &len) < 0)
		FAIL("a parsed message does not encode");
	if (hook_frame_need(*frame, len) != (long)len)
		FAIL("an encoded frame's length disagrees with hook_frame_need");
	if (hook_frame_decode(*frame, len, &back, &why) < 0)
		FAIL("an encoded frame does not decode");
	return back;
}

static bool str_eq(const char *a, const char *b)
{
	return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

/*
 * One message type: its parser into a value of size bytes, its builder from
 * one (no message here has a tail: the tail arguments stay empty), whether two values are
 * the same, and what frees a parsed one. A parsed value goes round through
 * the builder, a frame and the parser again, and must come back the same.
 */
struct kind {
	const char *type;
	size_t size;
	int (*parse)(const json_t *m, const unsigned char *tail, size_t tail_len, void *v, const char **why);
	json_t *(*build)(const void *v, const void **tail, size_t *tail_len);
	bool (*same)(const void *a, const void *b);
	void (*clear)(void *v);
};

static int hello_parse(const json_t *m, const unsigned char *t, size_t n, void *v, const char **why)
{
	(void)t;
	(void)n;
	return hook_msg_hello_parse(m, v, why);
}
static json_t *hello_build(const void *v, const void **t, size_t *n)
{
	(void)t;
	(void)n;
	return hook_msg_hello(*(const long *)v);
}
static bool hello_same(const void *a, const void *b)
{
	return *(const long *)a == *(const long *)b;
}

static int stats_parse(const json_t *m, const unsigned char *t, size_t n, void *v, const char **why)
{
	(void)t;
	(void)n;
	return hook_msg_stats_parse(m, v, why);
}
static json_t *stats_build(const void *v, const void **t, size_t *n)
{
	(void)t;
	(void)n;
	return hook_msg_stats(v);
}
static bool stats_same(const void *a, const void *b)
{
	return memcmp(a, b, sizeof(struct hook_stats)) == 0;
}

/* A route table parses into a pointer: v is a struct hook_route_set *. */
static int routes_parse(const json_t *m, const unsigned char *t, size_t n, void *v, const char **why)
{
	(void)t;
	(void)n;
	return hook_msg_routes_parse(m, v, why);
}
static json_t *routes_build(const void *v, const void **t, size_t *n)
{
	const struct hook_route_set *set = *(struct hook_route_set *const *)v;

	(void)t;
	(void)n;
	return hook_msg_routes(set->routes, set->n, &set->limits);
}
static bool routes_same(const void *va, const void *vb)
{
	const struct hook_route_set *x = *(struct hook_route_set *const *)va, *y = *(struct hook_route_set *const *)vb;

	if (y->n != x->n || memcmp(&y->limits, &x->limits, sizeof(x->limits)) != 0)
		return false;
	for (size_t i = 0; i < x->n; i++) {
		const struct hook_route *a = &x->routes[i], *b = &y->routes[i];
		if (!str_eq(a->name, b->name) || a->source != b->source || a->n_secrets != b->n_secrets ||
		    !str_eq(a->header, b->header) || !str_eq(a->prefix, b->prefix) || a->encoding != b->encoding ||
		    a->datadog_auth != b->datadog_auth || !str_eq(a->delivery_field, b->delivery_field) ||
		    !str_eq(a->public_url, b->public_url) || a->max_body != b->max_body)
			return false;
		for (int k = 0; k < a->n_secrets; k++)
			if (a->secret_lens[k] != b->secret_lens[k] || memcmp(a->secrets[k], b->secrets[k], a->secret_lens[k]))
				return false;
	}
	return true;
}
static void routes_clear(void *v)
{
	hook_route_set_free(*(struct hook_route_set **)v);
}

/* The JSON messages fleetd (hello, stats) and the listener (routes) take. */
static const struct kind kinds[] = {
	{ "hello", sizeof(long), hello_parse, hello_build, hello_same, NULL },
	{ "stats", sizeof(struct hook_stats), stats_parse, stats_build, stats_same, NULL },
	{ "routes", sizeof(struct hook_route_set *), routes_parse, routes_build, routes_same, routes_clear },
};

/* A value k parsed: built, framed and parsed again, it must be the same. */
static void round_trip(const struct kind *k, const void *v)
{
	const void *tail_in = NULL;
	size_t tail_in_len = 0;
	json_t *m = k->build(v, &tail_in, &tail_in_len), *back;
	unsigned char *frame;
	void *again = calloc(1, k->size);
	const char *why = NULL;

	if (!m || !again)
		FAIL("a parsed message does not build");
	back = reframe(m, &frame);
	if (k->parse(back, NULL, 0, again, &why) < 0)
		FAIL("a message does not parse after a round trip");
	if (!k->same(v, again))
		FAIL("a message changed in a round trip");
	if (k->clear)
		k->clear(again);
	free(again);
	json_decref(back);
	json_decref(m);
	free(frame);
}

/* One decoded JSON message, to the parser its type names, as fleetd and the listener dispatch them. */
static void dispatch(const json_t *msg)
{
	const char *t = hook_msg_type(msg), *why = NULL;

	if (!t)
		FAIL("hook_frame_decode passed a message without a type");
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
		const struct kind *k = &kinds[i];
		void *v;

		if (strcmp(t, k->type) != 0)
			continue;
		if (!(v = calloc(1, k->size)))
			FAIL("calloc");
		if (k->parse(msg, NULL, 0, v, &why) == 0) {
			round_trip(k, v);
			if (k->clear)
				k->clear(v);
		}
		free(v);
		break;
	}
	if (why && !*why)
		FAIL("a refusal with an empty why");
}

static bool delivery_same(const struct hook_delivery *d, const struct hook_delivery *e)
{
	if (e->seq != d->seq || !str_eq(e->route, d->route) || !str_eq(e->delivery_id, d->delivery_id) ||
	    !str_eq(e->event_type, d->event_type) || e->no_run != d->no_run || e->received_at != d->received_at ||
	    e->body_len != d->body_len || memcmp(e->body, d->body, d->body_len) != 0 ||
	    !str_eq(e->reply_body, d->reply_body) || !str_eq(e->reply_type, d->reply_type) ||
	    e->n_headers != d->n_headers)
		return false;
	for (size_t i = 0; i < d->n_headers; i++)
		if (strcmp(e->headers[i].name, d->headers[i].name) || strcmp(e->headers[i].value, d->headers[i].value))
			return false;
	return true;
}

/* A decoded delivery: encoded and decoded again, the same; its headers' JSON text one jansson reads back. */
static void delivery_round_trip(const struct hook_delivery *d)
{
	struct hook_delivery again;
	unsigned char *frame;
	size_t len;
	const char *why = NULL;
	char *text = hook_headers_json(d->headers, d->n_headers);
	json_t *h = text ? json_loads(text, 0, NULL) : NULL;

	if (!h || !json_is_object(h) || json_object_size(h) != d->n_headers)
		FAIL("a decoded delivery's headers do not make one JSON object of as many members");
	for (size_t i = 0; i < d->n_headers; i++)
		if (!str_eq(json_string_value(json_object_get(h, d->headers[i].name)), d->headers[i].value))
			FAIL("a decoded delivery's header changed in its JSON text");
	json_decref(h);
	free(text);
	if (hook_delivery_encode(d, &frame, &len) < 0)
		FAIL("a decoded delivery does not encode");
	if (hook_frame_need(frame, len) != (long)len)
		FAIL("an encoded delivery's length disagrees with hook_frame_need");
	if (hook_delivery_decode(frame, len, &again, &why) < 0)
		FAIL("an encoded delivery does not decode");
	if (!delivery_same(d, &again))
		FAIL("a delivery changed in a round trip");
	hook_delivery_clear(&again);
	free(frame);
}

static void answer_round_trip(const struct hook_answer *a)
{
	struct hook_answer again;
	unsigned char *frame;
	size_t len;
	const char *why = NULL;

	if (hook_answer_encode(a, &frame, &len) < 0)
		FAIL("a decoded answer does not encode");
	if (hook_answer_decode(frame, len, &again, &why) < 0)
		FAIL("an encoded answer does not decode");
	if (again.seq != a->seq || again.status != a->status || !str_eq(again.body, a->body) ||
	    !str_eq(again.content_type, a->content_type))
		FAIL("an answer changed in a round trip");
	hook_answer_clear(&again);
	free(frame);
}

/* One whole frame, to the decoder its kind names, as fleetd and the listener dispatch them. */
static void decode_frame(const unsigned char *frame, size_t len)
{
	const char *why = NULL;
	int kind = hook_frame_kind(frame, len, &why);

	if (kind == HOOK_KIND_DELIVERY) {
		struct hook_delivery d;

		if (hook_delivery_decode(frame, len, &d, &why) == 0) {
			delivery_round_trip(&d);
			hook_delivery_clear(&d);
		}
	} else if (kind == HOOK_KIND_ANSWER) {
		struct hook_answer a;

		if (hook_answer_decode(frame, len, &a, &why) == 0) {
			answer_round_trip(&a);
			hook_answer_clear(&a);
		}
	} else if (kind == HOOK_KIND_JSON) {
		json_t *msg = NULL;

		if (hook_frame_decode(frame, len, &msg, &why) == 0) {
			dispatch(msg);
			json_decref(msg);
			why = NULL;
		}
	}
	if (why && !*why)
		FAIL("a refusal with an empty why");
	if (kind < 0 && !why)
		FAIL("a refused frame without a why");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t off = 0;

	/* A reader's loop over a stream: whole frames while there are, stop at the first bad one. */
	while (off < size) {
		long need = hook_frame_need(data + off, size - off);
		const char *why = NULL;

		if (need <= 0 || (size_t)need > size - off)
			break;
		if ((size_t)need < HOOK_FRAME_HEAD + 1)
			FAIL("hook_frame_need said a frame is shorter than its head and a kind byte");
		/* A copy of exactly the frame, so ASan sees any read past it. */
		unsigned char *frame = malloc((size_t)need);
		memcpy(frame, data + off, (size_t)need);
		if (hook_frame_kind(frame, (size_t)need, &why) < 0) {
			free(frame);
			break;
		}
		decode_frame(frame, (size_t)need);
		free(frame);
		off += (size_t)need;
	}
	return 0;
}
