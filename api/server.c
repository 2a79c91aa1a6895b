/*
 * api server: see server.h. Everything that reaches fleetd's state from
 * outside comes through api_dispatch(): the caller is identified from the
 * kernel, the route decides the handler, and the handler validates every
 * field before any state changes. This file must never act on agents
 * itself, and knows no handler but through the table it is given. One
 * concern: the HTTP server (socket, peer, limits, routing, replies).
 */
#include "api/server.h"
#include "api/parse.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <fcntl.h>
#include <grp.h>
#include <malloc.h>
#include <pwd.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>

#include "store/db.h"
#include "model/fleetd.h"
#include "common/log.h"
#include "common/util.h"

struct conn;

struct api {
	struct fleetd *fleetd;
	struct evhttp *http;
	char *socket_path;
	dev_t sock_dev;		/* the socket we bound, so a replacement is never chowned */
	ino_t sock_ino;
	gid_t group;		/* (gid_t)-1: root only */
	size_t max_body;	/* JSON bodies (max_body_bytes) */
	long max_conns;		/* max_connections */
	long request_timeout_s;	/* request_timeout */
	struct conn *conns;	/* every open connection */
	long n_conns;
	size_t receiving;	/* bytes read of requests not yet complete, all connections together */
	bool trim;		/* a connection with large bodies closed: trim the heap once none is being received */
	time_t refused_at;	/* rate limit of the refusal log and audit (monotonic s) */
	long refused_quiet;	/* refusals not logged since */
	const struct api_route *routes;	/* routes.c's table */
	size_t n_routes;
	struct api_stream *streams;	/* replies in flight past their handler (api_stream_begin) */
	struct api_call *deferred;	/* deferred calls not answered yet (api_defer), answered by api_stop */
};

/*
 * One connection to the API, from accept to close. evhttp (libevent 2.1)
 * accepts by itself and has no public way to take an accepted fd, but it
 * asks us for each connection's bufferevent (evhttp_set_bevcb) right after
 * accept(); the setup event, made active there, runs before the event loop
 * polls again, so before a byte of the request is read: that is where the
 * peer is checked and the connection counted.
 *
 * HTTP/1.1 keep-alive: evhttp reads the next request on the connection
 * after an answer that does not close it (every answer >= 400, HTTP/1.0
 * without keep-alive and a request's Connection: close do). The guards are
 * per request: each request line tells its own body limit before evhttp
 * reads a header; when an answer has gone out (the request's on_complete,
 * conn_request_done) the limit drops back to API_NO_BODY, the bytes being
 * received restart from what is buffered (pipelined), and the deadline
 * restarts: from the answer's end while no byte of the next request is in
 * (an idle connection is closed when it runs out), from its first byte
 * otherwise. While a request is handled and answered, evhttp reads on
 * (to see a hang-up) into the input buffer: at most API_PIPELINE_MAX is
 * buffered then (a read watermark), so pipelined input cannot grow it.
 * Reading stopped there, evhttp would not see the client hang up (a
 * watcher's stream could wait for its next event): the hangup event
 * (EPOLLRDHUP) lifts the watermark, and evhttp reads on to the EOF.
 */
struct conn {
	struct conn *next;
	struct api *api;
	struct bufferevent *bev;	/* evhttp's: only its read watermark is set here after setup */
	struct evhttp_connection *evcon;	/* NULL until set up */
	struct event *setup;
	struct event *deadline;
	struct event *hangup;		/* the peer's hang-up while a request is handled (EV_CLOSED), or NULL */
	struct ucred cred;		/* the caller's, read at connect: a Unix socket's peer never changes */
	bool have_cred;
	bool limited;			/* the request line was seen, its route's limit set */
	bool http11;			/* that line said HTTP/1.1 */
	bool dispatched;		/* the whole request arrived */
	bool idle;			/* kept alive after an answer, no byte of the next request yet */
	bool refused;			/* answered at connect, never read; closes when deadline fires */
	bool overflow;			/* its bytes passed API_RECEIVING_MAX: closes when deadline fires */
	bool large;			/* its route takes bodies larger than BODY_CHUNK: read into chunks of their own */
	size_t room;			/* bytes the last chunk made ready still has, at least (body_room) */
	size_t received;		/* bytes read and not dispatched yet (its part of api->receiving) */
	size_t moved;			/* bytes read since the last heap_policy check */
	size_t sent;			/* bytes of its answers handed to evhttp since then (a reply, a stream) */
	void (*closecb)(struct evhttp_connection *, void *);	/* a handler's (api_conn_set_closecb) */
	void *closecb_arg;
};

/* Until the request line has been read: no body can come before it anyway. */
#define FIRST_LINE_MAX 8192u
/*
 * Requests being received, all connections together: one largest body (a
 * 256 MiB memory import) and room besides. Each route's own cap times
 * max_connections would be 17 GiB; clients that send large bodies and never
 * finish them could otherwise hold that much of fleetd's memory.
 */
#define API_RECEIVING_MAX ((size_t)288 << 20)
/* A connection that moved this much, in and out, gives the freed memory back when it closes or an answer is done (heap_policy). */
#define API_TRIM_AFTER ((size_t)1 << 20)
/*
 * Large request bodies are read into chunks of about BODY_CHUNK made ready
 * ahead (body_room), each its own mapping (API_MMAP_MIN), once a request
 * has sent BODY_CHUNKS_AFTER: libevent would read them 4 KiB at a time into
 * 8 KiB heap chains, tens of thousands per body, interleaved with other
 * connections', whose holes the heap trim then gave back one madvise (and
 * TLB shootdown) each, seconds on fleetd's loop (#13). A chunk's mapping
 * goes back to the kernel when it is freed. BODY_READ_MAX: the most one
 * read takes (libevent 2.1 reads 4 KiB; 2.2 up to 16 KiB).
 */
