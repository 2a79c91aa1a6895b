/*
 * conn: the listener's guard on each connection, from accept to close (see
 * server.h). evhttp 2.1 accepts by itself and offers no hook between
 * parsing the headers and reading the body, but it asks for each
 * connection's bufferevent right after accept() (evhttp_set_bevcb): we make
 * that bufferevent, so (1) a setup event made active there runs before the
 * loop polls again, before anything is read: that is where connections are
 * counted, in all and per source; (2) a callback on its input buffer sees
 * every read before evhttp parses it: it counts the bytes against the
 * global budget (LSRV_BODY_BUDGET), and once the request line is in, takes
 * its target (evhttp_uri_parse) and sets the body cap of its route, so
 * evhttp itself answers 413 to a Content-Length over it before reading the
 * body, and stops a chunked body past it. evhttp is the only HTTP parser:
 * nothing here reads headers. (3) a callback on its output buffer sees the
 * status line of an answer evhttp gives by itself (400 on a malformed head,
 * 413) and counts it as a refusal. Our own refusals here (caps, deadline,
 * budget) are answered on the socket directly, in the JSON error shape;
 * the socket is then drained (not read) for LSRV_LINGER_S so the client
 * sees the answer rather than a reset.
 *
 * Keep-alive: evhttp serves the next request on the connection when the
 * answer does not say close (only 2xx do not: every refusal closes). The
 * guards are per request: when an answer has gone out (the request's
 * on_complete callback) the body cap drops back to the unrouted one, the
 * bytes in flight restart from what is buffered, and the deadline restarts:
 * from there while no byte of the next request is in (an idle connection,
 * closed without an answer when it runs out), from the first byte of it
 * otherwise. Idle connections are the first to go when hooks_max_connections
 * is reached. The caps on connections count connections, as before.
 */
#include "listener/server.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "hooks/route.h"

struct lconn {
	struct lconn *next;
	struct lserver *srv;
	struct bufferevent *bev;		/* ours, evhttp's to use and free */
	struct evhttp_connection *evcon;	/* NULL until set up */
	struct event *setup, *deadline, *refuse_ev;
	struct evbuffer_cb_entry *in_cb, *out_cb;
	struct lsource *src;			/* counted there once admitted */
	bool routed;				/* the request line was seen: the body cap is set */
	bool dispatched;			/* the whole request arrived */
	bool refusing;				/* refuse_ev answers and closes it */
	bool evhttp_answered;			/* evhttp refused it by itself: counted once */
	bool idle;				/* kept alive, no byte of its next request yet */
	uint64_t idle_since;			/* srv->idle_clock when it became idle: the oldest goes first */
	int refuse_status;
	const char *refuse_code, *refuse_why;
	size_t inflight;			/* bytes read and not yet dispatched: its part of LSRV_BODY_BUDGET */
	size_t read_max;			/* the most inflight may be (LSRV_FRAMING_SLACK) */
};

/* ---- sources ---- */

static void source_key(int fd, unsigned char key[16])
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	memset(key, 0, 16);
	if (getpeername(fd, (struct sockaddr *)&ss, &len) < 0)
		return;		/* all unknown peers share one count */
	if (ss.ss_family == AF_INET) {
		key[10] = key[11] = 0xff;
		memcpy(key + 12, &((struct sockaddr_in *)&ss)->sin_addr, 4);
	} else if (ss.ss_family == AF_INET6) {
		memcpy(key, &((struct sockaddr_in6 *)&ss)->sin6_addr, 16);
	}
}

static unsigned source_bucket(const unsigned char key[16])
{
	unsigned h = 2166136261u;

	for (int i = 0; i < 16; i++)
		h = (h ^ key[i]) * 16777619u;
	return h % LSRV_SOURCE_BUCKETS;
}

static struct lsource *source_get(struct lserver *srv, const unsigned char key[16], bool create)
{
	struct lsource **pp = &srv->sources[source_bucket(key)];

	for (; *pp; pp = &(*pp)->next)
		if (memcmp((*pp)->addr, key, 16) == 0)
			return *pp;
	if (!create)
		return NULL;
	*pp = xcalloc(1, sizeof(**pp));
	memcpy((*pp)->addr, key, 16);
	return *pp;
}

static void source_put(struct lserver *srv, struct lsource *s)
{
	struct lsource **pp = &srv->sources[source_bucket(s->addr)];

	if (--s->count > 0)
		return;
	while (*pp && *pp != s)
		pp = &(*pp)->next;
	if (*pp)
		*pp = s->next;
	free(s);
}

