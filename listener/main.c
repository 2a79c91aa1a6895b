/*
 * fleet-hooksd: fleetd's webhook listener, the only part of fleet that
 * reads from the network. fleetd starts it as root with
 *
 *   fleet-hooksd --user USER --root DIR
 *
 * and fd 3 = its end of a socketpair (listener/link.c, hooks/proto.h),
 * fd 4 = the listening TCP socket fleetd bound, fd 0 = /dev/null, fds 1
 * and 2 = a pipe fleetd logs from. It drops its privileges first
 * (listener/privsep.c), says hello, serves nothing until fleetd's first
 * routes, then answers what it can refuse by itself and passes verified
 * deliveries up, answering each sender with fleetd's answer. When fleetd's
 * end closes it answers what is pending 503 and exits, so fleetd can start
 * a fresh one. Exit status: 0 when fleetd closed the link or on SIGTERM,
 * 1 on any failure, 2 on bad arguments.
 */
#include <errno.h>
#include <event2/event.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "hooks/proto.h"
#include "listener/link.h"
#include "listener/privsep.h"
#include "listener/server.h"

#define LINK_FD 3
#define LISTEN_FD 4
#define DRAIN_MAX_S 5	/* after the link is down: longest wait for open answers to be written */

struct main_ctx {
	struct event_base *base;
	struct link *link;
	struct lserver *srv;
	struct event *drain_timer;
	int status;
};

static void stop(struct main_ctx *m, int status)
{
	m->status = status;
	event_base_loopexit(m->base, NULL);
}

static void drained(void *arg)
{
	struct main_ctx *m = arg;

	event_base_loopexit(m->base, NULL);
}

static void drain_timeout(evutil_socket_t fd, short what, void *arg)
{
	struct main_ctx *m = arg;

	(void)fd;
	(void)what;
	log_warning("connections still open %d s after the link went down; exiting", DRAIN_MAX_S);
	event_base_loopexit(m->base, NULL);
}

/* Stop serving: pending deliveries get 503, then exit once their answers are out (or DRAIN_MAX_S). */
static void go_down(struct main_ctx *m, int status)
{
	struct timeval tv = { DRAIN_MAX_S, 0 };

	if (m->drain_timer)
		return;
	m->status = status;
	m->drain_timer = evtimer_new(m->base, drain_timeout, m);
	if (!m->drain_timer)
		abort();
	evtimer_add(m->drain_timer, &tv);
	lserver_link_down(m->srv, drained, m);
}

static void on_down(bool error, void *arg)
{
	go_down(arg, error ? 1 : 0);
}

/* The secrets' base64 text in a routes message, zeroed before the message is freed (the set has its own copy). */
static void wipe_route_secrets(const json_t *msg)
{
	size_t i, k;
	json_t *r, *sec;

	json_array_foreach(json_object_get(msg, "routes"), i, r)
		json_array_foreach(json_object_get(r, "secrets"), k, sec)
			if (json_is_string(sec))
				explicit_bzero((char *)json_string_value(sec), json_string_length(sec));
}

static void on_message(const json_t *msg, void *arg)
{
	struct main_ctx *m = arg;
	const char *type = hook_msg_type(msg), *why = NULL;

	if (m->drain_timer)
		return;
	if (strcmp(type, "routes") == 0) {
		struct hook_route_set *set = NULL;
		int r;

		r = hook_msg_routes_parse(msg, &set, &why);
		wipe_route_secrets(msg);
		if (r < 0) {
			log_error("link: fleetd sent a bad route table (%s); stopping", why);
			go_down(m, 1);
			return;
		}
		lserver_set_routes(m->srv, set);
	} else {
		log_error("link: fleetd sent a message of unexpected type '%.32s'; stopping", type);
		go_down(m, 1);
	}
}

static void on_answer(const struct hook_answer *a, void *arg)
{
	struct main_ctx *m = arg;

	if (m->drain_timer)
		return;
	if (lserver_answer(m->srv, a) < 0)
		log_warning("link: fleetd answered delivery %llu, which is not waiting", (unsigned long long)a->seq);
}

