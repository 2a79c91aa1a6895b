/*
 * db: see db.h. Durability: WAL with synchronous=FULL, so a row is on disk
 * when its statement returns and survives kill -9 (and power loss).
 */
#include "store/db.h"

#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "common/log.h"
#include "common/util.h"

struct db {
	sqlite3 *h;
};

/*
 * Migrations in order; entry i brings the schema to version i + 1. Never
 * edit a released entry: append a new one. Tables for later features
 * (snapshots, runs, events, secrets) are shaped now so their issues only
 * add columns.
 */
static const char *const migrations[] = {
	/* 1: the foundation */
	"CREATE TABLE agents ("
	"  id INTEGER PRIMARY KEY,"
	"  name TEXT NOT NULL UNIQUE CHECK (length(name) BETWEEN 1 AND 32),"
	"  backend TEXT NOT NULL CHECK (backend IN ('vm', 'user')),"
	"  state TEXT NOT NULL,"
	"  memory_mib INTEGER NOT NULL,"
	"  vcpus INTEGER NOT NULL,"
	"  disk_gib INTEGER NOT NULL,"
	"  network TEXT NOT NULL DEFAULT 'none' CHECK (network IN ('none', 'nat')),"
	"  command TEXT,"
	"  created_at INTEGER NOT NULL,"
	"  updated_at INTEGER NOT NULL"
	");"
	"CREATE TABLE snapshots ("
	"  id INTEGER PRIMARY KEY,"
	"  agent_id INTEGER NOT NULL REFERENCES agents(id) ON DELETE CASCADE,"
	"  name TEXT NOT NULL,"
	"  kind TEXT NOT NULL,"			/* full (RAM+disk), disk, dir */
	"  state TEXT NOT NULL DEFAULT 'creating'," /* creating, ready, deleting: for recovery */
	"  created_at INTEGER NOT NULL,"
	"  size_bytes INTEGER,"
	"  good INTEGER,"			/* NULL unknown, 1 good, 0 bad */
	"  pinned INTEGER NOT NULL DEFAULT 0,"
	"  note TEXT,"
	"  UNIQUE (agent_id, name)"
	");"
	"CREATE TABLE events ("
	"  id INTEGER PRIMARY KEY,"
	"  source TEXT NOT NULL,"		/* github, slack, datadog, twilio, hmac, cron, manual */
	"  route TEXT,"
	"  delivery_id TEXT,"
	"  received_at INTEGER NOT NULL,"
	"  headers TEXT,"
	"  body BLOB,"
	"  UNIQUE (source, delivery_id)"
	");"
	"CREATE TABLE runs ("
	"  id INTEGER PRIMARY KEY,"
	"  agent_id INTEGER NOT NULL REFERENCES agents(id) ON DELETE CASCADE,"
	"  event_id INTEGER REFERENCES events(id) ON DELETE SET NULL,"
	"  trigger TEXT NOT NULL,"
	"  state TEXT NOT NULL DEFAULT 'queued',"
	"  queued_at INTEGER NOT NULL,"
	"  started_at INTEGER,"
	"  finished_at INTEGER,"
	"  exit_code INTEGER,"
	"  log_path TEXT"
	");"
	"CREATE INDEX runs_by_agent_state ON runs (agent_id, state);"
	"CREATE TABLE secrets ("
	"  id INTEGER PRIMARY KEY,"
	"  agent_id INTEGER NOT NULL REFERENCES agents(id) ON DELETE CASCADE,"
	"  name TEXT NOT NULL,"
	"  ciphertext BLOB NOT NULL,"
	"  nonce BLOB NOT NULL,"
	"  created_at INTEGER NOT NULL,"
	"  updated_at INTEGER NOT NULL,"
	"  UNIQUE (agent_id, name)"
	");"
	"CREATE TABLE audit ("
	"  id INTEGER PRIMARY KEY,"
	"  at_ms INTEGER NOT NULL,"
	"  uid INTEGER NOT NULL,"
	"  action TEXT NOT NULL,"
	"  target TEXT,"
	"  outcome TEXT NOT NULL,"
	"  detail TEXT"
	");",
	/* 2: what to do when an environment stops on its own */
	"ALTER TABLE agents ADD COLUMN restart_policy TEXT NOT NULL DEFAULT 'on-failure'"
	"  CHECK (restart_policy IN ('on-failure', 'always', 'never'));",
	/* 3: health checks and automatic rollback */
	"ALTER TABLE agents ADD COLUMN health_command TEXT;"
	"ALTER TABLE agents ADD COLUMN health_interval_s INTEGER NOT NULL DEFAULT 60;"
	"ALTER TABLE agents ADD COLUMN auto_rollback INTEGER NOT NULL DEFAULT 0;"
	"ALTER TABLE agents ADD COLUMN health INTEGER;"
	"ALTER TABLE agents ADD COLUMN health_at INTEGER;"
	"ALTER TABLE agents ADD COLUMN health_detail TEXT;"
	"ALTER TABLE agents ADD COLUMN last_rollback TEXT;",
	/* 4: snapshot policy and retention; restores and runs that a kill -9 may interrupt */
	"ALTER TABLE agents ADD COLUMN snapshot_policy TEXT NOT NULL DEFAULT 'none'"
	"  CHECK (snapshot_policy IN ('none', 'before-run', 'cron'));"
	"ALTER TABLE agents ADD COLUMN snapshot_schedule TEXT;"
	"ALTER TABLE agents ADD COLUMN snapshot_keep INTEGER NOT NULL DEFAULT 0;"
	"ALTER TABLE agents ADD COLUMN restoring TEXT;"	/* snapshot a restore is under way to */
	"ALTER TABLE runs ADD COLUMN snapshot TEXT;"		/* taken before the run */
	"ALTER TABLE runs ADD COLUMN error TEXT;",
	/*
	 * 5: run ids are never reused. Without AUTOINCREMENT SQLite hands out
	 * max(id) + 1, so after the newest runs went (agent removed) a new run
	 * took an old id and truncated that run's log. SQLite can only add
	 * AUTOINCREMENT by rebuilding the table; nothing references runs, so
	 * dropping it is safe with foreign keys on. The copy seeds
	 * sqlite_sequence with the highest id kept.
	 */
	"CREATE TABLE runs_new ("
	"  id INTEGER PRIMARY KEY AUTOINCREMENT,"
	"  agent_id INTEGER NOT NULL REFERENCES agents(id) ON DELETE CASCADE,"
	"  event_id INTEGER REFERENCES events(id) ON DELETE SET NULL,"
	"  trigger TEXT NOT NULL,"
	"  state TEXT NOT NULL DEFAULT 'queued',"
	"  queued_at INTEGER NOT NULL,"
	"  started_at INTEGER,"
	"  finished_at INTEGER,"
	"  exit_code INTEGER,"
	"  log_path TEXT,"
	"  snapshot TEXT,"
	"  error TEXT"
	");"
	"INSERT INTO runs_new (id, agent_id, event_id, trigger, state, queued_at, started_at, finished_at,"
	"  exit_code, log_path, snapshot, error)"
	"  SELECT id, agent_id, event_id, trigger, state, queued_at, started_at, finished_at,"
	"  exit_code, log_path, snapshot, error FROM runs;"
	"DROP TABLE runs;"
	"ALTER TABLE runs_new RENAME TO runs;"
	"CREATE INDEX runs_by_agent_state ON runs (agent_id, state);",
	/*
	 * 6: guest images (images.c): the store image an agent's disk is
	 * backed by (fixed for the disk's life), the one it boots (kernel and
	 * initramfs; 'fleetctl upgrade' changes it), and the boot images it
	 * had before, which its snapshots' saved definitions may still name.
	 */
	"ALTER TABLE agents ADD COLUMN image TEXT;"
	"ALTER TABLE agents ADD COLUMN boot_image TEXT;"
	"ALTER TABLE agents ADD COLUMN old_images TEXT;",
	/*
	 * 7: why an agent is in its state (lifecycle.c): for 'missing', what of
	 * its environment is gone. The states 'removing' (a remove's intent,
	 * finished at start) and 'missing' need no schema change: state is TEXT.
	 */
	"ALTER TABLE agents ADD COLUMN state_detail TEXT;",
};

