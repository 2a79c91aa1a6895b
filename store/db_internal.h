/*
 * db_internal: what the files of store/ share and nothing outside it sees:
 * the handle, statement helpers and row readers. db.c owns the handle, the
 * schema and its migrations; agents.c, snapshots.c, runs.c and audit.c each
 * own the queries of their table family.
 */
#ifndef FLEET_DB_INTERNAL_H
#define FLEET_DB_INTERNAL_H

#include <sqlite3.h>
#include <stdint.h>

#include "common/util.h"

struct db {
	sqlite3 *h;
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
/* 1: a row, 0: done, <0: error. */
int db_step(struct db *db, sqlite3_stmt *st);
/* Step an UPDATE or DELETE: 0 if it changed a row, -ENOENT if none matched, else -errno. */
int db_step_change(struct db *db, sqlite3_stmt *st);
/* Run sql (no parameters, no rows); -errno. */
int db_exec(struct db *db, const char *sql);

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
