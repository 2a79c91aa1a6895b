/* virt: see virt.h. */
#include "vm/virt.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <limits.h>
#include <libvirt/libvirt-qemu.h>
#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/worker.h"
#include "common/log.h"
#include "common/names.h"
#include "common/util.h"
#include "vm/virt_conn.h"
#include "vm/virt_xml.h"

#define RECONNECT_SECONDS 2		/* the first retry after a lost or failed connection */
#define RECONNECT_MAX_SECONDS 16	/* doubled each failure up to this */
#define EVENT_QUEUE_MAX 1024
#define FACTS_FRESH_S 5			/* a reader finding facts this old starts a read (on a worker) */

struct virt_event {
	char domain[128];
	enum virt_event_kind kind;
};

struct virt {
	struct event_base *base;
	pthread_t loop;			/* fleetd's loop thread: the only one that (re)connects */
	char *uri;
	/*
	 * Written only on the loop, under lock; read by workers under lock, each
	 * taking a reference of its own (conn_ref), so a disconnect on the loop
	 * never frees a connection a worker is using: it just goes dead there.
	 */
	virConnectPtr conn;
	int lifecycle_cb;		/* libvirt callback id, -1 when none */
	virt_event_fn fn;
	void *userdata;

	/* Events travel from libvirt's thread to ours through a locked queue and a pipe. */
	bool thread_user;		/* counted in event_thread_users */
	pthread_mutex_t lock;
	struct virt_event queue[EVENT_QUEUE_MAX];
	size_t queued;
	int wake[2];
	struct event *wake_ev;
	struct event *reconnect_ev;
	bool lost;			/* set from libvirt's thread when the connection closed */
	int backoff_s;			/* the next reconnect's delay */
	char *connect_error;		/* why the last connect failed; NULL once connected */
	unsigned generation;		/* bumped by each successful connect */
	/*
	 * A URI that names a host (qemu+tcp://h2/..., qemu+ssh://...): a connect
	 * there can wait for TCP's own timeout (minutes) when the host stops
	 * answering, so after the first one it runs on a worker (connect_job),
	 * never on the loop. A local URI (qemu:///system, a Unix socket) fails
	 * at once and is connected on the loop.
	 */
	bool remote;
	struct connect_job *connecting;	/* the worker's connect under way, if any */

	/* virt_open_async: told once, when the first connect answers or open_timer fires first. */
	virt_opened_fn opened;
	void *opened_arg;
	struct event *open_timer;
	int open_timeout_s;

	/* What the host said last (virt_facts), read on a worker so a silent host never holds the loop. */
	struct virt_facts facts;
	bool have_facts;
	long long facts_at;		/* now_usec() when they were read */
	char *facts_error;		/* why the last read failed; NULL when it did not */
	struct facts_job *refreshing;	/* the worker's read under way, if any */
	long long refresh_at;		/* now_usec() when the read under way started */
	unsigned long long facts_reads;	/* reads a reader started (facts_refresh), for the debug log and tests */
};

struct connect_job {
	struct virt *v;			/* NULL once v was closed: the result is dropped */
	char *uri;
	virConnectPtr conn;		/* the worker's result */
	char *error;
	struct virt_facts facts;	/* read on the worker once connected */
	int facts_r;
};

struct facts_job {
	struct virt *v;			/* NULL once v was closed: the result is dropped */
	virConnectPtr conn;		/* the job's own reference */
	struct virt_facts facts;
	int r;
	char *error;
};

static bool event_impl_registered;
/*
 * One thread runs libvirt's event loop for every connection (one per host):
 * its default implementation must not run in two threads at once. Started
 * by the first virt_open, stopped with the last virt_close.
 */
static pthread_t event_thread_id;
static int event_thread_users;
static volatile int event_thread_stopping;

/* libvirt prints every error to stderr by default; ours go through last_error() and our log. */
static void quiet_errors(void *userdata, virErrorPtr error)
{
}

/* libvirt's last error as a message and an errno. */
static int last_error(const char *what, char **why)
{
	virErrorPtr e = virGetLastError();
	int r = -EIO;

	if (e) {
		switch (e->code) {
		case VIR_ERR_NO_DOMAIN:
		case VIR_ERR_NO_NETWORK:
		case VIR_ERR_NO_STORAGE_POOL:
		case VIR_ERR_NO_STORAGE_VOL:
			r = -ENOENT;
			break;
		case VIR_ERR_OPERATION_INVALID:
			r = -EINVAL;
			break;
		case VIR_ERR_OPERATION_DENIED:
		case VIR_ERR_AUTH_FAILED:
			r = -EACCES;
			break;
		case VIR_ERR_NO_CONNECT:
		case VIR_ERR_INVALID_CONN:
		case VIR_ERR_SYSTEM_ERROR:
		case VIR_ERR_RPC:
			r = -ENOTCONN;
			break;
		case VIR_ERR_DOM_EXIST:
		case VIR_ERR_OPERATION_FAILED:
			r = e->code == VIR_ERR_DOM_EXIST ? -EEXIST : -EIO;
			break;
		default:
			break;
		}
	}
	log_debug("libvirt: %s: %s", what, e && e->message ? e->message : "unknown error");
	if (why)
		*why = xasprintf("%s: %s", what, e && e->message ? e->message : "unknown libvirt error");
	return r;
}

int virt_last_error(const char *what, char **why)
{
	return last_error(what, why);
}

static void *event_thread(void *arg)
{
	while (!event_thread_stopping)
		if (virEventRunDefaultImpl() < 0)
			log_debug("libvirt event loop: %s", virGetLastErrorMessage());
	return NULL;
}

static void push_event(struct virt *v, const char *domain, enum virt_event_kind kind)
{
	pthread_mutex_lock(&v->lock);
	if (v->queued < EVENT_QUEUE_MAX) {
		snprintf(v->queue[v->queued].domain, sizeof(v->queue[0].domain), "%s", domain ? domain : "");
		v->queue[v->queued].kind = kind;
		v->queued++;
	}
	pthread_mutex_unlock(&v->lock);
	(void)write(v->wake[1], "x", 1);
}

