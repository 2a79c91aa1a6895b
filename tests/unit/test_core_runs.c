/*
 * core/runs.c against the fake backend: one run at a time per agent, oldest
 * first, agents independent of each other; runs cut off by fleetd stopping
 * (cleanly or by kill -9) are marked interrupted and not run again.
 */
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <sys/mman.h>

#include "core/deliveries.h"
#include "hooks/proto.h"
#include "tests/fakes/core_fixture.h"
#include "tests/tap.h"

static struct fixture X;
#define F (&X.f)

/* The run's state ("" if there is none); static buffer. */
/* printf into a static buffer, for a comparison. */
static const char *xasprintf_tmp(const char *fmt, ...) _printf_(1, 2);
static const char *xasprintf_tmp(const char *fmt, ...)
{
	static char buf[128];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	return buf;
}

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

/* haystack contains needle (the message shows both when not). */
#define like(haystack, needle, ...) do { \
	const char *h_ = (haystack), *n_ = (needle); \
	ok(h_ && strstr(h_, n_), __VA_ARGS__); \
	if (!(h_ && strstr(h_, n_))) \
		fprintf(stderr, "#   '%s'\n#   does not contain '%s'\n", h_ ? h_ : "(null)", n_); \
} while (0)

/* Change the agent's run settings as PATCH does. */
static void run_settings(const char *name, int timeout_s, int max_queued, int retry)
{
	_cleanup_(agent_freep) struct agent *a = NULL;

	ok(db_agent_get(F->db, name, &a) == 0, "agent %s", name);
	if (!a)
		return;
	a->run_timeout_s = timeout_s;
	a->max_queued = max_queued;
	a->retry_interrupted = retry;
	is_int(db_agent_set_settings(F->db, a), 0, "%s: timeout %d, max queued %d, retry %d", name, timeout_s,
	       max_queued, retry);
}

static int cancel(const char *agent, int64_t id)
{
	_cleanup_free_ char *why = NULL;

	return runs_cancel(F, agent, id, &why);
}

/* Cancel a queued run and a running one (its exec is killed); over runs cannot be. */
static void test_cancel(void)
{
	int64_t r1, r2, r3;
	_cleanup_(run_freep) struct run *run = NULL;

	fake_reset();
	fixture_open(&X, FX_HEALTH | FX_RUNS, NULL);
	worker("rq-c", "work");
	worker("rq-d", "job");
	fake_set(FAKE_EXEC, FAKE_HANG, 0, NULL);
	r1 = enqueue("rq-c");
	r2 = enqueue("rq-c");
	ok(LOOP_UNTIL(&X, strcmp(run_state(r1), "running") == 0), "a run is running, another queued");
	is_int(cancel("rq-c", r2), 0, "cancel the queued one");
	is_str(run_state(r2), "cancelled", "it is cancelled at once");
	is_int(cancel("rq-d", r1), -ENOENT, "a run is cancelled through its own agent only");
	is_int(cancel("rq-c", r1), 0, "cancel the running one");
	ok(LOOP_UNTIL(&X, strcmp(run_state(r1), "cancelled") == 0), "its exec is killed and it is cancelled");
	/* (the hung exec only reports once exec_cancel killed it) then the health check after it runs: */
	is_int(fake_release(FAKE_EXEC, 0), 1, "what still runs is the health check after it, alone");
	ok(db_run_get(F->db, r1, &run) == 0 && run->error && strstr(run->error, "cancelled"), "its error says so");
	is_int(cancel("rq-c", r1), -EALREADY, "cancelling it again: it is over");
	is_int(cancel("rq-c", 999999), -ENOENT, "no such run");
	loop_now(&X);
	r3 = enqueue("rq-c");
	ok(LOOP_UNTIL(&X, strcmp(run_state(r3), "running") == 0), "the queue goes on: the next run starts");
	is_str(run_state(r2), "cancelled", "the cancelled queued one never ran");
	fake_release(FAKE_EXEC, 0);
	ok(LOOP_UNTIL(&X, strcmp(run_state(r3), "succeeded") == 0), "and succeeds");
	fake_set(FAKE_EXEC, FAKE_OK, 0, NULL);
	fixture_close(&X);
}

