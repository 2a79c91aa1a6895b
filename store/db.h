/*
 * db: fleetd's SQLite state, the one public header of store/ (the only
 * folder that includes <sqlite3.h>). store/ owns the schema, its migrations
 * (keyed on PRAGMA user_version) and every query; every query is
 * parameterized. One file per table family: db.c (open, migrations,
 * shared helpers), agents.c, snapshots.c, runs.c, audit.c. Returns
 * negative errno codes and logs SQLite's own words at debug level; callers
 * decide what to tell the user. A state or kind column holding a word this
 * fleetd does not know is -EBADMSG (logged with the row), never guessed.
 * The database file locked by another process past the busy timeout
 * (DB_BUSY_TIMEOUT_MS) is -ENOLCK, never -EBUSY: that one means "the agent
 * is busy" to core/ and api/, a refusal the client should not retry blindly.
 */
#ifndef FLEET_DB_H
#define FLEET_DB_H

#include <stdbool.h>
#include <stddef.h>

/* How long a query waits for a lock another process holds on the database before -ENOLCK. */
#define DB_BUSY_TIMEOUT_MS 5000
#include <stdint.h>

#include "common/cron.h"
#include "model/agent.h"
#include "model/host.h"
#include "model/run.h"
#include "model/snapshot.h"

struct db;

struct audit_entry {
	int64_t id;
	int64_t at_ms;		/* unix milliseconds */
	long uid;
	char *action;
	char *target;
	char *outcome;
	char *detail;
};

/* Open (creating and migrating) the database at path; -errno. */
int db_open(const char *path, struct db **ret);
/*
 * db_open, migrating no further than schema version (0 to db_schema_version()):
 * what the fleetd of that version made, for the upgrade tests' fixtures
 * (tests/fixtures/schema/). 0, or -errno (-EINVAL: no such version).
 */
int db_open_at(const char *path, int version, struct db **ret);
void db_close(struct db *db);
static inline void db_closep(struct db **db) { db_close(*db); }

/*
 * Copy the database, consistent at one moment, into the empty file at path
 * (store/backup.c; a link there is refused); 0 or -errno.
 */
int db_backup_to(struct db *db, const char *path);

/* The schema version this build writes. */
int db_schema_version(void);

/* Insert a new agent; fills a->id (and run_timeout_s, max_queued if 0: their defaults). -EEXIST if the name is taken. */
int db_agent_insert(struct db *db, struct agent *a);
/* -ENOENT if there is no such agent. */
int db_agent_get(struct db *db, const char *name, struct agent **ret);
/* All agents ordered by name; *ret is a NULL-terminated array the caller frees with agent_list_free (agent.h). */
int db_agent_list(struct db *db, struct agent ***ret, size_t *n);
int db_agent_count(struct db *db, long *ret);
/* What `fleetctl list` shows of an agent (db_agent_rows); its strings live until the callback returns. */
struct agent_row {
	const char *name, *backend, *state, *network, *host;	/* host NULL: none (a user agent) */
	int memory_mib, vcpus;
	long long created_at;
};
/* row(ud, r) for each agent in name order, from one query of those columns only; 0 or -errno. */
int db_agent_rows(struct db *db, void (*row)(void *ud, const struct agent_row *r), void *ud);
/* Only lifecycle.c calls this. detail (may be NULL) replaces state_detail. */
int db_agent_set_state(struct db *db, const char *name, enum agent_state state, const char *detail);
/* Record the result of a health check (healthy 1 or 0) with its detail. */
int db_agent_set_health(struct db *db, const char *name, int healthy, const char *detail);
/* Record what the last automatic rollback did. */
int db_agent_set_rollback(struct db *db, const char *name, const char *what);
/* Store what PATCH can change: a->command, health_command, health_interval_s, auto_rollback,
 * snapshot_policy, snapshot_schedule, snapshot_keep, run_timeout_s, max_queued, retry_interrupted and
 * egress_allow, network;
 * one UPDATE. */
int db_agent_set_settings(struct db *db, const struct agent *a);
/* Record that a restore to snap is under way (NULL: none is), so a kill -9 in it can be finished. */
int db_agent_set_restoring(struct db *db, const char *name, const char *snap);
/* fleetctl move's commit: the agent's host from `from` to `to`; -ENOENT unless it is on from and to exists. */
int db_agent_set_host(struct db *db, const char *name, const char *from, const char *to);
/* A VM agent's image record (struct agent_images, agent.h); -ENOENT if there is no such agent. */
int db_agent_get_images(struct db *db, const char *name, struct agent_images *ret);
int db_agent_set_images(struct db *db, const char *name, const struct agent_images *im);
/* Delete the agent and (by foreign keys) its snapshots, runs and secrets; -ENOENT. */
int db_agent_delete(struct db *db, const char *name);

