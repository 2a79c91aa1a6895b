/* The SQLite layer on a real database file: schema, agents, snapshots, runs, audit, reopen. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/db.h"
#include "store/db_internal.h"
#include "common/util.h"
#include "../tap.h"

/* What migration 9 (webhook routes, #11) adds, taken out again to make an older database from a new one. */
#define UNDO_MIGRATION_9 \
	" DROP TABLE hook_deliveries; DROP TABLE hook_subscriptions; DROP TABLE hook_routes;" \
	" DROP INDEX events_by_time; ALTER TABLE events DROP COLUMN event_type; ALTER TABLE events DROP COLUMN outcome;"

/* Migration 12 undone (before the columns it reads go): the queued-runs counter and its triggers. */
#define UNDO_MIGRATION_12 \
	" DROP TRIGGER IF EXISTS runs_queued_insert; DROP TRIGGER IF EXISTS runs_queued_delete;" \
	" DROP TRIGGER IF EXISTS runs_queued_update; ALTER TABLE agents DROP COLUMN queued_runs;"

#define NAMES_SQL "SELECT name FROM agents WHERE name >= ? ORDER BY name"

/* The cached statement from another thread: refused (the cache is the opening thread's). */
static void *cached_off_thread(void *arg)
{
	sqlite3_stmt *st = NULL;

	return (void *)(intptr_t)db_prepare_cached(arg, &st, NAMES_SQL);
}

/* One use of the cached NAMES_SQL: the first name >= from, copied into buf ("" for none); 0 or -errno. */
static int first_name(struct db *db, const char *from, char *buf, size_t len)
{
	_cleanup_stmt_release_ sqlite3_stmt *st = NULL;
	int r;

	buf[0] = '\0';
	if ((r = db_prepare_cached(db, &st, NAMES_SQL)) < 0)
		return r;
	sqlite3_bind_text(st, 1, from, -1, SQLITE_STATIC);
	if ((r = db_step(db, st)) > 0)
		snprintf(buf, len, "%s", col_text(st, 0));
	return r < 0 ? r : 0;
}

static struct agent *make_agent(const char *name)
{
	struct agent *a = xcalloc(1, sizeof(*a));

	a->name = xstrdup(name);
	a->backend = BACKEND_USER;
	a->state = AGENT_DEFINED;
	a->memory_mib = 512;
	a->vcpus = 2;
	a->disk_gib = 3;
	a->command = xstrdup("echo 'quoted' \"and\" ; DROP TABLE agents; --");
	return a;
}

/*
 * The first line sqlite3's command-line tool prints for sql on the database
 * at path (the rows as stored, not as db.c reads them), without its newline;
 * "" if none. A static buffer.
 */
static const char *sql_line(const char *path, const char *sql)
{
	static char line[256];
	char *cmd = xasprintf("sqlite3 %s \"%s\"", path, sql);
	FILE *p = popen(cmd, "r");

	line[0] = '\0';
	if (p) {
		if (!fgets(line, sizeof(line), p))
			line[0] = '\0';
		pclose(p);
	}
	line[strcspn(line, "\n")] = '\0';
	free(cmd);
	return line;
}

/* Run sql with sqlite3's command-line tool on the database at path (as an outsider would); 0 on success. */
static int sql_exec(const char *path, const char *sql)
{
	char *cmd = xasprintf("sqlite3 %s \"%s\"", path, sql);
	int r = system(cmd);

	free(cmd);
	return r;
}

