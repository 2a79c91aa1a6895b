/*
 * api_agents: /v1/agents and /v1/agents/NAME. Validates every field before
 * the database is touched, so a refused call changes nothing but the audit
 * log.
 */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/http.h>
#include <string.h>

#include "model/agent.h"
#include "api/agents.h"
#include "api/handler.h"
#include "api/server.h"
#include "core/backends.h"
#include "store/db.h"
#include "model/fleetd.h"
#include "core/health.h"
#include "core/lifecycle.h"
#include "common/log.h"
#include "common/names.h"
#include "core/hosts.h"
#include "core/move.h"
#include "core/runs.h"
#include "core/snapshots.h"
#include "common/cron.h"
#include "model/egress.h"

static json_t *agent_to_json(const struct agent *a)
{
	char created[32], updated[32];
	json_t *j = json_pack("{s:s, s:s, s:s, s:i, s:i, s:i, s:s, s:s, s:s?, s:s, s:s}",
		"name", a->name,
		"backend", backend_kind_to_string(a->backend),
		"state", agent_state_to_string(a->state),
		"memory_mib", a->memory_mib,
		"vcpus", a->vcpus,
		"disk_gib", a->disk_gib,
		"network", network_kind_to_string(a->network),
		"restart", restart_policy_to_string(a->restart),
		"command", a->command,
		"created_at", format_utc(a->created_at, created, sizeof(created)),
		"updated_at", format_utc(a->updated_at, updated, sizeof(updated)));

	json_object_set_new(j, "health", json_pack("{s:s, s:s?, s:o, s:s?, s:i, s:b, s:s?}",
		"status", a->health < 0 ? "unknown" : a->health ? "healthy" : "unhealthy",
		"detail", a->health_detail,
		"checked_at", a->health_at > 0 ? json_string(format_utc(a->health_at, created, sizeof(created))) : json_null(),
		"command", a->health_command,
		"interval_s", a->health_interval_s,
		"auto_rollback", a->auto_rollback,
		"last_rollback", a->last_rollback));
	json_object_set_new(j, "snapshots", json_pack("{s:s, s:s?, s:i, s:s?}",
		"policy", snapshot_policy_to_string(a->snapshot_policy),
		"schedule", a->snapshot_schedule,
		"keep", a->snapshot_keep,
		"restoring", a->restoring));
	json_object_set_new(j, "runs", json_pack("{s:i, s:i, s:i, s:b}",
		"timeout_s", a->run_timeout_s,
		"max_queued", a->max_queued,
		"retry_interrupted", a->retry_interrupted,
		"secret_files", a->secret_files));
	json_object_set_new(j, "memory", json_pack("{s:i}", "quota_mib", a->memory_quota_mib));
	json_object_set_new(j, "boot", json_pack("{s:b, s:i}", "autostart", a->autostart, "priority", a->boot_priority));
	if (a->host)
		json_object_set_new(j, "host", json_string(a->host));
	if (a->egress_allow)
		json_object_set_new(j, "egress_allow", json_string(a->egress_allow));
	if (a->state_detail)
		json_object_set_new(j, "state_detail", json_string(a->state_detail));
	if (a->state == AGENT_DEFINED)
		json_object_set_new(j, "note", json_sprintf(
			"environment not provisioned: this fleetd has no %s backend built in",
			backend_kind_to_string(a->backend)));
	return j;
}

/* What `fleetctl list` shows of an agent (?view=brief): a sixth of the full object to build, send and parse. */
static json_t *agent_to_brief_json(const struct agent *a)
{
	char created[32];

	json_t *j = json_pack("{s:s, s:s, s:s, s:i, s:i, s:s, s:s}",
		"name", a->name,
		"backend", backend_kind_to_string(a->backend),
		"state", agent_state_to_string(a->state),
		"memory_mib", a->memory_mib,
		"vcpus", a->vcpus,
		"network", network_kind_to_string(a->network),
		"created_at", format_utc(a->created_at, created, sizeof(created)));

	if (a->host)	/* vm agents only */
		json_object_set_new(j, "host", json_string(a->host));
	return j;
}

/* Its host's connection lost (#15): "host_unreachable" says why; the state is the last one known, not a fact now. */
static void mark_unreachable(struct fleetd *f, const struct agent *a, const struct backend_ops *ops, json_t *j)
{
	_cleanup_free_ char *why = NULL;

	if (a->host && ops && ops->host_reachable && !ops->host_reachable(f, a->host, &why))
		json_object_set_new(j, "host_unreachable", json_string(why ? why : "unreachable"));
}

