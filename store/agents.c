/*
 * agents: the agents table: a row per agent with what it was made with,
 * its state (written only through lifecycle.c), health and rollback
 * results, the settings PATCH changes, the restore marker and a VM agent's
 * guest images. Deleting a row cascades to its snapshots, runs and secrets.
 */
#include "store/db.h"

#include <errno.h>
#include <sqlite3.h>

#include "common/util.h"
#include "store/db_internal.h"

int db_agent_insert(struct db *db, struct agent *a)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int64_t now = unix_now();
	int r;

	if ((r = db_prepare(db, &st,
			    "INSERT INTO agents (name, backend, state, memory_mib, vcpus, disk_gib,"
			    " network, command, created_at, updated_at, restart_policy, health_command,"
			    " health_interval_s, auto_rollback, snapshot_policy, snapshot_schedule, snapshot_keep,"
			    " run_timeout_s, max_queued, retry_interrupted, memory_quota_mib, egress_allow, secret_files,"
			    " autostart, boot_priority, host)"
			    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")) < 0)
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
	/* 0 is "not set" (a zeroed record): the defaults, as for a column the migration added. */
	if (a->run_timeout_s <= 0)
		a->run_timeout_s = RUN_TIMEOUT_DEFAULT;
	if (a->max_queued <= 0)
		a->max_queued = MAX_QUEUED_DEFAULT;
	sqlite3_bind_int(st, 18, a->run_timeout_s);
	sqlite3_bind_int(st, 19, a->max_queued);
	sqlite3_bind_int(st, 20, a->retry_interrupted);
	if (a->memory_quota_mib <= 0)
		a->memory_quota_mib = MEMORY_QUOTA_DEFAULT;
	sqlite3_bind_int(st, 21, a->memory_quota_mib);
	bind_text_or_null(st, 22, a->egress_allow);
	sqlite3_bind_int(st, 23, a->secret_files ? 1 : 0);
	sqlite3_bind_int(st, 24, a->autostart ? 1 : 0);
	sqlite3_bind_int(st, 25, a->boot_priority);
	bind_text_or_null(st, 26, a->host);
	if ((r = db_step(db, st)) < 0)
		return r;
	a->id = sqlite3_last_insert_rowid(db->h);
	a->created_at = a->updated_at = now;
	return 0;
}

#define AGENT_COLUMNS "id, name, backend, state, memory_mib, vcpus, disk_gib, network, command, created_at," \
	" updated_at, restart_policy, health_command, health_interval_s, auto_rollback, health, health_at," \
	" health_detail, last_rollback, snapshot_policy, snapshot_schedule, snapshot_keep, restoring, state_detail," \
	" run_timeout_s, max_queued, retry_interrupted, memory_quota_mib, egress_allow, secret_files, autostart," \
	" boot_priority, host"

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
	a->run_timeout_s = sqlite3_column_int(st, 24);
	a->max_queued = sqlite3_column_int(st, 25);
	a->retry_interrupted = sqlite3_column_int(st, 26);
	a->memory_quota_mib = sqlite3_column_int(st, 27);
	a->egress_allow = col_strdup(st, 28);
	a->secret_files = sqlite3_column_int(st, 29) != 0;
	a->autostart = sqlite3_column_int(st, 30) != 0;
	a->boot_priority = sqlite3_column_int(st, 31);
	a->host = col_strdup(st, 32);
	return a;
}

int db_agent_get(struct db *db, const char *name, struct agent **ret)
{
	_cleanup_stmt_release_ sqlite3_stmt *st = NULL;
	int r;

	if ((r = db_prepare_cached(db, &st, "SELECT " AGENT_COLUMNS " FROM agents WHERE name = ?")) < 0)
		return r;
	sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
	if ((r = db_step(db, st)) <= 0)
		return r == 0 ? -ENOENT : r;
	*ret = agent_from_row(st);
	return 0;
}

int db_agent_list(struct db *db, struct agent ***ret, size_t *n)
{
	_cleanup_stmt_release_ sqlite3_stmt *st = NULL;
	struct agent **list = NULL;
	size_t count = 0, cap = 0;
	int r;

	if ((r = db_prepare_cached(db, &st, "SELECT " AGENT_COLUMNS " FROM agents ORDER BY name")) < 0)
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

int db_agent_rows(struct db *db, void (*row)(void *ud, const struct agent_row *r), void *ud)
{
	/* Eight columns, no struct agent per row: a list of 1000 agents is read in well under a millisecond. */
	_cleanup_stmt_release_ sqlite3_stmt *st = NULL;
	int r;

	if ((r = db_prepare_cached(db, &st, "SELECT name, backend, state, network, host, memory_mib, vcpus, created_at "
				   "FROM agents ORDER BY name")) < 0)
		return r;
	while ((r = db_step(db, st)) > 0) {
		struct agent_row a = {
			.name = (const char *)sqlite3_column_text(st, 0),
			.backend = (const char *)sqlite3_column_text(st, 1),
			.state = (const char *)sqlite3_column_text(st, 2),
			.network = (const char *)sqlite3_column_text(st, 3),
			.host = (const char *)sqlite3_column_text(st, 4),
			.memory_mib = sqlite3_column_int(st, 5),
			.vcpus = sqlite3_column_int(st, 6),
			.created_at = sqlite3_column_int64(st, 7),
		};

		if (!a.name || !a.backend || !a.state || !a.network)
			return -EIO;	/* NOT NULL columns: only a damaged database */
		row(ud, &a);
	}
	return r;
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
	_cleanup_stmt_release_ sqlite3_stmt *st = NULL;
	int r;

	if ((r = db_prepare_cached(db, &st, "UPDATE agents SET state = ?, updated_at = ?, state_detail = ? WHERE name = ?")) < 0)
		return r;
	sqlite3_bind_text(st, 1, agent_state_to_string(state), -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, unix_now());
	bind_text_or_null(st, 3, detail);
	sqlite3_bind_text(st, 4, name, -1, SQLITE_STATIC);
	return db_step_change(db, st);
}

int db_agent_set_health(struct db *db, const char *name, int healthy, const char *detail)
{
	_cleanup_stmt_release_ sqlite3_stmt *st = NULL;
	int r;

	if ((r = db_prepare_cached(db, &st, "UPDATE agents SET health = ?, health_at = ?, health_detail = ? WHERE name = ?")) < 0)
		return r;
	sqlite3_bind_int(st, 1, healthy ? 1 : 0);
	sqlite3_bind_int64(st, 2, unix_now());
	sqlite3_bind_text(st, 3, detail, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 4, name, -1, SQLITE_STATIC);
	return db_step_change(db, st);
}

int db_agent_set_rollback(struct db *db, const char *name, const char *what)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r;

	if ((r = db_prepare(db, &st, "UPDATE agents SET last_rollback = ? WHERE name = ?")) < 0)
		return r;
	sqlite3_bind_text(st, 1, what, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC);
	return db_step_change(db, st);
}

int db_agent_set_settings(struct db *db, const struct agent *a)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r;

	if ((r = db_prepare(db, &st, "UPDATE agents SET command = ?, health_command = ?, health_interval_s = ?,"
				     " auto_rollback = ?, snapshot_policy = ?, snapshot_schedule = ?, snapshot_keep = ?,"
				     " updated_at = ?, run_timeout_s = ?, max_queued = ?, retry_interrupted = ?,"
				     " memory_quota_mib = ?, egress_allow = ?, secret_files = ?, network = ?, autostart = ?,"
				     " boot_priority = ? WHERE name = ?")) < 0)
		return r;
	bind_text_or_null(st, 1, a->command);
	bind_text_or_null(st, 2, a->health_command);
	sqlite3_bind_int(st, 3, a->health_interval_s);
	sqlite3_bind_int(st, 4, a->auto_rollback ? 1 : 0);
	sqlite3_bind_text(st, 5, snapshot_policy_to_string(a->snapshot_policy), -1, SQLITE_STATIC);
	bind_text_or_null(st, 6, a->snapshot_schedule);
	sqlite3_bind_int(st, 7, a->snapshot_keep);
	sqlite3_bind_int64(st, 8, unix_now());
	sqlite3_bind_int(st, 9, a->run_timeout_s);
	sqlite3_bind_int(st, 10, a->max_queued);
	sqlite3_bind_int(st, 11, a->retry_interrupted);
	sqlite3_bind_int(st, 12, a->memory_quota_mib > 0 ? a->memory_quota_mib : MEMORY_QUOTA_DEFAULT);
	bind_text_or_null(st, 13, a->egress_allow);
	sqlite3_bind_int(st, 14, a->secret_files ? 1 : 0);
	sqlite3_bind_text(st, 15, network_kind_to_string(a->network), -1, SQLITE_STATIC);
	sqlite3_bind_int(st, 16, a->autostart ? 1 : 0);
	sqlite3_bind_int(st, 17, a->boot_priority);
	sqlite3_bind_text(st, 18, a->name, -1, SQLITE_STATIC);
	return db_step_change(db, st);
}

int db_agent_set_host(struct db *db, const char *name, const char *from, const char *to)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r;

	/* One statement: still on from, and to still a host (a `host rm` meanwhile loses nothing). */
	if ((r = db_prepare(db, &st, "UPDATE agents SET host = ?, updated_at = ? WHERE name = ? AND host = ?"
				     " AND EXISTS (SELECT 1 FROM hosts WHERE name = ?)")) < 0)
		return r;
	sqlite3_bind_text(st, 1, to, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, unix_now());
	sqlite3_bind_text(st, 3, name, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 4, from, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 5, to, -1, SQLITE_STATIC);
	return db_step_change(db, st);
}

int db_agent_set_restoring(struct db *db, const char *name, const char *snap)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r;

	if ((r = db_prepare(db, &st, "UPDATE agents SET restoring = ? WHERE name = ?")) < 0)
		return r;
	bind_text_or_null(st, 1, snap);
	sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC);
	return db_step_change(db, st);
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
	return db_step_change(db, st);
}

int db_agent_delete(struct db *db, const char *name)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r;

	if ((r = db_prepare(db, &st, "DELETE FROM agents WHERE name = ?")) < 0)
		return r;
	sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
	return db_step_change(db, st);
}