static int on_lifecycle(virConnectPtr conn, virDomainPtr dom, int event, int detail, void *opaque)
{
	struct virt *v = opaque;
	enum virt_event_kind kind = VIRT_EV_OTHER;

	switch (event) {
	case VIR_DOMAIN_EVENT_STARTED:
		kind = VIRT_EV_STARTED;
		break;
	case VIR_DOMAIN_EVENT_STOPPED:
		switch (detail) {
		case VIR_DOMAIN_EVENT_STOPPED_SHUTDOWN: kind = VIRT_EV_STOPPED_SHUTDOWN; break;
		case VIR_DOMAIN_EVENT_STOPPED_DESTROYED: kind = VIRT_EV_STOPPED_DESTROYED; break;
		case VIR_DOMAIN_EVENT_STOPPED_CRASHED:
		case VIR_DOMAIN_EVENT_STOPPED_FAILED: kind = VIRT_EV_STOPPED_CRASHED; break;
		default: kind = VIRT_EV_STOPPED_OTHER; break;
		}
		break;
	case VIR_DOMAIN_EVENT_CRASHED:
		kind = VIRT_EV_STOPPED_CRASHED;
		break;
	case VIR_DOMAIN_EVENT_UNDEFINED:
		kind = VIRT_EV_UNDEFINED;
		break;
	default:
		return 0;
	}
	push_event(v, virDomainGetName(dom), kind);
	return 0;
}

static void on_close(virConnectPtr conn, int reason, void *opaque)
{
	struct virt *v = opaque;

	pthread_mutex_lock(&v->lock);
	v->lost = true;
	pthread_mutex_unlock(&v->lock);
	(void)write(v->wake[1], "x", 1);
}

static bool on_loop(struct virt *v)
{
	return pthread_equal(pthread_self(), v->loop);
}

/* v's connection with a reference of the caller's own, or NULL; any thread, never connects. */
static virConnectPtr conn_peek(struct virt *v)
{
	virConnectPtr c = NULL;

	pthread_mutex_lock(&v->lock);
	if (v->conn && virConnectRef(v->conn) == 0)
		c = v->conn;
	pthread_mutex_unlock(&v->lock);
	return c;
}

/* On the loop: v's connection goes; a worker's reference keeps it (dead) until the worker lets go. */
static void disconnect(struct virt *v)
{
	virConnectPtr c = v->conn;

	if (!c)
		return;
	pthread_mutex_lock(&v->lock);
	v->conn = NULL;
	pthread_mutex_unlock(&v->lock);
	if (v->lifecycle_cb >= 0)
		virConnectDomainEventDeregisterAny(c, v->lifecycle_cb);
	v->lifecycle_cb = -1;
	virConnectUnregisterCloseCallback(c, on_close);
	virConnectClose(c);
}

/*
 * v's connection with a reference of the caller's own (virConnectClose it):
 * 0, or -ENOTCONN with *why (if why). On the loop it (re)connects first if
 * needed; a worker thread never does (that would race the loop's own
 * reconnect): it gets the live connection or the error, and its job fails
 * as one cut short by a lost connection would.
 */
static int conn_ref(struct virt *v, virConnectPtr *ret, char **why)
{
	virConnectPtr c;
	int r;

	if (on_loop(v) && (r = virt_connect(v, why)) < 0)
		return r;
	if (!(c = conn_peek(v)) || virConnectIsAlive(c) != 1) {
		if (c)
			virConnectClose(c);
		if (why)
			*why = xasprintf("not connected to %s (the connection was lost; fleetd reconnects by itself)",
					 v->uri);
		return -ENOTCONN;
	}
	*ret = c;
	return 0;
}

/* On the loop: c (connected) becomes v's connection, with its keepalive and callbacks; 0, or -errno with *why. */
static int adopt(struct virt *v, virConnectPtr c, char **why)
{
	pthread_mutex_lock(&v->lock);
	v->conn = c;
	pthread_mutex_unlock(&v->lock);
	free(v->connect_error);
	v->connect_error = NULL;
	v->generation++;
	v->backoff_s = RECONNECT_SECONDS;
	if (virConnectSetKeepAlive(v->conn, 5, 3) < 0)
		log_debug("libvirt: keepalive unavailable: %s", virGetLastErrorMessage());
	virConnectRegisterCloseCallback(v->conn, on_close, v, NULL);
	v->lifecycle_cb = virConnectDomainEventRegisterAny(v->conn, NULL, VIR_DOMAIN_EVENT_ID_LIFECYCLE,
							   VIR_DOMAIN_EVENT_CALLBACK(on_lifecycle), v, NULL);
	if (v->lifecycle_cb < 0) {
		int r = last_error("cannot subscribe to domain events", why);
		disconnect(v);
		return r;
	}
	return 0;
}

static void schedule_reconnect(struct virt *v);
static int node_reclaimable_kib(virConnectPtr conn, unsigned long long *kib);
static void format_version(unsigned long ver, char out[32]);

/* Any thread: what c's host says of itself; 0, or -ENOTCONN with *why (libvirt's words). Logs nothing. */
static int facts_read(virConnectPtr c, struct virt_facts *ret, char **why)
{
	unsigned long lib = 0, hv = 0;
	unsigned long long kib;
	char *caps;

	*ret = (struct virt_facts){ .free_memory_bytes = -1 };
	if (virConnectGetLibVersion(c, &lib) < 0) {
		const char *msg = virGetLastErrorMessage();

		*why = xasprintf("cannot ask libvirtd its version: %s", msg && *msg ? msg : "unknown libvirt error");
		return -ENOTCONN;
	}
	format_version(lib, ret->libvirt);
	if (virConnectGetVersion(c, &hv) < 0 || hv == 0)
		snprintf(ret->qemu, sizeof(ret->qemu), "unknown");
	else
		format_version(hv, ret->qemu);
	/* libvirt answers for a virttype "kvm" only where QEMU can use KVM. */
	if ((caps = virConnectGetDomainCapabilities(c, NULL, NULL, NULL, "kvm", 0))) {
		ret->kvm = true;
		free(caps);
	}
	/*
	 * Free as a guest can have it: free plus the page cache and buffers the
	 * kernel gives back on demand. virNodeGetFreeMemory alone is MemFree,
	 * which a busy host's page cache keeps near zero, and placement would
	 * refuse every agent there.
	 */
	if (node_reclaimable_kib(c, &kib) == 0)
		ret->free_memory_bytes = (long long)(kib * 1024);
	else if ((kib = virNodeGetFreeMemory(c)) > 0)
		ret->free_memory_bytes = (long long)kib;
	return 0;
}