/* The agent's run timeout goes to the exec; an exec that times out is a timed-out run. */
static void test_timeout_and_limits(void)
{
	int64_t r1, r2, r3, r4, id;
	_cleanup_free_ char *why = NULL;
	_cleanup_(run_freep) struct run *run = NULL;

	fake_reset();
	fixture_open(&X, FX_HEALTH | FX_RUNS, NULL);
	worker("rq-t", "work");
	{
		_cleanup_(agent_freep) struct agent *a = NULL;

		ok(db_agent_get(F->db, "rq-t", &a) == 0 && a->run_timeout_s == 3600 && a->max_queued == 100 &&
		   a->retry_interrupted == 0, "defaults: timeout 3600 s, 100 queued, no retry");
	}
	run_settings("rq-t", 7, 2, 0);
	fake_set(FAKE_EXEC, FAKE_HANG, 0, NULL);
	r1 = enqueue("rq-t");
	ok(LOOP_UNTIL(&X, strcmp(run_state(r1), "running") == 0), "a run runs");
	is_int(fake_env_last_timeout("rq-t"), 7, "its exec has the agent's run timeout");
	r2 = enqueue("rq-t");
	r3 = enqueue("rq-t");
	ok(r2 > 0 && r3 > 0, "two more wait (max-queued 2)");
	is_int(runs_enqueue(F, "rq-t", "manual", &id, &why), -EDQUOT, "a third is refused: -EDQUOT");
	like(why, "queue is full: 2 runs wait", "and says why");
	is_int(fake_exec_time_out(), 1, "the exec's timeout expires");
	ok(LOOP_UNTIL(&X, strcmp(run_state(r1), "timed-out") == 0), "the run is timed-out");
	ok(db_run_get(F->db, r1, &run) == 0 && run->error && strstr(run->error, "timed out after 7 s"),
	   "its error names the timeout");
	ok(LOOP_UNTIL(&X, strcmp(run_state(r2), "running") == 0), "the next one starts");
	r4 = enqueue("rq-t");
	ok(r4 > 0, "with one running, room for one more in the queue");
	fake_set(FAKE_EXEC, FAKE_OK, 0, NULL);
	while (fake_release(FAKE_EXEC, 0) > 0 || !(strcmp(run_state(r4), "succeeded") == 0))
		if (!LOOP_UNTIL(&X, fake_hung(FAKE_EXEC) > 0 || strcmp(run_state(r4), "succeeded") == 0))
			break;
	is_str(run_state(r4), "succeeded", "the rest run");
	fixture_close(&X);
}

/* max_concurrent_runs: runs of different agents wait beyond it. */
static void test_concurrency(void)
{
	static const char *const one[] = { "max_concurrent_runs", "1", NULL };
	int64_t a, b;

	fake_reset();
	fixture_open(&X, FX_HEALTH | FX_RUNS, one);
	worker("rq-m", "work");
	worker("rq-n", "work");
	fake_set(FAKE_EXEC, FAKE_HANG, 0, NULL);
	a = enqueue("rq-m");
	b = enqueue("rq-n");
	ok(LOOP_UNTIL(&X, strcmp(run_state(a), "running") == 0), "rq-m's run runs");
	loop_now(&X);
	is_str(run_state(b), "queued", "rq-n's waits: max_concurrent_runs 1");
	is_int(fake_hung(FAKE_EXEC), 1, "one command runs");
	fake_release(FAKE_EXEC, 0);
	ok(LOOP_UNTIL(&X, strcmp(run_state(b), "running") == 0), "when it ends, rq-n's starts");
	is_str(run_state(a), "succeeded", "after rq-m's");
	fake_set(FAKE_EXEC, FAKE_OK, 0, NULL);
	fake_release(FAKE_EXEC, 0);
	ok(LOOP_UNTIL(&X, strcmp(run_state(b), "succeeded") == 0), "and succeeds");
	fixture_close(&X);
}

