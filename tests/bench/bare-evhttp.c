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
 */
#include <event2/event.h>
#include <event2/http.h>
#include <event2/buffer.h>
#include <event2/util.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>

static int close_each;

static void on_request(struct evhttp_request *req, void *arg)
{
	struct evbuffer *out = evhttp_request_get_output_buffer(req);

	(void)arg;
	evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "application/json");
	if (close_each)
		evhttp_add_header(evhttp_request_get_output_headers(req), "Connection", "close");
	evbuffer_add_printf(out, "{\"status\":\"accepted\"}\n");
	evhttp_send_reply(req, 202, "Accepted", NULL);
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
	}
	if (argc != 2) {
		fprintf(stderr, "usage: bare-evhttp [--close] PORTFILE\n");
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	if (!(base = event_base_new()) || !(http = evhttp_new(base))) {
		fprintf(stderr, "bare-evhttp: out of memory\n");
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
