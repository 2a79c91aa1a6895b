/*
 * backend_fake: see backend_fake.h. A test double for core/'s unit tests
 * only; fleetd never links it.
 */
#include "tests/fakes/backend_fake.h"

#include <errno.h>
#include <event2/event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "model/fleetd.h"
#include "common/util.h"

#define NAME_MAX_ 72		/* agent and snapshot names (names.h: 32 and 64) */
#define ENVS 32
#define SNAPS 32
#define WHY_MAX 160
#define EXEC_MAX 512

/* --- the host, shared across fork() -------------------------------------------------- */

struct fake_snap {
	bool used;
	char name[NAME_MAX_];
	int exit_code;		/* the environment's "files" when it was taken */
	enum agent_state state;	/* and whether it ran (a restore brings that back, as a VM's full snapshot) */
};

struct fake_env {
	bool used;
	char name[NAME_MAX_];
	enum agent_state state;
	int exit_code;
	char last_exec[EXEC_MAX];
	char last_stdin[EXEC_MAX * 4];	/* truncated */
	char last_env[EXEC_MAX];	/* NAME=VALUE lines */
	int last_timeout;
	struct fake_snap snaps[SNAPS];
};

struct fake_switch {
	enum fake_mode mode;
	int err;
	char why[WHY_MAX];
};

struct fake_host {
	struct fake_env envs[ENVS];
	struct fake_switch sw[FAKE_VERB__COUNT];
	int calls[FAKE_VERB__COUNT];
	int events;
};

static struct fake_host *host;

