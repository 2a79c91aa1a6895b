/* cron_triggers: see cron_triggers.h. */
#include "core/cron_triggers.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "common/log.h"
#include "common/tz.h"
#include "common/util.h"
#include "core/runs.h"
#include "model/fleetd.h"
#include "store/db.h"

int cron_triggers_add(struct fleetd *f, const char *agent, const char *spec, const char *zone,
		      enum cron_catch_up catch_up, const char *payload, size_t len, struct schedule **ret,
		      char **why)
{
	_cleanup_free_ char *bad = NULL;
	struct schedule **list = NULL, *s;
	struct cron_spec parsed;
	size_t n = 0;
	int r;

	if (cron_parse(spec, &parsed, &bad) < 0) {
		*why = xasprintf("invalid cron spec '%s': %s", spec, bad);
		return -EINVAL;
	}
	if (zone && tz_check(zone, why) < 0)
		return -EINVAL;
	if (cron_catch_up_to_string(catch_up) == NULL) {
		*why = xstrdup("catch-up is once or skip");
		return -EINVAL;
	}
	if (payload && len > CRON_PAYLOAD_MAX) {
		*why = xasprintf("the payload is %zu bytes; at most %u", len, CRON_PAYLOAD_MAX);
		return -EINVAL;
	}
	if ((r = db_schedule_list(f->db, agent, &list, &n)) < 0) {
		*why = xasprintf("agent '%s': cannot read its schedules: %s", agent, strerror(-r));
		return r;
	}
	schedule_list_free(list);
	if (n >= CRON_TRIGGERS_MAX) {
		*why = xasprintf("agent '%s' has %d schedules already, the most it may have", agent, CRON_TRIGGERS_MAX);
		return -EDQUOT;	/* not -ENOSPC: that is the disk full */
	}
	s = xcalloc(1, sizeof(*s));
	s->agent = xstrdup(agent);
	s->spec = xstrdup(spec);
	s->tz = zone ? xstrdup(zone) : NULL;
	s->catch_up = catch_up;
	if (payload) {
		s->payload = xmalloc(len + 1);
		memcpy(s->payload, payload, len);
		s->payload[len] = '\0';
		s->payload_len = len;
	}
	if ((r = db_schedule_insert(f->db, agent, s)) < 0) {
		*why = xasprintf("agent '%s': %s", agent, r == -ENOENT ? "no such agent" : strerror(-r));
		schedule_free(s);
		return r;
	}
	log_info("agent '%s': schedule %" PRId64 " added: '%s' in %s, catch-up %s", agent, s->id, spec,
		 zone ? zone : "the host's time zone", cron_catch_up_to_string(catch_up));
	*ret = s;
	return 0;
}

int cron_triggers_remove(struct fleetd *f, const char *agent, int64_t id, char **why)
{
	int r = db_schedule_delete(f->db, agent, id);

	if (r < 0) {
		*why = r == -ENOENT ? xasprintf("agent '%s' has no schedule %" PRId64, agent, id)
				    : xasprintf("agent '%s': cannot remove schedule %" PRId64 ": %s", agent, id,
						strerror(-r));
		return r;
	}
	log_info("agent '%s': schedule %" PRId64 " removed", agent, id);
	return 0;
}

time_t cron_triggers_next(const struct schedule *s, time_t now)
{
	struct cron_spec spec;
	time_t t;

	if (cron_parse(s->spec, &spec, NULL) < 0)
		return (time_t)-1;
	tz_enter(s->tz);
	t = cron_next(&spec, now);
	tz_leave();
	return t;
}

/* Queue s's run (if fire) and record now as its last_at, in one transaction. slot -1: the clock went back. */
static void fire(struct fleetd *f, const struct schedule *s, bool fire, time_t slot, time_t now)
{
	_cleanup_free_ char *why = NULL, *target = xasprintf("%s/%" PRId64, s->agent, s->id);
	int64_t run_id = 0;
	int r, q = 0;

	if ((r = db_begin(f->db)) < 0) {
		log_warning("agent '%s': schedule %" PRId64 ": cannot begin a transaction: %s; trying again",
			    s->agent, s->id, strerror(-r));
		return;
	}
	/* The one place a cron trigger queues a run: its event (stdin) says which schedule and slot. */
	if (fire) {
		_cleanup_free_ char *delivery = xasprintf("schedule-%" PRId64 "-%lld", s->id, (long long)slot);
		struct run_event ev = { .source = (char *)"cron", .delivery_id = delivery, .received_at = now,
					.body = (unsigned char *)s->payload, .body_len = s->payload ? s->payload_len : 0 };

		q = runs_enqueue_event(f, s->agent, "cron", &ev, &run_id, &why);
	}
	if ((r = db_schedule_set_last(f->db, s->id, (int64_t)now)) < 0 || (r = db_commit(f->db)) < 0) {
		db_rollback(f->db);
		if (r != -ENOENT)	/* -ENOENT: removed meanwhile */
			log_warning("agent '%s': schedule %" PRId64 ": cannot record its firing: %s; trying again",
				    s->agent, s->id, strerror(-r));
		return;
	}
	if (!fire && slot == (time_t)-1) {
		log_warning("agent '%s': schedule %" PRId64 " ('%s'): the clock went back more than %d s "
			    "(last dealt with at %" PRId64 ", now %lld); the schedule goes on from now",
			    s->agent, s->id, s->spec, CRON_CLOCK_BACK_MAX_S, s->last_at, (long long)now);
		return;
	}
	if (!fire) {
		log_info("agent '%s': schedule %" PRId64 " ('%s') missed its slots while fleetd was down; "
			 "catch-up skip: no run", s->agent, s->id, s->spec);
		return;
	}
	if (q < 0) {
		log_warning("agent '%s': schedule %" PRId64 " ('%s'): no run queued: %s", s->agent, s->id, s->spec, why);
		(void)db_audit_add(f->db, 0, "schedule.fire", target, "failed", why);
		return;
	}
	log_info("agent '%s': schedule %" PRId64 " ('%s') queued run %" PRId64 "%s", s->agent, s->id, s->spec,
		 run_id, slot < now - 60 ? " (catching up after downtime)" : "");
}

void cron_triggers_tick(struct fleetd *f, time_t since, time_t now)
{
	struct schedule **list = NULL;
	size_t n = 0;

	if (db_schedule_list(f->db, NULL, &list, &n) < 0)
		return;
	for (size_t i = 0; i < n; i++) {
		struct schedule *s = list[i];
		struct cron_spec spec;
		enum cron_due due;
		time_t slot;

		if (cron_parse(s->spec, &spec, NULL) < 0) {
			/* The API checks specs; a bad one here came from outside fleetd. */
			log_debug("agent '%s': schedule %" PRId64 " has an invalid spec '%s'", s->agent, s->id, s->spec);
			continue;
		}
		tz_enter(s->tz);
		due = cron_due(&spec, s->catch_up, (time_t)s->last_at, since, now, &slot);
		tz_leave();
		if (due != CRON_DUE_NONE)
			fire(f, s, due == CRON_DUE_FIRE, due == CRON_DUE_CLOCK_BACK ? (time_t)-1 : slot, now);
	}
	schedule_list_free(list);
}