#define BODY_CHUNK ((size_t)1 << 20)
#define BODY_CHUNKS_AFTER ((size_t)64 << 10)
#define BODY_READ_MAX ((size_t)16 << 10)
#define API_MMAP_MIN (512 << 10)
/* While a request is handled and answered, the most of the next ones' bytes read ahead (pipelined). */
#define API_PIPELINE_MAX ((size_t)64 << 10)

static const char *method_name(enum evhttp_cmd_type t)
{
	switch (t) {
	case EVHTTP_REQ_GET: return "GET";
	case EVHTTP_REQ_POST: return "POST";
	case EVHTTP_REQ_PUT: return "PUT";
	case EVHTTP_REQ_DELETE: return "DELETE";
	case EVHTTP_REQ_PATCH: return "PATCH";
	case EVHTTP_REQ_HEAD: return "HEAD";
	default: return "OTHER";
	}
}

/* Printable, bounded copy of something a caller sent, safe for logs and the audit table. */
static char *sanitize(const char *s)
{
	size_t n = s ? strnlen(s, 110) : 0;
	char *out = xmalloc(n + 1);

	for (size_t i = 0; i < n; i++)
		out[i] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
	out[n] = '\0';
	return out;
}

static void audit(struct api_call *c, const char *outcome, const char *detail, bool synced)
{
	_cleanup_free_ char *clean = sanitize(c->target ? c->target : c->param);
	int r;

	if (!c->action)
		return;
	r = (synced ? db_audit_add : db_audit_add_unsynced)(c->fleetd->db, (long)c->uid, c->action, clean, outcome, detail);
	if (r < 0)
		log_error("audit: cannot record %s of '%s' by uid %ld: %s", c->action, clean, (long)c->uid,
			  strerror(-r));
}

void api_audit(struct api_call *c, const char *outcome, const char *detail)
{
	audit(c, outcome, detail, true);
}

void api_audit_unsynced(struct api_call *c, const char *outcome, const char *detail)
{
	audit(c, outcome, detail, false);
}

/*
 * The api being served (one per fleetd): api_defer lists its calls there,
 * and api_conn_set_closecb() gets only a connection.
 */
static struct api *serving;

/* A deferred call is being answered: off the server's list. */
static void deferred_unlink(struct api_call *c)
{
	for (struct api_call **pp = serving ? &serving->deferred : NULL; pp && *pp; pp = &(*pp)->next_deferred)
		if (*pp == c) {
			*pp = c->next_deferred;
			break;
		}
}

/*
 * Deferred calls api_stop answered 503 whose owners have not answered yet
 * (linked by next_deferred): an owner's late answer frees its own, and
 * api_free_orphans() the ones never answered.
 */
static struct api_call *orphans;

/* A deferred call api_stop answered already: its owner's answer only frees it. */
static bool orphan_done(struct api_call *c)
{
	if (!c->orphaned)
		return false;
	for (struct api_call **pp = &orphans; *pp; pp = &(*pp)->next_deferred)
		if (*pp == c) {
			*pp = c->next_deferred;
			break;
		}
	free(c);
	return true;
}

void api_free_orphans(void)
{
	while (orphans) {
		struct api_call *c = orphans;

		orphans = c->next_deferred;
		free(c);
	}
}

/*
 * An answer's Content-Type, and for a refusal or failure (>= 400)
 * Connection: close: whatever the client sends next on it follows a
 * refusal, and is not read.
 */
static void reply_headers(struct api_call *c, int status, const char *ctype)
{
	struct evkeyvalq *h = evhttp_request_get_output_headers(c->req);

	evhttp_add_header(h, "Content-Type", ctype);
	if (status >= 400)
		evhttp_add_header(h, "Connection", "close");
}

void api_reply(struct api_call *c, int status, json_t *body)
{
	struct evbuffer *buf;
	char *text;
	const char *reason;

	if (c->deferred)
		deferred_unlink(c);
	if (orphan_done(c)) {
		json_decref(body);
		return;
	}
	buf = evbuffer_new();
	text = json_dumps(body, JSON_COMPACT | JSON_ENSURE_ASCII);
	reason = status < 300 ? "OK" : status < 500 ? "Client Error" : "Server Error";

	if (!buf || !text)
		abort();
	evbuffer_add_printf(buf, "%s\n", text);
	if (c->action) {
		json_t *err = status >= 300 ? json_object_get(body, "error") : NULL;
		const char *outcome = status < 300 ? "ok" : status < 500 ? "refused" : "failed";

		api_audit(c, outcome, err ? json_string_value(err) : NULL);
	}
	reply_headers(c, status, "application/json");
	evhttp_send_reply(c->req, status, reason, buf);
	evbuffer_free(buf);
	free(text);
	json_decref(body);
	c->replied = true;
	if (c->deferred)
		free(c);
}

void api_reply_raw(struct api_call *c, int status, const char *ctype, const void *data, size_t len)
{
	struct evbuffer *buf;

	if (c->deferred)
		deferred_unlink(c);
	if (orphan_done(c))
		return;
	if (!(buf = evbuffer_new()) || evbuffer_add(buf, data, len) < 0)
		abort();
	if (c->action)
		api_audit(c, "ok", NULL);
	reply_headers(c, status, ctype);
	evhttp_send_reply(c->req, status, "OK", buf);
	evbuffer_free(buf);
	c->replied = true;
	if (c->deferred)
		free(c);
}

const void *api_body_raw(struct api_call *c, size_t *len)
{
	struct evbuffer *in = evhttp_request_get_input_buffer(c->req);
	size_t cap = c->max_body ? c->max_body : c->fleetd->api->max_body;

	*len = evbuffer_get_length(in);
	if (*len > cap) {
		api_error(c, 413, "too_large", "request body is %zu bytes; the limit is %zu", *len, cap);
		return NULL;
	}
	return *len ? (const void *)evbuffer_pullup(in, -1) : (const void *)"";
}

struct api_call *api_defer(struct api_call *c)
{
	struct api_call *d = xmalloc(sizeof(*d));

