/*
 * core/lifecycle.c against the fake backend: the two-phase create and the
 * remove intent (with a real kill -9 in between, then reconcile), 'missing',
 * start/stop recording, a start that does not boot, and the restart policy
 * with its backoff. Milliseconds; no QEMU, no Unix users.
 */
#include "tests/fakes/core_fixture.h"
#include "tests/tap.h"

static struct fixture X;
#define F (&X.f)
#define OPS (fake_backends[FAKE_KIND])

/* --- a completion recorder for start/stop ------------------------------------------- */

struct answer {
	int calls, r;
	int state_then;		/* the agent's recorded state when done() ran */
	const char *agent;
};

static void answered(void *userdata, int r, const char *why)
{
	struct answer *a = userdata;

	a->calls++;
	a->r = r;
	a->state_then = db_state(&X, a->agent);
}

static struct {
	int calls;
	char agent[64];
	int answers_then;	/* how many answers the start's caller had had */
	struct answer *answer;
} boot;

static void on_boot_failed(struct fleetd *f, const char *agent, const char *why)
{
	boot.calls++;
	snprintf(boot.agent, sizeof(boot.agent), "%s", agent);
	boot.answers_then = boot.answer ? boot.answer->calls : -1;
}

static struct agent *get(const char *name)
{
	struct agent *a = NULL;

	(void)db_agent_get(F->db, name, &a);
	return a;
}

/* --- create and remove --------------------------------------------------------------- */

static void create_in_child(struct fixture *x, void *arg)
{
	_cleanup_(agent_freep) struct agent *a = fixture_agent(arg, RESTART_ON_FAILURE);
	char *why = NULL;

	(void)lifecycle_create(&x->f, OPS, a, &why);
}

static void remove_in_child(struct fixture *x, void *arg)
{
	_cleanup_(agent_freep) struct agent *a = NULL;
	char *why = NULL;

	if (db_agent_get(x->f.db, arg, &a) == 0)
		(void)lifecycle_destroy(&x->f, OPS, a, true, &why);
}

static void test_create(void)
{
	_cleanup_(agent_freep) struct agent *a = fixture_agent("lc-one", RESTART_ON_FAILURE);
	_cleanup_free_ char *why = NULL;
	int r;

	fake_reset();
	fixture_open(&X, 0, NULL);
	is_int(lifecycle_create(F, OPS, a, &why), 0, "create: ok");
	is_int(db_state(&X, "lc-one"), AGENT_STOPPED, "create: the row reads stopped");
	is_int(env_state("lc-one"), AGENT_STOPPED, "create: the environment exists, stopped");
	is_int(fake_calls(FAKE_PROVISION), 1, "create: provisioned once");

	/* A failed provision leaves no row (and the fake made nothing). */
	fake_set(FAKE_PROVISION, FAKE_FAIL, -ENOSPC, "fake: disk full");
	{
		_cleanup_(agent_freep) struct agent *b = fixture_agent("lc-two", RESTART_ON_FAILURE);

		r = lifecycle_create(F, OPS, b, &why);
	}
	is_int(r, -ENOSPC, "failed provision: its errno");
	is_str(why, "fake: disk full", "failed provision: the backend's why");
	is_int(db_state(&X, "lc-two"), -1, "failed provision: no row");
	is_int(env_state("lc-two"), -1, "failed provision: no environment");
	fake_set(FAKE_PROVISION, FAKE_OK, 0, NULL);
	fixture_close(&X);

	/* kill -9 during provision, after the environment was made: phase one is on disk. */
	fake_set(FAKE_PROVISION, FAKE_DIE_AFTER, 0, NULL);
	ok(fixture_kill9(&X, 0, create_in_child, "lc-half"), "kill -9 during provision (after the backend's work)");
	fake_set(FAKE_PROVISION, FAKE_OK, 0, NULL);
	fixture_open(&X, 0, NULL);
	is_int(db_state(&X, "lc-half"), AGENT_PROVISIONING, "the row was written before provision: 'provisioning'");
	is_int(env_state("lc-half"), AGENT_STOPPED, "and the half-made environment is on the host");
	lifecycle_reconcile(F);
	is_int(db_state(&X, "lc-half"), -1, "reconcile: the unacknowledged create is undone (no row)");
	is_int(env_state("lc-half"), -1, "reconcile: and its environment destroyed");
	fixture_close(&X);

	/* kill -9 before the backend did anything: the row alone is undone. */
	fake_set(FAKE_PROVISION, FAKE_DIE_BEFORE, 0, NULL);
	ok(fixture_kill9(&X, 0, create_in_child, "lc-early"), "kill -9 during provision (before the backend's work)");
	fake_set(FAKE_PROVISION, FAKE_OK, 0, NULL);
	fixture_open(&X, FX_RECOVER, NULL);
	is_int(db_state(&X, "lc-early"), -1, "reconcile at start: no row left");
	is_int(db_state(&X, "lc-one"), AGENT_STOPPED, "reconcile at start: a finished create is untouched");
	fixture_close(&X);
}

