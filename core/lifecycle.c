/* lifecycle: see lifecycle.h. */
#include "core/lifecycle.h"
#include "core/activity.h"

#include <errno.h>
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/backends.h"
#include "core/hooks.h"
#include "core/watch.h"
#include "store/db.h"
#include "model/config.h"
#include "model/fleetd.h"
#include "common/log.h"
#include "common/util.h"

/*
 * Automatic restarts of one agent within RESTART_WINDOW_S, for the rate
 * limit and the backoff, and the restart waiting out its backoff (timer).
 */
struct restarts {
	struct restarts *next;
	struct fleetd *f;
	char *agent;
	time_t times[RESTART_LIMIT];	/* monotonic s: a wall clock step must not move the window */
	int n;
	struct event *timer;	/* the pending restart; created on first use */
	bool pending;
	long delay_ms;		/* of the pending restart */
};

struct lifecycle {
	struct restarts *restarts;
	lifecycle_boot_failed_fn boot_failed;
};

static struct lifecycle *lc(struct fleetd *f)
{
	if (!f->lifecycle)
		f->lifecycle = xcalloc(1, sizeof(*f->lifecycle));
	return f->lifecycle;
}

void lifecycle_on_boot_failed(struct fleetd *f, lifecycle_boot_failed_fn fn)
{
	lc(f)->boot_failed = fn;
}

void lifecycle_shutdown(struct fleetd *f)
{
	if (!f->lifecycle)
		return;
	for (struct restarts *r = f->lifecycle->restarts, *next; r; r = next) {
		next = r->next;
		if (r->timer)
			event_free(r->timer);
		free(r->agent);
		free(r);
	}
	free(f->lifecycle);
	f->lifecycle = NULL;
}

int lifecycle_set_state(struct fleetd *f, const char *agent, enum agent_state st, const char *detail)
{
	int r = db_agent_set_state(f->db, agent, st, detail);

	if (r == 0) watch_publish(f, "agent.state", agent, json_pack("{s:s, s:s?}", "state", agent_state_to_string(st), "detail", detail));
	activity_note(f, agent);	/* started, stopped, restored...: an earlier health check says nothing now */
	if (r < 0 && r != -ENOENT)
		log_error("agent '%s': cannot record state %s: %s", agent, agent_state_to_string(st), strerror(-r));
	return r;
}

static void boot_failed(struct fleetd *f, const char *agent, const char *why)
{
	if (lc(f)->boot_failed)
		lc(f)->boot_failed(f, agent, why);
	else
		(void)lifecycle_set_state(f, agent, AGENT_BAD, NULL);
}

static void restarts_forget(struct fleetd *f, const char *agent);

/* --- create and remove ------------------------------------------------------------- */

/* Phase one: the row, as 'provisioning' (or 'defined' without a backend). */
static int create_record(struct fleetd *f, const struct backend_ops *ops, struct agent *a)
{
	int r;

	a->state = ops ? AGENT_PROVISIONING : AGENT_DEFINED;
	if ((r = db_agent_insert(f->db, a)) < 0) {
		if (r != -EEXIST)
			log_error("agent '%s': create failed: %s", a->name, strerror(-r));
		return r;
	}
	watch_publish(f, "agent.created", a->name, json_pack("{s:s, s:s}", "backend", backend_kind_to_string(a->backend), "state", agent_state_to_string(a->state)));
	return 0;
}

/* Phase two, after the backend's provision: the row 'stopped', or gone again when it failed (r < 0). */
static int create_finish(struct fleetd *f, const char *agent, int r)
{
	if (r < 0) {
		int r2 = db_agent_delete(f->db, agent);

		if (r2 < 0)
			log_error("agent '%s': cannot remove the record of the failed create: %s", agent, strerror(-r2));
		return r;
	}
	return lifecycle_set_state(f, agent, AGENT_STOPPED, NULL);
}

int lifecycle_create(struct fleetd *f, const struct backend_ops *ops, struct agent *a, char **why)
{
	int r;

	if ((r = create_record(f, ops, a)) < 0 || !ops)
		return r;
	if ((r = ops->provision(f, a, why)) < 0 && !*why)
		*why = xstrdup(strerror(-r));
	if ((r = create_finish(f, a->name, r)) == 0)
		a->state = AGENT_STOPPED;
	return r;
}

struct create_op {
	struct fleetd *f;
	char *agent;
	backend_done_fn done;
	void *userdata;
};

