/* hosts (core): see hosts.h. */
#include "core/hosts.h"

#include <errno.h>
#include <string.h>

#include "common/log.h"
#include "common/names.h"
#include "common/util.h"
#include "core/backends.h"
#include "model/fleetd.h"
#include "store/db.h"

/* The VM backend if it runs and can hold hosts, else NULL with *why. */
static const struct backend_ops *vm_ops(struct fleetd *f, const char **why)
{
	const struct backend_ops *ops = backend_get(f, BACKEND_VM, why);

	if (ops && !ops->host_facts) {
		*why = "the vm backend has no hosts";
		return NULL;
	}
	return ops;
}

int hosts_list(struct fleetd *f, bool facts, struct host **ret, size_t *n)
{
	const struct backend_ops *ops;
	const char *why = NULL;
	int r;

	if ((r = db_host_list(f->db, ret, n)) < 0)
		return r;
	ops = facts ? vm_ops(f, &why) : NULL;
	for (size_t i = 0; i < *n; i++) {
		struct host *h = &(*ret)[i];

		if (!h->uri && strcmp(h->name, HOST_LOCAL) == 0)
			h->uri = xstrdup(config_get(&f->cfg, CFG_LIBVIRT_URI));
		if (!facts)
			continue;
		if (ops) {
			ops->host_facts(f, h->name, h->uri, &h->facts);
		} else {
			host_facts_clear(&h->facts);
			h->facts.error = xasprintf("the vm backend is unavailable: %s", why ? why : "not built in");
		}
	}
	return 0;
}

/* A URI is libvirt's to judge; fleet only bounds it and keeps control characters out of logs and replies. */
static int uri_check(const char *uri, char **why)
{
	size_t len = strlen(uri);

	if (len == 0 || len > HOST_URI_MAX) {
		*why = xasprintf("a host's URI is 1 to %d bytes", HOST_URI_MAX);
		return -EINVAL;
	}
	for (const unsigned char *p = (const unsigned char *)uri; *p; p++)
		if (*p < 0x21 || *p == 0x7f) {
			*why = xstrdup("a host's URI has no spaces or control characters");
			return -EINVAL;
		}
	return 0;
}

/* A host add whose connect is under way. */
struct host_add {
	char *name;
	char *uri;
	int max_agents;
	int reserve_memory_mib;
	hosts_added_fn done;
	void *arg;
};

/* On the loop: the connect answered; the host is recorded only now. */
static void host_connected(struct fleetd *f, void *arg, int r, const char *why)
{
	struct host_add *op = arg;
	_cleanup_free_ char *msg = NULL;
	const struct backend_ops *ops;
	const char *reason = NULL;

	if (r == 0) {
		struct host h = { .name = op->name, .uri = op->uri, .max_agents = op->max_agents,
				  .reserve_memory_mib = op->reserve_memory_mib };

		if ((r = db_host_insert(f->db, &h)) < 0) {
			if ((ops = vm_ops(f, &reason)))
				ops->host_forget(f, op->name);
			why = msg = xasprintf("cannot record host '%s': %s", op->name, strerror(-r));
		} else {
			log_info("host '%s' added (%s, max %d agents, %d MiB reserved)", op->name, op->uri,
				 op->max_agents, op->reserve_memory_mib);
		}
	}
	if (r < 0)
		log_warning("host '%s' not added: %s", op->name, why ? why : strerror(-r));
	op->done(op->arg, r, why);
	free(op->name);
	free(op->uri);
	free(op);
}

