/*
 * conn: the listener's guard on each connection, from accept to close (see
 * server.h). evhttp 2.1 accepts by itself and offers no hook between
 * parsing the headers and reading the body, but it asks for each
 * connection's bufferevent right after accept() (evhttp_set_bevcb): we make
 * that bufferevent, so (1) a setup event made active there runs before the
 * loop polls again, before anything is read: that is where connections are
 * counted, in all and per source; (2) a callback on its input buffer sees
 * every byte before evhttp does: it keeps a copy of the head, and once the
 * head is complete checks it strictly (listener/head.c) and sets the body
 * cap of its route, or refuses the request before evhttp reads on. A
 * refusal is answered on the socket directly, in the JSON error shape;
 * the socket is then drained (not read) for LSRV_LINGER_S so the client
 * sees the answer rather than a reset.
 */
#include "listener/server.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "hooks/route.h"
#include "listener/head.h"

struct lconn {
	struct lconn *next;
	struct lserver *srv;
	struct bufferevent *bev;		/* ours, evhttp's to use and free */
	struct evhttp_connection *evcon;	/* NULL until set up */
	struct event *setup, *deadline, *refuse_ev;
	struct lsource *src;			/* counted there once admitted */
	char *head;				/* the head so far (at most header_max bytes) */
	size_t head_len;
	bool head_done;				/* checked, body cap set */
	bool dispatched;			/* the whole request arrived */
	bool refusing;				/* refuse_ev answers and closes it */
	int refuse_status;
	const char *refuse_code, *refuse_why;
	size_t reserved;			/* body bytes claimed from LSRV_BODY_BUDGET */
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
	if (cn->src)
		source_put(srv, cn->src);
	srv->body_reserved -= cn->reserved;
	event_free(cn->setup);
	event_free(cn->deadline);
	event_free(cn->refuse_ev);
	free(cn->head);
	free(cn);
	lsrv_maybe_drained(srv);
}

/* evhttp frees the connection (after its answer, on an error, or because we asked). */
static void conn_closed(struct evhttp_connection *evcon, void *arg)
{
	(void)evcon;
	conn_free(arg);
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
	/* No body until the head is checked and its route known. */
	evhttp_connection_set_max_body_size(cn->evcon, 0);
	if (srv->draining || !srv->routes) {
		srv->stats.dropped++;
		conn_answer_raw(cn, 503, "unavailable", "fleetd is not reachable; try again later", false);
		return;
	}
	if (srv->n_conns > srv->limits.max_connections) {
		/* Closed at once, no linger: when all are taken, holding more open is what a flood wants. */
		srv->stats.dropped++;
		conn_answer_raw(cn, 503, "busy", "too many connections (hooks_max_connections); try again later", false);
		return;
	}
	source_key(bufferevent_getfd(cn->bev), key);
	src = source_get(srv, key, false);
	if (src && src->count >= srv->limits.max_per_source) {
		srv->stats.dropped++;
		conn_answer_raw(cn, 503, "busy", "too many connections from this address (hooks_max_per_source)", true);
		return;
	}
	cn->src = src ? src : source_get(srv, key, true);
	cn->src->count++;
	evtimer_add(cn->deadline, &tv);
}

/* The whole request did not arrive in time from accept (a slow or stalled client): 408 and close. */
static void conn_deadline(evutil_socket_t unused, short what, void *arg)
{
	struct lconn *cn = arg;

	(void)unused;
	(void)what;
	if (cn->dispatched || cn->refusing)
		return;
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

/* The head is complete: check it, then admit the body its route allows, or refuse. */
static void conn_head(struct lconn *cn, struct evbuffer *buf, size_t end)
{
	struct lserver *srv = cn->srv;
	char name[HOOK_ROUTE_NAME_MAX + 1];
	const struct hook_route *route;
	struct lhead h;
	size_t want;

	cn->head_done = true;
	if (lhead_parse(cn->head, end, &h) < 0) {
		conn_refuse_later(cn, buf, h.status, h.code, h.why);
		return;
	}
	if (strcmp(h.method, "POST") != 0) {
		conn_refuse_later(cn, buf, 405, "method_not_allowed", "webhooks are delivered with POST");
		return;
	}
	if (!lhead_route_name(h.target, name) || !(route = lsrv_route(srv, name))) {
		conn_refuse_later(cn, buf, 404, "not_found", "no such webhook route");
		return;
	}
	if (h.content_length > route->max_body) {
		conn_refuse_later(cn, buf, 413, "too_large", "the body is larger than this route accepts");
		return;
	}
	want = h.chunked ? (size_t)route->max_body : h.content_length > 0 ? (size_t)h.content_length : 0;
	if (srv->body_reserved + want > LSRV_BODY_BUDGET) {
		conn_refuse_later(cn, buf, 503, "busy", "too many request bodies in flight; try again later");
		return;
	}
	srv->body_reserved += want;
	cn->reserved = want;
	evhttp_connection_set_max_body_size(cn->evcon, route->max_body);
	free(cn->head);		/* done with: evhttp parses its own */
	cn->head = NULL;
}

/* Bytes arrived, before evhttp sees them: copy the head until it is complete. */
static void conn_input(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
	struct lconn *cn = arg;
	size_t max = (size_t)cn->srv->limits.header_max, take, scan_from, end;
	struct evbuffer_ptr pos;

	if (!cn->evcon || cn->head_done || cn->refusing || info->n_added == 0)
		return;
	if (!cn->head)
		cn->head = xmalloc(max + 1);
	take = info->n_added < max - cn->head_len ? info->n_added : max - cn->head_len;
	if (evbuffer_ptr_set(buf, &pos, evbuffer_get_length(buf) - info->n_added, EVBUFFER_PTR_SET) < 0 ||
	    evbuffer_copyout_from(buf, &pos, cn->head + cn->head_len, take) != (ev_ssize_t)take) {
		conn_refuse_later(cn, buf, 400, "bad_request", "the request could not be read");
		return;
	}
	/* Only the new bytes (and the 3 before them) can complete the end of the head. */
	scan_from = cn->head_len > 3 ? cn->head_len - 3 : 0;
	cn->head_len += take;
	end = lhead_end(cn->head + scan_from, cn->head_len - scan_from);
	if (end) {
		conn_head(cn, buf, scan_from + end);
		return;
	}
	if (cn->head_len >= max)
		conn_refuse_later(cn, buf, 413, "headers_too_large",
				  "the request line and headers are larger than hooks_header_max_bytes");
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
	    !evbuffer_add_cb(bufferevent_get_input(cn->bev), conn_input, cn))
		abort();
	cn->next = srv->conns;
	srv->conns = cn;
	srv->n_conns++;
	/* Runs in this pass of the loop, after evhttp has the connection and before anything is read. */
	event_active(cn->setup, EV_TIMEOUT, 1);
	return cn->bev;
}

bool lconn_dispatched(struct lserver *srv, struct evhttp_connection *evcon)
{
	for (struct lconn *cn = srv->conns; cn; cn = cn->next)
		if (cn->evcon == evcon) {
			cn->dispatched = true;	/* the request is in: no deadline for fleetd's answer */
			evtimer_del(cn->deadline);
			return cn->head_done && !cn->refusing && cn->src;
		}
	return false;
}

void lconn_free_all(struct lserver *srv)
{
	while (srv->conns)
		conn_free(srv->conns);
}