/*
 * lifecycle_create_start with a backend whose provision ends off the loop
 * (provision_start: the VM backend's remote create): the fake's provision,
 * then its report deferred to the loop with later_r.
 */
struct later {
	backend_done_fn done;
	void *userdata;
	int r;
};
static int later_r;

static void later_fire(evutil_socket_t fd, short what, void *arg)
{
	struct later *l = arg;

	l->done(l->userdata, l->r, l->r < 0 ? "fake: the upload failed" : NULL);
	free(l);
}

static int provision_later(struct fleetd *f, const struct agent *a, backend_done_fn done, void *userdata, char **why)
{
	int r = OPS->provision(f, a, why);
	struct later *l;

	if (r < 0)
		return r;
	l = xcalloc(1, sizeof(*l));
	*l = (struct later){ done, userdata, later_r };
	event_base_once(f->base, -1, EV_TIMEOUT, later_fire, l, &(struct timeval){ 0, 0 });
	return 1;
}

static void test_create_start(void)
{
	struct backend_ops ops = *OPS;
	struct answer ans = { .agent = "lc-async" }, bad = { .agent = "lc-async-bad" }, sync = { .agent = "lc-sync" };
	_cleanup_(agent_freep) struct agent *a = fixture_agent("lc-async", RESTART_ON_FAILURE);
	_cleanup_(agent_freep) struct agent *b = fixture_agent("lc-async-bad", RESTART_ON_FAILURE);
	_cleanup_(agent_freep) struct agent *c = fixture_agent("lc-sync", RESTART_ON_FAILURE);
	_cleanup_free_ char *why = NULL, *why2 = NULL, *why3 = NULL;

	fake_reset();
	fixture_open(&X, 0, NULL);
	ops.provision_start = provision_later;
	later_r = 0;
	is_int(lifecycle_create_start(F, &ops, a, answered, &ans, &why), 1, "create_start: under way (1)");
	is_int(db_state(&X, "lc-async"), AGENT_PROVISIONING, "create_start: the row reads provisioning meanwhile");
	is_int(ans.calls, 0, "create_start: done() not inside the call");
	ok(LOOP_UNTIL(&X, ans.calls == 1), "create_start: done() follows on the loop");
	is_int(ans.r, 0, "create_start: done() with 0");
	is_int(ans.state_then, AGENT_STOPPED, "create_start: the row reads stopped when done() runs");

	later_r = -ENOSPC;
	is_int(lifecycle_create_start(F, &ops, b, answered, &bad, &why2), 1, "a create_start that fails later: 1 first");
	ok(LOOP_UNTIL(&X, bad.calls == 1), "its done() follows");
	is_int(bad.r, -ENOSPC, "with the backend's errno");
	is_int(bad.state_then, -1, "and the row is gone when done() runs");

	/* Without provision_start: lifecycle_create, at once. */
	is_int(lifecycle_create_start(F, OPS, c, answered, &sync, &why3), 0, "create_start without provision_start: 0 at once");
	is_int(c->state, AGENT_STOPPED, "the agent reads stopped");
	loop_now(&X);
	is_int(sync.calls, 0, "and done() is never called");
	fixture_close(&X);
}

