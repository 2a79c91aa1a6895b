/*
 * audit: the audit table: one record per state-changing API call (written
 * by the API's reply path) and per automatic action (rollback, retention,
 * schedules), and the counts health.c rate-limits rollbacks with.
 */
#include "store/db.h"

#include <errno.h>
#include <sqlite3.h>
#include <time.h>

#include "common/util.h"
#include "store/db_internal.h"

int db_audit_add(struct db *db, long uid, const char *action, const char *target,
		 const char *outcome, const char *detail)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	struct timespec ts;
	int r;

	clock_gettime(CLOCK_REALTIME, &ts);
	if ((r = db_prepare(db, &st,
			    "INSERT INTO audit (at_ms, uid, action, target, outcome, detail)"
			    " VALUES (?, ?, ?, ?, ?, ?)")) < 0)
		return r;
	sqlite3_bind_int64(st, 1, (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
	sqlite3_bind_int64(st, 2, uid);
	sqlite3_bind_text(st, 3, action, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 4, target, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 5, outcome, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 6, detail, -1, SQLITE_STATIC);
	return (r = db_step(db, st)) < 0 ? r : 0;	/* -ENOSPC on a full disk says more than -EIO */
}

/*
 * Without the WAL's fsync (synchronous = NORMAL for this one commit): the row
 * is in the WAL when this returns, so it survives kill -9 of fleetd, and on
 * disk at the next synced commit or checkpoint; only a power loss before
 * that loses it. For the records of frequent calls whose own work is no
 * write (an exec: its fsync, 1.2 ms on a virtio disk, ran beside the
 * command's start and woke the loop on its CPU). Inside a transaction the
 * level cannot change: the row is synced then, as db_audit_add's.
 */
int db_audit_add_unsynced(struct db *db, long uid, const char *action, const char *target,
			  const char *outcome, const char *detail)
{
	int r, q;

	if (db_exec_cached(db, "PRAGMA synchronous = NORMAL") < 0)
		return db_audit_add(db, uid, action, target, outcome, detail);
	r = db_audit_add(db, uid, action, target, outcome, detail);
	q = db_exec_cached(db, "PRAGMA synchronous = FULL");
	return r < 0 ? r : q;
}

int db_audit_count(struct db *db, const char *action, const char *agent, int64_t since_ms, int *ret)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r;

	/* A target is the agent's name or NAME/SNAPSHOT. */
	if ((r = db_prepare(db, &st, "SELECT count(*) FROM audit WHERE action = ?1 AND at_ms >= ?3"
				     " AND (target = ?2 OR substr(target, 1, length(?2) + 1) = ?2 || '/')")) < 0)
		return r;
	sqlite3_bind_text(st, 1, action, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, agent, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 3, since_ms);
	if ((r = db_step(db, st)) <= 0)
		return r < 0 ? r : -EIO;
	*ret = sqlite3_column_int(st, 0);
	return 0;
}

void audit_entries_free(struct audit_entry *e, size_t n)
{
	for (size_t i = 0; e && i < n; i++) {
		free(e[i].action);
		free(e[i].target);
		free(e[i].outcome);
		free(e[i].detail);
	}
	free(e);
}

int db_audit_list(struct db *db, int limit, struct audit_entry **ret, size_t *n)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	struct audit_entry *e;
	size_t count = 0;
	int r;

	if (limit <= 0)
		limit = 1;
	if ((r = db_prepare(db, &st,
			    "SELECT id, at_ms, uid, action, target, outcome, detail FROM"
			    " (SELECT * FROM audit ORDER BY id DESC LIMIT ?) ORDER BY id")) < 0)
		return r;
	sqlite3_bind_int(st, 1, limit);
	e = xcalloc((size_t)limit, sizeof(*e));
	while ((r = db_step(db, st)) > 0 && count < (size_t)limit) {
		e[count].id = sqlite3_column_int64(st, 0);
		e[count].at_ms = sqlite3_column_int64(st, 1);
		e[count].uid = (long)sqlite3_column_int64(st, 2);
		e[count].action = col_strdup(st, 3);
		e[count].target = col_strdup(st, 4);
		e[count].outcome = col_strdup(st, 5);
		e[count].detail = col_strdup(st, 6);
		count++;
	}
	if (r < 0) {
		audit_entries_free(e, count);
		return r;
	}
	*ret = e;
	*n = count;
	return 0;
}
