/*
 * api_snapshots: /v1/agents/NAME/snapshots[/SNAP] and /v1/agents/NAME/restore.
 * A snapshot's row is written as 'creating' before the backend makes it and
 * becomes 'ready' only once the snapshot exists, so lists never show a
 * snapshot that is not there; backends_reconcile() finishes what a kill -9
 * interrupted.
 */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <string.h>
#include <time.h>

#include "api.h"
#include "backends.h"
#include "db.h"
#include "fleetd.h"
#include "health.h"
#include "log.h"
#include "names.h"

#define NOTE_MAX 1024

static json_t *snapshot_to_json(const struct snapshot *s)
{
	char created[32];

	return json_pack("{s:s, s:s, s:s, s:o, s:o, s:b, s:s?}",
		"name", s->name,
		"created_at", format_utc(s->created_at, created, sizeof(created)),
		"kind", s->kind,
		"size_bytes", s->size_bytes >= 0 ? json_integer(s->size_bytes) : json_null(),
		"good", s->good < 0 ? json_null() : json_boolean(s->good),
		"pinned", s->pinned,
		"note", s->note);
}

/* Load the agent and its backend's snapshot support; replies and returns NULL on failure. */
static struct agent *snapshot_agent(struct api_call *c, const struct backend_ops **ret_ops)
{
	struct agent *a = NULL;
	const char *why;
	int r;

	if (!api_check_name_param(c))
		return NULL;
	if ((r = db_agent_get(c->fleetd->db, c->param, &a)) < 0) {
		api_error_errno(c, r, "agent '%s': %s", c->param, r == -ENOENT ? "no such agent" : strerror(-r));
		return NULL;
	}
	if (a->state == AGENT_DEFINED || a->state == AGENT_PROVISIONING) {
		api_error(c, 409, "not_provisioned", "agent '%s': its environment is not provisioned", a->name);
		agent_free(a);
		return NULL;
	}
	*ret_ops = backend_get(c->fleetd, a->backend, &why);
	if (!*ret_ops) {
		api_error(c, 503, "unavailable", "agent '%s': the %s backend is unavailable: %s", a->name,
			  backend_kind_to_string(a->backend), why);
		agent_free(a);
		return NULL;
	}
	if (!(*ret_ops)->snapshot_create) {
		api_error(c, 501, "unsupported", "agent '%s': the %s backend has no snapshots yet", a->name,
			  backend_kind_to_string(a->backend));
		agent_free(a);
		return NULL;
	}
	return a;
}

void api_snapshots_list(struct api_call *c)
{
	const struct backend_ops *ops;
	_cleanup_(agent_freep) struct agent *a = snapshot_agent(c, &ops);
	struct snapshot **list = NULL;
	size_t n = 0;
	json_t *arr;
	int r;

	if (!a)
		return;
	if ((r = db_snapshot_list(c->fleetd->db, a->name, "ready", &list, &n)) < 0) {
		api_error_errno(c, r, "agent '%s': cannot list snapshots: %s", a->name, strerror(-r));
		return;
	}
	arr = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(arr, snapshot_to_json(list[i]));
	snapshot_list_free(list);
	api_reply(c, 200, json_pack("{s:s, s:o}", "agent", a->name, "snapshots", arr));
}

struct snapshot_op {
	struct api_call *call;	/* deferred */
	char *agent, *snap;
	int good;		/* what the check before it said: 1, 0, or -1 (not checked) */
	const struct backend_ops *ops;
	struct event *retry;	/* waiting out a periodic health check */
	int tries;
};

#define CHECK_WAIT_MS 500	/* a periodic health check holds an exec for a moment: */
#define CHECK_WAIT_TRIES 120	/* wait for it (at most 60 s) rather than refuse */

static void snapshot_op_free(struct snapshot_op *op)
{
	if (op->retry)
		event_free(op->retry);
	free(op->agent);
	free(op->snap);
	free(op);
}