static void test_remove(void)
{
	_cleanup_free_ char *why = NULL;
	struct agent *a;
	int r;

	fake_reset();
	fixture_open(&X, 0, NULL);
	fixture_running(&X, "lc-rm", RESTART_ON_FAILURE);
	/* Refused (running, no force): the agent is what it was. */
	a = get("lc-rm");
	r = lifecycle_destroy(F, OPS, a, false, &why);
	is_int(r, -EBUSY, "remove of a running agent without force: refused");
	is_int(db_state(&X, "lc-rm"), AGENT_RUNNING, "refused remove: state put back (running)");
	is_int(env_state("lc-rm"), AGENT_RUNNING, "refused remove: the environment is untouched");
	agent_free(a);
	fixture_close(&X);

	/* kill -9 in the backend's destroy: the intent is on disk, reconcile finishes it. */
	fake_set(FAKE_DESTROY, FAKE_DIE_BEFORE, 0, NULL);
	ok(fixture_kill9(&X, 0, remove_in_child, "lc-rm"), "kill -9 during remove (before the backend's destroy)");
	fake_set(FAKE_DESTROY, FAKE_OK, 0, NULL);
	fixture_open(&X, 0, NULL);
	is_int(db_state(&X, "lc-rm"), AGENT_REMOVING, "the intent was written first: 'removing'");
	is_int(env_state("lc-rm"), AGENT_RUNNING, "the environment is still there");
	lifecycle_reconcile(F);
	is_int(db_state(&X, "lc-rm"), -1, "reconcile: the remove is finished (no row)");
	is_int(env_state("lc-rm"), -1, "reconcile: and the environment destroyed");

	/* A remove that goes through. */
	fixture_running(&X, "lc-rm2", RESTART_ON_FAILURE);
	a = get("lc-rm2");
	is_int(lifecycle_destroy(F, OPS, a, true, &why), 0, "forced remove of a running agent: ok");
	is_int(db_state(&X, "lc-rm2"), -1, "forced remove: no row");
	is_int(env_state("lc-rm2"), -1, "forced remove: no environment");
	agent_free(a);
	fixture_close(&X);
}

static void test_missing(void)
{
	fake_reset();
	fixture_open(&X, 0, NULL);
	fixture_running(&X, "lc-gone", RESTART_ON_FAILURE);
	fixture_running(&X, "lc-away", RESTART_ON_FAILURE);
	fake_event(BACKEND_EV_GONE, "lc-gone", false, false);
	is_int(db_state(&X, "lc-gone"), AGENT_MISSING, "GONE reported: state missing");
	is_str(db_detail(&X, "lc-gone"), "removed outside fleet: fake event", "GONE reported: detail says what");
	fixture_close(&X);

	/* Gone while no fleetd ran: reconcile at start finds it. */
	fake_event(BACKEND_EV_GONE, "lc-away", false, false);	/* no fleetd listens */
	fixture_open(&X, FX_RECOVER, NULL);
	is_int(db_state(&X, "lc-away"), AGENT_MISSING, "reconcile: an environment gone meanwhile: missing");
	is_str(db_detail(&X, "lc-away"), "fake: the environment of 'lc-away' is gone",
	       "reconcile: the detail is the backend's what-is-gone");
	/* A crash reported for a missing agent does not resurrect it. */
	fake_event(BACKEND_EV_RESYNC, NULL, false, false);
	is_int(db_state(&X, "lc-away"), AGENT_MISSING, "RESYNC: a missing agent stays missing");
	fixture_close(&X);
}