/* The event is the run's stdin (JSON), and FLEET_* name it. */
static void test_event_input(void)
{
	_cleanup_free_ char *why = NULL;
	struct run_event ev = { .source = (char *)"manual", .received_at = 1700000000,
				.body = (unsigned char *)"{\"x\": 1}", .body_len = 8 };
	int64_t id, plain;
	char want[64];

	fake_reset();
	fixture_open(&X, FX_HEALTH | FX_RUNS, NULL);
	worker("rq-e", "work");
	is_int(runs_enqueue_event(F, "rq-e", "manual", &ev, &id, &why), 0, "queue a run with a payload");
	ok(ev.id > 0, "its event was stored");
	ok(LOOP_UNTIL(&X, strcmp(run_state(id), "succeeded") == 0), "it runs");
	like(fake_env_last_stdin("rq-e"), "\"source\":\"manual\"", "stdin: the event as JSON, source manual");
	like(fake_env_last_stdin("rq-e"), "\"body\":\"{\\\"x\\\": 1}\"", "with the payload as body");
	like(fake_env_last_stdin("rq-e"), "\"received_at\":\"2023-11-14", "and when it came");
	snprintf(want, sizeof(want), "FLEET_RUN_ID=%" PRId64 "\n", id);
	like(fake_env_last_env("rq-e"), want, "FLEET_RUN_ID");
	like(fake_env_last_env("rq-e"), "FLEET_TRIGGER=manual\n", "FLEET_TRIGGER");
	like(fake_env_last_env("rq-e"), "FLEET_EVENT_SOURCE=manual\n", "FLEET_EVENT_SOURCE");
	like(fake_env_last_env("rq-e"), "FLEET_EVENT_TYPE=\n", "FLEET_EVENT_TYPE (none for a manual run)");
	like(fake_env_last_env("rq-e"), "FLEET_DELIVERY_ID=\n", "FLEET_DELIVERY_ID (none)");
	plain = enqueue("rq-e");
	ok(LOOP_UNTIL(&X, strcmp(run_state(plain), "succeeded") == 0), "a run without an event runs too");
	like(fake_env_last_stdin("rq-e"), "\"body\":null", "its stdin has no body");
	/* The headers column goes in as stored (fleetd wrote it with jansson); anything else through jansson. */
	{
		struct run_event hev = { .source = (char *)"github", .route = (char *)"gh", .received_at = 1700000000,
					 .headers = (char *)"{\"X-GitHub-Event\":\"push\",\"X-Note\":\"a \\\"b\\\"\"}",
					 .body = (unsigned char *)"{}", .body_len = 2 };
		const char *bad[] = { "[1,2]", "not json", "{\"a\":\"\x01\"}" };
		json_t *j, *h;
		int64_t hid;

		is_int(runs_enqueue_event(F, "rq-e", "webhook", &hev, &hid, &why), 0, "a run with stored headers");
		ok(LOOP_UNTIL(&X, strcmp(run_state(hid), "succeeded") == 0), "it runs");
		like(fake_env_last_stdin("rq-e"), "\"headers\":{\"X-GitHub-Event\":\"push\",\"X-Note\":\"a \\\"b\\\"\"},",
		     "its stdin has the headers as stored");
		j = json_loads(fake_env_last_stdin("rq-e"), JSON_REJECT_DUPLICATES, NULL);
		h = json_object_get(j, "headers");
		ok(json_is_object(j) && json_object_size(j) == 10, "stdin is one JSON object of ten members");
		is_str(json_string_value(json_object_get(h, "X-Note")), "a \"b\"", "a header read back from it");
		is_str(json_string_value(json_object_get(j, "body")), "{}", "and the body");
		json_decref(j);
		for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
			hev.id = 0;
			hev.headers = (char *)bad[i];
			is_int(runs_enqueue_event(F, "rq-e", "webhook", &hev, &hid, &why), 0, "a run with damaged headers");
			ok(LOOP_UNTIL(&X, strcmp(run_state(hid), "succeeded") == 0), "it runs");
			like(fake_env_last_stdin("rq-e"), "\"headers\":{},", "its stdin has no headers");
			j = json_loads(fake_env_last_stdin("rq-e"), 0, NULL);
			ok(json_is_object(j), "and is JSON");
			json_decref(j);
		}
	}
	fixture_close(&X);
}

