/*
 * The run queue's bookkeeping in the store (migration 12): each agent's
 * queued_runs counter, kept by triggers, equals count(*) of its queued runs
 * after every path a run takes (queued, refused, rolled back, started,
 * cancelled, finished, interrupted, queued again, removed with its agent, a
 * webhook delivery refused halfway); max_queued is enforced exactly;
 * db_run_heads gives each agent's oldest queued run, oldest first; and a
 * webhook queues nothing for a subscriber without a command.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/db.h"
#include "store/db_internal.h"
#include "common/util.h"
#include "../tap.h"

/* One integer a query on db gives (-1 if it gives none or fails). */
static long long sql_int(struct db *db, const char *sql, const char *agent)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	long long v = -1;

	if (db_prepare(db, &st, sql) < 0)
		return -1;
	if (agent)
		sqlite3_bind_text(st, 1, agent, -1, SQLITE_STATIC);
	if (db_step(db, st) > 0)
		v = sqlite3_column_int64(st, 0);
	return v;
}

static long long counter(struct db *db, const char *agent)
{
	return sql_int(db, "SELECT queued_runs FROM agents WHERE name = ?", agent);
}

static long long counted(struct db *db, const char *agent)
{
	return sql_int(db, "SELECT count(*) FROM runs r JOIN agents a ON a.id = r.agent_id"
			   " WHERE a.name = ? AND r.state = 'queued'", agent);
}

/* The counter of every agent against count(*), and the expected count for agent. */
static void check(struct db *db, const char *agent, long long want, const char *after)
{
	long long wrong = sql_int(db, "SELECT count(*) FROM agents a WHERE a.queued_runs !="
				      " (SELECT count(*) FROM runs r WHERE r.agent_id = a.id AND r.state = 'queued')",
				  NULL);

	ok(wrong == 0 && counter(db, agent) == want && counted(db, agent) == want,
	   "after %s: '%s' has %lld queued (counter %lld, count(*) %lld; %lld agent(s) off)", after, agent, want,
	   counter(db, agent), counted(db, agent), wrong);
}

/* An agent whose command is `true`, or none if command is NULL. */
static void add_agent_cmd(struct db *db, const char *name, int max_queued, int retry, const char *command)
{
	struct agent a = { .name = (char *)name, .backend = BACKEND_USER, .state = AGENT_STOPPED, .memory_mib = 128,
			   .vcpus = 1, .disk_gib = 1, .command = (char *)command, .max_queued = max_queued,
			   .retry_interrupted = retry };

	is_int(db_agent_insert(db, &a), 0, "agent '%s' (max_queued %d, retry_interrupted %d, command %s)", name,
	       max_queued, retry, command ? command : "none");
}

static void add_agent(struct db *db, const char *name, int max_queued, int retry)
{
	add_agent_cmd(db, name, max_queued, retry, "true");
}

/* The VM steps of the cached statement whose SQL holds needle since the last call (which resets them); -1 if none. */
static int vm_steps(struct db *db, const char *needle)
{
	for (size_t i = 0; i < DB_STMT_CACHE && db->cache[i].sql; i++)
		if (strstr(db->cache[i].sql, needle))
			return sqlite3_stmt_status(db->cache[i].st, SQLITE_STMTSTATUS_VM_STEP, 1);
	return -1;
}

static bool take_all(const char *filter, const char *type)
{
	(void)filter;
	(void)type;
	return true;
}