static struct fake_host *H(void)
{
	if (!host) {
		host = mmap(NULL, sizeof(*host), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		if (host == MAP_FAILED)
			abort();
		memset(host, 0, sizeof(*host));
	}
	return host;
}

void fake_reset(void)
{
	memset(H(), 0, sizeof(*host));
}

void fake_set(enum fake_verb verb, enum fake_mode mode, int err, const char *why)
{
	struct fake_switch *s = &H()->sw[verb];

	s->mode = mode;
	s->err = err;
	snprintf(s->why, sizeof(s->why), "%s", why ? why : "");
}

int fake_calls(enum fake_verb verb)
{
	return H()->calls[verb];
}

int fake_events(void)
{
	return H()->events;
}

static struct fake_env *env_find(const char *agent)
{
	for (int i = 0; i < ENVS; i++)
		if (H()->envs[i].used && strcmp(H()->envs[i].name, agent) == 0)
			return &H()->envs[i];
	return NULL;
}

static struct fake_snap *snap_find(struct fake_env *e, const char *snap)
{
	for (int i = 0; e && i < SNAPS; i++)
		if (e->snaps[i].used && strcmp(e->snaps[i].name, snap) == 0)
			return &e->snaps[i];
	return NULL;
}

int fake_env_state(const char *agent, enum agent_state *ret)
{
	struct fake_env *e = env_find(agent);

	if (!e)
		return -ENOENT;
	*ret = e->state;
	return 0;
}

void fake_env_set_exit(const char *agent, int exit_code)
{
	struct fake_env *e = env_find(agent);

	if (e)
		e->exit_code = exit_code;
}

int fake_env_exit(const char *agent)
{
	struct fake_env *e = env_find(agent);

	return e ? e->exit_code : -1;
}

const char *fake_env_last_exec(const char *agent)
{
	struct fake_env *e = env_find(agent);

	return e ? e->last_exec : "";
}

const char *fake_env_last_stdin(const char *agent)
{
	struct fake_env *e = env_find(agent);

	return e ? e->last_stdin : "";
}

const char *fake_env_last_env(const char *agent)
{
	struct fake_env *e = env_find(agent);

	return e ? e->last_env : "";
}

int fake_env_last_timeout(const char *agent)
{
	struct fake_env *e = env_find(agent);

	return e ? e->last_timeout : -1;
}

bool fake_snapshot_has(const char *agent, const char *snap)
{
	return snap_find(env_find(agent), snap) != NULL;
}

/* --- this process's side: the loop, on_event, calls in flight ---------------------- */

static struct fleetd *fleetd;
static backend_event_fn on_event;

/* An asynchronous call that has not reported yet. */
struct pending {
	struct pending *next;
	enum fake_verb verb;
	char agent[NAME_MAX_], snap[NAME_MAX_];
	int r;			/* what it reports */
	char why[WHY_MAX];
	bool hung, cancelled, crash, timed_out;
	struct event *ev;	/* scheduled report; NULL while hung */
	backend_done_fn done;
	backend_snapshot_fn snap_done;
	struct exec_callbacks cb;
	void *userdata;
};

struct exec_handle {
	struct pending p;	/* an exec's handle is its pending call */
};

static struct pending *pendings;

int fake_hung(enum fake_verb verb)
{
	int n = 0;

	for (struct pending *p = pendings; p; p = p->next)
		n += p->verb == verb && p->hung;
	return n;
}

static bool exec_in_flight(const char *agent)
{
	for (struct pending *p = pendings; p; p = p->next)
		if (p->verb == FAKE_EXEC && strcmp(p->agent, agent) == 0)
			return true;
	return false;
}

static void unlink_pending(struct pending *p)
{
	for (struct pending **pp = &pendings; *pp; pp = &(*pp)->next)
		if (*pp == p) {
			*pp = p->next;
			return;
		}
}

static void report_event(enum backend_event_kind kind, const char *agent, bool asked, bool clean)
{
	struct backend_event ev = { .kind = kind, .backend = FAKE_KIND, .agent = agent, .asked = asked,
				    .clean = clean, .detail = "fake event" };

	H()->events++;
	if (on_event)
		on_event(fleetd, &ev);
}

void fake_event(enum backend_event_kind kind, const char *agent, bool asked, bool clean)
{
	struct fake_env *e = agent ? env_find(agent) : NULL;

	if (e && kind == BACKEND_EV_STOPPED)
		e->state = AGENT_STOPPED;
	else if (e && kind == BACKEND_EV_STARTED)
		e->state = AGENT_RUNNING;
	else if (e && kind == BACKEND_EV_GONE)
		memset(e, 0, sizeof(*e));
	report_event(kind, agent, asked, clean);
}

/* The verb's work, done when it succeeds (at once for FAKE_DIE_AFTER). */
static void apply(struct pending *p)
{
	struct fake_env *e = env_find(p->agent);
	struct fake_snap *s;

	if (!e)
		return;
	switch (p->verb) {
	case FAKE_START:
		e->state = AGENT_RUNNING;
		break;
	case FAKE_STOP:
		e->state = AGENT_STOPPED;
		break;
	case FAKE_SNAPSHOT_CREATE:
		for (int i = 0; i < SNAPS; i++)
			if (!e->snaps[i].used) {
				e->snaps[i].used = true;
				snprintf(e->snaps[i].name, sizeof(e->snaps[i].name), "%s", p->snap);
				e->snaps[i].exit_code = e->exit_code;
				e->snaps[i].state = e->state;
				break;
			}
		break;
	case FAKE_SNAPSHOT_RESTORE:
		if ((s = snap_find(e, p->snap))) {
			e->exit_code = s->exit_code;
			e->state = s->state;
		}
		break;
	default:
		break;
	}
}

static void crash_later(evutil_socket_t fd, short what, void *arg)
{
	char *agent = arg;

	fake_event(BACKEND_EV_STOPPED, agent, false, false);
	free(agent);
}

/* Report p (its work first if it succeeded) and free it. */
static void complete(struct pending *p)
{
	struct fake_env *e;

	unlink_pending(p);
	if (p->ev)
		event_free(p->ev);
	if (p->r == 0 && !p->cancelled)
		apply(p);
	switch (p->verb) {
	case FAKE_START:
	case FAKE_STOP:
	case FAKE_SNAPSHOT_RESTORE:
		p->done(p->userdata, p->r, p->r < 0 ? p->why : NULL);
		if (p->verb == FAKE_START && p->r == 0 && p->crash)
			/* Up, then down again at once: after start's answer, as a real crash would be. */
			(void)event_base_once(fleetd->base, -1, EV_TIMEOUT, crash_later, xstrdup(p->agent),
					      &(struct timeval){ 0, 0 });
		break;
	case FAKE_SNAPSHOT_CREATE: {
		struct snapshot_result res = { .error = p->r, .why = p->r < 0 ? p->why : NULL, .kind = SNAPSHOT_KIND_DIR,
					       .size_bytes = 4096 };
		p->snap_done(p->userdata, &res);
		break;
	}
	case FAKE_EXEC: {
		struct exec_result res = { .error = p->r, .why = p->r < 0 ? p->why : NULL };
		char out[64];

		e = env_find(p->agent);
		if (p->timed_out) {
			res.error = 0;
			res.signal = SIGKILL;
			res.timed_out = true;
		} else if (p->cancelled) {
			res.error = 0;
			res.signal = SIGKILL;
		} else if (p->r == 0) {
			res.exit_code = e ? e->exit_code : 127;
			snprintf(out, sizeof(out), "fake: exit %d\n", res.exit_code);
			p->cb.output(p->cb.userdata, EXEC_STDOUT, out, strlen(out));
		}
		p->cb.done(p->cb.userdata, &res);
		break;
	}
	default:
		break;
	}
	free(p);
}

static void fire(evutil_socket_t fd, short what, void *arg)
{
	complete(arg);
}

static const struct timeval zero = { 0, 0 };

static void schedule(struct pending *p)
{
	p->hung = false;
	p->ev = evtimer_new(fleetd->base, fire, p);
	evtimer_add(p->ev, &zero);
}

int fake_release(enum fake_verb verb, int r)
{
	int n = 0;

	for (;;) {
		struct pending *oldest = NULL;

		for (struct pending *p = pendings; p; p = p->next)
			if (p->verb == verb && p->hung)
				oldest = p;	/* newest are first in the list */
		if (!oldest)
			return n;
		oldest->r = r;
		snprintf(oldest->why, sizeof(oldest->why), "%s", r < 0 ? strerror(-r) : "");
		complete(oldest);
		n++;
	}
}

/* --- the verbs --------------------------------------------------------------------- */

/* Refuse with r; msg (malloc'd) becomes *why. */
static int refuse(int r, char **why, char *msg)
{
	if (why)
		*why = msg;
	else
		free(msg);
	return r;
}

/*
 * The switch of verb, counted: 0 to go on, or the errno of FAKE_FAIL (with
 * *why). Kills the process for FAKE_DIE_BEFORE.
 */
static int enter(enum fake_verb verb, char **why)
{
	struct fake_switch *s = &H()->sw[verb];

	H()->calls[verb]++;
	if (s->mode == FAKE_DIE_BEFORE)
		raise(SIGKILL);
	if (s->mode == FAKE_FAIL) {
		if (why)
			*why = xstrdup(*s->why ? s->why : strerror(-s->err));
		return s->err;
	}
	return 0;
}

static void maybe_die_after(enum fake_verb verb)
{
	if (H()->sw[verb].mode == FAKE_DIE_AFTER)
		raise(SIGKILL);
}

/* An asynchronous call accepted: it reports on the loop, or hangs, as its switch says. */
static struct pending *accept_call(enum fake_verb verb, const char *agent, const char *snap, size_t size)
{
	struct fake_switch *s = &H()->sw[verb];
	struct pending *p = xcalloc(1, size);

