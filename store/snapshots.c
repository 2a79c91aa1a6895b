/*
 * snapshots: the snapshots table: a row per snapshot of an agent, written
 * 'creating' before the backend makes it and 'deleting' before the backend
 * removes it, so a kill -9 in between leaves an intent start-up finishes
 * (core/snapshots.c). States and kinds are stored as their words
 * (model/snapshot.h); a word this fleetd does not know is an error.
 */
#include "store/db.h"

#include <errno.h>
#include <sqlite3.h>

#include "common/util.h"
#include "store/db_internal.h"

int db_snapshot_begin(struct db *db, const char *agent, const char *name, const char *note, bool pinned)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r;

	if ((r = db_prepare(db, &st,
			    "INSERT INTO snapshots (agent_id, name, kind, state, created_at, pinned, note)"
			    " SELECT id, ?, ?, ?, ?, ?, ? FROM agents WHERE name = ?")) < 0)
		return r;
	sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, snapshot_kind_to_string(SNAPSHOT_KIND_PENDING), -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 3, snapshot_state_to_string(SNAPSHOT_CREATING), -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 4, unix_now());
	sqlite3_bind_int(st, 5, pinned ? 1 : 0);
	bind_text_or_null(st, 6, note);
	sqlite3_bind_text(st, 7, agent, -1, SQLITE_STATIC);
	return db_step_change(db, st);
}

int db_snapshot_ready(struct db *db, const char *agent, const char *name, enum snapshot_kind kind,
		      long long size_bytes, int good)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r;

	/* Only a backend's answer gets here: pending (or a value outside the enum) is a bug, not a kind. */
	if (kind == SNAPSHOT_KIND_PENDING || (unsigned)kind >= SNAPSHOT_KIND__COUNT)
		return -EINVAL;
	if ((r = db_prepare(db, &st,
			    "UPDATE snapshots SET state = ?, kind = ?, size_bytes = ?, good = ?"
			    " WHERE name = ? AND agent_id = (SELECT id FROM agents WHERE name = ?)")) < 0)
		return r;
	sqlite3_bind_text(st, 1, snapshot_state_to_string(SNAPSHOT_READY), -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, snapshot_kind_to_string(kind), -1, SQLITE_STATIC);
	if (size_bytes >= 0)
		sqlite3_bind_int64(st, 3, size_bytes);
	else
		sqlite3_bind_null(st, 3);
	if (good < 0)
		sqlite3_bind_null(st, 4);
	else
		sqlite3_bind_int(st, 4, good ? 1 : 0);
	sqlite3_bind_text(st, 5, name, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 6, agent, -1, SQLITE_STATIC);
	return db_step_change(db, st);
}

#define SNAPSHOT_COLUMNS "s.id, a.name, s.name, s.kind, s.state, s.created_at, s.size_bytes, s.good, s.pinned, s.note"

/* Copy one row of SNAPSHOT_COLUMNS into *ret; -EBADMSG (logged) for a kind or state this fleetd does not know. */
static int snapshot_from_row(sqlite3_stmt *st, struct snapshot **ret)
{
	int kind = snapshot_kind_from_string(col_text(st, 3));
	int state = snapshot_state_from_string(col_text(st, 4));
	struct snapshot *s;

	if (kind < 0 || state < 0)
		return db_unknown_word(kind < 0 ? "kind" : "state", col_text(st, kind < 0 ? 3 : 4),
				       "snapshot '%s' of agent '%s'", col_text(st, 2), col_text(st, 1));
	s = xcalloc(1, sizeof(*s));
	s->id = sqlite3_column_int64(st, 0);
	s->agent = col_strdup(st, 1);
	s->name = col_strdup(st, 2);
	s->kind = (enum snapshot_kind)kind;
	s->state = (enum snapshot_state)state;
	s->created_at = sqlite3_column_int64(st, 5);
	s->size_bytes = sqlite3_column_type(st, 6) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, 6);
	s->good = sqlite3_column_type(st, 7) == SQLITE_NULL ? -1 : sqlite3_column_int(st, 7);
	s->pinned = sqlite3_column_int(st, 8) != 0;
	s->note = col_strdup(st, 9);
	*ret = s;
	return 0;
}