int main(void)
{
	char dir[] = "/tmp/fleet-test-db-runq-XXXXXX";
	struct db *db = NULL;
	int64_t id[8] = { 0 }, extra = 0;
	int cnt = -1, requeued = -1;
	char *path;

	if (!mkdtemp(dir))
		return 1;
	path = xasprintf("%s/fleet.db", dir);
	is_int(db_open(path, &db), 0, "open a new database");
	add_agent(db, "qa", 3, 0);
	add_agent(db, "qb", 100, 1);
	add_agent(db, "qc", 100, 0);
	check(db, "qa", 0, "creation");

	/* max_queued 3: exactly three wait, the fourth is refused and leaves nothing. */
	for (int i = 0; i < 3; i++)
		is_int(db_run_insert(db, "qa", "manual", &id[i]), 0, "queue run %d of qa", i + 1);
	check(db, "qa", 3, "three enqueues");
	is_int(db_run_insert(db, "qa", "manual", &extra), -EDQUOT, "a fourth is refused (-EDQUOT)");
	check(db, "qa", 3, "the refused enqueue");
	is_int(db_run_insert(db, "nobody", "manual", &extra), -ENOENT, "no such agent: -ENOENT");

	/* An enqueue with its event, inside a caller's transaction that rolls back: nothing stays. */
	{
		struct run_event ev = { .source = (char *)"cron", .received_at = 1 };

		is_int(db_run_enqueue(db, "qb", "cron", &ev, &extra), 0, "queue a run of qb with an event");
		check(db, "qb", 1, "an enqueue with its event");
		ev = (struct run_event){ .source = (char *)"cron", .received_at = 2 };
		is_int(db_begin(db), 0, "a caller's transaction");
		is_int(db_run_enqueue(db, "qb", "cron", &ev, &extra), 0, "a run queued in it");
		check(db, "qb", 2, "the enqueue inside the transaction");
		db_rollback(db);
		check(db, "qb", 1, "its rollback");
	}

	/* Start: one leaves the queue, so there is room for exactly one more. */
	is_int(db_run_start(db, id[0], "/x/1.log"), 0, "start qa's first run");
	check(db, "qa", 2, "a start");
	is_int(db_run_start(db, id[0], "/x/1.log"), -ENOENT, "starting it again changes nothing");
	check(db, "qa", 2, "a refused second start");
	is_int(db_run_insert(db, "qa", "manual", &id[3]), 0, "room for one more");
	is_int(db_run_insert(db, "qa", "manual", &extra), -EDQUOT, "and only one");
	check(db, "qa", 3, "refill");

	/* Cancel while queued; cancel of one not queued changes nothing. */
	is_int(db_run_cancel_queued(db, id[1], "cancelled"), 0, "cancel a queued run");
	check(db, "qa", 2, "a cancel");
	is_int(db_run_cancel_queued(db, id[0], "cancelled"), -ENOENT, "a running run is not cancelled as queued");
	check(db, "qa", 2, "a refused cancel");

	/* Finish: of a running run (not counted), and of a queued one (a run failed before it started). */
	is_int(db_run_finish(db, id[0], RUN_SUCCEEDED, 0, NULL), 0, "the running run ends");
	check(db, "qa", 2, "a finish of a running run");
	is_int(db_run_finish(db, id[2], RUN_FAILED, -1, "no"), 0, "a queued run fails without starting");
	check(db, "qa", 1, "a finish of a queued run");

	/* Interrupted at start: qa (retry 0) is marked interrupted; qb (retry 1) goes back to the queue once. */
	is_int(db_run_start(db, id[3], "/x/4.log"), 0, "start qa's last run");
	is_int(db_run_start(db, extra = 0, "/x/0.log"), -ENOENT, "(no run 0)");
	{
		struct run **l = NULL;
		size_t n = 0;

		is_int(db_run_list(db, "qb", RUN_QUEUED, 0, &l, &n), 0, "qb's queue");
		ok(n == 1, "one run");
		id[4] = n ? l[0]->id : 0;
		run_list_free(l);
	}
	is_int(db_run_start(db, id[4], "/x/5.log"), 0, "start qb's run");
	check(db, "qb", 0, "qb's start");
	is_int(db_runs_interrupt(db, 0, "fleetd stopped", &cnt, &requeued), 0, "fleetd restarts: interrupt");
	ok(cnt == 1 && requeued == 1, "one interrupted (qa), one queued again (qb): %d, %d", cnt, requeued);
	check(db, "qa", 0, "an interruption");
	check(db, "qb", 1, "a retry");
	is_int(db_run_start(db, id[4], "/x/5.log"), 0, "qb's run starts again");
	is_int(db_runs_interrupt(db, id[4], "fleetd stopped", &cnt, &requeued), 0, "and is cut off again");
	ok(cnt == 1 && requeued == 0, "its one retry is spent: interrupted");
	check(db, "qb", 0, "a spent retry");

	/* A webhook delivery to qa and qc: qc's full queue rolls back qa's run too. */
	{
		struct db_hook_route rt = { .name = (char *)"rq", .source = (char *)"hmac",
					    .secret = (unsigned char *)"0123456789abcdef", .secret_len = 16,
					    .max_body = 1024 };
		struct db_hook_delivery d = { .route = "rq", .delivery_id = "d1", .received_at = 5 };
		struct db_hook_result res;
		const char *what = NULL;

		is_int(db_hook_route_insert(db, &rt, "qa", NULL), 0, "a route with qa subscribed");
		is_int(db_hook_subscribe(db, "rq", "qc", NULL, &what), 0, "and qc");
		add_agent_cmd(db, "qn", 100, 0, NULL);
		is_int(db_hook_subscribe(db, "rq", "qn", NULL, &what), 0, "and qn, which has no command");
		is_int(db_hook_delivery_record(db, &d, take_all, &res), 0, "a delivery queues a run for each with a command");
		ok(res.n_runs == 2 && strcmp(res.outcome, "queued") == 0, "two runs (qa, qc), none for qn: %zu", res.n_runs);
		db_hook_result_clear(&res);
		check(db, "qn", 0, "a delivery to an agent without a command");
		check(db, "qa", 1, "a delivery (qa)");
		check(db, "qc", 1, "a delivery (qc)");
		is_int(sql_int(db, "UPDATE agents SET max_queued = 1 WHERE name = 'qc' RETURNING max_queued", NULL), 1,
		       "qc's max_queued becomes 1");
		d.delivery_id = "d2";
		is_int(db_hook_delivery_record(db, &d, take_all, &res), -EDQUOT, "the next delivery is refused");
		is_str(res.full_agent, "qc", "because of qc");
		db_hook_result_clear(&res);
		check(db, "qa", 1, "a refused delivery (qa's run rolled back)");
		check(db, "qc", 1, "a refused delivery (qc)");
		is_int((int)sql_int(db, "SELECT count(*) FROM hook_deliveries WHERE delivery_id = 'd2'", NULL), 0,
		       "the refused delivery left no dedup key");
		d.delivery_id = "d1";
		is_int(db_hook_delivery_record(db, &d, take_all, &res), 0, "a redelivery of d1 with qc's queue full");
		ok(res.n_runs == 0 && strcmp(res.outcome, "duplicate") == 0 && !res.full_agent,
		   "is a duplicate, not refused: %s", res.outcome);
		db_hook_result_clear(&res);
		check(db, "qc", 1, "a duplicate");

		/*
		 * A group commit: deliveries in one transaction see the runs the ones
		 * before them queued (the room check reads the counter in it), and the
		 * one refused takes only its own rows back.
		 */
		is_int(sql_int(db, "UPDATE agents SET max_queued = 2 WHERE name = 'qc' RETURNING max_queued", NULL), 2,
		       "qc's max_queued becomes 2");
		is_int(db_begin(db), 0, "a transaction for two deliveries");
		d.delivery_id = "d3";
		is_int(db_hook_delivery_record(db, &d, take_all, &res), 0, "the first queues (qc: 2 of 2)");
		db_hook_result_clear(&res);
		d.delivery_id = "d4";
		is_int(db_hook_delivery_record(db, &d, take_all, &res), -EDQUOT, "the second is refused in the same transaction");
		is_str(res.full_agent, "qc", "because of qc, counting the first's run");
		db_hook_result_clear(&res);
		is_int(db_commit(db), 0, "committed");
		check(db, "qa", 2, "a group commit (qa)");
		check(db, "qc", 2, "a group commit (qc)");
		is_int((int)sql_int(db, "SELECT count(*) FROM hook_deliveries WHERE delivery_id = 'd4'", NULL), 0,
		       "the refused one left no dedup key");
		is_int((int)sql_int(db, "SELECT count(*) FROM events WHERE delivery_id = 'd4'", NULL), 0, "nor an event");
		is_int((int)sql_int(db, "SELECT count(*) FROM runs r JOIN events e ON e.id = r.event_id"
				   " WHERE e.delivery_id = 'd3'", NULL), 2, "the first's two runs name its event");
		/* (RETURNING: SQLite makes every change at the first step.) */
		ok(sql_int(db, "DELETE FROM runs WHERE event_id IN (SELECT id FROM events WHERE delivery_id = 'd3')"
			   " RETURNING id", NULL) > 0, "(its runs taken away again)");
		check(db, "qa", 1, "the group commit's runs taken away (qa)");
		is_int(sql_int(db, "UPDATE agents SET max_queued = 1 WHERE name = 'qc' RETURNING max_queued", NULL), 1,
		       "(qc's max_queued 1 again)");
		check(db, "qc", 1, "the group commit's runs taken away");
	}

	/* The heads: each agent's oldest queued run, oldest first. */
	{
		struct run **h = NULL;
		size_t n = 0;
		int64_t b1 = 0, b2 = 0, a1 = 0;

		is_int(db_run_insert(db, "qb", "manual", &b1), 0, "queue qb's run");
		is_int(db_run_insert(db, "qb", "manual", &b2), 0, "and another");
		is_int(db_run_list(db, "qa", RUN_QUEUED, 0, &h, &n), 0, "qa's queue");
		a1 = n ? h[0]->id : 0;
		run_list_free(h);
		is_int(db_run_heads(db, &h, &n), 0, "the heads of the queue");
		ok(n == 3 && h[0]->id == a1 && strcmp(h[0]->agent, "qa") == 0 && strcmp(h[1]->agent, "qc") == 0 &&
		   h[2]->id == b1 && h[2]->state == RUN_QUEUED && h[3] == NULL,
		   "qa's (oldest), qc's, qb's first (not its second): %zu", n);
		run_list_free(h);
		is_int(db_run_start(db, a1, "/x/a.log"), 0, "qa's run starts");
		is_int(db_run_heads(db, &h, &n), 0, "the heads again");
		ok(n == 2 && strcmp(h[0]->agent, "qc") == 0 && h[1]->id == b1, "qc's, qb's: qa has none queued");
		run_list_free(h);
	}

	/* An agent's removal takes its runs; the others' counters stay right. */
	is_int(db_agent_delete(db, "qb"), 0, "remove qb (two queued runs)");
	check(db, "qc", 1, "another agent's removal");
	is_int((int)sql_int(db, "SELECT count(*) FROM runs r JOIN agents a ON a.id = r.agent_id WHERE a.name = 'qb'",
			    NULL), 0, "qb's runs are gone");

	/*
	 * The cost of the room check and of the heads does not grow with the
	 * queue: the virtual-machine steps SQLite counts for their statements
	 * (from the handle's cache) are the same with 10 and with 2010 runs
	 * waiting. (A count(*) of the queue, or a scan of it, takes more steps
	 * per row.)
	 */
	{
		struct run **h = NULL;
		size_t n = 0;
		int room10, room2010, heads10, heads2010;

		add_agent(db, "qd", 100000, 0);
		for (int i = 0; i < 9; i++)
			(void)db_run_insert(db, "qd", "manual", &extra);
		(void)vm_steps(db, "max_queued");
		is_int(db_run_insert(db, "qd", "manual", &extra), 0, "qd has 10 runs queued");
		room10 = vm_steps(db, "max_queued");
		(void)vm_steps(db, "ORDER BY q.id LIMIT 1");
		is_int(db_run_heads(db, &h, &n), 0, "the heads with 10 queued");
		run_list_free(h);
		heads10 = vm_steps(db, "ORDER BY q.id LIMIT 1");
		is_int(db_begin(db), 0, "queue 2000 more");
		for (int i = 0; i < 2000; i++)
			(void)db_run_insert(db, "qd", "manual", &extra);
		is_int(db_commit(db), 0, "committed");
		check(db, "qd", 2010, "2010 enqueues");
		(void)vm_steps(db, "max_queued");
		is_int(db_run_insert(db, "qd", "manual", &extra), 0, "one more");
		room2010 = vm_steps(db, "max_queued");
		(void)vm_steps(db, "ORDER BY q.id LIMIT 1");
		is_int(db_run_heads(db, &h, &n), 0, "the heads with 2011 queued");
		run_list_free(h);
		heads2010 = vm_steps(db, "ORDER BY q.id LIMIT 1");
		ok(room10 > 0 && room2010 == room10, "the room check takes as many steps (%d) as with 10 queued (%d)",
		   room2010, room10);
		ok(heads10 > 0 && heads2010 == heads10, "the heads take as many steps (%d) as with 10 queued (%d)",
		   heads2010, heads10);
	}

	db_close(db);
	{
		char *cmd = xasprintf("rm -rf %s", dir);

		if (system(cmd) != 0)
			printf("# cannot remove %s\n", dir);
		free(cmd);
	}
	free(path);
	return tap_done();
}
