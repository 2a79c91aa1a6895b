/* health: see health.h. */
#include "core/health.h"

#include <errno.h>
#include <event2/event.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "core/activity.h"
#include "core/backends.h"
#include "store/db.h"
#include "model/fleetd.h"
#include "core/lifecycle.h"
#include "core/metrics.h"
#include "core/redaction.h"
#include "common/log.h"
#include "core/snapshots.h"
#include "core/watch.h"
#include "common/util.h"

#define TICK_S 2
#define DETAIL_MAX 300

struct tracked {
	char *name;
	time_t next_due;
	bool in_flight;		/* a periodic check or a rollback */
	int checks;		/* checks of any origin running now */
	/* The last check that passed with nothing else going on (health_recent_pass()). */
	bool passed;
	uint64_t passed_seq;	/* activity_seq() during that check */
	long long passed_usec;	/* when it ended (now_usec()) */
	struct periodic *periodic;	/* the periodic check's, until its done: freed here if fleetd stops first */
	struct tracked *next;
};

struct health {
	struct fleetd *f;
	struct event *tick;
	struct tracked *agents;
	struct check *checks;	/* in flight */
	bool closing;		/* fleetd is stopping: checks end without a verdict */
};

/* One check in flight. */
struct check {
	struct fleetd *f;
	char *agent;
	char output[DETAIL_MAX];	/* stdout; a failed start's reason */
	size_t len;
	char errout[DETAIL_MAX];	/* stderr */
	size_t err_len;
	struct event *timer;
	struct exec_handle *exec;
	const struct backend_ops *ops;
	bool reported;		/* done() was called (by the timer); the exec's done only frees */
	bool exec_done;
	health_done_fn done;
	void *userdata;
	uint64_t seq;		/* activity_seq() when it began */
	bool quiet;		/* no exec of fleet's ran in the environment when it began */
	long long t_begin;	/* now_usec() when it began */
	struct check *prev, *next;	/* in struct health's checks */
};

static struct health *state(struct fleetd *f)
{
	return f->health;
}

static struct tracked *tracked_get(struct health *h, const char *name)
{
	struct tracked *t;

	for (t = h->agents; t; t = t->next)
		if (strcmp(t->name, name) == 0)
			return t;
	t = xcalloc(1, sizeof(*t));
	t->name = xstrdup(name);
	t->next = h->agents;
	h->agents = t;
	return t;
}

static void check_free(struct check *c)
{
	struct health *h = state(c->f);
	struct tracked *t = tracked_get(h, c->agent);

	if (c->prev)
		c->prev->next = c->next;
	else
		h->checks = c->next;
	if (c->next)
		c->next->prev = c->prev;
	if (t->checks > 0)
		t->checks--;
	if (c->timer)
		event_free(c->timer);
	free(c->agent);
	free(c);
}

/*
 * Report once: tell the caller, then record the result. In that order so a
 * snapshot waiting for the verdict starts its checkpoint without waiting for
 * this commit (an fsync); whatever the caller answers over the API is
 * written out by the loop after this returns, so it still follows the
 * record.
 */
static void check_report(struct check *c, int healthy, const char *detail)
{
	struct tracked *t;
	int r;

	c->reported = true;
	t = tracked_get(state(c->f), c->agent);
	/* Only a pass on an environment nothing else touched meanwhile may stand for a later snapshot's check. */
	t->passed = healthy == 1 && c->quiet && activity_running(c->f, c->agent) == 0 &&
		    activity_seq(c->f, c->agent) == c->seq;
	t->passed_seq = c->seq;
	t->passed_usec = now_usec();
	metrics_observe(c->f, M_HEALTH_DURATION, (const char *[]){ c->ops->name, healthy == 1 ? "healthy" : "unhealthy" },
			(now_usec() - c->t_begin) / 1e6);
	watch_publish(c->f, "health", c->agent, json_pack("{s:b, s:s?}", "healthy", healthy == 1, "detail", detail));
	if (!healthy)
		log_warning("agent '%s': health check failed: %s", c->agent, detail);
	else
		log_debug("agent '%s': healthy", c->agent);
	c->done(c->userdata, healthy, detail);
	if ((r = db_agent_set_health(c->f->db, c->agent, healthy, detail)) < 0 && r != -ENOENT)
		log_error("agent '%s': cannot record its health: %s", c->agent, strerror(-r));
}

