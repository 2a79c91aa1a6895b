/* schedules: see schedules.h. */
#include "core/schedules.h"

#include <errno.h>
#include <event2/event.h>
#include <string.h>
#include <time.h>

#include "common/cron.h"
#include "core/cron_triggers.h"
#include "store/db.h"
#include "model/fleetd.h"
#include "common/log.h"
#include "core/snapshots.h"
#include "common/util.h"

#define TICK_S 5		/* a scheduled snapshot starts at most this late */

/* One agent's snapshot schedule as last read from its record. */
struct entry {
	struct entry *next;
	char *agent;
	char *text;		/* the spec it was parsed from: a change re-plans */
	struct cron_spec spec;
	time_t next_at;		/* (time_t)-1: never */
	bool in_flight;		/* a scheduled snapshot is being taken */
	bool seen;		/* still scheduled at the last tick */
};

struct sched {
	struct fleetd *f;
	struct event *tick;
	struct entry *entries;
	time_t since;		/* when this fleetd began watching: cron slots before it were missed */
	time_t last_now;	/* the wall clock at the last tick: a step back is seen against it */
};

static struct entry *entry_find(struct sched *s, const char *agent)
{
	for (struct entry *e = s->entries; e; e = e->next)
		if (strcmp(e->agent, agent) == 0)
			return e;
	return NULL;
}

static void entry_free(struct entry *e)
{
	free(e->agent);
	free(e->text);
	free(e);
}

/* What a scheduled snapshot's completion needs: the entry may be gone by then. */
struct job {
	struct fleetd *f;
	char *agent;
};

static void scheduled_done(void *userdata, int r, const char *why, const struct snapshot *snap)
{
	struct job *j = userdata;
	struct entry *e = j->f->sched ? entry_find(j->f->sched, j->agent) : NULL;
	_cleanup_free_ char *target = xasprintf("%s/%s", j->agent, snap ? snap->name : "(scheduled)");

	if (e)
		e->in_flight = false;
	if (r < 0)
		log_warning("agent '%s': scheduled snapshot failed: %s", j->agent, why);
	(void)db_audit_add(j->f->db, 0, "snapshot.scheduled", target, r < 0 ? "failed" : "ok", why);
	free(j->agent);
	free(j);
}

static void take(struct sched *s, struct entry *e)
{
	struct job *j = xcalloc(1, sizeof(*j));
	_cleanup_free_ char *why = NULL, *note = xasprintf("scheduled (%s)", e->text);
	int r;

	j->f = s->f;
	j->agent = xstrdup(e->agent);
	e->in_flight = true;
	r = snapshots_take(s->f, e->agent, NULL, "auto", note, false, SNAPSHOTS_WAIT_ANY, scheduled_done, j, &why);
	if (r < 0) {
		e->in_flight = false;
		log_warning("agent '%s': scheduled snapshot not taken: %s", e->agent, why);
		(void)db_audit_add(s->f->db, 0, "snapshot.scheduled", e->agent, "failed", why);
		free(j->agent);
		free(j);
	}
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
	struct sched *s = arg;
	struct agent **list = NULL;
	time_t now = time(NULL);
	size_t n = 0;

	/*
	 * The wall clock went back. Watching began no later than now, or the
	 * slots from here to the old start would count as missed (and `skip`
	 * would drop them). A snapshot's next slot planned by the old clock
	 * would stall it by as much: a step back beyond CRON_CLOCK_BACK_MAX_S
	 * plans again from now (a small one waits, repeating no slot).
	 */
	if (now < s->since)
		s->since = now;
	if (s->last_now && now < s->last_now - CRON_CLOCK_BACK_MAX_S) {
		log_warning("the clock went back %lld s; snapshot schedules go on from now",
			    (long long)(s->last_now - now));
		for (struct entry *e = s->entries; e; e = e->next)
			if (e->next_at != (time_t)-1)
				e->next_at = cron_next(&e->spec, now);
	}
	s->last_now = now;
	if (db_agent_list(s->f->db, &list, &n) < 0)
		return;
	for (struct entry *e = s->entries; e; e = e->next)
		e->seen = false;
	for (size_t i = 0; i < n; i++) {
		struct agent *a = list[i];
		struct entry *e;
		_cleanup_free_ char *why = NULL;

		if (a->snapshot_policy != SNAPSHOT_POLICY_CRON || !a->snapshot_schedule)
			continue;
		if (!(e = entry_find(s, a->name))) {
			e = xcalloc(1, sizeof(*e));
			e->agent = xstrdup(a->name);
			e->next = s->entries;
			s->entries = e;
		}
		e->seen = true;
		if (!e->text || strcmp(e->text, a->snapshot_schedule) != 0) {
			free(e->text);
			e->text = xstrdup(a->snapshot_schedule);
			if (cron_parse(e->text, &e->spec, &why) < 0) {
				/* The API checks specs; a bad one here came from outside fleetd. */
				log_error("agent '%s': snapshot schedule '%s' is invalid (%s); not scheduled", a->name,
					  e->text, why);
				e->next_at = (time_t)-1;
				continue;
			}
			e->next_at = cron_next(&e->spec, now);
			log_info("agent '%s': snapshots on schedule '%s'", a->name, e->text);
		}
		if (e->next_at == (time_t)-1 || now < e->next_at)
			continue;
		e->next_at = cron_next(&e->spec, now);
		if (e->in_flight) {
			log_warning("agent '%s': scheduled snapshot skipped: the last one is still being taken", a->name);
			continue;
		}
		if (a->state != AGENT_RUNNING && a->state != AGENT_STOPPED) {
			log_info("agent '%s': scheduled snapshot skipped: state %s", a->name,
				 agent_state_to_string(a->state));
			continue;
		}
		take(s, e);
	}
	agent_list_free(list);
	cron_triggers_tick(s->f, s->since, now);
	/* Forget agents no longer scheduled (removed, or another policy). */
	for (struct entry **p = &s->entries; *p;) {
		struct entry *e = *p;

		if (!e->seen && !e->in_flight) {
			*p = e->next;
			entry_free(e);
		} else {
			p = &e->next;
		}
	}
}

int sched_init(struct fleetd *f)
{
	struct sched *s = xcalloc(1, sizeof(*s));
	struct timeval tv = { TICK_S, 0 };

	s->f = f;
	s->since = time(NULL);
	s->tick = event_new(f->base, -1, EV_PERSIST, on_tick, s);
	event_add(s->tick, &tv);
	f->sched = s;
	return 0;
}

void sched_shutdown(struct fleetd *f)
{
	struct sched *s = f->sched;

	if (!s)
		return;
	event_free(s->tick);
	while (s->entries) {
		struct entry *e = s->entries;

		s->entries = e->next;
		entry_free(e);
	}
	free(s);
	f->sched = NULL;
}
