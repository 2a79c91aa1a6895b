/*
 * fleetctl apply and export (docs/apply.md): make the fleet match a fleet
 * file, or write the fleet as one. apply is a client of the API like every
 * other command: it reads the fleet with GETs, computes a plan, refuses the
 * whole file when any part of the plan cannot be done (nothing changed),
 * and otherwise makes each change with the POST/PATCH/PUT/DELETE the other
 * commands use. Removals only with --prune.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ctl/commands.h"
#include "ctl/fleet_yaml.h"

/* One change: the plan's words for it and the call that makes it. */
struct action {
	char *text;
	const char *method;
	char *path;
	json_t *body;		/* a JSON body, or NULL */
	json_t *raw;		/* a raw body (a secret's value, a string of bytes), or NULL */
};

struct plan {
	struct action *v;
	size_t n;
	size_t errors;		/* what cannot be done: the whole plan is refused */
};

/* Takes text, path, body and raw. */
static void plan_add(struct plan *p, char *text, const char *method, char *path, json_t *body, json_t *raw)
{
	p->v = xrealloc(p->v, (p->n + 1) * sizeof(*p->v));
	p->v[p->n++] = (struct action){ text, method, path, body, raw };
}

static void plan_free(struct plan *p)
{
	for (size_t i = 0; i < p->n; i++) {
		free(p->v[i].text);
		free(p->v[i].path);
		json_decref(p->v[i].body);
		json_decref(p->v[i].raw);
	}
	free(p->v);
}

