/*
 * snapshots: taking, deleting, pruning and restoring snapshots, for every
 * caller (the API, automatic rollback, snapshot schedules, runs). Keeps the
 * database and the backend in step:
 *   - a row reads 'creating' until the backend has made the snapshot, and
 *     'deleting' while the backend removes it;
 *   - an agent's 'restoring' column names the snapshot a restore is under way to;
 * so snapshots_recover() at start can undo an unfinished create, finish an
 * unfinished delete, and finish an unfinished restore (by restoring again).
 */
#ifndef FLEET_SNAPSHOTS_H
#define FLEET_SNAPSHOTS_H

#include <stdbool.h>

struct agent;
struct backend_ops;
struct fleetd;
struct snapshot;

/*
 * The agent (*ret_a, the caller frees it), provisioned, and a backend that can
 * snapshot it. -errno with *why: -ENOENT no such agent, -EAGAIN not
 * provisioned, -ENODEV the backend is unavailable, -EOPNOTSUPP it has no
 * snapshots.
 */
int snapshots_target(struct fleetd *f, const char *agent, struct agent **ret_a, const struct backend_ops **ret_ops,
		     char **why);

/*
 * The health check snapshots.c uses: whether a check of agent is running
 * (its exec makes the backend refuse snapshots for a moment: wait it out),
 * and a check before a snapshot (passing marks the snapshot good).
 * health.c hands these over at init, so this module does not include
 * health.h, which includes this one (rollback is a restore). Without them
 * no check runs and snapshots are taken unmarked.
 */
typedef void (*snapshots_checked_fn)(void *userdata, int healthy, const char *detail);
struct snapshots_health {
	bool (*checking)(struct fleetd *f, const char *agent);
	/* As health_check(): 0 and done() later, or a negative errno and no done(). */
	int (*check)(struct fleetd *f, const char *agent, snapshots_checked_fn done, void *userdata);
	/* As health_recent_pass(): a check that passed moments ago with nothing done since. */
	bool (*recent_pass)(struct fleetd *f, const char *agent, long long *ret_age_usec);
};
void snapshots_use_health(const struct snapshots_health *h);

/* The newest snapshot marked good (*ret, malloc'd); -ENOENT if none is. */
int snapshots_newest_good(struct fleetd *f, const char *agent, char **ret);

/* flags: retry on any busy answer (a person's command) for up to 30 s, not just on fleet's own check. */
#define SNAPSHOTS_WAIT_ANY 1

#define SNAPSHOT_NOTE_MAX 1024

/*
 * r is 0 and s the recorded snapshot, or r is a negative errno and why says
 * what went wrong in one line. Always called on the loop, after the call that
 * started it returned 0.
 */
typedef void (*snapshots_taken_fn)(void *userdata, int r, const char *why, const struct snapshot *s);

/*
 * Snapshot agent. name NULL: PREFIX-YYYYmmdd-HHMMSS (UTC, -2, -3... if
 * taken). A running agent's health is checked first; the snapshot is marked
 * good or bad by it. Afterwards the agent's retention applies. Waits out
 * fleet's own health check (at most 60 s), and with SNAPSHOTS_WAIT_ANY any
 * command (at most 30 s). Returns 0 and done() follows, or
 * a negative errno with *why (malloc'd) and done() is never called:
 * those of snapshots_target(), -EINVAL bad name or note, -EEXIST name
 * taken, -EBUSY a command or another snapshot is running.
 */
int snapshots_take(struct fleetd *f, const char *agent, const char *name, const char *prefix, const char *note,
		   bool pin, int flags, snapshots_taken_fn done, void *userdata, char **why);

typedef void (*snapshots_restored_fn)(void *userdata, int r, const char *why);

/*
 * Restore agent to snap. Records the restore in the agent's row first, so a
 * kill -9 of fleetd in the middle is finished at the next start. Same return
 * and done() contract as snapshots_take(); -ENOENT also for an unknown
 * snapshot.
 */
int snapshots_restore(struct fleetd *f, const char *agent, const char *snap, int flags,
		      snapshots_restored_fn done, void *userdata, char **why);

/* Delete one snapshot (backend, then row); -ENOENT if there is no such ready snapshot. */
int snapshots_delete(struct fleetd *f, const char *agent, const char *snap, char **why);

/*
 * Apply agent's retention: keep its newest snapshot_keep snapshots, the
 * pinned ones, the newest good one and one a restore is under way to; delete
 * the rest. Returns how many were deleted, or a negative errno.
 */
int snapshots_prune(struct fleetd *f, const char *agent);

/* At start: undo unfinished creates, finish unfinished deletes and restores. */
void snapshots_recover(struct fleetd *f);

#endif