int main(void)
{
	char dir[] = "/tmp/fleet-test-db-XXXXXX";
	struct db *db = NULL;
	struct agent *a, *got = NULL, **list = NULL;
	struct audit_entry *e = NULL;
	size_t n = 0;
	long count = -1;
	char *path, *cmd;

	if (!mkdtemp(dir))
		return 1;
	path = xasprintf("%s/fleet.db", dir);

	is_int(db_open(path, &db), 0, "open creates and migrates the database");
	a = make_agent("triage");
	is_int(db_agent_insert(db, a), 0, "insert agent");
	ok(a->id > 0 && a->created_at > 0, "insert fills id and created_at");
	is_int(db_agent_insert(db, a), -EEXIST, "second insert with the same name is -EEXIST");
	agent_free(a);
	a = make_agent("review");
	is_int(db_agent_insert(db, a), 0, "insert a second agent");
	agent_free(a);

	is_int(db_agent_get(db, "triage", &got), 0, "get by name");
	is_str(got->name, "triage", "name round-trips");
	is_int(got->backend, BACKEND_USER, "backend round-trips");
	is_int(got->memory_mib, 512, "memory round-trips");
	is_str(got->command, "echo 'quoted' \"and\" ; DROP TABLE agents; --", "SQL-looking text is stored as data");
	agent_free(got);
	is_int(db_agent_get(db, "nobody", &got), -ENOENT, "unknown agent is -ENOENT");

	is_int(db_agent_list(db, &list, &n), 0, "list");
	is_int(n, 2, "two agents");
	is_str(list[0]->name, "review", "sorted by name");
	agent_list_free(list);

	/* fleetctl move's commit: one statement, only from the host it is on, only to a host that exists. */
	{
		struct host h2 = { .name = "h2", .uri = "qemu+unix:///system" };
		struct agent *vm = make_agent("mover");

		vm->backend = BACKEND_VM;
		vm->host = xstrdup(HOST_LOCAL);
		is_int(db_agent_insert(db, vm), 0, "a vm agent on local");
		is_int(db_host_insert(db, &h2), 0, "a host h2");
		is_int(db_agent_set_host(db, "mover", "h2", HOST_LOCAL), -ENOENT, "a move from a host it is not on changes nothing");
		is_int(db_agent_set_host(db, "mover", HOST_LOCAL, "h3"), -ENOENT, "nor one to a host that is not there");
		is_int(db_agent_set_host(db, "mover", HOST_LOCAL, "h2"), 0, "local to h2");
		is_int(db_agent_get(db, "mover", &got), 0, "read back");
		is_str(got->host, "h2", "it is on h2");
		agent_free(got);
		is_int(db_host_delete(db, "h2"), -EBUSY, "h2 cannot be removed under it");
		is_int(db_agent_set_host(db, "mover", "h2", HOST_LOCAL), 0, "and back");
		is_int(db_host_delete(db, "h2"), 0, "now h2 goes");
		is_int(db_agent_delete(db, "mover"), 0, "remove the agent again");
		agent_free(vm);
	}

	/* The statement cache of the per-delivery path: one statement per SQL, reset after each use. */
	{
		sqlite3_stmt *st1 = NULL, *st2 = NULL;
		char name[32];
		void *res = NULL;
		pthread_t t;

		is_int(first_name(db, "a", name, sizeof(name)), 0, "a cached statement runs");
		is_str(name, "review", "and finds the first row");
		is_int(first_name(db, "s", name, sizeof(name)), 0, "the same statement again, with a new binding");
		is_str(name, "triage", "reset and bound afresh, it finds the other row");
		is_int(db_prepare_cached(db, &st1, NAMES_SQL), 0, "taken from the cache");
		sqlite3_bind_text(st1, 1, "a", -1, SQLITE_STATIC);
		is_int(db_step(db, st1), 1, "stepped: a row pending");
		is_int(db_prepare_cached(db, &st2, NAMES_SQL), -EDEADLK, "while in use it is not handed out again");
		stmt_releasep(&st1);
		is_int(db_prepare_cached(db, &st2, NAMES_SQL), 0, "released, it is");
		ok(st1 == st2, "and it is the one statement, not prepared again");
		stmt_releasep(&st2);
		ok(pthread_create(&t, NULL, cached_off_thread, db) == 0 && pthread_join(t, &res) == 0 &&
			   (intptr_t)res == -EDEADLK, "another thread is refused the cache");
		is_int(db_exec_cached(db, "SAVEPOINT test_cache"), 0, "a savepoint through the cache");
		is_int(db_exec(db, "CREATE TABLE cache_probe (x)"), 0, "a schema change inside it");
		is_int(db_exec_cached(db, "RELEASE test_cache"), 0, "released through the cache");
		is_int(first_name(db, "t", name, sizeof(name)), 0, "the cached statement after a schema change");
		is_str(name, "triage", "still finds its row");
		is_int(db_exec(db, "DROP TABLE cache_probe"), 0, "schema restored");
	}

	is_int(db_agent_set_state(db, "review", AGENT_MISSING, "its user is gone"), 0, "set state with a detail");
	{
		struct agent *m = NULL;
		is_int(db_agent_get(db, "review", &m), 0, "get after set state");
		is_int(m ? (int)m->state : -1, AGENT_MISSING, "state missing stored");
		is_str(m ? m->state_detail : NULL, "its user is gone", "its detail stored");
		agent_free(m);
	}
	is_int(db_agent_set_state(db, "review", AGENT_RUNNING, NULL), 0, "set state");
	is_int(db_agent_set_state(db, "nobody", AGENT_RUNNING, NULL), -ENOENT, "set state of unknown is -ENOENT");

	is_int(db_audit_add(db, 0, "agent.create", "triage", "ok", NULL), 0, "audit add");
	is_int(db_audit_add(db, 1000, "agent.remove", "x", "refused", "no such agent"), 0, "audit add 2");
	is_int(db_audit_list(db, 1, &e, &n), 0, "audit list with limit");
	is_int(n, 1, "limit respected");
	is_str(e[0].action, "agent.remove", "newest record returned");
	is_int(e[0].uid, 1000, "uid recorded");
	audit_entries_free(e, n);
	{
		int cnt = -1;

		is_int(db_audit_add(db, 0, "auto.rollback.start", "triage/s1", "started", NULL), 0, "audit a rollback");
		is_int(db_audit_add(db, 0, "auto.rollback.start", "triage", "started", NULL), 0, "and one without snapshot");
		is_int(db_audit_add(db, 0, "auto.rollback.start", "triage2/s1", "started", NULL), 0, "and another agent's");
		is_int(db_audit_count(db, "auto.rollback.start", "triage", 0, &cnt), 0, "count");
		is_int(cnt, 2, "counts NAME and NAME/..., not NAME2/...");
		is_int(db_audit_count(db, "auto.rollback.start", "triage", INT64_MAX, &cnt), 0, "count since later");
		is_int(cnt, 0, "nothing since then");
	}

	/* Snapshot settings, the restore marker and snapshot row states. */
	{
		struct snapshot **snaps = NULL;
		struct snapshot *sn = NULL;
		size_t ns = 0;

		is_int(db_agent_get(db, "triage", &got), 0, "get for snapshot settings");
		got->snapshot_policy = SNAPSHOT_POLICY_CRON;
		got->snapshot_schedule = xstrdup("*/5 * * * *");
		got->snapshot_keep = 3;
		is_int(db_agent_set_settings(db, got), 0, "store settings (snapshot policy among them)");
		agent_free(got);
		is_int(db_agent_set_restoring(db, "triage", "s1"), 0, "mark a restore under way");
		is_int(db_agent_set_restoring(db, "nobody", "s1"), -ENOENT, "restore marker of unknown is -ENOENT");
		is_int(db_agent_get(db, "triage", &got), 0, "get again");
		ok(got->snapshot_policy == SNAPSHOT_POLICY_CRON && got->snapshot_keep == 3, "policy and keep round-trip");
		is_str(got->snapshot_schedule, "*/5 * * * *", "schedule round-trips");
		is_str(got->restoring, "s1", "restore marker round-trips");
		agent_free(got);
		is_int(db_agent_set_restoring(db, "triage", NULL), 0, "clear the restore marker");
		is_int(db_agent_get(db, "triage", &got), 0, "get after clearing");
		ok(got->restoring == NULL, "no restore under way");
		agent_free(got);

		is_int(db_snapshot_begin(db, "triage", "s1", "a note", false), 0, "snapshot row begins 'creating'");
		is_int(db_snapshot_begin(db, "triage", "s1", NULL, false), -EEXIST, "a taken snapshot name is -EEXIST");
		is_int(db_snapshot_ready(db, "triage", "s1", SNAPSHOT_KIND_DIR, 4096, 1), 0, "snapshot ready");
		is_int(db_snapshot_set_pinned(db, "triage", "s1", true), 0, "pin");
		is_int(db_snapshot_set_pinned(db, "triage", "nope", true), -ENOENT, "pin of unknown is -ENOENT");
		is_int(db_snapshot_set_state(db, "triage", "s1", SNAPSHOT_DELETING), 0, "mark deleting");
		is_int(db_snapshot_list(db, "triage", SNAPSHOT_READY, &snaps, &ns), 0, "list ready");
		is_int(ns, 0, "a snapshot being deleted is not listed as ready");
		snapshot_list_free(snaps);
		is_int(db_snapshot_list(db, NULL, SNAPSHOT_DELETING, &snaps, &ns), 0, "list deleting");
		is_int(ns, 1, "it is listed as deleting (for recovery at start)");
		snapshot_list_free(snaps);
		is_int(db_snapshot_get(db, "triage", "s1", &sn), 0, "get snapshot");
		ok(sn->pinned && sn->size_bytes == 4096 && sn->kind == SNAPSHOT_KIND_DIR, "pinned, size and kind stored");
		is_int(sn->good, 1, "the health verdict is stored with the ready row");
		snapshot_free(sn);
		sn = NULL;
		is_str(sql_line(path, "SELECT kind, state FROM snapshots WHERE name = 's1'"), "dir|deleting",
		       "kind and state are stored as their words");
		is_int(db_snapshot_ready(db, "triage", "s1", SNAPSHOT_KIND_PENDING, 1, -1), -EINVAL,
		       "pending is no kind a snapshot is made as");

		/* A word this fleetd does not know (a newer one's, or damage) is an error, never a guess. */
		is_int(db_snapshot_begin(db, "triage", "s2", NULL, false), 0, "another snapshot row");
		is_str(sql_line(path, "SELECT kind, state FROM snapshots WHERE name = 's2'"), "pending|creating",
		       "it begins 'creating' of kind 'pending'");
		ok(sql_exec(path, "UPDATE snapshots SET state = 'archived' WHERE name = 's2'") == 0,
		   "give it a state this fleetd does not know");
		is_int(db_snapshot_get(db, "triage", "s2", &sn), -EBADMSG, "reading it is -EBADMSG");
		ok(sn == NULL, "and returns nothing");
		is_int(db_snapshot_list(db, "triage", DB_ANY_STATE, &snaps, &ns), -EBADMSG, "so is listing it");
		is_int(db_snapshot_list(db, "triage", SNAPSHOT_DELETING, &snaps, &ns), 0, "a list without it works");
		is_int(ns, 1, "and holds the other snapshot");
		snapshot_list_free(snaps);
		ok(sql_exec(path, "UPDATE snapshots SET state = 'ready', kind = 'tape' WHERE name = 's2'") == 0,
		   "give it a known state but a kind this fleetd does not know");
		is_int(db_snapshot_get(db, "triage", "s2", &sn), -EBADMSG, "reading it is -EBADMSG too");
		is_int(db_snapshot_list(db, NULL, SNAPSHOT_READY, &snaps, &ns), -EBADMSG, "and listing it");
		is_int(db_snapshot_delete(db, "triage", "s2"), 0, "its row can still be deleted by name");
	}

	/* Run states are stored as their words; an unknown one is an error. */
	{
		struct run *run = NULL, **runs = NULL;
		size_t nr = 0;
		int64_t id = 0;
		int cnt = -1, requeued = -1;
		char *sql;

		is_int(db_run_insert(db, "review", "manual", &id), 0, "queue a run");
		sql = xasprintf("SELECT state FROM runs WHERE id = %lld", (long long)id);
		is_str(sql_line(path, sql), "queued", "stored as 'queued'");
		is_int(db_run_list(db, "review", RUN_QUEUED, 0, &runs, &nr), 0, "list queued runs");
		ok(nr == 1 && runs[0]->id == id && runs[0]->state == RUN_QUEUED, "it is the one queued");
		run_list_free(runs);
		is_int(db_run_start(db, id, "/x/run.log"), 0, "start it");
		is_int(db_run_start(db, id, "/x/run.log"), -ENOENT, "a run not queued does not start again");
		is_str(sql_line(path, sql), "running", "stored as 'running'");
		is_int(db_runs_interrupt(db, 0, "fleetd stopped", &cnt, &requeued), 0, "interrupt running runs");
		is_int(requeued, 0, "none is queued again (retry_interrupted 0)");
		is_int(cnt, 1, "one was running");
		is_str(sql_line(path, sql), "interrupted", "stored as 'interrupted'");
		is_int(db_run_finish(db, id, RUN_SUCCEEDED, 0, NULL), 0, "finish it");
		is_str(sql_line(path, sql), "succeeded", "stored as 'succeeded'");
		is_int(db_run_get(db, id, &run), 0, "read it");
		ok(run && run->state == RUN_SUCCEEDED && run->exit_code == 0, "succeeded with exit 0");
		run_free(run);
		run = NULL;
		free(sql);
		sql = xasprintf("UPDATE runs SET state = 'paused' WHERE id = %lld", (long long)id);
		ok(sql_exec(path, sql) == 0, "give it a state this fleetd does not know");
		free(sql);
		is_int(db_run_get(db, id, &run), -EBADMSG, "reading it is -EBADMSG");
		ok(run == NULL, "and returns nothing");
		is_int(db_run_list(db, "review", DB_ANY_STATE, 0, &runs, &nr), -EBADMSG, "so is listing it");
		is_int(db_run_list(db, "review", RUN_FAILED, 0, &runs, &nr), 0, "a list without it works");
		is_int(nr, 0, "and is empty");
		run_list_free(runs);
	}

	/*
	 * A run queued inside a caller's transaction (a cron trigger records its
	 * slot with it) commits with that transaction; an old event a queued run
	 * still needs survives the events' pruning.
	 */
	{
		struct run_event ev = { .source = (char *)"cron", .delivery_id = (char *)"schedule-1-60",
					.type = (char *)"tick", .received_at = 1,
					.body = (unsigned char *)"hello", .body_len = 5 };
		struct run_event *evg = NULL;
		int64_t id = 0;
		int pruned = -1, keys = -1;

		is_int(db_begin(db), 0, "a caller's transaction");
		is_int(db_run_enqueue(db, "triage", "cron", &ev, &id), 0, "a run queued inside it");
		is_int(db_commit(db), 0, "commits with it");
		ok(ev.id > 0 && db_event_get(db, ev.id, &evg) == 0, "its event is stored");
		is_str(evg ? evg->type : NULL, "tick", "with its type");
		run_event_free(evg), evg = NULL;
		is_int(db_events_prune(db, 100, 0, &pruned, &keys), 0, "prune events before t=100");
		is_int(db_event_get(db, ev.id, &evg), 0, "the queued run's event is kept");
		run_event_free(evg);
		is_int(db_run_finish(db, id, RUN_SUCCEEDED, 0, NULL), 0, "the run ends");
		is_int(db_events_prune(db, 100, 0, &pruned, &keys), 0, "prune again");
		is_int(db_event_get(db, ev.id, &evg), -ENOENT, "now it goes");
	}

	/* Cron triggers (migration 8): stored with their payload, removed with their agent. */
	{
		struct schedule in = { .spec = "*/5 * * * *", .tz = "Asia/Kolkata", .catch_up = CRON_CATCH_UP_SKIP,
				       .payload = "a\0b", .payload_len = 3 };
		struct schedule **sl = NULL;
		size_t ns = 0;

		is_int(db_schedule_insert(db, "nobody", &in), -ENOENT, "a schedule of no agent is -ENOENT");
		is_int(db_schedule_insert(db, "triage", &in), 0, "add a schedule");
		ok(in.id > 0 && in.created_at > 0 && in.last_at == in.created_at, "with an id, and last_at its creation");
		is_int(db_schedule_set_last(db, in.id, in.created_at + 60), 0, "record a firing");
		is_int(db_schedule_list(db, "triage", &sl, &ns), 0, "list the agent's schedules");
		ok(ns == 1 && strcmp(sl[0]->spec, in.spec) == 0 && strcmp(sl[0]->tz, "Asia/Kolkata") == 0 &&
		   sl[0]->catch_up == CRON_CATCH_UP_SKIP && sl[0]->payload_len == 3 &&
		   memcmp(sl[0]->payload, "a\0b", 3) == 0 && sl[0]->last_at == in.created_at + 60,
		   "it reads back whole (spec, zone, catch-up, payload bytes, last_at)");
		schedule_list_free(sl);
		is_int(db_schedule_delete(db, "review", in.id), -ENOENT, "another agent cannot remove it");
		is_int(db_schedule_set_last(db, in.id + 1000, 1), -ENOENT, "recording a firing of none is -ENOENT");
		is_int(db_begin(db), 0, "a transaction");
		is_int(db_schedule_set_last(db, in.id, 1), 0, "a change in it");
		db_rollback(db);
		is_int(db_schedule_list(db, NULL, &sl, &ns), 0, "list all schedules");
		ok(ns == 1 && sl[0]->last_at == in.created_at + 60, "the rolled-back change is not there");
		schedule_list_free(sl);
		is_int(db_schedule_insert(db, "triage", &in), 0, "a second schedule");
		is_int(db_schedule_delete(db, "triage", in.id), 0, "remove it");
		is_int(db_schedule_delete(db, "triage", in.id), -ENOENT, "remove it twice is -ENOENT");
		is_int(db_agent_delete(db, "triage"), 0, "delete");
		is_str(sql_line(path, "SELECT count(*) FROM schedules"), "0",
		       "its schedules went with it (ON DELETE CASCADE)");
	}
	is_int(db_agent_delete(db, "triage"), -ENOENT, "delete twice is -ENOENT");
	db_close(db);
	db = NULL;

	/* Reopen: data persisted, no migration re-run. */
	is_int(db_open(path, &db), 0, "reopen");
	is_int(db_agent_count(db, &count), 0, "count");
	is_int(count, 1, "one agent left after reopen");
	is_int(db_agent_get(db, "review", &got), 0, "the other agent is still there");
	is_int(got->state, AGENT_RUNNING, "state persisted");
	agent_free(got);
	db_close(db);

	/* A version-1 database (before restart policies) migrates and keeps its rows. */
	{
		char *v1 = xasprintf("%s/v1.db", dir);
		char *mk;
		struct db *old = NULL;
		struct agent *o = NULL;

		/* The real v1 schema: every table of migration 1, then the upgrade. */
		unlink(v1);
		is_int(db_open(v1, &old), 0, "a fresh database migrates to the newest schema");
		db_close(old);
		mk = xasprintf("sqlite3 %s \"" UNDO_MIGRATION_12 " ALTER TABLE agents DROP COLUMN restart_policy;"
			       " ALTER TABLE agents DROP COLUMN health_command; ALTER TABLE agents DROP COLUMN health_interval_s;"
			       " ALTER TABLE agents DROP COLUMN auto_rollback; ALTER TABLE agents DROP COLUMN health;"
			       " ALTER TABLE agents DROP COLUMN health_at; ALTER TABLE agents DROP COLUMN health_detail;"
			       " ALTER TABLE agents DROP COLUMN last_rollback; ALTER TABLE agents DROP COLUMN snapshot_policy;"
			       " ALTER TABLE agents DROP COLUMN snapshot_schedule; ALTER TABLE agents DROP COLUMN snapshot_keep;"
			       " ALTER TABLE agents DROP COLUMN restoring; ALTER TABLE runs DROP COLUMN snapshot;"
			       " ALTER TABLE runs DROP COLUMN error; ALTER TABLE agents DROP COLUMN image;"
			       " ALTER TABLE agents DROP COLUMN boot_image; ALTER TABLE agents DROP COLUMN old_images;"
			       " ALTER TABLE agents DROP COLUMN state_detail; DROP TABLE schedules;"
			       UNDO_MIGRATION_9
			       " ALTER TABLE agents DROP COLUMN run_timeout_s; ALTER TABLE agents DROP COLUMN max_queued;"
			       " ALTER TABLE agents DROP COLUMN retry_interrupted;"
			       " ALTER TABLE secrets DROP COLUMN size; ALTER TABLE agents DROP COLUMN memory_quota_mib; ALTER TABLE agents DROP COLUMN egress_allow; ALTER TABLE agents DROP COLUMN secret_files; ALTER TABLE agents DROP COLUMN autostart; ALTER TABLE agents DROP COLUMN boot_priority; ALTER TABLE agents DROP COLUMN host; DROP TABLE hosts; PRAGMA user_version = 1;"
			       " INSERT INTO agents (name, backend, state, memory_mib, vcpus, disk_gib, created_at, updated_at)"
			       " VALUES ('old', 'vm', 'stopped', 256, 1, 2, 1, 1);\"", v1);
		ok(system(mk) == 0, "turned it back into a version-1 database with a row");
		free(mk);
		old = NULL;
		is_int(db_open(v1, &old), 0, "version 1 migrates to version %d", db_schema_version());
		is_int(db_agent_get(old, "old", &o), 0, "its agent survives the migration");
		is_int(o->restart, RESTART_ON_FAILURE, "and gets the default restart policy");
		is_int(o->health_interval_s, 60, "and the default health interval");
		ok(!o->auto_rollback && o->health == -1, "auto-rollback off, health unknown");
		ok(o->snapshot_policy == SNAPSHOT_POLICY_NONE && o->snapshot_keep == 0 && !o->snapshot_schedule &&
		   !o->restoring, "no snapshot policy, keep all, no restore under way");
		is_int(o->memory_quota_mib, MEMORY_QUOTA_DEFAULT, "and the default memory quota (migration 12)");
		{
			struct agent_images im = { 0 };
			is_int(db_agent_get_images(old, "old", &im), 0, "its guest images can be read");
			ok(!im.image && !im.boot_image && !im.old_images, "none recorded (fleetd adopts it at start)");
			im.image = "abc";
			im.boot_image = "def";
			is_int(db_agent_set_images(old, "old", &im), 0, "and recorded");
			im = (struct agent_images){ 0 };
			is_int(db_agent_get_images(old, "old", &im), 0, "and read back");
			is_str(im.boot_image, "def", "as written");
			agent_images_clear(&im);
		}
		agent_free(o);
		db_close(old);
		free(v1);
	}

	/*
	 * A version-4 database (runs without AUTOINCREMENT) migrates, keeps its
	 * runs, and from then on never hands out an id again: not even after
	 * the newest runs went with their agent.
	 */
	{
		char *v4 = xasprintf("%s/v4.db", dir);
		char *mk;
		struct db *old = NULL;
		struct agent *na;
		struct run *run = NULL;
		int64_t id = 0;

		unlink(v4);
		is_int(db_open(v4, &old), 0, "a fresh database for the version-4 case");
		db_close(old);
		/* The real v4 runs table (migrations 1 and 4), with three runs of agent 'old'. */
		mk = xasprintf("sqlite3 %s \"" UNDO_MIGRATION_12 " DROP TABLE runs; CREATE TABLE runs ("
			       " id INTEGER PRIMARY KEY,"
			       " agent_id INTEGER NOT NULL REFERENCES agents(id) ON DELETE CASCADE,"
			       " event_id INTEGER REFERENCES events(id) ON DELETE SET NULL,"
			       " trigger TEXT NOT NULL, state TEXT NOT NULL DEFAULT 'queued', queued_at INTEGER NOT NULL,"
			       " started_at INTEGER, finished_at INTEGER, exit_code INTEGER, log_path TEXT,"
			       " snapshot TEXT, error TEXT);"
			       " CREATE INDEX runs_by_agent_state ON runs (agent_id, state);"
			       " ALTER TABLE agents DROP COLUMN image; ALTER TABLE agents DROP COLUMN boot_image;"
			       " ALTER TABLE agents DROP COLUMN old_images; ALTER TABLE agents DROP COLUMN state_detail;"
			       " DROP TABLE schedules;"
			       UNDO_MIGRATION_9
			       " ALTER TABLE agents DROP COLUMN run_timeout_s; ALTER TABLE agents DROP COLUMN max_queued;"
			       " ALTER TABLE agents DROP COLUMN retry_interrupted;"
			       " ALTER TABLE secrets DROP COLUMN size; ALTER TABLE agents DROP COLUMN memory_quota_mib; ALTER TABLE agents DROP COLUMN egress_allow; ALTER TABLE agents DROP COLUMN secret_files; ALTER TABLE agents DROP COLUMN autostart; ALTER TABLE agents DROP COLUMN boot_priority; ALTER TABLE agents DROP COLUMN host; DROP TABLE hosts; PRAGMA user_version = 4;"
			       " INSERT INTO agents (id, name, backend, state, memory_mib, vcpus, disk_gib, created_at, updated_at)"
			       " VALUES (7, 'old', 'user', 'stopped', 256, 1, 2, 1, 1);"
			       " INSERT INTO runs (id, agent_id, trigger, state, queued_at, exit_code, log_path)"
			       " VALUES (1, 7, 'manual', 'succeeded', 1, 0, '/x/1.log'), (2, 7, 'manual', 'failed', 2, 3, NULL),"
			       " (3, 7, 'cron', 'queued', 3, NULL, NULL);\"", v4);
		ok(system(mk) == 0, "turned it into a version-4 database with three runs");
		free(mk);
		old = NULL;
		is_int(db_open(v4, &old), 0, "version 4 migrates to version %d", db_schema_version());
		is_int(db_run_get(old, 2, &run), 0, "run 2 survives the migration");
		ok(run && strcmp(run->agent, "old") == 0 && run->state == RUN_FAILED && run->exit_code == 3 &&
		   run->queued_at == 2, "with its agent, state, exit code and times");
		run_free(run);
		run = NULL;
		is_int(db_run_get(old, 1, &run), 0, "run 1 survives");
		ok(run && run->log_path && strcmp(run->log_path, "/x/1.log") == 0, "with its log path");
		run_free(run);
		is_int(db_agent_delete(old, "old"), 0, "remove the agent and (cascade) its runs");
		na = make_agent("new");
		is_int(db_agent_insert(old, na), 0, "a new agent");
		is_int(db_run_insert(old, "new", "manual", &id), 0, "a run of the new agent");
		ok(id > 3, "its id (%lld) is above every id used before (3): ids are never reused", (long long)id);
		agent_free(na);
		db_close(old);
		free(v4);
	}

	/*
	 * Migration 11 on a version-10 database: events loses UNIQUE (source,
	 * delivery_id) by a table rebuild that keeps every row, its id and the
	 * runs' references to it; then one delivery id can be stored for two
	 * routes of one source.
	 */
	{
		char *v10 = xasprintf("%s/v10.db", dir), *mk;
		struct db *old = NULL;
		struct agent *na = make_agent("ten");
		struct db_hook_route rt = { .name = (char *)"r1", .source = (char *)"hmac",
					    .secret = (unsigned char *)"0123456789abcdef", .secret_len = 16,
					    .max_body = 1024 };
		struct db_hook_delivery d = { .route = "r2", .delivery_id = "abc", .received_at = 7, .no_run = true };
		struct db_hook_result res;
		struct run_event *ev = NULL;
		struct run *run = NULL;

		is_int(db_open(v10, &old), 0, "a fresh database for the version-10 case");
		is_int(db_agent_insert(old, na), 0, "with an agent");
		is_int(db_hook_route_insert(old, &rt, "ten", NULL), 0, "and a route r1");
		rt.name = (char *)"r2";
		is_int(db_hook_route_insert(old, &rt, "ten", NULL), 0, "and a route r2 of the same source");
		db_close(old);
		/* Version 10's events table (migrations 1 and 9), two events and the runs they caused. */
		mk = xasprintf("sqlite3 %s \"" UNDO_MIGRATION_12 " DROP TABLE events; CREATE TABLE events (id INTEGER PRIMARY KEY,"
			       " source TEXT NOT NULL, route TEXT, delivery_id TEXT, received_at INTEGER NOT NULL,"
			       " headers TEXT, body BLOB, UNIQUE (source, delivery_id));"
			       " ALTER TABLE events ADD COLUMN event_type TEXT; ALTER TABLE events ADD COLUMN outcome TEXT;"
			       " CREATE INDEX events_by_time ON events (received_at);"
			       " INSERT INTO events VALUES (5, 'hmac', 'r1', 'abc', 3, '{}', X'68656C6C6F', 'push', 'queued');"
			       " INSERT INTO events VALUES (9, 'hmac', 'r1', 'def', 4, NULL, X'626F6479', NULL, 'queued');"
			       " INSERT INTO hook_deliveries SELECT id, 'abc', 3 FROM hook_routes WHERE name = 'r1';"
			       " INSERT INTO runs (id, agent_id, event_id, trigger, state, queued_at)"
			       "  SELECT 11, id, 5, 'hmac', 'succeeded', 3 FROM agents WHERE name = 'ten';"
			       " INSERT INTO runs (id, agent_id, event_id, trigger, state, queued_at)"
			       "  SELECT 12, id, 9, 'hmac', 'queued', 4 FROM agents WHERE name = 'ten';"
			       " ALTER TABLE secrets DROP COLUMN size; ALTER TABLE agents DROP COLUMN memory_quota_mib; ALTER TABLE agents DROP COLUMN egress_allow; ALTER TABLE agents DROP COLUMN secret_files; ALTER TABLE agents DROP COLUMN autostart; ALTER TABLE agents DROP COLUMN boot_priority; ALTER TABLE agents DROP COLUMN host; DROP TABLE hosts; PRAGMA user_version = 10;\"", v10);
		ok(system(mk) == 0, "turned it into a version-10 database with two events and their runs");
		free(mk);
		ok(sql_exec(v10, "INSERT INTO events (source, route, delivery_id, received_at) VALUES "
				 "('hmac', 'r2', 'abc', 5)") != 0, "(version 10 refuses delivery 'abc' of a second hmac route)");
		old = NULL;
		is_int(db_open(v10, &old), 0, "version 10 migrates to version %d", db_schema_version());
		is_int(db_event_get(old, 5, &ev), 0, "event 5 survives the migration");
		ok(ev && ev->body_len == 5 && memcmp(ev->body, "hello", 5) == 0 && strcmp(ev->delivery_id, "abc") == 0 &&
		   strcmp(ev->type, "push") == 0 && ev->received_at == 3 && strcmp(ev->headers, "{}") == 0,
		   "with its id, body, delivery id, type, time and headers");
		run_event_free(ev);
		ev = NULL;
		is_int(db_event_get(old, 9, &ev), 0, "event 9 survives");
		run_event_free(ev);
		is_int(db_run_get(old, 11, &run), 0, "run 11 survives");
		ok(run && run->event_id == 5, "still caused by event 5 (the rebuild kept the reference)");
		run_free(run);
		run = NULL;
		is_int(db_run_get(old, 12, &run), 0, "run 12 survives");
		ok(run && run->event_id == 9 && run->state == RUN_QUEUED, "still caused by event 9, still queued");
		is_str(sql_line(v10, "SELECT queued_runs FROM agents WHERE name = 'ten'"), "1",
		       "migration 12 counted its agent's queued run");
		run_free(run);
		is_str(sql_line(v10, "SELECT group_concat(name) FROM (SELECT name FROM sqlite_master WHERE type = 'index'"
				     " AND tbl_name = 'events' ORDER BY name)"), "events_by_route_delivery,events_by_time",
		       "events has its index on the time and the new one on (route, delivery id)");
		is_str(sql_line(v10, "PRAGMA foreign_key_check"), "", "no row breaks a reference");
		is_int(db_hook_delivery_record(old, &d, NULL, &res), 0, "delivery 'abc' of route r2 is recorded");
		is_str(res.outcome, "no-run", "(as a no-run delivery: nothing to match)");
		db_hook_result_clear(&res);
		is_str(sql_line(v10, "SELECT count(*) FROM events WHERE delivery_id = 'abc'"), "2",
		       "now the same delivery id is stored for both routes");
		is_int(db_agent_delete(old, "ten"), 0, "remove the agent");
		is_str(sql_line(v10, "SELECT count(*) FROM runs"), "0", "its runs went by cascade: foreign keys are on again");
		agent_free(na);
		db_close(old);
		free(v10);
	}

	/* A database from a newer fleetd is refused rather than damaged. */
	cmd = xasprintf("sqlite3 %s 'PRAGMA user_version = 999'", path);
	if (system(cmd) == 0) {
		db = NULL;
		is_int(db_open(path, &db), -EPROTO, "a newer schema version is refused");
	} else {
		ok(0, "sqlite3 command-line tool is installed (needed to set user_version)");
	}
	free(cmd);

	cmd = xasprintf("rm -rf %s", dir);
	if (system(cmd) != 0)
		return 1;
	free(cmd);
	free(path);
	return tap_done();
}
