/*
 * http: the listener's requests, once conn.c has admitted them (see
 * server.h): the signature checked with hook_verify(), a verified delivery
 * sent up the link and held (pending, by seq) until fleetd answers, and
 * that answer given to the sender exactly. Never a 2xx but fleetd's.
 */
#include "listener/server.h"

#include <sys/queue.h>	/* before event2/ headers: TAILQ_FOREACH over evhttp's headers */

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/log.h"
#include "common/util.h"
#include "hooks/route.h"
#include "listener/link.h"

#define HEADER_VALUE_MAX 8192	/* longer values are not passed on (proto.c refuses them) */

/* A verified delivery waiting for fleetd's answer. */
struct pending {
	struct pending *next;
	uint64_t seq;
	struct evhttp_request *req;	/* evhttp's; answering it frees it, even if its client left */
};

const char *lsrv_reason(int status)
{
	switch (status) {
	case 200: return "OK";
	case 202: return "Accepted";
	case 400: return "Bad Request";
	case 401: return "Unauthorized";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 408: return "Request Timeout";
	case 413: return "Payload Too Large";
	case 429: return "Too Many Requests";
	case 500: return "Internal Server Error";
	case 503: return "Service Unavailable";
	default: return status < 300 ? "OK" : status < 500 ? "Client Error" : "Server Error";
	}
}

char *lsrv_error_body(const char *code, const char *msg)
{
	json_t *j = json_pack("{s:s, s:s}", "error", msg, "code", code);
	char *text = j ? json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
	char *out;

	if (!text)
		abort();
	out = xasprintf("%s\n", text);
	free(text);
	json_decref(j);
	return out;
}

void lsrv_refused(struct lserver *srv, int status, const char *why)
{
	static const int statuses[] = { 400, 401, 404, 405, 413 };
	time_t now = time(NULL);
	size_t i;

	for (i = 0; i < ARRAY_SIZE(statuses) && statuses[i] != status; i++)
		;
	srv->stats.refused[i]++;	/* i == 5: any other */
	if (srv->refused_at && now - srv->refused_at < 10) {
		srv->refused_quiet++;
		return;
	}
	log_notice("http: refused a request with %d: %s (%ld more refusals not logged)", status, why,
		   srv->refused_quiet);
	srv->refused_at = now;
	srv->refused_quiet = 0;
}

const struct hook_route *lsrv_route_path(const struct lserver *srv, const char *path)
{
	static const char prefix[] = "/hooks/";
	const char *name, *why;

	if (!path || strncmp(path, prefix, sizeof(prefix) - 1) != 0)
		return NULL;
	name = path + sizeof(prefix) - 1;
	if (strlen(name) > HOOK_ROUTE_NAME_MAX || hook_route_name_check(name, &why) < 0)
		return NULL;	/* not even a name: "..", "a/b", "%61", upper case */
	for (size_t i = 0; srv->routes && i < srv->routes->n; i++)
		if (strcmp(srv->routes->routes[i].name, name) == 0)
			return &srv->routes->routes[i];
	return NULL;
}

/*
 * What evhttp's parsing lets through and a delivery must not have, judged
 * on the headers evhttp parsed (it reads the first Content-Length, and a
 * Transfer-Encoding it does not know as no body): a framing that another
 * HTTP reader could take differently. NULL if fine. *n: the header count.
 */
static const char *framing_refusal(const struct evkeyvalq *headers, size_t *n)
{
	const char *cl = NULL, *te = NULL;
	int n_cl = 0, n_te = 0;
	struct evkeyval *kv;

	*n = 0;
	TAILQ_FOREACH(kv, headers, next) {
		++*n;
		if (strcasecmp(kv->key, "Content-Length") == 0) {
			n_cl++;
			cl = kv->value;
		} else if (strcasecmp(kv->key, "Transfer-Encoding") == 0) {
			n_te++;
			te = kv->value;
		}
	}
	if (n_cl > 1)
		return "Content-Length is given more than once";
	if (n_te > 1)
		return "Transfer-Encoding is given more than once";
	if (n_cl && n_te)
		return "Transfer-Encoding and Content-Length together";
	if (te && strcasecmp(te, "chunked") != 0)
		return "the only Transfer-Encoding accepted is chunked";
	/* evhttp's strtoll takes a sign and leading space; a length is digits only. */
	if (cl && (!*cl || strspn(cl, "0123456789") != strlen(cl)))
		return "Content-Length is not a number";
	return NULL;
}

