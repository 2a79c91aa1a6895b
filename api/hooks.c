/*
 * api_hooks: /v1/hooks (webhook routes and subscribers) and /v1/events.
 * Secrets arrive only in request bodies and never leave: no answer, log
 * line or audit detail holds one (core/hooks.c words every error without).
 */
#include "api/hooks.h"

#include <errno.h>
#include <string.h>
#include <time.h>

#include "api/server.h"
#include "common/names.h"
#include "core/hooks.h"
#include "hooks/route.h"
#include "model/fleetd.h"
#include "store/db.h"

static json_t *time_or_null(int64_t t)
{
	char buf[32];

	return t > 0 ? json_string(format_utc(t, buf, sizeof(buf))) : json_null();
}

/* "a,b" -> ["a", "b"]; NULL -> null (every event). */
static json_t *events_json(const char *list)
{
	json_t *arr;

	if (!list)
		return json_null();
	arr = json_array();
	for (const char *p = list; *p;) {
		size_t n = strcspn(p, ",");

		json_array_append_new(arr, json_stringn(p, n));
		p += n + (p[n] == ',');
	}
	return arr;
}

static json_t *route_json(struct fleetd *f, const struct db_hook_route *rt, time_t now)
{
	_cleanup_free_ char *url = hooks_url(f, rt->public_url, rt->name);
	json_t *j = json_pack("{s:s, s:s, s:s, s:I, s:o, s:o}", "route", rt->name, "source", rt->source, "url", url,
			      "max_body", (json_int_t)rt->max_body, "created_at", time_or_null(rt->created_at),
			      "rotating_until",
			      rt->prev_secret && rt->prev_until > (int64_t)now ? time_or_null(rt->prev_until) : json_null());

	if (rt->header)
		json_object_set_new(j, "header", json_string(rt->header));
	if (strcmp(rt->source, "hmac") == 0) {
		json_object_set_new(j, "encoding", json_string(rt->encoding));
		if (rt->prefix)
			json_object_set_new(j, "prefix", json_string(rt->prefix));
	}
	if (strcmp(rt->source, "datadog") == 0) {
		json_object_set_new(j, "auth", json_string(rt->datadog_auth));
		json_object_set_new(j, "delivery_field", json_string(rt->delivery_field ? rt->delivery_field : "id"));
	}
	if (rt->public_url)
		json_object_set_new(j, "public_url", json_string(rt->public_url));
	json_object_set_new(j, "subscribers", json_array());
	return j;
}

void api_hooks_list(struct api_call *c)
{
	struct db_hook_route **routes = NULL;
	struct db_hook_sub *subs = NULL;
	size_t n_routes = 0, n_subs = 0;
	char agent[64];
	bool by_agent = api_query(c, "agent", agent, sizeof(agent));
	time_t now = time(NULL);
	const char *why;
	json_t *arr;
	int r;

	if (by_agent && agent_name_check(agent, &why) < 0) {
		api_error(c, 400, "invalid_name", "invalid agent name: %s", why);
		return;
	}
	if ((r = db_hook_route_list(c->fleetd->db, &routes, &n_routes)) < 0 ||
	    (r = db_hook_sub_list(c->fleetd->db, NULL, &subs, &n_subs)) < 0) {
		db_hook_routes_free(routes);
		api_error_errno(c, r, "cannot list webhook routes: %s", strerror(-r));
		return;
	}
	arr = json_array();
	for (size_t i = 0; i < n_routes; i++) {
		json_t *j = route_json(c->fleetd, routes[i], now), *list = json_object_get(j, "subscribers");
		bool wanted = !by_agent;

		for (size_t k = 0; k < n_subs; k++) {
			if (strcmp(subs[k].route, routes[i]->name) != 0)
				continue;
			wanted |= strcmp(subs[k].agent, agent) == 0;
			json_array_append_new(list, json_pack("{s:s, s:o, s:o}", "agent", subs[k].agent, "events",
							      events_json(subs[k].events), "since",
							      time_or_null(subs[k].created_at)));
		}
		if (wanted)
			json_array_append_new(arr, j);
		else
			json_decref(j);
	}
	db_hook_routes_free(routes);
	db_hook_subs_free(subs, n_subs);
	api_reply(c, 200, json_pack("{s:o}", "hooks", arr));
}