	*d = *c;
	d->deferred = true;
	d->replied = false;
	if (c->param) {
		snprintf(d->param_buf, sizeof(d->param_buf), "%s", c->param);
		d->param = d->param_buf;
	}
	if (c->param2) {
		snprintf(d->param2_buf, sizeof(d->param2_buf), "%s", c->param2);
		d->param2 = d->param2_buf;
	}
	if (c->target) {
		snprintf(d->target_buf, sizeof(d->target_buf), "%s", c->target);
		d->target = d->target_buf;
	}
	c->replied = true;	/* the answer is the deferred copy's to give */
	if (serving) {
		d->next_deferred = serving->deferred;
		serving->deferred = d;
	}
	return d;
}

static void api_verror(struct api_call *c, int status, const char *code, const char *fmt, va_list ap)
{
	_cleanup_free_ char *msg = NULL;

	if (vasprintf(&msg, fmt, ap) < 0)
		abort();
	api_reply(c, status, json_pack("{s:s, s:s}", "error", msg, "code", code));
}

void api_error(struct api_call *c, int status, const char *code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	api_verror(c, status, code, fmt, ap);
	va_end(ap);
}

void api_error_errno(struct api_call *c, int r, const char *fmt, ...)
{
	int status = 500;
	const char *code = "internal";
	va_list ap;

	switch (-r) {
	case ENOENT: status = 404; code = "not_found"; break;
	case EEXIST: status = 409; code = "exists"; break;
	case EBUSY: status = 409; code = "busy"; break;
	case EINVAL: status = 400; code = "invalid"; break;
	case EACCES: case EPERM: status = 403; code = "forbidden"; break;
	case ENOSPC: status = 507; code = "no_space"; break;
	case EOPNOTSUPP: status = 501; code = "unsupported"; break;
	case ENOLCK: status = 503; code = "db_locked"; break;
	}
	va_start(ap, fmt);
	if (status == 503) {	/* strerror's "No locks available" alone would not say which lock */
		_cleanup_free_ char *msg = NULL;

		if (vasprintf(&msg, fmt, ap) < 0)
			abort();
		api_error(c, status, code, "%s (fleet's database is locked by another process; nothing was changed, "
			  "try again when it is released)", msg);
	} else {
		api_verror(c, status, code, fmt, ap);
	}
	va_end(ap);
}

bool api_query(struct api_call *c, const char *key, char *buf, size_t len)
{
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(c->req);
	const char *q = uri ? evhttp_uri_get_query(uri) : NULL;
	struct evkeyvalq kv = { 0 };
	const char *v;
	bool found = false;

	if (!q || evhttp_parse_query_str(q, &kv) < 0)
		return false;
	v = evhttp_find_header(&kv, key);
	if (v && strlen(v) < len) {
		memcpy(buf, v, strlen(v) + 1);
		found = true;
	}
	evhttp_clear_headers(&kv);
	return found;
}

json_t *api_body_object(struct api_call *c, const char *const *spec)
{
	struct evbuffer *in = evhttp_request_get_input_buffer(c->req);
	const char *ctype = evhttp_find_header(evhttp_request_get_input_headers(c->req), "Content-Type");
	size_t len = evbuffer_get_length(in);
	size_t cap = c->max_body ? c->max_body : c->fleetd->api->max_body;
	struct api_parse_error err;
	json_t *obj;

	if (ctype && strncmp(ctype, "application/json", 16) != 0) {
		api_error(c, 415, "unsupported_media_type", "request body must be application/json, not '%.64s'", ctype);
		return NULL;
	}
	if (len > cap) {
		api_error(c, 413, "too_large", "request body is %zu bytes; the limit is %zu", len, cap);
		return NULL;
	}
	obj = api_json_parse(evbuffer_pullup(in, -1), len, spec, &err);
	if (!obj)
		api_error(c, err.status, err.code, "%s", err.msg);
	return obj;
}

/* Defence in depth beside the socket's mode: root, our own uid, or a member of the socket group. */
static bool peer_allowed(struct api *api, uid_t uid)
{
	struct passwd *pw;
	gid_t groups[256];
	int n = (int)ARRAY_SIZE(groups);

	if (uid == 0 || uid == geteuid())
		return true;
	if (api->group == (gid_t)-1 || !(pw = getpwuid(uid)))
		return false;
	if (getgrouplist(pw->pw_name, pw->pw_gid, groups, &n) < 0)
		return false;
	for (int i = 0; i < n; i++)
		if (groups[i] == api->group)
			return true;
	return false;
}

/* ---- connections: see struct conn ---- */

/* The body limit the HTTP layer enforces for method and path: JSON routes 4x theirs, so api_body_object answers 413 in JSON up to that. */
static size_t route_http_limit(struct api *api, const char *method, const char *path)
{
	char bufs[2][256];

	for (size_t i = 0; i < api->n_routes; i++) {
		const struct api_route *rt = &api->routes[i];
		const char *p[2];

		if (strcmp(rt->method, method) != 0 || !api_route_match(rt->pattern, path, bufs, p))
			continue;
		if (rt->max_body == 0)
			return api->max_body * 4;
		if (rt->max_body == API_NO_BODY)
			return API_NO_BODY;
		return rt->max_body + 4096;	/* the JSON around a large field (exec's stdin) */
	}
	return API_NO_BODY;
}

static struct conn *conn_find(struct api *api, struct evhttp_connection *evcon)
{
	for (struct conn *cn = api->conns; cn; cn = cn->next)
		if (cn->evcon == evcon)
			return cn;
	return NULL;
}

#ifdef __GLIBC__
static void trim_memory(evutil_socket_t unused, short what, void *arg)
{
	(void)unused;
	(void)what;
	(void)arg;
	malloc_trim(0);
}
#endif

