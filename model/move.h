/*
 * move: the decisions of `fleetctl move AGENT HOST` (#15, docs/multi-host.md
 * "Moving an agent") that need no libvirtd, so they are unit-tested
 * (tests/unit/test_move.c): whether the target may take the agent, and
 * after a kill, which host's copy is the stale one.
 */
#ifndef FLEET_MODEL_MOVE_H
#define FLEET_MODEL_MOVE_H

#include <stddef.h>

#include "model/host.h"

/*
 * May an agent of memory_mib on host from move to host to, among
 * hosts[0..n) (with their facts)? 0, or -ENOENT (no such host), -EALREADY
 * (it is there already), -EBUSY (draining, full, unreachable) or -ENOSPC
 * (not enough free memory), with *why (caller frees).
 */
int move_check(const struct host *hosts, size_t n, const char *from, const char *to, int memory_mib, char **why);

/*
 * A move from `from` to `to` was cut short; fleet records the agent on
 * current. The host whose copy is stale (to remove): `to` while the agent
 * is still recorded on `from` (the move never committed), `from` once it is
 * on `to` (committed; the old copy's removal was cut short); NULL when
 * current is neither (the record is not this agent's story: touch nothing).
 */
const char *move_stale_host(const char *from, const char *to, const char *current);

#endif