/* On the loop: a read's outcome kept (a failed one keeps the facts before it, and their age). */
static void facts_store(struct virt *v, int r, const struct virt_facts *facts, char **error)
{
	free(v->facts_error);
	v->facts_error = NULL;
	if (r < 0) {
		v->facts_error = *error;
		*error = NULL;
		return;
	}
	v->facts = *facts;
	v->have_facts = true;
	v->facts_at = now_usec();
}

/* On a worker: the connect, which may wait for TCP's timeout; touches only the job. */
static void connect_work(void *arg)
{
	struct connect_job *j = arg;

	if (!(j->conn = virConnectOpen(j->uri))) {
		const char *msg = virGetLastErrorMessage();
		j->error = xstrdup(msg && *msg ? msg : "cannot connect");
		return;
	}
	j->facts_r = facts_read(j->conn, &j->facts, &j->error);
}

/* On the loop: the worker's connect adopted, or its error kept and the next try scheduled. */
static void connect_done(void *arg)
{
	struct connect_job *j = arg;
	struct virt *v = j->v;
	_cleanup_free_ char *why = NULL;

	if (!v) {	/* closed meanwhile, or its virt_open_async timed out */
		if (j->conn)
			virConnectClose(j->conn);
	} else if (v->opened) {	/* virt_open_async's first connect: the caller decides */
		virt_opened_fn opened = v->opened;
		int r = 0;

		v->connecting = NULL;
		v->opened = NULL;
		evtimer_del(v->open_timer);
		if (!j->conn) {
			why = xasprintf("%s: %s", v->uri, j->error ? j->error : "cannot connect");
			r = -ENOTCONN;
		} else if ((r = adopt(v, j->conn, &why)) == 0) {
			facts_store(v, j->facts_r, &j->facts, &j->error);
		}
		if (r < 0) {
			free(v->connect_error);
			v->connect_error = xstrdup(why);
		}
		opened(v->opened_arg, r, why);	/* may close v */
	} else {
		v->connecting = NULL;
		if (j->conn && adopt(v, j->conn, &why) == 0) {
			facts_store(v, j->facts_r, &j->facts, &j->error);
			log_notice("libvirt: connected to %s", v->uri);
			v->fn(v->userdata, NULL, VIRT_EV_RECONNECTED);
		} else {
			free(v->connect_error);
			v->connect_error = xstrdup(j->error ? j->error : why ? why : "cannot connect");
			log_debug("libvirt: cannot connect to %s (next try in %d s): %s", v->uri, v->backoff_s,
				  v->connect_error);
			if (!evtimer_pending(v->reconnect_ev, NULL))
				schedule_reconnect(v);
		}
	}
	free(j->error);
	free(j->uri);
	free(j);
}

/* On the loop: a connect of v on a worker, unless one is under way; -errno if no worker could start. */
static int connect_start(struct virt *v)
{
	struct connect_job *j;
	int r;

	if (v->connecting)
		return 0;
	j = xcalloc(1, sizeof(*j));
	j->v = v;
	j->uri = xstrdup(v->uri);
	if ((r = worker_run(v->base, connect_work, connect_done, j)) < 0) {
		free(j->uri);
		free(j);
		if (!v->opened && !evtimer_pending(v->reconnect_ev, NULL))
			schedule_reconnect(v);
		return r;
	}
	v->connecting = j;
	return 0;
}

/* On the loop: connect now, waiting for the answer (a local URI, or a first connect the caller waits for). */
static int connect_sync(struct virt *v, char **why)
{
	virConnectPtr c = virConnectOpen(v->uri);
	int r;

	if (!c) {
		char *msg = NULL;

		(void)last_error(v->uri, &msg);
		free(v->connect_error);
		v->connect_error = msg;
		if (why)
			*why = xstrdup(msg);
		return -ENOTCONN;
	}
	if ((r = adopt(v, c, why)) == 0) {
		/* On the loop, like the connect itself: only a local URI, or a first connect the caller waits for. */
		struct virt_facts facts;
		char *error = NULL;
		int fr = facts_read(c, &facts, &error);

		facts_store(v, fr, &facts, &error);
		free(error);
	}
	return r;
}

int virt_connect(struct virt *v, char **why)
{
	virConnectPtr c;

	if (!on_loop(v)) {
		int r = conn_ref(v, &c, why);

		if (r == 0)
			virConnectClose(c);
		return r;
	}
	if (v->conn && virConnectIsAlive(v->conn) == 1)
		return 0;
	disconnect(v);
	if (!v->remote)
		return connect_sync(v, why);
	/* Another host: never wait on the loop; the worker's connect is adopted when it answers. */
	(void)connect_start(v);
	if (why)
		*why = xasprintf("not connected to %s (%s; fleetd reconnects by itself)", v->uri,
				 v->connect_error ? v->connect_error : "connecting");
	return -ENOTCONN;
}

int virt_conn(struct virt *v, virConnectPtr *ret, char **why)
{
	return conn_ref(v, ret, why);
}

unsigned virt_generation(struct virt *v)
{
	return v->generation;
}

bool virt_is_connected(struct virt *v)
{
	virConnectPtr c = conn_peek(v);
	bool alive = c && virConnectIsAlive(c) == 1;

	if (c)
		virConnectClose(c);
	return alive;
}

const char *virt_uri(struct virt *v)
{
	return v->uri;
}

const char *virt_connect_error(struct virt *v)
{
	return v->connect_error;
}

/* The next reconnect in v->backoff_s, doubled for the one after. */
static void schedule_reconnect(struct virt *v)
{
	struct timeval tv = { v->backoff_s, 0 };

	evtimer_add(v->reconnect_ev, &tv);
	v->backoff_s = v->backoff_s * 2 > RECONNECT_MAX_SECONDS ? RECONNECT_MAX_SECONDS : v->backoff_s * 2;
}

