/*
 * proto: what fleetd and its webhook listener (daemon/fleet-hooksd, built
 * from listener/) say to each other over their socketpair. The listener is
 * unprivileged and faces the internet, so fleetd treats everything it sends
 * as hostile: every message is bounded and checked here, by one parser on
 * both sides.
 *
 * Framing: an 8-byte head, two big-endian 4-byte lengths: of the rest of
 * the frame, and of its message part (at least 1 byte); then the message;
 * then the frame's tail, raw bytes: a delivery's body, neither base64'd nor
 * escaped; no other message has a tail. The message's first byte says how
 * it is written:
 *
 *   '{'   a JSON object (jansson) with a "t" member naming its type: routes,
 *         hello, stats (rare messages; secrets are base64 in it).
 *   0x01  a delivery, binary (below): the message per webhook, so no JSON.
 *   0x02  an answer, binary.
 *
 * The binary messages: integers big-endian; s16 is a 2-byte length and that
 * many bytes, s32 a 4-byte length and that many bytes (no NUL in either);
 * [x] is there only when its flag is set; nothing may follow the last field.
 *
 *   delivery  u8 0x01, u8 flags (1 no_run, 2 event, 4 reply_body, 8
 *             reply_type; other bits refused), u64 seq, u64 received_at,
 *             s16 route, s16 id, [s16 event], u16 header count (<= 64),
 *             that many pairs s16 name, s16 value, [s32 reply_body],
 *             [s16 reply_type]; the body is the frame's tail.
 *   answer    u8 0x02, u8 flags (1 body, 2 content_type), u64 seq,
 *             u16 status, [s32 body], [s16 content_type]; no tail.
 *
 * Messages:
 *
 *   fleetd -> listener
 *     routes    the whole route table (replaces the one before) and the HTTP
 *               limits; sent once the listener says hello, and again on
 *               every change (hook add/rm/rotate, a rotation's grace ending,
 *               SIGHUP).
 *     answer    the HTTP answer to delivery `seq`, sent only once fleetd has
 *               committed it (or decided it is refused): the listener
 *               answers the sender with exactly this.
 *   listener -> fleetd
 *     hello     after it dropped its privileges; it serves nothing before
 *               its first routes message.
 *     delivery  a verified delivery, waiting for its answer.
 *     stats     counters (refusals by status, signature failures by source,
 *               connections), now and then.
 *
 * libc, jansson and common/ only, like the rest of hooks/.
 */
#ifndef FLEET_HOOKS_PROTO_H
#define FLEET_HOOKS_PROTO_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hooks/verify.h"

#define HOOK_FRAME_HEAD 8u		/* the two lengths */
#define HOOK_FRAME_MAX (24u << 20)	/* after the head: a 16 MiB body plus its JSON, or a table of routes */
#define HOOK_PROTO_ROUTES_MAX 4096	/* routes in one table */
#define HOOK_PROTO_HEADERS_MAX 64	/* headers passed on with a delivery */

/* The listener's HTTP limits (fleetd.conf's hooks_* keys). */
struct hook_limits {
	long max_connections;		/* open at once over all clients */
	long max_per_source;		/* open at once from one address */
	long request_timeout_s;		/* from accept to the whole request read: an absolute deadline */
	long header_max;		/* bytes of request line and headers together */
};

/* The route table as the listener holds it: owns every string and secret (wiped on free). */
struct hook_route_set {
	struct hook_route *routes;	/* n of them; routes[i].max_body set */
	size_t n;
	struct hook_limits limits;
	json_t *backing;		/* the parsed message the strings point into */
	unsigned char **secret_bufs;	/* decoded secrets, 2 per route at most */
	size_t n_secret_bufs;
};
void hook_route_set_free(struct hook_route_set *s);

/*
 * A verified delivery. Built by the listener from borrowed pointers (block
 * NULL, never cleared); decoded by fleetd into one allocation, block, that
 * every pointer here points into (hook_delivery_clear frees it). headers are
 * those a run may see (never Authorization, Cookie or a route's secret
 * header); body is the raw body.
 */
struct hook_delivery {
	uint64_t seq;			/* the listener's number for the request; the answer carries it */
	const char *route;
	const char *delivery_id;
	const char *event_type;		/* may be NULL */
	bool no_run;			/* stored and answered, queues nothing (github ping, slack url_verification) */
	int64_t received_at;		/* unix seconds */
	const struct hook_header *headers;
	size_t n_headers;		/* at most HOOK_PROTO_HEADERS_MAX */
	const unsigned char *body;
	size_t body_len;
	const char *reply_body;		/* what to answer on success instead of the default (slack's challenge), or NULL */
	const char *reply_type;
	void *block;			/* decoded: owns all of the above */
};
void hook_delivery_clear(struct hook_delivery *d);

