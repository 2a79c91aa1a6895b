/*
 * api server: the control API, HTTP/1.1 with JSON bodies on a Unix socket
 * (evhttp). server.c owns the socket, the caller's identity (SO_PEERCRED),
 * routing, body limits, JSON parsing and the one error shape
 * {"error": ..., "code": ...}. Handlers live in the other api/ files, see
 * only struct api_call and are found through the route table routes.c
 * hands to api_start(): calls go one way, handlers to the server.
 */
#ifndef FLEET_API_H
#define FLEET_API_H

#include <jansson.h>
#include <stdbool.h>
#include <sys/types.h>

#include "common/names.h"
#include "common/util.h"

struct fleetd;
struct api;
struct evhttp_request;

struct api_call {
	struct fleetd *fleetd;
	struct evhttp_request *req;
	uid_t uid;		/* from SO_PEERCRED, never from the payload */
	pid_t pid;
	const char *param;	/* the ":name" path segment, decoded, or NULL */
	const char *param2;	/* a second one (":snap"), or NULL */
	const char *action;	/* audit action of this route, or NULL when read-only */
	const char *target;	/* what the audit record names; defaults to param */
	size_t max_body;	/* body cap of this route */
	bool replied;		/* set by api_reply, or by a handler that streams its answer */
	bool deferred;		/* heap copy from api_defer(); api_reply frees it */
	bool orphaned;		/* answered 503 by api_stop (fleetd stopping): api_reply only frees it */
	struct api_call *next_deferred;	/* the server's list of deferred calls not answered yet */
	char param_buf[64];	/* own param, param2 and target once deferred */
	char param2_buf[MEMORY_KEY_MAX + 8];	/* a snapshot name, a memory key (names.h) */
	char target_buf[112];
};

/*
 * A route: method and pattern (a ":name" segment matches one path segment,
 * decoded into param, then param2), its handler, the audit action of a call
 * that changes state (NULL: read-only), and its body cap: 0 for the
 * configured max_body_bytes, API_NO_BODY when it takes none, else bytes.
 * The table is routes.c's; this file knows no handler.
 */
struct api_route {
	const char *method;
	const char *pattern;
	void (*handler)(struct api_call *c);
	const char *action;
	size_t max_body;
};
/* GET, DELETE and unknown routes take no body; the HTTP layer refuses one larger than this. */
#define API_NO_BODY 1024u

/* Create the socket and start serving routes (n of them, kept, not copied) on fleetd->base; -errno. */
int api_start(struct fleetd *fleetd, const struct api_route *routes, size_t n, struct api **ret);
void api_stop(struct api *api);
/* Apply reloadable settings (socket group, body cap, connection cap, request timeout). */
void api_reload(struct api *api);
/* Connections open now, this one included (for GET /v1/status). */
long api_connections(const struct api *api);

/*
 * Be told when the call's connection closes (the client went away). Use
 * this, not evhttp_connection_set_closecb(): api.c needs the connection's
 * close itself (to count connections) and passes it on. cb NULL: no more.
 */
struct evhttp_connection;
void api_conn_set_closecb(struct evhttp_connection *evcon, void (*cb)(struct evhttp_connection *, void *),
			  void *arg);

/*
 * A reply that outlives its handler (a stream: evhttp_send_reply_start,
 * chunks, evhttp_send_reply_end). On some write errors libevent 2.1 calls
 * the request callback again for a request in flight; the server then
 * calls failed(arg) once, in place of routing it, and the stream ends
 * itself as it does when the client goes away. st is the caller's (it
 * lives as long as the stream); api_stream_end() before it is freed.
 */
struct api_stream {
	struct evhttp_request *req;
	void (*failed)(void *arg);
	void *arg;
	bool failed_called;
	struct api_stream *next;	/* the server's list of streams in flight */
};
void api_stream_begin(struct api_call *c, struct api_stream *st, void (*failed)(void *arg), void *arg);
void api_stream_end(struct api_stream *st);


/*
 * Keep the call for a reply after the handler returns (asynchronous
 * backend work). The returned copy owns its strings; api_reply() on it
 * sends the answer, audits, and frees it. libevent keeps the request alive
 * until it is answered, even if the client has gone. One still unanswered
 * when fleetd stops is answered 503 by api_stop; its owner's later
 * api_reply then only frees it, and api_free_orphans() frees the ones
 * whose owners never answer.
 */
struct api_call *api_defer(struct api_call *c);
/*
 * Free the calls api_stop answered that their owners never answered: at
 * exit, once no owner (a backend's worker) can answer any more.
 */
void api_free_orphans(void);

/* Write this call's audit record now (a streaming handler does, as it starts). */
void api_audit(struct api_call *c, const char *outcome, const char *detail);
/* The same without its fsync (db_audit_add_unsynced): an exec's, written beside the command's start. */
void api_audit_unsynced(struct api_call *c, const char *outcome, const char *detail);

/*
 * Reply with a JSON document (stolen). For a route that changes state this
 * also writes the audit record: uid, action, target, outcome and, for an
 * error, its message.
 */
void api_reply(struct api_call *c, int status, json_t *body);
/*
 * Reply with len bytes of data of type ctype (a memory value, an archive):
 * audited as api_reply() is (outcome ok); frees a deferred call.
 */
void api_reply_raw(struct api_call *c, int status, const char *ctype, const void *data, size_t len);
/*
 * The request body as it is, of any type (a memory value, an archive):
 * *len bytes, valid until the reply. Replies 413 and returns NULL when it
 * is over the route's cap.
 */
const void *api_body_raw(struct api_call *c, size_t *len);
/* Reply with {"error": message, "code": code}. */
void api_error(struct api_call *c, int status, const char *code, const char *fmt, ...) _printf_(4, 5);
/* Reply with an error derived from a negative errno. */
void api_error_errno(struct api_call *c, int r, const char *fmt, ...) _printf_(3, 4);

/* Copy query parameter key into buf; false when absent or longer than len - 1. */
bool api_query(struct api_call *c, const char *key, char *buf, size_t len);

/*
 * Parse the request body as a JSON object whose fields must all appear in
 * spec (NULL-terminated "name:type" strings, type one of s (string),
 * i (integer), b (boolean), a (array), o (object)). Replies
 * with 400/415 and returns NULL on any problem.
 */
json_t *api_body_object(struct api_call *c, const char *const *spec);

#endif