static void provisioned(void *userdata, int r, const char *why)
{
	struct create_op *op = userdata;

	r = create_finish(op->f, op->agent, r);
	op->done(op->userdata, r, r < 0 && !why ? strerror(-r) : why);
	free(op->agent);
	free(op);
}

int lifecycle_create_start(struct fleetd *f, const struct backend_ops *ops, struct agent *a, backend_done_fn done,
			   void *userdata, char **why)
{
	struct create_op *op;
	int r;

	if (!ops || !ops->provision_start)
		return lifecycle_create(f, ops, a, why);
	if ((r = create_record(f, ops, a)) < 0)
		return r;
	op = xcalloc(1, sizeof(*op));
	*op = (struct create_op){ f, xstrdup(a->name), done, userdata };
	if ((r = ops->provision_start(f, a, provisioned, op, why)) == 1)
		return 1;	/* under way: the row stays 'provisioning' until provisioned() */
	free(op->agent);
	free(op);
	if (r < 0 && !*why)
		*why = xstrdup(strerror(-r));
	if ((r = create_finish(f, a->name, r)) == 0)
		a->state = AGENT_STOPPED;
	return r;
}

int lifecycle_destroy(struct fleetd *f, const struct backend_ops *ops, const struct agent *a, bool force,
		      char **why)
{
	int r;

	if (ops && a->state != AGENT_DEFINED) {
		/* The intent first: a kill -9 from here on is finished at the next start. */
		if ((r = lifecycle_set_state(f, a->name, AGENT_REMOVING, NULL)) < 0)
			return r;
		r = ops->destroy(f, a, force, why);
		if (r < 0 && r != -ENOENT) {
			/* Refused (running, busy) or failed: the agent is what it was. */
			(void)lifecycle_set_state(f, a->name, a->state, a->state_detail);
			return r;
		}
	}
	restarts_forget(f, a->name);	/* gone: nothing to restart, and a new agent of its name starts afresh */
	if ((r = db_agent_delete(f->db, a->name)) < 0) {
		log_error("agent '%s': remove failed: %s", a->name, strerror(-r));
		return r;
	}
	hooks_changed(f);	/* its subscriptions went with it, and maybe routes */
	activity_forget(f, a->name);
	watch_publish(f, "agent.removed", a->name, NULL);
	return 0;
}

/* --- start and stop ---------------------------------------------------------------- */

struct verb {
	struct fleetd *f;
	char *agent;
	backend_done_fn done;
	void *userdata;
};

static struct verb *verb_new(struct fleetd *f, const char *agent, backend_done_fn done, void *userdata)
{
	struct verb *v = xcalloc(1, sizeof(*v));

	v->f = f;
	v->agent = xstrdup(agent);
	v->done = done;
	v->userdata = userdata;
	return v;
}

static void verb_free(struct verb *v)
{
	free(v->agent);
	free(v);
}

static void started(void *userdata, int r, const char *why)
{
	struct verb *v = userdata;

	if (r == 0)
		(void)lifecycle_set_state(v->f, v->agent, AGENT_RUNNING, NULL);
	if (v->done)
		v->done(v->userdata, r, why);
	/* After the caller's answer (a run marked failed first, as before): started, and it does not boot. */
	if (r == -ETIMEDOUT)
		boot_failed(v->f, v->agent, why);
	verb_free(v);
}

int lifecycle_start(struct fleetd *f, const struct backend_ops *ops, const struct agent *a, backend_done_fn done,
		    void *userdata, char **why)
{
	struct verb *v;
	int r;

	(void)lifecycle_cancel_restart(f, a->name);	/* started now: a pending restart has nothing left to do */
	v = verb_new(f, a->name, done, userdata);
	r = ops->start(f, a, started, v, why);

	if (r < 0)
		verb_free(v);
	return r;
}

static void stopped(void *userdata, int r, const char *why)
{
	struct verb *v = userdata;

	if (r == 0)
		(void)lifecycle_set_state(v->f, v->agent, AGENT_STOPPED, NULL);
	if (v->done)
		v->done(v->userdata, r, why);
	verb_free(v);
}

int lifecycle_stop(struct fleetd *f, const struct backend_ops *ops, const struct agent *a, int timeout_s,
		   backend_done_fn done, void *userdata, char **why)
{
	struct verb *v;
	int r;

	(void)lifecycle_cancel_restart(f, a->name);	/* asked to stop: it must stay stopped */
	v = verb_new(f, a->name, done, userdata);
	r = ops->stop(f, a, timeout_s, stopped, v, why);

	if (r < 0)
		verb_free(v);
	return r;
}