static inline void stmt_finalizep(sqlite3_stmt **st)
{
	sqlite3_finalize(*st);
}
#define _cleanup_stmt_ _cleanup_(stmt_finalizep)

/* Map a SQLite result code to an errno, logging SQLite's words at debug. */
static int db_err(struct db *db, int rc, const char *what)
{
	log_debug("sqlite: %s: %s (%d)", what, sqlite3_errmsg(db->h), rc);
	switch (rc & 0xff) {
	case SQLITE_CONSTRAINT:
		return (rc == SQLITE_CONSTRAINT_UNIQUE || rc == SQLITE_CONSTRAINT_PRIMARYKEY) ? -EEXIST : -EINVAL;
	case SQLITE_BUSY:
	case SQLITE_LOCKED:
		return -EBUSY;
	case SQLITE_FULL:
		return -ENOSPC;
	case SQLITE_READONLY:
	case SQLITE_PERM:
	case SQLITE_AUTH:
		return -EACCES;
	case SQLITE_NOMEM:
		return -ENOMEM;
	default:
		return -EIO;
	}
}

static int db_prepare(struct db *db, sqlite3_stmt **st, const char *sql)
{
	int rc = sqlite3_prepare_v2(db->h, sql, -1, st, NULL);
	return rc == SQLITE_OK ? 0 : db_err(db, rc, sql);
}

