/* run: see run.h. */
#include "model/run.h"

#include <stdlib.h>

#include "model/name_table.h"

static const char *const state_names[RUN_STATE__COUNT] = {
	[RUN_QUEUED] = "queued", [RUN_RUNNING] = "running", [RUN_SUCCEEDED] = "succeeded",
	[RUN_FAILED] = "failed", [RUN_TIMED_OUT] = "timed-out", [RUN_CANCELLED] = "cancelled",
	[RUN_INTERRUPTED] = "interrupted",
};

void run_free(struct run *r)
{
	if (!r)
		return;
	free(r->agent);
	free(r->trigger);
	free(r->log_path);
	free(r->snapshot);
	free(r->error);
	free(r);
}

void run_event_free(struct run_event *e)
{
	if (!e)
		return;
	free(e->source);
	free(e->route);
	free(e->delivery_id);
	free(e->type);
	free(e->headers);
	free(e->body);
	free(e);
}

void run_list_free(struct run **list)
{
	for (struct run **p = list; p && *p; p++)
		run_free(*p);
	free(list);
}

const char *run_state_to_string(enum run_state s)
{
	return name_table_word(state_names, RUN_STATE__COUNT, s);
}

int run_state_from_string(const char *s)
{
	return name_table_value(state_names, RUN_STATE__COUNT, s);
}
