/*
 * cron_triggers: an agent's cron triggers ("fleetctl schedule"): a run
 * queued (trigger "cron") at every slot of a 5-field cron spec in a named
 * time zone. Slots missed while fleetd was down run once (catch-up once,
 * the default) or not at all (skip), never once per missed slot. The
 * schedules live in the store (store/schedules.c); each firing commits its
 * run and the schedule's last_at in one transaction, so a kill -9 neither
 * repeats a slot nor loses one. schedules.c's tick drives them.
 */
#ifndef FLEET_CRON_TRIGGERS_H
#define FLEET_CRON_TRIGGERS_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "common/cron.h"

struct fleetd;
struct schedule;

#define CRON_TRIGGERS_MAX 64			/* schedules per agent */
#define CRON_PAYLOAD_MAX (1u << 20)		/* bytes of a schedule's payload */

/*
 * Add a schedule to agent: spec (5 fields or a macro), zone (NULL: the
 * host's), the payload (may be NULL; len bytes). 0 and *ret (caller frees),
 * or -errno with *why: -EINVAL a bad spec, zone or payload, -ENOENT no such
 * agent, -EDQUOT the agent has CRON_TRIGGERS_MAX already, -ENOSPC the disk is full.
 */
int cron_triggers_add(struct fleetd *f, const char *agent, const char *spec, const char *zone,
		      enum cron_catch_up catch_up, const char *payload, size_t len, struct schedule **ret,
		      char **why);
/* Remove agent's schedule id; -ENOENT (with *why) if it has none such. */
int cron_triggers_remove(struct fleetd *f, const char *agent, int64_t id, char **why);
/* When s fires next after now; (time_t)-1 never (or its spec does not parse). */
time_t cron_triggers_next(const struct schedule *s, time_t now);

/* Queue the runs that are due at now; since: when this fleetd began watching. */
void cron_triggers_tick(struct fleetd *f, time_t since, time_t now);

#endif