static void test_start_stop(void)
{
	struct answer ans = { .agent = "lc-ss" };
	_cleanup_(agent_freep) struct agent *a = fixture_agent("lc-ss", RESTART_NEVER);
	_cleanup_free_ char *why = NULL, *why2 = NULL;

	fake_reset();
	fixture_open(&X, 0, NULL);
	(void)lifecycle_create(F, OPS, a, &why);
	is_int(lifecycle_start(F, OPS, a, answered, &ans, &why), 0, "start: accepted");
	is_int(ans.calls, 0, "start: done() not called before start returned");
	is_int(db_state(&X, "lc-ss"), AGENT_STOPPED, "start: still stopped until the backend answers");
	ok(LOOP_UNTIL(&X, ans.calls == 1), "start: done() called once");
	is_int(ans.r, 0, "start: ok");
	is_int(ans.state_then, AGENT_RUNNING, "start: 'running' recorded before the caller hears");

	is_int(lifecycle_stop(F, OPS, a, 30, answered, &ans, &why), 0, "stop: accepted");
	ok(LOOP_UNTIL(&X, ans.calls == 2), "stop: done() called");
	is_int(ans.state_then, AGENT_STOPPED, "stop: 'stopped' recorded before the caller hears");

	fake_set(FAKE_START, FAKE_FAIL, -EIO, "fake: no");
	is_int(lifecycle_start(F, OPS, a, answered, &ans, &why2), -EIO, "start refused at once: its errno");
	is_str(why2, "fake: no", "start refused at once: its why");
	fake_set(FAKE_START, FAKE_FAIL_LATER, -EIO, "fake: broke");
	is_int(lifecycle_start(F, OPS, a, answered, &ans, &why), 0, "start failing later: accepted");
	ok(LOOP_UNTIL(&X, ans.calls == 3), "start failing later: done() called");
	is_int(ans.r, -EIO, "start failing later: done() has the errno");
	is_int(db_state(&X, "lc-ss"), AGENT_STOPPED, "start failing later: still stopped");
	is_int(ans.calls, 3, "the refused start never called done()");

	/* Started but never reachable: the boot-failed hook, after the caller's answer. */
	lifecycle_on_boot_failed(F, on_boot_failed);
	boot.answer = &ans;
	fake_set(FAKE_START, FAKE_FAIL_LATER, -ETIMEDOUT, "fake: no answer");
	is_int(lifecycle_start(F, OPS, a, answered, &ans, &why), 0, "start timing out: accepted");
	ok(LOOP_UNTIL(&X, boot.calls == 1), "start timing out: the boot-failed hook is called");
	is_str(boot.agent, "lc-ss", "the hook is told which agent");
	is_int(boot.answers_then, 4, "the hook runs after the caller had its -ETIMEDOUT answer");
	is_int(ans.r, -ETIMEDOUT, "the caller got -ETIMEDOUT");
	fixture_close(&X);

	/* Without a hook (no health.c), a start that does not boot makes the agent bad. */
	fixture_open(&X, 0, NULL);
	ans.calls = 0;
	is_int(lifecycle_start(F, OPS, a, answered, &ans, &why), 0, "start timing out, no hook: accepted");
	ok(LOOP_UNTIL(&X, ans.calls == 1 && db_state(&X, "lc-ss") == AGENT_BAD), "no hook: the agent turns bad");
	fake_set(FAKE_START, FAKE_OK, 0, NULL);
	fixture_close(&X);
}

/* --- restart policy ------------------------------------------------------------------ */

static const char *const fast[] = { "restart_backoff_ms", "1", "restart_backoff_max_ms", "8", NULL };
static const char *const slow[] = { "restart_backoff_ms", "60000", NULL };

static void test_restart_policy(void)
{
	long delay = 0;
	bool fired;
	int starts;

	fake_reset();
	fixture_open(&X, 0, fast);
	fixture_running(&X, "lc-fail", RESTART_ON_FAILURE);
	starts = fake_calls(FAKE_START);
	fake_event(BACKEND_EV_STOPPED, "lc-fail", false, false);
	is_int(fake_calls(FAKE_START), starts, "on-failure crash: not restarted at once (backoff)");
	is_int(db_state(&X, "lc-fail"), AGENT_STOPPED, "on-failure crash: stopped while it waits");
	ok(lifecycle_restart_pending(F, "lc-fail", &delay), "on-failure crash: a restart is pending");
	is_int(delay, 1, "the first restart waits restart_backoff_ms");
	{
		const char *d = db_detail(&X, "lc-fail");

		ok(strstr(d, "automatic restart 1 of at most 5") != NULL, "the state's detail says a restart waits (%s)", d);
	}
	ok(LOOP_UNTIL(&X, fake_calls(FAKE_START) == starts + 1), "on-failure crash: restarted after the backoff");
	ok(LOOP_UNTIL(&X, db_state(&X, "lc-fail") == AGENT_RUNNING), "and running again");
	is_str(db_detail(&X, "lc-fail"), "", "and the detail is gone");
	ok(!lifecycle_restart_pending(F, "lc-fail", NULL), "no restart pending any more");

	/* A clean shutdown is not a failure; 'always' restarts it anyway. */
	fixture_running(&X, "lc-clean", RESTART_ON_FAILURE);
	fixture_running(&X, "lc-always", RESTART_ALWAYS);
	fixture_running(&X, "lc-never", RESTART_NEVER);
	fixture_running(&X, "lc-asked", RESTART_ALWAYS);
	starts = fake_calls(FAKE_START);
	fake_event(BACKEND_EV_STOPPED, "lc-clean", false, true);
	fake_event(BACKEND_EV_STOPPED, "lc-never", false, false);
	fake_event(BACKEND_EV_STOPPED, "lc-asked", true, false);
	ok(!lifecycle_restart_pending(F, "lc-clean", NULL), "on-failure, clean shutdown: no restart");
	ok(!lifecycle_restart_pending(F, "lc-never", NULL), "never, crash: no restart");
	ok(!lifecycle_restart_pending(F, "lc-asked", NULL), "always, a stop fleet asked for: no restart");
	fake_event(BACKEND_EV_STOPPED, "lc-always", false, true);
	ok(lifecycle_restart_pending(F, "lc-always", NULL), "always, clean shutdown: a restart is pending");
	ok(LOOP_UNTIL(&X, fake_calls(FAKE_START) == starts + 1), "always: restarted");
	marker(&X, 50, &fired);
	ok(LOOP_UNTIL(&X, fired), "(a marker 50 ms on: past every backoff here)");
	is_int(fake_calls(FAKE_START), starts + 1, "only 'always' was restarted");
	is_int(db_state(&X, "lc-never"), AGENT_STOPPED, "never: stays stopped");

	/* A stop fleet asked for (lifecycle_stop) is not restarted either. */
	{
		_cleanup_(agent_freep) struct agent *a = get("lc-always");
		struct answer ans = { .agent = "lc-always" };
		_cleanup_free_ char *why = NULL;

		ok(LOOP_UNTIL(&X, db_state(&X, "lc-always") == AGENT_RUNNING), "always: running again");
		(void)lifecycle_stop(F, OPS, a, 30, answered, &ans, &why);
		ok(LOOP_UNTIL(&X, ans.calls == 1), "lifecycle_stop: done");
		ok(!lifecycle_restart_pending(F, "lc-always", NULL), "lifecycle_stop: no restart follows");
	}
	fixture_close(&X);
}