static void check_output(void *userdata, enum exec_stream stream, const char *data, size_t len)
{
	struct check *c = userdata;
	char *buf = stream == EXEC_STDERR ? c->errout : c->output;
	size_t *used = stream == EXEC_STDERR ? &c->err_len : &c->len;
	size_t room = DETAIL_MAX - 1 - *used;

	if (len > room)
		len = room;
	memcpy(buf + *used, data, len);
	*used += len;
	buf[*used] = '\0';
}

/* The first non-blank line of buf, cut in place (buf is the check's, NUL-terminated). */
static const char *first_line(char *buf)
{
	char *line = buf + strspn(buf, "\r\n \t");

	line[strcspn(line, "\r\n")] = '\0';
	return line;
}

static void check_exec_done(void *userdata, const struct exec_result *res)
{
	struct check *c = userdata;
	char detail[2 * DETAIL_MAX + 96], printed[2 * DETAIL_MAX + 16];
	_cleanup_free_ char *out_red = NULL, *err_red = NULL;
	const char *out, *err;

	c->exec_done = true;
	/*
	 * fleetd is stopping and the backend's shutdown ended the exec (it
	 * killed the check): no verdict, nothing recorded, and no caller told;
	 * their state is going down too.
	 */
	if (c->reported || state(c->f)->closing) {
		check_free(c);
		return;
	}
	/*
	 * What the check printed, in a line: the first line of its stdout (its
	 * verdict, as agentd health prints it) and of its stderr.
	 */
	/* Its output is the agent's: its secrets go before anything keeps or logs it. */
	out_red = redaction_text(c->f, c->agent, c->output, c->len >= DETAIL_MAX - 1);
	err_red = redaction_text(c->f, c->agent, c->errout, c->err_len >= DETAIL_MAX - 1);
	out = first_line(out_red);
	err = first_line(err_red);
	snprintf(printed, sizeof(printed), "%s%s%s%s", out, *out && *err ? "; " : "", *err && *out ? "stderr: " : "", err);
	if (res->error < 0)
		snprintf(detail, sizeof(detail), "the check could not run: %s", res->why ? res->why : strerror(-res->error));
	else if (res->timed_out)
		snprintf(detail, sizeof(detail), "the check timed out");
	else if (res->not_started)
		/* Then stderr is the SSH server's log ("Exit (root) from ...: Child failed"), not the check's. */
		snprintf(detail, sizeof(detail), "the check did not start: the environment's shell did not run%s%s%s",
			 *err ? " (its SSH server says: " : "", err, *err ? ")" : "");
	else if (res->signal > 0)
		snprintf(detail, sizeof(detail), "the check was killed by signal %d%s%s", res->signal,
			 *printed ? ": " : "", printed);
	else if (res->exit_code != 0)
		snprintf(detail, sizeof(detail), "exit status %d%s%s", res->exit_code, *printed ? ": " : "", printed);
	else
		snprintf(detail, sizeof(detail), "%s", *out ? out : "healthy");
	check_report(c, res->error == 0 && !res->timed_out && !res->not_started && res->signal == 0 &&
			 res->exit_code == 0, detail);
	check_free(c);
}

static void check_timeout(evutil_socket_t fd, short what, void *arg)
{
	struct check *c = arg;
	char detail[64];

	if (c->reported || c->exec_done)
		return;
	snprintf(detail, sizeof(detail), "no answer within %d s", HEALTH_TIMEOUT_S);
	check_report(c, 0, detail);
	/* The exec's done() still comes and frees the check. */
	c->ops->exec_cancel(c->exec);
}

static void check_failed_start(evutil_socket_t fd, short what, void *arg)
{
	struct check *c = arg;

	check_report(c, 0, c->output);
	check_free(c);
}