	p->verb = verb;
	snprintf(p->agent, sizeof(p->agent), "%s", agent);
	snprintf(p->snap, sizeof(p->snap), "%s", snap ? snap : "");
	if (s->mode == FAKE_FAIL_LATER) {
		p->r = s->err;
		snprintf(p->why, sizeof(p->why), "%s", *s->why ? s->why : strerror(-s->err));
	}
	p->crash = verb == FAKE_START && s->mode == FAKE_CRASH;
	p->next = pendings;
	pendings = p;
	return p;
}

/* After the caller's pointers are in p: report later, hang, or die having done the work. */
static void launch(struct pending *p)
{
	enum fake_mode mode = H()->sw[p->verb].mode;

	if (mode == FAKE_DIE_AFTER) {
		apply(p);
		raise(SIGKILL);
	}
	if (mode == FAKE_HANG)
		p->hung = true;
	else
		schedule(p);
}

static int fake_init(struct fleetd *f, const struct backend_host *bh, char **why)
{
	fleetd = f;
	on_event = bh ? bh->on_event : NULL;
	return 0;
}

static void fake_shutdown(struct fleetd *f)
{
	/* What is still in flight is dropped without a report: the test is over. */
	while (pendings) {
		struct pending *p = pendings;

		pendings = p->next;
		if (p->ev)
			event_free(p->ev);
		free(p);
	}
	fleetd = NULL;
	on_event = NULL;
}

static int fake_provision(struct fleetd *f, const struct agent *a, char **why)
{
	int r;

	if ((r = enter(FAKE_PROVISION, why)) < 0)
		return r;
	if (env_find(a->name))
		return refuse(-EEXIST, why, xasprintf("fake: environment '%s' exists", a->name));
	for (int i = 0; i < ENVS; i++) {
		struct fake_env *e = &H()->envs[i];

		if (e->used)
			continue;
		memset(e, 0, sizeof(*e));
		e->used = true;
		snprintf(e->name, sizeof(e->name), "%s", a->name);
		e->state = AGENT_STOPPED;
		maybe_die_after(FAKE_PROVISION);
		return 0;
	}
	return refuse(-ENOSPC, why, xasprintf("fake: no room for '%s'", a->name));
}

static int fake_destroy(struct fleetd *f, const struct agent *a, bool force, char **why)
{
	struct fake_env *e;
	int r;

	if ((r = enter(FAKE_DESTROY, why)) < 0)
		return r;
	if (!(e = env_find(a->name)))
		return refuse(-ENOENT, why, xasprintf("fake: no environment '%s'", a->name));
	if (e->state == AGENT_RUNNING && !force)
		return refuse(-EBUSY, why, xasprintf("fake: '%s' is running", a->name));
	memset(e, 0, sizeof(*e));
	maybe_die_after(FAKE_DESTROY);
	return 0;
}

static int fake_start(struct fleetd *f, const struct agent *a, backend_done_fn done, void *userdata, char **why)
{
	struct pending *p;
	int r;

	if ((r = enter(FAKE_START, why)) < 0)
		return r;
	if (!env_find(a->name))
		return refuse(-ENOENT, why, xasprintf("fake: no environment '%s'", a->name));
	p = accept_call(FAKE_START, a->name, NULL, sizeof(*p));
	p->done = done;
	p->userdata = userdata;
	launch(p);
	return 0;
}

static int fake_stop(struct fleetd *f, const struct agent *a, int timeout_s, backend_done_fn done, void *userdata,
		     char **why)
{
	struct pending *p;
	int r;

	if ((r = enter(FAKE_STOP, why)) < 0)
		return r;
	if (!env_find(a->name))
		return refuse(-ENOENT, why, xasprintf("fake: no environment '%s'", a->name));
	p = accept_call(FAKE_STOP, a->name, NULL, sizeof(*p));
	p->done = done;
	p->userdata = userdata;
	launch(p);
	return 0;
}

static int fake_state(struct fleetd *f, const struct agent *a, enum agent_state *ret, char **why)
{
	int r;

	if ((r = enter(FAKE_STATE, why)) < 0)
		return r;
	if ((r = fake_env_state(a->name, ret)) < 0)
		return refuse(r, why, xasprintf("fake: the environment of '%s' is gone", a->name));
	return 0;
}

static int fake_exec(struct fleetd *f, const struct agent *a, const struct exec_request *req,
		     const struct exec_callbacks *cb, struct exec_handle **ret, char **why)
{
	struct fake_env *e;
	struct exec_handle *h;
	size_t len = 0;
	int r;

	if ((r = enter(FAKE_EXEC, why)) < 0)
		return r;
	if (!(e = env_find(a->name)))
		return refuse(-ENOENT, why, xasprintf("fake: no environment '%s'", a->name));
	if (e->state != AGENT_RUNNING)
		return refuse(-ENOTCONN, why, xasprintf("fake: '%s' is not running", a->name));
	e->last_exec[0] = '\0';
	for (int i = 0; req->argv[i]; i++)
		len += (size_t)snprintf(e->last_exec + len, len < EXEC_MAX ? EXEC_MAX - len : 0, "%s%s", i ? " " : "",
					req->argv[i]);
	if (req->env) {	/* a run's exec (a health check's has no environment) */
		len = 0;
		e->last_env[0] = '\0';
		for (int i = 0; req->env[i]; i++)
			len += (size_t)snprintf(e->last_env + len, len < EXEC_MAX ? EXEC_MAX - len : 0, "%s\n",
						req->env[i]);
		snprintf(e->last_stdin, sizeof(e->last_stdin), "%.*s", (int)req->stdin_len,
			 req->stdin_data ? req->stdin_data : "");
		e->last_timeout = req->timeout_s;
	}
	h = (struct exec_handle *)accept_call(FAKE_EXEC, a->name, NULL, sizeof(*h));
	h->p.cb = *cb;
	*ret = h;
	launch(&h->p);
	return 0;
}

static void fake_exec_cancel(struct exec_handle *h)
{
	h->p.cancelled = true;
	if (h->p.hung)
		schedule(&h->p);	/* killed: it reports, on the loop */
}

int fake_exec_time_out(void)
{
	int n = 0;

	for (struct pending *p = pendings; p; p = p->next)
		if (p->verb == FAKE_EXEC && p->hung) {
			p->timed_out = true;	/* as a backend's timer: killed, reported on the loop */
			schedule(p);
			n++;
		}
	return n;
}

static void fake_exec_pause(struct exec_handle *h, bool paused)
{
	/* One line of output, all at the end: nothing to hold back. */
}

static int fake_snapshot_create(struct fleetd *f, const struct agent *a, const char *snap,
				backend_snapshot_fn done, void *userdata, char **why)
{
	struct fake_env *e;
	struct pending *p;
	int r;

	if ((r = enter(FAKE_SNAPSHOT_CREATE, why)) < 0)
		return r;
	if (!(e = env_find(a->name)))
		return refuse(-ENOENT, why, xasprintf("fake: no environment '%s'", a->name));
	if (exec_in_flight(a->name))
		return refuse(-EBUSY, why, xasprintf("fake: a command of '%s' is running", a->name));
	if (snap_find(e, snap))
		return refuse(-EEXIST, why, xasprintf("fake: '%s' has that snapshot already", a->name));
	p = accept_call(FAKE_SNAPSHOT_CREATE, a->name, snap, sizeof(*p));
	p->snap_done = done;
	p->userdata = userdata;
	launch(p);
	return 0;
}

static int fake_snapshot_restore(struct fleetd *f, const struct agent *a, const char *snap,
				 backend_done_fn done, void *userdata, char **why)
{
	struct fake_env *e;
	struct pending *p;
	int r;

	if ((r = enter(FAKE_SNAPSHOT_RESTORE, why)) < 0)
		return r;
	if (!snap_find((e = env_find(a->name)), snap))
		return refuse(-ENOENT, why, xasprintf("fake: '%s' has no such snapshot", a->name));
	if (exec_in_flight(a->name))
		return refuse(-EBUSY, why, xasprintf("fake: a command of '%s' is running", a->name));
	p = accept_call(FAKE_SNAPSHOT_RESTORE, a->name, snap, sizeof(*p));
	p->done = done;
	p->userdata = userdata;
	launch(p);
	return 0;
}

static int fake_snapshot_delete(struct fleetd *f, const struct agent *a, const char *snap, char **why)
{
	struct fake_snap *s;
	int r;

	if ((r = enter(FAKE_SNAPSHOT_DELETE, why)) < 0)
		return r;
	if (!(s = snap_find(env_find(a->name), snap)))
		return refuse(-ENOENT, why, xasprintf("fake: '%s' has no such snapshot", a->name));
	memset(s, 0, sizeof(*s));
	maybe_die_after(FAKE_SNAPSHOT_DELETE);
	return 0;
}

static int fake_snapshot_exists(struct fleetd *f, const struct agent *a, const char *snap)
{
	int r;

	if ((r = enter(FAKE_SNAPSHOT_EXISTS, NULL)) < 0)
		return r;
	return snap_find(env_find(a->name), snap) ? 1 : 0;
}

static const char *const fake_health[] = { "fake-health", NULL };

static const struct backend_ops fake_backend_ops = {
	.name = "fake",
	.env_word = "fake environment",
	.health_default = fake_health,
	.has_network = false,
	.init = fake_init,
	.shutdown = fake_shutdown,
	.provision = fake_provision,
	.destroy = fake_destroy,
	.start = fake_start,
	.stop = fake_stop,
	.state = fake_state,
	.exec = fake_exec,
	.console = NULL,
	.snapshot_create = fake_snapshot_create,
	.snapshot_restore = fake_snapshot_restore,
	.snapshot_delete = fake_snapshot_delete,
	.snapshot_exists = fake_snapshot_exists,
	.exec_cancel = fake_exec_cancel,
	.exec_pause = fake_exec_pause,
};

const struct backend_ops *const fake_backends[BACKEND__COUNT] = {
	[FAKE_KIND] = &fake_backend_ops,
};
