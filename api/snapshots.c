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

#include "api/snapshots.h"
#include "api/handler.h"
#include "api/server.h"
#include "core/memory.h"
#include "core/backends.h"
#include "store/db.h"
#include "model/fleetd.h"
#include "core/health.h"
#include "common/log.h"
#include "common/names.h"
#include "core/snapshots.h"


static json_t *snapshot_to_json(const struct snapshot *s)
{
	char created[32];

	return json_pack("{s:s, s:s, s:s, s:o, s:o, s:b, s:s?}",
		"name", s->name,
		"created_at", format_utc(s->created_at, created, sizeof(created)),
		"kind", snapshot_kind_to_string(s->kind),
		"size_bytes", s->size_bytes >= 0 ? json_integer(s->size_bytes) : json_null(),
		"good", s->good < 0 ? json_null() : json_boolean(s->good),
		"pinned", s->pinned,
		"note", s->note);
}

/* An error from snapshots.c: its message as is, the status from its errno (-ENODEV: the backend is unavailable). */
static void snapshots_error(struct api_call *c, int r, const char *why)
{
	if (r == -ENODEV)
		api_error(c, 503, "unavailable", "%s", why);
	else
		api_error_core(c, r, why);
}

/* Load the agent and its backend's snapshot support; replies and returns NULL on failure. */
static struct agent *snapshot_agent(struct api_call *c, const struct backend_ops **ret_ops)
{
	_cleanup_free_ char *why = NULL;
	struct agent *a = NULL;
	int r;

