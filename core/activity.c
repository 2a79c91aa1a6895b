/* activity: see activity.h. */
#include "core/activity.h"

#include <stdlib.h>
#include <string.h>

#include "model/fleetd.h"
#include "common/util.h"

/*
 * The counters' values come from one clock for every agent, so an agent
 * removed and created again under its name never reads a value its
 * predecessor had: a health check recorded for the old one cannot pass
 * for the new one.
 */
static uint64_t activity_clock;

struct activity {
	char *agent;
	uint64_t seq;
	unsigned running;	/* activity_begin() without its activity_end() yet */
	struct activity *next;
};

/* The agent's entry; created (at 0) when create is set, else NULL if it has none. */
static struct activity *entry(struct fleetd *f, const char *agent, bool create)
{
	struct activity *a;

	for (a = f->activity; a; a = a->next)
		if (strcmp(a->agent, agent) == 0)
			return a;
	if (!create)
		return NULL;
	a = xcalloc(1, sizeof(*a));
	a->agent = xstrdup(agent);
	a->next = f->activity;
	f->activity = a;
	return a;
}

void activity_note(struct fleetd *f, const char *agent)
{
	entry(f, agent, true)->seq = ++activity_clock;
}

void activity_begin(struct fleetd *f, const char *agent)
{
	struct activity *a = entry(f, agent, true);

	a->seq = ++activity_clock;
	a->running++;
}

void activity_end(struct fleetd *f, const char *agent)
{
	struct activity *a = entry(f, agent, true);

	a->seq = ++activity_clock;
	if (a->running > 0)
		a->running--;
}

unsigned activity_running(struct fleetd *f, const char *agent)
{
	struct activity *a = entry(f, agent, false);

	return a ? a->running : 0;
}

uint64_t activity_seq(struct fleetd *f, const char *agent)
{
	struct activity *a = entry(f, agent, false);

	return a ? a->seq : 0;
}

void activity_forget(struct fleetd *f, const char *agent)
{
	for (struct activity **p = &f->activity; *p; p = &(*p)->next) {
		struct activity *a = *p;

		if (strcmp(a->agent, agent) != 0)
			continue;
		if (a->running > 0)
			return;	/* an exec still ends here (activity_end): the entry goes with the next forget, or at exit */
		*p = a->next;
		free(a->agent);
		free(a);
		return;
	}
}

void activity_free(struct fleetd *f)
{
	struct activity *a = f->activity, *next;

	for (; a; a = next) {
		next = a->next;
		free(a->agent);
		free(a);
	}
	f->activity = NULL;
}