static void snapshot_created(void *userdata, const struct snapshot_result *res)
{
	struct snapshot_op *op = userdata;
	struct db *db = op->call->fleetd->db;
	struct snapshot *s = NULL;
	int r;

	if (res->error < 0) {
		(void)db_snapshot_delete(db, op->agent, op->snap);
		log_error("agent '%s': snapshot '%s' failed: %s", op->agent, op->snap,
			  res->why ? res->why : strerror(-res->error));
		api_error_errno(op->call, res->error, "agent '%s': snapshot '%s' failed: %s", op->agent, op->snap,
				res->why ? res->why : strerror(-res->error));
		snapshot_op_free(op);
		return;
	}
	if ((r = db_snapshot_ready(db, op->agent, op->snap, res->kind, res->size_bytes)) < 0 ||
	    (r = db_snapshot_get(db, op->agent, op->snap, &s)) < 0) {
		log_error("agent '%s': snapshot '%s' was made but cannot be recorded: %s", op->agent, op->snap,
			  strerror(-r));
		api_error_errno(op->call, r, "agent '%s': snapshot '%s' cannot be recorded: %s", op->agent, op->snap,
				strerror(-r));
		snapshot_op_free(op);
		return;
	}
	if (op->good >= 0) {
		(void)db_snapshot_set_good(db, op->agent, op->snap, op->good);
		s->good = op->good;
	}
	log_info("agent '%s': snapshot '%s' taken (%s, %s)", op->agent, op->snap, res->kind,
		 op->good == 1 ? "good" : op->good == 0 ? "bad" : "health unknown");
	api_reply(op->call, 201, snapshot_to_json(s));
	snapshot_free(s);
	snapshot_op_free(op);
}

static void snapshot_retry(evutil_socket_t fd, short what, void *arg);

static void snapshot_take(struct snapshot_op *op)
{
	struct fleetd *f = op->call->fleetd;
	_cleanup_(agent_freep) struct agent *a = NULL;
	_cleanup_free_ char *why = NULL;
	int r;

	if ((r = db_agent_get(f->db, op->agent, &a)) == 0)
		r = op->ops->snapshot_create(f, a, op->snap, snapshot_created, op, &why);
	/* Busy only because of fleet's own health check: wait for it. A person's command is refused. */
	if (r == -EBUSY && health_checking(f, op->agent) && ++op->tries <= CHECK_WAIT_TRIES) {
		struct timeval tv = { 0, CHECK_WAIT_MS * 1000 };

		if (!op->retry)
			op->retry = evtimer_new(f->base, snapshot_retry, op);
		evtimer_add(op->retry, &tv);
		return;
	}
	if (r < 0) {
		(void)db_snapshot_delete(f->db, op->agent, op->snap);
		api_error_errno(op->call, r, "agent '%s': snapshot '%s' failed: %s", op->agent, op->snap,
				why ? why : strerror(-r));
		snapshot_op_free(op);
	}
}

static void snapshot_retry(evutil_socket_t fd, short what, void *arg)
{
	snapshot_take(arg);
}

static void snapshot_checked(void *userdata, int healthy, const char *detail)
{
	struct snapshot_op *op = userdata;

	op->good = healthy == 1 ? 1 : 0;
	snapshot_take(op);
}