/* States the backend's view does not override: only a person (or a rollback) ends them. */
static bool state_sticky(enum agent_state st)
{
	return st == AGENT_DEFINED || st == AGENT_PROVISIONING || st == AGENT_BAD || st == AGENT_REMOVING ||
	       st == AGENT_MISSING;
}

void lifecycle_refresh(struct fleetd *f, const struct backend_ops *ops, struct agent *a)
{
	enum agent_state st;

	if (!ops || state_sticky(a->state) || ops->state(f, a, &st, NULL) < 0 || st == a->state)
		return;
	if (lifecycle_set_state(f, a->name, st, NULL) == 0)
		a->state = st;
}

/* --- restart policy ---------------------------------------------------------------- */

static void restarted(void *userdata, int r, const char *why)
{
	char *agent = userdata;

	if (r < 0)
		log_error("agent '%s': automatic restart failed: %s", agent, why ? why : strerror(-r));
	else
		log_notice("agent '%s': restarted and reachable again", agent);
	free(agent);
}

static struct restarts *restarts_find(struct fleetd *f, const char *agent)
{
	struct restarts *rs;

	for (rs = lc(f)->restarts; rs && strcmp(rs->agent, agent) != 0; rs = rs->next)
		;
	return rs;
}

/* Drop agent's restart history and any pending restart (the agent is removed). */
static void restarts_forget(struct fleetd *f, const char *agent)
{
	struct restarts **p, *rs;

	if (!f->lifecycle)
		return;
	for (p = &f->lifecycle->restarts; *p && strcmp((*p)->agent, agent) != 0; p = &(*p)->next)
		;
	if (!(rs = *p))
		return;
	*p = rs->next;
	if (rs->pending)
		log_notice("agent '%s': its pending automatic restart is cancelled", agent);
	if (rs->timer)
		event_free(rs->timer);
	free(rs->agent);
	free(rs);
}

/* Delay before automatic restart n (1-based) within the window: base * 2^(n-1), at most the cap. */
static long restart_delay_ms(struct fleetd *f, int n)
{
	long d = config_get_long(&f->cfg, CFG_RESTART_BACKOFF), cap = config_get_long(&f->cfg, CFG_RESTART_BACKOFF_MAX);

	for (int i = 1; i < n && d < cap; i++)
		d *= 2;
	return d < cap ? d : cap;
}

/* The backoff is over: restart, unless something else decided the agent's fate meanwhile. */
static void restart_due(evutil_socket_t fd, short what, void *arg)
{
	struct restarts *rs = arg;
	struct fleetd *f = rs->f;
	_cleanup_(agent_freep) struct agent *a = NULL;
	_cleanup_free_ char *why = NULL;
	const struct backend_ops *ops;
	const char *reason;
	char *agent;

	rs->pending = false;
	if (db_agent_get(f->db, rs->agent, &a) < 0)
		return;
	/* Bad agents were restarted before there was a backoff too; anything else is not ours to start. */
	if (a->state != AGENT_STOPPED && a->state != AGENT_BAD) {
		log_info("agent '%s': no automatic restart: it is %s now", a->name, agent_state_to_string(a->state));
		return;
	}
	if (!(ops = backend_get(f, a->backend, &reason))) {
		log_error("agent '%s': automatic restart failed: %s", a->name, reason);
		return;
	}
	agent = xstrdup(a->name);
	if (lifecycle_start(f, ops, a, restarted, agent, &why) < 0) {
		log_error("agent '%s': automatic restart failed: %s", a->name, why ? why : "unknown error");
		free(agent);
	}
}

/*
 * Restart an environment that stopped without fleet asking, within the rate
 * limit, after a backoff that doubles with each restart in the window, so a
 * crash loop does not hammer the host; the operator's start, stop or remove
 * meanwhile cancels it (lifecycle_cancel_restart).
 */
