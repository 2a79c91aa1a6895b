/*
 * api: the control API, HTTP/1.1 with JSON bodies on a Unix socket (evhttp).
 * api.c owns the socket, the caller's identity (SO_PEERCRED), routing, body
 * limits, JSON parsing and the one error shape {"error": ..., "code": ...}.
 * Handlers live in api_*.c files and see only struct api_call.
 */
#ifndef FLEET_API_H
#define FLEET_API_H

#include <jansson.h>
#include <stdbool.h>
#include <sys/types.h>

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
	char param_buf[64];	/* own param, param2 and target once deferred */
	char param2_buf[80];
	char target_buf[112];
};

/* Create the socket and start serving on fleetd->base; -errno. */
int api_start(struct fleetd *fleetd, struct api **ret);
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

/* Check the ":name" path segment is a valid agent name; replies 400 and returns false if not. */
bool api_check_name_param(struct api_call *c);

/*
 * Keep the call for a reply after the handler returns (asynchronous
 * backend work). The returned copy owns its strings; api_reply() on it
 * sends the answer, audits, and frees it. libevent keeps the request alive
 * until it is answered, even if the client has gone.
 */
struct api_call *api_defer(struct api_call *c);

/* Write this call's audit record now (a streaming handler does, as it starts). */
void api_audit(struct api_call *c, const char *outcome, const char *detail);

/*
 * Reply with a JSON document (stolen). For a route that changes state this
 * also writes the audit record: uid, action, target, outcome and, for an
 * error, its message.
 */
void api_reply(struct api_call *c, int status, json_t *body);
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


/* Handlers (api_system.c, api_agents.c). */
void api_status_get(struct api_call *c);
void api_audit_get(struct api_call *c);
void api_agents_list(struct api_call *c);
void api_agents_create(struct api_call *c);
void api_agent_get(struct api_call *c);
void api_agent_delete(struct api_call *c);
void api_agent_start(struct api_call *c);
void api_agent_update(struct api_call *c);
void api_agent_health(struct api_call *c);
void api_agent_stop(struct api_call *c);
void api_agent_restart(struct api_call *c);
void api_agent_exec(struct api_call *c);
void api_agent_console(struct api_call *c);
/* True if req is an exec stream in flight (libevent calling back after an error); marks it gone. */
bool api_exec_claim(struct evhttp_request *req);
void api_snapshots_list(struct api_call *c);
void api_snapshot_create(struct api_call *c);
void api_snapshot_delete(struct api_call *c);
void api_snapshot_restore(struct api_call *c);
void api_snapshot_update(struct api_call *c);	/* pinned */

/* api_runs.c */
void api_run_trigger(struct api_call *c);
void api_runs_list(struct api_call *c);
void api_run_get(struct api_call *c);

/* api_images.c */
void api_images_list(struct api_call *c);
void api_image_delete(struct api_call *c);
void api_agent_upgrade(struct api_call *c);

#endif
