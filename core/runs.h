/*
 * runs: the run queue. A run is one execution of an agent's command in its
 * environment, asked for by a trigger (today `fleetctl trigger`; webhooks
 * and cron triggers will queue runs the same way). Runs are durable from
 * the moment they are queued; each agent runs one at a time, oldest first:
 *
 *   queued -> (start the environment if stopped) -> (snapshot, if the
 *   agent's policy is before-run) -> running: `sh -c COMMAND` as the agent,
 *   output to STATE/runs/ID.log -> succeeded | failed -> health check
 *   (a failure marks the agent bad or rolls it back, as a periodic check).
 *
 * A kill -9 of fleetd during a run leaves it 'running'; the next start marks
 * it 'interrupted' (it is not run twice) or, while the agent's
 * retry_interrupted allows, queues it again; then carries on with the queue.
 * At most max_concurrent_runs (fleetd.conf) run at once over all agents; a
 * run over its agent's run_timeout_s is killed (timed-out); each agent has
 * at most max_queued runs waiting. A run's stdin and environment: run_exec.h.
 */
#ifndef FLEET_RUNS_H
#define FLEET_RUNS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/run.h"

struct fleetd;

#define RUN_LOG_MAX (16 << 20)		/* output past this is dropped (the log says so) */

int runs_init(struct fleetd *f);
/* Before the backends shut down: runs under way are marked interrupted. */
void runs_shutdown(struct fleetd *f);
/* After the backends shut down (their last callbacks came). */
void runs_free(struct fleetd *f);

/*
 * Queue a run of agent. 0 and *ret_id, or -errno with *why: -ENOENT no such
 * agent, -EINVAL it has no command, -EAGAIN not provisioned.
 */
int runs_enqueue(struct fleetd *f, const char *agent, const char *trigger, int64_t *ret_id, char **why);
/*
 * runs_enqueue with the event that causes it (its stdin; run_exec.h): ev
 * NULL, an events row (ev->id > 0), or one to store with the run in one
 * transaction (ev->id 0; set on return). Also -EDQUOT: the agent's
 * max_queued runs wait already (a webhook answers 429, the API too; -ENOSPC is the disk full).
 */
int runs_enqueue_event(struct fleetd *f, const char *agent, const char *trigger, struct run_event *ev,
		       int64_t *ret_id, char **why);

/* Runs were queued behind runs_enqueue's back (a webhook group commit): look at the queue soon. */
void runs_kick(struct fleetd *f);
/*
 * A pass of the queue inside a caller's open transaction (a group commit
 * of webhook deliveries), so the runs' ends and starts share its fsync:
 * runs_pass_write() before the COMMIT, runs_pass_done(f, committed) after
 * the COMMIT or ROLLBACK. The runs it took start on the loop's next pass.
 */
void runs_pass_write(struct fleetd *f);
void runs_pass_done(struct fleetd *f, bool committed);

/*
 * Cancel run id of agent: a queued run becomes cancelled at once; a running
 * one has its whole process tree killed (exec_cancel through the backend)
 * and becomes cancelled when its exec reports. 0, or -errno and *why:
 * -ENOENT no such run of agent, -EALREADY it is over.
 */
int runs_cancel(struct fleetd *f, const char *agent, int64_t id, char **why);

/*
 * An agent's runs, for removing their logs once the agent is gone: call
 * runs_ids_of() before deleting the agent's row, runs_remove_logs() after.
 * A kill -9 in between leaves logs without a run row; runs_init() sweeps
 * those, and run ids are never reused (AUTOINCREMENT), so no new run
 * writes into one. runs_ids_of: 0 and *ret_ids (caller frees) or -errno.
 */
int runs_ids_of(struct fleetd *f, const char *agent, int64_t **ret_ids, size_t *ret_n);
/* Remove the logs of these runs; the number that could not be removed (each logged). */
int runs_remove_logs(struct fleetd *f, const int64_t *ids, size_t n);

#endif