/* 1: a row, 0: done, <0: error. */
static int db_step(struct db *db, sqlite3_stmt *st)
{
	int rc = sqlite3_step(st);

	if (rc == SQLITE_ROW)
		return 1;
	if (rc == SQLITE_DONE)
		return 0;
	return db_err(db, sqlite3_extended_errcode(db->h), sqlite3_sql(st));
}

static int db_exec(struct db *db, const char *sql)
{
	int rc = sqlite3_exec(db->h, sql, NULL, NULL, NULL);
	return rc == SQLITE_OK ? 0 : db_err(db, sqlite3_extended_errcode(db->h), sql);
}

static void bind_text_or_null(sqlite3_stmt *st, int col, const char *text)
{
	if (text)
		sqlite3_bind_text(st, col, text, -1, SQLITE_STATIC);
	else
		sqlite3_bind_null(st, col);
}

static char *col_strdup(sqlite3_stmt *st, int col)
{
	const unsigned char *s = sqlite3_column_text(st, col);
	return s ? xstrdup((const char *)s) : NULL;
}

static int64_t unix_now(void)
{
	return (int64_t)time(NULL);
}

static int db_migrate(struct db *db)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int version, r;

	if ((r = db_prepare(db, &st, "PRAGMA user_version")) < 0)
		return r;
	if ((r = db_step(db, st)) <= 0)
		return r < 0 ? r : -EIO;
	version = sqlite3_column_int(st, 0);
	/* A statement still open would make migration 5's DROP TABLE fail (table locked). */
	sqlite3_finalize(st);
	st = NULL;
	if (version > (int)ARRAY_SIZE(migrations)) {
		log_error("database schema version %d is newer than this fleetd understands (%zu)",
			  version, ARRAY_SIZE(migrations));
		return -EPROTO;
	}
	for (int v = version; v < (int)ARRAY_SIZE(migrations); v++) {
		_cleanup_free_ char *bump = xasprintf("PRAGMA user_version = %d", v + 1);

		if ((r = db_exec(db, "BEGIN IMMEDIATE")) < 0)
			return r;
		if ((r = db_exec(db, migrations[v])) < 0 || (r = db_exec(db, bump)) < 0) {
			(void)db_exec(db, "ROLLBACK");
			log_error("database migration to version %d failed", v + 1);
			return r;
		}
		if ((r = db_exec(db, "COMMIT")) < 0)
			return r;
		log_info("database migrated to schema version %d", v + 1);
	}
	return 0;
}

int db_schema_version(void)
{
	return (int)ARRAY_SIZE(migrations);
}

int db_open(const char *path, struct db **ret)
{
	_cleanup_(db_closep) struct db *db = xcalloc(1, sizeof(*db));
	int rc, r;

	/* Create the file 0600 ourselves: SQLite would honour the umask. */
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	close(fd);

	rc = sqlite3_open_v2(path, &db->h, SQLITE_OPEN_READWRITE | SQLITE_OPEN_FULLMUTEX, NULL);
	if (rc != SQLITE_OK)
		return db->h ? db_err(db, rc, path) : -ENOMEM;
	sqlite3_extended_result_codes(db->h, 1);
	sqlite3_busy_timeout(db->h, 5000);
	if ((r = db_exec(db, "PRAGMA journal_mode = WAL")) < 0 ||
	    (r = db_exec(db, "PRAGMA synchronous = FULL")) < 0 ||
	    (r = db_exec(db, "PRAGMA foreign_keys = ON")) < 0)
		return r;
	if ((r = db_migrate(db)) < 0)
		return r;
	*ret = TAKE_PTR(db);
	return 0;
}

void db_close(struct db *db)
{
	if (!db)
		return;
	sqlite3_close_v2(db->h);
	free(db);
}