void lsrv_maybe_drained(struct lserver *srv)
{
	if (srv->draining && srv->n_conns == 0 && srv->drained) {
		void (*cb)(void *) = srv->drained;

		srv->drained = NULL;
		cb(srv->drained_arg);
	}
}

/*
 * Answer req. body and ctype may be NULL. A 2xx leaves the connection open
 * for the client's next request (as HTTP/1.1, or 1.0 with keep-alive, asks);
 * every refusal closes it, so a hostile client is cut after its first bad
 * request, and so does everything once fleetd is gone (draining).
 */
static void reply(struct lserver *srv, struct evhttp_request *req, int status, const char *body, const char *ctype)
{
	struct evkeyvalq *out = evhttp_request_get_output_headers(req);
	struct evbuffer *buf = evbuffer_new();

	if (!buf)
		abort();
	if (body)
		evbuffer_add(buf, body, strlen(body));
	if (status >= 300 || srv->draining)
		evhttp_add_header(out, "Connection", "close");
	if (body)
		evhttp_add_header(out, "Content-Type", ctype ? ctype : "application/json");
	if (status == 405)
		evhttp_add_header(out, "Allow", "POST");
	evhttp_send_reply(req, status, lsrv_reason(status), buf);
	evbuffer_free(buf);
}

static void reply_error(struct lserver *srv, struct evhttp_request *req, int status, const char *code, const char *why)
{
	char *body = lsrv_error_body(code, why);

	lsrv_refused(srv, status, why);
	reply(srv, req, status, body, "application/json");
	free(body);
}

/* A value fit to pass on: printable ASCII or tab, not too long (proto.c's rule). */
static bool value_ok(const char *v)
{
	size_t n = 0;

	for (; v[n]; n++)
		if (n >= HEADER_VALUE_MAX || !((v[n] >= 0x20 && v[n] < 0x7f) || v[n] == '\t'))
			return false;
	return true;
}

/*
 * The headers a run may see, into out (at most HOOK_PROTO_HEADERS_MAX,
 * borrowed from h): never a credential (Authorization,
 * Proxy-Authorization, Cookie, a DataDog route's secret header), never a
 * name twice, and only what the protocol carries (a token name, a printable
 * value). Returns how many.
 */
static size_t headers_passed(const struct hook_route *route, const struct hook_header *h, size_t n,
			     struct hook_header *out)
{
	const char *why;
	size_t n_out = 0;

	for (size_t i = 0; i < n && n_out < HOOK_PROTO_HEADERS_MAX; i++) {
		bool dup = false;

		if (strcasecmp(h[i].name, "Authorization") == 0 || strcasecmp(h[i].name, "Proxy-Authorization") == 0 ||
		    strcasecmp(h[i].name, "Cookie") == 0)
			continue;
		if (route->source == HOOK_DATADOG && route->datadog_auth == HOOK_DATADOG_HEADER && route->header &&
		    strcasecmp(h[i].name, route->header) == 0)
			continue;
		if (hook_header_check(h[i].name, &why) < 0 || !value_ok(h[i].value))
			continue;
		for (size_t k = 0; k < n_out && !dup; k++)
			dup = strcasecmp(out[k].name, h[i].name) == 0;
		if (!dup)
			out[n_out++] = h[i];
	}
	return n_out;
}

/* A verified delivery: up the link, pending until fleetd answers. */
static void deliver(struct lserver *srv, struct evhttp_request *req, const struct hook_route *route,
		    const struct hook_request *hreq, const struct hook_result *res)
{
	struct hook_header passed[HOOK_PROTO_HEADERS_MAX];
	struct hook_delivery d = {
		.seq = ++srv->seq,
		.route = route->name,
		.delivery_id = res->delivery_id,
		.event_type = res->event_type,
		.no_run = res->no_run,
		.received_at = (int64_t)hreq->now,
		.headers = passed,
		.n_headers = headers_passed(route, hreq->headers, hreq->n_headers, passed),
		.body = hreq->body,
		.body_len = hreq->body_len,
		.reply_body = res->reply_body,
		.reply_type = res->reply_type,
	};
	unsigned char *frame;
	size_t len;
	struct pending *p;
	int r;

	if (!link_up(srv->link)) {
		reply_error(srv, req, 503, "unavailable", "fleetd is not reachable; try again later");
		return;
	}
	if (srv->n_pending >= LSRV_PENDING_MAX) {
		reply_error(srv, req, 503, "busy", "too many deliveries waiting to be stored; try again later");
		return;
	}
	r = hook_delivery_encode(&d, &frame, &len);
	if (r == 0) {
		r = link_send_frame(srv->link, frame, len);
		free(frame);
	}
	if (r < 0) {
		reply_error(srv, req, 503, "busy", "deliveries cannot be passed to fleetd now; try again later");
		return;
	}
	p = xcalloc(1, sizeof(*p));
	p->seq = d.seq;
	p->req = req;
	if (srv->pending_tail)
		srv->pending_tail->next = p;
	else
		srv->pending = p;
	srv->pending_tail = p;
	srv->n_pending++;
}

