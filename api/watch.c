/*
 * api_watch: GET /v1/watch[?agent=NAME] streams core/watch.c's events as
 * chunked JSON lines until the client hangs up. The first line,
 * {"type":"watching",...}, says the subscription is in place.
 *
 * A watcher that reads too slowly is cut off, never buffered without
 * bound: its socket's send buffer is set to watch_buffer_bytes, and once
 * more than that many bytes wait unsent in fleetd an event is not queued;
 * instead the watcher gets a last {"type":"overflow",...} line and its
 * stream ends. So one watcher holds at most about twice watch_buffer_bytes
 * plus one event, in fleetd and the kernel together.
 */
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/http.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "api/handler.h"
#include "api/server.h"
#include "api/watch.h"
#include "common/log.h"
#include "common/names.h"
#include "core/watch.h"
#include "model/config.h"
#include "model/fleetd.h"

struct watch_reply {
	struct evhttp_request *req;
	struct evhttp_connection *conn;
	struct fleetd *fleetd;
	struct watcher *watcher;
	size_t max_unsent;
	unsigned long long sent;	/* events sent, for the overflow line */
	struct api_stream stream;	/* the server's note of this reply in flight */
};

/* Unsubscribe and forget s (the request is libevent's by now, or was freed). */
static void watch_reply_free(struct watch_reply *s)
{
	watch_unsubscribe(s->fleetd, s->watcher);
	api_stream_end(&s->stream);
	free(s);
}

/*
 * End the stream ourselves: no close callback first (ending it may close
 * the connection at once), then libevent sends what is queued and closes.
 */
static void end_stream(struct watch_reply *s)
{
	api_conn_set_closecb(s->conn, NULL, NULL);
	evhttp_send_reply_end(s->req);
	watch_reply_free(s);
}

static void send_line(struct watch_reply *s, const char *line, size_t len)
{
	struct evbuffer *buf = evbuffer_new();

	if (!buf || evbuffer_add(buf, line, len) < 0)
		abort();	/* out of memory, as xmalloc would */
	evhttp_send_reply_chunk(s->req, buf);
	evbuffer_free(buf);
}

static void on_event(void *userdata, const char *line, size_t len)
{
	struct watch_reply *s = userdata;
	struct bufferevent *bev = evhttp_connection_get_bufferevent(s->conn);
	size_t unsent = evbuffer_get_length(bufferevent_get_output(bev));
	char *last;

	if (unsent + len <= s->max_unsent) {
		send_line(s, line, len);
		s->sent++;
		return;
	}
	last = xasprintf("{\"type\":\"overflow\",\"error\":\"this watcher read too slowly: %zu bytes waited unsent "
			 "(watch_buffer_bytes); the stream ends here\",\"events_sent\":%llu}\n",
			 unsent, s->sent);
	send_line(s, last, strlen(last));
	free(last);
	log_warning("api: a watcher read too slowly (%zu bytes unsent); cut off", unsent);
	end_stream(s);
}

/* The client went away: its request is freed here if libevent detached it, else with its connection. */
static void on_client_gone(struct evhttp_connection *conn, void *userdata)
{
	struct watch_reply *s = userdata;

	if (!evhttp_request_get_connection(s->req))
		evhttp_send_reply_end(s->req);
	watch_reply_free(s);
}

/* libevent called the request back after a write error: end it as when the client goes. */
static void on_conn_failed(void *userdata)
{
	end_stream(userdata);
}

void api_watch(struct api_call *c)
{
	char agent[AGENT_NAME_MAX + 2];
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(c->req);
	const char *query = uri ? evhttp_uri_get_query(uri) : NULL;
	const char *why, *filter = NULL;
	struct watch_reply *s;
	json_t *hello;
	char *line;
	int fd, sndbuf;

	if (api_query(c, "agent", agent, sizeof(agent))) {
		if (agent_name_check(agent, &why) < 0) {
			api_error(c, 400, "invalid", "invalid agent name '%.64s': %s", agent, why);
			return;
		}
		filter = agent;
	} else if (query && *query) {
		/* Only ?agent=NAME; a name too long for agent[] is refused, not taken for "every agent". */
		api_error(c, 400, "invalid", "the only query is ?agent=NAME, with a valid agent name");
		return;
	}
	s = xcalloc(1, sizeof(*s));
	s->req = c->req;
	s->conn = evhttp_request_get_connection(c->req);
	s->fleetd = c->fleetd;
	s->max_unsent = (size_t)config_get_long(&c->fleetd->cfg, CFG_WATCH_BUFFER);
	/* The kernel holds no more than fleetd does for a reader that stopped. */
	sndbuf = (int)s->max_unsent;
	fd = bufferevent_getfd(evhttp_connection_get_bufferevent(s->conn));
	if (fd >= 0 && setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf)) < 0)
		log_warning("api: cannot bound a watcher's send buffer: %m");
	c->replied = true;
	evhttp_add_header(evhttp_request_get_output_headers(c->req), "Content-Type", "application/x-ndjson");
	evhttp_send_reply_start(c->req, 200, "OK");
	api_conn_set_closecb(s->conn, on_client_gone, s);
	api_stream_begin(c, &s->stream, on_conn_failed, s);
	hello = json_pack("{s:s, s:s?}", "type", "watching", "agent", filter);
	line = json_dumps(hello, JSON_COMPACT);
	json_decref(hello);
	if (!line)
		abort();
	line = xrealloc(line, strlen(line) + 2);
	strcat(line, "\n");
	send_line(s, line, strlen(line));
	free(line);
	s->watcher = watch_subscribe(c->fleetd, filter, on_event, s);
	log_info("api: uid %ld watches %s%s", (long)c->uid, filter ? "agent " : "every agent", filter ? filter : "");
}