int db_agent_insert(struct db *db, struct agent *a)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int64_t now = unix_now();
	int r;

	if ((r = db_prepare(db, &st,
			    "INSERT INTO agents (name, backend, state, memory_mib, vcpus, disk_gib,"
			    " network, command, created_at, updated_at, restart_policy, health_command,"
			    " health_interval_s, auto_rollback, snapshot_policy, snapshot_schedule, snapshot_keep)"
			    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")) < 0)
		return r;
	sqlite3_bind_text(st, 1, a->name, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, backend_kind_to_string(a->backend), -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 3, agent_state_to_string(a->state), -1, SQLITE_STATIC);
	sqlite3_bind_int(st, 4, a->memory_mib);
	sqlite3_bind_int(st, 5, a->vcpus);
	sqlite3_bind_int(st, 6, a->disk_gib);
	sqlite3_bind_text(st, 7, network_kind_to_string(a->network), -1, SQLITE_STATIC);
	if (a->command)
		sqlite3_bind_text(st, 8, a->command, -1, SQLITE_STATIC);
	else
		sqlite3_bind_null(st, 8);
	sqlite3_bind_int64(st, 9, now);
	sqlite3_bind_int64(st, 10, now);
	sqlite3_bind_text(st, 11, restart_policy_to_string(a->restart), -1, SQLITE_STATIC);
	if (a->health_command)
		sqlite3_bind_text(st, 12, a->health_command, -1, SQLITE_STATIC);
	else
		sqlite3_bind_null(st, 12);
	sqlite3_bind_int(st, 13, a->health_interval_s);
	sqlite3_bind_int(st, 14, a->auto_rollback ? 1 : 0);
	sqlite3_bind_text(st, 15, snapshot_policy_to_string(a->snapshot_policy), -1, SQLITE_STATIC);
	bind_text_or_null(st, 16, a->snapshot_schedule);
	sqlite3_bind_int(st, 17, a->snapshot_keep);
	if ((r = db_step(db, st)) < 0)
		return r;
	a->id = sqlite3_last_insert_rowid(db->h);
	a->created_at = a->updated_at = now;
	return 0;
}

#define AGENT_COLUMNS "id, name, backend, state, memory_mib, vcpus, disk_gib, network, command, created_at," \
	" updated_at, restart_policy, health_command, health_interval_s, auto_rollback, health, health_at," \
	" health_detail, last_rollback, snapshot_policy, snapshot_schedule, snapshot_keep, restoring, state_detail"

/* Copy one row of AGENT_COLUMNS; never keeps a pointer into the statement. */
static struct agent *agent_from_row(sqlite3_stmt *st)
{
	struct agent *a = xcalloc(1, sizeof(*a));
	int k;

	a->id = sqlite3_column_int64(st, 0);
	a->name = col_strdup(st, 1);
	k = backend_kind_from_string((const char *)sqlite3_column_text(st, 2));
	a->backend = k < 0 ? BACKEND_VM : (enum backend_kind)k;
	k = agent_state_from_string((const char *)sqlite3_column_text(st, 3));
	a->state = k < 0 ? AGENT_BAD : (enum agent_state)k;
	a->memory_mib = sqlite3_column_int(st, 4);
	a->vcpus = sqlite3_column_int(st, 5);
	a->disk_gib = sqlite3_column_int(st, 6);
	k = network_kind_from_string((const char *)sqlite3_column_text(st, 7));
	a->network = k < 0 ? NETWORK_NONE : (enum network_kind)k;
	a->command = col_strdup(st, 8);
	a->created_at = sqlite3_column_int64(st, 9);
	a->updated_at = sqlite3_column_int64(st, 10);
	k = restart_policy_from_string((const char *)sqlite3_column_text(st, 11));
	a->restart = k < 0 ? RESTART_ON_FAILURE : (enum restart_policy)k;
	a->health_command = col_strdup(st, 12);
	a->health_interval_s = sqlite3_column_int(st, 13);
	a->auto_rollback = sqlite3_column_int(st, 14) != 0;
	a->health = sqlite3_column_type(st, 15) == SQLITE_NULL ? -1 : sqlite3_column_int(st, 15);
	a->health_at = sqlite3_column_int64(st, 16);
	a->health_detail = col_strdup(st, 17);
	a->last_rollback = col_strdup(st, 18);
	k = snapshot_policy_from_string((const char *)sqlite3_column_text(st, 19));
	a->snapshot_policy = k < 0 ? SNAPSHOT_POLICY_NONE : (enum snapshot_policy)k;
	a->snapshot_schedule = col_strdup(st, 20);
	a->snapshot_keep = sqlite3_column_int(st, 21);
	a->restoring = col_strdup(st, 22);
	a->state_detail = col_strdup(st, 23);
	return a;
}

int db_agent_get(struct db *db, const char *name, struct agent **ret)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r;

	if ((r = db_prepare(db, &st, "SELECT " AGENT_COLUMNS " FROM agents WHERE name = ?")) < 0)
		return r;
	sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
	if ((r = db_step(db, st)) <= 0)
		return r == 0 ? -ENOENT : r;
	*ret = agent_from_row(st);
	return 0;
}

int db_agent_list(struct db *db, struct agent ***ret, size_t *n)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	struct agent **list = NULL;
	size_t count = 0, cap = 0;
	int r;

	if ((r = db_prepare(db, &st, "SELECT " AGENT_COLUMNS " FROM agents ORDER BY name")) < 0)
		return r;
	while ((r = db_step(db, st)) > 0) {
		if (count + 1 >= cap) {
			cap = cap ? cap * 2 : 16;
			list = xrealloc(list, cap * sizeof(*list));
		}
		list[count++] = agent_from_row(st);
		list[count] = NULL;
	}
	if (r < 0) {
		agent_list_free(list);
		return r;
	}
	if (!list)
		list = xcalloc(1, sizeof(*list));
	*ret = list;
	*n = count;
	return 0;
}