int health_check(struct fleetd *f, const char *agent, health_done_fn done, void *userdata)
{
	_cleanup_(agent_freep) struct agent *a = NULL;
	_cleanup_free_ char *why = NULL;
	const char *const *argv;
	const char *custom[4] = { "/bin/sh", "-c", NULL, NULL };
	struct exec_request req = { .timeout_s = HEALTH_TIMEOUT_S - 5 };
	struct timeval tv = { HEALTH_TIMEOUT_S, 0 };
	const struct backend_ops *ops;
	const char *reason;
	struct check *c;
	int r;

	if (!state(f) || state(f)->closing)
		return -EBUSY;	/* fleetd is stopping: no verdict */
	if ((r = db_agent_get(f->db, agent, &a)) < 0)
		return r;
	if (a->state == AGENT_DEFINED || a->state == AGENT_PROVISIONING || !(ops = backend_get(f, a->backend, &reason)))
		return -EINVAL;
	if (a->health_command) {
		custom[2] = a->health_command;
		argv = custom;
	} else {
		argv = ops->health_default;	/* without a command of its own: the backend's */
		req.health = true;
	}
	req.argv = argv;
	c = xcalloc(1, sizeof(*c));
	c->f = f;
	c->agent = xstrdup(agent);
	c->ops = ops;
	c->t_begin = now_usec();
	c->seq = activity_seq(f, agent);
	c->quiet = activity_running(f, agent) == 0;
	tracked_get(state(f), agent)->checks++;
	c->done = done;
	c->userdata = userdata;
	c->next = state(f)->checks;
	if (c->next)
		c->next->prev = c;
	state(f)->checks = c;
	r = ops->exec(f, a, &req, &(struct exec_callbacks){ check_output, check_exec_done, c }, &c->exec, &why);
	if (r == -EBUSY) {
		/* A snapshot or restore is under way: no verdict now, the caller tries later. */
		check_free(c);
		return -EBUSY;
	}
	if (r < 0 && ops->state) {
		enum agent_state now;

		/*
		 * Its environment stopped on its own (a QEMU killed, right after a
		 * run it broke off): not unhealthy. The backend's stop event
		 * records it and applies the restart policy; marking it bad first
		 * would say the wrong thing and keep the policy from acting.
		 */
		if (ops->state(f, a, &now, NULL) == 0 && now == AGENT_STOPPED) {
			log_info("agent '%s': no health check: its %s stopped on its own", agent, ops->env_word);
			check_free(c);
			return -EBUSY;
		}
	}
	if (r == -ENOTCONN) {
		/*
		 * Its session was lost a moment ago (the check after a run whose
		 * session broke, before the backend has dropped it): most often
		 * the guest died and its stop event is on its way. No verdict;
		 * the next check, on a new session, decides.
		 */
		log_info("agent '%s': no health check now: %s", agent, why ? why : strerror(-r));
		check_free(c);
		return -EBUSY;
	}
	if (r < 0) {
		/* Could not even start (the guest is not running, ...): unhealthy, reported on the loop. */
		struct timeval zero = { 0, 0 };

		snprintf(c->output, sizeof(c->output), "the check could not start: %s", why ? why : strerror(-r));
		c->timer = evtimer_new(f->base, check_failed_start, c);
		evtimer_add(c->timer, &zero);
		return 0;
	}
	c->timer = evtimer_new(f->base, check_timeout, c);
	evtimer_add(c->timer, &tv);
	return 0;
}

/* --- automatic rollback ---------------------------------------------------------- */


struct rollback {
	struct fleetd *f;
	char *agent, *snap, *cause;
	struct agent *record;
	const struct backend_ops *ops;
};

static void rollback_free(struct rollback *rb)
{
	struct tracked *t = tracked_get(state(rb->f), rb->agent);

	t->in_flight = false;
	agent_free(rb->record);
	free(rb->agent);
	free(rb->snap);
	free(rb->cause);
	free(rb);
}