static void restart_after_failure(struct fleetd *f, const struct backend_ops *ops, const struct agent *a)
{
	struct restarts *rs = restarts_find(f, a->name);
	struct timeval tv;
	time_t now = (time_t)(now_usec() / 1000000);
	_cleanup_free_ char *detail = NULL;
	int recent = 0;

	if (!rs) {
		rs = xcalloc(1, sizeof(*rs));
		rs->f = f;
		rs->agent = xstrdup(a->name);
		rs->next = lc(f)->restarts;
		lc(f)->restarts = rs;
	}
	if (rs->pending)
		return;		/* the same stop reported twice: one restart is on its way */
	for (int i = 0; i < rs->n; i++)
		if (now - rs->times[i] < RESTART_WINDOW_S)
			rs->times[recent++] = rs->times[i];
	rs->n = recent;
	if (recent >= RESTART_LIMIT) {
		log_error("agent '%s': stopped %d times in %d s; not restarting it again (state bad)", a->name,
			  recent, RESTART_WINDOW_S);
		(void)lifecycle_set_state(f, a->name, AGENT_BAD, NULL);
		return;
	}
	rs->times[rs->n++] = now;
	rs->delay_ms = restart_delay_ms(f, rs->n);
	log_warning("agent '%s': restarting its %s in %ld ms (restart %d of at most %d in %d s)", a->name,
		    ops->env_word, rs->delay_ms, rs->n, RESTART_LIMIT, RESTART_WINDOW_S);
	if (!rs->timer)
		rs->timer = evtimer_new(f->base, restart_due, rs);
	tv.tv_sec = rs->delay_ms / 1000;
	tv.tv_usec = (rs->delay_ms % 1000) * 1000;
	evtimer_add(rs->timer, &tv);
	rs->pending = true;
	if (a->state != AGENT_BAD) {
		/* What `fleetctl show` says while it waits. */
		detail = xasprintf("stopped without fleet asking; automatic restart %d of at most %d in %d s "
				   "in %ld ms", rs->n, RESTART_LIMIT, RESTART_WINDOW_S, rs->delay_ms);
		(void)lifecycle_set_state(f, a->name, AGENT_STOPPED, detail);
	}
}

bool lifecycle_cancel_restart(struct fleetd *f, const char *agent)
{
	struct restarts *rs = f->lifecycle ? restarts_find(f, agent) : NULL;
	_cleanup_(agent_freep) struct agent *a = NULL;

	if (!rs || !rs->pending)
		return false;
	evtimer_del(rs->timer);
	rs->pending = false;
	log_notice("agent '%s': its pending automatic restart is cancelled", agent);
	/* It no longer waits for one: take that off its state. */
	if (db_agent_get(f->db, agent, &a) == 0 && a->state == AGENT_STOPPED && a->state_detail)
		(void)lifecycle_set_state(f, agent, AGENT_STOPPED, NULL);
	return true;
}

bool lifecycle_restart_pending(struct fleetd *f, const char *agent, long *delay_ms)
{
	struct restarts *rs = f->lifecycle ? restarts_find(f, agent) : NULL;

	if (!rs || !rs->pending)
		return false;
	if (delay_ms)
		*delay_ms = rs->delay_ms;
	return true;
}

/* --- what backends report ---------------------------------------------------------- */

/* Re-read the state of every agent of one backend (or all: kind < 0); gone ones turn missing. */
static void resync(struct fleetd *f, int kind, bool at_start);

void lifecycle_on_event(struct fleetd *f, const struct backend_event *ev)
{
	_cleanup_(agent_freep) struct agent *a = NULL;
	const struct backend_ops *ops;
	const char *why;

	if (ev->kind == BACKEND_EV_RESYNC) {
		resync(f, (int)ev->backend, false);
		return;
	}
	if (!ev->agent || db_agent_get(f->db, ev->agent, &a) < 0 || a->backend != ev->backend ||
	    a->state == AGENT_PROVISIONING || a->state == AGENT_REMOVING)
		return;	/* not ours, or a create or remove of ours that is under way */
	ops = backend_get(f, a->backend, &why);
	switch (ev->kind) {
	case BACKEND_EV_STARTED:
		(void)lifecycle_cancel_restart(f, a->name);	/* started outside fleet: nothing left to restart */
		if (a->state != AGENT_BAD)
			(void)lifecycle_set_state(f, a->name, AGENT_RUNNING, NULL);
		break;
	case BACKEND_EV_STOPPED:
		if (a->state != AGENT_BAD)
			(void)lifecycle_set_state(f, a->name, AGENT_STOPPED, NULL);
		if (ev->asked)
			break;
		log_warning("agent '%s': its environment stopped without fleet asking (%s)", a->name,
			    ev->detail ? ev->detail : ev->clean ? "it shut itself down" : "it failed");
		if (ops && (a->restart == RESTART_ALWAYS || (a->restart == RESTART_ON_FAILURE && !ev->clean)))
			restart_after_failure(f, ops, a);
		break;
	case BACKEND_EV_GONE: {
		_cleanup_free_ char *detail = xasprintf("removed outside fleet%s%s", ev->detail ? ": " : "",
							ev->detail ? ev->detail : "");
		log_error("agent '%s': its environment was %s (state missing)", a->name, detail);
		(void)lifecycle_set_state(f, a->name, AGENT_MISSING, detail);
		break;
	}
	default:
		break;
	}
}