/*
 * fleetd's heap policy, for every large body alike, in or out (a memory
 * import or put, a memory get or export, a long stream). glibc keeps what
 * is freed in its heap: freed buffers lie between live allocations, where
 * its own trim of the heap's top never reaches, so RSS would stay at the
 * peak of the largest bodies for good. Measured: 15812 kB before 288 MiB
 * of request bodies, 227188 kB after; 15408 kB before three GETs of a
 * 200 MiB memory value, 211828 kB after. So a connection that moved
 * API_TRIM_AFTER or more marks the heap when it closes or when an answer
 * on it is done (a kept connection), and it is trimmed
 * once no request is being received (trimming walks the whole heap: not
 * while a stream of large bodies goes on), later in this loop pass, when
 * evhttp has freed the connection's buffers or the request (it calls
 * conn_closed and conn_request_done first).
 * If the event cannot be made, memory is only kept. Not glibc: nothing.
 */
static void heap_policy(struct conn *cn)
{
#ifdef __GLIBC__
	if (cn->moved + cn->sent >= API_TRIM_AFTER)
		cn->api->trim = true;
	cn->moved = cn->sent = 0;
	if (cn->api->trim && cn->api->receiving == 0) {
		struct timeval now = { 0, 0 };

		cn->api->trim = false;
		(void)event_base_once(cn->api->fleetd->base, -1, EV_TIMEOUT, trim_memory, NULL, &now);
	}
#else
	(void)cn;
#endif
}

static void conn_free(struct conn *cn)
{
	struct conn **pp = &cn->api->conns;

	while (*pp && *pp != cn)
		pp = &(*pp)->next;
	if (*pp)
		*pp = cn->next;
	cn->api->n_conns--;
	cn->api->receiving -= cn->received;
	heap_policy(cn);
	event_free(cn->setup);
	event_free(cn->deadline);
	if (cn->hangup)
		event_free(cn->hangup);
	free(cn);
}

/* evhttp frees the connection: forget it, then tell the handler that asked. */
static void conn_closed(struct evhttp_connection *evcon, void *arg)
{
	struct conn *cn = arg;
	void (*cb)(struct evhttp_connection *, void *) = cn->closecb;
	void *cb_arg = cn->closecb_arg;

	conn_free(cn);
	if (cb)
		cb(evcon, cb_arg);
}

void api_conn_set_closecb(struct evhttp_connection *evcon, void (*cb)(struct evhttp_connection *, void *),
			  void *arg)
{
	struct conn *cn = serving ? conn_find(serving, evcon) : NULL;

	if (!cn) {
		evhttp_connection_set_closecb(evcon, cb, arg);
		return;
	}
	cn->closecb = cb;
	cn->closecb_arg = arg;
}

/* Refusals are logged and audited at most once per 10 s, so a flood cannot fill the log or the audit table. */
static bool refusal_note(struct api *api, long *quiet)
{
	/* Monotonic: a wall clock stepped back would silence the log for as long. */
	time_t now = (time_t)(now_usec() / 1000000) + 1;	/* never 0 ("not yet") */

	if (api->refused_at && now - api->refused_at < 10) {
		api->refused_quiet++;
		return false;
	}
	*quiet = api->refused_quiet;
	api->refused_at = now;
	api->refused_quiet = 0;
	return true;
}

/*
 * Answer status with the JSON error shape straight on the socket; nothing
 * of the request is ever read. A client still writing its request would get
 * EPIPE, not the answer, if the socket closed at once; so it stays open for
 * REFUSED_LINGER_S (unread, counted as a connection) unless connections are
 * at their cap, when it closes at once.
 */
