/*
 * vm/hosts.c: the hypervisor hosts of the VM backend (#15, docs/multi-host.md):
 * one libvirt connection (struct virt) per host, the one owner of them all.
 * HOST_LOCAL's is b->virt, opened at init on the configured libvirt_uri;
 * every other host's is opened by `host add` (on a worker, bounded: the
 * host is kept only once it answered) or, after fleetd starts, when first
 * needed (an agent's operation, `host ls`), kept, reconnected with backoff
 * by virt.c when it fails or is lost, and closed by `host rm`. What a host
 * says of itself (host_facts) is virt.c's, read off the loop. The URI comes from fleet's store through
 * host->host_uri: this file keeps no list of hosts of its own.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "model/fleetd.h"
#include "vm/virt.h"
#include "vm/vm_internal.h"

struct vm_host {
	char *name;
	struct virt *virt;
	bool kvm_proven;		/* a KVM guest there printed its kernel banner since fleetd started */
	struct vm_host *next;
};

/* A `host add` whose first connect is under way: its host is kept only if the connect answers. */
struct vm_host_opening {
	struct fleetd *f;
	char *name;
	struct virt *virt;
	void (*done)(struct fleetd *f, void *arg, int r, const char *why);
	void *arg;
	struct vm_host_opening *next;
};

static void opening_free(struct vm_host_opening *o)
{
	free(o->name);
	free(o);
}

static bool is_local(const char *host)
{
	return !host || strcmp(host, HOST_LOCAL) == 0;
}

static struct vm_host *find(struct vm_backend *b, const char *host)
{
	for (struct vm_host *h = b->hosts; h; h = h->next)
		if (strcmp(h->name, host) == 0)
			return h;
	return NULL;
}

/* <state_dir>/vms/virt-type@HOST: "qemu" once a KVM guest there printed no kernel line (channel.c). */
static char *kvm_off_file(struct vm_backend *b, const char *host)
{
	return xasprintf("%s/vms/virt-type@%s", b->state_dir, host);
}

bool vm_host_kvm_off(struct vm_backend *b, const char *host)
{
	_cleanup_free_ char *file = NULL, *line = NULL;

	if (is_local(host))
		return strcmp(b->domain_type, "kvm") != 0;
	file = kvm_off_file(b, host);
	return vm_read_line(file, &line) == 0 && strcmp(line, "qemu") == 0;
}

int vm_host_kvm_set_off(struct vm_backend *b, const char *host)
{
	_cleanup_free_ char *file = NULL;

	if (is_local(host)) {
		b->domain_type = "qemu";	/* every later create and start here */
		file = vm_virt_type_file(b);
	} else
		file = kvm_off_file(b, host);
	return vm_write_text(file, "qemu\n", 0600);
}

bool vm_host_kvm_proven(struct vm_backend *b, const char *host)
{
	struct vm_host *h;

	if (is_local(host))
		return b->kvm_proven;
	return (h = find(b, host)) && h->kvm_proven;
}

void vm_host_kvm_set_proven(struct vm_backend *b, const char *host)
{
	struct vm_host *h;

	if (is_local(host))
		b->kvm_proven = true;
	else if ((h = find(b, host)))
		h->kvm_proven = true;
}

const char *vm_host_domain_type(struct vm_backend *b, const char *host, struct virt *v)
{
	return virt_kvm(v) && !vm_host_kvm_off(b, host) ? "kvm" : "qemu";
}

/* Open host's connection on uri and keep it (a failed first connect is retried in the background). */
static struct vm_host *open_host(struct vm_backend *b, const char *host, const char *uri)
{
	_cleanup_free_ char *why = NULL;
	struct vm_host *h = xcalloc(1, sizeof(*h));
	int r;

	r = virt_open(b->f->base, uri, vm_on_virt_event, b, &h->virt, &why);
	if (r < 0 && !h->virt) {
		log_warning("vm backend: host %s: %s", host, why ? why : strerror(-r));
		free(h);
		return NULL;
	}
	if (r < 0)
		log_warning("vm backend: host %s not reachable yet (%s); retrying in the background", host,
			    why ? why : strerror(-r));
	h->name = xstrdup(host);
	h->next = b->hosts;
	b->hosts = h;
	return h;
}

int vm_host_virt(struct vm_backend *b, const char *host, struct virt **ret, char **why)
{
	_cleanup_free_ char *uri = NULL;
	struct vm_host *h;
	int r;

	if (is_local(host)) {
		*ret = b->virt;
		return 0;
	}
	if (!(h = find(b, host))) {
		if ((r = b->host->host_uri(b->f, host, &uri)) < 0 || !uri) {
			if (why)
				*why = xasprintf("its host %s is not known to fleet (fleetctl host ls)", host);
			return r < 0 ? r : -ENOENT;
		}
		if (!(h = open_host(b, host, uri))) {
			if (why)
				*why = xasprintf("cannot open a connection to host %s", host);
			return -ENOTCONN;
		}
	}
	*ret = h->virt;
	return 0;
}

struct virt *vm_host_virt_if_open(struct vm_backend *b, const char *host)
{
	struct vm_host *h;

	return is_local(host) ? b->virt : (h = find(b, host)) ? h->virt : NULL;
}

struct virt *vm_agent_virt(struct vm_backend *b, const struct agent *a, char **why)
{
	struct virt *v = NULL;

	return vm_host_virt(b, a->host, &v, why) < 0 ? NULL : v;
}