/* ---- refused connections, drained before close ---- */

struct lingering {
	struct lserver *srv;
	int fd;
	struct event *read, *timer;
};

static void linger_end(struct lingering *lg)
{
	lg->srv->n_lingering--;
	event_free(lg->read);
	event_free(lg->timer);
	close(lg->fd);
	free(lg);
}

static void linger_read(evutil_socket_t fd, short what, void *arg)
{
	char scratch[4096];
	ssize_t n;

	(void)what;
	while ((n = recv(fd, scratch, sizeof(scratch), MSG_DONTWAIT)) > 0)
		;
	if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
		linger_end(arg);
}

static void linger_timeout(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	linger_end(arg);
}

/* Keep the socket of fd open, unread, for a while after evhttp lets go of it. */
static void linger_start(struct lserver *srv, int fd)
{
	struct timeval tv = { LSRV_LINGER_S, 0 };
	struct lingering *lg;
	int dup_fd;

	if (srv->n_lingering >= LSRV_LINGER_MAX || (dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0)
		return;		/* closed at once: under a flood, a reset is what a flooder gets */
	lg = xcalloc(1, sizeof(*lg));
	lg->srv = srv;
	lg->fd = dup_fd;
	lg->read = event_new(srv->base, dup_fd, EV_READ | EV_PERSIST, linger_read, lg);
	lg->timer = evtimer_new(srv->base, linger_timeout, lg);
	if (!lg->read || !lg->timer)
		abort();
	srv->n_lingering++;
	event_add(lg->read, NULL);
	evtimer_add(lg->timer, &tv);
}

/* ---- connections ---- */

static void conn_free(struct lconn *cn)
{
	struct lserver *srv = cn->srv;
	struct lconn **pp = &srv->conns;

	while (*pp && *pp != cn)
		pp = &(*pp)->next;
	if (*pp)
		*pp = cn->next;
	srv->n_conns--;
	if (cn->src) {
		source_put(srv, cn->src);
		srv->n_admitted--;
	}
	srv->body_inflight -= cn->inflight;
	event_free(cn->setup);
	event_free(cn->deadline);
	event_free(cn->refuse_ev);
	free(cn);
	lsrv_maybe_drained(srv);
}

/* evhttp frees the connection (after its answer, on an error, or because we asked). */
static void conn_closed(struct evhttp_connection *evcon, void *arg)
{
	struct lconn *cn = arg;

	(void)evcon;
	/* The bufferevent outlives this call a little: nothing of cn may be reached from it. */
	evbuffer_remove_cb_entry(bufferevent_get_input(cn->bev), cn->in_cb);
	evbuffer_remove_cb_entry(bufferevent_get_output(cn->bev), cn->out_cb);
	conn_free(cn);
}

/*
 * Answer on the socket itself and let evhttp go: nothing more of the
 * request is read. linger: keep the socket open (drained) for a moment, so
 * a client still sending sees the answer.
 */
static void conn_answer_raw(struct lconn *cn, int status, const char *code, const char *why, bool linger)
{
	int fd = bufferevent_getfd(cn->bev);
	char *body = lsrv_error_body(code, why);
	char *resp = xasprintf("HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
			       "%sConnection: close\r\n\r\n%s", status, lsrv_reason(status), strlen(body),
			       status == 405 ? "Allow: POST\r\n" : "", body);

	/* A fresh socket's send buffer takes this at once; if not, the client sees the close. */
	(void)!send(fd, resp, strlen(resp), MSG_DONTWAIT | MSG_NOSIGNAL);
	(void)shutdown(fd, SHUT_WR);
	free(resp);
	free(body);
	lsrv_refused(cn->srv, status, why);
	bufferevent_disable(cn->bev, EV_READ | EV_WRITE);
	if (linger)
		linger_start(cn->srv, fd);
	evhttp_connection_free(cn->evcon);	/* conn_closed frees cn */
}

static void conn_refuse_cb(evutil_socket_t unused, short what, void *arg)
{
	struct lconn *cn = arg;

	(void)unused;
	(void)what;
	conn_answer_raw(cn, cn->refuse_status, cn->refuse_code, cn->refuse_why, true);
}

/* The most a connection may send before dispatch, for a body cap (see LSRV_FRAMING_SLACK). */
static size_t read_max(const struct lserver *srv, size_t body_cap)
{
	return (size_t)srv->limits.header_max + 2 * body_cap + LSRV_FRAMING_SLACK;
}

/*
 * A connection whose request waits for fleetd's answer is not read (evhttp
 * reads nothing until it has answered), so a client that went away is
 * still counted. At a cap, before refusing, look: one whose peer has closed
 * (EOF or a reset, nothing pipelined) stops counting; it is still answered
 * (into the void) and freed as usual. Only verified deliveries are pending
 * (at most LSRV_PENDING_MAX), so this cannot be used to open more than
 * that. src: only that source's; NULL: any. Returns how many stopped counting.
 */
static long conn_uncount_gone(struct lserver *srv, const struct lsource *src)
{
	long n = 0;

	for (struct lconn *cn = srv->conns; cn; cn = cn->next) {
		char c;
		ssize_t r;

		if (!cn->src || !cn->dispatched || (src && cn->src != src))
			continue;
		r = recv(bufferevent_getfd(cn->bev), &c, 1, MSG_PEEK | MSG_DONTWAIT);
		if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
			source_put(srv, cn->src);	/* may free it: src is not used after a match */
			cn->src = NULL;
			srv->n_admitted--;
			n++;
			if (src)
				break;	/* room for one: the source may be gone with its count */
		}
	}
	return n;
}

