/*
 * core/snapshots.c against the fake backend: the row is written before the
 * backend works ('creating', then 'ready'), a failure drops it, and what a
 * kill -9 in a create, a delete or a restore leaves is recovered at start.
 */
#include "tests/fakes/core_fixture.h"
#include "tests/tap.h"
#include "core/activity.h"
#include "core/lifecycle.h"

static struct fixture X;
#define F (&X.f)

struct taken {
	int calls, r;
	char snap[96], kind[16];
	int good;
};

static void on_taken(void *userdata, int r, const char *why, const struct snapshot *s)
{
	struct taken *t = userdata;

	t->calls++;
	t->r = r;
	if (s) {
		snprintf(t->snap, sizeof(t->snap), "%s", s->name);
		snprintf(t->kind, sizeof(t->kind), "%s", snapshot_kind_to_string(s->kind));
		t->good = s->good;
	}
}

static struct {
	int calls, r;
} restored;

static void on_restored(void *userdata, int r, const char *why)
{
	restored.calls++;
	restored.r = r;
}

/* The row's state ("" if there is none); static buffer. */
static const char *row(const char *agent, const char *snap)
{
	static char buf[32];
	struct snapshot *s = NULL;

	buf[0] = '\0';
	if (db_snapshot_get(F->db, agent, snap, &s) == 0)
		snprintf(buf, sizeof(buf), "%s", snapshot_state_to_string(s->state));
	snapshot_free(s);
	return buf;
}

/* The snapshot a restore of agent is recorded to be under way to, or NULL; static buffer. */
static const char *restoring(const char *agent)
{
	static char buf[96];
	_cleanup_(agent_freep) struct agent *a = NULL;

	if (db_agent_get(F->db, agent, &a) < 0 || !a->restoring)
		return NULL;
	snprintf(buf, sizeof(buf), "%s", a->restoring);
	return buf;
}

static void test_take(void)
{
	struct taken t = { 0 };
	_cleanup_free_ char *why = NULL;
	int r;

	fake_reset();
	fixture_open(&X, 0, NULL);
	fixture_running(&X, "sn-a", RESTART_NEVER);

	/* The backend hangs: what is recorded while it works. */
	fake_set(FAKE_SNAPSHOT_CREATE, FAKE_HANG, 0, NULL);
	r = snapshots_take(F, "sn-a", "s1", NULL, "a note", false, 0, on_taken, &t, &why);
	is_int(r, 0, "take: accepted");
	ok(LOOP_UNTIL(&X, fake_hung(FAKE_SNAPSHOT_CREATE) == 1), "take: the backend is at work");
	is_str(row("sn-a", "s1"), "creating", "the row reads 'creating' before the backend has it");
	ok(!fake_snapshot_has("sn-a", "s1"), "(the backend has nothing yet)");
	is_int(t.calls, 0, "done() waits for the backend");
	is_int(fake_release(FAKE_SNAPSHOT_CREATE, 0), 1, "the backend finishes");
	ok(LOOP_UNTIL(&X, t.calls == 1), "done() called once");
	is_int(t.r, 0, "take: ok");
	is_str(t.snap, "s1", "done() has the snapshot");
	is_str(t.kind, "dir", "with the backend's kind");
	is_str(row("sn-a", "s1"), "ready", "the row reads 'ready'");
	ok(fake_snapshot_has("sn-a", "s1"), "the backend has it");

	/* A create the backend fails: no row left. */
	fake_set(FAKE_SNAPSHOT_CREATE, FAKE_FAIL_LATER, -ENOSPC, "fake: full");
	r = snapshots_take(F, "sn-a", "s2", NULL, NULL, false, 0, on_taken, &t, &why);
	is_int(r, 0, "failing take: accepted");
	ok(LOOP_UNTIL(&X, t.calls == 2), "failing take: done() called");
	is_int(t.r, -ENOSPC, "failing take: the backend's errno");
	is_str(row("sn-a", "s2"), "", "failing take: the row is dropped");

	/* Refused at once: no row either, no done(). */
	fake_set(FAKE_SNAPSHOT_CREATE, FAKE_FAIL, -EIO, "fake: refused");
	r = snapshots_take(F, "sn-a", "s3", NULL, NULL, false, 0, on_taken, &t, &why);
	is_int(r, -EIO, "refused take: its errno");
	is_str(why, "fake: refused", "refused take: its why");
	is_str(row("sn-a", "s3"), "", "refused take: no row");
	loop_now(&X);
	is_int(t.calls, 2, "refused take: done() never called");
	fake_set(FAKE_SNAPSHOT_CREATE, FAKE_OK, 0, NULL);
	free(why);
	why = NULL;
	r = snapshots_take(F, "sn-a", "s1", NULL, NULL, false, 0, on_taken, &t, &why);
	is_int(r, -EEXIST, "a taken name: -EEXIST");
	fixture_close(&X);
}