#define REFUSED_LINGER_S 2
static void conn_refuse(struct conn *cn, int status, const char *reason, const char *code, const char *msg)
{
	struct timeval linger = { REFUSED_LINGER_S, 0 };
	json_t *body = json_pack("{s:s, s:s}", "error", msg, "code", code);
	char *text = body ? json_dumps(body, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
	char *resp;
	int fd = bufferevent_getfd(cn->bev);

	if (!text)
		abort();
	resp = xasprintf("HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
			 "Connection: close\r\n\r\n%s\n", status, reason, strlen(text) + 1, text);
	/* A fresh socket's send buffer takes this at once; if not, the client just sees the close. */
	(void)!send(fd, resp, strlen(resp), MSG_DONTWAIT | MSG_NOSIGNAL);
	free(resp);
	free(text);
	json_decref(body);
	cn->refused = true;
	bufferevent_disable(cn->bev, EV_READ | EV_WRITE);
	if (cn->api->n_conns > cn->api->max_conns) {
		evhttp_connection_free(cn->evcon);	/* conn_closed frees cn */
		return;
	}
	(void)shutdown(fd, SHUT_WR);	/* the answer is complete */
	evtimer_add(cn->deadline, &linger);
}

/*
 * The client hung up (or shut its side) while its request was handled or
 * answered: read on past the watermark, so evhttp reaches the EOF and ends
 * the connection as it does (what is left is the socket's queue: bounded).
 */
static void conn_hangup(evutil_socket_t unused, short what, void *arg)
{
	struct conn *cn = arg;

	(void)unused;
	(void)what;
	bufferevent_setwatermark(cn->bev, EV_READ, 0, 0);
}

/* Right after accept, before any read: who is it, and is there room. */
static void conn_setup(evutil_socket_t unused, short what, void *arg)
{
	struct conn *cn = arg;
	struct api *api = cn->api;
	struct timeval tv = { api->request_timeout_s, 0 };
	struct ucred cred;
	socklen_t clen = sizeof(cred);
	void *evcon = NULL;
	_cleanup_free_ char *msg = NULL;
	long quiet = 0;

	(void)unused;
	(void)what;
	bufferevent_getcb(cn->bev, NULL, NULL, NULL, &evcon);
	if (!evcon) {
		/* evhttp could not set the connection up (out of memory) and has dropped it. */
		log_error("api: a connection could not be set up");
		conn_free(cn);
		return;
	}
	cn->evcon = evcon;
	evhttp_connection_set_closecb(cn->evcon, conn_closed, cn);
	if (getsockopt(bufferevent_getfd(cn->bev), SOL_SOCKET, SO_PEERCRED, &cred, &clen) < 0) {
		log_warning("api: cannot read a caller's credentials: %s", strerror(errno));
		conn_refuse(cn, 403, "Forbidden", "forbidden", "caller credentials unavailable");
		return;
	}
	cn->cred = cred;
	cn->have_cred = true;
	if (!peer_allowed(api, cred.uid)) {
		msg = xasprintf("uid %ld may not use fleetd", (long)cred.uid);
		if (refusal_note(api, &quiet)) {
			_cleanup_free_ char *detail = xasprintf("pid %ld; %ld more refused, not logged", (long)cred.pid, quiet);

			log_notice("api: refused uid %ld (pid %ld) at connect: not root and not in the socket group"
				   " (%ld more refusals not logged)", (long)cred.uid, (long)cred.pid, quiet);
			(void)db_audit_add(api->fleetd->db, (long)cred.uid, "api.connect", NULL, "refused", detail);
		}
		conn_refuse(cn, 403, "Forbidden", "forbidden", msg);
		return;
	}
	if (api->n_conns > api->max_conns) {
		if (refusal_note(api, &quiet))
			log_warning("api: %ld connections are open, the most max_connections allows; refused one from"
				    " uid %ld (%ld more refusals not logged)", api->max_conns, (long)cred.uid, quiet);
		msg = xasprintf("fleetd has %ld connections open, its limit (max_connections); try again later",
				api->max_conns);
		conn_refuse(cn, 503, "Service Unavailable", "busy", msg);
		return;
	}
	evhttp_connection_set_max_body_size(cn->evcon, API_NO_BODY);
	if (!(cn->hangup = event_new(api->fleetd->base, bufferevent_getfd(cn->bev), EV_CLOSED, conn_hangup, cn)))
		abort();
	evtimer_add(cn->deadline, &tv);
}

/* The whole request did not arrive in time (a slow or stalled client): drop the connection. */
static void conn_deadline(evutil_socket_t unused, short what, void *arg)
{
	struct conn *cn = arg;
	long quiet = 0;

	(void)unused;
	(void)what;
	if (cn->dispatched)
		return;
	if (cn->idle) {
		/* No request within request_timeout of the last answer: closed, nothing to answer. */
		log_debug("api: closed a kept connection idle for %ld s (request_timeout)", cn->api->request_timeout_s);
		evhttp_connection_free(cn->evcon);	/* conn_closed frees cn */
		return;
	}
	if (cn->refused) {
		evhttp_connection_free(cn->evcon);	/* its answer had its time to be read */
		return;
	}
	if (cn->overflow) {
		if (refusal_note(cn->api, &quiet))
			log_warning("api: requests being received passed %zu MiB together; closed the connection"
				    " whose bytes passed it (%zu bytes read; %ld more not logged)",
				    API_RECEIVING_MAX >> 20, cn->received, quiet);
		evhttp_connection_free(cn->evcon);
		return;
	}
	log_info("api: a client did not send its whole request within %ld s (request_timeout) of connecting, or"
		 " of its first byte on a kept connection; disconnected",
		 cn->api->request_timeout_s);
	evhttp_connection_free(cn->evcon);	/* conn_closed frees cn */
}

/*
 * A large body's next bytes: once it is past BODY_CHUNKS_AFTER, a chunk of
 * BODY_CHUNK (less what chain headers and a copied tail take, so the
 * allocation stays one BODY_CHUNK) is made ready at the buffer's end before
 * the last one runs out, so libevent's reads go there and allocate nothing.
 * If it cannot be made, reads allocate as they would have.
 */
static void body_room(struct conn *cn, struct evbuffer *buf, size_t added)
{
	const size_t chunk = BODY_CHUNK - 8192;

	if (!cn->large || cn->received < BODY_CHUNKS_AFTER)
		return;
	cn->room = cn->room > added ? cn->room - added : 0;
	if (cn->room >= BODY_READ_MAX)
		return;
	cn->room = evbuffer_expand(buf, chunk) == 0 ? chunk : 0;
}

/*
 * The request line is in buf (evhttp has not parsed it yet): its route sets
 * the body limit, so an over-long body is refused (413) from its
 * Content-Length, before it is read. Any other line keeps API_NO_BODY.
 */
static void conn_limit(struct conn *cn, struct evbuffer *buf)
{
	char line[FIRST_LINE_MAX + 1], *sp, *target, *end;
	struct evhttp_uri *uri;
	struct evbuffer_ptr eol;
	size_t eol_len = 0, limit;

	eol = evbuffer_search_eol(buf, NULL, &eol_len, EVBUFFER_EOL_CRLF);
	if (eol.pos < 0)
		return;		/* not yet; evhttp refuses a line longer than max_headers_size */
	cn->limited = true;
	if ((size_t)eol.pos > FIRST_LINE_MAX)
		return;		/* keep the smallest limit */
	if (evbuffer_copyout(buf, line, (size_t)eol.pos) != eol.pos)
		return;
	line[eol.pos] = '\0';
	if (!(sp = strchr(line, ' ')))
		return;
	*sp = '\0';
	target = sp + 1;
	if ((end = strchr(target, ' '))) {
		*end = '\0';
		cn->http11 = strcmp(end + 1, "HTTP/1.1") == 0;
	}
	if (!(uri = evhttp_uri_parse(target)))
		return;
	limit = route_http_limit(cn->api, line, evhttp_uri_get_path(uri) ? evhttp_uri_get_path(uri) : "");
	cn->large = limit > BODY_CHUNK;
	evhttp_connection_set_max_body_size(cn->evcon, (ev_ssize_t)limit);
	evhttp_uri_free(uri);
}

/* Its bytes passed API_RECEIVING_MAX: not freed here, inside evhttp's read: the deadline event closes it next. */
static void conn_overflow(struct conn *cn)
{
	struct timeval now = { 0, 0 };

	cn->overflow = true;
	bufferevent_disable(cn->bev, EV_READ);
	evtimer_add(cn->deadline, &now);
}

/*
 * Data arrived, before evhttp parses it: counted as being received; the
 * request line sets the body limit (conn_limit). Bytes that arrive while a
 * request is dispatched are the next one's (pipelined, at most about
 * API_PIPELINE_MAX): counted, and their line is read when the answer is done.
 */
static void conn_input(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
	struct conn *cn = arg;

	if (!cn->evcon || info->n_added == 0 || cn->overflow)
		return;
	if (cn->idle) {
		/* The next request on a kept connection begins: its own deadline, from its first byte. */
		struct timeval tv = { cn->api->request_timeout_s, 0 };

		cn->idle = false;
		evtimer_add(cn->deadline, &tv);
	}
	cn->received += info->n_added;
	cn->moved += info->n_added;
	cn->api->receiving += info->n_added;
	if (cn->api->receiving > API_RECEIVING_MAX) {
		conn_overflow(cn);
		return;
	}
	if (cn->dispatched)
		return;
	if (cn->limited) {
		body_room(cn, buf, info->n_added);
		return;
	}
	conn_limit(cn, buf);
}

/*
 * The answer to cn's request has gone out (evhttp's on_complete, before it
 * closes the connection or reads the next request on it): every per-request
 * guard is set up again for the next request, as at accept.
 */
static void conn_request_done(struct evhttp_request *req, void *arg)
{
	struct conn *cn = arg;
	struct evbuffer *buf = bufferevent_get_input(cn->bev);
	struct timeval tv = { cn->api->request_timeout_s, 0 };

	(void)req;
	cn->dispatched = false;
	cn->limited = false;
	cn->http11 = false;
	cn->large = false;
	cn->room = 0;
	cn->closecb = NULL;	/* a stream's, for its request only */
	cn->closecb_arg = NULL;
	heap_policy(cn);
	if (cn->hangup)
		event_del(cn->hangup);
	bufferevent_setwatermark(cn->bev, EV_READ, 0, 0);	/* evhttp reads the next request whole */
	evhttp_connection_set_max_body_size(cn->evcon, API_NO_BODY);
	/* Pipelined bytes, counted in received as they came: the next request has begun. */
	cn->idle = evbuffer_get_length(buf) == 0;
	evtimer_add(cn->deadline, &tv);
	if (!cn->idle)
		conn_limit(cn, buf);
}

/*
 * What evhttp queues on a connection's way out, for heap_policy. Never
 * touches cn on a drain (n_added 0). It runs at every add and write of the
 * output, and costs nothing measurable: 7 of 142K perf samples of fleetd
 * serving five GETs of a 200 MiB memory value (the copies: 48%); counting
 * at every reply and stream site instead would need a connection lookup
 * at each.
 */
static void conn_output(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
	(void)buf;
	if (info->n_added > 0)
		((struct conn *)arg)->sent += info->n_added;
}

/* evhttp's bevcb: called for each accepted connection, before evhttp sets the fd. */
static struct bufferevent *conn_new(struct event_base *base, void *arg)
{
	struct api *api = arg;
	struct conn *cn = xcalloc(1, sizeof(*cn));

	cn->api = api;
	cn->bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
	cn->setup = event_new(base, -1, 0, conn_setup, cn);
	cn->deadline = evtimer_new(base, conn_deadline, cn);
	if (!cn->bev || !cn->setup || !cn->deadline || !evbuffer_add_cb(bufferevent_get_input(cn->bev), conn_input, cn) ||
	    !evbuffer_add_cb(bufferevent_get_output(cn->bev), conn_output, cn))
		abort();
	cn->next = api->conns;
	api->conns = cn;
	api->n_conns++;
	/* Runs in this pass of the loop, after evhttp has the connection and before anything is read. */
	event_active(cn->setup, EV_TIMEOUT, 1);
	return cn->bev;
}

/* ---- replies that outlive their handler: see struct api_stream ---- */

void api_stream_begin(struct api_call *c, struct api_stream *st, void (*failed)(void *arg), void *arg)
{
	struct conn *cn;

	*st = (struct api_stream){ .req = c->req, .failed = failed, .arg = arg };
	if (!serving)
		return;
	/*
	 * Not HTTP/1.1: the stream is not chunked, its end is the connection's
	 * (HTTP/1.0 with keep-alive included). evhttp decides to close at the
	 * stream's end from the headers then.
	 */
	if ((cn = conn_find(serving, evhttp_request_get_connection(c->req))) && !cn->http11)
		evhttp_add_header(evhttp_request_get_output_headers(c->req), "Connection", "close");
	st->next = serving->streams;
	serving->streams = st;
}

void api_stream_end(struct api_stream *st)
{
	for (struct api_stream **pp = serving ? &serving->streams : NULL; pp && *pp; pp = &(*pp)->next)
		if (*pp == st) {
			*pp = st->next;
			return;
		}
}

/* Is req a stream in flight (libevent calling back after a write error)? Tell its owner once. */
static bool stream_claim(struct api *api, struct evhttp_request *req)
{
	for (struct api_stream *st = api->streams; st; st = st->next)
		if (st->req == req) {
			if (!st->failed_called) {
				st->failed_called = true;
				st->failed(st->arg);
			}
			return true;
		}
	return false;
}

static void api_dispatch(struct evhttp_request *req, void *arg)
{
	struct api *api = arg;
	struct api_call c = { .fleetd = api->fleetd, .req = req, .uid = (uid_t)-1 };
	struct evhttp_connection *conn = evhttp_request_get_connection(req);
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
	const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
	const char *method = method_name(evhttp_request_get_command(req));
	struct ucred cred;
	socklen_t clen = sizeof(cred);
	char bufs[2][256];
	bool path_known = false;
	struct conn *cn;
	int fd;

	if (stream_claim(api, req))
		return;		/* libevent reporting a write error on a stream: the stream ends itself */
	if ((cn = conn_find(api, conn)) && !cn->dispatched) {
		size_t next = evbuffer_get_length(bufferevent_get_input(cn->bev));	/* read ahead: the next request's */

		cn->dispatched = true;	/* the request is in: no deadline for the answer */
		next = next < cn->received ? next : cn->received;
		api->receiving -= cn->received - next;
		cn->received = next;
		evtimer_del(cn->deadline);
		/* Read on to see a hang-up, but buffer no more than this of the next requests meanwhile. */
		bufferevent_setwatermark(cn->bev, EV_READ, 0, API_PIPELINE_MAX);
		if (cn->hangup)
			event_add(cn->hangup, NULL);
		evhttp_request_set_on_complete_cb(req, conn_request_done, cn);
	}
	/*
	 * Checked at connect already; again here, for each request: the socket
	 * group may have changed since. The credentials are the connect's (the
	 * kernel's too: SO_PEERCRED reports the peer at connect()).
	 */
	fd = bufferevent_getfd(evhttp_connection_get_bufferevent(conn));
	if (cn && cn->have_cred)
		cred = cn->cred;
	else if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) < 0) {
		log_warning("api: cannot read the caller's credentials: %s", strerror(errno));
		api_error(&c, 403, "forbidden", "caller credentials unavailable");
		return;
	}
	c.uid = cred.uid;
	c.pid = cred.pid;
	if (!peer_allowed(api, c.uid)) {
		log_notice("api: refused uid %ld (pid %ld): not root and not in the socket group",
			   (long)cred.uid, (long)cred.pid);
		api_error(&c, 403, "forbidden", "uid %ld may not use fleetd", (long)cred.uid);
		return;
	}
	if (!path)
		path = "";
	for (size_t i = 0; i < api->n_routes; i++) {
		const struct api_route *rt = &api->routes[i];
		const char *p[2];

		if (!api_route_match(rt->pattern, path, bufs, p))
			continue;
		path_known = true;
		if (strcmp(rt->method, method) != 0)
			continue;
		c.param = p[0];
		c.param2 = p[1];
		c.action = rt->action;
		c.max_body = rt->max_body;
		log_debug("api: uid %ld %s %s", (long)c.uid, method, path);
		rt->handler(&c);
		if (!c.replied) {
			log_error("api: %s %s: handler sent no reply", method, path);
			api_error(&c, 500, "internal", "internal error");
		}
		return;
	}
	if (path_known)
		api_error(&c, 405, "method_not_allowed", "%s is not allowed on this path", method);
	else
		api_error(&c, 404, "not_found", "no such API path; see /v1/status");
}

