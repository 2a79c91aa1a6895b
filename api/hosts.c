/*
 * api_hosts: GET/POST /v1/hosts, PATCH and DELETE /v1/hosts/NAME: the HTTP
 * face of core/hosts.c, which checks, connects and decides.
 */
#include <errno.h>
#include <string.h>

#include "api/hosts.h"
#include "api/server.h"
#include "common/names.h"
#include "core/hosts.h"

static json_t *host_to_json(const struct host *h)
{
	char added[32];
	json_t *j = json_pack("{s:s, s:s?, s:b, s:i, s:i, s:b, s:o, s:i, s:b}",
		"name", h->name,
		"uri", h->uri,
		"local", strcmp(h->name, HOST_LOCAL) == 0,
		"max_agents", h->max_agents,
		"reserve_memory_mib", h->reserve_memory_mib,
		"draining", h->draining,
		"added_at", h->added_at > 0 ? json_string(format_utc(h->added_at, added, sizeof(added))) : json_null(),
		"agents", h->agents,
		"reachable", h->facts.reachable);

	/*
	 * The facts are what the host said facts_age_s ago (read off the loop);
	 * refreshing: asked again, refreshing_s ago (a read takes milliseconds:
	 * seconds mean the host stopped answering).
	 */
	json_object_set_new(j, "refreshing", json_boolean(h->facts.refreshing));
	if (h->facts.refreshing_s >= 0)
		json_object_set_new(j, "refreshing_s", json_integer(h->facts.refreshing_s));
	if (h->facts.age_s >= 0)
		json_object_set_new(j, "facts_age_s", json_integer(h->facts.age_s));
	if (!h->facts.reachable)
		json_object_set_new(j, "error", json_string(h->facts.error ? h->facts.error : "not connected"));
	if (h->facts.age_s < 0)
		return j;	/* it never answered since fleetd connected */
	json_object_set_new(j, "libvirt_version", json_string(h->facts.libvirt));
	json_object_set_new(j, "qemu_version", json_string(h->facts.qemu));
	json_object_set_new(j, "virt", json_string(h->facts.kvm ? "kvm" : "tcg"));
	json_object_set_new(j, "free_memory_mib", h->facts.free_memory_bytes >= 0
				? json_integer(h->facts.free_memory_bytes >> 20) : json_null());
	return j;
}

/* The ":name" segment is a host name, checked as an agent's. */
static bool host_param_ok(struct api_call *c)
{
	const char *why;

	if (agent_name_check(c->param, &why) < 0) {
		api_error(c, 400, "invalid_name", "invalid host name: %s", why);
		return false;
	}
	return true;
}

/* GET /v1/hosts: every host, what its libvirt says now, and its agents counted. */
void api_hosts_list(struct api_call *c)
{
	struct host *v = NULL;
	size_t n = 0;
	json_t *arr;
	int r;

	if ((r = hosts_list(c->fleetd, true, &v, &n)) < 0) {
		api_error_errno(c, r, "cannot read the hosts: %s", strerror(-r));
		return;
	}
	arr = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(arr, host_to_json(&v[i]));
	host_list_free(v, n);
	api_reply(c, 200, json_pack("{s:o}", "hosts", arr));
}

/* core's answer to a host add: d is the deferred call, named by its target. */
static void host_added(void *arg, int r, const char *why)
{
	struct api_call *d = arg;
	const char *name = d->target;

	if (r == -ENOTCONN)
		api_error(d, 400, "unreachable", "host '%s': cannot connect: %s", name, why);
	else if (r == -ECANCELED)	/* fleetd stopping: api_stop said 503 already; this frees d */
		api_error(d, 503, "unavailable", "host '%s': not added: %s", name, why);
	else if (r < 0)
		api_error_errno(d, r, "%s", why ? why : strerror(-r));
	else {
		struct host *v = NULL;
		size_t n = 0;
		json_t *j = NULL;

		if (hosts_list(d->fleetd, true, &v, &n) == 0)
			for (size_t i = 0; i < n; i++)
				if (strcmp(v[i].name, name) == 0)
					j = host_to_json(&v[i]);
		host_list_free(v, n);
		api_reply(d, 201, j ? j : json_pack("{s:s}", "name", name));
	}
}

/* POST /v1/hosts {"name", "uri", "max_agents", "reserve_memory_mib"}: connected to (on a worker) before it is recorded. */
void api_host_add(struct api_call *c)
{
	static const char *const spec[] = { "name:s", "uri:s", "max_agents:i", "reserve_memory_mib:i", NULL };
	_cleanup_free_ char *why = NULL;
	struct api_call *d;
	const char *name, *uri;
	json_int_t max = 0, reserve = 0;
	json_t *body;
	int r;

	c->target = "-";
	if (!(body = api_body_object(c, spec)))
		return;
	name = json_string_value(json_object_get(body, "name"));
	uri = json_string_value(json_object_get(body, "uri"));
	if (!name || !uri) {
		api_error(c, 400, "missing_field", "fields 'name' and 'uri' are required");
		goto out;
	}
	c->target = name;	/* the body's own string: valid until the call's reply */
	{
		const char *why_name;

		if (agent_name_check(name, &why_name) < 0) {
			api_error(c, 400, "invalid_name", "invalid host name: %s", why_name);
			goto out;
		}
	}
	if (json_object_get(body, "max_agents"))
		max = json_integer_value(json_object_get(body, "max_agents"));
	if (json_object_get(body, "reserve_memory_mib"))
		reserve = json_integer_value(json_object_get(body, "reserve_memory_mib"));
	if (max < 0 || max > HOST_MAX_AGENTS_MAX || reserve < 0 || reserve > HOST_RESERVE_MAX_MIB) {
		api_error(c, 400, "out_of_range", "max_agents is 0 (no limit) to %d, reserve_memory_mib 0 to %d",
			  HOST_MAX_AGENTS_MAX, HOST_RESERVE_MAX_MIB);
		goto out;
	}
	/* Answered once the host answered (or its bound passed): fleetd's loop serves others meanwhile. */
	d = api_defer(c);
	if ((r = hosts_add(d->fleetd, name, uri, (int)max, (int)reserve, host_added, d, &why)) < 0)
		host_added(d, r, why);
out:
	json_decref(body);
}

/* PATCH /v1/hosts/NAME {"draining": bool}. */
void api_host_update(struct api_call *c)
{
	static const char *const spec[] = { "draining:b", NULL };
	_cleanup_free_ char *why = NULL;
	json_t *body, *d;
	int r;

	if (!host_param_ok(c) || !(body = api_body_object(c, spec)))
		return;
	if (!(d = json_object_get(body, "draining"))) {
		api_error(c, 400, "missing_field", "field 'draining' is required");
	} else if ((r = hosts_set_draining(c->fleetd, c->param, json_is_true(d), &why)) < 0) {
		api_error_errno(c, r, "%s", why);
	} else {
		api_reply(c, 200, json_pack("{s:s, s:b}", "name", c->param, "draining", json_is_true(d)));
	}
	json_decref(body);
}

/* DELETE /v1/hosts/NAME: refused (409) while agents are placed on it. */
void api_host_delete(struct api_call *c)
{
	_cleanup_free_ char *why = NULL;
	int r;

	if (!host_param_ok(c))
		return;
	if ((r = hosts_remove(c->fleetd, c->param, &why)) == -EBUSY)
		api_error(c, 409, "in_use", "%s", why);
	else if (r < 0)
		api_error_errno(c, r, "%s", why);
	else
		api_reply(c, 200, json_pack("{s:s}", "removed", c->param));
}
