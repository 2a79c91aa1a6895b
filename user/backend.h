/*
 * backend_user: agents as Unix users on the host (see docs/user-backend.md).
 */
#ifndef FLEET_BACKEND_USER_H
#define FLEET_BACKEND_USER_H

#include "backend/backend.h"

/* Longest agent name a user agent may have: "fleet-" + name must fit a 32-character user name. */
#define USER_AGENT_NAME_MAX 26
/* Per-agent ceilings on processes (cgroup pids.max and RLIMIT_NPROC) and open files. */
#define USER_AGENT_PIDS_MAX 512
#define USER_AGENT_NOFILE_MAX 1024

extern const struct backend_ops backend_user_ops;

#endif
