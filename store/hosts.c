/*
 * hosts: the hosts table (migration 18, #15): the hypervisor hosts VM
 * agents are placed on. The row `local` (uri NULL: the configured
 * libvirt_uri) is made by the migration and never deleted. A host is
 * deleted only while no agent names it, in the same statement.
 */
#include "store/db.h"

#include <errno.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "store/db_internal.h"

int db_host_insert(struct db *db, const struct host *h)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r;

	if ((r = db_prepare(db, &st, "INSERT INTO hosts (name, uri, max_agents, reserve_memory_mib, draining, added_at)"
				     " VALUES (?, ?, ?, ?, ?, ?)")) < 0)
		return r;
	sqlite3_bind_text(st, 1, h->name, -1, SQLITE_STATIC);
	bind_text_or_null(st, 2, h->uri);
	sqlite3_bind_int(st, 3, h->max_agents);
	sqlite3_bind_int(st, 4, h->reserve_memory_mib);
	sqlite3_bind_int(st, 5, h->draining ? 1 : 0);
	sqlite3_bind_int64(st, 6, unix_now());
	return db_step(db, st);
}

int db_host_list(struct db *db, struct host **ret, size_t *n)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	struct host *v = NULL;
	size_t k = 0, cap = 0;
	int r;

	/* Each host with its agents counted in the same read. */
	if ((r = db_prepare(db, &st, "SELECT h.name, h.uri, h.max_agents, h.reserve_memory_mib, h.draining, h.added_at,"
				     " (SELECT count(*) FROM agents a WHERE a.host = h.name)"
				     " FROM hosts h ORDER BY h.name = 'local' DESC, h.name")) < 0)
		return r;
	while ((r = db_step(db, st)) == 1) {
		if (k == cap) {
			cap = cap ? cap * 2 : 8;
			v = xrealloc(v, cap * sizeof(*v));
		}
		v[k++] = (struct host){
			.name = col_strdup(st, 0), .uri = col_strdup(st, 1), .max_agents = sqlite3_column_int(st, 2),
			.reserve_memory_mib = sqlite3_column_int(st, 3), .draining = sqlite3_column_int(st, 4) != 0,
			.added_at = sqlite3_column_int64(st, 5), .agents = sqlite3_column_int(st, 6),
			.facts.free_memory_bytes = -1,
		};
	}
	if (r < 0) {
		host_list_free(v, k);
		return r;
	}
	*ret = v;
	*n = k;
	return 0;
}

int db_host_get(struct db *db, const char *name, struct host *ret)
{
	struct host *v = NULL;
	size_t n = 0;
	int r;

	if ((r = db_host_list(db, &v, &n)) < 0)
		return r;
	r = -ENOENT;
	for (size_t i = 0; i < n; i++)
		if (strcmp(v[i].name, name) == 0) {
			*ret = v[i];
			v[i] = (struct host){ 0 };
			r = 0;
		}
	host_list_free(v, n);
	return r;
}

int db_host_set_draining(struct db *db, const char *name, bool draining)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r;

	if ((r = db_prepare(db, &st, "UPDATE hosts SET draining = ? WHERE name = ?")) < 0)
		return r;
	sqlite3_bind_int(st, 1, draining ? 1 : 0);
	sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC);
	return db_step_change(db, st);
}

int db_host_delete(struct db *db, const char *name)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r;

	if ((r = db_prepare(db, &st, "DELETE FROM hosts WHERE name = ? AND name <> 'local'"
				     " AND NOT EXISTS (SELECT 1 FROM agents WHERE host = ?)")) < 0)
		return r;
	sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC);
	if ((r = db_step(db, st)) < 0)
		return r;
	if (sqlite3_changes(db->h) > 0)
		return 0;
	/* Not deleted: gone already, or still holding agents. */
	{
		_cleanup_stmt_ sqlite3_stmt *q = NULL;

		if ((r = db_prepare(db, &q, "SELECT 1 FROM hosts WHERE name = ?")) < 0)
			return r;
		sqlite3_bind_text(q, 1, name, -1, SQLITE_STATIC);
		r = db_step(db, q);
		return r < 0 ? r : r == 1 ? -EBUSY : -ENOENT;
	}
}