int hosts_add(struct fleetd *f, const char *name, const char *uri, int max_agents, int reserve_memory_mib,
	      hosts_added_fn done, void *arg, char **why)
{
	struct host_add *op;
	const struct backend_ops *ops;
	const char *reason = NULL;
	struct host h = { 0 };
	int r;

	if (agent_name_check(name, &reason) < 0) {
		*why = xasprintf("invalid host name: %s", reason);
		return -EINVAL;
	}
	if ((r = uri_check(uri, why)) < 0)
		return r;
	if (max_agents < 0 || max_agents > HOST_MAX_AGENTS_MAX || reserve_memory_mib < 0 ||
	    reserve_memory_mib > HOST_RESERVE_MAX_MIB) {
		*why = xasprintf("max_agents is 0 (no limit) to %d, reserve_memory_mib 0 to %d", HOST_MAX_AGENTS_MAX,
				 HOST_RESERVE_MAX_MIB);
		return -EINVAL;
	}
	if ((r = db_host_get(f->db, name, &h)) != -ENOENT) {
		host_clear(&h);
		if (r == 0)
			*why = xasprintf("host '%s' already exists", name);
		return r == 0 ? -EEXIST : r;
	}
	if (!(ops = vm_ops(f, &reason))) {
		*why = xasprintf("cannot add a host: the vm backend is unavailable: %s", reason);
		return -EOPNOTSUPP;
	}
	/* Connected first, off the loop: a host whose URI does not answer is never recorded. */
	op = xcalloc(1, sizeof(*op));
	*op = (struct host_add){ .name = xstrdup(name), .uri = xstrdup(uri), .max_agents = max_agents,
				 .reserve_memory_mib = reserve_memory_mib, .done = done, .arg = arg };
	if ((r = ops->host_connect(f, name, uri, HOSTS_CONNECT_TIMEOUT_S, host_connected, op, why)) < 0) {
		free(op->name);
		free(op->uri);
		free(op);
		return r;
	}
	return 0;
}

int hosts_remove(struct fleetd *f, const char *name, char **why)
{
	const struct backend_ops *ops;
	const char *reason = NULL;
	int r;

	if (strcmp(name, HOST_LOCAL) == 0) {
		*why = xstrdup("the host '" HOST_LOCAL "' is fleetd's own libvirt_uri; it cannot be removed");
		return -EBUSY;
	}
	/* A move to it places its agent there only when done: the host must outlive it. */
	if ((ops = vm_ops(f, &reason)) && ops->host_busy && (r = ops->host_busy(f, name, why)) < 0)
		return r;
	if ((r = db_host_delete(f->db, name)) == -EBUSY) {
		struct agent **list = NULL;
		_cleanup_free_ char *names = xstrdup("");
		size_t n = 0, k = 0;

		if (db_agent_list(f->db, &list, &n) == 0)
			for (size_t i = 0; i < n; i++)
				if (list[i]->host && strcmp(list[i]->host, name) == 0) {
					char *t = xasprintf("%s%s%s", names, k++ ? ", " : "", list[i]->name);
					free(names);
					names = t;
				}
		agent_list_free(list);
		*why = xasprintf("host '%s' still has %zu agent%s placed on it (%s); remove them first", name, k,
				 k == 1 ? "" : "s", names);
		return r;
	}
	if (r == -ENOENT) {
		*why = xasprintf("no host '%s'", name);
		return r;
	}
	if (r < 0) {
		*why = xasprintf("cannot remove host '%s': %s", name, strerror(-r));
		return r;
	}
	if ((ops = vm_ops(f, &reason)))
		ops->host_forget(f, name);
	log_info("host '%s' removed", name);
	return 0;
}

int hosts_set_draining(struct fleetd *f, const char *name, bool draining, char **why)
{
	int r = db_host_set_draining(f->db, name, draining);

	if (r == -ENOENT)
		*why = xasprintf("no host '%s'", name);
	else if (r < 0)
		*why = xasprintf("cannot change host '%s': %s", name, strerror(-r));
	else
		log_info("host '%s': %s", name, draining ? "draining (no new agents)" : "taking new agents again");
	return r;
}

int hosts_place(struct fleetd *f, struct agent *a, const char *wanted, char **why)
{
	struct host *v = NULL;
	size_t n = 0;
	int r;

	if (a->backend != BACKEND_VM) {
		if (!wanted)
			return 0;
		*why = xasprintf("%s agents run on fleetd's own host; --host is for vm agents",
				 backend_kind_to_string(a->backend));
		return -EINVAL;
	}
	if ((r = hosts_list(f, true, &v, &n)) < 0) {
		*why = xasprintf("cannot read the hosts: %s", strerror(-r));
		return r;
	}
	if ((r = placement_choose(v, n, wanted, a->memory_mib, why)) >= 0) {
		free(a->host);
		a->host = xstrdup(v[r].name);
		r = 0;
	}
	host_list_free(v, n);
	return r;
}