/* --- reconcile --------------------------------------------------------------------- */

static void reconcile_provisioning(struct fleetd *f, const struct backend_ops *ops, const struct agent *a)
{
	_cleanup_free_ char *msg = NULL;
	int r = ops->destroy(f, a, true, &msg);

	if (r < 0 && r != -ENOENT) {
		log_error("agent '%s': provisioning was interrupted; cleanup failed: %s", a->name,
			  msg ? msg : strerror(-r));
		return;
	}
	if ((r = db_agent_delete(f->db, a->name)) < 0)
		log_error("agent '%s': cannot remove the unfinished record: %s", a->name, strerror(-r));
	else
		log_warning("agent '%s': provisioning was interrupted (fleetd stopped); removed what was "
			    "created, the create was never acknowledged", a->name);
}

static void reconcile_removing(struct fleetd *f, const struct backend_ops *ops, const struct agent *a)
{
	_cleanup_free_ char *msg = NULL;
	int r = ops->destroy(f, a, true, &msg);

	if (r < 0 && r != -ENOENT) {
		log_error("agent '%s': a remove was interrupted; finishing it failed: %s (left in state removing;"
			  " 'fleetctl rm --force' tries again)", a->name, msg ? msg : strerror(-r));
		return;
	}
	if ((r = db_agent_delete(f->db, a->name)) < 0)
		log_error("agent '%s': cannot remove the record: %s", a->name, strerror(-r));
	else
		log_warning("agent '%s': a remove was interrupted (fleetd stopped); finished it", a->name);
}

static void resync(struct fleetd *f, int kind, bool at_start)
{
	struct agent **list = NULL;
	size_t n = 0;
	int r;

	if ((r = db_agent_list(f->db, &list, &n)) < 0) {
		log_error("reconcile: cannot list agents: %s", strerror(-r));
		return;
	}
	for (size_t i = 0; i < n; i++) {
		struct agent *a = list[i];
		const struct backend_ops *ops;
		_cleanup_free_ char *gone = NULL;
		enum agent_state st;
		const char *why;

		if ((kind >= 0 && (int)a->backend != kind) || a->state == AGENT_DEFINED)
			continue;
		if (!(ops = backend_get(f, a->backend, &why))) {
			if (at_start && (a->state == AGENT_PROVISIONING || a->state == AGENT_REMOVING))
				log_error("agent '%s': its %s was interrupted and the %s backend is unavailable (%s); "
					  "left in state %s", a->name,
					  a->state == AGENT_PROVISIONING ? "create" : "remove",
					  backend_kind_to_string(a->backend), why, agent_state_to_string(a->state));
			continue;
		}
		if (a->state == AGENT_PROVISIONING) {
			if (at_start)
				reconcile_provisioning(f, ops, a);
			continue;
		}
		if (a->state == AGENT_REMOVING) {
			if (at_start)
				reconcile_removing(f, ops, a);
			continue;
		}
		r = ops->state(f, a, &st, &gone);
		if (r == -ENOENT) {
			if (a->state == AGENT_MISSING)
				continue;
			if (!gone)
				gone = xstrdup("its environment is gone");
			log_error("drift: agent '%s': %s (state missing; 'fleetctl rm' removes the record)", a->name,
				  gone);
			(void)lifecycle_set_state(f, a->name, AGENT_MISSING, gone);
		} else if (r == 0 && st != a->state && !state_sticky(a->state)) {
			log_info("agent '%s': the %s backend says %s (fleetd had %s)", a->name,
				 backend_kind_to_string(a->backend), agent_state_to_string(st),
				 agent_state_to_string(a->state));
			(void)lifecycle_set_state(f, a->name, st, NULL);
		} else if (r == 0 && a->state == AGENT_MISSING) {
			/* Put back by hand: it is an environment again. */
			log_notice("agent '%s': its environment is back (%s)", a->name, agent_state_to_string(st));
			(void)lifecycle_set_state(f, a->name, st, NULL);
		}
	}
	agent_list_free(list);
}

void lifecycle_reconcile(struct fleetd *f)
{
	resync(f, -1, true);
}