void api_snapshot_create(struct api_call *c)
{
	static const char *const spec[] = { "name:s", "note:s", "pin:b", NULL };
	const struct backend_ops *ops;
	_cleanup_(agent_freep) struct agent *a = NULL;
	const char *note = NULL, *bad;
	struct snapshot_op *op;
	char name[80], target[112];
	json_t *body = NULL, *v;
	bool pin;
	int r;

	if (evbuffer_get_length(evhttp_request_get_input_buffer(c->req)) > 0 && !(body = api_body_object(c, spec)))
		return;
	if (!(a = snapshot_agent(c, &ops)))
		goto out;
	if ((v = json_object_get(body, "name"))) {
		if (snapshot_name_check(json_string_value(v), &bad) < 0) {
			api_error(c, 400, "invalid_name", "invalid snapshot name: %s", bad);
			goto out;
		}
		snprintf(name, sizeof(name), "%s", json_string_value(v));
	} else {
		/* snap-YYYYmmdd-HHMMSS, with -2, -3... if taken this second */
		time_t now = time(NULL);
		struct tm tm;
		struct snapshot *s = NULL;

		gmtime_r(&now, &tm);
		strftime(name, sizeof(name), "snap-%Y%m%d-%H%M%S", &tm);
		for (int i = 2; db_snapshot_get(c->fleetd->db, a->name, name, &s) == 0 && i < 100; i++) {
			snapshot_free(s);
			s = NULL;
			strftime(name, sizeof(name), "snap-%Y%m%d-%H%M%S", &tm);
			snprintf(name + strlen(name), sizeof(name) - strlen(name), "-%d", i);
		}
	}
	if ((v = json_object_get(body, "note"))) {
		note = json_string_value(v);
		if (strlen(note) > NOTE_MAX) {
			api_error(c, 400, "invalid", "note is longer than %d characters", NOTE_MAX);
			goto out;
		}
	}
	pin = json_is_true(json_object_get(body, "pin"));
	snprintf(target, sizeof(target), "%s/%s", a->name, name);
	c->target = target;
	r = db_snapshot_begin(c->fleetd->db, a->name, name, note, pin);
	if (r == -EEXIST) {
		api_error(c, 409, "exists", "agent '%s': snapshot '%s' already exists", a->name, name);
		goto out;
	}
	if (r < 0) {
		api_error_errno(c, r, "agent '%s': cannot record snapshot '%s': %s", a->name, name, strerror(-r));
		goto out;
	}
	op = xcalloc(1, sizeof(*op));
	op->agent = xstrdup(a->name);
	op->snap = xstrdup(name);
	op->ops = ops;
	op->good = -1;
	op->call = api_defer(c);
	/* A snapshot of a running agent that passes its health check first is marked good. */
	if (a->state == AGENT_RUNNING && health_check(c->fleetd, a->name, snapshot_checked, op) == 0)
		goto out;
	snapshot_take(op);
out:
	json_decref(body);
}

void api_snapshot_delete(struct api_call *c)
{
	const struct backend_ops *ops;
	_cleanup_(agent_freep) struct agent *a = NULL;
	_cleanup_free_ char *why = NULL;
	struct snapshot *s = NULL;
	const char *bad;
	int r;

	if (!(a = snapshot_agent(c, &ops)))
		return;
	if (snapshot_name_check(c->param2, &bad) < 0) {
		api_error(c, 400, "invalid_name", "invalid snapshot name: %s", bad);
		return;
	}
	if ((r = db_snapshot_get(c->fleetd->db, a->name, c->param2, &s)) < 0 || strcmp(s->state, "ready") != 0) {
		snapshot_free(s);
		api_error(c, 404, "not_found", "agent '%s': no snapshot '%s'", a->name, c->param2);
		return;
	}
	snapshot_free(s);
	r = ops->snapshot_delete(c->fleetd, a, c->param2, &why);
	if (r < 0 && r != -ENOENT) {
		api_error_errno(c, r, "agent '%s': cannot delete snapshot '%s': %s", a->name, c->param2,
				why ? why : strerror(-r));
		return;
	}
	if ((r = db_snapshot_delete(c->fleetd->db, a->name, c->param2)) < 0) {
		api_error_errno(c, r, "agent '%s': cannot delete snapshot '%s': %s", a->name, c->param2, strerror(-r));
		return;
	}
	log_info("agent '%s': snapshot '%s' deleted by uid %ld", a->name, c->param2, (long)c->uid);
	api_reply(c, 200, json_pack("{s:s, s:s}", "agent", a->name, "removed", c->param2));
}

struct restore_op {
	struct api_call *call;
	const struct backend_ops *ops;
	struct agent *agent;
	char *snap;
	struct event *retry;
	int tries;
};

static void restore_op_free(struct restore_op *op)
{
	if (op->retry)
		event_free(op->retry);
	agent_free(op->agent);
	free(op->snap);
	free(op);
}

