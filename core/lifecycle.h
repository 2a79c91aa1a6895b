/*
 * lifecycle: the one owner of an agent's state. Every write of an agent's
 * state goes through here: the two-phase create, remove with its intent,
 * start and stop (start, then mark running or report a boot failure), the
 * restart policy for every backend, what backends report on their own
 * (through the backend_event_fn they are given at init), and the reconcile
 * at start that finishes or undoes what a kill -9 cut off.
 */
#ifndef FLEET_LIFECYCLE_H
#define FLEET_LIFECYCLE_H

#include <stdbool.h>

#include "model/agent.h"
#include "backend/backend.h"

struct fleetd;

#define RESTART_LIMIT 5			/* automatic restarts ... */
#define RESTART_WINDOW_S 600		/* ... per this many seconds, then the agent is 'bad' */

/* Record agent's new state (detail may be NULL); logs and returns a negative errno on failure. */
int lifecycle_set_state(struct fleetd *f, const char *agent, enum agent_state st, const char *detail);

/*
 * Create a: the row is written as 'provisioning' (so a kill -9 in between
 * leaves a trace lifecycle_reconcile() undoes), then the backend makes the
 * environment, then the row becomes 'stopped'. A failed provision removes
 * the row again. ops NULL: no backend built in, the row stays 'defined'.
 * On failure returns a negative errno; *why (caller frees) is set exactly
 * when the backend's provision failed, so the caller can tell that from a
 * database error (-EEXIST: the name is taken).
 */
int lifecycle_create(struct fleetd *f, const struct backend_ops *ops, struct agent *a, char **why);
/*
 * The same, where the backend makes part of the environment off the loop
 * (provision_start: a VM on another host): 1 while that goes on (the row
 * 'provisioning'), then done() on the loop with 0 (the row 'stopped') or
 * -errno and why (the row gone again; why is the backend's, or a
 * database error's); or, with nothing left to wait for, lifecycle_create's
 * return at once (done() not called, a->state 'stopped' on success).
 */
int lifecycle_create_start(struct fleetd *f, const struct backend_ops *ops, struct agent *a, backend_done_fn done,
			   void *userdata, char **why);

/*
 * Remove a: the intent ('removing') is written first, then the backend
 * destroys the environment, then the row goes. A refused or failed destroy
 * puts the old state back and returns its error (*why as the backend's);
 * a kill -9 in between is finished by lifecycle_reconcile(). ops NULL: the
 * agent has no environment (state 'defined').
 */
int lifecycle_destroy(struct fleetd *f, const struct backend_ops *ops, const struct agent *a, bool force,
		      char **why);

/*
 * The backend is the truth, the row a cache: refresh a->state from ops
 * (recording a change). A bad, missing, removing, provisioning or defined
 * agent keeps its state.
 */
void lifecycle_refresh(struct fleetd *f, const struct backend_ops *ops, struct agent *a);

/*
 * Start (stop) a through ops; done() follows as the backend's, after the
 * new state is recorded. A start that reports -ETIMEDOUT (started, never
 * reachable) is handed to the boot-failure hook (health.c).
 * Return as the backend verb's.
 */
int lifecycle_start(struct fleetd *f, const struct backend_ops *ops, const struct agent *a, backend_done_fn done,
		    void *userdata, char **why);
int lifecycle_stop(struct fleetd *f, const struct backend_ops *ops, const struct agent *a, int timeout_s,
		   backend_done_fn done, void *userdata, char **why);

/*
 * Automatic restarts (restart policy on-failure or always) wait a backoff
 * first: restart_backoff_ms before the first within RESTART_WINDOW_S, twice
 * the previous delay before each further one, at most
 * restart_backoff_max_ms (fleetd.conf). While one waits, the agent reads
 * 'stopped' with a detail saying so.
 *
 * lifecycle_cancel_restart: the operator decided (start, stop, remove): the
 * pending restart of agent, if any, is dropped; true if there was one.
 * lifecycle_start, lifecycle_stop and lifecycle_destroy do this themselves;
 * the API calls it for a stop of an agent that is stopped already.
 * lifecycle_restart_pending: is one waiting, and its delay (for status and tests).
 */
bool lifecycle_cancel_restart(struct fleetd *f, const char *agent);
bool lifecycle_restart_pending(struct fleetd *f, const char *agent, long *delay_ms);

/* What backends report on their own: given to every backend at init. */
void lifecycle_on_event(struct fleetd *f, const struct backend_event *ev);

/*
 * At start, after backends_init(): undo creates that were never
 * acknowledged ('provisioning'), finish removes ('removing'), and mark
 * agents whose environment is gone 'missing' (with what is gone), so a
 * record never claims 'stopped' for nothing.
 */
void lifecycle_reconcile(struct fleetd *f);

/*
 * Who hears of a start that never became reachable (health.c registers
 * itself at init: a hook, so lifecycle.c does not include health.h, which
 * includes this file's users).
 */
typedef void (*lifecycle_boot_failed_fn)(struct fleetd *f, const char *agent, const char *why);
void lifecycle_on_boot_failed(struct fleetd *f, lifecycle_boot_failed_fn fn);

void lifecycle_shutdown(struct fleetd *f);

#endif