/* *kib = free + buffers + cached over all cells (virNodeGetMemoryStats); -1 when libvirt cannot say. */
static int node_reclaimable_kib(virConnectPtr conn, unsigned long long *kib)
{
	virNodeMemoryStatsPtr params;
	int n = 0;
	bool have_free = false;

	if (virNodeGetMemoryStats(conn, VIR_NODE_MEMORY_STATS_ALL_CELLS, NULL, &n, 0) < 0 || n <= 0 || n > 64)
		return -1;
	params = calloc((size_t)n, sizeof(*params));
	if (!params)
		return -1;
	if (virNodeGetMemoryStats(conn, VIR_NODE_MEMORY_STATS_ALL_CELLS, params, &n, 0) < 0) {
		free(params);
		return -1;
	}
	*kib = 0;
	for (int i = 0; i < n; i++) {
		if (strcmp(params[i].field, VIR_NODE_MEMORY_STATS_FREE) == 0)
			have_free = true;
		else if (strcmp(params[i].field, VIR_NODE_MEMORY_STATS_BUFFERS) != 0 &&
			 strcmp(params[i].field, VIR_NODE_MEMORY_STATS_CACHED) != 0)
			continue;
		*kib += params[i].value;
	}
	free(params);
	return have_free ? 0 : -1;
}

bool virt_kvm(struct virt *v)
{
	/* libvirt answers for a virttype "kvm" only where QEMU can use KVM. */
	_cleanup_conn_ virConnectPtr c = conn_peek(v);
	char *caps = c && virConnectIsAlive(c) == 1 ? virConnectGetDomainCapabilities(c, NULL, NULL, NULL, "kvm", 0)
						     : NULL;

	if (!caps)
		return false;
	free(caps);
	return true;
}

static void format_version(unsigned long ver, char out[32])
{
	snprintf(out, 32, "%lu.%lu.%lu", ver / 1000000, ver / 1000 % 1000, ver % 1000);
}

int virt_versions(struct virt *v, char libvirt[32], char hypervisor[32], char **why)
{
	_cleanup_conn_ virConnectPtr c = conn_peek(v);
	unsigned long lib = 0, hv = 0;

	if (!c || virConnectIsAlive(c) != 1) {
		*why = xasprintf("not connected to %s", v->uri);
		return -ENOTCONN;
	}
	if (virConnectGetLibVersion(c, &lib) < 0)
		return last_error("cannot ask libvirtd its version", why);
	format_version(lib, libvirt);
	if (virConnectGetVersion(c, &hv) < 0 || hv == 0)
		snprintf(hypervisor, 32, "unknown");
	else
		format_version(hv, hypervisor);
	return 0;
}

/* On a worker: the facts read through the job's own reference, however long a silent host makes it wait. */
static void facts_work(void *arg)
{
	struct facts_job *j = arg;

	j->r = facts_read(j->conn, &j->facts, &j->error);
	virConnectClose(j->conn);
}

static void facts_done(void *arg)
{
	struct facts_job *j = arg;

	if (j->v) {
		j->v->refreshing = NULL;
		facts_store(j->v, j->r, &j->facts, &j->error);
	}
	free(j->error);
	free(j);
}

/*
 * On the loop, from a reader (virt_facts): a read of the facts on a worker if
 * they are FACTS_FRESH_S old or missing, none is under way and v is
 * connected. Nothing else starts one: an idle fleetd asks its hosts nothing.
 */
static void facts_refresh(struct virt *v)
{
	struct facts_job *j;
	virConnectPtr c;

	if (v->refreshing || (v->have_facts && now_usec() - v->facts_at < FACTS_FRESH_S * 1000000LL) ||
	    !(c = conn_peek(v)))
		return;
	j = xcalloc(1, sizeof(*j));
	*j = (struct facts_job){ .v = v, .conn = c };
	if (virConnectIsAlive(c) != 1 || worker_run(v->base, facts_work, facts_done, j) < 0) {
		virConnectClose(c);
		free(j);
		return;
	}
	v->refreshing = j;
	v->refresh_at = now_usec();
	v->facts_reads++;
	log_debug("libvirt: reading the facts of %s on a worker (read %llu)", v->uri, v->facts_reads);
}

int virt_facts(struct virt *v, struct virt_facts *ret, long long *age_s, const char **error)
{
	facts_refresh(v);
	*error = v->facts_error;
	if (!v->have_facts)
		return -ENOENT;
	*ret = v->facts;
	*age_s = (now_usec() - v->facts_at) / 1000000;
	return 0;
}

bool virt_facts_refreshing(struct virt *v)
{
	return v->refreshing != NULL;
}

long long virt_facts_refreshing_s(struct virt *v)
{
	return v->refreshing ? (now_usec() - v->refresh_at) / 1000000 : -1;
}

unsigned long long virt_facts_reads(struct virt *v)
{
	return v->facts_reads;
}

static void on_reconnect_timer(evutil_socket_t fd, short what, void *arg)
{
	struct virt *v = arg;
	_cleanup_free_ char *why = NULL;

	if (v->remote) {	/* connect_done adopts it or schedules the next try */
		if (!v->conn)
			(void)connect_start(v);
		return;
	}
	if (virt_connect(v, &why) < 0) {
		log_debug("libvirt: still cannot reconnect (next try in %d s): %s", v->backoff_s, why ? why : "?");
		schedule_reconnect(v);
		return;
	}
	log_notice("libvirt: reconnected to %s", v->uri);
	v->fn(v->userdata, NULL, VIRT_EV_RECONNECTED);
}

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
	struct virt *v = arg;
	struct virt_event batch[EVENT_QUEUE_MAX];
	char buf[256];
	size_t n;
	bool lost;

	while (read(fd, buf, sizeof(buf)) > 0)
		;
	pthread_mutex_lock(&v->lock);
	n = v->queued;
	memcpy(batch, v->queue, n * sizeof(*batch));
	v->queued = 0;
	lost = v->lost;
	v->lost = false;
	pthread_mutex_unlock(&v->lock);
	for (size_t i = 0; i < n; i++)
		v->fn(v->userdata, batch[i].domain, batch[i].kind);
	if (lost) {
		log_warning("libvirt: lost the connection to %s; reconnecting (after %d s, then backing off to %d s)",
			    v->uri, RECONNECT_SECONDS, RECONNECT_MAX_SECONDS);
		disconnect(v);
		free(v->connect_error);
		v->connect_error = xasprintf("lost the connection to %s", v->uri);
		if (!evtimer_pending(v->reconnect_ev, NULL)) {
			v->backoff_s = RECONNECT_SECONDS;
			schedule_reconnect(v);
		}
	}
}

/* A no-op timer that wakes libvirt's event thread so it can see event_thread_stopping. */
static void wake_libvirt(int timer, void *opaque)
{
}

/* Whether uri names a host (DRIVER[+TRANSPORT]://HOST/...): a connect there can wait for the network. */
static bool uri_names_host(const char *uri)
{
	const char *p = strstr(uri, "://");

	return p && p[3] && p[3] != '/';
}