	if (!api_check_name_param(c))
		return NULL;
	if ((r = snapshots_target(c->fleetd, c->param, &a, ret_ops, &why)) < 0) {
		snapshots_error(c, r, why);
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
	if ((r = db_snapshot_list(c->fleetd->db, a->name, SNAPSHOT_READY, &list, &n)) < 0) {
		api_error_errno(c, r, "agent '%s': cannot list snapshots: %s", a->name, strerror(-r));
		return;
	}
	arr = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(arr, snapshot_to_json(list[i]));
	snapshot_list_free(list);
	api_reply(c, 200, json_pack("{s:s, s:o}", "agent", a->name, "snapshots", arr));
}

static void snapshot_taken(void *userdata, int r, const char *why, const struct snapshot *s)
{
	struct api_call *c = userdata;

	if (r < 0) {
		snapshots_error(c, r, why);
		return;
	}
	snprintf(c->target_buf, sizeof(c->target_buf), "%s/%s", s->agent, s->name);	/* the generated name */
	c->target = c->target_buf;
	api_reply(c, 201, snapshot_to_json(s));
}

void api_snapshot_create(struct api_call *c)
{
	static const char *const spec[] = { "name:s", "note:s", "pin:b", NULL };
	const struct backend_ops *ops;
	_cleanup_(agent_freep) struct agent *a = NULL;
	_cleanup_free_ char *why = NULL;
	const char *name = NULL, *note = NULL, *bad;
	struct api_call *deferred;
	json_t *body = NULL;
	char target[112];
	int r;

	if (evbuffer_get_length(evhttp_request_get_input_buffer(c->req)) > 0 && !(body = api_body_object(c, spec)))
		return;
	if (!(a = snapshot_agent(c, &ops)))
		goto out;
	name = json_string_value(json_object_get(body, "name"));
	if (name && snapshot_name_check(name, &bad) < 0) {
		api_error(c, 400, "invalid_name", "invalid snapshot name: %s", bad);
		goto out;
	}
	note = json_string_value(json_object_get(body, "note"));
	snprintf(target, sizeof(target), "%s/%s", a->name, name ? name : "(generated)");
	c->target = target;
	deferred = api_defer(c);
	r = snapshots_take(c->fleetd, a->name, name, "snap", note, json_is_true(json_object_get(body, "pin")), 0,
			   snapshot_taken, deferred, &why);
	if (r < 0)
		snapshots_error(deferred, r, why);
out:
	json_decref(body);
}

void api_snapshot_delete(struct api_call *c)
{
	const struct backend_ops *ops;
	_cleanup_(agent_freep) struct agent *a = NULL;
	_cleanup_free_ char *why = NULL;
	const char *bad;
	int r;

	if (!(a = snapshot_agent(c, &ops)))
		return;
	if (snapshot_name_check(c->param2, &bad) < 0) {
		api_error(c, 400, "invalid_name", "invalid snapshot name: %s", bad);
		return;
	}
	if ((r = snapshots_delete(c->fleetd, a->name, c->param2, &why)) < 0) {	/* -ENOENT: no such snapshot */
		snapshots_error(c, r, why);
		return;
	}
	log_info("agent '%s': snapshot '%s' deleted by uid %ld", a->name, c->param2, (long)c->uid);
	api_reply(c, 200, json_pack("{s:s, s:s}", "agent", a->name, "removed", c->param2));
}

/* PATCH /v1/agents/NAME/snapshots/SNAP: pin or unpin it. */
void api_snapshot_update(struct api_call *c)
{
	static const char *const spec[] = { "pinned:b", NULL };
	const struct backend_ops *ops;
	_cleanup_(agent_freep) struct agent *a = NULL;
	struct snapshot *s = NULL, *gone = NULL;
	const char *bad;
	json_t *body, *v;
	int r;

	if (!(body = api_body_object(c, spec)))
		return;
	if (!(a = snapshot_agent(c, &ops)))
		goto out;
	if (snapshot_name_check(c->param2, &bad) < 0) {
		api_error(c, 400, "invalid_name", "invalid snapshot name: %s", bad);
		goto out;
	}
	if (db_snapshot_get(c->fleetd->db, a->name, c->param2, &s) < 0 || s->state != SNAPSHOT_READY) {
		api_error(c, 404, "not_found", "agent '%s': no snapshot '%s'", a->name, c->param2);
		goto out;
	}
	if ((v = json_object_get(body, "pinned"))) {
		if ((r = db_snapshot_set_pinned(c->fleetd->db, a->name, s->name, json_is_true(v))) < 0) {
			api_error_errno(c, r, "agent '%s': cannot update snapshot '%s': %s", a->name, s->name,
					strerror(-r));
			goto out;
		}
		s->pinned = json_is_true(v);
	}
	/* An unpinned snapshot may be past the retention line now: say so if it went. */
	if (!s->pinned && snapshots_prune(c->fleetd, a->name) > 0 &&
	    db_snapshot_get(c->fleetd->db, a->name, c->param2, &gone) == -ENOENT) {
		api_reply(c, 200, json_pack("{s:o, s:b}", "snapshot", snapshot_to_json(s), "pruned", 1));
		goto out;
	}
	snapshot_free(gone);
	api_reply(c, 200, json_pack("{s:o, s:b}", "snapshot", snapshot_to_json(s), "pruned", 0));
out:
	snapshot_free(s);
	json_decref(body);
}

struct restore_call {
	struct api_call *call;
	char *agent, *snap;
};

static void restored(void *userdata, int r, const char *why)
{
	struct restore_call *rc = userdata;
	struct fleetd *f = rc->call->fleetd;
	_cleanup_(agent_freep) struct agent *a = NULL;

	if (r < 0) {
		snapshots_error(rc->call, r, why);
	} else {
		log_notice("agent '%s': restored snapshot '%s' (uid %ld)", rc->agent, rc->snap, (long)rc->call->uid);
		(void)db_agent_get(f->db, rc->agent, &a);
		api_reply(rc->call, 200, json_pack("{s:s, s:s, s:s}", "agent", rc->agent, "restored", rc->snap,
						   "state", a ? agent_state_to_string(a->state) : "unknown"));
	}
	free(rc->agent);
	free(rc->snap);
	free(rc);
}

void api_snapshot_restore(struct api_call *c)
{
	static const char *const spec[] = { "snapshot:s", "last_good:b", "keep_memory:b", NULL };
	const struct backend_ops *ops;
	_cleanup_(agent_freep) struct agent *a = NULL;
	_cleanup_free_ char *why = NULL, *snap = NULL;
	struct restore_call *rc;
	char target[112];
	json_t *body;
	const char *bad;
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
		snap = xstrdup(json_string_value(json_object_get(body, "snapshot")));	/* snapshots_restore() checks it */
	} else if ((r = snapshots_newest_good(c->fleetd, a->name, &snap)) < 0) {
		if (r == -ENOENT)
			api_error(c, 404, "not_found", "agent '%s': has no snapshot marked good", a->name);
		else
			api_error_errno(c, r, "agent '%s': cannot list snapshots: %s", a->name, strerror(-r));
		goto out;
	}
	snprintf(target, sizeof(target), "%s/%s", a->name, snap);
	c->target = target;
	rc = xcalloc(1, sizeof(*rc));
	rc->agent = xstrdup(a->name);
	rc->snap = xstrdup(snap);
	rc->call = api_defer(c);
	/* keep_memory: the machine rolls back, the memory store stays as it is now (core/memory.c). */
	if (json_is_true(json_object_get(body, "keep_memory")))
		r = memory_restore_keep(c->fleetd, a->name, snap, restored, rc, &why);
	else
		r = snapshots_restore(c->fleetd, a->name, snap, 0, restored, rc, &why);
	if (r < 0) {
		snapshots_error(rc->call, r, why);
		free(rc->agent);
		free(rc->snap);
		free(rc);
	}
out:
	json_decref(body);
}
