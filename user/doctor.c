/*
 * user/doctor.c: what `fleetctl doctor` asks of the user backend: the cgroup
 * controllers that limit and track user agents, found afresh (the host may
 * have changed since fleetd started).
 */
#include <stdlib.h>

#include "model/fleetd.h"
#include "user/cgroup.h"
#include "user/internal.h"

void user_doctor(struct fleetd *f, struct doctor_report *r)
{
	struct cgroup_host *cg = NULL;
	_cleanup_free_ char *desc = NULL;

	cgroup_host_detect(&cg);
	desc = cgroup_host_describe(cg);
	if (!cgroup_host_usable(cg))
		doctor_add(r, "cgroups", DOCTOR_FAIL,
			   "mount cgroup2 on /sys/fs/cgroup (or the v1 freezer, memory and pids hierarchies)",
			   "no usable cgroup hierarchy (%s): user agents' processes cannot be tracked or killed", desc);
	else if (!cgroup_host_has(cg, "memory") || !cgroup_host_has(cg, "pids"))
		doctor_add(r, "cgroups", DOCTOR_WARN,
			   "enable the memory and pids controllers (cgroup_enable=memory on the kernel command "
			   "line; delegate them to fleetd's cgroup)",
			   "%s: without memory and pids, user agents are limited by rlimits only", desc);
	else if (!cgroup_host_can_freeze(cg))
		doctor_add(r, "cgroups", DOCTOR_WARN, "use cgroup v2 (cgroup.freeze) or mount the v1 freezer",
			   "%s: no freezer, so a running user agent cannot be snapshotted", desc);
	else
		doctor_add(r, "cgroups", DOCTOR_OK, NULL, "%s", desc);
	cgroup_host_free(cg);
}