/* A handle on uri, not connected yet; -errno with *why. */
static int virt_new(struct event_base *base, const char *uri, virt_event_fn fn, void *userdata,
		    struct virt **ret, char **why)
{
	struct virt *v;
	int r;

	if (!event_impl_registered) {
		virSetErrorFunc(NULL, quiet_errors);
		if (virEventRegisterDefaultImpl() < 0)
			return last_error("cannot set up libvirt's event loop", why);
		event_impl_registered = true;
	}
	v = xcalloc(1, sizeof(*v));
	v->base = base;
	v->uri = xstrdup(uri);
	v->fn = fn;
	v->userdata = userdata;
	v->lifecycle_cb = -1;
	v->backoff_s = RECONNECT_SECONDS;
	v->loop = pthread_self();
	v->remote = uri_names_host(uri);
	pthread_mutex_init(&v->lock, NULL);
	if (pipe2(v->wake, O_CLOEXEC | O_NONBLOCK) < 0) {
		r = -errno;
		*why = xasprintf("cannot make a pipe: %s", strerror(-r));
		free(v->uri);
		free(v);
		return r;
	}
	v->wake_ev = event_new(base, v->wake[0], EV_READ | EV_PERSIST, on_wake, v);
	v->reconnect_ev = evtimer_new(base, on_reconnect_timer, v);
	event_add(v->wake_ev, NULL);
	if (event_thread_users == 0) {
		event_thread_stopping = 0;
		if (pthread_create(&event_thread_id, NULL, event_thread, NULL) != 0) {
			virt_close(v);
			*why = xstrdup("cannot start libvirt's event thread");
			return -EAGAIN;
		}
	}
	event_thread_users++;
	v->thread_user = true;
	*ret = v;
	return 0;
}

int virt_open(struct event_base *base, const char *uri, virt_event_fn fn, void *userdata,
	      struct virt **ret, char **why)
{
	int r;

	if ((r = virt_new(base, uri, fn, userdata, ret, why)) < 0)
		return r;
	/* The first connect is waited for (the caller wants libvirt's words); reconnects of a remote one are not. */
	if ((r = connect_sync(*ret, why)) < 0) {
		schedule_reconnect(*ret);
		return r;
	}
	return 0;
}

/* The bound of virt_open_async passed first: the worker is left to end alone, its result dropped. */
static void on_open_timeout(evutil_socket_t fd, short what, void *arg)
{
	struct virt *v = arg;
	virt_opened_fn opened = v->opened;
	_cleanup_free_ char *why = NULL;

	if (!opened)
		return;
	v->opened = NULL;
	if (v->connecting) {	/* as virt_close orphans it */
		v->connecting->v = NULL;
		v->connecting = NULL;
	}
	why = xasprintf("%s: no answer within %d s", v->uri, v->open_timeout_s);
	free(v->connect_error);
	v->connect_error = xstrdup(why);
	opened(v->opened_arg, -ENOTCONN, why);	/* may close v */
}

int virt_open_async(struct event_base *base, const char *uri, virt_event_fn fn, void *userdata, int timeout_s,
		    virt_opened_fn opened, void *arg, struct virt **ret, char **why)
{
	struct timeval tv = { timeout_s, 0 };
	struct virt *v = NULL;
	int r;

	if ((r = virt_new(base, uri, fn, userdata, &v, why)) < 0)
		return r;
	v->opened = opened;
	v->opened_arg = arg;
	v->open_timeout_s = timeout_s;
	v->open_timer = evtimer_new(base, on_open_timeout, v);
	if ((r = connect_start(v)) < 0) {
		*why = xasprintf("cannot start a thread to connect to %s: %s", uri, strerror(-r));
		virt_close(v);
		return r;
	}
	evtimer_add(v->open_timer, &tv);
	*ret = v;
	return 0;
}

void virt_close(struct virt *v)
{
	if (!v)
		return;
	if (v->connecting)	/* its worker may wait minutes yet: its result is dropped */
		v->connecting->v = NULL;
	if (v->refreshing)	/* likewise: a silent host holds it until the keepalive gives up */
		v->refreshing->v = NULL;
	disconnect(v);
	if (v->thread_user && --event_thread_users == 0) {
		event_thread_stopping = 1;
		int t = virEventAddTimeout(0, wake_libvirt, NULL, NULL);
		pthread_join(event_thread_id, NULL);
		if (t >= 0)
			virEventRemoveTimeout(t);
	}
	if (v->wake_ev)
		event_free(v->wake_ev);
	if (v->reconnect_ev)
		event_free(v->reconnect_ev);
	if (v->open_timer)
		event_free(v->open_timer);
	close(v->wake[0]);
	close(v->wake[1]);
	pthread_mutex_destroy(&v->lock);
	free(v->facts_error);
	free(v->connect_error);
	free(v->uri);
	free(v);
}

/* Look up a domain, connecting first if needed (the domain holds its own reference to the connection). */
static int lookup(struct virt *v, const char *name, virDomainPtr *ret, char **why)
{
	_cleanup_conn_ virConnectPtr c = NULL;
	int r;

	if ((r = conn_ref(v, &c, why)) < 0)
		return r;
	*ret = virDomainLookupByName(c, name);
	if (!*ret) {
		_cleanup_free_ char *what = xasprintf("domain %s", name);
		return last_error(what, why);
	}
	return 0;
}

int virt_domain_define(struct virt *v, const char *xml, char **why)
{
	_cleanup_conn_ virConnectPtr c = NULL;
	virDomainPtr d;
	int r;

	if ((r = conn_ref(v, &c, why)) < 0)
		return r;
	d = virDomainDefineXMLFlags(c, xml, VIR_DOMAIN_DEFINE_VALIDATE);
	if (!d)
		return last_error("cannot define domain", why);
	virDomainFree(d);
	return 0;
}

/* Run op on the named domain; what names it in errors. */
static int with_domain(struct virt *v, const char *name, int (*op)(virDomainPtr), const char *what, char **why)
{
	virDomainPtr d;
	int r;

	if ((r = lookup(v, name, &d, why)) < 0)
		return r;
	r = op(d) < 0 ? last_error(what, why) : 0;
	virDomainFree(d);
	return r;
}

int virt_domain_suspend(struct virt *v, const char *name, char **why)
{
	return with_domain(v, name, virDomainSuspend, "cannot pause domain", why);
}