static void test_restart_limit(void)
{
	long want[] = { 1, 2, 4, 8, 8 }, delay = 0;
	int events;

	fake_reset();
	fixture_open(&X, 0, fast);
	fixture_running(&X, "lc-loop", RESTART_ON_FAILURE);
	/* Every start comes up and crashes at once: a crash loop. */
	fake_set(FAKE_START, FAKE_CRASH, 0, NULL);
	fake_event(BACKEND_EV_STOPPED, "lc-loop", false, false);
	for (int n = 1; n <= RESTART_LIMIT; n++) {
		ok(lifecycle_restart_pending(F, "lc-loop", &delay), "crash %d: restart %d pending", n, n);
		is_int(delay, want[n - 1], "restart %d waits base * 2^%d, capped at the max", n, n - 1);
		events = fake_events();
		ok(LOOP_UNTIL(&X, fake_events() > events), "restart %d came up and crashed again", n);
	}
	ok(!lifecycle_restart_pending(F, "lc-loop", NULL), "after %d restarts in the window: none more", RESTART_LIMIT);
	is_int(db_state(&X, "lc-loop"), AGENT_BAD, "the agent is bad");
	is_int(fake_calls(FAKE_START), 1 + RESTART_LIMIT, "it was started %d times by fleet", RESTART_LIMIT);
	fake_set(FAKE_START, FAKE_OK, 0, NULL);
	fixture_close(&X);
}