/*
 * At hooks_max_connections: close the connection idle the longest (kept
 * alive, waiting for a request that has not begun), so clients that hold
 * connections open cannot keep new senders out. false if none is idle.
 */
static bool conn_evict_idle(struct lserver *srv)
{
	struct lconn *victim = NULL;

	for (struct lconn *cn = srv->conns; cn; cn = cn->next)
		if (cn->idle && cn->src && !cn->refusing && (!victim || cn->idle_since < victim->idle_since))
			victim = cn;
	if (!victim)
		return false;
	evhttp_connection_free(victim->evcon);	/* conn_closed frees it and uncounts it */
	return true;
}

/* Right after accept, before any read: is there room for it. */
static void conn_setup(evutil_socket_t unused, short what, void *arg)
{
	struct lconn *cn = arg;
	struct lserver *srv = cn->srv;
	struct timeval tv = { srv->limits.request_timeout_s, 0 };
	unsigned char key[16];
	struct lsource *src;
	void *evcon = NULL;

	(void)unused;
	(void)what;
	bufferevent_getcb(cn->bev, NULL, NULL, NULL, &evcon);
	if (!evcon) {
		/* evhttp could not set the connection up (out of memory) and has dropped it. */
		log_error("http: a connection could not be set up");
		conn_free(cn);
		return;
	}
	cn->evcon = evcon;
	evhttp_connection_set_closecb(cn->evcon, conn_closed, cn);
	/* Until the request line names a route: no more body than an answer of ours needs (404, 405). */
	evhttp_connection_set_max_body_size(cn->evcon, LSRV_UNROUTED_BODY);
	cn->read_max = read_max(srv, LSRV_UNROUTED_BODY);
	if (srv->draining || !srv->routes) {
		srv->stats.dropped++;
		conn_answer_raw(cn, 503, "unavailable", "fleetd is not reachable; try again later", false);
		return;
	}
	/*
	 * Admitted ones, not accepted ones: a burst is accepted in one go before
	 * any is set up, and counting those would refuse the first of it.
	 */
	if (srv->n_admitted >= srv->limits.max_connections && !conn_evict_idle(srv) && !conn_uncount_gone(srv, NULL)) {
		/* Closed at once, no linger: when all are taken, holding more open is what a flood wants. */
		srv->stats.dropped++;
		conn_answer_raw(cn, 503, "busy", "too many connections (hooks_max_connections); try again later", false);
		return;
	}
	source_key(bufferevent_getfd(cn->bev), key);
	src = source_get(srv, key, false);
	if (src && src->count >= srv->limits.max_per_source && conn_uncount_gone(srv, src))
		src = source_get(srv, key, false);	/* its count went down; it may be gone */
	if (src && src->count >= srv->limits.max_per_source) {
		srv->stats.dropped++;
		conn_answer_raw(cn, 503, "busy", "too many connections from this address (hooks_max_per_source)", true);
		return;
	}
	cn->src = src ? src : source_get(srv, key, true);
	cn->src->count++;
	srv->n_admitted++;
	evtimer_add(cn->deadline, &tv);
}