/*
 * ?view=table: the text `fleetctl list` prints, rendered here. A JSON
 * answer costs the client more to parse than its whole start (jansson
 * reads ~50 MB/s: 1.5 ms for 1000 agents as bare arrays, against a
 * fleetctl call of 1.4 ms), so the table of a large fleet comes ready.
 */
struct host_seen {
	char *name;
	bool lost;
};

struct table_out {
	struct fleetd *f;
	struct evbuffer *buf;
	const struct backend_ops *vm;
	struct host_seen *hosts;	/* each host asked about by this call, and its answer */
	size_t n_hosts;
	bool any;
};

#define TABLE_HEAD "%-32s %-7s %-12s %8s %5s %-7s %-12s %s\n"
#define TABLE_ROW "%-32s %-7s %-12s %5dMiB %5d %-7s %-12s %s\n"

/* Whether host's connection is lost, asked once per host per call (in memory: no libvirt call). */
static bool host_lost(struct table_out *t, const char *host)
{
	_cleanup_free_ char *why = NULL;

	for (size_t i = 0; i < t->n_hosts; i++)
		if (strcmp(t->hosts[i].name, host) == 0)
			return t->hosts[i].lost;
	t->hosts = xrealloc(t->hosts, (t->n_hosts + 1) * sizeof(*t->hosts));
	t->hosts[t->n_hosts] = (struct host_seen){ xstrdup(host),
		t->vm && t->vm->host_reachable && !t->vm->host_reachable(t->f, host, &why) };
	return t->hosts[t->n_hosts++].lost;
}

static void table_row(void *ud, const struct agent_row *a)
{
	struct table_out *t = ud;
	char created[32];

	if (!t->any && evbuffer_add_printf(t->buf, TABLE_HEAD, "NAME", "BACKEND", "STATE", "MEMORY", "VCPUS",
					   "NETWORK", "HOST", "CREATED") < 0)
		abort();
	t->any = true;
	/* its host lost: the recorded state is only the last one known */
	if (evbuffer_add_printf(t->buf, TABLE_ROW, a->name, a->backend, a->host && host_lost(t, a->host) ? "unreachable" : a->state,
				a->memory_mib, a->vcpus, a->network, a->host ? a->host : "-",
				format_utc(a->created_at, created, sizeof(created))) < 0)
		abort();
}

static void agents_table(struct api_call *c)
{
	struct table_out t = { .f = c->fleetd, .buf = evbuffer_new(), .vm = backend_get(c->fleetd, BACKEND_VM, NULL) };
	int r = t.buf ? db_agent_rows(c->fleetd->db, table_row, &t) : -ENOMEM;

	for (size_t i = 0; i < t.n_hosts; i++)
		free(t.hosts[i].name);
	free(t.hosts);
	if (r < 0) {
		if (t.buf)
			evbuffer_free(t.buf);
		api_error_errno(c, r, "cannot list agents: %s", strerror(-r));
		return;
	}
	if (!t.any && evbuffer_add(t.buf, "no agents\n", 10) < 0)
		abort();
	api_reply_raw(c, 200, "text/plain; charset=utf-8", evbuffer_pullup(t.buf, -1), evbuffer_get_length(t.buf));
	evbuffer_free(t.buf);
}