int virt_domain_resume(struct virt *v, const char *name, char **why)
{
	return with_domain(v, name, virDomainResume, "cannot resume domain", why);
}

int virt_domain_start(struct virt *v, const char *name, char **why)
{
	return with_domain(v, name, virDomainCreate, "cannot start domain", why);
}

static int create_paused(virDomainPtr d)
{
	return virDomainCreateWithFlags(d, VIR_DOMAIN_START_PAUSED);
}

int virt_domain_start_paused(struct virt *v, const char *name, char **why)
{
	return with_domain(v, name, create_paused, "cannot start domain", why);
}

int virt_domain_shutdown(struct virt *v, const char *name, char **why)
{
	return with_domain(v, name, virDomainShutdown, "cannot shut down domain", why);
}

int virt_domain_destroy(struct virt *v, const char *name, char **why)
{
	return with_domain(v, name, virDomainDestroy, "cannot destroy domain", why);
}

static int undefine_all(virDomainPtr d)
{
	return virDomainUndefineFlags(d, VIR_DOMAIN_UNDEFINE_SNAPSHOTS_METADATA |
				      VIR_DOMAIN_UNDEFINE_CHECKPOINTS_METADATA | VIR_DOMAIN_UNDEFINE_NVRAM);
}

int virt_domain_undefine(struct virt *v, const char *name, char **why)
{
	return with_domain(v, name, undefine_all, "cannot undefine domain", why);
}

int virt_domain_run_id(struct virt *v, const char *name, int *ret)
{
	virDomainPtr d;
	unsigned int id;
	int r;

	if ((r = lookup(v, name, &d, NULL)) < 0)
		return r;
	id = virDomainGetID(d);
	virDomainFree(d);
	if (id == (unsigned int)-1 || id == 0 || id > INT_MAX)
		return -ENOENT;
	*ret = (int)id;
	return 0;
}

int virt_domain_state(struct virt *v, const char *name, enum virt_state *ret)
{
	virDomainPtr d;
	int st, reason, r;

	if ((r = lookup(v, name, &d, NULL)) < 0)
		return r;
	if (virDomainGetState(d, &st, &reason, 0) < 0) {
		r = last_error("cannot read domain state", NULL);
		virDomainFree(d);
		return r;
	}
	virDomainFree(d);
	switch (st) {
	case VIR_DOMAIN_RUNNING: *ret = VIRT_RUNNING; break;
	case VIR_DOMAIN_BLOCKED: *ret = VIRT_RUNNING; break;
	case VIR_DOMAIN_PAUSED: *ret = VIRT_PAUSED; break;
	case VIR_DOMAIN_SHUTDOWN: *ret = VIRT_SHUTTING_DOWN; break;
	case VIR_DOMAIN_SHUTOFF: *ret = VIRT_OFF; break;
	case VIR_DOMAIN_CRASHED: *ret = VIRT_CRASHED; break;
	default: *ret = VIRT_OTHER; break;
	}
	return 0;
}

int virt_domain_xml(struct virt *v, const char *name, char **ret_xml)
{
	virDomainPtr d;
	char *xml;
	int r;

	if ((r = lookup(v, name, &d, NULL)) < 0)
		return r;
	xml = virDomainGetXMLDesc(d, 0);
	r = xml ? 0 : last_error("cannot read domain XML", NULL);
	virDomainFree(d);
	if (xml) {
		*ret_xml = xstrdup(xml);
		free(xml);
	}
	return r;
}

int virt_domain_uuid(struct virt *v, const char *name, char *buf)
{
	virDomainPtr d;
	int r;

	if ((r = lookup(v, name, &d, NULL)) < 0)
		return r;
	r = virDomainGetUUIDString(d, buf) < 0 ? last_error("cannot read domain UUID", NULL) : 0;
	virDomainFree(d);
	return r;
}

int virt_domain_list(struct virt *v, const char *prefix, bool active_only, char ***ret)
{
	virDomainPtr *doms = NULL;
	char **names;
	size_t k = 0;
	_cleanup_conn_ virConnectPtr c = NULL;
	int n, r;

	if ((r = conn_ref(v, &c, NULL)) < 0)
		return r;
	n = virConnectListAllDomains(c, &doms, active_only ? VIR_CONNECT_LIST_DOMAINS_ACTIVE : 0);
	if (n < 0)
		return last_error("cannot list domains", NULL);
	names = xcalloc((size_t)n + 1, sizeof(*names));
	for (int i = 0; i < n; i++) {
		const char *name = virDomainGetName(doms[i]);
		if (name && strncmp(name, prefix, strlen(prefix)) == 0)
			names[k++] = xstrdup(name);
		virDomainFree(doms[i]);
	}
	free(doms);
	*ret = names;
	return 0;
}

int virt_domain_usage_all(struct virt *v, const char *prefix, struct virt_domain_usage **ret, size_t *n)
{
	virDomainStatsRecordPtr *recs = NULL;
	struct virt_domain_usage *u;
	size_t k = 0;
	_cleanup_conn_ virConnectPtr c = NULL;
	int count, r;

	if ((r = conn_ref(v, &c, NULL)) < 0)
		return r;
	count = virConnectGetAllDomainStats(c, VIR_DOMAIN_STATS_CPU_TOTAL | VIR_DOMAIN_STATS_BALLOON, &recs,
					    VIR_CONNECT_GET_ALL_DOMAINS_STATS_ACTIVE);
	if (count < 0)
		return last_error("cannot read domain statistics", NULL);
	u = xcalloc((size_t)count + 1, sizeof(*u));
	for (int i = 0; i < count; i++) {
		const char *name = virDomainGetName(recs[i]->dom);
		unsigned long long val;

		if (!name || strncmp(name, prefix, strlen(prefix)) != 0)
			continue;
		u[k] = (struct virt_domain_usage){ .name = xstrdup(name), .memory_bytes = -1, .cpu_seconds = -1 };
		if (virTypedParamsGetULLong(recs[i]->params, recs[i]->nparams, "cpu.time", &val) == 1)
			u[k].cpu_seconds = (double)val / 1e9;
		if (virTypedParamsGetULLong(recs[i]->params, recs[i]->nparams, "balloon.rss", &val) == 1 ||
		    virTypedParamsGetULLong(recs[i]->params, recs[i]->nparams, "balloon.current", &val) == 1)
			u[k].memory_bytes = (long long)val * 1024;	/* KiB */
		k++;
	}
	virDomainStatsRecordListFree(recs);
	*ret = u;
	*n = k;
	return 0;
}

