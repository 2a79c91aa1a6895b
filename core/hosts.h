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
 * The longest a `host add` waits for its host to answer: past it the host
 * is refused as unreachable (a host that drops every packet would otherwise
 * keep the caller for TCP's connect timeout, about two minutes).
 */
#define HOSTS_CONNECT_TIMEOUT_S 20
/*
 * Add a host: its name checked like an agent's, its URI by connecting to it
 * on a worker, recorded only once that answered. 0: done(arg, r, why)
 * follows on the loop (never before this returns): 0 recorded, -ENOTCONN
 * (libvirt's error, or no answer within HOSTS_CONNECT_TIMEOUT_S) in why,
 * -ECANCELED (fleetd stopping first: nothing recorded), or the store's -errno. At once: -EEXIST (recorded, or being added),
 * -EINVAL, -EOPNOTSUPP (no VM backend) with *why, and done is not called.
 */
typedef void (*hosts_added_fn)(void *arg, int r, const char *why);
int hosts_add(struct fleetd *f, const char *name, const char *uri, int max_agents, int reserve_memory_mib,
	      hosts_added_fn done, void *arg, char **why);
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
