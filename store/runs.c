/*
 * runs: the runs table: a row per run of an agent's command (core/runs.c),
 * queued durably before it is answered, with its state (model/run.h, stored
 * as its word; a word this fleetd does not know is an error), times, exit
 * code, log path and the snapshot taken before it. Ids come from
 * AUTOINCREMENT and are never reused (migration 5).
 */
#include "store/db.h"

#include <errno.h>
#include <sqlite3.h>
#include <string.h>

#include "common/util.h"
#include "store/db_internal.h"

#define RUN_COLUMNS "r.id, a.name, r.trigger, r.state, r.queued_at, r.started_at, r.finished_at, r.exit_code," \
	" r.log_path, r.snapshot, r.error, r.event_id, r.retries"

/* Copy one row of RUN_COLUMNS into *ret; -EBADMSG (logged) for a state this fleetd does not know. */
static int run_from_row(sqlite3_stmt *st, struct run **ret)
{
	int state = run_state_from_string(col_text(st, 3));
	struct run *r;

	if (state < 0)
		return db_unknown_word("state", col_text(st, 3), "run %lld of agent '%s'",
				       (long long)sqlite3_column_int64(st, 0), col_text(st, 1));
	r = xcalloc(1, sizeof(*r));
	r->id = sqlite3_column_int64(st, 0);
	r->agent = col_strdup(st, 1);
	r->trigger = col_strdup(st, 2);
	r->state = (enum run_state)state;
	r->queued_at = sqlite3_column_int64(st, 4);
	r->started_at = sqlite3_column_int64(st, 5);
	r->finished_at = sqlite3_column_int64(st, 6);
	r->exit_code = sqlite3_column_type(st, 7) == SQLITE_NULL ? -1 : sqlite3_column_int(st, 7);
	r->log_path = col_strdup(st, 8);
	r->snapshot = col_strdup(st, 9);
	r->error = col_strdup(st, 10);
	r->event_id = sqlite3_column_int64(st, 11);
	r->retries = sqlite3_column_int(st, 12);
	*ret = r;
	return 0;
}

/* 0 if an agent with queued runs waiting may queue one more, -EDQUOT if max_queued are waiting. */
int db_run_room(int64_t max_queued, int64_t queued)
{
	/* Not -ENOSPC: that is the disk full. */
	return queued >= max_queued ? -EDQUOT : 0;
}

/*
 * 0 if agent may queue one more run, -EDQUOT if not (db_run_room), -ENOENT
 * no such agent; *id its id. queued_runs is kept by triggers (migration
 * 12): one row read, however long the queue is.
 */
static int check_room(struct db *db, const char *agent, int64_t *id)
{
	_cleanup_stmt_release_ sqlite3_stmt *st = NULL;
	int r;

	if ((r = db_prepare_cached(db, &st, "SELECT max_queued, queued_runs, id FROM agents WHERE name = ?")) < 0)
		return r;
	sqlite3_bind_text(st, 1, agent, -1, SQLITE_STATIC);
	if ((r = db_step(db, st)) <= 0)
		return r == 0 ? -ENOENT : r;
	*id = sqlite3_column_int64(st, 2);
	return db_run_room(sqlite3_column_int64(st, 0), sqlite3_column_int64(st, 1));
}

int db_event_insert(struct db *db, struct run_event *ev, const char *outcome)
{
	_cleanup_stmt_release_ sqlite3_stmt *st = NULL;
	int r;

	if ((r = db_prepare_cached(db, &st, "INSERT INTO events (source, route, delivery_id, received_at, headers, body,"
				     " event_type, outcome) VALUES (?, ?, ?, ?, ?, ?, ?, ?)")) < 0)
		return r;
	sqlite3_bind_text(st, 1, ev->source ? ev->source : "manual", -1, SQLITE_STATIC);
	bind_text_or_null(st, 2, ev->route);
	bind_text_or_null(st, 3, ev->delivery_id);
	sqlite3_bind_int64(st, 4, ev->received_at);
	bind_text_or_null(st, 5, ev->headers);
	if (ev->body)
		sqlite3_bind_blob(st, 6, ev->body, (int)ev->body_len, SQLITE_STATIC);
	else
		sqlite3_bind_null(st, 6);
	bind_text_or_null(st, 7, ev->type);
	bind_text_or_null(st, 8, outcome);
	if ((r = db_step(db, st)) < 0)
		return r;
	ev->id = sqlite3_last_insert_rowid(db->h);
	return 0;
}