static void test_restart_cancel(void)
{
	_cleanup_free_ char *why = NULL;
	struct answer ans = { .agent = "lc-op" };
	struct agent *a;
	bool fired;
	int starts;

	fake_reset();
	/* A long backoff: only cancellation or the operator can end the wait within the test. */
	fixture_open(&X, 0, slow);
	fixture_running(&X, "lc-op", RESTART_ON_FAILURE);
	starts = fake_calls(FAKE_START);

	/* The operator starts it during the backoff: one start, the operator's; the pending one is gone. */
	fake_event(BACKEND_EV_STOPPED, "lc-op", false, false);
	ok(lifecycle_restart_pending(F, "lc-op", NULL), "crash: a restart is pending");
	a = get("lc-op");
	is_int(lifecycle_start(F, OPS, a, answered, &ans, &why), 0, "the operator starts it during the backoff");
	agent_free(a);
	ok(!lifecycle_restart_pending(F, "lc-op", NULL), "operator's start: the pending restart is cancelled");
	ok(LOOP_UNTIL(&X, ans.calls == 1), "operator's start: done");
	is_int(fake_calls(FAKE_START), starts + 1, "one start: the operator's");

	/* The operator stops it (the API, for an agent that is stopped already). */
	fake_event(BACKEND_EV_STOPPED, "lc-op", false, false);
	ok(lifecycle_restart_pending(F, "lc-op", NULL), "crash again: a restart is pending");
	ok(lifecycle_cancel_restart(F, "lc-op"), "the operator's stop cancels it");
	ok(!lifecycle_restart_pending(F, "lc-op", NULL), "operator's stop: nothing pending");
	is_str(db_detail(&X, "lc-op"), "", "operator's stop: the detail no longer promises a restart");
	ok(!lifecycle_cancel_restart(F, "lc-op"), "a second cancel finds nothing");

	/* The operator removes it during the backoff. */
	a = get("lc-op");
	is_int(lifecycle_start(F, OPS, a, answered, &ans, &why), 0, "started again");
	agent_free(a);
	ok(LOOP_UNTIL(&X, ans.calls == 2), "started again: done");
	fake_event(BACKEND_EV_STOPPED, "lc-op", false, false);
	ok(lifecycle_restart_pending(F, "lc-op", NULL), "crash again: a restart is pending");
	a = get("lc-op");
	is_int(lifecycle_destroy(F, OPS, a, false, &why), 0, "the operator removes it during the backoff");
	agent_free(a);
	ok(!lifecycle_restart_pending(F, "lc-op", NULL), "remove: the pending restart is cancelled");
	fixture_close(&X);

	/* A cancelled short backoff never fires: a later marker does, the start counter stays. */
	fixture_open(&X, 0, fast);
	fixture_running(&X, "lc-op2", RESTART_ON_FAILURE);
	starts = fake_calls(FAKE_START);
	fake_event(BACKEND_EV_STOPPED, "lc-op2", false, false);
	ok(lifecycle_cancel_restart(F, "lc-op2"), "short backoff: cancelled");
	marker(&X, 50, &fired);
	ok(LOOP_UNTIL(&X, fired), "(a marker 50 ms on: past the 1 ms backoff)");
	is_int(fake_calls(FAKE_START), starts, "the cancelled restart never came");
	is_int(db_state(&X, "lc-op2"), AGENT_STOPPED, "the agent stays stopped");
	fixture_close(&X);
}

/* A removed agent's restart history goes with it: a new agent of the same name starts afresh. */
static void test_restart_forgotten_on_remove(void)
{
	_cleanup_free_ char *why = NULL;
	long delay = 0;
	struct agent *a;
	int events;

	fake_reset();
	fixture_open(&X, 0, fast);
	fixture_running(&X, "lc-again", RESTART_ON_FAILURE);
	fake_set(FAKE_START, FAKE_CRASH, 0, NULL);
	fake_event(BACKEND_EV_STOPPED, "lc-again", false, false);
	for (int n = 1; n <= RESTART_LIMIT; n++) {
		events = fake_events();
		if (!LOOP_UNTIL(&X, fake_events() > events))
			break;
	}
	is_int(db_state(&X, "lc-again"), AGENT_BAD, "a crash loop made lc-again bad");
	fake_set(FAKE_START, FAKE_OK, 0, NULL);
	a = get("lc-again");
	is_int(lifecycle_destroy(F, OPS, a, true, &why), 0, "removed");
	agent_free(a);

	fixture_running(&X, "lc-again", RESTART_ON_FAILURE);
	is_int(db_state(&X, "lc-again"), AGENT_RUNNING, "a new lc-again runs");
	fake_event(BACKEND_EV_STOPPED, "lc-again", false, false);
	ok(lifecycle_restart_pending(F, "lc-again", &delay), "its first crash: a restart is pending, not 'bad'");
	is_int(delay, 1, "and it is restart 1, with the base delay");
	ok(db_state(&X, "lc-again") != AGENT_BAD, "the new agent is not bad");
	fixture_close(&X);
}

int main(void)
{
	log_setup("test_core_lifecycle", LOG_WARNING);
	/* Each on a fresh state dir and a clean host. */
	void (*tests[])(void) = { test_create, test_create_start, test_remove, test_missing, test_start_stop, test_restart_policy,
				  test_restart_limit, test_restart_cancel, test_restart_forgotten_on_remove };

	for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
		fixture_mkdir(&X);
		tests[i]();
		fixture_cleanup(&X);
	}
	return tap_done();
}
