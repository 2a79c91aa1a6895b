/*
 * schedules: the schedules table (migration 8): an agent's cron triggers,
 * removed with it (ON DELETE CASCADE), and the transaction helpers a
 * firing uses to commit its run and its last_at together.
 */
#include "store/db.h"

#include <errno.h>
#include <sqlite3.h>
#include <string.h>

#include "common/util.h"
#include "store/db_internal.h"

#define SCHEDULE_COLUMNS "s.id, a.name, s.spec, s.tz, s.catch_up, s.payload, s.created_at, s.last_at"

void schedule_free(struct schedule *s)
{
	if (!s)
		return;
	free(s->agent);
	free(s->spec);
	free(s->tz);
	free(s->payload);
	free(s);
}

void schedule_list_free(struct schedule **list)
{
	for (size_t i = 0; list && list[i]; i++)
		schedule_free(list[i]);
	free(list);
}

static int schedule_from_row(sqlite3_stmt *st, struct schedule **ret)
{
	int cu = cron_catch_up_from_string(col_text(st, 4));
	struct schedule *s;
	const void *blob;

	if (cu < 0)
		return db_unknown_word("catch_up", col_text(st, 4), "schedule %lld of agent '%s'",
				       (long long)sqlite3_column_int64(st, 0), col_text(st, 1));
	s = xcalloc(1, sizeof(*s));
	s->id = sqlite3_column_int64(st, 0);
	s->agent = col_strdup(st, 1);
	s->spec = col_strdup(st, 2);
	s->tz = col_strdup(st, 3);
	s->catch_up = (enum cron_catch_up)cu;
	if (sqlite3_column_type(st, 5) != SQLITE_NULL) {
		blob = sqlite3_column_blob(st, 5);
		s->payload_len = (size_t)sqlite3_column_bytes(st, 5);
		s->payload = xmalloc(s->payload_len + 1);
		if (s->payload_len)
			memcpy(s->payload, blob, s->payload_len);
		s->payload[s->payload_len] = '\0';
	}
	s->created_at = sqlite3_column_int64(st, 6);
	s->last_at = sqlite3_column_int64(st, 7);
	*ret = s;
	return 0;
}

int db_schedule_insert(struct db *db, const char *agent, struct schedule *s)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int64_t now = unix_now();
	int r;

	if ((r = db_prepare(db, &st, "INSERT INTO schedules (agent_id, spec, tz, catch_up, payload, created_at, last_at)"
				     " SELECT id, ?, ?, ?, ?, ?, ? FROM agents WHERE name = ?")) < 0)
		return r;
	sqlite3_bind_text(st, 1, s->spec, -1, SQLITE_STATIC);
	bind_text_or_null(st, 2, s->tz);
	sqlite3_bind_text(st, 3, cron_catch_up_to_string(s->catch_up), -1, SQLITE_STATIC);
	if (s->payload)
		sqlite3_bind_blob(st, 4, s->payload, (int)s->payload_len, SQLITE_STATIC);
	else
		sqlite3_bind_null(st, 4);
	sqlite3_bind_int64(st, 5, now);
	sqlite3_bind_int64(st, 6, now);
	sqlite3_bind_text(st, 7, agent, -1, SQLITE_STATIC);
	if ((r = db_step_change(db, st)) < 0)
		return r;
	s->id = sqlite3_last_insert_rowid(db->h);
	s->created_at = s->last_at = now;
	return 0;
}

int db_schedule_list(struct db *db, const char *agent, struct schedule ***ret, size_t *n)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	struct schedule **list = NULL;
	size_t count = 0, cap = 0;
	int r;

	if ((r = db_prepare(db, &st, "SELECT " SCHEDULE_COLUMNS " FROM schedules s JOIN agents a ON a.id = s.agent_id"
				     " WHERE ?1 IS NULL OR a.name = ?1 ORDER BY s.id")) < 0)
		return r;
	bind_text_or_null(st, 1, agent);
	while ((r = db_step(db, st)) > 0) {
		if (count + 1 >= cap) {
			cap = cap ? cap * 2 : 8;
			list = xrealloc(list, cap * sizeof(*list));
		}
		list[count] = NULL;
		if ((r = schedule_from_row(st, &list[count])) < 0)
			break;
		list[++count] = NULL;
	}
	if (r < 0) {
		schedule_list_free(list);
		return r;
	}
	if (!list)
		list = xcalloc(1, sizeof(*list));
	*ret = list;
	*n = count;
	return 0;
}

int db_schedule_delete(struct db *db, const char *agent, int64_t id)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r;

	if ((r = db_prepare(db, &st, "DELETE FROM schedules WHERE id = ?"
				     " AND agent_id = (SELECT id FROM agents WHERE name = ?)")) < 0)
		return r;
	sqlite3_bind_int64(st, 1, id);
	sqlite3_bind_text(st, 2, agent, -1, SQLITE_STATIC);
	return db_step_change(db, st);
}

int db_schedule_set_last(struct db *db, int64_t id, int64_t last_at)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r;

	if ((r = db_prepare(db, &st, "UPDATE schedules SET last_at = ? WHERE id = ?")) < 0)
		return r;
	sqlite3_bind_int64(st, 1, last_at);
	sqlite3_bind_int64(st, 2, id);
	return db_step_change(db, st);
}

int db_begin(struct db *db)
{
	return db_exec(db, "BEGIN IMMEDIATE");
}

int db_commit(struct db *db)
{
	return db_exec(db, "COMMIT");
}

void db_rollback(struct db *db)
{
	(void)db_exec(db, "ROLLBACK");
}
