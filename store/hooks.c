/*
 * hooks: the webhook tables of migration 9: routes (with their secrets),
 * subscriptions, and the events listing and pruning. A route goes with its
 * last subscriber: a trigger in the schema does it, so removing an agent
 * (foreign-key cascade) does it too.
 */
#include "store/db.h"

#include <errno.h>
#include <sqlite3.h>
#include <string.h>

#include "common/util.h"
#include "store/db_internal.h"

#define ROUTE_COLUMNS "id, name, source, secret, prev_secret, prev_until, header, encoding, prefix, datadog_auth," \
	" delivery_field, max_body, public_url, created_at"

static void wipe_free(unsigned char *p, size_t len)
{
	if (p)
		explicit_bzero(p, len);
	free(p);
}

void db_hook_route_free(struct db_hook_route *r)
{
	if (!r)
		return;
	free(r->name);
	free(r->source);
	wipe_free(r->secret, r->secret_len);
	wipe_free(r->prev_secret, r->prev_len);
	free(r->header);
	free(r->encoding);
	free(r->prefix);
	free(r->datadog_auth);
	free(r->delivery_field);
	free(r->public_url);
	free(r);
}

void db_hook_routes_free(struct db_hook_route **list)
{
	if (!list)
		return;
	for (size_t i = 0; list[i]; i++)
		db_hook_route_free(list[i]);
	free(list);
}

void db_hook_subs_free(struct db_hook_sub *subs, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(subs[i].route);
		free(subs[i].agent);
		free(subs[i].events);
	}
	free(subs);
}

void db_events_free(struct db_event *ev, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(ev[i].source);
		free(ev[i].route);
		free(ev[i].delivery_id);
		free(ev[i].event_type);
		free(ev[i].outcome);
		free(ev[i].runs);
	}
	free(ev);
}

static unsigned char *col_blob(sqlite3_stmt *st, int col, size_t *len)
{
	const void *b = sqlite3_column_blob(st, col);
	int n = sqlite3_column_bytes(st, col);
	unsigned char *p;

	*len = 0;
	if (!b || n <= 0)
		return NULL;
	p = xmalloc((size_t)n);
	memcpy(p, b, (size_t)n);
	*len = (size_t)n;
	return p;
}

static struct db_hook_route *route_from_row(sqlite3_stmt *st)
{
	struct db_hook_route *r = xcalloc(1, sizeof(*r));

	r->id = sqlite3_column_int64(st, 0);
	r->name = col_strdup(st, 1);
	r->source = col_strdup(st, 2);
	r->secret = col_blob(st, 3, &r->secret_len);
	r->prev_secret = col_blob(st, 4, &r->prev_len);
	r->prev_until = sqlite3_column_int64(st, 5);
	r->header = col_strdup(st, 6);
	r->encoding = col_strdup(st, 7);
	r->prefix = col_strdup(st, 8);
	r->datadog_auth = col_strdup(st, 9);
	r->delivery_field = col_strdup(st, 10);
	r->max_body = (long)sqlite3_column_int64(st, 11);
	r->public_url = col_strdup(st, 12);
	r->created_at = sqlite3_column_int64(st, 13);
	return r;
}

static int subscribe(struct db *db, int64_t route_id, const char *agent, const char *events)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r;

	if ((r = db_prepare(db, &st, "INSERT INTO hook_subscriptions (route_id, agent_id, events, created_at)"
				     " SELECT ?, id, ?, ? FROM agents WHERE name = ?")) < 0)
		return r;
	sqlite3_bind_int64(st, 1, route_id);
	bind_text_or_null(st, 2, events);
	sqlite3_bind_int64(st, 3, unix_now());
	sqlite3_bind_text(st, 4, agent, -1, SQLITE_STATIC);
	return db_step_change(db, st);	/* no agent: no row, -ENOENT */
}