int db_agent_count(struct db *db, long *ret)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r;

	if ((r = db_prepare(db, &st, "SELECT count(*) FROM agents")) < 0)
		return r;
	if ((r = db_step(db, st)) <= 0)
		return r < 0 ? r : -EIO;
	*ret = (long)sqlite3_column_int64(st, 0);
	return 0;
}

int db_agent_set_state(struct db *db, const char *name, enum agent_state state, const char *detail)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r;

	if ((r = db_prepare(db, &st, "UPDATE agents SET state = ?, updated_at = ?, state_detail = ? WHERE name = ?")) < 0)
		return r;
	sqlite3_bind_text(st, 1, agent_state_to_string(state), -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, unix_now());
	bind_text_or_null(st, 3, detail);
	sqlite3_bind_text(st, 4, name, -1, SQLITE_STATIC);
	if ((r = db_step(db, st)) < 0)
		return r;
	return sqlite3_changes(db->h) > 0 ? 0 : -ENOENT;
}

int db_agent_delete(struct db *db, const char *name)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r;

	if ((r = db_prepare(db, &st, "DELETE FROM agents WHERE name = ?")) < 0)
		return r;
	sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
	if ((r = db_step(db, st)) < 0)
		return r;
	return sqlite3_changes(db->h) > 0 ? 0 : -ENOENT;
}

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

/* --- snapshots ---------------------------------------------------------------- */

void snapshot_free(struct snapshot *s)
{
	if (!s)
		return;
	free(s->agent);
	free(s->name);
	free(s->kind);
	free(s->state);
	free(s->note);
	free(s);
}

void snapshot_list_free(struct snapshot **list)
{
	for (struct snapshot **p = list; p && *p; p++)
		snapshot_free(*p);
	free(list);
}

int db_snapshot_begin(struct db *db, const char *agent, const char *name, const char *note, bool pinned)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r;

	if ((r = db_prepare(db, &st,
			    "INSERT INTO snapshots (agent_id, name, kind, state, created_at, pinned, note)"
			    " SELECT id, ?, 'pending', 'creating', ?, ?, ? FROM agents WHERE name = ?")) < 0)
		return r;
	sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, unix_now());
	sqlite3_bind_int(st, 3, pinned ? 1 : 0);
	if (note)
		sqlite3_bind_text(st, 4, note, -1, SQLITE_STATIC);
	else
		sqlite3_bind_null(st, 4);
	sqlite3_bind_text(st, 5, agent, -1, SQLITE_STATIC);
	if ((r = db_step(db, st)) < 0)
		return r;
	return sqlite3_changes(db->h) > 0 ? 0 : -ENOENT;
}

int db_snapshot_ready(struct db *db, const char *agent, const char *name, const char *kind, long long size_bytes)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r;

	if ((r = db_prepare(db, &st,
			    "UPDATE snapshots SET state = 'ready', kind = ?, size_bytes = ?"
			    " WHERE name = ? AND agent_id = (SELECT id FROM agents WHERE name = ?)")) < 0)
		return r;
	sqlite3_bind_text(st, 1, kind, -1, SQLITE_STATIC);
	if (size_bytes >= 0)
		sqlite3_bind_int64(st, 2, size_bytes);
	else
		sqlite3_bind_null(st, 2);
	sqlite3_bind_text(st, 3, name, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 4, agent, -1, SQLITE_STATIC);
	if ((r = db_step(db, st)) < 0)
		return r;
	return sqlite3_changes(db->h) > 0 ? 0 : -ENOENT;
}

#define SNAPSHOT_COLUMNS "s.id, a.name, s.name, s.kind, s.state, s.created_at, s.size_bytes, s.good, s.pinned, s.note"

static struct snapshot *snapshot_from_row(sqlite3_stmt *st)
{
	struct snapshot *s = xcalloc(1, sizeof(*s));