_printf_(2, 3) static void plan_error(struct plan *p, const char *fmt, ...)
{
	va_list ap;

	fputs("fleetctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	p->errors++;
}

/* A value as the plan shows it: JSON, or "(unset)". The caller frees it. */
static char *shown(json_t *v)
{
	char *s;

	if (!v || json_is_null(v))
		return xstrdup("(unset)");
	s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
	return s ? s : xstrdup("?");
}

/* What an AGENT holds for a field, with "unset" as "" where the file writes it so. New reference. */
static json_t *current_field(json_t *agent, const struct fleet_field *fd)
{
	json_t *from = fd->parent ? json_object_get(agent, fd->parent) : agent;
	json_t *v = json_object_get(from, fd->member);

	if ((!v || json_is_null(v)) && fd->empty_is_unset)
		return json_string("");
	return v ? json_incref(v) : json_null();
}

static void plan_create_agent(struct plan *p, const char *name, json_t *fields)
{
	json_t *body = json_deep_copy(fields), *v;
	char *text = xasprintf("+ agent %s", name), *next;
	const char *key;

	json_object_foreach(fields, key, v) {
		_cleanup_free_ char *val = shown(v);

		next = xasprintf("%s\n    %s: %s", text, key, val);
		free(text);
		text = next;
	}
	json_object_set_new(body, "name", json_string(name));
	plan_add(p, text, "POST", xstrdup("/v1/agents"), body, NULL);
}

/* Why a field cannot change on this agent now, or NULL. */
static const char *cannot_change(const struct fleet_field *fd, json_t *cur, json_t *want, json_t *agent)
{
	const char *state = str(agent, "state");

	if (!fd->patchable) {
		if (strcmp(fd->name, "disk_gib") == 0 && json_integer_value(want) < json_integer_value(cur))
			return "a disk cannot shrink: re-create the agent";
		return "it cannot be changed in place: re-create the agent (remove it from the file, apply with --prune, "
		       "add it back)";
	}
	if (strcmp(fd->name, "network") == 0) {
		if (strcmp(str(agent, "backend"), "user") != 0)
			return "the network of a vm agent cannot change: re-create the agent";
		if (strcmp(state, "stopped") != 0 && strcmp(state, "defined") != 0)
			return "the network changes only while the agent is stopped: 'fleetctl stop' it first";
	}
	if (strcmp(fd->name, "memory_quota_mib") == 0 && json_integer_value(want) < json_integer_value(cur) &&
	    strcmp(state, "running") == 0)
		return "a memory quota shrinks only while the agent is stopped: 'fleetctl stop' it first";
	return NULL;
}

/*
 * What the file wants of a field: its value, or for a field it leaves out the default (a removed setting
 * goes back to it). NULL: left out, and no way back to the default (command). New reference.
 */
static json_t *wanted_field(json_t *fields, const struct fleet_field *fd)
{
	json_t *v = json_object_get(fields, fd->name);

	if (v)
		return json_incref(v);
	/* A snapshot_schedule alone means the cron policy (as POST and PATCH take it). */
	if (strcmp(fd->name, "snapshot_policy") == 0 && (v = json_object_get(fields, "snapshot_schedule")) &&
	    json_string_length(v) > 0)
		return json_string("cron");
	if (!fd->default_json)
		return NULL;
	if (!(v = json_loads(fd->default_json, JSON_DECODE_ANY, NULL)))
		abort();	/* the table's own text */
	return v;
}

static void plan_update_agent(struct plan *p, const char *name, json_t *fields, json_t *agent)
{
	json_t *patch = json_object();
	char *text = NULL, *next;

	for (size_t i = 0; i < fleet_n_fields; i++) {
		const struct fleet_field *fd = &fleet_fields[i];
		const char *key = fd->name, *why, *note = json_object_get(fields, key) ? "" : " (not in the file: the default)";
		json_t *cur = current_field(agent, fd), *want = wanted_field(fields, fd);

		if (!want) {
			if (!json_is_null(cur)) {
				_cleanup_free_ char *from = shown(cur);

				plan_error(p, "agent '%s': %s is %s and the file leaves it out: it cannot be unset; give it "
					      "in the file (or re-create the agent)", name, key, from);
			}
		} else if (!json_equal(cur, want)) {
			_cleanup_free_ char *from = shown(cur), *to = shown(want);

			if ((why = cannot_change(fd, cur, want, agent)))
				plan_error(p, "agent '%s': %s is %s, the file says %s%s: %s", name, key, from, to, note, why);
			else {
				json_object_set(patch, key, want);
				next = xasprintf("%s%s~ agent %s: %s: %s -> %s%s", text ? text : "", text ? "\n" : "", name,
						 key, from, to, note);
				free(text);
				text = next;
			}
		}
		json_decref(cur);
		json_decref(want);
	}
	if (json_object_size(patch) == 0) {
		json_decref(patch);
		free(text);
		return;
	}
	plan_add(p, text, "PATCH", xasprintf("/v1/agents/%s", name), patch, NULL);
}

/* Secrets: set what is missing or differs (fleetd compares), remove the rest with --prune. */
static int plan_secrets(struct ctl *ctl, struct plan *p, struct plan *prune, const char *name, json_t *want,
			bool exists, bool do_prune)
{
	json_t *have = NULL, *s, *val;
	const char *key;
	size_t i;

	if (exists && (want || do_prune) && callf(ctl, "GET", NULL, &have, "/v1/agents/%s/secrets", name) != 0)
		return -1;
	json_object_foreach(want, key, val) {
		bool found = false;

		json_array_foreach(json_object_get(have, "secrets"), i, s)
			found |= strcmp(str(s, "key"), key) == 0;
		if (found) {
			_cleanup_free_ char *path = xasprintf("/v1/agents/%s/secrets/%s/compare", name, key);
			json_t *ans = NULL;
			bool same;

			if (call_raw(ctl, "POST", path, "application/octet-stream", json_string_value(val),
				     json_string_length(val), &ans) != 0) {
				json_decref(have);
				return -1;
			}
			same = json_is_true(json_object_get(ans, "same"));
			json_decref(ans);
			if (same)
				continue;
		}
		plan_add(p, xasprintf("%c secret %s/%s (%zu bytes%s)", found ? '~' : '+', name, key, json_string_length(val),
				      found ? ": the value differs" : ""),
			 "PUT", xasprintf("/v1/agents/%s/secrets/%s", name, key), NULL, json_incref(val));
	}
	if (do_prune)
		json_array_foreach(json_object_get(have, "secrets"), i, s)
			if (!json_object_get(want, str(s, "key")))
				plan_add(prune, xasprintf("- secret %s/%s", name, str(s, "key")), "DELETE",
					 xasprintf("/v1/agents/%s/secrets/%s", name, str(s, "key")), NULL, NULL);
	json_decref(have);
	return 0;
}

/*
 * A schedule as the file has it: {"cron", "tz" (absent: the host's zone), "catch_up", "payload" (absent:
 * none)}; a fleet's schedule has its payload from fleet_read. New reference.
 */
static json_t *schedule_key(json_t *s)
{
	json_t *k = json_pack("{s:O, s:O}", "cron", json_object_get(s, "cron"), "catch_up", json_object_get(s, "catch_up"));

	if (json_is_string(json_object_get(s, "tz")))
		json_object_set(k, "tz", json_object_get(s, "tz"));
	if (json_is_string(json_object_get(s, "payload")))
		json_object_set(k, "payload", json_object_get(s, "payload"));
	return k;
}

/* A schedule as the plan shows it: its payload by size (it may be a megabyte). The caller frees it. */
static char *shown_schedule(json_t *k)
{
	json_t *copy = json_deep_copy(k), *p = json_object_get(k, "payload");
	char *text;

	if (p) {
		json_object_del(copy, "payload");
		json_object_set_new(copy, "payload_bytes", json_integer((json_int_t)json_string_length(p)));
	}
	text = shown(copy);
	json_decref(copy);
	return text;
}

static void plan_schedules(struct plan *p, struct plan *prune, const char *name, json_t *want, json_t *all,
			   bool do_prune)
{
	json_t *s, *w;
	size_t i, j;

	json_array_foreach(want, i, w) {
		bool found = false;

		json_array_foreach(all, j, s) {
			json_t *k = schedule_key(s);

			found |= strcmp(str(s, "agent"), name) == 0 && json_equal(k, w);
			json_decref(k);
		}
		if (!found) {
			_cleanup_free_ char *text = shown_schedule(w);

			plan_add(p, xasprintf("+ schedule %s %s", name, text), "POST",
				 xasprintf("/v1/agents/%s/schedules", name), json_incref(w), NULL);
		}
	}
	if (!do_prune)
		return;
	json_array_foreach(all, j, s) {
		json_t *k = schedule_key(s);
		bool named = false;

		json_array_foreach(want, i, w)
			named |= json_equal(k, w);
		if (strcmp(str(s, "agent"), name) == 0 && !named) {
			_cleanup_free_ char *text = shown_schedule(k);

			plan_add(prune, xasprintf("- schedule %s #%lld %s", name, num(s, "id"), text), "DELETE",
				 xasprintf("/v1/agents/%s/schedules/%lld", name, num(s, "id")), NULL, NULL);
		}
		json_decref(k);
	}
}

static json_t *find_named(json_t *arr, const char *member, const char *name)
{
	json_t *v;
	size_t i;

	json_array_foreach(arr, i, v)
		if (strcmp(str(v, member), name) == 0)
			return v;
	return NULL;
}

/* A subscription's POST /v1/hooks body; events joined with commas (null: every event). */
static json_t *subscribe_body(const char *route, const char *agent, const char *source, json_t *events)
{
	json_t *body = json_pack("{s:s, s:s, s:s}", "route", route, "agent", agent, "source", source), *e;
	char *list = NULL, *next;
	size_t i;

	json_array_foreach(events, i, e) {
		next = xasprintf("%s%s%s", list ? list : "", list ? "," : "", json_string_value(e));
		free(list);
		list = next;
	}
	if (list)
		json_object_set_new(body, "events", json_string(list));
	free(list);
	return body;
}

static void plan_route(struct plan *p, struct plan *prune, const char *route, json_t *want, json_t *cur,
		       json_t *want_agents, json_t *cur_agents, bool do_prune)
{
	json_t *settings = json_object_get(want, "settings"), *subs = json_object_get(want, "subscribers");
	json_t *v, *events;
	const char *key, *agent, *source;
	bool first = !cur;
	size_t i;

	json_object_foreach(subs, agent, events)
		if (!json_object_get(want_agents, agent) && !find_named(cur_agents, "name", agent))
			plan_error(p, "route '%s': agent '%s' is neither in the file nor in the fleet", route, agent);
	if (!cur) {
		if (!json_is_string(json_object_get(settings, "source")))
			{ plan_error(p, "route '%s' is new and needs 'source'", route); return; }
		if (!json_object_get(want, "secret"))
			{ plan_error(p, "route '%s' is new and needs 'secret' (from_file or from_env)", route); return; }
		if (json_object_size(subs) == 0)
			{ plan_error(p, "route '%s' is new and needs a subscriber", route); return; }
	} else
		json_object_foreach(settings, key, v) {
			json_t *have = json_object_get(cur, key);

			if (!json_equal(have, v)) {
				_cleanup_free_ char *from = shown(have), *to = shown(v);

				plan_error(p, "route '%s': %s is %s, the file says %s: a route's settings are fixed when it "
					      "is made (remove it with --prune and apply again)", route, key, from, to);
			}
		}
	source = cur ? str(cur, "source") : json_string_value(json_object_get(settings, "source"));
	json_object_foreach(subs, agent, events) {
		json_t *had = cur ? find_named(json_object_get(cur, "subscribers"), "agent", agent) : NULL;
		_cleanup_free_ char *ev = shown(events);

		if (had) {
			if (!json_equal(json_object_get(had, "events"), events)) {
				_cleanup_free_ char *old = shown(json_object_get(had, "events"));
				json_t *body = subscribe_body(route, agent, source, events), *patch;
				json_t *list = json_object_get(body, "events");

				/* PATCH /v1/hooks/ROUTE/subscribers/AGENT: "" takes every event */
				patch = list ? json_pack("{s:O}", "events", list) : json_pack("{s:s}", "events", "");
				json_decref(body);
				plan_add(p, xasprintf("~ subscriber %s/%s events: %s -> %s", route, agent, old, ev), "PATCH",
					 xasprintf("/v1/hooks/%s/subscribers/%s", route, agent), patch, NULL);
			}
			continue;
		}
		json_t *body = subscribe_body(route, agent, source, events);
		char *text;

		if (first) {
			/* The route is made with its first subscriber: settings and secret go with it. */
			json_object_update(body, settings);
			json_object_set(body, "secret", json_object_get(want, "secret"));
			text = xasprintf("+ route %s (source %s, secret %zu bytes)", route, source,
					 json_string_length(json_object_get(want, "secret")));
			json_object_foreach(settings, key, v)
				if (strcmp(key, "source") != 0) {
					_cleanup_free_ char *val = shown(v), *old = text;

					text = xasprintf("%s\n    %s: %s", old, key, val);
				}
			{
				_cleanup_free_ char *old = text;

				text = xasprintf("%s\n+ subscriber %s/%s events: %s", old, route, agent, ev);
			}
			first = false;
		} else
			text = xasprintf("+ subscriber %s/%s events: %s", route, agent, ev);
		plan_add(p, text, "POST", xstrdup("/v1/hooks"), body, NULL);
	}
	if (do_prune && cur)
		json_array_foreach(json_object_get(cur, "subscribers"), i, v)
			if (!json_object_get(subs, str(v, "agent")))
				plan_add(prune, xasprintf("- subscriber %s/%s", route, str(v, "agent")), "DELETE",
					 xasprintf("/v1/hooks/%s/subscribers/%s", route, str(v, "agent")), NULL, NULL);
}

/* The fleet now: agents, schedules and routes, as GET answers them. */
struct fleet_now {
	json_t *agents, *schedules, *hooks;
};

/* Each schedule with a payload gets it as "payload" (the list gives only payload_bytes): 0 or -1. */
static int read_payloads(struct ctl *ctl, json_t *schedules)
{
	json_t *s, *one = NULL, *p;
	size_t i;

	json_array_foreach(schedules, i, s) {
		if (num(s, "payload_bytes") <= 0)
			continue;
		if (callf(ctl, "GET", NULL, &one, "/v1/agents/%s/schedules/%lld", str(s, "agent"), num(s, "id")) != 0)
			return -1;
		if (!json_is_string(p = json_object_get(one, "payload"))) {
			fprintf(stderr, "fleetctl: schedule %lld of '%s': %s\n", num(s, "id"), str(s, "agent"),
				str(one, "payload_error"));
			json_decref(one);
			return -1;
		}
		json_object_set(s, "payload", p);
		json_decref(one);
		one = NULL;
	}
	return 0;
}

static int fleet_read(struct ctl *ctl, struct fleet_now *now)
{
	json_t *a = NULL, *s = NULL, *h = NULL;

	if (call(ctl, "GET", "/v1/agents", NULL, &a) != 0 || call(ctl, "GET", "/v1/schedules", NULL, &s) != 0 ||
	    call(ctl, "GET", "/v1/hooks", NULL, &h) != 0) {
		json_decref(a);
		json_decref(s);
		return -1;
	}
	now->agents = json_incref(json_object_get(a, "agents"));
	now->schedules = json_incref(json_object_get(s, "schedules"));
	now->hooks = json_incref(json_object_get(h, "hooks"));
	json_decref(a);
	json_decref(s);
	json_decref(h);
	return read_payloads(ctl, now->schedules);
}

static void fleet_now_free(struct fleet_now *now)
{
	json_decref(now->agents);
	json_decref(now->schedules);
	json_decref(now->hooks);
}

static int make_plan(struct ctl *ctl, json_t *want, struct fleet_now *now, bool do_prune, struct plan *p,
		     struct plan *prune)
{
	json_t *want_agents = json_object_get(want, "agents"), *want_hooks = json_object_get(want, "hooks");
	json_t *w, *cur;
	const char *name;
	size_t i;

	json_object_foreach(want_agents, name, w) {
		json_t *fields = json_object_get(w, "fields");

		if (!(cur = find_named(now->agents, "name", name)))
			plan_create_agent(p, name, fields);
		else
			plan_update_agent(p, name, fields, cur);
		if (plan_secrets(ctl, p, prune, name, json_object_get(w, "secrets"), cur != NULL, do_prune) < 0)
			return -1;
		plan_schedules(p, prune, name, json_object_get(w, "schedules"), now->schedules, do_prune);
	}
	json_object_foreach(want_hooks, name, w)
		plan_route(p, prune, name, w, find_named(now->hooks, "route", name), want_agents, now->agents, do_prune);
	if (!do_prune)
		return 0;
	json_array_foreach(now->hooks, i, cur)
		if (!json_object_get(want_hooks, str(cur, "route"))) {
			json_t *sub;
			size_t j;

			json_array_foreach(json_object_get(cur, "subscribers"), j, sub)
				plan_add(prune, xasprintf("- subscriber %s/%s", str(cur, "route"), str(sub, "agent")),
					 "DELETE", xasprintf("/v1/hooks/%s/subscribers/%s", str(cur, "route"), str(sub, "agent")),
					 NULL, NULL);
		}
	json_array_foreach(now->agents, i, cur)
		if (!json_object_get(want_agents, str(cur, "name")))
			plan_add(prune, xasprintf("- agent %s (and its secrets, schedules, subscriptions, snapshots)",
						  str(cur, "name")),
				 "DELETE", xasprintf("/v1/agents/%s", str(cur, "name")), NULL, NULL);
	return 0;
}

static int run_plan(struct ctl *ctl, struct plan *p)
{
	for (size_t i = 0; i < p->n; i++) {
		struct action *a = &p->v[i];
		json_t *ans = NULL;
		int r;

		puts(a->text);
		fflush(stdout);
		if (a->raw)
			r = call_raw(ctl, a->method, a->path, "application/octet-stream", json_string_value(a->raw),
				     json_string_length(a->raw), &ans);
		else
			r = call(ctl, a->method, a->path, a->body, &ans);
		json_decref(ans);
		if (r != 0) {
			fprintf(stderr, "fleetctl: apply stopped: %zu of %zu changes made; apply again once the cause "
					"is fixed\n", i, p->n);
			return 1;
		}
	}
	printf("applied %zu change%s\n", p->n, p->n == 1 ? "" : "s");
	return 0;
}

struct apply_opts {
	bool dry_run, prune;
};

static int apply_opt(int c, const char *arg, void *data)
{
	struct apply_opts *o = data;

	if (c == 'n')
		o->dry_run = true;
	else
		o->prune = true;
	return 0;
}

int cmd_apply(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "dry-run", no_argument, NULL, 'n' }, { "prune", no_argument, NULL, 'p' },
		{ "help", no_argument, NULL, 'h' }, { 0 },
	};
	struct apply_opts o = { 0 };
	struct fleet_now now = { 0 };
	struct plan p = { 0 }, prune = { 0 };
	json_t *want = NULL;
	int r;

	if ((r = parse_opts(cmd, argc, argv, opts, apply_opt, &o)) != 0)
		return r < 0 ? EXIT_USAGE : 0;
	if (argc - optind != 1)
		return usage_error(cmd, "apply needs exactly one FILE");
	if (fleet_file_load(argv[optind], &want) < 0)
		return 1;
	if (fleet_read(ctl, &now) < 0) {
		json_decref(want);
		return 1;
	}
	r = make_plan(ctl, want, &now, o.prune, &p, &prune);
	json_decref(want);
	fleet_now_free(&now);
	if (r < 0 || p.errors || prune.errors) {
		if (r == 0)
			fprintf(stderr, "fleetctl: %zu problem%s in the plan: nothing changed\n", p.errors + prune.errors,
				p.errors + prune.errors == 1 ? "" : "s");
		r = 1;
		goto out;
	}
	/* Removals last: a route moves to its new subscriber before the old one goes. */
	for (size_t i = 0; i < prune.n; i++)
		plan_add(&p, TAKE_PTR(prune.v[i].text), prune.v[i].method, TAKE_PTR(prune.v[i].path),
			 TAKE_PTR(prune.v[i].body), TAKE_PTR(prune.v[i].raw));
	if (p.n == 0) {
		puts("no changes");
		r = 0;
	} else if (o.dry_run) {
		for (size_t i = 0; i < p.n; i++)
			puts(p.v[i].text);
		printf("%zu change%s planned; nothing changed (--dry-run)\n", p.n, p.n == 1 ? "" : "s");
		r = 0;
	} else
		r = run_plan(ctl, &p);
out:
	plan_free(&p);
	plan_free(&prune);
	return r;
}

int cmd_export(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	struct fleet_now now = { 0 };
	json_t *secrets, *a;
	size_t i;
	int status;

	if (!no_args(cmd, argc, argv, help_only, no_opts, NULL, &status))
		return status;
	if (fleet_read(ctl, &now) < 0)
		return 1;
	secrets = json_object();
	json_array_foreach(now.agents, i, a) {
		json_t *ans = NULL;

		if (callf(ctl, "GET", NULL, &ans, "/v1/agents/%s/secrets", str(a, "name")) != 0) {
			json_decref(secrets);
			fleet_now_free(&now);
			return 1;
		}
		json_object_set(secrets, str(a, "name"), json_object_get(ans, "secrets"));
		json_decref(ans);
	}
	status = fleet_file_write(stdout, now.agents, secrets, now.schedules, now.hooks) < 0 ? 1 : 0;
	json_decref(secrets);
	fleet_now_free(&now);
	return status;
}
