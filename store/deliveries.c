/*
 * deliveries: recording one verified webhook delivery (core/listener.c):
 * its per-route delivery id (hook_deliveries, the dedup key), its events
 * row with what it caused, and one queued run per subscriber whose filter
 * takes its type. A refusal (no route, a queue full) is decided before the
 * first write and leaves nothing, so a caller can commit many in one
 * transaction (group commit) and one refused delivery spoils none of the
 * others.
 */
#include "store/db.h"

#include <errno.h>
#include <sqlite3.h>
#include <string.h>

#include "common/util.h"
#include "store/db_internal.h"

static void strv_freep(char ***v)
{
	strv_free(*v);
}

/* The route's id and source (*source caller frees); -ENOENT if it is gone. */
static int route_of(struct db *db, const char *route, int64_t *id, char **source)
{
	_cleanup_stmt_release_ sqlite3_stmt *st = NULL;
	int r;

	if ((r = db_prepare_cached(db, &st, "SELECT id, source FROM hook_routes WHERE name = ?")) < 0)
		return r;
	sqlite3_bind_text(st, 1, route, -1, SQLITE_STATIC);
	if ((r = db_step(db, st)) <= 0)
		return r == 0 ? -ENOENT : r;
	*id = sqlite3_column_int64(st, 0);
	*source = col_strdup(st, 1);
	return 0;
}

/* Record (route_id, delivery_id) as seen: 0, -EEXIST if it was already (a redelivery), else -errno. */
static int claim(struct db *db, int64_t route_id, const char *delivery_id, int64_t at)
{
	_cleanup_stmt_release_ sqlite3_stmt *st = NULL;
	int r;

	if ((r = db_prepare_cached(db, &st, "INSERT INTO hook_deliveries (route_id, delivery_id, received_at)"
				     " VALUES (?, ?, ?)")) < 0)
		return r;
	sqlite3_bind_int64(st, 1, route_id);
	sqlite3_bind_text(st, 2, delivery_id, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 3, at);
	r = db_step(db, st);
	return r < 0 ? r : 0;	/* -EEXIST: its primary key is taken */
}

/* A subscriber that takes a delivery: its agent's name and what its run's room check needs. */
struct taker {
	int64_t agent_id, max_queued, queued_runs;
};

/* 1 if (route_id, delivery_id) was seen already, 0 if not, else -errno. */
static int seen(struct db *db, int64_t route_id, const char *delivery_id)
{
	_cleanup_stmt_release_ sqlite3_stmt *st = NULL;
	int r;

	if ((r = db_prepare_cached(db, &st, "SELECT 1 FROM hook_deliveries WHERE route_id = ? AND delivery_id = ?")) < 0)
		return r;
	sqlite3_bind_int64(st, 1, route_id);
	sqlite3_bind_text(st, 2, delivery_id, -1, SQLITE_STATIC);
	return db_step(db, st);
}

/*
 * The subscribers of route_id whose filter takes type and that have a
 * command to run, by agent id; a NULL-terminated list of names (caller
 * frees) and *takers (caller frees), one per name, read in this
 * transaction (so with the runs queued by the deliveries before it). An
 * agent without a command (`hook add` before `set --command`, or its
 * command taken away) is not one: a run would only fail, once per delivery.
 */
static int matching(struct db *db, int64_t route_id, const char *type, db_hook_filter_fn match, char ***ret,
		    struct taker **takers)
{
	_cleanup_stmt_release_ sqlite3_stmt *st = NULL;
	char **list = xcalloc(1, sizeof(*list));
	struct taker *t = NULL;
	size_t n = 0;
	int r;

	if ((r = db_prepare_cached(db, &st, "SELECT a.name, s.events, a.id, a.max_queued, a.queued_runs"
				     " FROM hook_subscriptions s JOIN agents a"
				     " ON a.id = s.agent_id WHERE s.route_id = ? AND a.command IS NOT NULL ORDER BY a.id")) < 0) {
		free(list);
		return r;
	}
	sqlite3_bind_int64(st, 1, route_id);
	while ((r = db_step(db, st)) > 0) {
		if (!match(col_text(st, 1), type))
			continue;
		list = xrealloc(list, (n + 2) * sizeof(*list));
		t = xrealloc(t, (n + 1) * sizeof(*t));
		t[n] = (struct taker){ sqlite3_column_int64(st, 2), sqlite3_column_int64(st, 3),
				       sqlite3_column_int64(st, 4) };
		list[n++] = col_strdup(st, 0);
		list[n] = NULL;
	}
	if (r < 0) {
		strv_free(list);
		free(t);
		return r;
	}
	*ret = list;
	*takers = t;
	return 0;
}