void vm_hosts_close(struct vm_backend *b)
{
	/*
	 * A `host add` still connecting at shutdown is answered (the API said
	 * 503 as it stopped; this frees its call) and forgotten; its worker is
	 * left to end by itself, its result dropped, as virt_close does.
	 */
	while (b->openings) {
		struct vm_host_opening *o = b->openings;

		b->openings = o->next;
		virt_close(o->virt);
		o->done(o->f, o->arg, -ECANCELED, "fleetd is stopping");
		opening_free(o);
	}
	while (b->hosts) {
		struct vm_host *h = b->hosts;

		b->hosts = h->next;
		virt_close(h->virt);
		free(h->name);
		free(h);
	}
}

/* --- the ops (backend.h) ---------------------------------------------------------- */

static struct vm_host_opening *opening_unlink(struct vm_backend *b, struct vm_host_opening *o)
{
	for (struct vm_host_opening **pp = &b->openings; *pp; pp = &(*pp)->next)
		if (*pp == o) {
			*pp = o->next;
			break;
		}
	return o;
}

/* On the loop, from virt.c: the connect answered (or its bound passed). */
static void host_opened(void *arg, int r, const char *why)
{
	struct vm_host_opening *o = arg;
	struct vm_backend *b = vm_backend_of(o->f);

	opening_unlink(b, o);
	if (r < 0) {
		virt_close(o->virt);	/* a connect still waiting on its worker is dropped when it ends */
	} else {
		struct vm_host *h = xcalloc(1, sizeof(*h));

		vm_host_forget(o->f, o->name);	/* one left from an earlier add of that name, if any */
		*h = (struct vm_host){ .name = xstrdup(o->name), .virt = o->virt, .next = b->hosts };
		b->hosts = h;
		log_info("vm backend: host %s connected (%s)", o->name, virt_uri(o->virt));
	}
	o->done(o->f, o->arg, r, why);
	opening_free(o);
}

int vm_host_connect(struct fleetd *f, const char *host, const char *uri, int timeout_s,
		    void (*done)(struct fleetd *f, void *arg, int r, const char *why), void *arg, char **why)
{
	struct vm_backend *b = vm_backend_of(f);
	struct vm_host_opening *o;
	int r;

	if (!b)
		return *why = xstrdup("the vm backend is not running"), -EOPNOTSUPP;
	if (is_local(host))
		return *why = xasprintf("host '%s' already exists", host), -EEXIST;
	for (o = b->openings; o; o = o->next)
		if (strcmp(o->name, host) == 0)
			return *why = xasprintf("host '%s' is being added already", host), -EEXIST;
	o = xcalloc(1, sizeof(*o));
	*o = (struct vm_host_opening){ .f = f, .name = xstrdup(host), .done = done, .arg = arg };
	/* Off the loop: a host that does not answer would hold it for TCP's connect timeout. */
	if ((r = virt_open_async(f->base, uri, vm_on_virt_event, b, timeout_s, host_opened, o, &o->virt, why)) < 0) {
		opening_free(o);
		return r;
	}
	o->next = b->openings;
	b->openings = o;
	return 0;
}

void vm_host_facts(struct fleetd *f, const char *host, const char *uri, struct host_facts *ret)
{
	struct vm_backend *b = vm_backend_of(f);
	struct virt_facts vf;
	const char *error = NULL;
	struct virt *v = NULL;
	struct vm_host *h;
	long long age = -1;
	bool have;

	host_facts_clear(ret);
	if (!b) {
		ret->error = xstrdup("the vm backend is not running");
		return;
	}
	if (is_local(host))
		v = b->virt;
	else if ((h = find(b, host)) || (uri && (h = open_host(b, host, uri))))
		v = h->virt;
	if (!v) {
		ret->error = xasprintf("cannot open a connection to %s", uri ? uri : host);
		return;
	}
	/* What the host said last; this read asks again on a worker when they are 5 s old, never here. */
	have = virt_facts(v, &vf, &age, &error) == 0;
	ret->refreshing = virt_facts_refreshing(v);
	ret->refreshing_s = virt_facts_refreshing_s(v);
	if (have) {
		snprintf(ret->libvirt, sizeof(ret->libvirt), "%s", vf.libvirt);
		snprintf(ret->qemu, sizeof(ret->qemu), "%s", vf.qemu);
		ret->kvm = vf.kvm && !vm_host_kvm_off(b, host);	/* what its guests run as */
		ret->free_memory_bytes = vf.free_memory_bytes;
		ret->age_s = age;
	}
	if (!virt_is_connected(v)) {
		ret->error = xstrdup(virt_connect_error(v) ? virt_connect_error(v) : "not connected");
		return;
	}
	if (error || !have) {
		ret->error = xstrdup(error ? error : "connected; asking the host its facts");
		return;
	}
	ret->reachable = true;
}

bool vm_host_reachable(struct fleetd *f, const char *host, char **why)
{
	struct vm_backend *b = vm_backend_of(f);
	struct vm_host *h;
	struct virt *v;

	if (!b)
		return true;
	v = is_local(host) ? b->virt : (h = find(b, host)) ? h->virt : NULL;
	if (!v || virt_is_connected(v))
		return true;
	*why = xstrdup(virt_connect_error(v) ? virt_connect_error(v) : "not connected");
	return false;
}

void vm_host_forget(struct fleetd *f, const char *host)
{
	struct vm_backend *b = vm_backend_of(f);
	struct vm_host **pp, *h;

	if (!b || is_local(host))
		return;
	{
		/* A host added again (its KVM fixed, say) is tried with KVM again. */
		_cleanup_free_ char *file = kvm_off_file(b, host);

		(void)unlink(file);
	}
	for (pp = &b->hosts; *pp && strcmp((*pp)->name, host) != 0; pp = &(*pp)->next)
		;
	if (!(h = *pp))
		return;
	*pp = h->next;
	virt_close(h->virt);
	free(h->name);
	free(h);
	log_info("vm backend: host %s: connection closed", host);
}
