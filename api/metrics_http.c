/* metrics_http: see metrics_http.h. */
#include "api/metrics_http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/listener.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "api/metrics.h"
#include "common/log.h"
#include "common/netaddr.h"
#include "common/util.h"
#include "model/config.h"
#include "model/fleetd.h"

/* A scraper sends a short GET: small limits, and a slow client is cut off. */
#define METRICS_HEADERS_MAX 8192
#define METRICS_TIMEOUT_S 10

struct metrics_http {
	struct evhttp *http;
	char addr[80];
};

static void on_request(struct evhttp_request *req, void *arg)
{
	struct fleetd *f = arg;
	const char *path = evhttp_uri_get_path(evhttp_request_get_evhttp_uri(req));
	struct evbuffer *out;

	if (!path || strcmp(path, "/metrics") != 0) {
		evhttp_send_error(req, HTTP_NOTFOUND, "only /metrics is served here");
		return;
	}
	if (evhttp_request_get_command(req) != EVHTTP_REQ_GET && evhttp_request_get_command(req) != EVHTTP_REQ_HEAD) {
		evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", "GET, HEAD");
		evhttp_send_error(req, HTTP_BADMETHOD, "only GET");
		return;
	}
	if (!(out = evbuffer_new()))
		abort();	/* out of memory */
	metrics_write(f, out);
	evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", METRICS_CONTENT_TYPE);
	evhttp_send_reply(req, HTTP_OK, "OK", out);
	evbuffer_free(out);
}

int metrics_http_start(struct fleetd *f)
{
	const char *spec = config_get(&f->cfg, CFG_METRICS_LISTEN);
	bool remote = strcmp(config_get(&f->cfg, CFG_METRICS_ALLOW_REMOTE), "yes") == 0;
	struct addrinfo *ai = NULL;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	struct metrics_http *m;
	int one = 1, fd = -1, r;

	if (strcmp(spec, "none") == 0)
		return 0;
	if (netaddr_resolve(spec, &ai) < 0) {
		log_error("metrics: metrics_listen '%s' is not an address and port", spec);
		return -EINVAL;
	}
	if (!remote && !netaddr_is_loopback(ai->ai_addr)) {
		log_error("metrics: metrics_listen '%s' is not a loopback address; the metrics need no credentials, "
			  "so set metrics_allow_remote = yes to serve them there (behind a firewall)", spec);
		freeaddrinfo(ai);
		return -EPERM;
	}
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		goto fail;
	(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (ai->ai_family == AF_INET6)
		(void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 64) < 0 ||
	    getsockname(fd, (struct sockaddr *)&ss, &sl) < 0)
		goto fail;
	freeaddrinfo(ai);
	ai = NULL;
	m = xcalloc(1, sizeof(*m));
	netaddr_format(&ss, m->addr, sizeof(m->addr));
	if (!(m->http = evhttp_new(f->base)) || !evhttp_accept_socket_with_handle(m->http, fd)) {
		log_error("metrics: cannot serve %s", m->addr);
		if (m->http)
			evhttp_free(m->http);
		free(m);
		close(fd);
		return -ENOMEM;
	}
	/* Other methods reach on_request, which answers 405 (evhttp itself would say 501). */
	evhttp_set_allowed_methods(m->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD | EVHTTP_REQ_POST | EVHTTP_REQ_PUT |
				   EVHTTP_REQ_DELETE | EVHTTP_REQ_PATCH | EVHTTP_REQ_OPTIONS);
	evhttp_set_max_headers_size(m->http, METRICS_HEADERS_MAX);
	evhttp_set_max_body_size(m->http, 0);
	evhttp_set_timeout(m->http, METRICS_TIMEOUT_S);
	evhttp_set_gencb(m->http, on_request, f);
	f->metrics_http = m;
	log_notice("metrics: serving GET /metrics on %s", m->addr);
	return 0;
fail:
	r = -errno;
	log_error("metrics: cannot listen on %s (metrics_listen): %s", spec, strerror(errno));
	if (fd >= 0)
		close(fd);
	if (ai)
		freeaddrinfo(ai);
	return r;
}

const char *metrics_http_address(struct fleetd *f)
{
	return f->metrics_http ? f->metrics_http->addr : NULL;
}

void metrics_http_stop(struct fleetd *f)
{
	if (!f->metrics_http)
		return;
	evhttp_free(f->metrics_http->http);	/* closes the socket it accepted on */
	free(f->metrics_http);
	f->metrics_http = NULL;
}
