/*
 * egress: the network policy of NAT VM agents on the host's firewall
 * (backend/firewall.h): what no agent may reach (the inet table, for every
 * NAT guest), and each agent's --egress-allow list (the bridge table,
 * matched on the guest's tap, which fleet names: vm_domain_xml). Applied
 * before each boot, at once when the list changes, restored at fleetd's
 * start, removed with the agent; host names resolved again every
 * VM_EGRESS_REFRESH_S on a worker, as for user agents (backend/egress_refresh.c).
 * An agent on another host has its rules in a network filter there instead
 * (remote_nat.c): this file only says when to define it again.
 */
#include <errno.h>
#include <string.h>

#include "backend/egress_refresh.h"
#include "backend/firewall.h"
#include "common/log.h"
#include "common/util.h"
#include "model/fleetd.h"
#include "vm/virt_xml.h"
#include "vm/vm_internal.h"

#define VM_EGRESS_REFRESH_S 300

int vm_egress_apply(struct vm_backend *b, const struct agent *a, char **why)
{
	int r;

	if (a->network != NETWORK_NAT)
		return 0;
	if (vm_agent_remote(a)) {
		/* Its rules are its network filter on its host (remote_nat.c), nothing of this host's firewall. */
		struct virt *v = vm_agent_virt(b, a, why);

		if (!v)
			return -ENOTCONN;
		if ((r = vm_remote_nat_apply(v, a->name, a->egress_allow, why)) < 0)
			return r;
		b->egress_gen++;
		return 0;
	}
	/* What no agent may reach (the host, other agents, metadata): before the guest runs. */
	if ((r = firewall_base(config_get(&b->f->cfg, CFG_USER_NAT_SUBNET),
				   config_get(&b->f->cfg, CFG_USER_NAT_SUBNET6), why)) < 0 ||
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
	_cleanup_free_ char *dom = vm_domain_name(a->name), *xml = NULL;
	char tap[FIREWALL_TAP_SIZE];
	enum virt_state st;

	if (!a->egress_allow || virt_domain_state(b->virt, dom, &st) < 0 || st == VIRT_OFF ||
	    virt_domain_xml(b->virt, dom, &xml) < 0)
		return 0;	/* not running (its next boot has the name), or libvirt will say at start */
	firewall_vm_tap(a->name, tap);
	if (virt_xml_has(xml, "/domain/devices/interface/target/@dev", tap) > 0)
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
	if (a->network != NETWORK_NAT && (r = vm_remote_refuse(a, "a network", why)) < 0)
		return r;
	if ((r = vm_egress_apply(b, a, why)) < 0)
		return r;
	/* A remote guest's filter is named by its interface, whatever tap libvirt gave it. */
	return vm_agent_remote(a) ? 0 : live_tap_check(b, a, why);
}

int vm_network_refused(struct fleetd *f, const struct agent *a, long long *packets)
{
	(void)f;
	/* libvirt's filters keep no counter fleet can read: a remote agent's refusals are not counted. */
	if (a->network != NETWORK_NAT || !a->egress_allow || vm_agent_remote(a))
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

		/* A remote agent's filter lives in its host's libvirtd, which keeps it; its next start defines it again. */
		if ((*a)->network == NETWORK_NAT && !vm_agent_remote(*a) && vm_egress_apply(b, *a, &why) < 0)
			log_warning("agent '%s': cannot restore its firewall rules: %s", (*a)->name, why ? why : "?");
	}
	agent_list_free(list);
}

/* --- keeping host names current (backend/egress_refresh.c) ------------------------------ */

static void refresh_collect(struct egress_refresh *r, void *ctx)
{
	struct vm_backend *b = ctx;
	struct agent **list = NULL;

	if (b->host->list_agents(b->f, BACKEND_VM, &list) < 0)
		return;
	/*
	 * A remote agent's host rides in iface: its filter is defined there, only
	 * while that host's connection is up (a reconnect is the loop's to make).
	 */
	for (struct agent **a = list; *a; a++) {
		struct virt *v = vm_agent_remote(*a) ? vm_host_virt_if_open(b, (*a)->host) : NULL;

		if ((*a)->network == NETWORK_NAT && (*a)->egress_allow &&
		    (!vm_agent_remote(*a) || (v && virt_is_connected(v))))
			egress_refresh_add(r, (*a)->name, vm_agent_remote(*a) ? (*a)->host : NULL, (*a)->egress_allow);
	}
	agent_list_free(list);
}

static struct vm_backend *refresh_backend;	/* the one VM backend, for refresh_apply on the worker */

/* On the worker. */
static int refresh_apply(const char *agent, const char *host, const char *egress, char **why)
{
	struct virt *v;

	if (!host)	/* local: the bridge table's map is keyed by the tap fleet names after the agent */
		return firewall_vm_agent_apply(agent, egress, why);
	/*
	 * A host's connection outlives its agents: `host rm` is refused while one
	 * is placed there, and the list of hosts is only ever prepended to
	 * meanwhile. libvirt's connections are thread-safe.
	 */
	if (!(v = vm_host_virt_if_open(refresh_backend, host)))
		return 0;
	return vm_remote_nat_apply(v, agent, egress, why);
}

void vm_egress_refresh_start(struct vm_backend *b)
{
	refresh_backend = b;
	if (!b->egress_refresh)
		b->egress_refresh = egress_refresh_new(b->f->base, VM_EGRESS_REFRESH_S, &b->egress_gen,
						       refresh_collect, refresh_apply, b);
}

void vm_egress_refresh_stop(struct vm_backend *b)
{
	egress_refresh_free(b->egress_refresh);
	b->egress_refresh = NULL;
}