int db_run_insert_queued(struct db *db, int64_t agent_id, const char *trigger, int64_t event_id, int64_t *ret_id)
{
	_cleanup_stmt_release_ sqlite3_stmt *st = NULL;
	int r;

	if ((r = db_prepare_cached(db, &st, "INSERT INTO runs (agent_id, trigger, state, queued_at, event_id)"
				     " VALUES (?, ?, ?, ?, ?)")) < 0)
		return r;
	sqlite3_bind_int64(st, 1, agent_id);
	sqlite3_bind_text(st, 2, trigger, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 3, run_state_to_string(RUN_QUEUED), -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 4, unix_now());
	if (event_id > 0)
		sqlite3_bind_int64(st, 5, event_id);
	else
		sqlite3_bind_null(st, 5);
	if ((r = db_step(db, st)) < 0)
		return r;
	*ret_id = sqlite3_last_insert_rowid(db->h);
	return 0;
}

int db_run_enqueue(struct db *db, const char *agent, const char *trigger, struct run_event *ev, int64_t *ret_id)
{
	int64_t saved_id = ev ? ev->id : 0, agent_id = 0;
	int r;

	/*
	 * One unit: the room check, the event and the run are all there or none
	 * is. A savepoint, not BEGIN: a caller may have a transaction open (a
	 * cron trigger records its slot with the run); then it commits both,
	 * else releasing the savepoint commits. (A webhook delivery, which has a
	 * savepoint of its own, checks and inserts without this one:
	 * store/deliveries.c.)
	 */
	if ((r = db_exec_cached(db, "SAVEPOINT run_enqueue")) < 0)
		return r;
	if ((r = check_room(db, agent, &agent_id)) < 0 ||
	    (ev && ev->id == 0 && (r = db_event_insert(db, ev, NULL)) < 0) ||
	    (r = db_run_insert_queued(db, agent_id, trigger, ev ? ev->id : 0, ret_id)) < 0 ||
	    (r = db_exec_cached(db, "RELEASE run_enqueue")) < 0) {
		(void)db_exec(db, "ROLLBACK TO run_enqueue");
		(void)db_exec_cached(db, "RELEASE run_enqueue");
		if (ev)
			ev->id = saved_id;	/* the row it named was rolled back */
		return r;
	}
	return 0;
}

int db_run_insert(struct db *db, const char *agent, const char *trigger, int64_t *ret_id)
{
	return db_run_enqueue(db, agent, trigger, NULL, ret_id);
}

int db_event_get(struct db *db, int64_t id, struct run_event **ret)
{
	_cleanup_stmt_release_ sqlite3_stmt *st = NULL;
	struct run_event *e;
	int r;

	if ((r = db_prepare_cached(db, &st, "SELECT id, source, route, delivery_id, received_at, headers, body, event_type"
				     " FROM events WHERE id = ?")) < 0)
		return r;
	sqlite3_bind_int64(st, 1, id);
	if ((r = db_step(db, st)) <= 0)
		return r == 0 ? -ENOENT : r;
	e = xcalloc(1, sizeof(*e));
	e->id = sqlite3_column_int64(st, 0);
	e->source = col_strdup(st, 1);
	e->route = col_strdup(st, 2);
	e->delivery_id = col_strdup(st, 3);
	e->received_at = sqlite3_column_int64(st, 4);
	e->headers = col_strdup(st, 5);
	e->type = col_strdup(st, 7);
	if (sqlite3_column_type(st, 6) != SQLITE_NULL) {
		const void *b = sqlite3_column_blob(st, 6);

		e->body_len = (size_t)sqlite3_column_bytes(st, 6);
		e->body = xmalloc(e->body_len + 1);
		if (e->body_len)
			memcpy(e->body, b, e->body_len);
		e->body[e->body_len] = '\0';
	}
	*ret = e;
	return 0;
}

int db_run_get(struct db *db, int64_t id, struct run **ret)
{
	_cleanup_stmt_release_ sqlite3_stmt *st = NULL;
	int r;

	if ((r = db_prepare_cached(db, &st, "SELECT " RUN_COLUMNS " FROM runs r JOIN agents a ON a.id = r.agent_id"
				     " WHERE r.id = ?")) < 0)
		return r;
	sqlite3_bind_int64(st, 1, id);
	if ((r = db_step(db, st)) <= 0)
		return r == 0 ? -ENOENT : r;
	return run_from_row(st, ret);
}

