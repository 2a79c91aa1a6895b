/*
 * api_agents: /v1/agents and /v1/agents/NAME. Validates every field before
 * the database is touched, so a refused call changes nothing but the audit
 * log.
 */
#include <errno.h>
#include <string.h>

#include "agent.h"
#include "api.h"
#include "db.h"
#include "fleetd.h"
#include "log.h"
#include "names.h"

static json_t *agent_to_json(const struct agent *a)
{
	char created[32], updated[32];
	json_t *j = json_pack("{s:s, s:s, s:s, s:i, s:i, s:i, s:s, s:s?, s:s, s:s}",
		"name", a->name,
		"backend", backend_kind_to_string(a->backend),
		"state", agent_state_to_string(a->state),
		"memory_mib", a->memory_mib,
		"vcpus", a->vcpus,
		"disk_gib", a->disk_gib,
		"network", network_kind_to_string(a->network),
		"command", a->command,
		"created_at", format_utc(a->created_at, created, sizeof(created)),
		"updated_at", format_utc(a->updated_at, updated, sizeof(updated)));

	if (a->state == AGENT_DEFINED)
		json_object_set_new(j, "note", json_sprintf(
			"environment not provisioned: this fleetd has no %s backend yet",
			backend_kind_to_string(a->backend)));
	return j;
}

/* Check the :name segment; replies 400 and returns false when invalid. */
static bool check_name_param(struct api_call *c)
{
	const char *why;

	if (agent_name_check(c->param, &why) < 0) {
		api_error(c, 400, "invalid_name", "invalid agent name: %s", why);
		return false;
	}
	return true;
}

void api_agents_list(struct api_call *c)
{
	struct agent **list = NULL;
	size_t n = 0;
	json_t *arr;
	int r;

	if ((r = db_agent_list(c->fleetd->db, &list, &n)) < 0) {
		api_error_errno(c, r, "cannot list agents: %s", strerror(-r));
		return;
	}
	arr = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(arr, agent_to_json(list[i]));
	agent_list_free(list);
	api_reply(c, 200, json_pack("{s:o}", "agents", arr));
}

/* Read an optional integer field within [min, max]; replies 400 and returns false when out of range. */
static bool int_field(struct api_call *c, json_t *body, const char *key, int min, int max, int *out)
{
	json_t *v = json_object_get(body, key);

	if (!v)
		return true;
	if (json_integer_value(v) < min || json_integer_value(v) > max) {
		api_error(c, 400, "out_of_range", "%s must be from %d to %d, not %" JSON_INTEGER_FORMAT,
			  key, min, max, json_integer_value(v));
		return false;
	}
	*out = (int)json_integer_value(v);
	return true;
}

