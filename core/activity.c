/* activity: see activity.h. */
#include "core/activity.h"

#include <stdlib.h>
#include <string.h>

#include "model/fleetd.h"
#include "common/util.h"

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
	entry(f, agent, true)->seq++;
}

void activity_begin(struct fleetd *f, const char *agent)
{
	struct activity *a = entry(f, agent, true);

	a->seq++;
	a->running++;
}

void activity_end(struct fleetd *f, const char *agent)
{
	struct activity *a = entry(f, agent, true);

	a->seq++;
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
