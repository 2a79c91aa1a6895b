/*
 * core/health.c against the fake backend: a failed check rolls the agent
 * back to its newest good snapshot (or makes it bad), the rollback rate
 * limit (kept in the audit log, so a restart of fleetd does not reset it),
 * and a start that does not boot.
 */
#include "tests/fakes/core_fixture.h"
#include "tests/tap.h"

static struct fixture X;
#define F (&X.f)

static void make(const char *name, bool auto_rollback)
{
	_cleanup_(agent_freep) struct agent *a = fixture_agent(name, RESTART_NEVER);

	a->auto_rollback = auto_rollback;
	a->health_interval_s = 0;	/* checks only when the test asks */
	fixture_start_agent(&X, a);
}

static void on_taken(void *userdata, int r, const char *why, const struct snapshot *s)
{
	*(int *)userdata = r == 0 && s && s->good == 1 ? 1 : -1;
}

/* A snapshot of the healthy, running agent, marked good by its check. */
static bool good_snapshot(const char *agent, const char *snap)
{
	_cleanup_free_ char *why = NULL;
	int result = 0;

	if (snapshots_take(F, agent, snap, NULL, NULL, false, 0, on_taken, &result, &why) < 0)
		return false;
	return LOOP_UNTIL(&X, result != 0) && result == 1;
}

/* The agent's last_rollback ("" if none); static buffer. */
static const char *last_rollback(const char *name)
{
	static char buf[512];
	_cleanup_(agent_freep) struct agent *a = NULL;

	buf[0] = '\0';
	if (db_agent_get(F->db, name, &a) == 0 && a->last_rollback)
		snprintf(buf, sizeof(buf), "%s", a->last_rollback);
	return buf;
}

static int rollbacks(const char *name, const char *action)
{
	int n = -1;

	(void)db_audit_count(F->db, action, name, 0, &n);
	return n;
}

/* Break the agent's "files" and check it; wait until the verdict is acted on (a rollback ended, or bad). */
static bool break_and_check(const char *name)
{
	int ended = rollbacks(name, "auto.rollback");

	fake_env_set_exit(name, 1);
	if (health_check_and_act(F, name) < 0)
		return false;
	return LOOP_UNTIL(&X, rollbacks(name, "auto.rollback") > ended || db_state(&X, name) == AGENT_BAD);
}

static void test_rollback(void)
{
	int restores;

	fake_reset();
	fixture_open(&X, FX_HEALTH, NULL);
	make("hc-a", true);
	make("hc-b", false);
	make("hc-c", true);
	ok(good_snapshot("hc-a", "good"), "a good snapshot of hc-a");

	restores = fake_calls(FAKE_SNAPSHOT_RESTORE);
	ok(break_and_check("hc-a"), "hc-a breaks; its check fails and is acted on");
	is_int(fake_calls(FAKE_SNAPSHOT_RESTORE), restores + 1, "auto-rollback: its newest good snapshot is restored");
	is_int(fake_env_exit("hc-a"), 0, "the restore brought its files back");
	is_int(db_state(&X, "hc-a"), AGENT_RUNNING, "checked healthy again: running");
	ok(strstr(last_rollback("hc-a"), "restored 'good' after: exit status 1") != NULL,
	   "its record says what the rollback did (%s)", last_rollback("hc-a"));
	is_int(rollbacks("hc-a", "auto.rollback.start"), 1, "the audit log has the rollback");

	ok(break_and_check("hc-b"), "hc-b (no auto-rollback) breaks");
	is_int(db_state(&X, "hc-b"), AGENT_BAD, "without auto-rollback: bad");
	is_int(fake_calls(FAKE_SNAPSHOT_RESTORE), restores + 1, "and nothing restored");

	ok(break_and_check("hc-c"), "hc-c (auto-rollback, no snapshot) breaks");
	is_int(db_state(&X, "hc-c"), AGENT_BAD, "nothing to roll back to: bad");
	ok(strstr(last_rollback("hc-c"), "no snapshot is marked good") != NULL, "and its record says why");

	/* The rate limit: ROLLBACK_LIMIT per window, counted from the audit log. */
	ok(break_and_check("hc-a") && db_state(&X, "hc-a") == AGENT_RUNNING, "rollback 2 of hc-a");
	ok(break_and_check("hc-a") && db_state(&X, "hc-a") == AGENT_RUNNING, "rollback 3 of hc-a");
	is_int(rollbacks("hc-a", "auto.rollback.start"), ROLLBACK_LIMIT, "%d rollbacks in the window", ROLLBACK_LIMIT);
	fixture_close(&X);
	fixture_open(&X, FX_HEALTH, NULL);	/* a restart of fleetd does not reset the limit */
	restores = fake_calls(FAKE_SNAPSHOT_RESTORE);
	ok(break_and_check("hc-a"), "hc-a breaks a fourth time (after a restart of fleetd)");
	is_int(fake_calls(FAKE_SNAPSHOT_RESTORE), restores, "past the limit: no restore");
	is_int(db_state(&X, "hc-a"), AGENT_BAD, "past the limit: bad");
	ok(strstr(last_rollback("hc-a"), "rolled back 3 times within 3600 s already; not again") != NULL,
	   "and its record says why (%s)", last_rollback("hc-a"));
	fixture_close(&X);
}

