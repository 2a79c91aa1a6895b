/*
 * core/runs.c against the fake backend: one run at a time per agent, oldest
 * first, agents independent of each other; runs cut off by fleetd stopping
 * (cleanly or by kill -9) are marked interrupted and not run again.
 */
#include <inttypes.h>
#include <sys/mman.h>

#include "tests/fakes/core_fixture.h"
#include "tests/tap.h"

static struct fixture X;
#define F (&X.f)

/* The run's state ("" if there is none); static buffer. */
static const char *run_state(int64_t id)
{
	static char buf[32];
	_cleanup_(run_freep) struct run *r = NULL;

	buf[0] = '\0';
	if (db_run_get(F->db, id, &r) == 0)
		snprintf(buf, sizeof(buf), "%s", run_state_to_string(r->state));
	return buf;
}

static int64_t enqueue(const char *agent)
{
	_cleanup_free_ char *why = NULL;
	int64_t id = -1;

	if (runs_enqueue(F, agent, "manual", &id, &why) < 0)
		fprintf(stderr, "enqueue %s: %s\n", agent, why);
	return id;
}

static void worker(const char *name, const char *command)
{
	_cleanup_(agent_freep) struct agent *a = fixture_agent(name, RESTART_NEVER);

	a->command = xstrdup(command);
	a->health_interval_s = 0;
	fixture_start_agent(&X, a);
}

static void test_order(void)
{
	int64_t a1, a2, a3, a4, b1, first;
	_cleanup_free_ char *why = NULL, *log = NULL, *path = NULL;
	FILE *fp;
	char line[128] = "";

	fake_reset();
	fixture_open(&X, FX_HEALTH | FX_RUNS, NULL);
	worker("rq-a", "work");
	worker("rq-b", "job");
	is_int(runs_enqueue(F, "rq-a", "manual", &first, &why), 0, "queue a run of rq-a");
	fixture_close(&X);	/* (that one ran: see below; start again with commands that hang) */

	fake_set(FAKE_EXEC, FAKE_HANG, 0, NULL);
	fixture_open(&X, FX_HEALTH | FX_RUNS, NULL);
	ok(LOOP_UNTIL(&X, strcmp(run_state(first), "running") == 0), "the queued run starts when fleetd does");
	a1 = enqueue("rq-a");
	a2 = enqueue("rq-a");
	a3 = enqueue("rq-a");
	b1 = enqueue("rq-b");
	ok(LOOP_UNTIL(&X, strcmp(run_state(b1), "running") == 0), "rq-b's run starts beside rq-a's");
	is_str(run_state(a1), "queued", "rq-a's second run waits for its first");
	is_str(run_state(a2), "queued", "and its third");
	is_int(fake_hung(FAKE_EXEC), 2, "two commands run: one per agent");
	is_str(fake_env_last_exec("rq-a"), "sh -c work", "the agent's command, through sh -c");

	/* Each release finishes what runs (commands and the health checks after them). */
	fake_release(FAKE_EXEC, 0);
	ok(LOOP_UNTIL(&X, strcmp(run_state(a1), "running") == 0), "the oldest queued run of rq-a is next");
	is_str(run_state(first), "succeeded", "the one before it succeeded");
	is_str(run_state(b1), "succeeded", "rq-b's run succeeded");
	is_str(run_state(a2), "queued", "the one after it still waits");
	is_str(run_state(a3), "queued", "and the last");
	fake_release(FAKE_EXEC, 0);
	ok(LOOP_UNTIL(&X, strcmp(run_state(a2), "running") == 0), "then the next");
	is_str(run_state(a1), "succeeded", "after the one before it");
	is_str(run_state(a3), "queued", "the last still waits");
	fake_release(FAKE_EXEC, 0);
	ok(LOOP_UNTIL(&X, strcmp(run_state(a3), "running") == 0), "then the last");
	is_str(run_state(a2), "succeeded", "after the one before it");
	fake_release(FAKE_EXEC, 0);
	ok(LOOP_UNTIL(&X, strcmp(run_state(a3), "succeeded") == 0), "the last succeeds");
	fake_release(FAKE_EXEC, 0);	/* the health check after it */
	loop_now(&X);
	is_int(db_state(&X, "rq-a"), AGENT_RUNNING, "rq-a is still running (its checks passed)");

	/* A command that fails: a failed run with its exit code, then the check after it fails too. */
	fake_set(FAKE_EXEC, FAKE_OK, 0, NULL);
	fake_env_set_exit("rq-a", 3);
	a4 = enqueue("rq-a");
	ok(LOOP_UNTIL(&X, strcmp(run_state(a4), "failed") == 0), "a command exiting 3 is a failed run");
	{
		_cleanup_(run_freep) struct run *r = NULL;

		ok(db_run_get(F->db, a4, &r) == 0 && r->exit_code == 3, "with its exit code");
	}
	ok(LOOP_UNTIL(&X, db_state(&X, "rq-a") == AGENT_BAD),
	   "the health check after the run fails: without auto-rollback the agent turns bad");

	path = xasprintf("%s/runs/%" PRId64 ".log", X.dir, a1);
	if ((fp = fopen(path, "r"))) {
		if (!fgets(line, sizeof(line), fp))
			line[0] = '\0';
		fclose(fp);
	}
	is_str(line, "fake: exit 0\n", "the run's output is in its log");
	fake_set(FAKE_EXEC, FAKE_OK, 0, NULL);
	fixture_close(&X);
}

