/*
 * proto: what fleetd and its webhook listener (daemon/fleet-hooksd, built
 * from listener/) say to each other over their socketpair. The listener is
 * unprivileged and faces the internet, so fleetd treats everything it sends
 * as hostile: every message is bounded and checked here, by one parser on
 * both sides.
 *
 * Framing: a 4-byte big-endian length, then that many bytes of one JSON
 * object (jansson) with a "t" member naming its type. Binary data (bodies,
 * secrets) is base64. Messages:
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
 *     stats     counters (refusals by status, connections), now and then.
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

#define HOOK_FRAME_HEAD 4u		/* the length prefix */
#define HOOK_FRAME_MAX (24u << 20)	/* a 16 MiB body in base64 plus its JSON */
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
 * A verified delivery, as the listener sends it up. Owns its strings
 * (hook_delivery_clear frees them). headers is a JSON object's text of the
 * headers a run may see (never Authorization, Cookie or a route's secret
 * header); body is the raw body.
 */
struct hook_delivery {
	uint64_t seq;			/* the listener's number for the request; the answer carries it */
	char *route;
	char *delivery_id;
	char *event_type;		/* may be NULL */
	bool no_run;			/* stored and answered, queues nothing (github ping, slack url_verification) */
	int64_t received_at;		/* unix seconds */
	char *headers;
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
};

/*
 * Framing. hook_frame_need: how many bytes the frame starting at buf needs in
 * all (head included) once HOOK_FRAME_HEAD bytes are there; 0 if fewer are;
 * -EMSGSIZE if it claims more than HOOK_FRAME_MAX or less than 2.
 * hook_frame_encode: msg as one frame (*ret malloc'd, caller frees), or
 * -ENOMEM / -EMSGSIZE. hook_frame_decode: the JSON object of one whole
 * frame's payload (after the head), or -EBADMSG with *why.
 */
long hook_frame_need(const unsigned char *buf, size_t avail);
int hook_frame_encode(const json_t *msg, unsigned char **ret, size_t *len);
int hook_frame_decode(const unsigned char *payload, size_t len, json_t **ret, const char **why);

/* The "t" of a decoded message: "routes", "answer", "hello", "delivery", "stats"; NULL if it has none. */
const char *hook_msg_type(const json_t *msg);

/* Builders: a new message (caller decrefs); NULL only when out of memory. */
json_t *hook_msg_routes(const struct hook_route *routes, size_t n, const struct hook_limits *limits);
json_t *hook_msg_answer(const struct hook_answer *a);
json_t *hook_msg_hello(long pid);
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
int hook_msg_delivery_parse(const json_t *msg, struct hook_delivery *d, const char **why);
int hook_msg_stats_parse(const json_t *msg, struct hook_stats *s, const char **why);

#endif
