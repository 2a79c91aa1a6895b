/* agent: see agent.h. */
#include "model/agent.h"
#include "model/name_table.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

static const char *const backend_names[BACKEND__COUNT] = {
	[BACKEND_VM] = "vm", [BACKEND_USER] = "user",
};
static const char *const state_names[AGENT_STATE__COUNT] = {
	[AGENT_DEFINED] = "defined", [AGENT_PROVISIONING] = "provisioning",
	[AGENT_STOPPED] = "stopped", [AGENT_RUNNING] = "running", [AGENT_BAD] = "bad",
	[AGENT_REMOVING] = "removing", [AGENT_MISSING] = "missing",
};
static const char *const network_names[NETWORK__COUNT] = {
	[NETWORK_NONE] = "none", [NETWORK_NAT] = "nat",
};

static const char *const restart_names[RESTART__COUNT] = {
	[RESTART_ON_FAILURE] = "on-failure", [RESTART_ALWAYS] = "always", [RESTART_NEVER] = "never",
};

static const char *const snapshot_policy_names[SNAPSHOT_POLICY__COUNT] = {
	[SNAPSHOT_POLICY_NONE] = "none", [SNAPSHOT_POLICY_BEFORE_RUN] = "before-run", [SNAPSHOT_POLICY_CRON] = "cron",
};

void agent_free(struct agent *a)
{
	if (!a)
		return;
	free(a->name);
	free(a->state_detail);
	free(a->command);
	free(a->egress_allow);
	free(a->health_command);
	free(a->health_detail);
	free(a->last_rollback);
	free(a->snapshot_schedule);
	free(a->restoring);
	free(a->host);
	free(a);
}

struct agent *agent_copy(const struct agent *a)
{
	struct agent *c = xmalloc(sizeof(*c));

	*c = *a;
	c->name = a->name ? xstrdup(a->name) : NULL;
	c->state_detail = a->state_detail ? xstrdup(a->state_detail) : NULL;
	c->command = a->command ? xstrdup(a->command) : NULL;
	c->egress_allow = a->egress_allow ? xstrdup(a->egress_allow) : NULL;
	c->health_command = a->health_command ? xstrdup(a->health_command) : NULL;
	c->health_detail = a->health_detail ? xstrdup(a->health_detail) : NULL;
	c->last_rollback = a->last_rollback ? xstrdup(a->last_rollback) : NULL;
	c->snapshot_schedule = a->snapshot_schedule ? xstrdup(a->snapshot_schedule) : NULL;
	c->restoring = a->restoring ? xstrdup(a->restoring) : NULL;
	c->host = a->host ? xstrdup(a->host) : NULL;
	return c;
}

void agent_list_free(struct agent **list)
{
	if (!list)
		return;
	for (struct agent **p = list; *p; p++)
		agent_free(*p);
	free(list);
}

void agent_images_clear(struct agent_images *im)
{
	free(im->image);
	free(im->boot_image);
	free(im->old_images);
	*im = (struct agent_images){ 0 };
}

const char *backend_kind_to_string(enum backend_kind k)
{
	return name_table_word(backend_names, BACKEND__COUNT, (int)k);
}

int backend_kind_from_string(const char *s)
{
	return name_table_value(backend_names, BACKEND__COUNT, s);
}

const char *agent_state_to_string(enum agent_state s)
{
	return name_table_word(state_names, AGENT_STATE__COUNT, (int)s);
}

int agent_state_from_string(const char *s)
{
	return name_table_value(state_names, AGENT_STATE__COUNT, s);
}

const char *network_kind_to_string(enum network_kind k)
{
	return name_table_word(network_names, NETWORK__COUNT, (int)k);
}

int network_kind_from_string(const char *s)
{
	return name_table_value(network_names, NETWORK__COUNT, s);
}

const char *restart_policy_to_string(enum restart_policy p)
{
	return name_table_word(restart_names, RESTART__COUNT, (int)p);
}

int restart_policy_from_string(const char *s)
{
	return name_table_value(restart_names, RESTART__COUNT, s);
}

const char *snapshot_policy_to_string(enum snapshot_policy p)
{
	return name_table_word(snapshot_policy_names, SNAPSHOT_POLICY__COUNT, (int)p);
}

int snapshot_policy_from_string(const char *s)
{
	return name_table_value(snapshot_policy_names, SNAPSHOT_POLICY__COUNT, s);
}