/* Refuse to steal a socket another live process is serving. */
static int socket_claim(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	_cleanup_close_ int fd = -1;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
		return -EADDRINUSE;
	if (unlink(path) < 0 && errno != ENOENT)
		return -errno;
	return 0;
}

static gid_t resolve_group(const struct config *cfg)
{
	const char *name = config_get(cfg, CFG_SOCKET_GROUP);
	struct group *gr;

	if (!*name || !(gr = getgrnam(name)))
		return (gid_t)-1;
	return gr->gr_gid;
}

/*
 * The socket's directory must be nobody else's to write: whoever can write
 * there could swap the socket for a symlink, or for a socket of their own,
 * under fleetd's feet. -EPERM (logged) when it is.
 */
static int socket_dir_check(const char *dir)
{
	struct stat st;

	if (stat(dir, &st) < 0)
		return -errno;
	if (!S_ISDIR(st.st_mode))
		return -ENOTDIR;
	if ((st.st_uid != 0 && st.st_uid != geteuid()) || (st.st_mode & S_IWOTH) ||
	    ((st.st_mode & S_IWGRP) && st.st_gid != 0)) {
		log_error("api: refusing socket directory %s: others can write it (mode %04o, owner uid %u, group gid %u); "
			  "use a directory only root can write, such as /run/fleet",
			  dir, (unsigned)(st.st_mode & 07777), (unsigned)st.st_uid, (unsigned)st.st_gid);
		return -EPERM;
	}
	return 0;
}

