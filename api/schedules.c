/*
 * api_schedules: /v1/agents/NAME/schedules[/ID] and /v1/schedules: an
 * agent's cron triggers (core/cron_triggers.c): add (201), list, remove.
 * fleetd checks the spec, zone and catch-up word itself (400), whatever
 * fleetctl already checked.
 */
#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <time.h>

#include "api/handler.h"
#include "api/schedules.h"
#include "api/server.h"
#include "core/cron_triggers.h"
#include "model/fleetd.h"
#include "store/db.h"

static json_t *time_or_null(int64_t t)
{
	char buf[32];

	return t > 0 ? json_string(format_utc(t, buf, sizeof(buf))) : json_null();
}

static json_t *schedule_to_json(const struct schedule *s, time_t now)
{
	time_t next = cron_triggers_next(s, now);

	return json_pack("{s:I, s:s, s:s, s:o, s:s, s:I, s:o, s:o, s:o}",
		"id", (json_int_t)s->id,
		"agent", s->agent,
		"cron", s->spec,
		"tz", s->tz ? json_string(s->tz) : json_null(),
		"catch_up", cron_catch_up_to_string(s->catch_up),
		"payload_bytes", (json_int_t)(s->payload ? s->payload_len : 0),
		"created_at", time_or_null(s->created_at),
		"last_at", s->last_at > s->created_at ? time_or_null(s->last_at) : json_null(),
		"next_at", next != (time_t)-1 ? time_or_null(next) : json_null());
}

/* Reply with the schedules of agent (NULL: all). */
static void reply_list(struct api_call *c, const char *agent)
{
	struct schedule **list = NULL;
	time_t now = time(NULL);
	size_t n = 0;
	json_t *arr, *j;
	int r;

	if ((r = db_schedule_list(c->fleetd->db, agent, &list, &n)) < 0) {
		api_error_errno(c, r, "cannot list schedules: %s", strerror(-r));
		return;
	}
	arr = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(arr, schedule_to_json(list[i], now));
	schedule_list_free(list);
	j = json_pack("{s:o}", "schedules", arr);
	if (agent)
		json_object_set_new(j, "agent", json_string(agent));
	api_reply(c, 200, j);
}

void api_schedules_list(struct api_call *c)
{
	_cleanup_(agent_freep) struct agent *a = NULL;

	if (!(a = api_agent_param(c)))
		return;
	reply_list(c, a->name);
}

void api_schedules_list_all(struct api_call *c)
{
	reply_list(c, NULL);
}

/* POST /v1/agents/NAME/schedules {"cron", "tz"?, "catch_up"?, "payload"?} */
void api_schedule_add(struct api_call *c)
{
	static const char *const spec[] = { "cron:s", "tz:s", "catch_up:s", "payload:s", NULL };
	_cleanup_(agent_freep) struct agent *a = NULL;
	_cleanup_free_ char *why = NULL;
	struct schedule *s = NULL;
	const char *cron, *word;
	json_t *body, *payload;
	char target[112];
	int catch_up = CRON_CATCH_UP_ONCE, r;

	if (!(body = api_body_object(c, spec)))
		return;
	if (!(a = api_agent_param(c)))
		goto out;
	if (!(cron = json_string_value(json_object_get(body, "cron")))) {
		api_error(c, 400, "invalid", "a schedule needs \"cron\": a cron spec like '0 9 * * 1-5' or '@daily'");
		goto out;
	}
	if ((word = json_string_value(json_object_get(body, "catch_up"))) &&
	    (catch_up = cron_catch_up_from_string(word)) < 0) {
		api_error(c, 400, "invalid", "catch_up is \"once\" or \"skip\"");
		goto out;
	}
	payload = json_object_get(body, "payload");
	r = cron_triggers_add(c->fleetd, a->name, cron, json_string_value(json_object_get(body, "tz")),
			      (enum cron_catch_up)catch_up, json_string_value(payload),
			      payload ? json_string_length(payload) : 0, &s, &why);
	if (r == -EDQUOT) {
		api_error(c, 409, "limit", "%s", why);
		goto out;
	}
	if (r < 0) {
		api_error_core(c, r, why);
		goto out;
	}
	snprintf(target, sizeof(target), "%s/%" PRId64, a->name, s->id);
	c->target = target;
	api_reply(c, 201, schedule_to_json(s, time(NULL)));
	schedule_free(s);
out:
	json_decref(body);
}

/* The agent of /v1/agents/NAME/schedules/ID and the ID; NULL once an error is answered. */
static struct agent *schedule_param(struct api_call *c, long *id)
{
	struct agent *a = api_agent_param(c);

	if (a && parse_long(c->param2, 1, INT64_MAX, id) < 0) {
		api_error(c, 400, "invalid", "a schedule id is a positive number");
		agent_free(a);
		return NULL;
	}
	return a;
}

/* GET /v1/agents/NAME/schedules/ID: the SCHEDULE with its "payload" (a string, or null): what export writes. */
void api_schedule_get(struct api_call *c)
{
	_cleanup_(agent_freep) struct agent *a = NULL;
	struct schedule **list = NULL;
	json_t *j = NULL;
	size_t n = 0;
	long id;
	int r;

	if (!(a = schedule_param(c, &id)))
		return;
	if ((r = db_schedule_list(c->fleetd->db, a->name, &list, &n)) < 0) {
		api_error_errno(c, r, "cannot list schedules: %s", strerror(-r));
		return;
	}
	for (size_t i = 0; i < n && !j; i++)
		if (list[i]->id == id) {
			/* UTF-8 text of payload_bytes bytes: POST takes it as a JSON string (checked again here). */
			json_t *p = list[i]->payload ? json_stringn(list[i]->payload, list[i]->payload_len) : json_null();

			j = schedule_to_json(list[i], time(NULL));
			json_object_set_new(j, "payload", p ? p : json_null());
			if (!p)
				json_object_set_new(j, "payload_error", json_string("the stored payload is not UTF-8 text"));
		}
	schedule_list_free(list);
	if (!j) {
		api_error(c, 404, "not_found", "agent '%s' has no schedule %ld", a->name, id);
		return;
	}
	api_reply(c, 200, j);
}

void api_schedule_delete(struct api_call *c)
{
	_cleanup_(agent_freep) struct agent *a = NULL;
	_cleanup_free_ char *why = NULL;
	char target[112];
	long id;
	int r;

	if (!(a = schedule_param(c, &id)))
		return;
	snprintf(target, sizeof(target), "%s/%ld", a->name, id);
	c->target = target;
	if ((r = cron_triggers_remove(c->fleetd, a->name, id, &why)) < 0) {
		api_error_core(c, r, why);
		return;
	}
	api_reply(c, 200, json_pack("{s:s, s:I}", "agent", a->name, "removed", (json_int_t)id));
}