static void test_boot_failed(void)
{
	_cleanup_free_ char *why = NULL;
	struct agent *a = NULL;
	int restores;

	fake_reset();
	fixture_open(&X, FX_HEALTH, NULL);
	make("hc-boot", false);
	make("hc-rb", true);
	ok(good_snapshot("hc-rb", "up"), "a good snapshot of hc-rb (running)");

	/* Stop both, then starts that never become reachable. */
	fake_event(BACKEND_EV_STOPPED, "hc-boot", true, true);
	fake_event(BACKEND_EV_STOPPED, "hc-rb", true, true);
	fake_set(FAKE_START, FAKE_FAIL_LATER, -ETIMEDOUT, "fake: no answer");
	(void)db_agent_get(F->db, "hc-boot", &a);
	is_int(lifecycle_start(F, fake_backends[FAKE_KIND], a, NULL, NULL, &why), 0, "hc-boot: start accepted");
	agent_free(a);
	ok(LOOP_UNTIL(&X, db_state(&X, "hc-boot") == AGENT_BAD), "does not boot, no auto-rollback: bad");
	{
		_cleanup_(agent_freep) struct agent *b = NULL;

		ok(db_agent_get(F->db, "hc-boot", &b) == 0 && b->health == 0 && b->health_detail &&
		   strcmp(b->health_detail, "does not boot: fake: no answer") == 0,
		   "recorded as a failed check that says so");
	}

	restores = fake_calls(FAKE_SNAPSHOT_RESTORE);
	(void)db_agent_get(F->db, "hc-rb", &a);
	is_int(lifecycle_start(F, fake_backends[FAKE_KIND], a, NULL, NULL, &why), 0, "hc-rb: start accepted");
	agent_free(a);
	ok(LOOP_UNTIL(&X, rollbacks("hc-rb", "auto.rollback") == 1), "does not boot, auto-rollback: rolled back");
	is_int(fake_calls(FAKE_SNAPSHOT_RESTORE), restores + 1, "to its good snapshot");
	is_int(db_state(&X, "hc-rb"), AGENT_RUNNING, "which runs and checks healthy: running");
	fake_set(FAKE_START, FAKE_OK, 0, NULL);
	fixture_close(&X);
}

struct verdict {
	int calls, healthy;
	char detail[512];
};

static void on_checked(void *userdata, int healthy, const char *detail)
{
	struct verdict *v = userdata;

	v->calls++;
	v->healthy = healthy;
	snprintf(v->detail, sizeof(v->detail), "%s", detail ? detail : "");
}

/* What a check prints is the agent's output: its secrets never reach the detail, the record or the log. */
static void test_redacted(void)
{
	_cleanup_free_ char *why = NULL;
	_cleanup_(agent_freep) struct agent *a = NULL;
	struct verdict v = { 0 };

	fake_reset();
	fixture_open(&X, FX_HEALTH, NULL);
	make("hc-sec", false);
	is_int(secrets_set(F, "hc-sec", "CODE", (const unsigned char *)"exit 1", 6, &why), 0, "a secret is set");
	fake_env_set_exit("hc-sec", 1);	/* the fake's check prints "fake: exit 1" */
	is_int(health_check(F, "hc-sec", on_checked, &v), 0, "a check");
	ok(LOOP_UNTIL(&X, v.calls == 1), "it answers");
	is_int(v.healthy, 0, "unhealthy");
	is_str(v.detail, "exit status 1: fake: [secret CODE]", "its detail shows the marker, not the value");
	ok(db_agent_get(F->db, "hc-sec", &a) == 0 && a->health_detail &&
	   strcmp(a->health_detail, "exit status 1: fake: [secret CODE]") == 0, "and so does the agent's record");
	fixture_close(&X);
}

/*
 * An environment that stopped on its own (#13: a guest's QEMU killed under a
 * run; the run's end asks for a check) is not unhealthy: no verdict, never
 * bad, so the stop's own handling (the restart policy) decides.
 */
static void test_stopped_on_its_own(void)
{
	_cleanup_(agent_freep) struct agent *a = NULL;
	struct verdict v = { 0 };
	enum agent_state st;

	fake_reset();
	fixture_open(&X, FX_HEALTH, NULL);
	make("hc-down", false);
	fake_event(BACKEND_EV_STOPPED, "hc-down", false, false);	/* a crash */
	ok(fake_env_state("hc-down", &st) == 0 && st == AGENT_STOPPED, "the environment stopped on its own");
	is_int(health_check(F, "hc-down", on_checked, &v), -EBUSY, "a check then gives no verdict (-EBUSY)");
	loop_now(&X);	/* an unhealthy verdict would be reported from a zero timer */
	is_int(v.calls, 0, "and never answers");
	ok(db_agent_get(F->db, "hc-down", &a) == 0 && a->state != AGENT_BAD, "the agent is not made bad (%s)",
	   a ? agent_state_to_string(a->state) : "?");
	fixture_close(&X);
}

int main(void)
{
	void (*tests[])(void) = { test_rollback, test_boot_failed, test_redacted, test_stopped_on_its_own };

	log_setup("test_core_health", LOG_WARNING);
	for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
		fixture_mkdir(&X);
		tests[i]();
		fixture_cleanup(&X);
	}
	return tap_done();
}
