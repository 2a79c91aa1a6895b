/*
 * Upgrades (#14): the database each earlier schema version's fleetd made
 * (tests/fixtures/schema/vN.sql, made once by make.sh and never edited)
 * migrates to the newest schema with every row kept, and ends with the
 * same schema as a database created new; so an edited released migration,
 * or a new one without its fixture, fails here.
 */
#include <errno.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "model/agent.h"
#include "store/db.h"
#include "../tap.h"

/* The tables the fixtures hold rows of, and those rows' count in every version that has the table. */
static const struct {
	const char *table;
	long rows;
} expect[] = {
	{ "agents", 2 }, { "snapshots", 2 }, { "events", 2 }, { "runs", 3 }, { "secrets", 1 }, { "audit", 1 },
	{ "schedules", 1 }, { "hook_routes", 1 }, { "hook_subscriptions", 1 }, { "hook_deliveries", 1 },
};

/* The text of a file (NULL if it cannot be read). */
static char *slurp(const char *path)
{
	FILE *f = fopen(path, "re");
	char *buf = NULL;
	size_t len = 0;

	if (!f)
		return NULL;
	FILE *m = open_memstream(&buf, &len);
	char chunk[4096];
	size_t n;
	while (m && (n = fread(chunk, 1, sizeof(chunk), f)) > 0)
		fwrite(chunk, 1, n, m);
	fclose(f);
	if (m)
		fclose(m);
	return buf;
}