static const char *opt_str(json_t *body, const char *key)
{
	return json_string_value(json_object_get(body, key));
}

void api_hook_add(struct api_call *c)
{
	static const char *const spec[] = {
		"agent:s", "source:s", "route:s", "events:s", "secret:s", "header:s", "encoding:s", "prefix:s",
		"auth:s", "delivery_field:s", "public_url:s", "max_body:i", NULL,
	};
	_cleanup_(json_decrefp) json_t *body = api_body_object(c, spec);
	_cleanup_free_ char *why = NULL, *route = NULL, *url = NULL, *target = NULL;
	struct hooks_add_req req = { 0 };
	_cleanup_(db_hook_route_freep) struct db_hook_route *rt = NULL;
	bool created = false;
	int r;

	if (!body)
		return;
	req.agent = opt_str(body, "agent");
	req.source = opt_str(body, "source");
	if (!req.agent || !req.source) {
		api_error(c, 400, "invalid", "agent and source are required");
		return;
	}
	req.route = opt_str(body, "route");
	req.events = opt_str(body, "events");
	req.secret = opt_str(body, "secret");
	req.header = opt_str(body, "header");
	req.encoding = opt_str(body, "encoding");
	req.prefix = opt_str(body, "prefix");
	req.datadog_auth = opt_str(body, "auth");
	req.delivery_field = opt_str(body, "delivery_field");
	req.public_url = opt_str(body, "public_url");
	if (json_object_get(body, "max_body")) {
		json_int_t mb = json_integer_value(json_object_get(body, "max_body"));

		if (mb <= 0 || mb > (16L << 20)) {
			api_error(c, 400, "invalid", "max_body is a number of bytes from 1024 to 16777216");
			return;
		}
		req.max_body = (long)mb;
	}
	/* The audit record names the agent (and the route once known), never the secret. */
	target = xasprintf("%.32s/%.48s", req.agent, req.route ? req.route : "");
	c->target = target;
	r = hooks_add(c->fleetd, &req, &route, &created, &why);
	/* The secret's bytes in the parsed body go as soon as they are stored. */
	if (req.secret)
		explicit_bzero((char *)req.secret, strlen(req.secret));
	if (r < 0) {
		api_error_errno(c, r, "%s", why ? why : strerror(-r));
		return;
	}
	free(target);
	c->target = target = xasprintf("%s/%s", req.agent, route);
	if ((r = db_hook_route_get(c->fleetd->db, route, &rt)) < 0) {
		api_error_errno(c, r, "route '%s': %s", route, strerror(-r));
		return;
	}
	url = hooks_url(c->fleetd, rt->public_url, route);
	api_reply(c, created ? 201 : 200,
		  json_pack("{s:s, s:s, s:s, s:s, s:b}", "route", route, "source", rt->source, "agent", req.agent,
			    "url", url, "created", created));
}

void api_hook_unsubscribe(struct api_call *c)
{
	_cleanup_free_ char *why = NULL, *target = xasprintf("%.32s/%.48s", c->param2, c->param);
	bool removed = false;
	int r;

	c->target = target;
	if ((r = hooks_remove(c->fleetd, c->param, c->param2, &removed, &why)) < 0) {
		api_error_errno(c, r, "%s", why ? why : strerror(-r));
		return;
	}
	api_reply(c, 200, json_pack("{s:s, s:s, s:b}", "route", c->param, "agent", c->param2, "route_removed",
				    removed));
}