void db_hook_result_clear(struct db_hook_result *res)
{
	free(res->run_ids);
	strv_free(res->run_agents);
	free(res->trigger);
	free(res->full_agent);
	memset(res, 0, sizeof(*res));
}

/*
 * The body of db_hook_delivery_record. Whatever may refuse the delivery
 * (-ENOENT, -EDQUOT) is decided by reads before its first write, so a
 * refusal leaves nothing without a savepoint; only an error of SQLite's
 * (-EIO, -ENOSPC, ...) can stop it halfway.
 */
static int record(struct db *db, const struct db_hook_delivery *d, db_hook_filter_fn match,
		  struct db_hook_result *res)
{
	_cleanup_free_ char *source = NULL;
	_cleanup_(strv_freep) char **agents = NULL;
	_cleanup_free_ struct taker *takers = NULL;
	struct run_event ev = { 0 };
	int64_t route_id;
	size_t n = 0;
	int r;

	if ((r = route_of(db, d->route, &route_id, &source)) < 0)
		return r;
	ev = (struct run_event){ .source = source, .route = (char *)d->route, .delivery_id = (char *)d->delivery_id,
				 .type = (char *)d->event_type, .received_at = d->received_at };
	if (!d->no_run && (r = matching(db, route_id, d->event_type, match, &agents, &takers)) < 0)
		return r;
	while (agents && agents[n])
		n++;
	/* db_run_enqueue's room rule, with each agent's row as matching read it (in this transaction). */
	for (size_t i = 0; i < n; i++) {
		if (db_run_room(takers[i].max_queued, takers[i].queued_runs) == 0)
			continue;
		/* A full queue refuses a new delivery, not a redelivery (answered as one, below). */
		if ((r = seen(db, route_id, d->delivery_id)) < 0)
			return r;
		if (r == 0) {
			res->full_agent = xstrdup(agents[i]);
			return -EDQUOT;
		}
		break;
	}
	r = claim(db, route_id, d->delivery_id, d->received_at);
	if (r == -EEXIST) {
		/* A redelivery: noted (no headers, no body: nothing reads them), nothing queued. */
		res->outcome = "duplicate";
		if ((r = db_event_insert(db, &ev, res->outcome)) < 0)
			return r;
		res->event_id = ev.id;
		return 0;
	}
	if (r < 0)
		return r;
	res->outcome = d->no_run ? "no-run" : n ? "queued" : "no-subscriber";
	ev.headers = (char *)d->headers;
	ev.body = (unsigned char *)d->body;
	ev.body_len = d->body_len;
	if ((r = db_event_insert(db, &ev, res->outcome)) < 0)
		return r;
	res->event_id = ev.id;
	res->run_ids = xcalloc(n ? n : 1, sizeof(*res->run_ids));
	for (size_t i = 0; i < n; i++) {
		/* db_run_enqueue's run row, without its savepoint (see db_hook_delivery_record). */
		if ((r = db_run_insert_queued(db, takers[i].agent_id, source, ev.id, &res->run_ids[i])) < 0)
			return r;
		res->n_runs++;
	}
	/* For the watchers' run.queued, once committed (core/deliveries.c). */
	res->run_agents = TAKE_PTR(agents);
	res->trigger = TAKE_PTR(source);
	return 0;
}

int db_hook_delivery_record(struct db *db, const struct db_hook_delivery *d, db_hook_filter_fn match,
			    struct db_hook_result *res)
{
	bool own = sqlite3_get_autocommit(db->h);
	int r;

	memset(res, 0, sizeof(*res));
	/*
	 * In the caller's transaction (the group commit's), no savepoint: a
	 * refusal has written nothing (record), and an error of SQLite's makes
	 * the caller roll the whole transaction back. Each savepoint cost ~10k
	 * instructions per delivery, most of it SQLite copying every page the
	 * delivery touched into its journal. On its own, the savepoint is its
	 * transaction: all of it or nothing.
	 */
	if (own && (r = db_exec_cached(db, "SAVEPOINT hook_delivery")) < 0)
		return r;
	if ((r = record(db, d, match, res)) < 0 || (own && (r = db_exec_cached(db, "RELEASE hook_delivery")) < 0)) {
		if (own) {
			(void)db_exec(db, "ROLLBACK TO hook_delivery");
			(void)db_exec_cached(db, "RELEASE hook_delivery");
		}
		char *full = TAKE_PTR(res->full_agent);
		db_hook_result_clear(res);
		res->full_agent = full;
		return r;
	}
	return 0;
}