void api_agents_list(struct api_call *c)
{
	struct agent **list = NULL;
	char view[16] = "";
	size_t n = 0;
	bool brief;
	json_t *arr;
	int r;

	if (api_query(c, "view", view, sizeof(view)) && strcmp(view, "brief") != 0 && strcmp(view, "full") != 0 &&
	    strcmp(view, "table") != 0) {
		api_error(c, 400, "invalid", "view must be brief, table or full");
		return;
	}
	if (strcmp(view, "table") == 0) {
		agents_table(c);
		return;
	}
	brief = strcmp(view, "brief") == 0;
	if ((r = db_agent_list(c->fleetd->db, &list, &n)) < 0) {
		api_error_errno(c, r, "cannot list agents: %s", strerror(-r));
		return;
	}
	arr = json_array();
	for (size_t i = 0; i < n; i++) {
		json_t *j = brief ? agent_to_brief_json(list[i]) : agent_to_json(list[i]);
		const char *why;

		/* in memory (the host's connection state): no libvirt call per agent */
		mark_unreachable(c->fleetd, list[i], list[i]->host ? backend_get(c->fleetd, list[i]->backend, &why) : NULL, j);
		json_array_append_new(arr, j);
	}
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

/* Reply with the failure of a backend verb, mapping its errno to a status. */
static void backend_error(struct api_call *c, const struct agent *a, const char *verb, int r, const char *why)
{
	log_error("agent '%s': %s failed: %s", a->name, verb, why ? why : strerror(-r));
	if (r == -ENOSPC)
		api_error(c, 507, "no_space", "agent '%s': %s failed: %s", a->name, verb, why ? why : strerror(-r));
	else if (r == -EEXIST || r == -EBUSY)
		api_error(c, 409, r == -EEXIST ? "exists" : "busy", "agent '%s': %s failed: %s", a->name, verb,
			  why ? why : strerror(-r));
	else if (r == -EINVAL)
		api_error(c, 400, "invalid", "agent '%s': %s failed: %s", a->name, verb, why ? why : strerror(-r));
	else if (r == -EOPNOTSUPP)	/* not built (yet): an agent on another host (docs/multi-host.md) */
		api_error(c, 501, "unsupported", "agent '%s': %s failed: %s", a->name, verb, why ? why : strerror(-r));
	else
		api_error(c, 500, "backend", "agent '%s': %s failed: %s", a->name, verb, why ? why : strerror(-r));
}

/* A create whose environment is still being made (a VM on another host: its disks uploaded there). */
struct create_op {
	struct api_call *call;		/* deferred */
	struct agent *agent;
};

static void create_answered(struct api_call *c, struct agent *a)
{
	log_info("agent '%s': created (backend %s, state %s) by uid %ld", a->name,
		 backend_kind_to_string(a->backend), agent_state_to_string(a->state), (long)c->uid);
	api_reply(c, 201, agent_to_json(a));
}

static void create_provisioned(void *userdata, int r, const char *why)
{
	struct create_op *op = userdata;

	if (r < 0) {
		backend_error(op->call, op->agent, "provision", r, why);
	} else {
		op->agent->state = AGENT_STOPPED;
		create_answered(op->call, op->agent);
	}
	agent_free(op->agent);
	free(op);
}

/*
 * Record the agent and provision its environment (lifecycle_create_start:
 * two phases), answering 201 with the agent once it is made, or the
 * failure. The slow part of a VM's on another host runs off the loop: the
 * answer waits for it, other requests do not.
 */
static void create_agent(struct api_call *c, struct agent **ap)
{
	struct fleetd *f = c->fleetd;
	struct agent *a = *ap;
	const struct backend_ops *ops = NULL;
	_cleanup_free_ char *msg = NULL;
	const char *why = NULL;
	struct create_op *op;
	int r;

	if (backend_built_in(a->backend)) {
		ops = backend_get(f, a->backend, &why);
		if (!ops) {
			api_error(c, 503, "unavailable", "agent '%s': the %s backend is unavailable: %s", a->name,
				  backend_kind_to_string(a->backend), why);
			return;
		}
	}
	op = xcalloc(1, sizeof(*op));
	r = lifecycle_create_start(f, ops, a, create_provisioned, op, &msg);
	if (r == 1) {
		op->call = api_defer(c);
		op->agent = TAKE_PTR(*ap);
		return;
	}
	free(op);
	if (r < 0 && msg)
		backend_error(c, a, "provision", r, msg);
	else if (r == -EEXIST)
		api_error(c, 409, "exists", "agent '%s': already exists", a->name);
	else if (r < 0)
		api_error_errno(c, r, "agent '%s': create failed: %s", a->name, strerror(-r));
	else
		create_answered(c, a);
}

/*
 * Load the agent named by the path and, when its backend runs, refresh its
 * state from the backend (the backend is the truth, the row a cache).
 * Replies on failure; returns NULL then.
 */
static struct agent *load_agent(struct api_call *c, const struct backend_ops **ret_ops)
{
	struct agent *a;
	const struct backend_ops *ops;
	const char *why;

	if (!(a = api_agent_param(c)))
		return NULL;
	ops = backend_get(c->fleetd, a->backend, &why);
	lifecycle_refresh(c->fleetd, ops, a);
	if (ret_ops)
		*ret_ops = ops;
	return a;
}

/* health_command, health_interval_s, auto_rollback from body into a; replies 400 and returns false if bad. */
static bool health_fields(struct api_call *c, json_t *body, struct agent *a)
{
	json_t *v;

	if ((v = json_object_get(body, "health_command"))) {
		const char *cmd = json_string_value(v);

		if (strlen(cmd) > AGENT_COMMAND_MAX) {
			api_error(c, 400, "invalid", "health_command is longer than %d characters", AGENT_COMMAND_MAX);
			return false;
		}
		free(a->health_command);
		a->health_command = *cmd ? xstrdup(cmd) : NULL;	/* "": back to the default */
	}
	if (!int_field(c, body, "health_interval_s", 0, HEALTH_INTERVAL_MAX, &a->health_interval_s))
		return false;
	if ((v = json_object_get(body, "auto_rollback")))
		a->auto_rollback = json_is_true(v);
	return true;
}

/*
 * snapshot_policy, snapshot_schedule, snapshot_keep from body into a;
 * replies 400 and returns false if bad. A schedule alone means the cron
 * policy; the cron policy needs a schedule that parses.
 */
static bool snapshot_fields(struct api_call *c, json_t *body, struct agent *a)
{
	_cleanup_free_ char *why = NULL;
	struct cron_spec spec;
	json_t *v;
	int p;

	if ((v = json_object_get(body, "snapshot_schedule"))) {
		const char *text = json_string_value(v);

		free(a->snapshot_schedule);
		a->snapshot_schedule = NULL;
		if (*text) {
			if (cron_parse(text, &spec, &why) < 0) {
				api_error(c, 400, "invalid", "snapshot_schedule '%s': %s", text, why);
				return false;
			}
			a->snapshot_schedule = xstrdup(text);
			if (!json_object_get(body, "snapshot_policy"))
				a->snapshot_policy = SNAPSHOT_POLICY_CRON;
		}
	}
	if ((v = json_object_get(body, "snapshot_policy"))) {
		if ((p = snapshot_policy_from_string(json_string_value(v))) < 0) {
			api_error(c, 400, "invalid", "snapshot_policy must be none, before-run or cron");
			return false;
		}
		a->snapshot_policy = (enum snapshot_policy)p;
	}
	if (a->snapshot_policy == SNAPSHOT_POLICY_CRON && !a->snapshot_schedule) {
		api_error(c, 400, "invalid", "snapshot_policy cron needs a snapshot_schedule (a cron spec)");
		return false;
	}
	if (a->snapshot_policy != SNAPSHOT_POLICY_CRON && a->snapshot_schedule) {
		free(a->snapshot_schedule);	/* a schedule means nothing without the cron policy */
		a->snapshot_schedule = NULL;
	}
	return int_field(c, body, "snapshot_keep", 0, SNAPSHOT_KEEP_MAX, &a->snapshot_keep);
}

/* autostart and boot_priority from body into a; replies 400 and returns false if bad. */
static bool boot_fields(struct api_call *c, json_t *body, struct agent *a)
{
	json_t *v = json_object_get(body, "autostart");

	if (v)
		a->autostart = json_is_true(v);
	return int_field(c, body, "boot_priority", BOOT_PRIORITY_MIN, BOOT_PRIORITY_MAX, &a->boot_priority);
}

/* run_timeout_s, max_queued, retry_interrupted from body into a; replies 400 and returns false if bad. */
static bool run_fields(struct api_call *c, json_t *body, struct agent *a)
{
	json_t *v = json_object_get(body, "secret_files");

	if (v)
		a->secret_files = json_is_true(v);
	return boot_fields(c, body, a) && int_field(c, body, "run_timeout_s", 1, RUN_TIMEOUT_MAX, &a->run_timeout_s) &&
	       int_field(c, body, "max_queued", 1, MAX_QUEUED_MAX, &a->max_queued) &&
	       int_field(c, body, "retry_interrupted", 0, RETRY_INTERRUPTED_MAX, &a->retry_interrupted) &&
	       int_field(c, body, "memory_quota_mib", 1, MEMORY_QUOTA_MAX, &a->memory_quota_mib);
}

/*
 * egress_allow from body into a ("" clears it); only for a NAT agent of a
 * backend that applies it. Replies 400 and returns false if bad.
 */
static bool egress_field(struct api_call *c, json_t *body, struct agent *a)
{
	json_t *v = json_object_get(body, "egress_allow");
	const struct backend_ops *caps = backend_caps(a->backend);
	_cleanup_free_ struct egress_entry *e = NULL;
	const char *list, *why;
	size_t n;

	if (!v)
		return true;
	list = json_string_value(v);
	free(a->egress_allow);
	a->egress_allow = NULL;
	if (!*list)
		return true;
	if (a->network != NETWORK_NAT) {
		api_error(c, 400, "invalid", "egress_allow needs network 'nat'");
		return false;
	}
	if (!caps || !caps->network_apply) {
		api_error(c, 400, "invalid", "egress_allow is not available for %s agents", backend_kind_to_string(a->backend));
		return false;
	}
	if (egress_parse(list, &e, &n, &why) < 0) {
		api_error(c, 400, "invalid", "%s", why);
		return false;
	}
	a->egress_allow = xstrdup(list);
	return true;
}

/*
 * network from body into a (set --network): only where the backend can
 * change it, and not while the agent runs. *changed says whether the
 * backend must make the change. Replies and returns false if refused.
 */
static bool network_field(struct api_call *c, json_t *body, struct agent *a, const struct backend_ops *ops,
			  bool *changed)
{
	json_t *v = json_object_get(body, "network");
	int k;

	*changed = false;
	if (!v)
		return true;
	if ((k = network_kind_from_string(json_string_value(v))) < 0) {
		api_error(c, 400, "invalid", "network must be 'none' or 'nat'");
		return false;
	}
	if ((enum network_kind)k == a->network)
		return true;
	if (!ops || !ops->network_change) {
		api_error(c, 400, "invalid", "changing the network of %s agents is not supported: create a new agent",
			  backend_kind_to_string(a->backend));
		return false;
	}
	if (a->state != AGENT_DEFINED && a->state != AGENT_STOPPED) {
		api_error(c, 409, "busy", "agent '%s' is %s: stop it first to change its network", a->name,
			  agent_state_to_string(a->state));
		return false;
	}
	a->network = (enum network_kind)k;
	*changed = a->state == AGENT_STOPPED;	/* a defined agent gets it at provision */
	return true;
}

/* command from body into a; replies 400 and returns false if bad. */
static bool command_field(struct api_call *c, json_t *body, struct agent *a)
{
	json_t *v = json_object_get(body, "command");
	const char *cmd;

	if (!v)
		return true;
	cmd = json_string_value(v);
	if (strlen(cmd) == 0 || strlen(cmd) > AGENT_COMMAND_MAX) {
		api_error(c, 400, "invalid", "command must be 1 to %d characters", AGENT_COMMAND_MAX);
		return false;
	}
	free(a->command);
	a->command = xstrdup(cmd);
	return true;
}

/* PATCH /v1/agents/NAME: change the command, health and snapshot settings. */
void api_agent_update(struct api_call *c)
{
	static const char *const spec[] = {
		"command:s", "health_command:s", "health_interval_s:i", "auto_rollback:b",
		"snapshot_policy:s", "snapshot_schedule:s", "snapshot_keep:i",
		"run_timeout_s:i", "max_queued:i", "retry_interrupted:i", "memory_quota_mib:i", "egress_allow:s", "secret_files:b",
		"network:s", "autostart:b", "boot_priority:i", NULL,
	};
	_cleanup_(agent_freep) struct agent *a = NULL;
	const struct backend_ops *ops = NULL;
	_cleanup_free_ char *why = NULL;
	enum network_kind old_network = NETWORK_NONE;
	bool net_changed = false;
	json_t *body;
	int r, old_quota = 0;

	if (!(body = api_body_object(c, spec)))
		return;
	if ((a = load_agent(c, &ops))) {
		old_quota = a->memory_quota_mib;
		old_network = a->network;
	}
	if (a && command_field(c, body, a) && health_fields(c, body, a) && snapshot_fields(c, body, a) &&
	    run_fields(c, body, a) && network_field(c, body, a, ops, &net_changed) && egress_field(c, body, a)) {
		if (a->network != NETWORK_NAT && a->egress_allow) {
			/* A list left from before --network none would hold nothing: say so rather than keep it. */
			api_error(c, 400, "invalid", "egress_allow needs network 'nat' (remove the list with egress_allow \"\")");
		} else if (a->memory_quota_mib != old_quota && ops && ops->memory_quota_apply &&
		    a->state != AGENT_DEFINED && a->state != AGENT_PROVISIONING &&
		    (r = ops->memory_quota_apply(c->fleetd, a, old_quota, &why)) < 0) {
			/* Not stored: the quota the store has is the one that holds. */
			api_error_errno(c, r, "agent '%s': memory_quota_mib: %s", a->name, why ? why : strerror(-r));
		} else if (net_changed && (r = ops->network_change(c->fleetd, a, &why)) < 0) {
			/* Not stored: the agent keeps the network it has. */
			api_error_errno(c, r, "agent '%s': network: %s", a->name, why ? why : strerror(-r));
		} else if ((r = db_agent_set_settings(c->fleetd->db, a)) < 0) {
			if (net_changed) {	/* back to the network the database still says */
				_cleanup_free_ char *ignored = NULL;

				a->network = old_network;
				(void)ops->network_change(c->fleetd, a, &ignored);
			}
			api_error_errno(c, r, "agent '%s': cannot update: %s", a->name, strerror(-r));
		} else if (json_object_get(body, "egress_allow") && ops && ops->network_apply &&
			   a->state != AGENT_DEFINED && a->state != AGENT_PROVISIONING &&
			   (r = ops->network_apply(c->fleetd, a, &why)) < 0) {
			/* Stored: the agent's next start applies it again. */
			api_error_errno(c, r, "agent '%s': egress_allow stored, but not applied: %s", a->name,
					why ? why : strerror(-r));
		} else {
			/* Fewer to keep applies now, not at the next snapshot. */
			if (a->snapshot_keep > 0 && json_object_get(body, "snapshot_keep"))
				(void)snapshots_prune(c->fleetd, a->name);
			api_reply(c, 200, agent_to_json(a));
		}
	}
	json_decref(body);
}

static void health_answered(void *userdata, int healthy, const char *detail)
{
	struct api_call *d = userdata;

	api_reply(d, 200, json_pack("{s:s, s:b, s:s}", "agent", d->param, "healthy", healthy == 1,
				    "detail", detail ? detail : ""));
}

/* POST /v1/agents/NAME/health: run a check now and answer with its result. */
void api_agent_health(struct api_call *c)
{
	_cleanup_(agent_freep) struct agent *a = load_agent(c, NULL);
	struct api_call *d;
	int r;

	if (!a)
		return;
	if (a->state == AGENT_DEFINED || a->state == AGENT_PROVISIONING) {
		api_error(c, 409, "not_provisioned", "agent '%s': its environment is not provisioned", a->name);
		return;
	}
	d = api_defer(c);
	if ((r = health_check(c->fleetd, a->name, health_answered, d)) < 0)
		api_error_errno(d, r, "agent '%s': cannot check its health: %s", a->name, strerror(-r));
}

void api_agents_create(struct api_call *c)
{
	static const char *const spec[] = {
		"name:s", "backend:s", "memory_mib:i", "vcpus:i", "disk_gib:i", "command:s", "network:s", "restart:s",
		"health_command:s", "health_interval_s:i", "auto_rollback:b",
		"snapshot_policy:s", "snapshot_schedule:s", "snapshot_keep:i",
		"run_timeout_s:i", "max_queued:i", "retry_interrupted:i", "memory_quota_mib:i", "egress_allow:s", "secret_files:b",
		"autostart:b", "boot_priority:i", "host:s", NULL,
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
	a->health_interval_s = HEALTH_INTERVAL_DEFAULT;
	a->run_timeout_s = RUN_TIMEOUT_DEFAULT;
	a->max_queued = MAX_QUEUED_DEFAULT;
	a->memory_quota_mib = MEMORY_QUOTA_DEFAULT;

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
		if (a->network != NETWORK_NONE && backend_caps(a->backend) && !backend_caps(a->backend)->has_network) {
			api_error(c, 400, "invalid", "%s agents have no network", backend_kind_to_string(a->backend));
			goto out;
		}
	}
	if ((v = json_object_get(body, "restart"))) {
		if ((k = restart_policy_from_string(json_string_value(v))) < 0) {
			api_error(c, 400, "invalid", "restart must be 'on-failure', 'always' or 'never'");
			goto out;
		}
		a->restart = (enum restart_policy)k;
	}
	if (!health_fields(c, body, a) || !snapshot_fields(c, body, a) || !run_fields(c, body, a))
		goto out;
	if (!command_field(c, body, a) || !egress_field(c, body, a))
		goto out;

	/*
	 * Where a VM agent goes (core/hosts.c): before anything is recorded. A
	 * backend that is not running is create_agent's 503, not a placement's.
	 */
	if (backend_built_in(a->backend) && backend_get(c->fleetd, a->backend, &why)) {
		_cleanup_free_ char *msg = NULL;
		const char *host = json_string_value(json_object_get(body, "host"));
		struct agent *old = NULL;

		/* A taken name is that, whatever the hosts say (the insert checks again). */
		if (db_agent_get(c->fleetd->db, a->name, &old) == 0) {
			agent_free(old);
			api_error(c, 409, "exists", "agent '%s': already exists", a->name);
			goto out;
		}

		if (host && agent_name_check(host, &why) < 0) {
			api_error(c, 400, "invalid_name", "invalid host name: %s", why);
			goto out;
		}
		if ((r = hosts_place(c->fleetd, a, host, &msg)) < 0) {
			api_error_errno(c, r, "agent '%s': %s", a->name, msg);
			goto out;
		}
	}
	create_agent(c, &a);
out:
	json_decref(body);
}

void api_agent_get(struct api_call *c)
{
	const struct backend_ops *ops = NULL;
	_cleanup_(agent_freep) struct agent *a = load_agent(c, &ops);
	long long refused;
	json_t *j;

	if (!a)
		return;
	j = agent_to_json(a);
	mark_unreachable(c->fleetd, a, ops, j);
	/* What the egress allow list refused, from the agent's nft counter (only here: it costs an nft run). */
	if (ops && ops->network_refused && ops->network_refused(c->fleetd, a, &refused) == 0)
		json_object_set_new(j, "egress_refused_packets", json_integer(refused));
	api_reply(c, 200, j);
}

void api_agent_delete(struct api_call *c)
{
	const struct backend_ops *ops = NULL;
	_cleanup_(agent_freep) struct agent *a = load_agent(c, &ops);
	_cleanup_free_ char *msg = NULL;
	_cleanup_free_ int64_t *run_ids = NULL;
	size_t n_runs = 0;
	char force_arg[8] = "";
	bool force;
	int r;

	if (!a)
		return;
	(void)api_query(c, "force", force_arg, sizeof(force_arg));
	force = strcmp(force_arg, "1") == 0 || strcmp(force_arg, "true") == 0;
	if (a->state == AGENT_RUNNING && !force) {
		api_error(c, 409, "busy", "agent '%s': is running; stop it first or use --force", a->name);
		return;
	}
	if (a->state != AGENT_DEFINED && !ops) {
		const char *why;
		(void)backend_get(c->fleetd, a->backend, &why);
		api_error(c, 503, "unavailable", "agent '%s': the %s backend is unavailable: %s", a->name,
			  backend_kind_to_string(a->backend), why);
		return;
	}
	if ((r = runs_ids_of(c->fleetd, a->name, &run_ids, &n_runs)) < 0) {
		api_error_errno(c, r, "agent '%s': cannot list its runs: %s", a->name, strerror(-r));
		return;
	}
	r = lifecycle_destroy(c->fleetd, ops, a, force, &msg);
	if (r < 0 && msg) {
		backend_error(c, a, "remove", r, msg);
		return;
	}
	if (r < 0) {
		api_error_errno(c, r, "agent '%s': remove failed: %s", a->name, strerror(-r));
		return;
	}
	/* Only after the rows are gone: a log without a row is swept at the next start. */
	(void)runs_remove_logs(c->fleetd, run_ids, n_runs);
	log_info("agent '%s': removed by uid %ld", a->name, (long)c->uid);
	api_reply(c, 200, json_pack("{s:s}", "removed", a->name));
}

/*
 * start, stop and restart share one shape: check, then the asynchronous
 * backend verbs in turn (stop before start), recording each new state, and
 * answer with the agent once the last one is done.
 */
struct verb_op {
	struct api_call *call;		/* deferred */
	const struct backend_ops *ops;
	struct agent *agent;
	bool want_start;
	bool stopped;		/* this op stopped it */
	int timeout_s;
};

static void op_finish(struct verb_op *op, int r, const char *verb, const char *why)
{
	if (r < 0)
		backend_error(op->call, op->agent, verb, r, why);
	else
		api_reply(op->call, 200, agent_to_json(op->agent));
	agent_free(op->agent);
	free(op);
}

static void op_started(void *userdata, int r, const char *why)
{
	struct verb_op *op = userdata;

	if (r == 0) {	/* recorded by lifecycle_start; a boot failure is handled there too */
		op->agent->state = AGENT_RUNNING;
		log_info("agent '%s': started by uid %ld", op->agent->name, (long)op->call->uid);
	}
	op_finish(op, r, "start", why);
}

static void op_start(struct verb_op *op)
{
	_cleanup_free_ char *why = NULL;
	int r;

	if (!op->want_start || (op->agent->state == AGENT_RUNNING && !op->stopped)) {
		op_finish(op, 0, "start", NULL);
		return;
	}
	r = lifecycle_start(op->call->fleetd, op->ops, op->agent, op_started, op, &why);
	if (r < 0)
		op_finish(op, r, "start", why);
}

static void op_stopped(void *userdata, int r, const char *why)
{
	struct verb_op *op = userdata;

	if (r < 0) {
		op_finish(op, r, "stop", why);
		return;
	}
	op->agent->state = AGENT_STOPPED;	/* recorded by lifecycle_stop */
	op->stopped = true;
	log_info("agent '%s': stopped by uid %ld", op->agent->name, (long)op->call->uid);
	op_start(op);
}

static void agent_verb(struct api_call *c, bool want_stop, bool want_start)
{
	static const char *const spec[] = { "timeout_s:i", NULL };
	const struct backend_ops *ops = NULL;
	_cleanup_(agent_freep) struct agent *a = load_agent(c, &ops);
	_cleanup_free_ char *why = NULL;
	struct verb_op *op;
	json_t *body = NULL, *t;
	int timeout_s = 30, r;

	if (!a)
		return;
	if (evbuffer_get_length(evhttp_request_get_input_buffer(c->req)) > 0) {
		if (!(body = api_body_object(c, spec)))
			return;
		t = json_object_get(body, "timeout_s");
		if (t && (json_integer_value(t) < 0 || json_integer_value(t) > 3600)) {
			json_decref(body);
			api_error(c, 400, "out_of_range", "timeout_s must be from 0 to 3600");
			return;
		}
		if (t)
			timeout_s = (int)json_integer_value(t);
		json_decref(body);
	}
	if (a->state == AGENT_DEFINED) {
		api_error(c, 409, "not_provisioned", "agent '%s': its environment is not provisioned", a->name);
		return;
	}
	if (!ops) {
		const char *reason;
		(void)backend_get(c->fleetd, a->backend, &reason);
		api_error(c, 503, "unavailable", "agent '%s': the %s backend is unavailable: %s", a->name,
			  backend_kind_to_string(a->backend), reason);
		return;
	}
	if (a->state == AGENT_PROVISIONING) {
		api_error(c, 409, "busy", "agent '%s': is still being provisioned", a->name);
		return;
	}
	if (a->state == AGENT_MISSING || a->state == AGENT_REMOVING) {
		api_error(c, 409, a->state == AGENT_MISSING ? "missing" : "busy", "agent '%s': %s", a->name,
			  a->state == AGENT_MISSING ? (a->state_detail ? a->state_detail : "its environment is gone")
						    : "is being removed");
		return;
	}
	op = xcalloc(1, sizeof(*op));
	op->ops = ops;
	op->agent = TAKE_PTR(a);
	op->want_start = want_start;
	op->timeout_s = timeout_s;
	op->call = api_defer(c);
	/* A bad agent may still run: stop it for real. */
	if (want_stop && (op->agent->state == AGENT_RUNNING || op->agent->state == AGENT_BAD)) {
		r = lifecycle_stop(c->fleetd, ops, op->agent, timeout_s, op_stopped, op, &why);
		if (r < 0)
			op_finish(op, r, "stop", why);
		return;
	}
	if (want_stop)	/* stopped already, maybe waiting for an automatic restart: it must stay stopped */
		(void)lifecycle_cancel_restart(c->fleetd, op->agent->name);
	op_start(op);
}

void api_agent_start(struct api_call *c)
{
	agent_verb(c, false, true);
}

void api_agent_stop(struct api_call *c)
{
	agent_verb(c, true, false);
}

void api_agent_restart(struct api_call *c)
{
	agent_verb(c, true, true);
}

/* POST /v1/agents/NAME/move {"host": HOST, "stop": bool}: fleetctl move (core/move.c). */
struct move_call {
	struct api_call *call;		/* deferred */
	char *agent;
};

static void move_reply(struct api_call *c, const char *agent, int r, const char *why)
{
	if (r == -EALREADY)
		api_error(c, 409, "already_there", "agent '%s': cannot move: %s", agent, why ? why : strerror(-r));
	else if (r == -EHOSTDOWN || r == -ENOTCONN)
		api_error(c, 503, "unreachable", "agent '%s': cannot move: %s", agent, why ? why : strerror(-r));
	else
		api_error_errno(c, r, "agent '%s': cannot move: %s", agent, why ? why : strerror(-r));
}

static void move_finished(void *userdata, int r, const char *why)
{
	struct move_call *m = userdata;
	struct agent *a = NULL;

	if (r < 0) {
		log_warning("agent '%s': move failed: %s", m->agent, why ? why : strerror(-r));
		move_reply(m->call, m->agent, r, why);
	} else if ((r = db_agent_get(m->call->fleetd->db, m->agent, &a)) < 0) {
		api_error_errno(m->call, r, "agent '%s': moved, but cannot read it back: %s", m->agent, strerror(-r));
	} else {
		log_info("agent '%s': moved to host %s by uid %ld", m->agent, a->host, (long)m->call->uid);
		api_reply(m->call, 200, agent_to_json(a));
		agent_free(a);
	}
	free(m->agent);
	free(m);
}

void api_agent_move(struct api_call *c)
{
	static const char *const spec[] = { "host:s", "stop:b", NULL };
	_cleanup_(agent_freep) struct agent *a = api_agent_param(c);
	_cleanup_free_ char *why = NULL;
	struct move_call *m;
	const char *host;
	json_t *body;
	int r;

	if (!a || !(body = api_body_object(c, spec)))
		return;
	if (!(host = json_string_value(json_object_get(body, "host")))) {
		json_decref(body);
		api_error(c, 400, "invalid", "a move names the target \"host\"");
		return;
	}
	m = xcalloc(1, sizeof(*m));
	m->agent = xstrdup(a->name);
	m->call = api_defer(c);
	r = move_agent(c->fleetd, a->name, host, json_is_true(json_object_get(body, "stop")), move_finished, m, &why);
	json_decref(body);
	if (r < 0) {
		move_reply(m->call, m->agent, r, why);
		free(m->agent);
		free(m);
	}
}