/* Every row st still has, as a NULL-terminated list (*ret, *n); 0 or -errno with nothing kept. */
static int collect_runs(struct db *db, sqlite3_stmt *st, struct run ***ret, size_t *n)
{
	struct run **list = xcalloc(1, sizeof(*list));
	size_t count = 0, cap = 1;
	int r;

	while ((r = db_step(db, st)) > 0) {
		if (count + 1 >= cap) {
			cap *= 2;
			list = xrealloc(list, cap * sizeof(*list));
		}
		list[count] = NULL;
		if ((r = run_from_row(st, &list[count])) < 0)
			break;
		list[++count] = NULL;
	}
	if (r < 0) {
		run_list_free(list);
		return r;
	}
	*ret = list;
	*n = count;
	return 0;
}

int db_run_list(struct db *db, const char *agent, int state, int limit, struct run ***ret, size_t *n)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r;

	if (state != DB_ANY_STATE && (unsigned)state >= RUN_STATE__COUNT)
		return -EINVAL;
	if ((r = db_prepare(db, &st, "SELECT * FROM (SELECT " RUN_COLUMNS " FROM runs r JOIN agents a ON a.id = r.agent_id"
				     " WHERE (?1 IS NULL OR a.name = ?1) AND (?2 IS NULL OR r.state = ?2)"
				     " ORDER BY r.id DESC LIMIT ?3) ORDER BY 1")) < 0)
		return r;
	bind_text_or_null(st, 1, agent);
	bind_text_or_null(st, 2, state == DB_ANY_STATE ? NULL : run_state_to_string(state));
	sqlite3_bind_int(st, 3, limit > 0 ? limit : -1);
	return collect_runs(db, st, ret, n);
}

int db_run_heads(struct db *db, struct run ***ret, size_t *n)
{
	_cleanup_stmt_release_ sqlite3_stmt *st = NULL;
	int r;

	/*
	 * Per agent with queued runs (queued_runs, migration 12), its oldest
	 * one: the first entry of runs_by_agent_state (agent_id, state, then
	 * the rowid) for (agent, 'queued'), a seek and no scan. The literal
	 * state lets the planner see the equality; the cost is per agent, not
	 * per queued run.
	 */
	if ((r = db_prepare_cached(db, &st, "SELECT " RUN_COLUMNS " FROM agents a JOIN runs r ON r.id ="
				     " (SELECT q.id FROM runs q WHERE q.agent_id = a.id AND q.state = 'queued'"
				     " ORDER BY q.id LIMIT 1) WHERE a.queued_runs > 0 ORDER BY r.id")) < 0)
		return r;
	return collect_runs(db, st, ret, n);
}

int db_run_queue_depths(struct db *db, char ***names, long **counts, size_t *n)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	size_t k = 0, alloc = 16;
	char **nm;
	long *ct;
	int r;

	if ((r = db_prepare(db, &st, "SELECT name, queued_runs FROM agents ORDER BY name")) < 0)
		return r;
	nm = xcalloc(alloc, sizeof(*nm));
	ct = xcalloc(alloc, sizeof(*ct));
	while ((r = db_step(db, st)) > 0) {
		if (k == alloc) {
			alloc *= 2;
			nm = xrealloc(nm, alloc * sizeof(*nm));
			ct = xrealloc(ct, alloc * sizeof(*ct));
		}
		nm[k] = xstrdup((const char *)sqlite3_column_text(st, 0));
		ct[k++] = (long)sqlite3_column_int64(st, 1);
	}
	if (r < 0) {
		while (k > 0)
			free(nm[--k]);
		free(nm);
		free(ct);
		return r;
	}
	*names = nm;
	*counts = ct;
	*n = k;
	return 0;
}

int db_runs_pass_begin(struct db *db)
{
	return db_exec_cached(db, "SAVEPOINT runs_pass");
}

int db_runs_pass_end(struct db *db, bool keep)
{
	int r = keep ? db_exec_cached(db, "RELEASE runs_pass") : -ECANCELED;

	if (r < 0)
		(void)db_exec(db, "ROLLBACK TO runs_pass; RELEASE runs_pass");
	return keep ? r : 0;
}

