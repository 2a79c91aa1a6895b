/*
 * proto: what fleetd and its webhook listener (daemon/fleet-hooksd, built
 * from listener/) say to each other over their socketpair. The listener is
 * unprivileged and faces the internet, so fleetd treats everything it sends
 * as hostile: every message is bounded and checked here, by one parser on
 * both sides.
 *
 * Framing: an 8-byte head, two big-endian 4-byte lengths: of the rest of
 * the frame, and of its JSON part; then one JSON object (jansson) with a
 * "t" member naming its type; then the frame's tail, raw bytes: a
 * delivery's body (its length is in the JSON too, and must match), so the
 * body is neither base64'd nor escaped; no other message has a tail.
 * Secrets are base64 in the JSON. Messages:
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
 * A verified delivery, as the listener sends it up. Owns its strings and a
 * reference to headers (hook_delivery_clear frees them). headers is a JSON
 * object of the headers a run may see (never Authorization, Cookie or a
 * route's secret header), or NULL for none; body is the raw body.
 */
struct hook_delivery {
	uint64_t seq;			/* the listener's number for the request; the answer carries it */
	char *route;
	char *delivery_id;
	char *event_type;		/* may be NULL */
	bool no_run;			/* stored and answered, queues nothing (github ping, slack url_verification) */
	int64_t received_at;		/* unix seconds */
	json_t *headers;
	unsigned char *body;
	size_t body_len;
	char *reply_body;		/* what to answer on success instead of the default (slack's challenge), or NULL */
	char *reply_type;
};
void hook_delivery_clear(struct hook_delivery *d);

/* fleetd's answer to delivery seq. body and content_type may be NULL (an empty body). */
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

/*
 * Framing. hook_frame_need: how many bytes the frame starting at buf needs in
 * all (head included) once HOOK_FRAME_HEAD bytes are there; 0 if fewer are;
 * -EMSGSIZE if it claims more than HOOK_FRAME_MAX after the head, a JSON
 * part under 2 bytes or longer than the frame. hook_frame_encode: msg and
 * tail_len bytes of tail (NULL when 0) as one frame (*ret malloc'd, caller
 * frees), or -EINVAL / -ENOMEM / -EMSGSIZE. hook_frame_decode: of one whole
 * frame (len bytes, head included, as hook_frame_need said), the JSON
 * object (caller decrefs) and its tail (pointing into frame), or -EBADMSG
 * with *why (a tail on a message other than a delivery is refused).
 */
long hook_frame_need(const unsigned char *buf, size_t avail);
int hook_frame_encode(const json_t *msg, const void *tail, size_t tail_len, unsigned char **ret, size_t *len);
int hook_frame_decode(const unsigned char *frame, size_t len, json_t **ret, const unsigned char **tail,
		      size_t *tail_len, const char **why);

/* The "t" of a decoded message: "routes", "answer", "hello", "delivery", "stats"; NULL if it has none. */
const char *hook_msg_type(const json_t *msg);

/* Builders: a new message (caller decrefs); NULL only when out of memory. */
json_t *hook_msg_routes(const struct hook_route *routes, size_t n, const struct hook_limits *limits);
json_t *hook_msg_answer(const struct hook_answer *a);
json_t *hook_msg_hello(long pid);
/* A delivery's JSON part: its body (d->body_len bytes) is the frame's tail. */
json_t *hook_msg_delivery(const struct hook_delivery *d);
json_t *hook_msg_stats(const struct hook_stats *s);

/*
 * Parsers: 0 and the filled struct, or -EBADMSG with a static *why when any
 * member is missing, of the wrong type, out of its bounds (names by
 * hook_route_name_check, ids and types HV_ID_MAX, bodies max_body or 16 MiB,
 * secrets HOOK_SECRET_MIN..MAX) or unknown. Nothing is kept on failure.
 */
int hook_msg_routes_parse(const json_t *msg, struct hook_route_set **ret, const char **why);
int hook_msg_answer_parse(const json_t *msg, struct hook_answer *a, const char **why);
int hook_msg_hello_parse(const json_t *msg, long *pid, const char **why);
/* body: the frame's tail (body_len bytes, copied), which must be as long as the JSON says. */
int hook_msg_delivery_parse(const json_t *msg, const unsigned char *body, size_t body_len, struct hook_delivery *d,
			    const char **why);
int hook_msg_stats_parse(const json_t *msg, struct hook_stats *s, const char **why);

#endif
