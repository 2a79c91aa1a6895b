/*
 * hosts (core): the hypervisor hosts VM agents are placed on (#15,
 * docs/multi-host.md), above the VM backend that holds a libvirt
 * connection to each (backend_ops.host_*) and the store that records them.
 * `local` is fleetd's own libvirt_uri, there without `host add`, never
 * removed. A host is removed only while no agent is placed on it.
 */
#ifndef FLEET_CORE_HOSTS_H
#define FLEET_CORE_HOSTS_H

#include <stdbool.h>
#include <stddef.h>

#include "model/host.h"

struct agent;
struct fleetd;

/*
 * Every host with its agents counted and, with facts, what its libvirt says
 * now (versions, KVM, free memory, or why it is unreachable). The local
 * host's uri is filled with the configured one. Caller frees with
 * host_list_free. -errno (the store).
 */
int hosts_list(struct fleetd *f, bool facts, struct host **ret, size_t *n);
/*
 * Add a host: its name checked like an agent's, its URI by connecting to it
 * (-ENOTCONN with libvirt's error in *why). -EEXIST, -EINVAL, -EOPNOTSUPP
 * (no VM backend).
 */
int hosts_add(struct fleetd *f, const char *name, const char *uri, int max_agents, int reserve_memory_mib,
	      char **why);
/* -EBUSY while agents are placed on it (their names in *why) or for `local`; -ENOENT. */
int hosts_remove(struct fleetd *f, const char *name, char **why);
int hosts_set_draining(struct fleetd *f, const char *name, bool draining, char **why);
/*
 * Place the new VM agent a on host wanted (NULL: the best, placement_choose)
 * and set a->host; -ENOENT, -EBUSY or -ENOSPC with *why. Agents of other
 * backends get no host (wanted must be NULL: -EINVAL).
 */
int hosts_place(struct fleetd *f, struct agent *a, const char *wanted, char **why);

#endif
