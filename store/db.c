/*
 * db: the database itself: open and close, the schema and its migrations
 * (keyed on PRAGMA user_version), and the statement helpers every table
 * family's file shares (db_internal.h). Durability: WAL with
 * synchronous=FULL, so a row is on disk when its statement returns and
 * survives kill -9 (and power loss). The exception: an exec's audit row
 * (audit.c's db_audit_add_unsynced) survives kill -9, and is on disk at the
 * next synced commit.
 */
#include "store/db.h"

#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "store/db_internal.h"

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
	/*
	 * 8: cron triggers (core/cron_triggers.c): a run queued at every slot
	 * of spec in zone tz (NULL: the host's). last_at is the end of what was
	 * already dealt with (fired or skipped), written in the transaction
	 * that queues the run, so a restart neither repeats nor loses a slot.
	 */
	"CREATE TABLE schedules ("
	"  id INTEGER PRIMARY KEY AUTOINCREMENT,"
	"  agent_id INTEGER NOT NULL REFERENCES agents(id) ON DELETE CASCADE,"
	"  spec TEXT NOT NULL,"
	"  tz TEXT,"
	"  catch_up TEXT NOT NULL DEFAULT 'once' CHECK (catch_up IN ('once', 'skip')),"
	"  payload BLOB,"
	"  created_at INTEGER NOT NULL,"
	"  last_at INTEGER NOT NULL"
	");"
	"CREATE INDEX schedules_by_agent ON schedules (agent_id);",
	/*
	 * 9 (#11, routes): webhook routes and their subscribers (store/hooks.c).
	 * A route keeps its current secret and, during a rotation's grace, the
	 * one before until prev_until (unix seconds). A route goes with its last
	 * subscriber, also when that agent is removed (the trigger runs for the
	 * cascade too). hook_deliveries holds the per-route delivery ids the
	 * listener deduplicates on (kept at least 7 days). events gains what a
	 * delivery was and what it caused.
	 */
	"CREATE TABLE hook_routes ("
	"  id INTEGER PRIMARY KEY,"
	"  name TEXT NOT NULL UNIQUE CHECK (length(name) BETWEEN 1 AND 48),"
	"  source TEXT NOT NULL,"
	"  secret BLOB NOT NULL,"
	"  prev_secret BLOB,"
	"  prev_until INTEGER,"
	"  header TEXT,"
	"  encoding TEXT NOT NULL DEFAULT 'hex' CHECK (encoding IN ('hex', 'base64')),"
	"  prefix TEXT,"
	"  datadog_auth TEXT NOT NULL DEFAULT 'header' CHECK (datadog_auth IN ('header', 'basic')),"
	"  delivery_field TEXT,"
	"  max_body INTEGER NOT NULL DEFAULT 1048576,"
	"  public_url TEXT,"
	"  created_at INTEGER NOT NULL"
	");"
	"CREATE TABLE hook_subscriptions ("
	"  id INTEGER PRIMARY KEY,"
	"  route_id INTEGER NOT NULL REFERENCES hook_routes(id) ON DELETE CASCADE,"
	"  agent_id INTEGER NOT NULL REFERENCES agents(id) ON DELETE CASCADE,"
	"  events TEXT,"			/* comma-separated event types; NULL: every event */
	"  created_at INTEGER NOT NULL,"
	"  UNIQUE (route_id, agent_id)"
	");"
	"CREATE INDEX hook_subscriptions_by_agent ON hook_subscriptions (agent_id);"
	"CREATE TRIGGER hook_route_goes_with_last_subscriber AFTER DELETE ON hook_subscriptions"
	"  WHEN NOT EXISTS (SELECT 1 FROM hook_subscriptions WHERE route_id = OLD.route_id)"
	"  BEGIN DELETE FROM hook_routes WHERE id = OLD.route_id; END;"
	"CREATE TABLE hook_deliveries ("
	"  route_id INTEGER NOT NULL REFERENCES hook_routes(id) ON DELETE CASCADE,"
	"  delivery_id TEXT NOT NULL,"
	"  received_at INTEGER NOT NULL,"
	"  PRIMARY KEY (route_id, delivery_id)"
	");"
	"CREATE INDEX hook_deliveries_by_time ON hook_deliveries (received_at);"
	"ALTER TABLE events ADD COLUMN event_type TEXT;"
	"ALTER TABLE events ADD COLUMN outcome TEXT;"	/* queued, duplicate, no-subscriber, ... */
	"CREATE INDEX events_by_time ON events (received_at);",
	/*
	 * 10 (#11 runq): the run queue's per-agent limits (core/runs.c): how
	 * long a run may take, how many may wait, how often a run cut off by
	 * fleetd stopping is queued again; and, per run, how often it was.
	 */
	"ALTER TABLE agents ADD COLUMN run_timeout_s INTEGER NOT NULL DEFAULT 3600;"
	"ALTER TABLE agents ADD COLUMN max_queued INTEGER NOT NULL DEFAULT 100;"
	"ALTER TABLE agents ADD COLUMN retry_interrupted INTEGER NOT NULL DEFAULT 0;"
	"ALTER TABLE runs ADD COLUMN retries INTEGER NOT NULL DEFAULT 0;",
	/*
	 * 11 (#11 listener): events loses UNIQUE (source, delivery_id).
	 * Deduplication is per route (hook_deliveries); two routes of one
	 * source may see the same id (a generic HMAC body hash), and both are
	 * events. SQLite drops a constraint only by rebuilding the table (its
	 * documented 12 steps): foreign keys off around it (runs reference
	 * events: with them on, DROP TABLE would set every run's event_id to
	 * NULL), ids kept, checked with foreign_key_check before the commit.
	 */
	"CREATE TABLE events_new ("
	"  id INTEGER PRIMARY KEY,"
	"  source TEXT NOT NULL,"
	"  route TEXT,"
	"  delivery_id TEXT,"
	"  received_at INTEGER NOT NULL,"
	"  headers TEXT,"
	"  body BLOB,"
	"  event_type TEXT,"
	"  outcome TEXT"
	");"
	"INSERT INTO events_new (id, source, route, delivery_id, received_at, headers, body, event_type, outcome)"
	"  SELECT id, source, route, delivery_id, received_at, headers, body, event_type, outcome FROM events;"
	"DROP TABLE events;"
	"ALTER TABLE events_new RENAME TO events;"
	"CREATE INDEX events_by_time ON events (received_at);"
	"CREATE INDEX events_by_route_delivery ON events (route, delivery_id);",
	/*
	 * 12 (#11 throughput): each agent's number of queued runs, kept by
	 * triggers on every write to runs (queue, start, cancel, finish,
	 * requeue, delete, the cascade of an agent's removal), so the room
	 * check of every enqueue reads one row instead of counting the queue
	 * (store/runs.c). Seeded from the rows there are.
	 */
	"ALTER TABLE agents ADD COLUMN queued_runs INTEGER NOT NULL DEFAULT 0;"
	"UPDATE agents SET queued_runs = (SELECT count(*) FROM runs r WHERE r.agent_id = agents.id"
	"  AND r.state = 'queued');"
	"CREATE TRIGGER runs_queued_insert AFTER INSERT ON runs WHEN NEW.state = 'queued'"
	"  BEGIN UPDATE agents SET queued_runs = queued_runs + 1 WHERE id = NEW.agent_id; END;"
	"CREATE TRIGGER runs_queued_delete AFTER DELETE ON runs WHEN OLD.state = 'queued'"
	"  BEGIN UPDATE agents SET queued_runs = queued_runs - 1 WHERE id = OLD.agent_id; END;"
	"CREATE TRIGGER runs_queued_update AFTER UPDATE OF state, agent_id ON runs"
	"  WHEN (OLD.state = 'queued' OR NEW.state = 'queued')"
	"  AND (OLD.state IS NOT NEW.state OR OLD.agent_id IS NOT NEW.agent_id)"
	"  BEGIN UPDATE agents SET queued_runs = queued_runs - (OLD.state = 'queued') WHERE id = OLD.agent_id;"
	"  UPDATE agents SET queued_runs = queued_runs + (NEW.state = 'queued') WHERE id = NEW.agent_id; END;",
	/*
	 * 13 (#12 secrets): the secrets table of migration 1 gains the plaintext's
	 * size, which `secret ls` shows without opening the value. ciphertext
	 * holds the AES-256-GCM output with its tag (core/secret_box.c).
	 */
	"ALTER TABLE secrets ADD COLUMN size INTEGER NOT NULL DEFAULT 0;",
	/* 14 (#12 memory): what an agent's memory store may hold, in MiB (core/memory.c). */
	"ALTER TABLE agents ADD COLUMN memory_quota_mib INTEGER NOT NULL DEFAULT 64;",
	/*
	 * 15 (#12 network): a NAT agent's egress allow list (model/egress.h); NULL:
	 * it may reach anything outside the host (never the host, the
	 * metadata address or other agents).
	 */
	"ALTER TABLE agents ADD COLUMN egress_allow TEXT;",
	/*
	 * 16 (#12 secret files): whether an agent's runs get its secrets as files
	 * on a tmpfs inside the environment rather than as variables.
	 */
	"ALTER TABLE agents ADD COLUMN secret_files INTEGER NOT NULL DEFAULT 0;",
	/*
	 * 17 (#14 host reboot): whether fleetd starts the agent when it first
	 * starts after the host booted, and in which order (core/autostart.c).
	 */
	"ALTER TABLE agents ADD COLUMN autostart INTEGER NOT NULL DEFAULT 0;"
	"ALTER TABLE agents ADD COLUMN boot_priority INTEGER NOT NULL DEFAULT 0;",
	/*
	 * 18 (#15 more hosts): the hypervisor hosts VM agents are placed on, and
	 * each VM agent's host. uri NULL: the configured libvirt_uri (the host
	 * `local`, there without `host add`, which every VM agent made before
	 * was on). max_agents 0: no limit.
	 */
	"CREATE TABLE hosts ("
	"  id INTEGER PRIMARY KEY,"
	"  name TEXT NOT NULL UNIQUE CHECK (length(name) BETWEEN 1 AND 32),"
	"  uri TEXT,"
	"  max_agents INTEGER NOT NULL DEFAULT 0,"
	"  reserve_memory_mib INTEGER NOT NULL DEFAULT 0,"
	"  draining INTEGER NOT NULL DEFAULT 0,"
	"  added_at INTEGER NOT NULL"
	");"
	"INSERT INTO hosts (name, uri, added_at) VALUES ('local', NULL, CAST(strftime('%s', 'now') AS INTEGER));"
	"ALTER TABLE agents ADD COLUMN host TEXT;"
	"UPDATE agents SET host = 'local' WHERE backend = 'vm';",
};