/*
 * Hosts (store/hosts.c). insert: -EEXIST if the name is taken. list: every
 * host, `local` first, each with its agents counted (caller frees with
 * host_list_free). get: one (host_clear it), -ENOENT. delete: -EBUSY while
 * an agent is placed on it (or it is `local`), -ENOENT.
 */
int db_host_insert(struct db *db, const struct host *h);
int db_host_list(struct db *db, struct host **ret, size_t *n);
int db_host_get(struct db *db, const char *name, struct host *ret);
int db_host_set_draining(struct db *db, const char *name, bool draining);
int db_host_delete(struct db *db, const char *name);

/* A state filter of db_snapshot_list and db_run_list: any state. */
#define DB_ANY_STATE (-1)

/* Record the intent to make a snapshot (state 'creating'); -EEXIST if the name is taken. */
int db_snapshot_begin(struct db *db, const char *agent, const char *name, const char *note, bool pinned);
/*
 * The snapshot exists now: state 'ready' with its kind, size and what the
 * health check before it said (good: 1, 0, or -1 unknown), in one statement:
 * one commit (one fsync) on the snapshot's path, and never a ready row
 * without its verdict.
 */
int db_snapshot_ready(struct db *db, const char *agent, const char *name, enum snapshot_kind kind,
		      long long size_bytes, int good);
int db_snapshot_get(struct db *db, const char *agent, const char *name, struct snapshot **ret);
/* Snapshots of agent (all agents if NULL) in state (an enum snapshot_state, or DB_ANY_STATE), oldest first;
 * NULL-terminated. */
int db_snapshot_list(struct db *db, const char *agent, int state, struct snapshot ***ret, size_t *n);
int db_snapshot_delete(struct db *db, const char *agent, const char *name);
/* SNAPSHOT_DELETING: a delete under way, finished at start if interrupted. */
int db_snapshot_set_state(struct db *db, const char *agent, const char *name, enum snapshot_state state);
int db_snapshot_set_pinned(struct db *db, const char *agent, const char *name, bool pinned);

/*
 * Queue a run of agent (durable once this returns 0), in one transaction
 * with its event: ev NULL (none), ev->id > 0 (an events row that exists),
 * or ev->id 0 (stored now; ev->id is set). -ENOENT no such agent, -EDQUOT
 * the agent's max_queued runs are waiting already.
 */
int db_run_enqueue(struct db *db, const char *agent, const char *trigger, struct run_event *ev, int64_t *ret_id);
/* db_run_enqueue without an event. */
int db_run_insert(struct db *db, const char *agent, const char *trigger, int64_t *ret_id);
/* One events row (a run's cause, its stdin); -ENOENT. */
int db_event_get(struct db *db, int64_t id, struct run_event **ret);
/* queued -> cancelled; -ENOENT if the run is not queued (any more). */
int db_run_cancel_queued(struct db *db, int64_t id, const char *error);
int db_run_get(struct db *db, int64_t id, struct run **ret);
/* The newest `limit` (0: all) runs of agent (all if NULL) in state (an enum run_state, or DB_ANY_STATE),
 * oldest first. */
int db_run_list(struct db *db, const char *agent, int state, int limit, struct run ***ret, size_t *n);
/*
 * The oldest queued run of each agent that has one, oldest first (what the
 * queue may start next): NULL-terminated, run_list_free. Its cost grows with
 * the number of agents, not with the length of their queues.
 */
int db_run_heads(struct db *db, struct run ***ret, size_t *n);
/*
 * Every agent's count of queued runs (agents.queued_runs, kept by the queue):
 * names[i] (caller frees each and the array) and counts[i] (caller frees), by name.
 */
int db_run_queue_depths(struct db *db, char ***names, long **counts, size_t *n);
/*
 * A pass of the run queue (core/runs.c) as a savepoint inside the caller's
 * transaction: begin, then end keeping what it wrote (-errno if that fails:
 * then nothing of it stays) or not (keep false: all of it undone; 0).
 */
int db_runs_pass_begin(struct db *db);
int db_runs_pass_end(struct db *db, bool keep);
/* queued -> running; -ENOENT if the run is not queued. */
int db_run_start(struct db *db, int64_t id, const char *log_path);
int db_run_set_snapshot(struct db *db, int64_t id, const char *snap);
/* To a final state (run_state_final); exit_code -1 for none. */
int db_run_finish(struct db *db, int64_t id, enum run_state state, int exit_code, const char *error);
/*
 * Runs left 'running' (run id, or all if id is 0: at start, after a kill
 * -9) that fleetd no longer runs: queued again if their agent's
 * retry_interrupted exceeds their retries (which count it), else
 * 'interrupted' with error. *ret_count interrupted, *ret_requeued queued.
 */