static void handle(struct evhttp_request *req, void *arg)
{
	struct lserver *srv = arg;
	struct evhttp_connection *evcon = evhttp_request_get_connection(req);
	const char *target = evhttp_request_get_uri(req);
	struct evkeyvalq *in_headers = evhttp_request_get_input_headers(req);
	struct evbuffer *in = evhttp_request_get_input_buffer(req);
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
	struct hook_header headers[LSRV_HEADERS_MAX];
	const struct hook_route *route;
	const char *bad;
	size_t n_headers;
	struct hook_request hreq = { .method = "POST", .path_query = target, .headers = headers };
	struct hook_result res = { 0 };
	struct evkeyval *kv;

	if (!evcon || !lconn_dispatched(srv, req)) {
		/* conn.c counts every connection first: one it did not admit is never served. */
		reply_error(srv, req, 400, "bad_request", "the request was not admitted");
		return;
	}
	/* The body was read already, but no more of it than the cap its request line named. */
	if ((bad = framing_refusal(in_headers, &n_headers))) {
		reply_error(srv, req, 400, "bad_request", bad);
		return;
	}
	if (n_headers > LSRV_HEADERS_MAX) {
		reply_error(srv, req, 413, "headers_too_large", "more than 128 header lines");
		return;
	}
	if (evhttp_request_get_command(req) != EVHTTP_REQ_POST) {
		reply_error(srv, req, 405, "method_not_allowed", "webhooks are delivered with POST");
		return;
	}
	/* Looked up again: the table may have changed while the body arrived. */
	if (!target || !uri || !(route = lsrv_route_path(srv, evhttp_uri_get_path(uri)))) {
		reply_error(srv, req, 404, "not_found", "no such webhook route");
		return;
	}
	hreq.body_len = evbuffer_get_length(in);
	if (hreq.body_len > (size_t)route->max_body) {
		reply_error(srv, req, 413, "too_large", "the body is larger than this route accepts");
		return;
	}
	hreq.body = hreq.body_len ? evbuffer_pullup(in, -1) : (const unsigned char *)"";
	TAILQ_FOREACH(kv, in_headers, next)
		headers[hreq.n_headers++] = (struct hook_header){ kv->key, kv->value };	/* counted above */
	hreq.now = time(NULL);
	hook_verify(route, &hreq, &res);
	switch (res.verdict) {
	case HOOK_OK:
		deliver(srv, req, route, &hreq, &res);
		break;
	case HOOK_MALFORMED:
		reply_error(srv, req, 400, "malformed", res.why ? res.why : "the delivery cannot be understood");
		break;
	default:
		if ((unsigned)route->source < HOOK_SOURCE__COUNT)
			srv->stats.sig_failed[route->source]++;
		reply_error(srv, req, 401, "unauthorized", res.why ? res.why : "the signature does not verify");
		break;
	}
	hook_result_clear(&res);
}

int lserver_answer(struct lserver *srv, const struct hook_answer *a)
{
	struct pending **pp = &srv->pending, *p, *prev = NULL;

	for (; *pp && (*pp)->seq != a->seq; pp = &(*pp)->next)
		prev = *pp;
	if (!(p = *pp))
		return -ENOENT;
	*pp = p->next;
	if (srv->pending_tail == p)
		srv->pending_tail = prev;
	srv->n_pending--;
	if (a->status >= 200 && a->status < 300)
		srv->stats.accepted++;
	else
		lsrv_refused(srv, a->status, "fleetd refused the delivery");
	reply(srv, p->req, a->status, a->body, a->content_type);
	free(p);
	return 0;
}

/* Counters to fleetd every second while they change. */
static void stats_tick(evutil_socket_t fd, short what, void *arg)
{
	struct lserver *srv = arg;
	json_t *msg;

	(void)fd;
	(void)what;
	srv->stats.connections = srv->n_conns;
	if (!link_up(srv->link) || memcmp(&srv->stats, &srv->stats_sent, sizeof(srv->stats)) == 0)
		return;
	msg = hook_msg_stats(&srv->stats);
	if (msg && link_send(srv->link, msg) == 0)
		srv->stats_sent = srv->stats;
	json_decref(msg);
}

