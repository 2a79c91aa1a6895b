/*
 * server: the listener's HTTP side on the listening socket fleetd handed
 * over (fd 4), with libevent's evhttp 2.1, which sets no limits by itself.
 * conn.c guards each connection from accept to close (the caps on
 * connections in all and per source address, checked at accept before a
 * byte is read; the absolute deadline; the route's body cap set from the
 * request line before evhttp reads a body; the bytes in flight counted;
 * refusals answered straight on the socket; all of it restarted per
 * request on a kept-alive connection); evhttp parses every request
 * and answers what it cannot parse (400) or what is over a cap (413)
 * itself; http.c serves the requests it dispatches (framing checks on its
 * parsed headers, verification, deliveries up the link, fleetd's answers
 * back, counters).
 */
#ifndef FLEET_LISTENER_SERVER_H
#define FLEET_LISTENER_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <time.h>

#include "hooks/proto.h"

struct event;
struct event_base;
struct evhttp;
struct evhttp_connection;
struct evhttp_request;
struct evconnlistener;
struct bufferevent;
struct link;

#define LSRV_PENDING_MAX 1024		/* deliveries waiting for fleetd's answer; more are answered 503 */
#define LSRV_BODY_BUDGET (256u << 20)	/* bytes read on all connections not yet dispatched, together */
#define LSRV_UNROUTED_BODY 256		/* the body cap until the request line names a route */
/*
 * What one connection may send before its request is dispatched: the head,
 * twice the body cap (chunked framing: sizes and CRLFs) and this. evhttp
 * caps the body, not the framing: a chunk-size line with no end would grow
 * its buffer until the deadline.
 */
#define LSRV_FRAMING_SLACK (64u << 10)
#define LSRV_HEADERS_MAX 128		/* header lines in one request; more are answered 413 */
#define LSRV_LINGER_MAX 64		/* refused connections drained before close, at once */
#define LSRV_LINGER_S 2
#define LSRV_SOURCE_BUCKETS 256

/* Open connections from one address. */
struct lsource {
	struct lsource *next;
	unsigned char addr[16];		/* IPv4 as IPv4-mapped IPv6 */
	long count;
};

struct lconn;
struct pending;

struct lserver {
	struct event_base *base;
	struct evhttp *http;
	struct evconnlistener *lev;
	struct link *link;
	struct hook_route_set *routes;	/* NULL until fleetd's first routes: nothing is served before */
	struct hook_limits limits;
	struct lconn *conns;		/* every open connection */
	long n_conns;
	long n_admitted;		/* of them, those past the accept-time checks: what hooks_max_connections caps */
	struct lsource *sources[LSRV_SOURCE_BUCKETS];
	size_t body_inflight;		/* bytes read on connections not yet dispatched */
	long n_lingering;
	uint64_t idle_clock;		/* counts connections becoming idle: their order */
	struct pending *pending, *pending_tail;	/* oldest first */
	long n_pending;
	uint64_t seq;
	struct hook_stats stats, stats_sent;
	struct event *stats_ev, *resume_ev;
	time_t refused_at;		/* refusals are logged at most once per 10 s */
	long refused_quiet;
	bool draining;			/* the link is down: finish what is open, then drained() */
	void (*drained)(void *arg);
	void *drained_arg;
};

/* ---- conn.c ---- */
/* evhttp's bevcb: a new connection, counted and checked in the same loop pass, before it is read. */
struct bufferevent *lconn_new(struct event_base *base, void *arg);
/*
 * req is complete and goes to http.c's handler: stop its deadline until its
 * answer has gone out (then the connection's guards restart for the next
 * request). false if its connection is none we set up and admitted.
 */
bool lconn_dispatched(struct lserver *srv, struct evhttp_request *req);
/* Close every kept-alive connection waiting for its next request (fleetd is gone). */
void lconn_close_idle(struct lserver *srv);
/* Free every connection's bookkeeping (evhttp_free has closed them). */
void lconn_free_all(struct lserver *srv);

/* ---- http.c ---- */
/* Count a refusal by status (hook_stats.refused) and log it, at most once per 10 s. */
void lsrv_refused(struct lserver *srv, int status, const char *why);
/* The body of an error answer: {"error":msg,"code":code} and a newline; malloc'd. */
char *lsrv_error_body(const char *code, const char *msg);
const char *lsrv_reason(int status);
/* The route of the current table a URI path names ("/hooks/NAME", NAME a valid route name), or NULL. */
const struct hook_route *lsrv_route_path(const struct lserver *srv, const char *path);
/* Called by conn.c when the last connection closed. */
void lsrv_maybe_drained(struct lserver *srv);

/* Serve fd (taken) on base; nothing is accepted before lserver_set_routes. -errno. */
int lserver_start(struct event_base *base, int fd, struct link *link, struct lserver **ret);
/* Take over set (the previous one is freed); the first one starts the serving. */
void lserver_set_routes(struct lserver *srv, struct hook_route_set *set);
/* fleetd's answer to a pending delivery; -ENOENT if none has its seq. */
int lserver_answer(struct lserver *srv, const struct hook_answer *a);
/*
 * fleetd is gone: stop accepting, answer every pending delivery 503, and
 * call drained(arg) once no connection is open any more.
 */
void lserver_link_down(struct lserver *srv, void (*drained)(void *arg), void *arg);
void lserver_free(struct lserver *srv);

#endif