	s->id = sqlite3_column_int64(st, 0);
	s->agent = col_strdup(st, 1);
	s->name = col_strdup(st, 2);
	s->kind = col_strdup(st, 3);
	s->state = col_strdup(st, 4);
	s->created_at = sqlite3_column_int64(st, 5);
	s->size_bytes = sqlite3_column_type(st, 6) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, 6);
	s->good = sqlite3_column_type(st, 7) == SQLITE_NULL ? -1 : sqlite3_column_int(st, 7);
	s->pinned = sqlite3_column_int(st, 8) != 0;
	s->note = col_strdup(st, 9);
	return s;
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
	*ret = snapshot_from_row(st);
	return 0;
}

int db_snapshot_list(struct db *db, const char *agent, const char *state, struct snapshot ***ret, size_t *n)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	struct snapshot **list = xcalloc(1, sizeof(*list));
	size_t count = 0;
	int r;

	if ((r = db_prepare(db, &st, "SELECT " SNAPSHOT_COLUMNS " FROM snapshots s JOIN agents a ON a.id = s.agent_id"
				     " WHERE (?1 IS NULL OR a.name = ?1) AND (?2 IS NULL OR s.state = ?2)"
				     " ORDER BY s.created_at, s.id")) < 0) {
		free(list);
		return r;
	}
	if (agent)
		sqlite3_bind_text(st, 1, agent, -1, SQLITE_STATIC);
	if (state)
		sqlite3_bind_text(st, 2, state, -1, SQLITE_STATIC);
	while ((r = db_step(db, st)) > 0) {
		list = xrealloc(list, (count + 2) * sizeof(*list));
		list[count++] = snapshot_from_row(st);
		list[count] = NULL;
	}
	if (r < 0) {
		snapshot_list_free(list);
		return r;
	}
	*ret = list;
	*n = count;
	return 0;
}

int db_snapshot_delete(struct db *db, const char *agent, const char *name)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r;

	if ((r = db_prepare(db, &st, "DELETE FROM snapshots WHERE name = ?"
				     " AND agent_id = (SELECT id FROM agents WHERE name = ?)")) < 0)
		return r;
	sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, agent, -1, SQLITE_STATIC);
	if ((r = db_step(db, st)) < 0)
		return r;
	return sqlite3_changes(db->h) > 0 ? 0 : -ENOENT;
}

int db_agent_set_health(struct db *db, const char *name, int healthy, const char *detail)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r;

	if ((r = db_prepare(db, &st, "UPDATE agents SET health = ?, health_at = ?, health_detail = ? WHERE name = ?")) < 0)
		return r;
	sqlite3_bind_int(st, 1, healthy ? 1 : 0);
	sqlite3_bind_int64(st, 2, unix_now());
	sqlite3_bind_text(st, 3, detail, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 4, name, -1, SQLITE_STATIC);
	if ((r = db_step(db, st)) < 0)
		return r;
	return sqlite3_changes(db->h) > 0 ? 0 : -ENOENT;
}

int db_agent_set_rollback(struct db *db, const char *name, const char *what)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r;

	if ((r = db_prepare(db, &st, "UPDATE agents SET last_rollback = ? WHERE name = ?")) < 0)
		return r;
	sqlite3_bind_text(st, 1, what, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC);
	if ((r = db_step(db, st)) < 0)
		return r;
	return sqlite3_changes(db->h) > 0 ? 0 : -ENOENT;
}

int db_agent_set_settings(struct db *db, const struct agent *a)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r;

	if ((r = db_prepare(db, &st, "UPDATE agents SET command = ?, health_command = ?, health_interval_s = ?,"
				     " auto_rollback = ?, snapshot_policy = ?, snapshot_schedule = ?, snapshot_keep = ?,"
				     " updated_at = ? WHERE name = ?")) < 0)
		return r;
	bind_text_or_null(st, 1, a->command);
	bind_text_or_null(st, 2, a->health_command);
	sqlite3_bind_int(st, 3, a->health_interval_s);
	sqlite3_bind_int(st, 4, a->auto_rollback ? 1 : 0);
	sqlite3_bind_text(st, 5, snapshot_policy_to_string(a->snapshot_policy), -1, SQLITE_STATIC);
	bind_text_or_null(st, 6, a->snapshot_schedule);
	sqlite3_bind_int(st, 7, a->snapshot_keep);
	sqlite3_bind_int64(st, 8, unix_now());
	sqlite3_bind_text(st, 9, a->name, -1, SQLITE_STATIC);
	if ((r = db_step(db, st)) < 0)
		return r;
	return sqlite3_changes(db->h) > 0 ? 0 : -ENOENT;
}

