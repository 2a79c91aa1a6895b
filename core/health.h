/*
 * health: health checks of running agents and automatic rollback. A check
 * is one exec of the agent's health command through the backend seam; a
 * failed check marks the agent unhealthy and, with auto-rollback on, restores
 * its newest good snapshot, checks again, and records what happened in the
 * audit log and the agent's record. Rollbacks are rate-limited so a broken
 * snapshot cannot make fleet flap: past the limit the agent stays 'bad'.
 */
#ifndef FLEET_HEALTH_H
#define FLEET_HEALTH_H

#include <stdbool.h>

struct fleetd;

#define HEALTH_TIMEOUT_S 60		/* a check that has not answered by then failed */
#define HEALTH_REUSE_S 5		/* a passing check this recent stands for a snapshot's (health_recent_pass()) */
#define ROLLBACK_LIMIT 3		/* automatic rollbacks of one agent ... */
#define ROLLBACK_WINDOW_S 3600		/* ... within this many seconds */

/* Start periodic checks on f->base. */
int health_init(struct fleetd *f);
void health_shutdown(struct fleetd *f);	/* no new checks; those in flight end without a verdict */
void health_free(struct fleetd *f);	/* after backends_shutdown */

/*
 * Check agent now. done() follows on the loop, never inside this call, with
 * healthy 1 or 0 and a one-line detail; the result is recorded. Returns a
 * negative errno, and done() is not called, when no check can run now:
 * -ENOENT (no such agent), -EINVAL (not provisioned), -EBUSY (a snapshot or
 * restore is under way: try later).
 */
typedef void (*health_done_fn)(void *userdata, int healthy, const char *detail);
int health_check(struct fleetd *f, const char *agent, health_done_fn done, void *userdata);

/*
 * Check agent now and act on the verdict as a periodic check does: a
 * failure marks it bad or, with auto-rollback, rolls it back. For after a
 * run. -EBUSY if a check or rollback of it is under way already (its
 * verdict will do), else as health_check().
 */
int health_check_and_act(struct fleetd *f, const char *agent);

/*
 * agent's environment was started but never became reachable (a backend's
 * start reported -ETIMEDOUT): it no longer boots. Recorded as a failed
 * check; with auto-rollback the newest good snapshot is restored, else the
 * agent turns bad.
 */
void health_boot_failed(struct fleetd *f, const char *agent, const char *why);

/*
 * Did a check of agent pass in the last HEALTH_REUSE_S seconds, with nothing
 * of fleet's done in its environment since it began (activity.h: no exec,
 * run, put or memory store call started or ended, no start, stop, restore or
 * other state change, no exec running then or now) and no check running
 * now? Then that check describes the environment as it is (apart from what
 * the agent's own processes did meanwhile), and a snapshot may be marked by
 * it. *ret_age_usec (if not NULL): how long ago it ended.
 */
bool health_recent_pass(struct fleetd *f, const char *agent, long long *ret_age_usec);

/* Is a health check of agent running now? (Its exec makes the backend refuse snapshots for a moment.) */
bool health_checking(struct fleetd *f, const char *agent);

#endif