int db_runs_interrupt(struct db *db, int64_t id, const char *error, int *ret_count, int *ret_requeued);

/*
 * Webhook routes (store/hooks.c). Sources, encodings and auth kinds are
 * stored as the words hooks/ names them; core/hooks.c checks them. Secrets
 * are raw bytes and leave the store only towards core/hooks.c.
 */
struct db_hook_route {
	int64_t id;
	char *name;
	char *source;
	unsigned char *secret;
	size_t secret_len;
	unsigned char *prev_secret;	/* the one before a rotation, or NULL */
	size_t prev_len;
	int64_t prev_until;		/* unix seconds prev_secret works until; 0: none */
	char *header, *encoding, *prefix, *datadog_auth, *delivery_field, *public_url;	/* NULL: unset */
	long max_body;
	int64_t created_at;
};
struct db_hook_sub {
	char *route;
	char *agent;
	char *events;			/* comma-separated, or NULL: every event */
	int64_t created_at;
};
struct db_event {
	int64_t id;
	int64_t received_at;
	char *source, *route, *delivery_id, *event_type, *outcome;
	char *runs;			/* the ids of the runs it queued, comma-separated, or NULL */
};
void db_hook_route_free(struct db_hook_route *r);	/* wipes the secrets */
static inline void db_hook_route_freep(struct db_hook_route **r) { db_hook_route_free(*r); }
void db_hook_routes_free(struct db_hook_route **list);	/* a NULL-terminated list */
void db_hook_subs_free(struct db_hook_sub *subs, size_t n);
void db_events_free(struct db_event *ev, size_t n);

/* Create route r (r->id set) with agent as its first subscriber, in one transaction;
 * -EEXIST if the name is taken, -ENOENT if there is no such agent. */
int db_hook_route_insert(struct db *db, struct db_hook_route *r, const char *agent, const char *events);
/* -ENOENT if there is no such route. */
int db_hook_route_get(struct db *db, const char *name, struct db_hook_route **ret);
/* Every route ordered by name; NULL-terminated. */
int db_hook_route_list(struct db *db, struct db_hook_route ***ret, size_t *n);
/* Subscribe agent to route; -ENOENT (no route or agent: *what says which), -EEXIST if it is already. */
int db_hook_subscribe(struct db *db, const char *route, const char *agent, const char *events, const char **what);
/* A subscription's filter becomes events (NULL: every event); -ENOENT if agent is not subscribed to route. */
int db_hook_set_events(struct db *db, const char *route, const char *agent, const char *events);
/* Unsubscribe; -ENOENT if it is not subscribed. *route_removed: it was the last subscriber, the route is gone. */
int db_hook_unsubscribe(struct db *db, const char *route, const char *agent, bool *route_removed);
/* Subscriptions of agent (all if NULL), by route then agent. */
int db_hook_sub_list(struct db *db, const char *agent, struct db_hook_sub **ret, size_t *n);
/* The current secret becomes the previous one (working until prev_until), secret the current; -ENOENT. */
int db_hook_rotate(struct db *db, const char *route, const unsigned char *secret, size_t len, int64_t prev_until);
/* The newest `limit` events (of route, or all if NULL), newest first. */
int db_events_list(struct db *db, const char *route, int limit, struct db_event **ret, size_t *n);
/* Delete events received before `before` (their runs keep going, event_id set NULL) and delivery ids
 * received before `keys_before`; counts in *ret_events and *ret_keys. */
int db_events_prune(struct db *db, int64_t before, int64_t keys_before, int *ret_events, int *ret_keys);

/*
 * One verified webhook delivery (store/deliveries.c), as the listener sent
 * it up. Nothing is owned: the caller's strings.
 */