static void kill_during_run(struct fixture *x, void *arg)
{
	char *why = NULL;
	int64_t *ids = arg;

	(void)runs_enqueue(&x->f, "rq-k", "manual", &ids[0], &why);
	(void)runs_enqueue(&x->f, "rq-k", "manual", &ids[1], &why);
	(void)LOOP_UNTIL(x, fake_hung(FAKE_EXEC) == 1);
	raise(SIGKILL);
}

static void test_interrupt(void)
{
	int64_t *ids = mmap(NULL, 2 * sizeof(int64_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	int64_t c1, c2;

	fake_reset();
	fixture_open(&X, 0, NULL);
	worker("rq-k", "work");
	fixture_close(&X);

	fake_set(FAKE_EXEC, FAKE_HANG, 0, NULL);
	ok(fixture_kill9(&X, FX_HEALTH | FX_RUNS, kill_during_run, ids), "kill -9 of fleetd during a run");
	fake_set(FAKE_EXEC, FAKE_OK, 0, NULL);
	fixture_open(&X, FX_RECOVER | FX_HEALTH | FX_RUNS, NULL);
	{
		_cleanup_(run_freep) struct run *r = NULL;

		ok(db_run_get(F->db, ids[0], &r) == 0 && r->state == RUN_INTERRUPTED,
		   "at start, the run that was running is 'interrupted'");
		is_str(r ? r->error : NULL, "fleetd stopped during the run; it was not run again", "and says why");
	}
	ok(LOOP_UNTIL(&X, strcmp(run_state(ids[1]), "succeeded") == 0), "the queue goes on with the next run");
	is_str(run_state(ids[0]), "interrupted", "the interrupted run was not run again");

	/* A clean stop of fleetd during a run marks it interrupted too. */
	fake_set(FAKE_EXEC, FAKE_HANG, 0, NULL);
	c1 = enqueue("rq-k");
	c2 = enqueue("rq-k");
	ok(LOOP_UNTIL(&X, strcmp(run_state(c1), "running") == 0), "a run is running");
	fixture_close(&X);
	fixture_open(&X, 0, NULL);
	is_str(run_state(c1), "interrupted", "a clean stop of fleetd: the running run is interrupted");
	is_str(run_state(c2), "queued", "the queued one stays queued");
	fixture_close(&X);
	fake_set(FAKE_EXEC, FAKE_OK, 0, NULL);
	munmap(ids, 2 * sizeof(int64_t));
}

int main(void)
{
	void (*tests[])(void) = { test_order, test_interrupt };

	log_setup("test_core_runs", LOG_WARNING);
	for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
		fixture_mkdir(&X);
		tests[i]();
		fixture_cleanup(&X);
	}
	return tap_done();
}