int db_agent_set_restoring(struct db *db, const char *name, const char *snap)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r;

	if ((r = db_prepare(db, &st, "UPDATE agents SET restoring = ? WHERE name = ?")) < 0)
		return r;
	bind_text_or_null(st, 1, snap);
	sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC);
	if ((r = db_step(db, st)) < 0)
		return r;
	return sqlite3_changes(db->h) > 0 ? 0 : -ENOENT;
}

int db_agent_get_images(struct db *db, const char *name, struct agent_images *ret)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r;

	if ((r = db_prepare(db, &st, "SELECT image, boot_image, old_images FROM agents WHERE name = ?")) < 0)
		return r;
	sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
	r = sqlite3_step(st);
	if (r == SQLITE_DONE)
		return -ENOENT;
	if (r != SQLITE_ROW)
		return db_err(db, r, "reading an agent's images");
	ret->image = col_strdup(st, 0);
	ret->boot_image = col_strdup(st, 1);
	ret->old_images = col_strdup(st, 2);
	return 0;
}

int db_agent_set_images(struct db *db, const char *name, const struct agent_images *im)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r;

	if ((r = db_prepare(db, &st, "UPDATE agents SET image = ?, boot_image = ?, old_images = ? WHERE name = ?")) < 0)
		return r;
	bind_text_or_null(st, 1, im->image);
	bind_text_or_null(st, 2, im->boot_image);
	bind_text_or_null(st, 3, im->old_images);
	sqlite3_bind_text(st, 4, name, -1, SQLITE_STATIC);
	if ((r = db_step(db, st)) < 0)
		return r;
	return sqlite3_changes(db->h) > 0 ? 0 : -ENOENT;
}

int db_snapshot_set_state(struct db *db, const char *agent, const char *name, const char *state)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r;

	if ((r = db_prepare(db, &st, "UPDATE snapshots SET state = ? WHERE name = ?"
				     " AND agent_id = (SELECT id FROM agents WHERE name = ?)")) < 0)
		return r;
	sqlite3_bind_text(st, 1, state, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 3, agent, -1, SQLITE_STATIC);
	if ((r = db_step(db, st)) < 0)
		return r;
	return sqlite3_changes(db->h) > 0 ? 0 : -ENOENT;
}

int db_snapshot_set_pinned(struct db *db, const char *agent, const char *name, bool pinned)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r;

	if ((r = db_prepare(db, &st, "UPDATE snapshots SET pinned = ? WHERE name = ?"
				     " AND agent_id = (SELECT id FROM agents WHERE name = ?)")) < 0)
		return r;
	sqlite3_bind_int(st, 1, pinned ? 1 : 0);
	sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 3, agent, -1, SQLITE_STATIC);
	if ((r = db_step(db, st)) < 0)
		return r;
	return sqlite3_changes(db->h) > 0 ? 0 : -ENOENT;
}

int db_snapshot_set_good(struct db *db, const char *agent, const char *name, int good)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r;

	if ((r = db_prepare(db, &st, "UPDATE snapshots SET good = ? WHERE name = ?"
				     " AND agent_id = (SELECT id FROM agents WHERE name = ?)")) < 0)
		return r;
	if (good < 0)
		sqlite3_bind_null(st, 1);
	else
		sqlite3_bind_int(st, 1, good);
	sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 3, agent, -1, SQLITE_STATIC);
	if ((r = db_step(db, st)) < 0)
		return r;
	return sqlite3_changes(db->h) > 0 ? 0 : -ENOENT;
}

/* --- runs ------------------------------------------------------------------------- */

void run_free(struct run *r)
{
	if (!r)
		return;
	free(r->agent);
	free(r->trigger);
	free(r->state);
	free(r->log_path);
	free(r->snapshot);
	free(r->error);
	free(r);
}

void run_list_free(struct run **list)
{
	if (!list)
		return;
	for (struct run **p = list; *p; p++)
		run_free(*p);
	free(list);
}

#define RUN_COLUMNS "r.id, a.name, r.trigger, r.state, r.queued_at, r.started_at, r.finished_at, r.exit_code," \
	" r.log_path, r.snapshot, r.error"

static struct run *run_from_row(sqlite3_stmt *st)
{
	struct run *r = xcalloc(1, sizeof(*r));

	r->id = sqlite3_column_int64(st, 0);
	r->agent = col_strdup(st, 1);
	r->trigger = col_strdup(st, 2);
	r->state = col_strdup(st, 3);
	r->queued_at = sqlite3_column_int64(st, 4);
	r->started_at = sqlite3_column_int64(st, 5);
	r->finished_at = sqlite3_column_int64(st, 6);
	r->exit_code = sqlite3_column_type(st, 7) == SQLITE_NULL ? -1 : sqlite3_column_int(st, 7);
	r->log_path = col_strdup(st, 8);
	r->snapshot = col_strdup(st, 9);
	r->error = col_strdup(st, 10);
	return r;
}

