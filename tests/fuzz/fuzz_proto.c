/*
 * fuzz_proto: the fleetd <-> fleet-hooksd link (hooks/proto.c), both
 * directions. The input is a byte stream read as both readers read theirs
 * (core/listener.c on_link, listener/link.c): hook_frame_need on what is
 * there, hook_frame_decode of each whole frame, then the parser of its type
 * (fleetd: hello, stats, delivery; the listener: answer, routes). Every
 * message a parser accepts must survive a round trip through its builder,
 * a frame and its parser again, with the same contents.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hooks/proto.h"

#define FAIL(what) do { fprintf(stderr, "fuzz_proto: %s\n", what); abort(); } while (0)

/* msg (and tail) -> frame -> msg again, as a reader would take it; aborts if the frame is refused. */
static json_t *reframe(const json_t *msg, const void *tail, size_t tail_len, const unsigned char **out_tail,
		       size_t *out_len, unsigned char **frame)
{
	size_t len;
	json_t *back = NULL;
	const char *why = NULL;

	if (hook_frame_encode(msg, tail, tail_len, frame, &len) < 0)
		FAIL("a parsed message does not encode");
	if (hook_frame_need(*frame, len) != (long)len)
		FAIL("an encoded frame's length disagrees with hook_frame_need");
	if (hook_frame_decode(*frame, len, &back, out_tail, out_len, &why) < 0)
		FAIL("an encoded frame does not decode");
	return back;
}