int virt_network_ensure(struct virt *v, const char *name, const char *xml, char **why)
{
	_cleanup_conn_ virConnectPtr c = NULL;
	virNetworkPtr net;
	bool defined = false;
	int r;

	if ((r = conn_ref(v, &c, why)) < 0)
		return r;
	net = virNetworkLookupByName(c, name);
	if (!net) {
		net = virNetworkDefineXML(c, xml);
		if (!net)
			return last_error("cannot define network", why);
		defined = true;
		log_info("libvirt: defined network %s", name);
		if (virNetworkSetAutostart(net, 1) < 0)
			log_debug("libvirt: cannot autostart network %s: %s", name, virGetLastErrorMessage());
	}
	if (virNetworkIsActive(net) != 1 && virNetworkCreate(net) < 0) {
		r = last_error("cannot start network", why);
		/* One this call defined and that cannot start (its subnet taken there) is not left behind. */
		if (defined && virNetworkUndefine(net) == 0)
			log_info("libvirt: undefined network %s again", name);
		virNetworkFree(net);
		return r;
	}
	virNetworkFree(net);
	return 0;
}

int virt_network_xml(struct virt *v, const char *name, char **ret, char **why)
{
	_cleanup_conn_ virConnectPtr c = NULL;
	virNetworkPtr net;
	char *xml;
	int r;

	if ((r = conn_ref(v, &c, why)) < 0)
		return r;
	if (!(net = virNetworkLookupByName(c, name)))
		return last_error("cannot find network", why);
	xml = virNetworkGetXMLDesc(net, 0);
	r = xml ? 0 : last_error("cannot read network", why);
	virNetworkFree(net);
	if (r == 0) {
		*ret = xstrdup(xml);
		free(xml);
	}
	return r;
}

int virt_nwfilter_define(struct virt *v, const char *xml, char **why)
{
	_cleanup_conn_ virConnectPtr c = NULL;
	virNWFilterPtr f;
	int r;

	if ((r = conn_ref(v, &c, why)) < 0)
		return r;
	/* A filter of that name is replaced, and libvirt applies it again to every running guest that uses it. */
	if (!(f = virNWFilterDefineXML(c, xml)))
		return last_error("cannot define network filter", why);
	virNWFilterFree(f);
	return 0;
}

int virt_nwfilter_undefine(struct virt *v, const char *name, char **why)
{
	_cleanup_conn_ virConnectPtr c = NULL;
	virNWFilterPtr f;
	int r;

	if ((r = conn_ref(v, &c, why)) < 0)
		return r;
	if (!(f = virNWFilterLookupByName(c, name))) {
		virErrorPtr e = virGetLastError();

		if (e && e->code == VIR_ERR_NO_NWFILTER)
			return -ENOENT;
		return last_error("cannot find network filter", why);
	}
	r = virNWFilterUndefine(f) < 0 ? last_error("cannot undefine network filter", why) : 0;
	virNWFilterFree(f);
	return r;
}

/* virDomainSnapshotCreateXML: a new snapshot and a redefined one are the same call with other XML and flags. */
static int snapshot_create_xml(struct virt *v, const char *domain, const char *xml, unsigned int flags,
			       const char *what, char **why)
{
	virDomainSnapshotPtr s;
	virDomainPtr d;
	int r;

	if ((r = lookup(v, domain, &d, why)) < 0)
		return r;
	s = virDomainSnapshotCreateXML(d, xml, flags);
	r = s ? 0 : last_error(what, why);
	if (s)
		virDomainSnapshotFree(s);
	virDomainFree(d);
	return r;
}

int virt_snapshot_create(struct virt *v, const char *domain, const char *snap, char **why)
{
	_cleanup_free_ char *xml = xasprintf("<domainsnapshot><name>%s</name></domainsnapshot>", snap);

	return snapshot_create_xml(v, domain, xml, VIR_DOMAIN_SNAPSHOT_CREATE_ATOMIC, "cannot create snapshot", why);
}

int virt_snapshot_xml(struct virt *v, const char *domain, const char *snap, char **ret_xml, char **why)
{
	virDomainSnapshotPtr s;
	virDomainPtr d;
	char *xml;
	int r;

	if ((r = lookup(v, domain, &d, why)) < 0)
		return r;
	if (!(s = virDomainSnapshotLookupByName(d, snap, 0))) {
		r = last_error("cannot find snapshot", why);
		virDomainFree(d);
		return r;
	}
	/* SECURE: the definition is given back as it was, nothing left out. */
	xml = virDomainSnapshotGetXMLDesc(s, VIR_DOMAIN_SNAPSHOT_XML_SECURE);
	r = xml ? 0 : last_error("cannot read snapshot definition", why);
	if (xml) {
		*ret_xml = xstrdup(xml);
		free(xml);
	}
	virDomainSnapshotFree(s);
	virDomainFree(d);
	return r;
}

int virt_snapshot_redefine(struct virt *v, const char *domain, const char *xml, char **why)
{
	return snapshot_create_xml(v, domain, xml, VIR_DOMAIN_SNAPSHOT_CREATE_REDEFINE, "cannot define snapshot again",
				   why);
}

/*
 * The named snapshot of domain, in *ret_d and *ret_s (the caller frees
 * both), or nothing: -ENOENT with "no snapshot SNAP of DOMAIN" when libvirt
 * knows no such snapshot, else lookup's or last_error(what)'s answer.
 */
static int lookup_snapshot(struct virt *v, const char *domain, const char *snap, virDomainPtr *ret_d,
			   virDomainSnapshotPtr *ret_s, const char *what, char **why)
{
	virDomainSnapshotPtr s;
	virDomainPtr d;
	int r;

	if ((r = lookup(v, domain, &d, why)) < 0)
		return r;
	s = virDomainSnapshotLookupByName(d, snap, 0);
	if (!s) {
		virErrorPtr e = virGetLastError();

		r = e && e->code == VIR_ERR_NO_DOMAIN_SNAPSHOT ? -ENOENT : last_error(what, why);
		if (r == -ENOENT && why)
			*why = xasprintf("no snapshot %s of %s", snap, domain);
		virDomainFree(d);
		return r;
	}
	*ret_d = d;
	*ret_s = s;
	return 0;
}