static int route_insert(struct db *db, struct db_hook_route *rt)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r;

	if ((r = db_prepare(db, &st, "INSERT INTO hook_routes (name, source, secret, header, encoding, prefix,"
				     " datadog_auth, delivery_field, max_body, public_url, created_at)"
				     " VALUES (?, ?, ?, ?, coalesce(?, 'hex'), ?, coalesce(?, 'header'), ?, ?, ?, ?)")) < 0)
		return r;
	sqlite3_bind_text(st, 1, rt->name, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, rt->source, -1, SQLITE_STATIC);
	sqlite3_bind_blob(st, 3, rt->secret, (int)rt->secret_len, SQLITE_STATIC);
	bind_text_or_null(st, 4, rt->header);
	bind_text_or_null(st, 5, rt->encoding);
	bind_text_or_null(st, 6, rt->prefix);
	bind_text_or_null(st, 7, rt->datadog_auth);
	bind_text_or_null(st, 8, rt->delivery_field);
	sqlite3_bind_int64(st, 9, rt->max_body);
	bind_text_or_null(st, 10, rt->public_url);
	sqlite3_bind_int64(st, 11, rt->created_at = unix_now());
	if ((r = db_step(db, st)) < 0)
		return r;
	rt->id = sqlite3_last_insert_rowid(db->h);
	return 0;
}

int db_hook_route_insert(struct db *db, struct db_hook_route *rt, const char *agent, const char *events)
{
	int r;

	if ((r = db_exec(db, "BEGIN IMMEDIATE")) < 0)
		return r;
	if ((r = route_insert(db, rt)) < 0 || (r = subscribe(db, rt->id, agent, events)) < 0) {
		(void)db_exec(db, "ROLLBACK");
		return r;
	}
	return db_exec(db, "COMMIT");
}

int db_hook_route_get(struct db *db, const char *name, struct db_hook_route **ret)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r;

	if ((r = db_prepare(db, &st, "SELECT " ROUTE_COLUMNS " FROM hook_routes WHERE name = ?")) < 0)
		return r;
	sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
	if ((r = db_step(db, st)) <= 0)
		return r == 0 ? -ENOENT : r;
	*ret = route_from_row(st);
	return 0;
}

int db_hook_route_list(struct db *db, struct db_hook_route ***ret, size_t *n)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	struct db_hook_route **list = xcalloc(1, sizeof(*list));
	size_t count = 0;
	int r;

	if ((r = db_prepare(db, &st, "SELECT " ROUTE_COLUMNS " FROM hook_routes ORDER BY name")) < 0) {
		free(list);
		return r;
	}
	while ((r = db_step(db, st)) > 0) {
		list = xrealloc(list, (count + 2) * sizeof(*list));
		list[count++] = route_from_row(st);
		list[count] = NULL;
	}
	if (r < 0) {
		db_hook_routes_free(list);
		return r;
	}
	*ret = list;
	*n = count;
	return 0;
}

int db_hook_subscribe(struct db *db, const char *route, const char *agent, const char *events, const char **what)
{
	_cleanup_(db_hook_route_freep) struct db_hook_route *rt = NULL;
	int r;

	*what = "route";
	if ((r = db_hook_route_get(db, route, &rt)) < 0)
		return r;
	*what = "agent";
	return subscribe(db, rt->id, agent, events);
}

int db_hook_set_events(struct db *db, const char *route, const char *agent, const char *events)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r;

	if ((r = db_prepare(db, &st, "UPDATE hook_subscriptions SET events = ?"
				     " WHERE route_id = (SELECT id FROM hook_routes WHERE name = ?)"
				     " AND agent_id = (SELECT id FROM agents WHERE name = ?)")) < 0)
		return r;
	bind_text_or_null(st, 1, events);
	sqlite3_bind_text(st, 2, route, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 3, agent, -1, SQLITE_STATIC);
	return db_step_change(db, st);	/* not subscribed: no row, -ENOENT */
}

int db_hook_unsubscribe(struct db *db, const char *route, const char *agent, bool *route_removed)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL, *left = NULL;
	int r;

	if ((r = db_exec(db, "BEGIN IMMEDIATE")) < 0)
		return r;
	if ((r = db_prepare(db, &st, "DELETE FROM hook_subscriptions WHERE"
				     " route_id = (SELECT id FROM hook_routes WHERE name = ?)"
				     " AND agent_id = (SELECT id FROM agents WHERE name = ?)")) < 0)
		goto fail;
	sqlite3_bind_text(st, 1, route, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, agent, -1, SQLITE_STATIC);
	if ((r = db_step_change(db, st)) < 0)
		goto fail;
	if ((r = db_prepare(db, &left, "SELECT count(*) FROM hook_routes WHERE name = ?")) < 0)
		goto fail;
	sqlite3_bind_text(left, 1, route, -1, SQLITE_STATIC);
	if ((r = db_step(db, left)) < 0)
		goto fail;
	*route_removed = sqlite3_column_int(left, 0) == 0;
	sqlite3_reset(left);
	return db_exec(db, "COMMIT");
fail:
	(void)db_exec(db, "ROLLBACK");
	return r;
}