/*
 * Owner and mode of the socket, through its directory and without following
 * a symlink: only the very socket we bound (same device and inode) is
 * changed. -ESTALE when something else is at its path.
 */
static int socket_set_owner(struct api *api)
{
	gid_t gid = api->group == (gid_t)-1 ? 0 : api->group;
	_cleanup_free_ char *dir = xstrdup(api->socket_path);
	char *slash = strrchr(dir, '/');
	const char *name = slash + 1;
	_cleanup_close_ int dfd = -1;
	struct stat st;

	*slash = '\0';
	dfd = open(*dir ? dir : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0 || fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return -errno;
	if (!S_ISSOCK(st.st_mode) || st.st_dev != api->sock_dev || st.st_ino != api->sock_ino)
		return -ESTALE;
	if (fchownat(dfd, name, 0, gid, AT_SYMLINK_NOFOLLOW) < 0 && geteuid() == 0)
		return -errno;
	if (fchmodat(dfd, name, 0660, AT_SYMLINK_NOFOLLOW) < 0)
		return -errno;
	return 0;
}

void api_reload(struct api *api)
{
	const struct config *cfg = &api->fleetd->cfg;
	int r;

	api->group = resolve_group(cfg);
	api->max_body = (size_t)config_get_long(cfg, CFG_MAX_BODY);
	api->max_conns = config_get_long(cfg, CFG_MAX_CONNECTIONS);
	api->request_timeout_s = config_get_long(cfg, CFG_REQUEST_TIMEOUT);
	if ((r = socket_set_owner(api)) == -ESTALE)
		log_error("api: %s is no longer fleetd's socket (replaced); its owner and mode are left alone",
			  api->socket_path);
	else if (r < 0)
		log_error("api: cannot set owner of %s: %s", api->socket_path, strerror(-r));
}

long api_connections(const struct api *api)
{
	return api ? api->n_conns : 0;
}

int api_start(struct fleetd *fleetd, const struct api_route *routes, size_t n, struct api **ret)
{
	const char *path = config_get(&fleetd->cfg, CFG_SOCKET);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct evconnlistener *lev;
	_cleanup_close_ int fd = -1;
	_cleanup_free_ char *dir = xstrdup(path);
	struct api *api;
	mode_t old;
	int r;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	*strrchr(dir, '/') = '\0';
	if (*dir && access(dir, F_OK) < 0) {
		/* 0755 whatever the umask: members of socket_group must reach the socket. */
		if ((r = mkdir_p(dir, 0755)) < 0 || (chmod(dir, 0755) < 0 && (r = -errno))) {
			log_error("api: cannot create %s: %s", dir, strerror(-r));
			return r;
		}
	}
	if ((r = socket_dir_check(*dir ? dir : "/")) < 0) {
		if (r != -EPERM)
			log_error("api: cannot use socket directory %s: %s", *dir ? dir : "/", strerror(-r));
		return r;
	}
	if ((r = socket_claim(path)) < 0) {
		if (r == -EADDRINUSE)
			log_error("api: %s is served by another running process; refusing to take it over", path);
		else
			log_error("api: cannot remove stale socket %s: %s", path, strerror(-r));
		return r;
	}
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	/* Never let the socket exist with looser permissions than 0660, not even briefly. */
	old = umask(0117);
	r = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	umask(old);
	if (r < 0 || listen(fd, 64) < 0) {
		r = -errno;
		log_error("api: cannot listen on %s: %s", path, strerror(-r));
		return r;
	}
	{
		struct stat st;
		if (lstat(path, &st) < 0 || !S_ISSOCK(st.st_mode)) {
			log_error("api: the socket %s vanished after bind", path);
			return -EIO;
		}
		api = xcalloc(1, sizeof(*api));
		api->sock_dev = st.st_dev;
		api->sock_ino = st.st_ino;
	}
	api->fleetd = fleetd;
	api->routes = routes;
	api->n_routes = n;
	api->socket_path = xstrdup(path);
	api->http = evhttp_new(fleetd->base);
	if (!api->http)
		abort();
	lev = evconnlistener_new(fleetd->base, NULL, NULL, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, -1, fd);
	if (!lev || !evhttp_bind_listener(api->http, lev)) {
		log_error("api: cannot serve %s", path);
		api_stop(api);
		return -EIO;
	}
	TAKE_FD(fd);
	evhttp_set_allowed_methods(api->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_PUT |
				   EVHTTP_REQ_DELETE | EVHTTP_REQ_PATCH | EVHTTP_REQ_HEAD);
	evhttp_set_max_headers_size(api->http, 16384);
	/* Each connection's is set from its request line (conn_input); until then, no body. */
	evhttp_set_max_body_size(api->http, API_NO_BODY);
	/* Idle time per read or write; request_timeout bounds receiving the whole request. */
	evhttp_set_timeout(api->http, 120);
	evhttp_set_bevcb(api->http, conn_new, api);
	evhttp_set_gencb(api->http, api_dispatch, api);
#ifdef __GLIBC__
	/*
	 * Blocks from API_MMAP_MIN up are mappings of their own, always: glibc
	 * would otherwise raise that threshold to the size of the largest one
	 * freed, and put large bodies' chunks (body_room) into the heap, where
	 * freed ones leave holes only a trim gives back.
	 */
	(void)mallopt(M_MMAP_THRESHOLD, API_MMAP_MIN);
	/*
	 * Below that, keep freed heap for the next request instead of handing
	 * it back at once: a list of a thousand agents builds megabytes of
	 * JSON in small blocks, and with glibc's default trim (128 KiB) those
	 * pages were fresh again on every call, a page fault each: half of
	 * fleetd's CPU time per list. Bounded: at most 32 MiB kept at the top;
	 * heap_policy still trims after large bodies.
	 */
	(void)mallopt(M_TRIM_THRESHOLD, 32 << 20);
	(void)mallopt(M_TOP_PAD, 4 << 20);
#endif
	serving = api;
	api_reload(api);
	if ((r = socket_set_owner(api)) < 0) {
		log_error("api: cannot set permissions on %s: %s", path, strerror(-r));
		api_stop(api);
		return r;
	}
	log_info("api: listening on %s (mode 0660, group %s)", path,
		 api->group == (gid_t)-1 ? "root only" : config_get(&fleetd->cfg, CFG_SOCKET_GROUP));
	*ret = api;
	return 0;
}

/*
 * fleetd is stopping with c deferred (a host add still connecting, a start
 * still booting): answer 503 now, while its connection is there, and write
 * the answer out at once (the loop will not run again to do it). c stays
 * its owner's, whose answer later only frees it.
 */
static void deferred_stop(struct api_call *c)
{
	const char *msg = "fleetd is stopping; this call was not finished";
	json_t *body = json_pack("{s:s, s:s}", "error", msg, "code", "unavailable");
	struct evhttp_connection *evcon = evhttp_request_get_connection(c->req);
	struct bufferevent *bev = evcon ? evhttp_connection_get_bufferevent(evcon) : NULL;
	struct evbuffer *buf = evbuffer_new();
	char *text = body ? json_dumps(body, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;

	if (!buf || !text)
		abort();
	evbuffer_add_printf(buf, "%s\n", text);
	if (c->action)
		api_audit(c, "failed", msg);
	evhttp_add_header(evhttp_request_get_output_headers(c->req), "Content-Type", "application/json");
	evhttp_send_reply(c->req, 503, "Service Unavailable", buf);	/* frees req if its client went */
	if (bev)
		(void)evbuffer_write(bufferevent_get_output(bev), bufferevent_getfd(bev));
	evbuffer_free(buf);
	free(text);
	json_decref(body);
	c->req = NULL;
	c->orphaned = true;
}

void api_stop(struct api *api)
{
	if (!api)
		return;
	while (api->deferred) {
		struct api_call *c = api->deferred;

		api->deferred = c->next_deferred;
		deferred_stop(c);
		c->next_deferred = orphans;
		orphans = c;
	}
	if (api->http)
		evhttp_free(api->http);	/* frees its connections: conn_closed for each set up */
	while (api->conns)
		conn_free(api->conns);	/* accepted, not yet set up */
	if (serving == api)
		serving = NULL;
	if (api->socket_path)
		unlink(api->socket_path);
	free(api->socket_path);
	free(api);
}
