/*
 * egress: the network policy of NAT VM agents on the host's firewall
 * (backend/firewall.h): what no agent may reach (the inet table, for every
 * NAT guest), and each agent's --egress-allow list (the bridge table,
 * matched on the guest's tap, which fleet names: vm_domain_xml). Applied
 * before each boot, at once when the list changes, restored at fleetd's
 * start, removed with the agent; host names resolved again every
 * VM_EGRESS_REFRESH_S on a worker, as for user agents (user/netns.c).
 */
#include <errno.h>
#include <event2/event.h>
#include <string.h>

#include "backend/firewall.h"
#include "backend/worker.h"
#include "common/log.h"
#include "common/util.h"
#include "model/fleetd.h"
#include "vm/vm_internal.h"

#define VM_EGRESS_REFRESH_S 300

int vm_egress_apply(struct vm_backend *b, const struct agent *a, char **why)
{
	int r;

	if (a->network != NETWORK_NAT)
		return 0;
	/* What no agent may reach (the host, other agents, metadata): before the guest runs. */
	if ((r = firewall_base(config_get(&b->f->cfg, CFG_USER_NAT_SUBNET), why)) < 0 ||
	    (r = firewall_vm_base(why)) < 0 || (r = firewall_vm_agent_apply(a->name, a->egress_allow, why)) < 0)
		return r;
	b->egress_gen++;
	return 0;
}

/*
 * A running guest booted from a definition without fleet's tap name (one
 * made by an older fleet) is not matched by its rules: refuse to pretend.
 */
static int live_tap_check(struct vm_backend *b, const struct agent *a, char **why)
{
	_cleanup_free_ char *dom = vm_domain_name(a->name), *xml = NULL, *want = NULL;
	char tap[FIREWALL_TAP_SIZE];
	enum virt_state st;

	if (!a->egress_allow || virt_domain_state(b->virt, dom, &st) < 0 || st == VIRT_OFF ||
	    virt_domain_xml(b->virt, dom, &xml) < 0)
		return 0;	/* not running (its next boot has the name), or libvirt will say at start */
	firewall_vm_tap(a->name, tap);
	want = xasprintf("<target dev='%s'/>", tap);
	if (strstr(xml, want))
		return 0;
	*why = xasprintf("its guest runs from a definition without fleet's tap name %s (made by an older fleet): "
			 "the list is stored and applies from its next start; restart it", tap);
	return -ESTALE;
}

int vm_network_apply(struct fleetd *f, const struct agent *a, char **why)
{
	struct vm_backend *b = vm_backend_of(f);
	int r;

	if (!b) {
		*why = xstrdup("the vm backend is not available");
		return -ENODEV;
	}
	if ((r = vm_egress_apply(b, a, why)) < 0)
		return r;
	return live_tap_check(b, a, why);
}

int vm_network_refused(struct fleetd *f, const struct agent *a, long long *packets)
{
	(void)f;
	if (a->network != NETWORK_NAT || !a->egress_allow)
		return -ENOENT;
	return firewall_vm_agent_refused(a->name, packets);
}

void vm_egress_reconcile(struct vm_backend *b)
{
	struct agent **list = NULL;

	if (b->host->list_agents(b->f, BACKEND_VM, &list) < 0)
		return;
	for (struct agent **a = list; *a; a++) {
		_cleanup_free_ char *why = NULL;

		if ((*a)->network == NETWORK_NAT && vm_egress_apply(b, *a, &why) < 0)
			log_warning("agent '%s': cannot restore its firewall rules: %s", (*a)->name, why ? why : "?");
	}
	agent_list_free(list);
}

/* --- keeping host names current ----------------------------------------------------------- */

struct refresh_item {
	char *agent;
	char *egress;
};

struct vm_egress_refresh {
	struct vm_backend *b;
	struct event *timer;
	struct worker_job *job;		/* a refresh running, or NULL */
	unsigned gen_at_start;
	struct refresh_item *items;	/* the job's, owned by it */
	size_t n;
};

static bool has_name(const char *list)
{
	for (const char *p = list; *p; p++)
		if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z'))
			return true;	/* an address has no letter but IPv6 hex digits: harmless, resolved as itself */
	return false;
}

/* On the worker: getaddrinfo blocks, the loop must not. */
static void refresh_work(void *arg)
{
	struct vm_egress_refresh *r = arg;

	for (size_t i = 0; i < r->n; i++) {
		_cleanup_free_ char *why = NULL;

		if (firewall_vm_agent_apply(r->items[i].agent, r->items[i].egress, &why) < 0)
			log_warning("agent '%s': cannot refresh its egress rules: %s", r->items[i].agent, why ? why : "?");
	}
}

static void refresh_arm(struct vm_egress_refresh *r, int seconds)
{
	struct timeval tv = { seconds, 0 };

	evtimer_add(r->timer, &tv);
}

static void refresh_done(void *arg)
{
	struct vm_egress_refresh *r = arg;

	for (size_t i = 0; i < r->n; i++) {
		free(r->items[i].agent);
		free(r->items[i].egress);
	}
	free(r->items);
	r->items = NULL;
	r->n = 0;
	r->job = NULL;
	/* A list applied meanwhile on the loop may have been overwritten by this older one: again, now. */
	refresh_arm(r, r->gen_at_start != r->b->egress_gen ? 0 : VM_EGRESS_REFRESH_S);
}

static void on_refresh(evutil_socket_t fd, short what, void *arg)
{
	struct vm_egress_refresh *r = arg;
	struct agent **list = NULL;
	size_t cap = 0;

	(void)fd, (void)what;
	if (r->job)
		return;	/* its done() arms the timer again */
	if (r->b->host->list_agents(r->b->f, BACKEND_VM, &list) == 0) {
		for (struct agent **a = list; *a; a++) {
			if ((*a)->network != NETWORK_NAT || !(*a)->egress_allow || !has_name((*a)->egress_allow))
				continue;
			if (r->n == cap) {
				cap = cap ? cap * 2 : 8;
				r->items = xrealloc(r->items, cap * sizeof(*r->items));
			}
			r->items[r->n++] = (struct refresh_item){ xstrdup((*a)->name), xstrdup((*a)->egress_allow) };
		}
		agent_list_free(list);
	}
	r->gen_at_start = r->b->egress_gen;
	if (r->n == 0 || worker_start(r->b->f->base, refresh_work, refresh_done, r, &r->job) < 0)
		refresh_done(r);
}

void vm_egress_refresh_start(struct vm_backend *b)
{
	if (b->egress_refresh || !b->f->base)
		return;
	b->egress_refresh = xcalloc(1, sizeof(*b->egress_refresh));
	b->egress_refresh->b = b;
	b->egress_refresh->timer = evtimer_new(b->f->base, on_refresh, b->egress_refresh);
	refresh_arm(b->egress_refresh, VM_EGRESS_REFRESH_S);
}

void vm_egress_refresh_stop(struct vm_backend *b)
{
	struct vm_egress_refresh *r = b->egress_refresh;

	if (!r)
		return;
	if (r->job)
		worker_finish(r->job);	/* calls refresh_done, which arms the timer: freed next */
	event_free(r->timer);
	free(r);
	b->egress_refresh = NULL;
}