int db_snapshot_get(struct db *db, const char *agent, const char *name, struct snapshot **ret)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r;

	if ((r = db_prepare(db, &st, "SELECT " SNAPSHOT_COLUMNS " FROM snapshots s JOIN agents a ON a.id = s.agent_id"
				     " WHERE a.name = ? AND s.name = ?")) < 0)
		return r;
	sqlite3_bind_text(st, 1, agent, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC);
	if ((r = db_step(db, st)) <= 0)
		return r == 0 ? -ENOENT : r;
	return snapshot_from_row(st, ret);
}

int db_snapshot_list(struct db *db, const char *agent, int state, struct snapshot ***ret, size_t *n)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	struct snapshot **list;
	size_t count = 0;
	int r;

	if (state != DB_ANY_STATE && (unsigned)state >= SNAPSHOT_STATE__COUNT)
		return -EINVAL;
	if ((r = db_prepare(db, &st, "SELECT " SNAPSHOT_COLUMNS " FROM snapshots s JOIN agents a ON a.id = s.agent_id"
				     " WHERE (?1 IS NULL OR a.name = ?1) AND (?2 IS NULL OR s.state = ?2)"
				     " ORDER BY s.created_at, s.id")) < 0)
		return r;
	bind_text_or_null(st, 1, agent);
	bind_text_or_null(st, 2, state == DB_ANY_STATE ? NULL : snapshot_state_to_string(state));
	list = xcalloc(1, sizeof(*list));
	while ((r = db_step(db, st)) > 0) {
		list = xrealloc(list, (count + 2) * sizeof(*list));
		list[count + 1] = NULL;
		if ((r = snapshot_from_row(st, &list[count])) < 0)
			break;
		list[++count] = NULL;
	}
	if (r < 0) {
		list[count] = NULL;
		snapshot_list_free(list);
		return r;
	}
	*ret = list;
	*n = count;
	return 0;
}

/* Run an UPDATE of one snapshot of agent whose parameters are (?1 value, ?2 name, ?3 agent). */
static int snapshot_update(struct db *db, const char *sql, const char *agent, const char *name,
			   sqlite3_stmt **st)
{
	int r;

	if ((r = db_prepare(db, st, sql)) < 0)
		return r;
	sqlite3_bind_text(*st, 2, name, -1, SQLITE_STATIC);
	sqlite3_bind_text(*st, 3, agent, -1, SQLITE_STATIC);
	return 0;
}

int db_snapshot_set_state(struct db *db, const char *agent, const char *name, enum snapshot_state state)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r;

	if ((unsigned)state >= SNAPSHOT_STATE__COUNT)
		return -EINVAL;
	if ((r = snapshot_update(db, "UPDATE snapshots SET state = ?1 WHERE name = ?2"
				     " AND agent_id = (SELECT id FROM agents WHERE name = ?3)", agent, name, &st)) < 0)
		return r;
	sqlite3_bind_text(st, 1, snapshot_state_to_string(state), -1, SQLITE_STATIC);
	return db_step_change(db, st);
}

int db_snapshot_set_pinned(struct db *db, const char *agent, const char *name, bool pinned)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r;

	if ((r = snapshot_update(db, "UPDATE snapshots SET pinned = ?1 WHERE name = ?2"
				     " AND agent_id = (SELECT id FROM agents WHERE name = ?3)", agent, name, &st)) < 0)
		return r;
	sqlite3_bind_int(st, 1, pinned ? 1 : 0);
	return db_step_change(db, st);
}

int db_snapshot_delete(struct db *db, const char *agent, const char *name)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r;

	if ((r = snapshot_update(db, "DELETE FROM snapshots WHERE name = ?2"
				     " AND agent_id = (SELECT id FROM agents WHERE name = ?3)", agent, name, &st)) < 0)
		return r;
	return db_step_change(db, st);
}
