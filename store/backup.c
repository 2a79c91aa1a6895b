/*
 * backup: a consistent copy of the open database with SQLite's online
 * backup API (fleetctl backup, core/backup.c), while fleetd keeps serving.
 */
#include <errno.h>

#include "store/db.h"
#include "store/db_internal.h"

int db_backup_to(struct db *db, const char *path)
{
	sqlite3 *dst = NULL;
	sqlite3_backup *b;
	int rc, r = 0;

	rc = sqlite3_open_v2(path, &dst, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOFOLLOW, NULL);
	if (rc != SQLITE_OK) {
		r = db_err(db, rc, "open the backup's database");
		sqlite3_close(dst);
		return r;
	}
	/* One step of everything: one read transaction, so the copy is one moment of the database. */
	if (!(b = sqlite3_backup_init(dst, "main", db->h, "main"))) {
		r = db_err(db, sqlite3_errcode(dst), "start the backup");
		sqlite3_close(dst);
		return r;
	}
	do {
		rc = sqlite3_backup_step(b, -1);
		if (rc == SQLITE_BUSY || rc == SQLITE_LOCKED)
			sqlite3_sleep(50);
	} while (rc == SQLITE_OK || rc == SQLITE_BUSY || rc == SQLITE_LOCKED);
	if (rc != SQLITE_DONE)
		r = db_err(db, rc, "copy the database");
	rc = sqlite3_backup_finish(b);
	if (!r && rc != SQLITE_OK)
		r = db_err(db, rc, "finish the backup");
	if (!r && (rc = sqlite3_exec(dst, "PRAGMA journal_mode = DELETE", NULL, NULL, NULL)) != SQLITE_OK)
		r = db_err(db, rc, "set the backup's journal mode");
	if (sqlite3_close(dst) != SQLITE_OK && !r)
		r = -EIO;
	return r;
}
