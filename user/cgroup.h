/*
 * cgroup: one control group per user agent, on whatever the host offers:
 * the unified (v2) hierarchy, the v1 controller hierarchies, or both (the
 * "hybrid" layout). It limits memory, pids and CPU, tells whether any
 * process of the agent is alive and kills them all. It never decides
 * anything about agents and never starts a process.
 *
 * Layout: for each hierarchy used, <mount><fleetd's own cgroup>/fleet/<name>.
 * A limit goes to v2 when the unified hierarchy has that controller, else to
 * the v1 hierarchy of that controller, else it is not enforced (and
 * cgroup_describe says so). Membership and killing use the v2 group when
 * there is one (cgroup.kill), else the v1 freezer (freeze, kill, thaw).
 */
#ifndef FLEET_CGROUP_H
#define FLEET_CGROUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct cgroup_host;

struct cgroup_limits {
	uint64_t memory_bytes;	/* 0: no limit */
	long pids_max;		/* 0: no limit */
	int cpus;		/* 0: no limit; else quota of this many CPUs */
};

/* Find the cgroup hierarchies and fleetd's place in them. Never fails: no cgroups is a valid answer. */
void cgroup_host_detect(struct cgroup_host **ret);
/* fleetd's start (v2): its group's controllers delegated to fleet/, fleetd moved into a leaf if
 * need be (see cgroup.c). Best effort: cgroup_create() tries again and reports what fails. */
void cgroup_host_prepare(const struct cgroup_host *h);
void cgroup_host_free(struct cgroup_host *h);

/* True when a group can be created and killed as a whole (some hierarchy is usable). */
bool cgroup_host_usable(const struct cgroup_host *h);
/* True when this limit is enforced: "memory", "pids", "cpu". */
bool cgroup_host_has(const struct cgroup_host *h, const char *controller);
/* A malloc'd one-line summary, e.g. "v1 memory pids cpu freezer, v2 (tracking only)". */
char *cgroup_host_describe(const struct cgroup_host *h);

/*
 * Create the group name with limits; nothing left on failure. The one judge
 * of a group of that name left behind (a crash): empty, it is taken over
 * (logged); with processes in it, -EBUSY.
 */
int cgroup_create(const struct cgroup_host *h, const char *name, const struct cgroup_limits *l, char **why);
/* Remove the (empty) group; 0 if it was not there; -EBUSY while it has processes. */
int cgroup_remove(const struct cgroup_host *h, const char *name);
/* True when the group exists in the tracking hierarchy. */
bool cgroup_exists(const struct cgroup_host *h, const char *name);

/*
 * Open the cgroup.procs file of every hierarchy of the group, O_WRONLY |
 * O_CLOEXEC, for a child to join by writing "0". Returns the count (at
 * most max); the caller closes them.
 */
int cgroup_open_join_fds(const struct cgroup_host *h, const char *name, int *fds, size_t max);
/* How many fds cgroup_open_join_fds opens for the group when all of them open (no system call). */
int cgroup_join_count(const struct cgroup_host *h, const char *name);

/*
 * What the group uses: its memory charge in bytes (v2 memory.current, v1
 * memory.usage_in_bytes) and its CPU time in seconds (v2 cpu.stat's
 * usage_usec, v1 cpuacct.usage where cpuacct shares the cpu hierarchy);
 * -1 for what this host's hierarchies do not say. -ENOENT without the group.
 */
int cgroup_usage(const struct cgroup_host *h, const char *name, long long *memory_bytes, double *cpu_seconds);

/* Number of processes in the group (0 if it does not exist); -errno. */
int cgroup_count(const struct cgroup_host *h, const char *name);
/* Up to max pids of the group's processes in pids; the number of processes (may exceed max), 0 without the group, -errno. */
int cgroup_pids(const struct cgroup_host *h, const char *name, pid_t *pids, size_t max);
/* Kill every process of the group and wait (up to timeout_ms) until it is empty; -ETIMEDOUT. */
int cgroup_kill(const struct cgroup_host *h, const char *name, int timeout_ms);

/* True when groups can be frozen: the tracking hierarchy is v2 (cgroup.freeze) or the v1 freezer. */
bool cgroup_host_can_freeze(const struct cgroup_host *h);
/*
 * Freeze every process of the group and wait (up to timeout_ms) until all
 * are stopped; thaw them if it does not get there (-ETIMEDOUT). A frozen
 * group keeps processes that join it frozen. -EOPNOTSUPP without a freezer,
 * -ENOENT without the group. Safe on any thread (file writes only).
 */
int cgroup_freeze(const struct cgroup_host *h, const char *name, int timeout_ms);
/* Let the group's processes run again; 0 also when it was not frozen or does not exist. */
int cgroup_thaw(const struct cgroup_host *h, const char *name);
/* 1 when every process of the group is frozen, 0 when not (thawed, still freezing, or no group), -EOPNOTSUPP. */
int cgroup_frozen(const struct cgroup_host *h, const char *name);

#endif