static void audit_rollback(struct rollback *rb, const char *outcome, const char *detail)
{
	_cleanup_free_ char *target = rb->snap ? xasprintf("%s/%s", rb->agent, rb->snap) : xstrdup(rb->agent);

	/* fleetd itself acts here: uid 0; auto.rollback.start when one begins, auto.rollback how it ended. */
	(void)db_audit_add(rb->f->db, 0, strcmp(outcome, "started") == 0 ? "auto.rollback.start" : "auto.rollback",
			   target, outcome, detail);
}

static void rollback_give_up(struct rollback *rb, const char *why)
{
	_cleanup_free_ char *what = NULL;
	char when[32];

	log_error("agent '%s': %s; it stays bad until a person looks", rb->agent, why);
	(void)lifecycle_set_state(rb->f, rb->agent, AGENT_BAD, NULL);
	what = xasprintf("%s: %s (after: %s)", format_utc(time(NULL), when, sizeof(when)), why, rb->cause);
	(void)db_agent_set_rollback(rb->f->db, rb->agent, what);
	audit_rollback(rb, "failed", why);
	watch_publish(rb->f, "rollback.failed", rb->agent, json_pack("{s:s?, s:s}", "snapshot", rb->snap, "error", why));
	metrics_inc(rb->f, M_ROLLBACKS, (const char *[]){ "failed" });
	rollback_free(rb);
}

static void rollback_verified(void *userdata, int healthy, const char *detail)
{
	struct rollback *rb = userdata;
	_cleanup_free_ char *what = NULL, *why = NULL;
	enum agent_state st = AGENT_RUNNING;
	char when[32];

	if (healthy != 1) {
		why = xasprintf("still unhealthy after restoring '%s': %s", rb->snap, detail ? detail : "?");
		rollback_give_up(rb, why);
		return;
	}
	if (rb->ops->state(rb->f, rb->record, &st, NULL) < 0)
		st = AGENT_RUNNING;
	(void)lifecycle_set_state(rb->f, rb->agent, st, NULL);
	what = xasprintf("%s: restored '%s' after: %s", format_utc(time(NULL), when, sizeof(when)), rb->snap, rb->cause);
	(void)db_agent_set_rollback(rb->f->db, rb->agent, what);
	log_notice("agent '%s': rolled back to snapshot '%s' and healthy again", rb->agent, rb->snap);
	audit_rollback(rb, "ok", what);
	watch_publish(rb->f, "rollback.finished", rb->agent, json_pack("{s:s, s:s}", "snapshot", rb->snap, "cause", rb->cause));
	metrics_inc(rb->f, M_ROLLBACKS, (const char *[]){ "ok" });
	rollback_free(rb);
}

static void rollback_restored(void *userdata, int r, const char *why)
{
	struct rollback *rb = userdata;
	_cleanup_free_ char *msg = NULL;

	if (r < 0) {
		msg = xasprintf("restoring '%s' failed: %s", rb->snap, why ? why : strerror(-r));
		rollback_give_up(rb, msg);
		return;
	}
	if (health_check(rb->f, rb->agent, rollback_verified, rb) < 0)
		rollback_give_up(rb, "cannot check its health after the restore");
}

/*
 * Restore now. The command that broke the agent may still be running (an
 * rm -rf takes a while): the backend refuses with -EBUSY, and snapshots.c
 * waits for it a bounded time (SNAPSHOTS_WAIT_ANY) rather than give up at once.
 */
static void rollback_start(struct rollback *rb)
{
	_cleanup_free_ char *why = NULL, *msg = NULL;
	int r;

	if ((r = snapshots_restore(rb->f, rb->agent, rb->snap, SNAPSHOTS_WAIT_ANY, rollback_restored, rb, &why)) < 0) {
		msg = xasprintf("restoring '%s' failed: %s", rb->snap, why ? why : strerror(-r));
		rollback_give_up(rb, msg);
	}
}

