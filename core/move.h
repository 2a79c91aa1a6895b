/*
 * move (core): `fleetctl move AGENT HOST [--stop]` (#15, docs/multi-host.md
 * "Moving an agent"): the offline move of a VM agent to another hypervisor
 * host. The checks (the target's limits as for a new agent there, not its
 * own host, stopped unless --stop), the stop, the backend's copy
 * (backend_ops.move), the commit (fleet's record of its host, one SQL
 * statement) and then the old copy's removal (backend_ops.move_finish).
 * Everything else fleet keeps of the agent (secrets, memory quota, hooks,
 * schedules, runs, snapshots' records) is in its store by name, untouched.
 */
#ifndef FLEET_CORE_MOVE_H
#define FLEET_CORE_MOVE_H

#include <stdbool.h>

struct fleetd;

/* Once the move is over: r 0 (the agent is on its new host) or -errno with why (it stays where it was). */
typedef void (*move_done_fn)(void *userdata, int r, const char *why);

/*
 * Start moving agent to host (stop: a running agent is stopped first).
 * 0: done() follows on the loop. Refused at once: -ENOENT (no such agent or
 * host), -EALREADY (there already), -EBUSY (running without stop, busy,
 * or the target drained, full or unreachable), -ENOSPC (its memory), -EINVAL
 * (not a VM agent), -EOPNOTSUPP, with *why.
 */
int move_agent(struct fleetd *f, const char *agent, const char *host, bool stop, move_done_fn done, void *userdata,
	       char **why);

#endif
