/*
 * host: a hypervisor host VM agents are placed on (#15, docs/multi-host.md):
 * its record (store/hosts.c), what its libvirt says of it now (the VM
 * backend's host_facts), and placement, a pure function over both
 * (model/placement.c), so it is tested without a libvirtd.
 */
#ifndef FLEET_MODEL_HOST_H
#define FLEET_MODEL_HOST_H

#include <stdbool.h>
#include <stddef.h>

#define HOST_LOCAL "local"		/* fleetd's own libvirt_uri, there without `host add` */
#define HOST_URI_MAX 1024
#define HOST_MAX_AGENTS_MAX 100000	/* 0: no limit */
#define HOST_RESERVE_MAX_MIB (16 << 20)	/* 16 TiB */

/*
 * What a host's libvirt said last (read off fleetd's loop, so a host that
 * stopped answering never holds it); the strings are the struct's own.
 * An unreachable host keeps the facts it gave last, with their age.
 */
struct host_facts {
	bool reachable;
	char *error;			/* why not reachable (libvirt's message); NULL when reachable */
	long long age_s;		/* seconds since the facts below were read; -1: none were */
	bool refreshing;		/* a read is under way (a silent host holds one until its keepalive gives up) */
	long long refreshing_s;		/* for how long (s); -1 when none is */
	char libvirt[32];		/* "MAJOR.MINOR.RELEASE" of libvirtd; "" unknown */
	char qemu[32];			/* of its hypervisor */
	bool kvm;			/* KVM usable there (domain capabilities), else TCG */
	long long free_memory_bytes;	/* virNodeGetFreeMemory; -1 unknown */
};

struct host {
	char *name;
	char *uri;			/* NULL: the configured libvirt_uri (HOST_LOCAL) */
	int max_agents;			/* 0: no limit */
	int reserve_memory_mib;		/* kept free for the host itself */
	bool draining;			/* no new agents */
	long long added_at;
	int agents;			/* VM agents placed on it now */
	struct host_facts facts;	/* filled by core/hosts.c from the backend */
};

void host_facts_clear(struct host_facts *f);
void host_clear(struct host *h);
void host_list_free(struct host *v, size_t n);

/*
 * Where an agent of memory_mib goes: the index in hosts[0..n) of wanted
 * (NULL: chosen) if it can take it, else of the reachable, non-draining
 * host under its max_agents whose free memory minus its reserve holds the
 * agent, with the most such memory (ties: fewest agents, then the first).
 * -ENOENT: no host wanted; -EBUSY: none may take an agent now (draining,
 * full, unreachable); -ENOSPC: those that may lack the memory. *why (caller
 * frees) says, host by host, why not.
 */
int placement_choose(const struct host *hosts, size_t n, const char *wanted, int memory_mib, char **why);

#endif