/* The agent failed a check: roll it back if it wants that and the rate limit allows. */
static void rollback(struct fleetd *f, struct tracked *t, const char *cause)
{
	struct rollback *rb = xcalloc(1, sizeof(*rb));
	_cleanup_free_ char *why = NULL;
	time_t now = time(NULL);
	const char *reason;
	int recent = 0;

	rb->f = f;
	rb->agent = xstrdup(t->name);
	rb->cause = xstrdup(cause);
	t->in_flight = true;
	if (db_agent_get(f->db, t->name, &rb->record) < 0 || !(rb->ops = backend_get(f, rb->record->backend, &reason))) {
		rollback_free(rb);
		return;
	}
	/* Counted from the audit log, so a restart of fleetd does not reset the limit. */
	if (db_audit_count(f->db, "auto.rollback.start", t->name, ((int64_t)now - ROLLBACK_WINDOW_S) * 1000,
			   &recent) < 0)
		recent = 0;
	if (recent >= ROLLBACK_LIMIT) {
		why = xasprintf("rolled back %d times within %d s already; not again", recent, ROLLBACK_WINDOW_S);
		rollback_give_up(rb, why);
		return;
	}
	if (!rb->ops->snapshot_restore) {
		rollback_give_up(rb, "its backend has no snapshots");
		return;
	}
	if (snapshots_newest_good(f, t->name, &rb->snap) < 0) {
		rollback_give_up(rb, "no snapshot is marked good");
		return;
	}
	audit_rollback(rb, "started", cause);	/* what the rate limit counts */
	watch_publish(f, "rollback.started", t->name, json_pack("{s:s, s:s}", "snapshot", rb->snap, "cause", cause));
	log_warning("agent '%s': rolling back to its newest good snapshot '%s'", t->name, rb->snap);
	rollback_start(rb);
}

/* --- periodic checks ---------------------------------------------------------------- */

struct periodic {
	struct fleetd *f;
	char *agent;
};

static void periodic_free(struct periodic *p)
{
	if (p) {
		free(p->agent);
		free(p);
	}
}

static void periodic_done(void *userdata, int healthy, const char *detail)
{
	struct periodic *p = userdata;
	struct tracked *t = tracked_get(state(p->f), p->agent);
	_cleanup_(agent_freep) struct agent *a = NULL;

	t->in_flight = false;
	t->periodic = NULL;
	if (healthy == 1 && db_agent_get(p->f->db, p->agent, &a) == 0 && a->state == AGENT_BAD) {
		/* It recovered (a restart, a person): no longer bad. */
		log_notice("agent '%s': healthy again", p->agent);
		(void)lifecycle_set_state(p->f, p->agent, AGENT_RUNNING, NULL);
	} else if (healthy == 0 && (a || db_agent_get(p->f->db, p->agent, &a) == 0) && a->state != AGENT_BAD) {
		if (a->auto_rollback) {
			rollback(p->f, t, detail);
		} else {
			log_warning("agent '%s': unhealthy and auto-rollback is off: state bad", p->agent);
			(void)lifecycle_set_state(p->f, p->agent, AGENT_BAD, NULL);
		}
	}
	free(p->agent);
	free(p);
}

/* Check t's agent; a failure marks it bad or rolls it back. -EBUSY if a check or rollback is on it already. */
static int check_and_act(struct fleetd *f, struct tracked *t)
{
	struct periodic *p;
	int r;

	if (t->in_flight)
		return -EBUSY;
	p = xcalloc(1, sizeof(*p));
	p->f = f;
	p->agent = xstrdup(t->name);
	t->in_flight = true;
	if ((r = health_check(f, t->name, periodic_done, p)) < 0) {
		t->in_flight = false;
		periodic_free(p);
		return r;
	}
	/* A check that fleetd's stop ends calls no done (check_exec_done): health_free frees p then. */
	t->periodic = p;
	return r;
}