/* Migrations (by their index in migrations[]) that rebuild a referenced table: foreign keys off around them. */
static bool migration_fk_off(int i)
{
	return i == 10;
}

int db_err(struct db *db, int rc, const char *what)
{
	log_debug("sqlite: %s: %s (%d)", what, sqlite3_errmsg(db->h), rc);
	switch (rc & 0xff) {
	case SQLITE_CONSTRAINT:
		return (rc == SQLITE_CONSTRAINT_UNIQUE || rc == SQLITE_CONSTRAINT_PRIMARYKEY) ? -EEXIST : -EINVAL;
	case SQLITE_BUSY:
	case SQLITE_LOCKED:
		/* Another process holds the file (db.h): the caller's refusal says so, and it passes. */
		log_warning("database: %s: locked by another process (waited %d ms)", what, DB_BUSY_TIMEOUT_MS);
		return -ENOLCK;
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

int db_prepare(struct db *db, sqlite3_stmt **st, const char *sql)
{
	int rc = sqlite3_prepare_v2(db->h, sql, -1, st, NULL);
	return rc == SQLITE_OK ? 0 : db_err(db, rc, sql);
}

int db_prepare_cached(struct db *db, sqlite3_stmt **st, const char *sql)
{
	size_t i;
	int rc;

	if (!pthread_equal(pthread_self(), db->owner)) {
		log_error("database: a cached statement used off the thread that opened the database: %s", sql);
		return -EDEADLK;
	}
	for (i = 0; i < DB_STMT_CACHE && db->cache[i].sql; i++) {
		if (db->cache[i].sql != sql)
			continue;
		if (sqlite3_stmt_busy(db->cache[i].st)) {
			log_error("database: a cached statement used again while in use: %s", sql);
			return -EDEADLK;
		}
		*st = db->cache[i].st;
		return 0;
	}
	if (i == DB_STMT_CACHE) {	/* a statement of its own would need finalizing: grow the cache */
		log_error("database: the statement cache is full (%d); not preparing: %s", DB_STMT_CACHE, sql);
		return -ENOSPC;
	}
	if ((rc = sqlite3_prepare_v3(db->h, sql, -1, SQLITE_PREPARE_PERSISTENT, st, NULL)) != SQLITE_OK)
		return db_err(db, rc, sql);
	db->cache[i].sql = sql;
	db->cache[i].st = *st;
	return 0;
}

int db_exec_cached(struct db *db, const char *sql)
{
	_cleanup_stmt_release_ sqlite3_stmt *st = NULL;
	int r;

	if ((r = db_prepare_cached(db, &st, sql)) < 0)
		return r;
	r = db_step(db, st);
	return r < 0 ? r : 0;
}

int db_step(struct db *db, sqlite3_stmt *st)
{
	int rc = sqlite3_step(st);

	if (rc == SQLITE_ROW)
		return 1;
	if (rc == SQLITE_DONE)
		return 0;
	return db_err(db, sqlite3_extended_errcode(db->h), sqlite3_sql(st));
}

int db_step_change(struct db *db, sqlite3_stmt *st)
{
	int r = db_step(db, st);

	if (r < 0)
		return r;
	return sqlite3_changes(db->h) > 0 ? 0 : -ENOENT;
}

int db_exec(struct db *db, const char *sql)
{
	int rc = sqlite3_exec(db->h, sql, NULL, NULL, NULL);
	return rc == SQLITE_OK ? 0 : db_err(db, sqlite3_extended_errcode(db->h), sql);
}

void bind_text_or_null(sqlite3_stmt *st, int col, const char *text)
{
	if (text)
		sqlite3_bind_text(st, col, text, -1, SQLITE_STATIC);
	else
		sqlite3_bind_null(st, col);
}

char *col_strdup(sqlite3_stmt *st, int col)
{
	const unsigned char *s = sqlite3_column_text(st, col);
	return s ? xstrdup((const char *)s) : NULL;
}

int db_unknown_word(const char *column, const char *word, const char *fmt, ...)
{
	_cleanup_free_ char *row = NULL;
	va_list ap;

	va_start(ap, fmt);
	if (vasprintf(&row, fmt, ap) < 0)
		row = NULL;
	va_end(ap);
	log_error("database: %s has the %s '%s', which this fleetd does not know (a newer fleetd's, or damage); "
		  "not guessing what it means", row ? row : "a row", column, word ? word : "(null)");
	return -EBADMSG;
}

int64_t unix_now(void)
{
	return (int64_t)time(NULL);
}

/* PRAGMA foreign_key_check: 0 if no row breaks a reference, else -EPROTO (each logged). */
static int fk_check(struct db *db)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r, bad = 0;

	if ((r = db_prepare(db, &st, "PRAGMA foreign_key_check")) < 0)
		return r;
	while ((r = db_step(db, st)) > 0) {
		log_error("database: row %lld of table %s breaks its reference to %s", (long long)sqlite3_column_int64(st, 1),
			  col_text(st, 0), col_text(st, 2));
		bad++;
	}
	return r < 0 ? r : bad ? -EPROTO : 0;
}

/* Migrate to schema version target (at most the newest); 0 or -errno (-EPROTO: the database is newer). */
static int db_migrate(struct db *db, int target)
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
	for (int v = version; v < target; v++) {
		_cleanup_free_ char *bump = xasprintf("PRAGMA user_version = %d", v + 1);
		bool fk_off = migration_fk_off(v);

		/* The pragma is a no-op inside a transaction: switch it before BEGIN. */
		if (fk_off && (r = db_exec(db, "PRAGMA foreign_keys = OFF")) < 0)
			return r;
		if ((r = db_exec(db, "BEGIN IMMEDIATE")) < 0)
			goto out;
		if ((r = db_exec(db, migrations[v])) < 0 || (fk_off && (r = fk_check(db)) < 0) ||
		    (r = db_exec(db, bump)) < 0) {
			(void)db_exec(db, "ROLLBACK");
			log_error("database migration to version %d failed", v + 1);
			goto out;
		}
		if ((r = db_exec(db, "COMMIT")) < 0)
			goto out;
		log_info("database migrated to schema version %d", v + 1);
	out:
		if (fk_off) {
			int q = db_exec(db, "PRAGMA foreign_keys = ON");

			if (r == 0)
				r = q;
		}
		if (r < 0)
			return r;
	}
	return 0;
}

