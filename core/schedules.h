/*
 * schedules: cron schedules (not "sched.h": that would hide <sched.h>).
 * Each agent whose snapshot policy is cron gets a snapshot at every minute
 * its schedule names (in the host's time zone). Times missed while fleetd
 * was down are not made up: the next one after start counts. The same tick
 * drives the cron triggers (cron_triggers.h), which do catch up.
 */
#ifndef FLEET_SCHEDULES_H
#define FLEET_SCHEDULES_H

struct fleetd;

/* Start checking schedules on f->base. */
int sched_init(struct fleetd *f);
void sched_shutdown(struct fleetd *f);

#endif