void api_agents_create(struct api_call *c)
{
	static const char *const spec[] = {
		"name:s", "backend:s", "memory_mib:i", "vcpus:i", "disk_gib:i", "command:s", "network:s", NULL,
	};
	_cleanup_(agent_freep) struct agent *a = NULL;
	json_t *body, *v;
	const char *name, *why;
	int k, r;

	c->target = "-";
	if (!(body = api_body_object(c, spec)))
		return;
	a = xcalloc(1, sizeof(*a));
	a->memory_mib = AGENT_MEMORY_DEFAULT;
	a->vcpus = 1;
	a->disk_gib = AGENT_DISK_DEFAULT;
	a->backend = BACKEND_VM;
	a->network = NETWORK_NONE;
	a->state = AGENT_DEFINED;

	name = json_string_value(json_object_get(body, "name"));
	if (!name) {
		api_error(c, 400, "missing_field", "field 'name' is required");
		goto out;
	}
	a->name = xstrdup(name);
	c->target = a->name;
	/* jansson refuses \u0000 in strings (no JSON_ALLOW_NUL), so strlen is the whole name. */
	if (agent_name_check(name, &why) < 0) {
		api_error(c, 400, "invalid_name", "invalid agent name: %s", why);
		goto out;
	}
	if ((v = json_object_get(body, "backend"))) {
		if ((k = backend_kind_from_string(json_string_value(v))) < 0) {
			api_error(c, 400, "invalid", "backend must be 'vm' or 'user'");
			goto out;
		}
		a->backend = (enum backend_kind)k;
	}
	if (!int_field(c, body, "memory_mib", AGENT_MEMORY_MIN, AGENT_MEMORY_MAX, &a->memory_mib) ||
	    !int_field(c, body, "vcpus", 1, AGENT_VCPUS_MAX, &a->vcpus) ||
	    !int_field(c, body, "disk_gib", 1, AGENT_DISK_MAX, &a->disk_gib))
		goto out;
	if ((v = json_object_get(body, "network"))) {
		if ((k = network_kind_from_string(json_string_value(v))) < 0) {
			api_error(c, 400, "invalid", "network must be 'none' or 'nat'");
			goto out;
		}
		a->network = (enum network_kind)k;
		if (a->backend == BACKEND_USER && a->network != NETWORK_NONE) {
			api_error(c, 400, "invalid", "network applies to vm agents only");
			goto out;
		}
	}
	if ((v = json_object_get(body, "command"))) {
		const char *cmd = json_string_value(v);

		if (strlen(cmd) == 0 || strlen(cmd) > AGENT_COMMAND_MAX) {
			api_error(c, 400, "invalid", "command must be 1 to %d characters",
				  AGENT_COMMAND_MAX);
			goto out;
		}
		a->command = xstrdup(cmd);
	}

	r = db_agent_insert(c->fleetd->db, a);
	if (r == -EEXIST) {
		api_error(c, 409, "exists", "agent '%s': already exists", a->name);
		goto out;
	}
	if (r < 0) {
		log_error("agent '%s': create failed: %s", a->name, strerror(-r));
		api_error_errno(c, r, "agent '%s': create failed: %s", a->name, strerror(-r));
		goto out;
	}
	log_info("agent '%s': created (backend %s, state %s) by uid %ld", a->name,
		 backend_kind_to_string(a->backend), agent_state_to_string(a->state), (long)c->uid);
	api_reply(c, 201, agent_to_json(a));
out:
	json_decref(body);
}

void api_agent_get(struct api_call *c)
{
	_cleanup_(agent_freep) struct agent *a = NULL;
	int r;

	if (!check_name_param(c))
		return;
	r = db_agent_get(c->fleetd->db, c->param, &a);
	if (r < 0) {
		api_error_errno(c, r, "agent '%s': %s", c->param, r == -ENOENT ? "no such agent" : strerror(-r));
		return;
	}
	api_reply(c, 200, agent_to_json(a));
}

void api_agent_delete(struct api_call *c)
{
	_cleanup_(agent_freep) struct agent *a = NULL;
	char force[8] = "";
	int r;

	if (!check_name_param(c))
		return;
	(void)api_query(c, "force", force, sizeof(force));
	r = db_agent_get(c->fleetd->db, c->param, &a);
	if (r < 0) {
		api_error_errno(c, r, "agent '%s': %s", c->param, r == -ENOENT ? "no such agent" : strerror(-r));
		return;
	}
	if (a->state == AGENT_RUNNING && strcmp(force, "1") != 0 && strcmp(force, "true") != 0) {
		api_error(c, 409, "busy", "agent '%s': is running; stop it first or use --force", a->name);
		return;
	}
	if ((r = db_agent_delete(c->fleetd->db, a->name)) < 0) {
		log_error("agent '%s': remove failed: %s", a->name, strerror(-r));
		api_error_errno(c, r, "agent '%s': remove failed: %s", a->name, strerror(-r));
		return;
	}
	log_info("agent '%s': removed by uid %ld", a->name, (long)c->uid);
	api_reply(c, 200, json_pack("{s:s}", "removed", a->name));
}
