/*
 * listener: the webhook listener process as fleetd sees it. fleetd (root)
 * binds hooks_listen itself, makes the listener's user and its empty root
 * directory, and runs `fleet-hooksd` (listener/) with the bound socket and
 * one end of a socketpair (hooks/proto.h); it restarts it with backoff when
 * it dies or says something malformed. Down the link go the route table
 * and the HTTP limits; up come verified deliveries, which fleetd records
 * (store/deliveries.c) many per transaction (group commit) and answers only
 * once that transaction is committed: 202 accepted, 200 duplicate or
 * ping/challenge, 429 a queue is full (nothing kept), 503 not stored.
 */
#ifndef FLEET_CORE_LISTENER_H
#define FLEET_CORE_LISTENER_H

#include <stdint.h>
#include <sys/types.h>

#include "hooks/verify.h"

struct fleetd;

enum listener_state { LISTENER_OFF, LISTENER_STARTING, LISTENER_UP, LISTENER_DOWN };
const char *listener_state_to_string(enum listener_state s);

/* What GET /v1/status shows. */
struct listener_status {
	enum listener_state state;
	const char *listen;		/* the address bound, "ADDR:PORT"; NULL when off */
	pid_t pid;			/* 0: none running */
	long restarts;
	int64_t accepted;		/* deliveries answered 2xx since fleetd started */
	int64_t refused;		/* refused by the listener (its counters, over every child) and by fleetd */
	int64_t connections;		/* open now, as the listener last said */
	int64_t refused_by[6];		/* refused, by status: 400, 401 (bad signature), 404, 405, 413, other */
	int64_t dropped;		/* connections the listener closed by a limit (all its children) */
	int64_t sig_failed[HOOK_SOURCE__COUNT];	/* 401s by the route's source: signatures that did not verify */
};

/*
 * After hooks_init: unless hooks_listen is none, make the user and the root
 * directory, bind and listen, and start the listener. 0, or -errno with the
 * reason logged (fleetd does not start then).
 */
int listener_start(struct fleetd *f);
/* The routes (or, at SIGHUP, the limits) changed: send the table again. */
void listener_routes_changed(struct fleetd *f);
void listener_status(struct fleetd *f, struct listener_status *st);
/* SIGTERM the child, wait briefly, SIGKILL; close everything. */
void listener_shutdown(struct fleetd *f);

#endif