static void kill_during_retry(struct fixture *x, void *arg)
{
	char *why = NULL;
	int64_t *id = arg;

	(void)runs_enqueue(&x->f, "rq-r", "manual", id, &why);
	(void)LOOP_UNTIL(x, fake_hung(FAKE_EXEC) == 1);
	raise(SIGKILL);
}

/* retry_interrupted N: a run cut off by fleetd stopping is queued again, N times in all (counted durably). */
static void test_retry(void)
{
	int64_t *id = mmap(NULL, sizeof(int64_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	_cleanup_(run_freep) struct run *r = NULL;

	fake_reset();
	fixture_open(&X, 0, NULL);
	worker("rq-r", "work");
	run_settings("rq-r", 3600, 100, 1);
	fixture_close(&X);
	fake_set(FAKE_EXEC, FAKE_HANG, 0, NULL);
	ok(fixture_kill9(&X, FX_HEALTH | FX_RUNS, kill_during_retry, id), "kill -9 of fleetd during a run");
	fixture_open(&X, FX_RECOVER | FX_HEALTH | FX_RUNS, NULL);
	ok(LOOP_UNTIL(&X, strcmp(run_state(*id), "running") == 0), "at start, it is queued again and runs (retry 1)");
	ok(db_run_get(F->db, *id, &r) == 0 && r->retries == 1, "its retries: 1");
	fixture_close(&X);	/* a clean stop cuts it off again */
	fixture_open(&X, 0, NULL);
	is_str(run_state(*id), "interrupted", "the second time it is interrupted: its one retry is used");
	fixture_close(&X);
	fake_set(FAKE_EXEC, FAKE_OK, 0, NULL);
	munmap(id, sizeof(int64_t));
}

/* The run's log, as `fleetctl logs` reads it (at most 4 KiB); static buffer. */
static const char *run_log(int64_t id)
{
	static char buf[4096];
	_cleanup_free_ char *path = xasprintf("%s/runs/%" PRId64 ".log", X.dir, id);
	FILE *fp = fopen(path, "r");
	size_t n = 0;

	if (fp) {
		n = fread(buf, 1, sizeof(buf) - 1, fp);
		fclose(fp);
	}
	buf[n] = '\0';
	return buf;
}

/*
 * An agent with secrets: its run's log never holds a value (the fake's
 * command prints "fake: exit N"; the secret is "exit 0"), and while the
 * run is in its environment no snapshot is taken.
 */
static void test_secrets(void)
{
	_cleanup_free_ char *why = NULL;
	int64_t id;

	fake_reset();
	fixture_open(&X, FX_HEALTH | FX_RUNS, NULL);
	worker("rq-s", "work");
	worker("rq-n", "work");
	is_int(secrets_set(F, "rq-s", "CODE", (const unsigned char *)"exit 0", 6, &why), 0, "a secret is set");
	id = enqueue("rq-s");
	ok(LOOP_UNTIL(&X, strcmp(run_state(id), "succeeded") == 0), "the run succeeds");
	is_str(run_log(id), "fake: [secret CODE]\n", "its log shows the marker, not the value");
	id = enqueue("rq-n");
	ok(LOOP_UNTIL(&X, strcmp(run_state(id), "succeeded") == 0), "an agent without secrets: its run succeeds");
	is_str(run_log(id), "fake: exit 0\n", "and its log is as printed");

	fake_set(FAKE_EXEC, FAKE_HANG, 0, NULL);
	id = enqueue("rq-s");
	ok(LOOP_UNTIL(&X, fake_hung(FAKE_EXEC) == 1), "a run of the agent with secrets is in its environment");
	is_str(secret_hold_who(F, "rq-s"), xasprintf_tmp("run %" PRId64, id), "the run holds its secrets");
	free(why);
	why = NULL;
	is_int(snapshots_take(F, "rq-s", "during", NULL, NULL, false, 0, NULL, NULL, &why), -EBUSY,
	       "a snapshot now is refused");
	ok(fake_release(FAKE_EXEC, 0) >= 1, "the run ends (and any health check that hung with it)");
	ok(LOOP_UNTIL(&X, strcmp(run_state(id), "succeeded") == 0), "it succeeded");
	ok(secret_hold_who(F, "rq-s") == NULL, "its secrets are no longer held");
	fake_set(FAKE_EXEC, FAKE_HANG, 0, NULL);
	id = enqueue("rq-n");
	ok(LOOP_UNTIL(&X, fake_hung(FAKE_EXEC) == 1), "a run of the agent without secrets");
	ok(secret_hold_who(F, "rq-n") == NULL, "holds nothing");
	ok(fake_release(FAKE_EXEC, 0) >= 1, "it ends");
	ok(LOOP_UNTIL(&X, strcmp(run_state(id), "succeeded") == 0), "it succeeded");
	fake_set(FAKE_EXEC, FAKE_OK, 0, NULL);
	fixture_close(&X);
}

/*
 * A webhook delivery's group commit carries the run queue's pass: the run
 * the delivery queued is 'running' (durably) when deliveries_commit()
 * returns, in that one commit, and an earlier run's end with it; the
 * command itself starts only on the loop's next pass, after the answers.
 */
static void test_group_commit(void)
{
	struct db_hook_route rt = { .name = (char *)"rp", .source = (char *)"github",
				    .secret = (unsigned char *)"0123456789abcdef-github", .secret_len = 23,
				    .max_body = 1024 };
	struct hook_delivery d = { .seq = 1, .route = (char *)"rp", .delivery_id = (char *)"d1",
				   .event_type = (char *)"push", .received_at = time(NULL) };
	struct hook_answer ans = { 0 };
	int64_t first;

	fake_reset();
	fixture_open(&X, FX_HEALTH | FX_RUNS, NULL);
	worker("rp-a", "job");
	is_int(db_hook_route_insert(F->db, &rt, "rp-a", NULL), 0, "a route with rp-a subscribed");
	fake_set(FAKE_EXEC, FAKE_HANG, 0, NULL);
	first = enqueue("rp-a");
	ok(LOOP_UNTIL(&X, fake_hung(FAKE_EXEC) == 1), "a first run is under way");
	fake_set(FAKE_EXEC, FAKE_OK, 0, NULL);
	fake_release(FAKE_EXEC, 0);	/* it ends: its end waits for the next pass */
	fake_set(FAKE_EXEC, FAKE_HANG, 0, NULL);
	is_str(run_state(first), "running", "its end is not written yet");
	is_int(deliveries_commit(F, &d, 1, &ans), 1, "a delivery is committed");
	is_int(ans.status, 202, "and answered 202");
	free(ans.body);
	free(ans.content_type);
	is_str(run_state(first), "succeeded", "the first run's end was written in the delivery's commit");
	{
		_cleanup_(run_freep) struct run *r = NULL;
		struct run **l = NULL;
		size_t n = 0;

		ok(db_run_list(F->db, "rp-a", DB_ANY_STATE, 1, &l, &n) == 0 && n == 1 && l[0]->id > first,
		   "the delivery's run is stored");
		ok(n == 1 && db_run_get(F->db, l[0]->id, &r) == 0 && r->state == RUN_RUNNING,
		   "and taken ('running') in the same commit");
		run_list_free(l);
	}
	is_int(fake_hung(FAKE_EXEC), 0, "its command has not started: the answers go first");
	ok(LOOP_UNTIL(&X, fake_hung(FAKE_EXEC) == 1), "it starts on the loop's next pass");
	fake_set(FAKE_EXEC, FAKE_OK, 0, NULL);
	fake_release(FAKE_EXEC, 0);
	loop_now(&X);
	fixture_close(&X);
}

int main(void)
{
	void (*tests[])(void) = { test_order, test_interrupt, test_cancel, test_timeout_and_limits, test_concurrency,
				  test_event_input, test_retry, test_secrets, test_group_commit };

	log_setup("test_core_runs", LOG_WARNING);
	for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
		fixture_mkdir(&X);
		tests[i]();
		fixture_cleanup(&X);
	}
	return tap_done();
}
