/*
 * test_egress_refresh: backend/egress_refresh.c, the periodic re-application
 * of egress lists with host names that both backends share: what collect()
 * adds reaches apply() on a worker thread, copied, with lists that name no
 * host left out; a refresher stops cleanly.
 */
#include <event2/event.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/egress_refresh.h"
#include "tests/tap.h"

static pthread_t loop_thread;
static atomic_int collects, applies, applied_off_loop, applied_addresses;
static char applied[4][64];	/* "agent iface egress" of each apply, in order */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned gen;

static void collect(struct egress_refresh *r, void *ctx)
{
	char agent[] = "ra", iface[] = "veth-ra";

	(void)ctx;
	atomic_fetch_add(&collects, 1);
	egress_refresh_add(r, agent, iface, "api.example.test:443");
	egress_refresh_add(r, "rb", NULL, "10.0.0.0/8,192.0.2.1:80");	/* addresses only: nothing to refresh */
	egress_refresh_add(r, "rc", NULL, "hooks.example.test");
	/* the refresher took copies: what the caller passed may go */
	memset(agent, 'x', sizeof(agent) - 1);
	memset(iface, 'x', sizeof(iface) - 1);
}

static int apply(const char *agent, const char *iface, const char *egress, char **why)
{
	int n = atomic_fetch_add(&applies, 1);

	(void)why;
	if (strcmp(agent, "rb") == 0)
		atomic_fetch_add(&applied_addresses, 1);
	if (!pthread_equal(pthread_self(), loop_thread))
		atomic_fetch_add(&applied_off_loop, 1);
	pthread_mutex_lock(&lock);
	if (n < 4)
		snprintf(applied[n], sizeof(applied[n]), "%s %s %s", agent, iface ? iface : "-", egress);
	pthread_mutex_unlock(&lock);
	return 0;
}

static void poll_cb(evutil_socket_t fd, short what, void *arg)
{
	struct event_base *base = arg;

	(void)fd, (void)what;
	if (atomic_load(&applies) >= 2)
		event_base_loopexit(base, NULL);
}

int main(void)
{
	struct event_base *base = event_base_new();
	struct timeval tick = { 0, 50000 }, bound = { 60, 0 };
	struct event *poll = event_new(base, -1, EV_PERSIST, poll_cb, base);
	struct egress_refresh *r;

	ok(!egress_refresh_wants(NULL) && !egress_refresh_wants(""), "no list: nothing to refresh");
	ok(!egress_refresh_wants("10.0.0.0/8,192.0.2.1:80"), "addresses and CIDRs: nothing to refresh");
	ok(egress_refresh_wants("10.0.0.1,api.example.test:443"), "a host name: refreshed");
	ok(egress_refresh_new(NULL, 1, &gen, collect, apply, NULL) == NULL, "no event base: no refresher");
	egress_refresh_free(NULL);

	loop_thread = pthread_self();
	r = egress_refresh_new(base, 1, &gen, collect, apply, NULL);
	ok(r != NULL, "a refresher starts");
	event_add(poll, &tick);
	event_base_loopexit(base, &bound);	/* a bound on a broken refresher, not a timed check */
	event_base_dispatch(base);
	is_int(atomic_load(&collects) >= 1, 1, "after its period it asks the backend what to refresh");
	ok(atomic_load(&applies) >= 2, "and applies the lists that name a host");
	is_int(atomic_load(&applied_addresses), 0, "not the one of addresses only");
	is_int(atomic_load(&applied_off_loop), atomic_load(&applies), "on a worker thread, never on the loop (getaddrinfo blocks)");
	is_str(applied[0], "ra veth-ra api.example.test:443", "each with its agent, interface and list, copied");
	is_str(applied[1], "rc - hooks.example.test", "no interface stays none");
	egress_refresh_free(r);
	ok(1, "it stops cleanly");
	event_free(poll);
	event_base_free(base);
	return tap_done();
}