void api_hook_subscription_update(struct api_call *c)
{
	static const char *const spec[] = { "events:s", NULL };
	_cleanup_(json_decrefp) json_t *body = api_body_object(c, spec);
	_cleanup_free_ char *why = NULL, *target = xasprintf("%.32s/%.48s", c->param2, c->param);
	const char *events;
	int r;

	c->target = target;
	if (!body)
		return;
	if (!(events = opt_str(body, "events"))) {
		api_error(c, 400, "invalid", "events is required: a comma-separated list, or \"\" for every event");
		return;
	}
	if ((r = hooks_set_events(c->fleetd, c->param, c->param2, *events ? events : NULL, &why)) < 0) {
		api_error_errno(c, r, "%s", why ? why : strerror(-r));
		return;
	}
	api_reply(c, 200, json_pack("{s:s, s:s, s:s?}", "route", c->param, "agent", c->param2, "events",
				    *events ? events : NULL));
}

void api_hook_rotate(struct api_call *c)
{
	static const char *const spec[] = { "secret:s", "grace_s:i", NULL };
	_cleanup_(json_decrefp) json_t *body = api_body_object(c, spec);
	_cleanup_free_ char *why = NULL;
	json_t *grace = body ? json_object_get(body, "grace_s") : NULL;
	const char *secret;
	char buf[32];
	time_t until;
	long grace_s = HOOKS_GRACE_DEFAULT_S;
	int r;

	if (!body)
		return;
	if (!(secret = opt_str(body, "secret"))) {
		api_error(c, 400, "invalid", "the new secret is required");
		return;
	}
	if (grace) {
		json_int_t g = json_integer_value(grace);

		if (g < 0 || g > HOOKS_GRACE_MAX_S) {
			api_error(c, 400, "invalid", "grace_s is 0 to %d seconds (30 days)", HOOKS_GRACE_MAX_S);
			return;
		}
		grace_s = (long)g;
	}
	r = hooks_rotate(c->fleetd, c->param, secret, grace_s, time(NULL), &until, &why);
	explicit_bzero((char *)secret, strlen(secret));
	if (r < 0) {
		api_error_errno(c, r, "%s", why ? why : strerror(-r));
		return;
	}
	api_reply(c, 200, json_pack("{s:s, s:s, s:I}", "route", c->param, "rotating_until",
				    format_utc((long long)until, buf, sizeof(buf)), "grace_s", (json_int_t)grace_s));
}

void api_events_list(struct api_call *c)
{
	struct db_event *ev = NULL;
	char route[64], lim[16];
	bool by_route = api_query(c, "route", route, sizeof(route));
	long limit = 50;
	const char *why;
	size_t n = 0;
	json_t *arr;
	int r;

	if (by_route && hook_route_name_check(route, &why) < 0) {
		api_error(c, 400, "invalid", "invalid route name: %s", why);
		return;
	}
	if (api_query(c, "limit", lim, sizeof(lim)) && parse_long(lim, 1, 10000, &limit) < 0) {
		api_error(c, 400, "invalid", "limit must be a number from 1 to 10000");
		return;
	}
	if ((r = db_events_list(c->fleetd->db, by_route ? route : NULL, (int)limit, &ev, &n)) < 0) {
		api_error_errno(c, r, "cannot list events: %s", strerror(-r));
		return;
	}
	arr = json_array();
	for (size_t i = 0; i < n; i++) {
		json_t *runs = json_array();

		for (const char *p = ev[i].runs; p && *p;) {
			json_array_append_new(runs, json_integer(strtoll(p, NULL, 10)));
			p += strcspn(p, ",");
			p += *p == ',';
		}
		json_array_append_new(arr, json_pack("{s:I, s:o, s:s?, s:s?, s:s?, s:s?, s:s?, s:o}", "id",
						     (json_int_t)ev[i].id, "received_at", time_or_null(ev[i].received_at),
						     "source", ev[i].source, "route", ev[i].route, "delivery_id",
						     ev[i].delivery_id, "type", ev[i].event_type, "outcome",
						     ev[i].outcome, "runs", runs));
	}
	db_events_free(ev, n);
	api_reply(c, 200, json_pack("{s:o}", "events", arr));
}