static bool str_eq(const char *a, const char *b)
{
	return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static void round_delivery(const struct hook_delivery *d)
{
	json_t *m = hook_msg_delivery(d), *back;
	const unsigned char *tail;
	unsigned char *frame;
	size_t tail_len;
	struct hook_delivery e = { 0 };
	const char *why = NULL;

	if (!m)
		FAIL("hook_msg_delivery failed");
	back = reframe(m, d->body, d->body_len, &tail, &tail_len, &frame);
	if (hook_msg_delivery_parse(back, tail, tail_len, &e, &why) < 0)
		FAIL("a delivery does not parse after a round trip");
	if (e.seq != d->seq || !str_eq(e.route, d->route) || !str_eq(e.delivery_id, d->delivery_id) ||
	    !str_eq(e.event_type, d->event_type) || e.no_run != d->no_run || e.received_at != d->received_at ||
	    e.body_len != d->body_len || (d->body_len && memcmp(e.body, d->body, d->body_len) != 0) ||
	    !str_eq(e.reply_body, d->reply_body) || !str_eq(e.reply_type, d->reply_type) ||
	    (e.headers || d->headers) != (e.headers && d->headers) || (e.headers && !json_equal(e.headers, d->headers)))
		FAIL("a delivery changed in a round trip");
	hook_delivery_clear(&e);
	json_decref(back);
	json_decref(m);
	free(frame);
}

static void round_answer(const struct hook_answer *a)
{
	json_t *m = hook_msg_answer(a), *back;
	const unsigned char *tail;
	unsigned char *frame;
	size_t tail_len;
	struct hook_answer b = { 0 };
	const char *why = NULL;

	if (!m)
		FAIL("hook_msg_answer failed");
	back = reframe(m, NULL, 0, &tail, &tail_len, &frame);
	if (hook_msg_answer_parse(back, &b, &why) < 0)
		FAIL("an answer does not parse after a round trip");
	if (b.seq != a->seq || b.status != a->status || !str_eq(b.body, a->body) || !str_eq(b.content_type, a->content_type))
		FAIL("an answer changed in a round trip");
	hook_answer_clear(&b);
	json_decref(back);
	json_decref(m);
	free(frame);
}

static void round_stats(const struct hook_stats *s)
{
	json_t *m = hook_msg_stats(s), *back;
	const unsigned char *tail;
	unsigned char *frame;
	size_t tail_len;
	struct hook_stats t;
	const char *why = NULL;

	if (!m)
		FAIL("hook_msg_stats failed");
	back = reframe(m, NULL, 0, &tail, &tail_len, &frame);
	if (hook_msg_stats_parse(back, &t, &why) < 0)
		FAIL("stats do not parse after a round trip");
	if (memcmp(&t, s, sizeof(t)) != 0)
		FAIL("stats changed in a round trip");
	json_decref(back);
	json_decref(m);
	free(frame);
}

static void round_routes(const struct hook_route_set *set)
{
	json_t *m = hook_msg_routes(set->routes, set->n, &set->limits), *back;
	const unsigned char *tail;
	unsigned char *frame;
	size_t tail_len;
	struct hook_route_set *again = NULL;
	const char *why = NULL;

	if (!m)
		FAIL("hook_msg_routes failed");
	back = reframe(m, NULL, 0, &tail, &tail_len, &frame);
	if (hook_msg_routes_parse(back, &again, &why) < 0)
		FAIL("a route table does not parse after a round trip");
	if (again->n != set->n || memcmp(&again->limits, &set->limits, sizeof(set->limits)) != 0)
		FAIL("a route table changed in a round trip");
	for (size_t i = 0; i < set->n; i++) {
		const struct hook_route *a = &set->routes[i], *b = &again->routes[i];
		if (!str_eq(a->name, b->name) || a->source != b->source || a->n_secrets != b->n_secrets ||
		    !str_eq(a->header, b->header) || !str_eq(a->prefix, b->prefix) || a->encoding != b->encoding ||
		    a->datadog_auth != b->datadog_auth || !str_eq(a->delivery_field, b->delivery_field) ||
		    !str_eq(a->public_url, b->public_url) || a->max_body != b->max_body)
			FAIL("a route changed in a round trip");
		for (int k = 0; k < a->n_secrets; k++)
			if (a->secret_lens[k] != b->secret_lens[k] || memcmp(a->secrets[k], b->secrets[k], a->secret_lens[k]))
				FAIL("a route's secret changed in a round trip");
	}
	hook_route_set_free(again);
	json_decref(back);
	json_decref(m);
	free(frame);
}

/* One decoded message, to the parser its type names, as fleetd and the listener dispatch them. */
static void dispatch(const json_t *msg, const unsigned char *tail, size_t tail_len)
{
	const char *t = hook_msg_type(msg), *why = NULL;

	if (!t)
		FAIL("hook_frame_decode passed a message without a type");
	if (strcmp(t, "hello") == 0) {
		long pid;
		if (hook_msg_hello_parse(msg, &pid, &why) == 0) {
			json_t *m = hook_msg_hello(pid);
			long again;
			if (!m || hook_msg_hello_parse(m, &again, &why) < 0 || again != pid)
				FAIL("a hello changed in a round trip");
			json_decref(m);
		}
	} else if (strcmp(t, "stats") == 0) {
		struct hook_stats s;
		if (hook_msg_stats_parse(msg, &s, &why) == 0)
			round_stats(&s);
	} else if (strcmp(t, "delivery") == 0) {
		struct hook_delivery d = { 0 };
		if (hook_msg_delivery_parse(msg, tail, tail_len, &d, &why) == 0) {
			round_delivery(&d);
			hook_delivery_clear(&d);
		}
	} else if (strcmp(t, "answer") == 0) {
		struct hook_answer a = { 0 };
		if (hook_msg_answer_parse(msg, &a, &why) == 0) {
			round_answer(&a);
			hook_answer_clear(&a);
		}
	} else if (strcmp(t, "routes") == 0) {
		struct hook_route_set *set = NULL;
		if (hook_msg_routes_parse(msg, &set, &why) == 0) {
			round_routes(set);
			hook_route_set_free(set);
		}
	}
	if (why && !*why)
		FAIL("a refusal with an empty why");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t off = 0;

	/* A reader's loop over a stream: whole frames while there are, stop at the first bad one. */
	while (off < size) {
		long need = hook_frame_need(data + off, size - off);
		json_t *msg = NULL;
		const unsigned char *tail = NULL;
		size_t tail_len = 0;
		const char *why = NULL;

		if (need <= 0 || (size_t)need > size - off)
			break;
		if ((size_t)need < HOOK_FRAME_HEAD)
			FAIL("hook_frame_need said a frame is shorter than its head");
		/* A copy of exactly the frame, so ASan sees any read past it. */
		unsigned char *frame = malloc((size_t)need);
		memcpy(frame, data + off, (size_t)need);
		if (hook_frame_decode(frame, (size_t)need, &msg, &tail, &tail_len, &why) < 0) {
			if (!why)
				FAIL("a refused frame without a why");
			free(frame);
			break;
		}
		if (tail < frame || tail + tail_len > frame + need)
			FAIL("a decoded tail lies outside its frame");
		dispatch(msg, tail, tail_len);
		json_decref(msg);
		free(frame);
		off += (size_t)need;
	}
	return 0;
}
