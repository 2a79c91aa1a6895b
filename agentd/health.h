/*
 * health: the checks of fleetd's default health check, run as the agent
 * user: the home has room, takes a new file, and a write that reaches the
 * disk (fdatasync of the kept file ~/.fleet-health overwritten in place;
 * the first check, or one whose kept file is not its own, syncs a new
 * file), and a program starts (/bin/sh -c 'exit 0').
 * Run by `agentd health`, by run-as in place of exec'ing `agentd health`,
 * and by the health service's checks (health_server.h).
 */
#ifndef FLEET_AGENTD_HEALTH_H
#define FLEET_AGENTD_HEALTH_H

struct health_memo;

/*
 * Prints 'healthy' and returns 0, or 'unhealthy: WHY' and returns 1, on
 * stdout. memo: the health service's (health_memo.h), which spares the
 * shell's start while nothing it depends on changed; NULL: the shell runs.
 */
int health_run(struct health_memo *memo);

#endif