struct db_hook_delivery {
	const char *route;
	const char *delivery_id;
	const char *event_type;		/* may be NULL */
	bool no_run;			/* a ping, Slack's challenge: stored, answered, queues nothing */
	int64_t received_at;
	const char *headers;		/* a JSON object's text, or NULL */
	const unsigned char *body;
	size_t body_len;
};
/* What it caused. outcome is static: "queued", "duplicate", "no-subscriber" or "no-run". */
struct db_hook_result {
	const char *outcome;
	int64_t event_id;
	int64_t *run_ids;		/* n_runs of them */
	char **run_agents;		/* whose each run is (NULL-terminated, n_runs of them) */
	char *trigger;			/* the runs' trigger: the route's source */
	size_t n_runs;
	char *full_agent;		/* on -EDQUOT: the agent whose queue is full */
};
void db_hook_result_clear(struct db_hook_result *res);
/* Whether a subscription's filter (comma-separated; NULL: every event) takes event type (may be NULL). */
typedef bool (*db_hook_filter_fn)(const char *filter, const char *type);
/*
 * Record delivery d inside the caller's transaction (or on its own): its
 * (route, delivery id) key; if that was seen already, only an events row
 * with outcome "duplicate"; else its events row and one queued run
 * (trigger: the route's source) per subscriber match takes, as
 * db_run_enqueue would queue it. 0 and *res, or -errno: -ENOENT no such
 * route, -EDQUOT a matching agent's queue is full (res->full_agent says
 * which), with nothing of it written; -ENOSPC the disk is full, or another
 * error of SQLite's, with nothing of it kept on its own, but part of it
 * possibly written in the caller's transaction, which must then be rolled
 * back (core/deliveries.c does).
 */
int db_hook_delivery_record(struct db *db, const struct db_hook_delivery *d, db_hook_filter_fn match,
			    struct db_hook_result *res);

/* A cron trigger (migration 8). */
struct schedule {
	int64_t id;
	char *agent;
	char *spec;
	char *tz;		/* NULL: the host's zone */
	enum cron_catch_up catch_up;
	char *payload;		/* NULL: none; else payload_len bytes plus a NUL */
	size_t payload_len;
	int64_t created_at;
	int64_t last_at;	/* slots up to here were dealt with */
};
void schedule_free(struct schedule *s);
void schedule_list_free(struct schedule **list);

/* Add a schedule to agent with last_at = created_at = now; fills s->id and s->created_at. -ENOENT: no such agent. */
int db_schedule_insert(struct db *db, const char *agent, struct schedule *s);
/* Schedules of agent (all if NULL) by id; NULL-terminated. */
int db_schedule_list(struct db *db, const char *agent, struct schedule ***ret, size_t *n);
/* -ENOENT if agent has no schedule id. */
int db_schedule_delete(struct db *db, const char *agent, int64_t id);
/* Record that slots up to last_at were dealt with; -ENOENT if it is gone. */
int db_schedule_set_last(struct db *db, int64_t id, int64_t last_at);

/*
 * An agent's secrets (store/secrets.c): only sealed bytes (core/secrets.c
 * seals and opens them); rows go with their agent (ON DELETE CASCADE).
 */
struct db_secret {
	char *key;
	unsigned char *nonce, *ct;	/* NULL in db_secret_list without values */
	size_t nonce_len, ct_len;
	size_t size;			/* plaintext bytes */
	int64_t created_at, updated_at;
};
void db_secrets_free(struct db_secret *s, size_t n);
/* Store (replacing) agent's key: 0, -ENOENT no such agent, -E2BIG a new key beyond max_keys. */
int db_secret_put(struct db *db, const char *agent, const char *key, const unsigned char *nonce, size_t nonce_len,
		  const unsigned char *ct, size_t ct_len, size_t size, int max_keys);
/* 0, -ENOENT no such key (*no_agent: not even the agent). */
int db_secret_delete(struct db *db, const char *agent, const char *key, bool *no_agent);
/* The agent's secrets by key name, with the sealed bytes if with_sealed; -ENOENT no such agent. */
int db_secret_list(struct db *db, const char *agent, bool with_sealed, struct db_secret **ret, size_t *n);

/*
 * One transaction around several calls (a cron firing: its run and its
 * last_at commit together). Only on fleetd's loop thread, which owns the
 * handle's writes; db_rollback() after a failure.
 */
int db_begin(struct db *db);
int db_commit(struct db *db);
void db_rollback(struct db *db);

/* Append one audit record. */
int db_audit_add(struct db *db, long uid, const char *action, const char *target,
		 const char *outcome, const char *detail);
/* The same, not fsynced: survives kill -9, not a power loss before the next synced write (audit.c). */
int db_audit_add_unsynced(struct db *db, long uid, const char *action, const char *target,
			  const char *outcome, const char *detail);
/* How many records of action about agent (target NAME or NAME/...) since since_ms. */
int db_audit_count(struct db *db, const char *action, const char *agent, int64_t since_ms, int *ret);
/* The newest `limit` records, oldest first. */
int db_audit_list(struct db *db, int limit, struct audit_entry **ret, size_t *n);
void audit_entries_free(struct audit_entry *e, size_t n);

#endif
