/*
 * db_internal: what the files of store/ share and nothing outside it sees:
 * the handle, statement helpers and row readers. db.c owns the handle, the
 * schema and its migrations; agents.c, snapshots.c, runs.c and audit.c each
 * own the queries of their table family.
 */
#ifndef FLEET_DB_INTERNAL_H
#define FLEET_DB_INTERNAL_H

#include <pthread.h>
#include <sqlite3.h>
#include <stdint.h>

#include "common/util.h"

#define DB_STMT_CACHE 48

struct db {
	sqlite3 *h;
	pthread_t owner;		/* the thread that opened it: the only one that may use the cache */
	/* Statements of the per-delivery path, prepared once (db_prepare_cached), keyed by their SQL literal. */
	struct {
		const char *sql;
		sqlite3_stmt *st;
	} cache[DB_STMT_CACHE];
};

static inline void stmt_finalizep(sqlite3_stmt **st)
{
	sqlite3_finalize(*st);
}
#define _cleanup_stmt_ _cleanup_(stmt_finalizep)

/* Map a SQLite result code to an errno, logging SQLite's words at debug. */
int db_err(struct db *db, int rc, const char *what);
/* Prepare sql into *st; -errno. */
int db_prepare(struct db *db, sqlite3_stmt **st, const char *sql);
/*
 * A statement for sql from the handle's cache (prepared on first use; SQLite
 * prepares it again by itself after a schema change), for what runs once or
 * more per webhook delivery, where parsing the SQL each time was a top cost.
 * sql must be a string literal (the key is its address). The statement is
 * the handle's: the caller releases it with _cleanup_stmt_release_ (reset,
 * bindings cleared: no read transaction stays open), never finalizes it.
 * Only on the thread that opened the handle (fleetd's loop), never while the
 * same statement is in use further up the stack: -EDEADLK (logged) then.
 */
int db_prepare_cached(struct db *db, sqlite3_stmt **st, const char *sql);
static inline void stmt_releasep(sqlite3_stmt **st)
{
	if (*st) {
		sqlite3_reset(*st);
		sqlite3_clear_bindings(*st);
	}
}
#define _cleanup_stmt_release_ _cleanup_(stmt_releasep)
/* db_exec of a statement without parameters or rows (SAVEPOINT, RELEASE) through the cache; -errno. */
int db_exec_cached(struct db *db, const char *sql);
/* 1: a row, 0: done, <0: error. */
int db_step(struct db *db, sqlite3_stmt *st);
/* Step an UPDATE or DELETE: 0 if it changed a row, -ENOENT if none matched, else -errno. */
int db_step_change(struct db *db, sqlite3_stmt *st);
/* Run sql (no parameters, no rows); -errno. */
int db_exec(struct db *db, const char *sql);

/*
 * The queue's two steps without db_run_enqueue's savepoint, for a caller
 * inside one of its own that has read the agent's row (a webhook delivery,
 * store/deliveries.c): whether an agent with max_queued and queued runs
 * may queue one more (0, or -EDQUOT), and its queued run's row (0, or
 * -errno). The rule and the row are db_run_enqueue's.
 */
int db_run_room(int64_t max_queued, int64_t queued);
int db_run_insert_queued(struct db *db, int64_t agent_id, const char *trigger, int64_t event_id, int64_t *ret_id);

void bind_text_or_null(sqlite3_stmt *st, int col, const char *text);
/* Column col as a new string, NULL for SQL NULL; never a pointer into the statement. */
char *col_strdup(sqlite3_stmt *st, int col);
/* Column col as text (NULL for SQL NULL), valid until the next step. */
static inline const char *col_text(sqlite3_stmt *st, int col)
{
	return (const char *)sqlite3_column_text(st, col);
}

/*
 * A column holds a word its name table does not know (a newer fleetd's, or
 * damage): log which row (fmt...) and column, never guess a value.
 * Returns -EBADMSG.
 */
int db_unknown_word(const char *column, const char *word, const char *fmt, ...) _printf_(3, 4);

int64_t unix_now(void);

/* Insert ev as an events row with outcome (may be NULL); sets ev->id. -errno. */
struct run_event;
int db_event_insert(struct db *db, struct run_event *ev, const char *outcome);

#endif