void health_boot_failed(struct fleetd *f, const char *agent, const char *why)
{
	struct tracked *t;
	_cleanup_(agent_freep) struct agent *a = NULL;
	_cleanup_free_ char *detail = xasprintf("does not boot: %s", why ? why : "no answer");

	if (!f->health || db_agent_get(f->db, agent, &a) < 0)
		return;
	(void)db_agent_set_health(f->db, agent, 0, detail);
	t = tracked_get(state(f), agent);
	if (t->in_flight)
		return;		/* a rollback or check is on it already */
	if (a->auto_rollback) {
		rollback(f, t, detail);
	} else {
		log_warning("agent '%s': %s; auto-rollback is off: state bad", agent, detail);
		(void)lifecycle_set_state(f, agent, AGENT_BAD, NULL);
	}
}

int health_check_and_act(struct fleetd *f, const char *agent)
{
	return check_and_act(f, tracked_get(state(f), agent));
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
	struct health *h = arg;
	struct agent **list = NULL;
	time_t now = time(NULL);
	size_t n = 0;

	if (db_agent_list(h->f->db, &list, &n) < 0)
		return;
	for (size_t i = 0; i < n; i++) {
		struct agent *a = list[i];
		struct tracked *t;

		if ((a->state != AGENT_RUNNING && a->state != AGENT_BAD) || a->health_interval_s <= 0)
			continue;
		t = tracked_get(h, a->name);
		if (t->in_flight)
			continue;
		if (t->next_due == 0)
			t->next_due = now + a->health_interval_s;	/* first check one interval after we see it run */
		if (now < t->next_due)
			continue;
		t->next_due = now + a->health_interval_s;
		(void)check_and_act(h->f, t);
	}
	agent_list_free(list);
}

bool health_checking(struct fleetd *f, const char *agent)
{
	struct health *h = state(f);

	for (struct tracked *t = h ? h->agents : NULL; t; t = t->next)
		if (strcmp(t->name, agent) == 0)
			return t->checks > 0;
	return false;
}

bool health_recent_pass(struct fleetd *f, const char *agent, long long *ret_age_usec)
{
	struct health *h = state(f);
	long long age;

	for (struct tracked *t = h ? h->agents : NULL; t; t = t->next) {
		if (strcmp(t->name, agent) != 0)
			continue;
		age = now_usec() - t->passed_usec;
		if (!t->passed || t->checks > 0 || age < 0 || age > HEALTH_REUSE_S * 1000000LL ||
		    activity_running(f, agent) > 0 || activity_seq(f, agent) != t->passed_seq)
			return false;
		if (ret_age_usec)
			*ret_age_usec = age;
		return true;
	}
	return false;
}

int health_init(struct fleetd *f)
{
	struct health *h = xcalloc(1, sizeof(*h));
	struct timeval tv = { TICK_S, 0 };

	h->f = f;
	static const struct snapshots_health for_snapshots = { .checking = health_checking, .check = health_check,
							       .recent_pass = health_recent_pass };

	lifecycle_on_boot_failed(f, health_boot_failed);
	snapshots_use_health(&for_snapshots);
	h->tick = event_new(f->base, -1, EV_PERSIST, on_tick, h);
	event_add(h->tick, &tv);
	f->health = h;
	return 0;
}

/*
 * Stop checking; the state stays until health_free, after the backends'
 * shutdown: that ends the checks' execs and reports them here.
 */
void health_shutdown(struct fleetd *f)
{
	struct health *h = f->health;

	if (!h || h->closing)
		return;
	h->closing = true;
	snapshots_use_health(NULL);	/* no new checks from snapshots */
	event_free(h->tick);
	h->tick = NULL;
	for (struct check *c = h->checks; c; c = c->next)
		if (c->timer)
			evtimer_del(c->timer);
}

void health_free(struct fleetd *f)
{
	struct health *h = f->health;

	if (!h)
		return;
	health_shutdown(f);
	while (h->checks)	/* a backend that never reported (the fake one) */
		check_free(h->checks);
	while (h->agents) {
		struct tracked *t = h->agents;
		h->agents = t->next;
		periodic_free(t->periodic);
		free(t->name);
		free(t);
	}
	free(h);
	f->health = NULL;
}