int db_run_start(struct db *db, int64_t id, const char *log_path)
{
	_cleanup_stmt_release_ sqlite3_stmt *st = NULL;
	int r;

	if ((r = db_prepare_cached(db, &st, "UPDATE runs SET state = ?, started_at = ?, log_path = ?"
				     " WHERE id = ? AND state = ?")) < 0)
		return r;
	sqlite3_bind_text(st, 1, run_state_to_string(RUN_RUNNING), -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, unix_now());
	sqlite3_bind_text(st, 3, log_path, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 4, id);
	sqlite3_bind_text(st, 5, run_state_to_string(RUN_QUEUED), -1, SQLITE_STATIC);
	return db_step_change(db, st);
}

int db_run_set_snapshot(struct db *db, int64_t id, const char *snap)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r;

	if ((r = db_prepare(db, &st, "UPDATE runs SET snapshot = ? WHERE id = ?")) < 0)
		return r;
	sqlite3_bind_text(st, 1, snap, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, id);
	return db_step(db, st) < 0 ? -EIO : 0;
}

int db_run_finish(struct db *db, int64_t id, enum run_state state, int exit_code, const char *error)
{
	_cleanup_stmt_release_ sqlite3_stmt *st = NULL;
	int r;

	if ((unsigned)state >= RUN_STATE__COUNT)
		return -EINVAL;
	if ((r = db_prepare_cached(db, &st, "UPDATE runs SET state = ?, finished_at = ?, exit_code = ?, error = ?"
				     " WHERE id = ?")) < 0)
		return r;
	sqlite3_bind_text(st, 1, run_state_to_string(state), -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, unix_now());
	if (exit_code >= 0)
		sqlite3_bind_int(st, 3, exit_code);
	else
		sqlite3_bind_null(st, 3);
	bind_text_or_null(st, 4, error);
	sqlite3_bind_int64(st, 5, id);
	return db_step_change(db, st);
}

int db_run_cancel_queued(struct db *db, int64_t id, const char *error)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r;

	if ((r = db_prepare(db, &st, "UPDATE runs SET state = ?, finished_at = ?, error = ? WHERE id = ? AND state = ?")) < 0)
		return r;
	sqlite3_bind_text(st, 1, run_state_to_string(RUN_CANCELLED), -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, unix_now());
	bind_text_or_null(st, 3, error);
	sqlite3_bind_int64(st, 4, id);
	sqlite3_bind_text(st, 5, run_state_to_string(RUN_QUEUED), -1, SQLITE_STATIC);
	return db_step_change(db, st);
}

int db_runs_interrupt(struct db *db, int64_t id, const char *error, int *ret_count, int *ret_requeued)
{
	_cleanup_stmt_ sqlite3_stmt *rq = NULL, *st = NULL;
	int r;

	/* Runs whose agent still allows a retry go back to the queue (and count it); the rest are interrupted. */
	if ((r = db_prepare(db, &rq, "UPDATE runs SET state = ?1, started_at = NULL, retries = retries + 1"
				     " WHERE state = ?2 AND (?3 = 0 OR id = ?3)"
				     " AND retries < (SELECT retry_interrupted FROM agents a WHERE a.id = runs.agent_id)")) < 0)
		return r;
	sqlite3_bind_text(rq, 1, run_state_to_string(RUN_QUEUED), -1, SQLITE_STATIC);
	sqlite3_bind_text(rq, 2, run_state_to_string(RUN_RUNNING), -1, SQLITE_STATIC);
	sqlite3_bind_int64(rq, 3, id);
	if ((r = db_step(db, rq)) < 0)
		return r;
	*ret_requeued = sqlite3_changes(db->h);
	if ((r = db_prepare(db, &st, "UPDATE runs SET state = ?, finished_at = ?, error = ?"
				     " WHERE state = ? AND (?5 = 0 OR id = ?5)")) < 0)
		return r;
	sqlite3_bind_text(st, 1, run_state_to_string(RUN_INTERRUPTED), -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, unix_now());
	sqlite3_bind_text(st, 3, error, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 4, run_state_to_string(RUN_RUNNING), -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 5, id);
	if ((r = db_step(db, st)) < 0)
		return r;
	*ret_count = sqlite3_changes(db->h);
	return 0;
}