/* accept() failed (out of descriptors, most likely): pause accepting for a moment instead of spinning. */
static void accept_error(struct evconnlistener *lev, void *arg)
{
	struct lserver *srv = arg;
	struct timeval tv = { 0, 200 * 1000 };

	log_warning("http: cannot accept a connection: %s; pausing for 200 ms", strerror(errno));
	evconnlistener_disable(lev);
	evtimer_add(srv->resume_ev, &tv);
}

static void accept_resume(evutil_socket_t fd, short what, void *arg)
{
	struct lserver *srv = arg;

	(void)fd;
	(void)what;
	if (!srv->draining)
		evconnlistener_enable(srv->lev);
}

int lserver_start(struct event_base *base, int fd, struct link *link, struct lserver **ret)
{
	struct lserver *srv = xcalloc(1, sizeof(*srv));
	struct timeval second = { 1, 0 };

	if (evutil_make_socket_nonblocking(fd) < 0) {
		free(srv);
		return -errno;
	}
	srv->base = base;
	srv->link = link;
	srv->http = evhttp_new(base);
	/* backlog -1: fleetd called listen() already. Disabled until the first routes. */
	srv->lev = evconnlistener_new(base, NULL, NULL, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC | LEV_OPT_DISABLED,
				      -1, fd);
	srv->stats_ev = event_new(base, -1, EV_PERSIST, stats_tick, srv);
	srv->resume_ev = evtimer_new(base, accept_resume, srv);
	if (!srv->http || !srv->lev || !srv->stats_ev || !srv->resume_ev || !evhttp_bind_listener(srv->http, srv->lev)) {
		log_error("http: cannot serve the listening socket");
		if (!srv->lev)
			close(fd);
		lserver_free(srv);
		return -EIO;
	}
	evconnlistener_set_error_cb(srv->lev, accept_error);
	/* Each connection's body cap is set from its request line (conn.c); other methods are answered 405 in handle(). */
	evhttp_set_allowed_methods(srv->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD | EVHTTP_REQ_PUT |
				   EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS | EVHTTP_REQ_TRACE | EVHTTP_REQ_CONNECT |
				   EVHTTP_REQ_PATCH);
	evhttp_set_max_body_size(srv->http, 0);
	evhttp_set_bevcb(srv->http, lconn_new, srv);
	evhttp_set_gencb(srv->http, handle, srv);
	event_add(srv->stats_ev, &second);
	*ret = srv;
	return 0;
}

void lserver_set_routes(struct lserver *srv, struct hook_route_set *set)
{
	bool first = !srv->routes;

	hook_route_set_free(srv->routes);
	srv->routes = set;
	srv->limits = set->limits;
	/* evhttp answers a longer head 400 itself (for connections accepted from now on). */
	evhttp_set_max_headers_size(srv->http, set->limits.header_max);
	/* Idle time per read or write, past the absolute deadline so that one answers first (408). */
	evhttp_set_timeout(srv->http, (int)set->limits.request_timeout_s + 5);
	if (first && !srv->draining) {
		log_info("http: serving %zu webhook routes", set->n);
		evconnlistener_enable(srv->lev);
	}
}

void lserver_link_down(struct lserver *srv, void (*drained)(void *arg), void *arg)
{
	char *body = lsrv_error_body("unavailable", "fleetd is not reachable; the delivery was not stored");

	srv->draining = true;
	srv->drained = drained;
	srv->drained_arg = arg;
	evconnlistener_disable(srv->lev);
	while (srv->pending) {
		struct pending *p = srv->pending;

		srv->pending = p->next;
		lsrv_refused(srv, 503, "fleetd is not reachable");
		reply(srv, p->req, 503, body, "application/json");
		free(p);
	}
	srv->pending_tail = NULL;
	srv->n_pending = 0;
	free(body);
	lconn_close_idle(srv);
	lsrv_maybe_drained(srv);
}

void lserver_free(struct lserver *srv)
{
	if (!srv)
		return;
	while (srv->pending) {
		struct pending *p = srv->pending;

		srv->pending = p->next;
		free(p);	/* evhttp_free frees the requests with their connections */
	}
	srv->drained = NULL;
	if (srv->http)
		evhttp_free(srv->http);		/* frees the bound listener and every connection */
	else if (srv->lev)
		evconnlistener_free(srv->lev);
	lconn_free_all(srv);
	if (srv->stats_ev)
		event_free(srv->stats_ev);
	if (srv->resume_ev)
		event_free(srv->resume_ev);
	hook_route_set_free(srv->routes);
	free(srv);
}