int db_schema_version(void)
{
	return (int)ARRAY_SIZE(migrations);
}

int db_open_at(const char *path, int version, struct db **ret)
{
	_cleanup_(db_closep) struct db *db = xcalloc(1, sizeof(*db));
	int rc, r;

	if (version < 0 || version > (int)ARRAY_SIZE(migrations))
		return -EINVAL;

	/* Create the file 0600 ourselves: SQLite would honour the umask. */
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	close(fd);

	/*
	 * No allocation statistics (nothing reads them): with them, every SQLite
	 * malloc takes a global mutex. Only possible before SQLite initialises,
	 * so the first open sets it; later calls fail harmlessly.
	 */
	(void)sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
	db->owner = pthread_self();
	rc = sqlite3_open_v2(path, &db->h, SQLITE_OPEN_READWRITE | SQLITE_OPEN_FULLMUTEX, NULL);
	if (rc != SQLITE_OK)
		return db->h ? db_err(db, rc, path) : -ENOMEM;
	sqlite3_extended_result_codes(db->h, 1);
	sqlite3_busy_timeout(db->h, DB_BUSY_TIMEOUT_MS);
	if ((r = db_exec(db, "PRAGMA journal_mode = WAL")) < 0 ||
	    (r = db_exec(db, "PRAGMA synchronous = FULL")) < 0 ||
	    (r = db_exec(db, "PRAGMA foreign_keys = ON")) < 0)
		return r;
	if ((r = db_migrate(db, version)) < 0)
		return r;
	*ret = TAKE_PTR(db);
	return 0;
}

int db_open(const char *path, struct db **ret)
{
	return db_open_at(path, (int)ARRAY_SIZE(migrations), ret);
}

void db_close(struct db *db)
{
	if (!db)
		return;
	for (size_t i = 0; i < DB_STMT_CACHE && db->cache[i].sql; i++)
		sqlite3_finalize(db->cache[i].st);
	sqlite3_close_v2(db->h);
	free(db);
}
