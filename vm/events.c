/*
 * events: what libvirt tells the backend on its own (a guest started,
 * stopped, crashed, was undefined; libvirtd came back), turned into
 * backend events for the lifecycle owner; and domains named like ours that
 * belong to no agent, reported and left alone.
 */
#include <string.h>

#include "model/fleetd.h"
#include "common/log.h"
#include "common/util.h"
#include "vm/virt.h"
#include "vm/vm_internal.h"

/* Tell the lifecycle owner (lifecycle.c) about an agent's guest; it decides what follows. */
static void report(struct vm_backend *b, enum backend_event_kind kind, const char *agent, bool asked, bool clean,
		   const char *detail)
{
	struct backend_event ev = { .kind = kind, .backend = BACKEND_VM, .agent = agent, .asked = asked,
				    .clean = clean, .detail = detail };

	if (b->host->on_event)
		b->host->on_event(b->f, &ev);
}

/*
 * Is the agent's domain still defined on the host fleet records it on? A
 * move (move.c) undefines its copy on the other host: that is no news.
 */
static bool defined_on_its_host(struct vm_backend *b, const char *agent)
{
	_cleanup_free_ char *dom = vm_domain_name(agent), *host = NULL;
	struct agent **list = NULL;
	struct virt *v = NULL;
	enum virt_state st;

	if (b->host->list_agents(b->f, BACKEND_VM, &list) < 0)
		return false;
	for (size_t i = 0; list[i]; i++)
		if (strcmp(list[i]->name, agent) == 0)
			host = xstrdup(list[i]->host ? list[i]->host : HOST_LOCAL);
	agent_list_free(list);
	return host && vm_host_virt(b, host, &v, NULL) == 0 && virt_domain_state(v, dom, &st) == 0;
}

void vm_on_virt_event(void *userdata, const char *domain, enum virt_event_kind kind)
{
	struct vm_backend *b = userdata;
	const char *name;
	struct vm *v;

	if (kind == VIRT_EV_RECONNECTED) {
		for (v = b->vms; v; v = v->next)
			vm_run_snaps_forget(v);	/* whatever ran while libvirtd was away */
		report(b, BACKEND_EV_RESYNC, NULL, false, false, NULL);
		vm_report_orphans(b);
		return;
	}
	if (strncmp(domain, DOMAIN_PREFIX, strlen(DOMAIN_PREFIX)) != 0)
		return;
	name = domain + strlen(DOMAIN_PREFIX);
	switch (kind) {
	case VIRT_EV_STARTED:
		if ((v = vm_find(b, name)))
			vm_run_snaps_forget(v);	/* a new QEMU process */
		report(b, BACKEND_EV_STARTED, name, false, false, NULL);
		break;
	case VIRT_EV_STOPPED_SHUTDOWN:
	case VIRT_EV_STOPPED_DESTROYED:
	case VIRT_EV_STOPPED_CRASHED:
	case VIRT_EV_STOPPED_OTHER:
		if ((v = vm_find(b, name))) {
			vm_drop_session(v);
			vm_run_snaps_forget(v);
		}
		/* Its last output: the console timer caps only guests that run. */
		vm_console_cap(b, name);
		report(b, BACKEND_EV_STOPPED, name, v && v->stopping, kind == VIRT_EV_STOPPED_SHUTDOWN,
		       kind == VIRT_EV_STOPPED_SHUTDOWN ? "it shut itself down" :
		       kind == VIRT_EV_STOPPED_DESTROYED ? "destroyed outside fleet" :
		       kind == VIRT_EV_STOPPED_CRASHED ? "QEMU died or the guest crashed" : "other reason");
		break;
	case VIRT_EV_UNDEFINED:
		if (defined_on_its_host(b, name)) {
			log_debug("agent '%s': a copy of its domain on another host was undefined (a move)", name);
			break;
		}
		report(b, BACKEND_EV_GONE, name, false, false, "its libvirt domain was undefined");
		break;
	default:
		break;
	}
}

/* libvirt domains of ours that belong to no agent: reported, never touched. */
void vm_report_orphans(struct vm_backend *b)
{
	struct agent **list = NULL;
	char **domains = NULL;

	if (b->host->list_agents(b->f, BACKEND_VM, &list) < 0)
		return;
	if (virt_domain_list(b->virt, DOMAIN_PREFIX, false, &domains) < 0) {
		agent_list_free(list);
		return;
	}
	for (size_t i = 0; list[i]; i++) {
		_cleanup_free_ char *dom = vm_domain_name(list[i]->name);

		for (char **d = domains; *d; d++)
			if (strcmp(*d, dom) == 0) {
				free(*d);
				*d = xstrdup("");	/* accounted for */
			}
	}
	for (char **d = domains; *d; d++) {
		if (**d)
			log_warning("drift: libvirt domain %s belongs to no fleet agent; left alone", *d);
		free(*d);
	}
	free(domains);
	agent_list_free(list);
}