/* Run op on the named snapshot of domain. */
static int with_snapshot(struct virt *v, const char *domain, const char *snap,
			 int (*op)(virDomainSnapshotPtr), const char *what, char **why)
{
	virDomainSnapshotPtr s;
	virDomainPtr d;
	int r;

	if ((r = lookup_snapshot(v, domain, snap, &d, &s, what, why)) < 0)
		return r;
	r = op(s) < 0 ? last_error(what, why) : 0;
	virDomainSnapshotFree(s);
	virDomainFree(d);
	return r;
}

static int revert(virDomainSnapshotPtr s)
{
	return virDomainRevertToSnapshot(s, 0);
}

static int delete_snapshot(virDomainSnapshotPtr s)
{
	return virDomainSnapshotDelete(s, 0);
}

static int noop(virDomainSnapshotPtr s)
{
	return 0;
}

int virt_snapshot_revert(struct virt *v, const char *domain, const char *snap, char **why)
{
	return with_snapshot(v, domain, snap, revert, "cannot revert to snapshot", why);
}

int virt_snapshot_delete(struct virt *v, const char *domain, const char *snap, char **why)
{
	return with_snapshot(v, domain, snap, delete_snapshot, "cannot delete snapshot", why);
}

/* Why snapshot s of domain d cannot be loaded in its QEMU run run_id (a static string), or NULL when it can. */
static const char *in_place_refusal(virDomainPtr d, virDomainSnapshotPtr s, const char *snap, int run_id)
{
	_cleanup_free_ char *sx = NULL, *saved = NULL;
	int state;

	/* Names are checked as fleet's (common/names.c); the monitor's command line gets nothing else. */
	if (snapshot_name_check(snap, NULL) < 0)
		return "its name is not one fleet makes";
	if (virDomainGetState(d, &state, NULL, 0) < 0 || state != VIR_DOMAIN_RUNNING)
		return "the domain is not running";
	/* The same QEMU process (no hot-plug in fleet): the device configuration the checkpoint holds. */
	if (run_id <= 0 || (int)virDomainGetID(d) != run_id)
		return "the snapshot was not taken in the QEMU process that runs the guest now";
	/* The definitions last: the checks above cost no document each. */
	sx = virDomainSnapshotGetXMLDesc(s, VIR_DOMAIN_SNAPSHOT_XML_SECURE);
	saved = virDomainGetXMLDesc(d, VIR_DOMAIN_XML_INACTIVE | VIR_DOMAIN_XML_SECURE);
	if (!sx || !saved)
		return "libvirt did not give the definitions to compare";
	if (virt_xml_has(sx, "/domainsnapshot/state", "running") != 1 ||
	    virt_xml_has(sx, "/domainsnapshot/memory/@snapshot", "internal") != 1)
		return "the snapshot holds no running guest's memory";
	/* libvirt's revert would also make the snapshot's persistent definition the domain's again. */
	if (virt_xml_same_element(sx, "/domainsnapshot/inactiveDomain", saved, "/domain") != 1)
		return "the persistent definition is not the one the snapshot saved";
	return NULL;
}

int virt_snapshot_load_in_place(struct virt *v, const char *domain, const char *snap, int run_id, char **why)
{
	_cleanup_free_ char *cmd = NULL, *out = NULL;
	virDomainSnapshotPtr s;
	const char *refusal;
	virDomainPtr d;
	int r, state;

	if ((r = lookup_snapshot(v, domain, snap, &d, &s, "cannot find snapshot", why)) < 0)
		return r;
	if ((refusal = in_place_refusal(d, s, snap, run_id))) {
		*why = xstrdup(refusal);
		r = -EOPNOTSUPP;
		goto out;
	}
	/*
	 * HMP's loadvm stops the guest, loads every snapshot-capable disk's
	 * internal snapshot and the RAM and device state, and runs it again if
	 * it ran: what the new QEMU of libvirt's revert does with -loadvm. It
	 * prints nothing on success, the error otherwise. libvirt marks the
	 * domain tainted (custom-monitor) in its log.
	 */
	cmd = xasprintf("loadvm %s", snap);
	if (virDomainQemuMonitorCommand(d, cmd, &out, VIR_DOMAIN_QEMU_MONITOR_COMMAND_HMP) < 0) {
		r = last_error("cannot load the checkpoint in place", why);
		goto out;
	}
	if (out && out[strspn(out, " \t\r\n")]) {
		out[strcspn(out, "\r\n")] = '\0';
		*why = xasprintf("loadvm %s: %.200s", snap, out);
		r = -EIO;
		goto out;
	}
	if (virDomainGetState(d, &state, NULL, 0) < 0 || state != VIR_DOMAIN_RUNNING) {
		*why = xasprintf("the guest is not running after loadvm %s", snap);
		r = -EIO;
		goto out;
	}
	r = 0;
out:
	virDomainSnapshotFree(s);
	virDomainFree(d);
	return r;
}

int virt_snapshot_exists(struct virt *v, const char *domain, const char *snap)
{
	int r = with_snapshot(v, domain, snap, noop, "cannot look up snapshot", NULL);

	return r == 0 ? 1 : r == -ENOENT ? 0 : r;
}

int virt_snapshot_names(struct virt *v, const char *domain, char ***ret, char **why)
{
	virDomainSnapshotPtr *snaps = NULL;
	virDomainPtr d;
	char **names;
	int n, r;

	if ((r = lookup(v, domain, &d, why)) < 0)
		return r;
	/* TOPOLOGICAL: parents first, the order a redefinition needs. */
	n = virDomainListAllSnapshots(d, &snaps, VIR_DOMAIN_SNAPSHOT_LIST_TOPOLOGICAL);
	if (n < 0) {
		r = last_error("cannot list snapshots", why);
		virDomainFree(d);
		return r;
	}
	names = xcalloc((size_t)n + 1, sizeof(*names));
	for (int i = 0; i < n; i++) {
		names[i] = xstrdup(virDomainSnapshotGetName(snaps[i]));
		virDomainSnapshotFree(snaps[i]);
	}
	free(snaps);
	virDomainFree(d);
	*ret = names;
	return 0;
}

const char *virt_state_to_string(enum virt_state s)
{
	static const char *const names[] = { "off", "running", "paused", "shutting down", "crashed", "other" };
	return (unsigned)s < ARRAY_SIZE(names) ? names[s] : "unknown";
}