/* One integer from sql (the first column of its first row), or -1. */
static long query_long(sqlite3 *h, const char *sql)
{
	sqlite3_stmt *st = NULL;
	long v = -1;

	if (sqlite3_prepare_v2(h, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
		v = (long)sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	return v;
}

/* Every row of sql as one text (columns joined by '|', rows by '\n'); caller frees. */
static char *query_text(sqlite3 *h, const char *sql)
{
	sqlite3_stmt *st = NULL;
	char *buf = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&buf, &len);

	if (sqlite3_prepare_v2(h, sql, -1, &st, NULL) == SQLITE_OK)
		while (sqlite3_step(st) == SQLITE_ROW) {
			for (int i = 0; i < sqlite3_column_count(st); i++) {
				const unsigned char *t = sqlite3_column_text(st, i);
				fprintf(m, "%s%s", i ? "|" : "", t ? (const char *)t : "(null)");
			}
			fputc('\n', m);
		}
	sqlite3_finalize(st);
	fclose(m);
	return buf;
}

static bool has_table(sqlite3 *h, const char *table)
{
	_cleanup_free_ char *sql = xasprintf("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = '%s'", table);

	return query_long(h, sql) == 1;
}

/* The schema to compare: every table, index and trigger with its SQL. */
static const char schema_sql[] = "SELECT type, name, tbl_name, sql FROM sqlite_master "
				 "WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name";

static void check_version(const char *srcdir, const char *dir, int v, const char *fresh_schema)
{
	_cleanup_free_ char *fixture = xasprintf("%s/tests/fixtures/schema/v%d.sql", srcdir, v);
	_cleanup_free_ char *path = xasprintf("%s/v%d.db", dir, v);
	_cleanup_free_ char *text = slurp(fixture);
	sqlite3 *h = NULL;
	struct db *db = NULL;
	struct agent *a = NULL;
	bool had[ARRAY_SIZE(expect)];
	char *err = NULL;

	ok(text != NULL, "v%d: the fixture is there (tests/fixtures/schema/make.sh makes a new version's)", v);
	if (!text)
		return;
	/* The old version's file, as it was on disk. */
	ok(sqlite3_open(path, &h) == SQLITE_OK && sqlite3_exec(h, text, NULL, NULL, &err) == SQLITE_OK,
	   "v%d: the fixture loads%s%s", v, err ? ": " : "", err ? err : "");
	sqlite3_free(err);
	is_int(query_long(h, "PRAGMA user_version"), v, "v%d: it is at schema version %d", v, v);
	for (size_t i = 0; i < ARRAY_SIZE(expect); i++)
		had[i] = has_table(h, expect[i].table);
	sqlite3_close(h);

	/* What a newer fleetd does at start. */
	is_int(db_open(path, &db), 0, "v%d: the newest fleetd opens it and migrates it", v);
	if (!db)
		return;
	is_int(db_agent_get(db, "old-user", &a), 0, "v%d: its agent reads back through the store", v);
	if (a) {
		is_str(a->backend == BACKEND_USER ? "user" : "vm", "user", "v%d: with its backend", v);
		is_int(a->memory_mib, 128, "v%d: and its memory", v);
	}
	agent_free(a);
	db_close(db);

	ok(sqlite3_open(path, &h) == SQLITE_OK, "v%d: reopened to look inside", v);
	is_int(query_long(h, "PRAGMA user_version"), db_schema_version(), "v%d: now at version %d", v,
	       db_schema_version());
	for (size_t i = 0; i < ARRAY_SIZE(expect); i++) {
		_cleanup_free_ char *sql = xasprintf("SELECT count(*) FROM %s", expect[i].table);

		if (had[i])
			is_int(query_long(h, sql), expect[i].rows, "v%d: %s keeps its %ld rows", v, expect[i].table,
			       expect[i].rows);
	}
	if (had[2])
		ok(query_long(h, "SELECT count(*) FROM events WHERE id = 1 AND body = X'7B2272656621223A2231227D'") == 1,
		   "v%d: an event's body is byte for byte the same", v);
	if (had[4])
		ok(query_long(h, "SELECT count(*) FROM secrets WHERE id = 1 AND "
				 "ciphertext = X'00112233445566778899AABBCCDDEEFF' AND nonce = X'000102030405060708090A0B'") == 1,
		   "v%d: a secret's ciphertext and nonce are the same", v);
	if (had[3])
		is_int(query_long(h, "SELECT count(*) FROM runs WHERE id = 2 AND state = 'queued' AND event_id = 2"), 1,
		       "v%d: a queued run keeps its state and its event", v);
	/* Migration 12 counts the runs that were queued before it: old-user's one. */
	is_int(query_long(h, "SELECT queued_runs FROM agents WHERE name = 'old-user'"), had[3] ? 1 : 0,
	       "v%d: the agent's queued runs are counted", v);
	_cleanup_free_ char *integrity = query_text(h, "PRAGMA integrity_check");
	is_str(integrity, "ok\n", "v%d: integrity_check is clean", v);
	_cleanup_free_ char *fk = query_text(h, "PRAGMA foreign_key_check");
	is_str(fk, "", "v%d: no foreign key points nowhere", v);
	_cleanup_free_ char *schema = query_text(h, schema_sql);
	is_str(schema, fresh_schema, "v%d: the schema is the same as a new database's", v);
	sqlite3_close(h);
}

int main(void)
{
	const char *srcdir = getenv("FLEET_SRCDIR");
	char dir[] = "/tmp/fleet-test-db-upgrade.XXXXXX";
	struct db *db = NULL;
	sqlite3 *h = NULL;

	if (!srcdir || !*srcdir)
		tap_skip_all("FLEET_SRCDIR is not set (run it through make check)");
	if (!mkdtemp(dir))
		return 1;

	/* The reference: a database created new by this build. */
	_cleanup_free_ char *fresh = xasprintf("%s/fresh.db", dir);
	is_int(db_open(fresh, &db), 0, "a new database is created at version %d", db_schema_version());
	db_close(db);
	ok(sqlite3_open(fresh, &h) == SQLITE_OK, "and opened to read its schema");
	_cleanup_free_ char *fresh_schema = query_text(h, schema_sql);
	sqlite3_close(h);

	for (int v = 1; v <= db_schema_version(); v++)
		check_version(srcdir, dir, v, fresh_schema);

	/* A database of a newer fleetd is refused, untouched. */
	_cleanup_free_ char *newer = xasprintf("%s/newer.db", dir);
	ok(sqlite3_open(newer, &h) == SQLITE_OK, "a database from a newer fleetd");
	_cleanup_free_ char *bump = xasprintf("CREATE TABLE future (x); PRAGMA user_version = %d", db_schema_version() + 1);
	ok(sqlite3_exec(h, bump, NULL, NULL, NULL) == SQLITE_OK, "(one version ahead)");
	sqlite3_close(h);
	is_int(db_open(newer, &db), -EPROTO, "is refused (-EPROTO), not migrated backwards");

	_cleanup_free_ char *rm = xasprintf("rm -rf '%s'", dir);
	if (system(rm) != 0)
		fprintf(stderr, "# could not remove %s\n", dir);
	return tap_done();
}