int db_run_insert(struct db *db, const char *agent, const char *trigger, int64_t *ret_id)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r;

	if ((r = db_prepare(db, &st, "INSERT INTO runs (agent_id, trigger, state, queued_at)"
				     " SELECT id, ?, 'queued', ? FROM agents WHERE name = ?")) < 0)
		return r;
	sqlite3_bind_text(st, 1, trigger, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, unix_now());
	sqlite3_bind_text(st, 3, agent, -1, SQLITE_STATIC);
	if ((r = db_step(db, st)) < 0)
		return r;
	if (sqlite3_changes(db->h) == 0)
		return -ENOENT;
	*ret_id = sqlite3_last_insert_rowid(db->h);
	return 0;
}

int db_run_get(struct db *db, int64_t id, struct run **ret)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r;

	if ((r = db_prepare(db, &st, "SELECT " RUN_COLUMNS " FROM runs r JOIN agents a ON a.id = r.agent_id"
				     " WHERE r.id = ?")) < 0)
		return r;
	sqlite3_bind_int64(st, 1, id);
	if ((r = db_step(db, st)) <= 0)
		return r == 0 ? -ENOENT : r;
	*ret = run_from_row(st);
	return 0;
}

int db_run_list(struct db *db, const char *agent, const char *state, int limit, struct run ***ret, size_t *n)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	struct run **list = NULL;
	size_t count = 0, cap = 0;
	int r;

	if ((r = db_prepare(db, &st, "SELECT * FROM (SELECT " RUN_COLUMNS " FROM runs r JOIN agents a ON a.id = r.agent_id"
				     " WHERE (?1 IS NULL OR a.name = ?1) AND (?2 IS NULL OR r.state = ?2)"
				     " ORDER BY r.id DESC LIMIT ?3) ORDER BY 1")) < 0)
		return r;
	bind_text_or_null(st, 1, agent);
	bind_text_or_null(st, 2, state);
	sqlite3_bind_int(st, 3, limit > 0 ? limit : -1);
	while ((r = db_step(db, st)) > 0) {
		if (count + 1 >= cap) {
			cap = cap ? cap * 2 : 16;
			list = xrealloc(list, cap * sizeof(*list));
		}
		list[count++] = run_from_row(st);
		list[count] = NULL;
	}
	if (r < 0) {
		run_list_free(list);
		return r;
	}
	if (!list)
		list = xcalloc(1, sizeof(*list));
	*ret = list;
	*n = count;
	return 0;
}

int db_run_start(struct db *db, int64_t id, const char *log_path)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r;

	if ((r = db_prepare(db, &st, "UPDATE runs SET state = 'running', started_at = ?, log_path = ?"
				     " WHERE id = ? AND state = 'queued'")) < 0)
		return r;
	sqlite3_bind_int64(st, 1, unix_now());
	sqlite3_bind_text(st, 2, log_path, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 3, id);
	if ((r = db_step(db, st)) < 0)
		return r;
	return sqlite3_changes(db->h) > 0 ? 0 : -ENOENT;
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

int db_run_finish(struct db *db, int64_t id, const char *state, int exit_code, const char *error)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r;

	if ((r = db_prepare(db, &st, "UPDATE runs SET state = ?, finished_at = ?, exit_code = ?, error = ?"
				     " WHERE id = ?")) < 0)
		return r;
	sqlite3_bind_text(st, 1, state, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, unix_now());
	if (exit_code >= 0)
		sqlite3_bind_int(st, 3, exit_code);
	else
		sqlite3_bind_null(st, 3);
	bind_text_or_null(st, 4, error);
	sqlite3_bind_int64(st, 5, id);
	if ((r = db_step(db, st)) < 0)
		return r;
	return sqlite3_changes(db->h) > 0 ? 0 : -ENOENT;
}

int db_runs_interrupt(struct db *db, const char *error, int *ret_count)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r;

	if ((r = db_prepare(db, &st, "UPDATE runs SET state = 'interrupted', finished_at = ?, error = ?"
				     " WHERE state = 'running'")) < 0)
		return r;
	sqlite3_bind_int64(st, 1, unix_now());
	sqlite3_bind_text(st, 2, error, -1, SQLITE_STATIC);
	if ((r = db_step(db, st)) < 0)
		return r;
	*ret_count = sqlite3_changes(db->h);
	return 0;
}