/*
 * The whole request did not arrive in time from accept, or from its first
 * byte on a kept-alive connection (a slow or stalled client): 408 and
 * close. An idle kept-alive connection is just closed.
 */
static void conn_deadline(evutil_socket_t unused, short what, void *arg)
{
	struct lconn *cn = arg;

	(void)unused;
	(void)what;
	if (cn->dispatched || cn->refusing)
		return;
	if (cn->idle) {
		/* No request in hooks_request_timeout seconds since the last answer: closed, nothing to answer. */
		evhttp_connection_free(cn->evcon);	/* conn_closed frees cn */
		return;
	}
	cn->srv->stats.dropped++;
	conn_answer_raw(cn, 408, "request_timeout",
			"the whole request must arrive within hooks_request_timeout seconds of connecting", false);
}

/* Refuse from the input callback: evhttp must not see more, and cn may not be freed under it: later, in this loop pass. */
static void conn_refuse_later(struct lconn *cn, struct evbuffer *buf, int status, const char *code, const char *why)
{
	cn->refusing = true;
	cn->refuse_status = status;
	cn->refuse_code = code;
	cn->refuse_why = why;
	evbuffer_drain(buf, evbuffer_get_length(buf));
	bufferevent_disable(cn->bev, EV_READ);
	event_active(cn->refuse_ev, EV_TIMEOUT, 1);
}

/*
 * The request line is in the buffer (evhttp has not parsed it yet): the
 * body cap of the route its target names, as api/server.c does. Any other
 * line keeps LSRV_UNROUTED_BODY; evhttp answers it 400, or handle() 404.
 */
static void conn_route(struct lconn *cn, struct evbuffer *buf)
{
	size_t eol_len = 0;
	struct evbuffer_ptr eol = evbuffer_search_eol(buf, NULL, &eol_len, EVBUFFER_EOL_CRLF);
	const struct hook_route *route;
	struct evhttp_uri *uri;
	char *line, *target, *end;

	if (eol.pos < 0)
		return;		/* not yet; evhttp refuses a line longer than hooks_header_max_bytes */
	cn->routed = true;
	if ((size_t)eol.pos > (size_t)cn->srv->limits.header_max)
		return;
	line = xmalloc((size_t)eol.pos + 1);
	if (evbuffer_copyout(buf, line, (size_t)eol.pos) == eol.pos) {
		line[eol.pos] = '\0';
		/* METHOD SP TARGET SP VERSION: the target between the first two spaces, parsed by evhttp. */
		if ((target = strchr(line, ' ')) && (end = strchr(++target, ' '))) {
			*end = '\0';
			if ((uri = evhttp_uri_parse(target))) {
				if ((route = lsrv_route_path(cn->srv, evhttp_uri_get_path(uri)))) {
					evhttp_connection_set_max_body_size(cn->evcon, (ev_ssize_t)route->max_body);
					cn->read_max = read_max(cn->srv, (size_t)route->max_body);
				}
				evhttp_uri_free(uri);
			}
		}
	}
	free(line);
}

/* Bytes arrived, before evhttp parses them: counted against the budget; the route's body cap once the request line is in. */
static void conn_input(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
	struct lconn *cn = arg;
	struct lserver *srv = cn->srv;

	if (!cn->evcon || cn->refusing || info->n_added == 0)
		return;
	if (cn->idle) {
		/* The next request on a kept-alive connection begins: its own absolute deadline. */
		struct timeval tv = { srv->limits.request_timeout_s, 0 };

		cn->idle = false;
		evtimer_add(cn->deadline, &tv);
	}
	/* While a request is dispatched, bytes are the next one's (pipelined), under the same read_max. */
	cn->inflight += info->n_added;
	srv->body_inflight += info->n_added;
	if (srv->body_inflight > LSRV_BODY_BUDGET) {
		/* The one that pushed the sum over: the others, already counted, go on. */
		conn_refuse_later(cn, buf, 503, "busy", "too many request bytes in flight; try again later");
		return;
	}
	if (!cn->routed && !cn->dispatched)
		conn_route(cn, buf);
	if (cn->inflight > cn->read_max)
		conn_refuse_later(cn, buf, 413, "too_large",
				  "more bytes than this route's body and its chunked framing need");
}

/*
 * evhttp writes an answer: one it gives by itself, before any request was
 * dispatched to us (400 for a head it cannot parse or over
 * hooks_header_max_bytes, 413 over the route's body cap), is counted as a
 * refusal from its status line, which evhttp writes in one piece.
 */