static void test_take_health(void)
{
	struct taken t = { 0 };
	_cleanup_free_ char *why = NULL;

	fake_reset();
	fixture_open(&X, FX_HEALTH, NULL);
	fixture_running(&X, "sn-h", RESTART_NEVER);
	is_int(snapshots_take(F, "sn-h", "good", NULL, NULL, false, 0, on_taken, &t, &why), 0, "take (healthy): accepted");
	ok(LOOP_UNTIL(&X, t.calls == 1), "take (healthy): done");
	is_str(fake_env_last_exec("sn-h"), "fake-health", "a running agent is checked first (the backend's default check)");
	is_int(t.good, 1, "a passing check marks it good");
	/* An exec (api/exec.c brackets each with these) that breaks it: the last check no longer stands. */
	activity_begin(F, "sn-h");
	fake_env_set_exit("sn-h", 1);
	activity_end(F, "sn-h");
	is_int(snapshots_take(F, "sn-h", "bad", NULL, NULL, false, 0, on_taken, &t, &why), 0, "take (unhealthy): accepted");
	ok(LOOP_UNTIL(&X, t.calls == 2), "take (unhealthy): done");
	is_int(t.good, 0, "a failing check marks it bad");
	{
		_cleanup_free_ char *newest = NULL;

		is_int(snapshots_newest_good(F, "sn-h", &newest), 0, "there is a good one");
		is_str(newest, "good", "the newest good is the one that passed");
	}
	fixture_close(&X);
}

/*
 * A check that passed moments ago with nothing done since stands for the
 * snapshot's own (no second check); anything fleet did in between, an exec
 * still running, a failed check or a restore makes the snapshot check again.
 */
static void test_take_recent_check(void)
{
	struct taken t = { 0 };
	int execs;

	fake_reset();
	fixture_open(&X, FX_HEALTH, NULL);
	fixture_running(&X, "sn-r", RESTART_NEVER);
#define TAKE(snap, n) do { \
		_cleanup_free_ char *why_ = NULL; \
		is_int(snapshots_take(F, "sn-r", snap, NULL, NULL, false, 0, on_taken, &t, &why_), 0, snap ": accepted"); \
		ok(LOOP_UNTIL(&X, t.calls == (n)), snap ": done"); \
	} while (0)
	TAKE("r1", 1);
	is_int(t.good, 1, "r1: checked, good");
	execs = fake_calls(FAKE_EXEC);
	TAKE("r2", 2);
	is_int(t.good, 1, "r2, right after with nothing done since: good");
	is_int(fake_calls(FAKE_EXEC), execs, "r2: by r1's check, no second one");
	TAKE("r3", 3);
	is_int(fake_calls(FAKE_EXEC), execs, "r3: still r1's check (taking a snapshot changes nothing in it)");

	/* An exec began and ended since: it may have changed anything; check again, and that check decides. */
	activity_begin(F, "sn-r");
	fake_env_set_exit("sn-r", 1);
	activity_end(F, "sn-r");
	TAKE("r4", 4);
	is_int(fake_calls(FAKE_EXEC), execs + 1, "r4, after an exec: checked again");
	is_int(t.good, 0, "r4: that check failed: bad");
	fake_env_set_exit("sn-r", 0);
	TAKE("r5", 5);
	is_int(fake_calls(FAKE_EXEC), execs + 2, "r5, after a failed check: checked again (a failure is never reused)");
	is_int(t.good, 1, "r5: good");

	/* An exec running during the check and after it: that check does not stand. */
	activity_begin(F, "sn-r");
	TAKE("r6", 6);
	is_int(fake_calls(FAKE_EXEC), execs + 3, "r6, with an exec running: checked");
	activity_end(F, "sn-r");
	TAKE("r7", 7);
	is_int(fake_calls(FAKE_EXEC), execs + 4, "r7, that exec ended since r6's check: checked again");
	TAKE("r8", 8);
	is_int(fake_calls(FAKE_EXEC), execs + 4, "r8, nothing since r7's check: none");

	/* A stop and start (a state change, as lifecycle records it) between: checked again. */
	(void)lifecycle_set_state(F, "sn-r", AGENT_RUNNING, NULL);
	TAKE("r9", 9);
	is_int(fake_calls(FAKE_EXEC), execs + 5, "r9, after a state change: checked again");

	/*
	 * Removed and created again under its name: r9's check was of the old
	 * environment. (Its counter once began again at 0 and could meet the
	 * value r9's check recorded.)
	 */
	{
		_cleanup_(agent_freep) struct agent *a = NULL;
		_cleanup_free_ char *why = NULL;

		is_int(db_agent_get(F->db, "sn-r", &a), 0, "sn-r read back");
		is_int(lifecycle_destroy(F, fake_backends[FAKE_KIND], a, true, &why), 0, "sn-r removed");
		is_int(activity_seq(F, "sn-r"), 0, "its activity entry went with it");
	}
	fixture_running(&X, "sn-r", RESTART_NEVER);
	ok(activity_seq(F, "sn-r") > 0, "the new sn-r has a counter of its own");
	TAKE("n1", 10);
	is_int(fake_calls(FAKE_EXEC), execs + 6, "n1, of the new sn-r: checked, not the old one's check");
