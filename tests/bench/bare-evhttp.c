/*
 * bare-evhttp: the baseline of tests/bench/hooks-bench.sh. A libevent 2.1
 * evhttp server on one loopback port that answers every request 202 with a
 * small JSON body and does nothing else: no verification, no storage. What a
 * webhook receiver costs before it does any work.
 *
 * Usage: bare-evhttp [--close] PORTFILE   listens on 127.0.0.1, any free
 * port, writes that port to PORTFILE, then serves until SIGTERM or SIGINT.
 * --close answers "Connection: close", one request per connection, as
 * fleet's listener does: the cost of a new connection per request, apart.
 * --durable FILE: the least a durable receiver does: each request's body is
 * appended to FILE and its answer held; once the loop has read every
 * request that is ready, one fdatasync makes the batch durable and all of
 * it is answered (group commit, without a database, a checksum or any
 * parsing). Its rate is the ceiling that this disk's sync latency sets for
 * any receiver that answers only what is on disk.
 */
#include <event2/event.h>
#include <event2/http.h>
#include <event2/buffer.h>
#include <event2/util.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

static int close_each;

/* --durable: the batch of answers held until the next fdatasync. */
static int durable_fd = -1;
static struct event *flush_ev;
static struct evhttp_request **held;
static size_t n_held, cap_held;

static void answer(struct evhttp_request *req)
{
	struct evbuffer *out = evhttp_request_get_output_buffer(req);

	evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "application/json");
	if (close_each)
		evhttp_add_header(evhttp_request_get_output_headers(req), "Connection", "close");
	evbuffer_add_printf(out, "{\"status\":\"accepted\"}\n");
	evhttp_send_reply(req, 202, "Accepted", NULL);
}

/* At the loop pass's lowest priority: every ready request has been read. */
static void on_flush(evutil_socket_t fd, short what, void *arg)
{
	(void)fd; (void)what; (void)arg;
	if (fdatasync(durable_fd) < 0) {
		perror("bare-evhttp: fdatasync");
		exit(1);
	}
	for (size_t i = 0; i < n_held; i++)
		if (held[i])
			answer(held[i]);
	n_held = 0;
}

/* A connection closed with its request held: evhttp frees that request, so it is not answered. */
static void on_close(struct evhttp_connection *evcon, void *arg)
{
	(void)evcon;
	for (size_t i = 0; i < n_held; i++)
		if (held[i] == arg)
			held[i] = NULL;
}

static void on_request(struct evhttp_request *req, void *arg)
{
	struct evbuffer *body = evhttp_request_get_input_buffer(req);

	(void)arg;
	if (durable_fd < 0) {
		answer(req);
		return;
	}
	while (evbuffer_get_length(body) > 0)
		if (evbuffer_write(body, durable_fd) < 0) {
			perror("bare-evhttp: write");
			exit(1);
		}
	if (n_held == cap_held) {
		cap_held = cap_held ? cap_held * 2 : 256;
		if (!(held = realloc(held, cap_held * sizeof(*held)))) {
			fprintf(stderr, "bare-evhttp: out of memory\n");
			exit(1);
		}
	}
	held[n_held++] = req;
	evhttp_connection_set_closecb(evhttp_request_get_connection(req), on_close, req);
	if (n_held == 1)
		event_active(flush_ev, EV_TIMEOUT, 0);
}

static void on_signal(evutil_socket_t fd, short what, void *arg)
{
	(void)fd; (void)what;
	event_base_loopbreak(arg);
}

int main(int argc, char **argv)
{
	struct event_base *base;
	struct evhttp *http;
	struct evhttp_bound_socket *bound;
	struct event *term, *intr;
	struct sockaddr_in sin;
	socklen_t len = sizeof(sin);
	FILE *f;

	if (argc == 3 && strcmp(argv[1], "--close") == 0) {
		close_each = 1;
		argv++;
		argc--;
	} else if (argc == 4 && strcmp(argv[1], "--durable") == 0) {
		if ((durable_fd = open(argv[2], O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600)) < 0) {
			perror("bare-evhttp: --durable");
			return 1;
		}
		argv += 2;
		argc -= 2;
	}
	if (argc != 2) {
		fprintf(stderr, "usage: bare-evhttp [--close | --durable FILE] PORTFILE\n");
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	if (!(base = event_base_new()) || event_base_priority_init(base, 3) < 0 || !(http = evhttp_new(base))) {
		fprintf(stderr, "bare-evhttp: out of memory\n");
		return 1;
	}
	/* evhttp's events take the middle priority (1 of 0-2); the flush the lowest, so it runs after the pass's reads. */
	if (durable_fd >= 0 && (!(flush_ev = event_new(base, -1, 0, on_flush, NULL)) || event_priority_set(flush_ev, 2) < 0)) {
		fprintf(stderr, "bare-evhttp: cannot make the flush event\n");
		return 1;
	}
	evhttp_set_max_body_size(http, 1 << 20);
	evhttp_set_allowed_methods(http, EVHTTP_REQ_POST);
	evhttp_set_gencb(http, on_request, NULL);
	if (!(bound = evhttp_bind_socket_with_handle(http, "127.0.0.1", 0))) {
		fprintf(stderr, "bare-evhttp: cannot listen on 127.0.0.1\n");
		return 1;
	}
	if (getsockname(evhttp_bound_socket_get_fd(bound), (struct sockaddr *)&sin, &len) < 0) {
		perror("bare-evhttp: getsockname");
		return 1;
	}
	/* The port file appears only once the socket listens: the script waits for it. */
	if (!(f = fopen(argv[1], "w")) || fprintf(f, "%u\n", ntohs(sin.sin_port)) < 0 || fclose(f) != 0) {
		perror("bare-evhttp: writing the port file");
		return 1;
	}
	term = evsignal_new(base, SIGTERM, on_signal, base);
	intr = evsignal_new(base, SIGINT, on_signal, base);
	if (!term || !intr || evsignal_add(term, NULL) < 0 || evsignal_add(intr, NULL) < 0) {
		fprintf(stderr, "bare-evhttp: cannot catch signals\n");
		return 1;
	}
	event_base_dispatch(base);
	event_free(term);
	event_free(intr);
	evhttp_free(http);
	event_base_free(base);
	return 0;
}