/* fleetd's answer to delivery seq. body and content_type may be NULL (an empty body); both owned. */
struct hook_answer {
	uint64_t seq;
	int status;			/* 200..599 */
	char *body;
	char *content_type;
};
void hook_answer_clear(struct hook_answer *a);

/* Counters the listener keeps since it started. */
struct hook_stats {
	int64_t accepted;		/* deliveries fleetd answered 2xx */
	int64_t refused[6];		/* 400, 401, 404, 405, 413, other (429, 503, 408, ...) */
	int64_t connections;		/* open now */
	int64_t dropped;		/* connections closed by a limit (per source, total, deadline) */
	int64_t sig_failed[HOOK_SOURCE__COUNT];	/* of the 401s: by the route's source (its signature did not verify) */
};

/* A frame's kind: the first byte of its message part. */
enum hook_frame_kind {
	HOOK_KIND_DELIVERY = 0x01,
	HOOK_KIND_ANSWER = 0x02,
	HOOK_KIND_JSON = '{',
};

/*
 * Framing. hook_frame_need: how many bytes the frame starting at buf needs in
 * all (head included) once HOOK_FRAME_HEAD bytes are there; 0 if fewer are;
 * -EMSGSIZE if it claims more than HOOK_FRAME_MAX after the head, an empty
 * message part or one longer than the frame. hook_frame_kind: of one whole
 * frame (len bytes, head included, as hook_frame_need said), its kind, or
 * -EBADMSG with *why (a length out of bounds, an unknown kind).
 * hook_frame_encode: a JSON msg as one frame (*ret malloc'd, caller frees),
 * or -EINVAL / -ENOMEM / -EMSGSIZE. hook_frame_decode: of one whole JSON
 * frame, the object (caller decrefs), or -EBADMSG with *why (not JSON, no
 * "t", a tail).
 */
long hook_frame_need(const unsigned char *buf, size_t avail);
int hook_frame_kind(const unsigned char *frame, size_t len, const char **why);
int hook_frame_encode(const json_t *msg, unsigned char **ret, size_t *len);
int hook_frame_decode(const unsigned char *frame, size_t len, json_t **ret, const char **why);

/*
 * The binary messages. Encoders: one whole frame (*ret malloc'd, caller
 * frees), or -EINVAL when a field does not fit its length (or more than
 * HOOK_PROTO_HEADERS_MAX headers), -EMSGSIZE, -ENOMEM. Decoders, of one
 * whole frame: 0 and the filled struct, or -EBADMSG with a static *why:
 * another kind, a length past the frame or over its bound, a missing
 * string, an unknown flag, bytes after the last field, an answer with a
 * tail, NUL or a control byte in a string, or a value out of its bounds
 * (route names by hook_route_name_check, ids and types hv_id_ok, header
 * names hook_header_check, no credential header, no name twice, values
 * printable up to 8 KiB, bodies 16 MiB, reply and answer bodies 64 KiB
 * without NUL, status 200..599). Nothing is kept on failure.
 */
int hook_delivery_encode(const struct hook_delivery *d, unsigned char **ret, size_t *len);
int hook_delivery_decode(const unsigned char *frame, size_t len, struct hook_delivery *d, const char **why);
int hook_answer_encode(const struct hook_answer *a, unsigned char **ret, size_t *len);
int hook_answer_decode(const unsigned char *frame, size_t len, struct hook_answer *a, const char **why);

/* A delivery's headers as the text of one JSON object (the events row's), malloc'd; NULL when out of memory. */
char *hook_headers_json(const struct hook_header *h, size_t n);

/* The "t" of a decoded JSON message: "routes", "hello", "stats"; NULL if it has none. */
const char *hook_msg_type(const json_t *msg);

/* Builders: a new message (caller decrefs); NULL only when out of memory. */
json_t *hook_msg_routes(const struct hook_route *routes, size_t n, const struct hook_limits *limits);
json_t *hook_msg_hello(long pid);
json_t *hook_msg_stats(const struct hook_stats *s);

/*
 * Parsers: 0 and the filled struct, or -EBADMSG with a static *why when any
 * member is missing, of the wrong type, out of its bounds (names by
 * hook_route_name_check, bodies max_body or 16 MiB, secrets
 * HOOK_SECRET_MIN..MAX) or unknown. Nothing is kept on failure.
 */
int hook_msg_routes_parse(const json_t *msg, struct hook_route_set **ret, const char **why);
int hook_msg_hello_parse(const json_t *msg, long *pid, const char **why);
int hook_msg_stats_parse(const json_t *msg, struct hook_stats *s, const char **why);

#endif