static void conn_output(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
	struct lconn *cn = arg;
	struct evbuffer_ptr pos;
	char line[16];
	int status = 0;

	if (cn->dispatched || cn->evhttp_answered || info->n_added < 12 ||
	    evbuffer_ptr_set(buf, &pos, evbuffer_get_length(buf) - info->n_added, EVBUFFER_PTR_SET) < 0 ||
	    evbuffer_copyout_from(buf, &pos, line, 12) != 12)
		return;
	line[12] = '\0';
	if (sscanf(line, "HTTP/1.%*1d %3d", &status) != 1 || status < 400)
		return;		/* 100 Continue, or a header line */
	cn->evhttp_answered = true;
	lsrv_refused(cn->srv, status, "evhttp refused a malformed or oversized request");
}

struct bufferevent *lconn_new(struct event_base *base, void *arg)
{
	struct lserver *srv = arg;
	struct lconn *cn = xcalloc(1, sizeof(*cn));

	cn->srv = srv;
	cn->bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
	cn->setup = event_new(base, -1, 0, conn_setup, cn);
	cn->deadline = evtimer_new(base, conn_deadline, cn);
	cn->refuse_ev = event_new(base, -1, 0, conn_refuse_cb, cn);
	if (!cn->bev || !cn->setup || !cn->deadline || !cn->refuse_ev ||
	    !(cn->in_cb = evbuffer_add_cb(bufferevent_get_input(cn->bev), conn_input, cn)) ||
	    !(cn->out_cb = evbuffer_add_cb(bufferevent_get_output(cn->bev), conn_output, cn)))
		abort();
	cn->next = srv->conns;
	srv->conns = cn;
	srv->n_conns++;
	/* Runs in this pass of the loop, after evhttp has the connection and before anything is read. */
	event_active(cn->setup, EV_TIMEOUT, 1);
	return cn->bev;
}

/*
 * The answer to cn's request has gone out (evhttp's on_complete, before it
 * closes the connection or reads the next request on it): every guard is
 * set up again for the next request, as at accept.
 */
static void conn_request_done(struct evhttp_request *req, void *arg)
{
	struct lconn *cn = arg;
	struct lserver *srv = cn->srv;
	struct evbuffer *buf = bufferevent_get_input(cn->bev);
	struct timeval tv = { srv->limits.request_timeout_s, 0 };

	(void)req;
	if (cn->refusing)
		return;
	cn->dispatched = false;
	cn->routed = false;
	cn->evhttp_answered = false;
	evhttp_connection_set_max_body_size(cn->evcon, LSRV_UNROUTED_BODY);
	cn->read_max = read_max(srv, LSRV_UNROUTED_BODY);
	/* Pipelined bytes, counted in inflight as they came: the next request has begun. */
	cn->idle = evbuffer_get_length(buf) == 0;
	cn->idle_since = ++srv->idle_clock;
	evtimer_add(cn->deadline, &tv);
	if (!cn->idle) {
		conn_route(cn, buf);
		if (cn->inflight > cn->read_max)
			conn_refuse_later(cn, buf, 413, "too_large",
					  "more bytes than this route's body and its chunked framing need");
	}
}

bool lconn_dispatched(struct lserver *srv, struct evhttp_request *req)
{
	struct evhttp_connection *evcon = evhttp_request_get_connection(req);

	for (struct lconn *cn = srv->conns; evcon && cn; cn = cn->next)
		if (cn->evcon == evcon) {
			if (cn->refusing || !cn->src)
				return false;
			cn->dispatched = true;	/* the request is in: no deadline for fleetd's answer */
			evtimer_del(cn->deadline);
			srv->body_inflight -= cn->inflight;	/* bounded by its route's cap from here */
			cn->inflight = 0;
			evhttp_request_set_on_complete_cb(req, conn_request_done, cn);
			return true;
		}
	return false;
}

void lconn_close_idle(struct lserver *srv)
{
	struct lconn *cn = srv->conns, *next;

	for (; cn; cn = next) {
		next = cn->next;	/* cn may be freed below; the others stay */
		if (cn->idle && cn->evcon && !cn->refusing)
			evhttp_connection_free(cn->evcon);
	}
}

void lconn_free_all(struct lserver *srv)
{
	while (srv->conns)
		conn_free(srv->conns);
}