static const struct link_ops link_ops = { .message = on_message, .answer = on_answer, .down = on_down };

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
	(void)what;
	log_info("signal %d: stopping", (int)sig);
	go_down(arg, 0);
}

static void usage(FILE *f)
{
	fprintf(f, "Usage: fleet-hooksd --user USER --root DIR\n"
		   "fleetd's webhook listener; fleetd starts it with fd 3 = its socketpair and fd 4 = the listening socket.\n");
}

/* fd is a socket of the given type (and listening, if listening). */
static bool fd_is_socket(int fd, int type, bool listening)
{
	struct stat st;
	int v = 0;
	socklen_t len = sizeof(v);

	if (fstat(fd, &st) < 0 || !S_ISSOCK(st.st_mode))
		return false;
	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &v, &len) < 0 || v != type)
		return false;
	len = sizeof(v);
	return !listening || (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &len) == 0 && v);
}

/*
 * epoll with libevent's changelist: evhttp turns each connection's read and
 * write events on and off around every request (about 4 epoll_ctl per
 * request, 12 % of this process's CPU at 64 connections); with the
 * changelist, what changed for a descriptor in one loop pass becomes at most
 * one epoll_ctl, made before the next wait. Its known trap is a dup()ed
 * descriptor closed with a change still pending: its registration outlives
 * the close while the dup keeps the socket open. The only dup here is
 * conn.c's linger of a refused socket, which drains and closes that socket
 * on what it is woken for, so the stale registration can only wake the loop
 * for readable bytes the linger reads anyway, and ends with it.
 */
static struct event_base *new_base(void)
{
	struct event_config *cfg = event_config_new();
	struct event_base *base;

	if (!cfg)
		return NULL;
	if (event_config_set_flag(cfg, EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST) < 0) {
		event_config_free(cfg);
		return NULL;
	}
	base = event_base_new_with_config(cfg);
	event_config_free(cfg);
	return base;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "user", required_argument, NULL, 'u' },
		{ "root", required_argument, NULL, 'r' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *user = NULL, *root = NULL;
	struct main_ctx m = { 0 };
	struct event *sigterm = NULL, *sigint = NULL;
	json_t *hello;
	int c, r;

	log_setup("fleet-hooksd", LOG_INFO);
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'u': user = optarg; break;
		case 'r': root = optarg; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (!user || !root || optind != argc) {
		usage(stderr);
		return 2;
	}
	/* Only what fleetd handed over stays open. */
	(void)close_range(LISTEN_FD + 1, ~0U, 0);
	if (!fd_is_socket(LINK_FD, SOCK_STREAM, false) || !fd_is_socket(LISTEN_FD, SOCK_STREAM, true)) {
		log_error("fd 3 must be a stream socket to fleetd and fd 4 a listening TCP socket; fleetd starts fleet-hooksd");
		return 1;
	}
	signal(SIGPIPE, SIG_IGN);
	if (privsep_drop(user, root) < 0)
		return 1;
	m.base = new_base();
	if (!m.base) {
		log_error("cannot create the event loop");
		return 1;
	}
	if ((r = link_start(m.base, LINK_FD, &link_ops, &m, &m.link)) < 0 ||
	    (r = lserver_start(m.base, LISTEN_FD, m.link, &m.srv)) < 0) {
		log_error("cannot start: %s", strerror(-r));
		return 1;
	}
	sigterm = evsignal_new(m.base, SIGTERM, on_signal, &m);
	sigint = evsignal_new(m.base, SIGINT, on_signal, &m);
	if (!sigterm || !sigint || event_add(sigterm, NULL) < 0 || event_add(sigint, NULL) < 0) {
		log_error("cannot handle signals");
		return 1;
	}
	hello = hook_msg_hello((long)getpid());
	if (!hello || link_send(m.link, hello) < 0) {
		log_error("cannot say hello to fleetd");
		return 1;
	}
	json_decref(hello);
	log_info("running as %s in %s, waiting for routes", user, root);
	if (event_base_dispatch(m.base) < 0)
		stop(&m, 1);
	lserver_free(m.srv);
	link_free(m.link);
	event_free(sigterm);
	event_free(sigint);
	if (m.drain_timer)
		event_free(m.drain_timer);
	event_base_free(m.base);
	return m.status;
}