int db_hook_sub_list(struct db *db, const char *agent, struct db_hook_sub **ret, size_t *n)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	struct db_hook_sub *subs = NULL;
	size_t count = 0;
	int r;

	if ((r = db_prepare(db, &st, "SELECT r.name, a.name, s.events, s.created_at FROM hook_subscriptions s"
				     " JOIN hook_routes r ON r.id = s.route_id JOIN agents a ON a.id = s.agent_id"
				     " WHERE ?1 IS NULL OR a.name = ?1 ORDER BY r.name, a.name")) < 0)
		return r;
	bind_text_or_null(st, 1, agent);
	while ((r = db_step(db, st)) > 0) {
		subs = xrealloc(subs, (count + 1) * sizeof(*subs));
		subs[count].route = col_strdup(st, 0);
		subs[count].agent = col_strdup(st, 1);
		subs[count].events = col_strdup(st, 2);
		subs[count].created_at = sqlite3_column_int64(st, 3);
		count++;
	}
	if (r < 0) {
		db_hook_subs_free(subs, count);
		return r;
	}
	*ret = subs;
	*n = count;
	return 0;
}

int db_hook_rotate(struct db *db, const char *route, const unsigned char *secret, size_t len, int64_t prev_until)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r;

	if ((r = db_prepare(db, &st, "UPDATE hook_routes SET prev_secret = secret, prev_until = ?, secret = ?"
				     " WHERE name = ?")) < 0)
		return r;
	sqlite3_bind_int64(st, 1, prev_until);
	sqlite3_bind_blob(st, 2, secret, (int)len, SQLITE_STATIC);
	sqlite3_bind_text(st, 3, route, -1, SQLITE_STATIC);
	return db_step_change(db, st);
}

int db_events_list(struct db *db, const char *route, int limit, struct db_event **ret, size_t *n)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	struct db_event *ev = NULL;
	size_t count = 0;
	int r;

	if ((r = db_prepare(db, &st, "SELECT e.id, e.received_at, e.source, e.route, e.delivery_id, e.event_type,"
				     " e.outcome, (SELECT group_concat(id, ',') FROM runs WHERE event_id = e.id)"
				     " FROM events e WHERE ?1 IS NULL OR e.route = ?1 ORDER BY e.id DESC LIMIT ?2")) < 0)
		return r;
	bind_text_or_null(st, 1, route);
	sqlite3_bind_int(st, 2, limit > 0 ? limit : -1);
	while ((r = db_step(db, st)) > 0) {
		ev = xrealloc(ev, (count + 1) * sizeof(*ev));
		ev[count] = (struct db_event){
			.id = sqlite3_column_int64(st, 0),
			.received_at = sqlite3_column_int64(st, 1),
			.source = col_strdup(st, 2),
			.route = col_strdup(st, 3),
			.delivery_id = col_strdup(st, 4),
			.event_type = col_strdup(st, 5),
			.outcome = col_strdup(st, 6),
			.runs = col_strdup(st, 7),
		};
		count++;
	}
	if (r < 0) {
		db_events_free(ev, count);
		return r;
	}
	*ret = ev;
	*n = count;
	return 0;
}

int db_events_prune(struct db *db, int64_t before, int64_t keys_before, int *ret_events, int *ret_keys)
{
	_cleanup_stmt_ sqlite3_stmt *ev = NULL, *keys = NULL;
	int r;

	/* An event a queued or running run still reads (its stdin) stays. */
	if ((r = db_prepare(db, &ev, "DELETE FROM events WHERE received_at < ?"
				     " AND id NOT IN (SELECT event_id FROM runs WHERE event_id IS NOT NULL"
				     " AND state IN (?, ?))")) < 0 ||
	    (r = db_prepare(db, &keys, "DELETE FROM hook_deliveries WHERE received_at < ?")) < 0)
		return r;
	sqlite3_bind_int64(ev, 1, before);
	sqlite3_bind_text(ev, 2, run_state_to_string(RUN_QUEUED), -1, SQLITE_STATIC);
	sqlite3_bind_text(ev, 3, run_state_to_string(RUN_RUNNING), -1, SQLITE_STATIC);
	if ((r = db_step(db, ev)) < 0)
		return r;
	*ret_events = sqlite3_changes(db->h);
	sqlite3_bind_int64(keys, 1, keys_before);
	if ((r = db_step(db, keys)) < 0)
		return r;
	*ret_keys = sqlite3_changes(db->h);
	return 0;
}