static void restored(void *userdata, int r, const char *why)
{
	struct restore_op *op = userdata;
	struct fleetd *f = op->call->fleetd;
	enum agent_state st;

	if (r < 0) {
		log_error("agent '%s': restore of '%s' failed: %s", op->agent->name, op->snap, why ? why : strerror(-r));
		api_error_errno(op->call, r, "agent '%s': restore of '%s' failed: %s", op->agent->name, op->snap,
				why ? why : strerror(-r));
	} else {
		if (op->ops->state(f, op->agent, &st) == 0) {
			op->agent->state = st;
			(void)db_agent_set_state(f->db, op->agent->name, st);
		}
		log_notice("agent '%s': restored snapshot '%s' (uid %ld)", op->agent->name, op->snap,
			   (long)op->call->uid);
		api_reply(op->call, 200, json_pack("{s:s, s:s, s:s}", "agent", op->agent->name, "restored", op->snap,
						   "state", agent_state_to_string(op->agent->state)));
	}
	restore_op_free(op);
}

/* Start the restore; like a snapshot, it waits out fleet's own health check but refuses a person's command. */
static void restore_take(evutil_socket_t fd, short what, void *arg)
{
	struct restore_op *op = arg;
	struct fleetd *f = op->call->fleetd;
	_cleanup_free_ char *why = NULL;
	int r;

	r = op->ops->snapshot_restore(f, op->agent, op->snap, restored, op, &why);
	if (r == -EBUSY && health_checking(f, op->agent->name) && ++op->tries <= CHECK_WAIT_TRIES) {
		struct timeval tv = { 0, CHECK_WAIT_MS * 1000 };

		if (!op->retry)
			op->retry = evtimer_new(f->base, restore_take, op);
		evtimer_add(op->retry, &tv);
		return;
	}
	if (r < 0) {
		api_error_errno(op->call, r, "agent '%s': restore of '%s' failed: %s", op->agent->name, op->snap,
				why ? why : strerror(-r));
		restore_op_free(op);
	}
}

void api_snapshot_restore(struct api_call *c)
{
	static const char *const spec[] = { "snapshot:s", "last_good:b", NULL };
	const struct backend_ops *ops;
	_cleanup_(agent_freep) struct agent *a = NULL;
	_cleanup_free_ char *why = NULL, *snap = NULL;
	struct snapshot *s = NULL, **list = NULL;
	struct restore_op *op;
	char target[112];
	json_t *body;
	const char *bad;
	size_t n = 0;
	int r;

	if (!(body = api_body_object(c, spec)))
		return;
	if (!(a = snapshot_agent(c, &ops)))
		goto out;
	if (!json_object_get(body, "snapshot") == !json_is_true(json_object_get(body, "last_good"))) {
		api_error(c, 400, "invalid", "give either 'snapshot' or 'last_good': true");
		goto out;
	}
	if (json_object_get(body, "snapshot")) {
		if (snapshot_name_check(json_string_value(json_object_get(body, "snapshot")), &bad) < 0) {
			api_error(c, 400, "invalid_name", "invalid snapshot name: %s", bad);
			goto out;
		}
		snap = xstrdup(json_string_value(json_object_get(body, "snapshot")));
		if (db_snapshot_get(c->fleetd->db, a->name, snap, &s) < 0 || strcmp(s->state, "ready") != 0) {
			snapshot_free(s);
			api_error(c, 404, "not_found", "agent '%s': no snapshot '%s'", a->name, snap);
			goto out;
		}
		snapshot_free(s);
	} else {
		if ((r = db_snapshot_list(c->fleetd->db, a->name, "ready", &list, &n)) < 0) {
			api_error_errno(c, r, "agent '%s': cannot list snapshots: %s", a->name, strerror(-r));
			goto out;
		}
		for (size_t i = n; i > 0 && !snap; i--)
			if (list[i - 1]->good == 1)
				snap = xstrdup(list[i - 1]->name);
		snapshot_list_free(list);
		if (!snap) {
			api_error(c, 404, "not_found", "agent '%s': has no snapshot marked good", a->name);
			goto out;
		}
	}
	snprintf(target, sizeof(target), "%s/%s", a->name, snap);
	c->target = target;
	op = xcalloc(1, sizeof(*op));
	op->ops = ops;
	op->agent = agent_copy(a);
	op->snap = xstrdup(snap);
	op->call = api_defer(c);
	restore_take(-1, 0, op);
out:
	json_decref(body);
}