#undef TAKE
	fixture_close(&X);
}

/* Secrets in the environment's memory (a run or exec holds them): no snapshot until they are gone. */
static void test_take_secrets(void)
{
	struct taken t = { 0 }, other = { 0 };
	_cleanup_free_ char *why = NULL;
	int calls;
	bool waited;

	fake_reset();
	fixture_open(&X, 0, NULL);
	fixture_running(&X, "sn-s", RESTART_NEVER);
	fixture_running(&X, "sn-o", RESTART_NEVER);
	secret_hold_enter(F, "sn-s", "run 7");
	calls = fake_calls(FAKE_SNAPSHOT_CREATE);
	is_int(snapshots_take(F, "sn-s", "s1", NULL, NULL, false, 0, on_taken, &t, &why), -EBUSY,
	       "a person's snapshot while a run holds secrets: refused");
	ok(why && strstr(why, "run 7 holds its secrets in memory"), "and why says so: %s", why ? why : "(none)");
	is_str(row("sn-s", "s1"), "", "no row is left");
	is_int(snapshots_take(F, "sn-o", "o1", NULL, NULL, false, 0, on_taken, &other, &why), 0,
	       "another agent's snapshot is not held up");
	ok(LOOP_UNTIL(&X, other.calls == 1) && other.r == 0, "and is taken");

	/* fleet's own (a schedule's, a run's) waits for the holder to go. */
	free(why);
	why = NULL;
	calls = fake_calls(FAKE_SNAPSHOT_CREATE);
	is_int(snapshots_take(F, "sn-s", NULL, "auto", NULL, false, SNAPSHOTS_WAIT_ANY, on_taken, &t, &why), 0,
	       "a scheduled snapshot while a run holds secrets: accepted, it waits");
	marker(&X, 2500, &waited);
	(void)LOOP_UNTIL(&X, waited);
	is_int(t.calls, 0, "it has not been taken while the secrets were held");
	is_int(fake_calls(FAKE_SNAPSHOT_CREATE), calls, "the backend was not asked");
	secret_hold_leave(F, "sn-s");
	ok(LOOP_UNTIL(&X, t.calls == 1), "the holder is gone: done() comes");
	is_int(t.r, 0, "and the snapshot is taken");
	is_int(fake_calls(FAKE_SNAPSHOT_CREATE), calls + 1, "by the backend, once");

	/* Two holders: both must go. */
	secret_hold_enter(F, "sn-s", "run 8");
	secret_hold_enter(F, "sn-s", "an exec");
	secret_hold_leave(F, "sn-s");
	ok(secret_hold_who(F, "sn-s") != NULL, "one of two holders gone: still held");
	secret_hold_leave(F, "sn-s");
	ok(secret_hold_who(F, "sn-s") == NULL, "both gone: free");
	fixture_close(&X);
}

static void take_in_child(struct fixture *x, void *arg)
{
	struct taken t = { 0 };
	char *why = NULL;

	if (snapshots_take(&x->f, "sn-k", arg, NULL, NULL, false, 0, on_taken, &t, &why) == 0)
		(void)LOOP_UNTIL(x, t.calls > 0);
}

static void delete_in_child(struct fixture *x, void *arg)
{
	char *why = NULL;

	(void)snapshots_delete(&x->f, "sn-k", arg, &why);
}

static void restore_in_child(struct fixture *x, void *arg)
{
	char *why = NULL;

	if (snapshots_restore(&x->f, "sn-k", arg, 0, on_restored, NULL, &why) == 0)
		(void)LOOP_UNTIL(x, restored.calls > 0);
}

