/*
 * test_api_defer_stop: a deferred API call (api_defer) still unanswered
 * when the server stops (fleetd's SIGTERM: api_stop, then the backends'
 * shutdown, which answers what it still holds: a host add still
 * connecting) is answered 503 as the server stops, and its owner's late
 * answer only frees it. The real server on a Unix socket of the test's own,
 * a real client socket; run under valgrind (the late answer once wrote to a
 * request evhttp had freed, and a dropped call was never freed).
 *
 * - A deferred call answered before the stop is answered once, not again.
 * - One unanswered at the stop: its client reads 503 and the wording.
 * - Its owner's api_reply after the stop frees it and sends nothing.
 * - One whose owner never answers is freed by api_free_orphans() (valgrind).
 * - The first client's connection is kept after its answer (keep-alive)
 *   and closed by the stop, with nothing more sent on it.
 */
#include <errno.h>
#include <event2/event.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "tests/tap.h"
#include "api/server.h"
#include "common/util.h"
#include "model/config.h"
#include "model/fleetd.h"

static struct api_call *held[3];
static int n_held;

/* A handler whose answer comes later, as a host add's does. */
static void slow(struct api_call *c)
{
	if (n_held < 3)
		held[n_held++] = api_defer(c);
}

static const struct api_route routes[] = {
	{ "POST", "/v1/slow", slow, NULL, API_NO_BODY },
};

/* A client that sent a request to path; -1 if it could not. */
static int client(const char *path)
{
	static const char req[] = "POST /v1/slow HTTP/1.1\r\nHost: fleet\r\nContent-Length: 0\r\n\r\n";
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    write(fd, req, sizeof(req) - 1) != (ssize_t)(sizeof(req) - 1)) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

/* What the client has been sent within a second (the server does not run meanwhile). */
static char *answer(int fd)
{
	char buf[4096];
	size_t len = 0;
	struct pollfd p = { .fd = fd, .events = POLLIN };

	while (len < sizeof(buf) - 1 && poll(&p, 1, 1000) > 0) {
		ssize_t n = read(fd, buf + len, sizeof(buf) - 1 - len);

		if (n <= 0)
			break;
		len += (size_t)n;
	}
	buf[len] = '\0';
	return xstrdup(buf);
}

static void run_until(struct event_base *base, int want)
{
	for (int i = 0; i < 50 && n_held < want; i++) {
		struct timeval tv = { 0, 100000 };

		event_base_loopexit(base, &tv);
		event_base_dispatch(base);
	}
}

int main(void)
{
	char dir[] = "/tmp/test_api_defer_stop.XXXXXX";
	struct fleetd f = { .lock_fd = -1 };
	struct api *api = NULL;
	const char *why = NULL;
	char *path, *got;
	int a, b, c, r;

	if (geteuid() != 0) {
		printf("1..0 # SKIP the API socket's directory checks want root\n");
		return 77;
	}
	if (!mkdtemp(dir) || !(f.base = event_base_new()))
		return printf("not ok 1 - setup\n1..1\n"), 1;
	path = xasprintf("%s/fleet.sock", dir);
	config_init(&f.cfg);
	ok(config_set(&f.cfg, CFG_SOCKET, path, CFG_FROM_CMDLINE, 0, &why) == 0, "socket %s", path);
	r = api_start(&f, routes, 1, &api);
	is_int(r, 0, "the API serves");
	if (r < 0)
		return tap_done();

	/* One answered before the stop. */
	a = client(path);
	ok(a >= 0, "a first client sent its request");
	run_until(f.base, 1);
	is_int(n_held, 1, "its call is deferred");
	api_reply(held[0], 200, json_pack("{s:s}", "done", "yes"));
	run_until(f.base, 99);	/* a loop pass writes the answer */
	got = answer(a);
	ok(strncmp(got, "HTTP/1.1 200", 12) == 0 && strstr(got, "\"done\""), "it is answered 200 before the stop");
	free(got);

	/* One still unanswered at the stop. */
	b = client(path);
	ok(b >= 0, "a second client sent its request");
	run_until(f.base, 2);
	is_int(n_held, 2, "its call is deferred too");
	/* A third one, whose owner will never answer. */
	c = client(path);
	ok(c >= 0, "a third client sent its request");
	run_until(f.base, 3);
	is_int(n_held, 3, "its call is deferred too");
	api_stop(api);
	got = answer(b);
	ok(strncmp(got, "HTTP/1.1 503", 12) == 0, "the stop answers it 503: %.12s", got);
	ok(strstr(got, "fleetd is stopping; this call was not finished") && strstr(got, "\"unavailable\""),
	   "saying fleetd is stopping");
	free(got);
	/* Its owner answers late (a backend's shutdown): only freed (valgrind checks both). */
	api_error(held[1], 503, "unavailable", "host 'x': not added: fleetd is stopping");
	ok(1, "its owner's late answer returned");
	got = answer(a);
	is_str(got, "", "the first client was answered once");
	free(got);
	got = answer(c);
	ok(strncmp(got, "HTTP/1.1 503", 12) == 0, "the third is answered 503 too: %.12s", got);
	free(got);
	api_free_orphans();	/* the third's owner never answers: freed here, or valgrind reports it lost */
	ok(1, "the unanswered call was freed at exit");

	close(a);
	close(b);
	close(c);
	event_base_free(f.base);
	config_free(&f.cfg);
	unlink(path);
	rmdir(dir);
	free(path);
	return tap_done();
}
