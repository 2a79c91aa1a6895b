/* egress_refresh: see backend/egress_refresh.h. */
#include "backend/egress_refresh.h"

#include <event2/event.h>
#include <stdlib.h>

#include "backend/worker.h"
#include "common/log.h"
#include "common/util.h"

struct refresh_item {
	char *agent;
	char *iface;	/* or NULL */
	char *egress;
};

struct egress_refresh {
	struct event_base *base;
	struct event *timer;
	int period_s;
	const unsigned *gen;
	unsigned gen_at_start;
	egress_refresh_collect_fn collect;
	egress_refresh_apply_fn apply;
	void *ctx;
	struct worker_job *job;		/* a refresh running, or NULL */
	struct refresh_item *items;	/* what it applies; the job's while it runs */
	size_t n, cap;
};

bool egress_refresh_wants(const char *list)
{
	for (const char *p = list; p && *p; p++)
		if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z'))
			return true;	/* an address has no letter but IPv6 hex digits: harmless, resolved as itself */
	return false;
}

void egress_refresh_add(struct egress_refresh *r, const char *agent, const char *iface, const char *egress)
{
	if (!egress_refresh_wants(egress))
		return;
	if (r->n == r->cap) {
		r->cap = r->cap ? r->cap * 2 : 8;
		r->items = xrealloc(r->items, r->cap * sizeof(*r->items));
	}
	r->items[r->n++] = (struct refresh_item){ xstrdup(agent), iface ? xstrdup(iface) : NULL, xstrdup(egress) };
}

/* On the worker. */
static void refresh_work(void *arg)
{
	struct egress_refresh *r = arg;

	for (size_t i = 0; i < r->n; i++) {
		_cleanup_free_ char *why = NULL;

		if (r->apply(r->items[i].agent, r->items[i].iface, r->items[i].egress, &why) < 0)
			log_warning("agent '%s': cannot refresh its egress rules: %s", r->items[i].agent, why ? why : "?");
	}
}

static void refresh_arm(struct egress_refresh *r, int seconds)
{
	struct timeval tv = { seconds, 0 };

	evtimer_add(r->timer, &tv);
}

static void refresh_done(void *arg)
{
	struct egress_refresh *r = arg;

	for (size_t i = 0; i < r->n; i++) {
		free(r->items[i].agent);
		free(r->items[i].iface);
		free(r->items[i].egress);
	}
	r->n = 0;
	r->job = NULL;
	refresh_arm(r, r->gen_at_start != *r->gen ? 0 : r->period_s);
}

static void on_refresh(evutil_socket_t fd, short what, void *arg)
{
	struct egress_refresh *r = arg;

	(void)fd, (void)what;
	if (r->job)
		return;	/* its done() arms the timer again */
	r->collect(r, r->ctx);
	r->gen_at_start = *r->gen;
	if (r->n == 0 || worker_start(r->base, refresh_work, refresh_done, r, &r->job) < 0)
		refresh_done(r);
}

struct egress_refresh *egress_refresh_new(struct event_base *base, int period_s, const unsigned *gen,
					  egress_refresh_collect_fn collect, egress_refresh_apply_fn apply, void *ctx)
{
	struct egress_refresh *r;

	if (!base)
		return NULL;
	r = xcalloc(1, sizeof(*r));
	*r = (struct egress_refresh){ .base = base, .period_s = period_s, .gen = gen, .collect = collect,
				      .apply = apply, .ctx = ctx };
	r->timer = evtimer_new(base, on_refresh, r);
	refresh_arm(r, period_s);
	return r;
}

void egress_refresh_free(struct egress_refresh *r)
{
	if (!r)
		return;
	if (r->job)
		worker_finish(r->job);	/* calls refresh_done, which arms the timer: freed next */
	event_free(r->timer);
	free(r->items);
	free(r);
}