static void test_recover(void)
{
	struct taken t = { 0 };
	_cleanup_free_ char *why = NULL;
	int deletes;

	fake_reset();
	fixture_open(&X, 0, NULL);
	fixture_running(&X, "sn-k", RESTART_NEVER);
	(void)snapshots_take(F, "sn-k", "kept", NULL, NULL, false, 0, on_taken, &t, &why);
	ok(LOOP_UNTIL(&X, t.calls == 1) && t.r == 0, "a snapshot to restore later");
	fixture_close(&X);

	/* Killed after the backend made it, before the row says so. */
	fake_set(FAKE_SNAPSHOT_CREATE, FAKE_DIE_AFTER, 0, NULL);
	ok(fixture_kill9(&X, 0, take_in_child, "made"), "kill -9 in a take, after the backend made the snapshot");
	/* Killed before the backend did anything. */
	fake_set(FAKE_SNAPSHOT_CREATE, FAKE_DIE_BEFORE, 0, NULL);
	ok(fixture_kill9(&X, 0, take_in_child, "unmade"), "kill -9 in a take, before the backend did anything");
	/* Killed in a delete: the intent is on disk, the backend still has it. */
	fake_set(FAKE_SNAPSHOT_CREATE, FAKE_OK, 0, NULL);
	fake_set(FAKE_SNAPSHOT_DELETE, FAKE_DIE_BEFORE, 0, NULL);
	ok(fixture_kill9(&X, 0, delete_in_child, "kept"), "kill -9 in a delete, before the backend's");
	fake_set(FAKE_SNAPSHOT_DELETE, FAKE_OK, 0, NULL);

	fixture_open(&X, 0, NULL);
	is_str(row("sn-k", "made"), "creating", "the take's row was written first: 'creating'");
	ok(fake_snapshot_has("sn-k", "made"), "and the backend has that snapshot");
	is_str(row("sn-k", "unmade"), "creating", "the other take's row too");
	ok(!fake_snapshot_has("sn-k", "unmade"), "which the backend never made");
	is_str(row("sn-k", "kept"), "deleting", "the delete's intent: 'deleting'");
	ok(fake_snapshot_has("sn-k", "kept"), "and the backend still has it");
	deletes = fake_calls(FAKE_SNAPSHOT_DELETE);
	snapshots_recover(F);
	is_str(row("sn-k", "made"), "", "recover: the unacknowledged take is undone (row dropped)");
	ok(!fake_snapshot_has("sn-k", "made"), "recover: and the backend's snapshot deleted");
	is_str(row("sn-k", "unmade"), "", "recover: a take the backend never made: row dropped");
	is_int(fake_calls(FAKE_SNAPSHOT_DELETE), deletes + 2, "recover: the backend was asked to delete only what it had");
	is_str(row("sn-k", "kept"), "", "recover: the interrupted delete is finished (row gone)");
	ok(!fake_snapshot_has("sn-k", "kept"), "recover: and the backend's snapshot gone");

	/* A restore cut off by kill -9 is done again at start. */
	(void)snapshots_take(F, "sn-k", "base", NULL, NULL, false, 0, on_taken, &t, &why);
	ok(LOOP_UNTIL(&X, t.calls == 2) && t.r == 0, "a snapshot 'base' (exit 0)");
	fake_env_set_exit("sn-k", 7);	/* its "files" change after the snapshot */
	fixture_close(&X);
	fake_set(FAKE_SNAPSHOT_RESTORE, FAKE_DIE_BEFORE, 0, NULL);
	ok(fixture_kill9(&X, 0, restore_in_child, "base"), "kill -9 in a restore, before the backend's");
	fake_set(FAKE_SNAPSHOT_RESTORE, FAKE_OK, 0, NULL);
	fixture_open(&X, 0, NULL);
	ok(restoring("sn-k") && strcmp(restoring("sn-k"), "base") == 0, "the restore was recorded first");
	is_int(fake_env_exit("sn-k"), 7, "(the backend never restored)");
	snapshots_recover(F);
	ok(LOOP_UNTIL(&X, fake_env_exit("sn-k") == 0), "recover: the restore is done again");
	ok(LOOP_UNTIL(&X, !restoring("sn-k")), "recover: and the record no longer says a restore is under way");
	fixture_close(&X);
}

int main(void)
{
	void (*tests[])(void) = { test_take, test_take_health, test_take_recent_check, test_take_secrets, test_recover };

	log_setup("test_core_snapshots", LOG_WARNING);
	for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
		fixture_mkdir(&X);
		tests[i]();
		fixture_cleanup(&X);
	}
	return tap_done();
}
