/* fleet_yaml: the fleet file, loaded with libyaml's document API and written with its emitter (fleet_yaml.h). */
#include "ctl/fleet_yaml.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <yaml.h>

#include "common/names.h"
#include "common/util.h"
#include "model/agent.h"

#define SECRET_VALUE_MAX (64u << 10)	/* fleetd's limit (core/secrets.h) */

/* The defaults are POST /v1/agents' (api/agents.c); apply.sh checks that an agent created with none
 * given matches them all ("no changes"). */
#define J_(x) #x
#define J(x) J_(x)
const struct fleet_field fleet_fields[] = {
	{ "backend", FIELD_STR, NULL, "backend", false, false, "\"vm\"" },
	{ "memory_mib", FIELD_INT, NULL, "memory_mib", false, false, J(AGENT_MEMORY_DEFAULT) },
	{ "vcpus", FIELD_INT, NULL, "vcpus", false, false, "1" },
	{ "disk_gib", FIELD_INT, NULL, "disk_gib", false, false, J(AGENT_DISK_DEFAULT) },
	{ "network", FIELD_STR, NULL, "network", true, false, "\"none\"" },
	{ "egress_allow", FIELD_STR, NULL, "egress_allow", true, true, "\"\"" },
	{ "restart", FIELD_STR, NULL, "restart", false, false, "\"on-failure\"" },
	{ "command", FIELD_STR, NULL, "command", true, false, NULL },
	{ "health_command", FIELD_STR, "health", "command", true, true, "\"\"" },
	{ "health_interval_s", FIELD_INT, "health", "interval_s", true, false, J(HEALTH_INTERVAL_DEFAULT) },
	{ "auto_rollback", FIELD_BOOL, "health", "auto_rollback", true, false, "false" },
	{ "snapshot_policy", FIELD_STR, "snapshots", "policy", true, false, "\"none\"" },
	{ "snapshot_schedule", FIELD_STR, "snapshots", "schedule", true, true, "\"\"" },
	{ "snapshot_keep", FIELD_INT, "snapshots", "keep", true, false, "0" },
	{ "run_timeout_s", FIELD_INT, "runs", "timeout_s", true, false, J(RUN_TIMEOUT_DEFAULT) },
	{ "max_queued", FIELD_INT, "runs", "max_queued", true, false, J(MAX_QUEUED_DEFAULT) },
	{ "retry_interrupted", FIELD_INT, "runs", "retry_interrupted", true, false, "0" },
	{ "secret_files", FIELD_BOOL, "runs", "secret_files", true, false, "false" },
	{ "memory_quota_mib", FIELD_INT, "memory", "quota_mib", true, false, J(MEMORY_QUOTA_DEFAULT) },
	{ "autostart", FIELD_BOOL, "boot", "autostart", true, false, "false" },
	{ "boot_priority", FIELD_INT, "boot", "priority", true, false, "0" },
};
const size_t fleet_n_fields = ARRAY_SIZE(fleet_fields);

const char *const fleet_route_settings[] = {
	"header", "encoding", "prefix", "auth", "delivery_field", "public_url", "max_body", NULL,
};

/* Loading: the document, where it came from, and the first error. */
struct loader {
	const char *path;
	yaml_document_t doc;
	bool failed;
};

_printf_(3, 4) static void fail(struct loader *l, const yaml_node_t *n, const char *fmt, ...)
{
	va_list ap;

	if (l->failed)
		return;	/* the first error only: later ones are often its echo */
	l->failed = true;
	fprintf(stderr, "%s:%zu:%zu: ", l->path, n->start_mark.line + 1, n->start_mark.column + 1);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static yaml_node_t *node(struct loader *l, int id)
{
	return yaml_document_get_node(&l->doc, id);
}

static const char *scalar(const yaml_node_t *n)
{
	return (const char *)n->data.scalar.value;
}

static bool plain(const yaml_node_t *n)
{
	return n->type == YAML_SCALAR_NODE && n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
}

static const char *kind(const yaml_node_t *n)
{
	switch (n->type) {
	case YAML_MAPPING_NODE: return "a mapping";
	case YAML_SEQUENCE_NODE: return "a list";
	default: return "a scalar";
	}
}

/* A string (any scalar), or NULL after an error naming what. */
static const char *want_str(struct loader *l, yaml_node_t *n, const char *what)
{
	if (n->type != YAML_SCALAR_NODE) {
		fail(l, n, "%s must be a string, not %s", what, kind(n));
		return NULL;
	}
	return scalar(n);
}

static bool want_type(struct loader *l, yaml_node_t *n, yaml_node_type_t t, const char *what)
{
	if (n->type == t)
		return true;
	fail(l, n, "%s must be %s, not %s", what, t == YAML_MAPPING_NODE ? "a mapping" : "a list", kind(n));
	return false;
}

static bool is_null(const yaml_node_t *n)
{
	return plain(n) && (!*scalar(n) || strcmp(scalar(n), "~") == 0 || strcmp(scalar(n), "null") == 0);
}

/* A typed value of an agent field or a route setting, as JSON; NULL after an error. */
static json_t *typed(struct loader *l, yaml_node_t *n, enum fleet_field_type t, const char *what)
{
	const char *s;
	char *end;
	long long v;

	if (t == FIELD_STR)
		return (s = want_str(l, n, what)) ? json_string(s) : NULL;
	if (!plain(n)) {
		fail(l, n, "%s must be %s, not %s", what, t == FIELD_INT ? "an integer" : "true or false",
		     n->type == YAML_SCALAR_NODE ? "a quoted string" : kind(n));
		return NULL;
	}
	s = scalar(n);
	if (t == FIELD_BOOL) {
		if (strcmp(s, "true") == 0 || strcmp(s, "false") == 0)
			return json_boolean(s[0] == 't');
		fail(l, n, "%s must be true or false, not '%s'", what, s);
		return NULL;
	}
	errno = 0;
	v = strtoll(s, &end, 10);
	if (!*s || *end || errno) {
		fail(l, n, "%s must be an integer, not '%s'", what, s);
		return NULL;
	}
	return json_integer(v);
}

/*
 * Walk a mapping: each key must be a string, once, and one of keys (NULL:
 * any). Calls each(l, key, value, data) for every pair; stops at an error.
 */
typedef bool (*pair_fn)(struct loader *l, const char *key, yaml_node_t *k, yaml_node_t *v, void *data);

static bool each_pair(struct loader *l, yaml_node_t *map, const char *what, const char *where,
		      const char *const *keys, pair_fn each, void *data)
{
	for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
		yaml_node_t *k = node(l, p->key), *v = node(l, p->value);
		const char *key;
		bool known = !keys;

		if (!(key = want_str(l, k, "a key")))
			return false;
		for (yaml_node_pair_t *q = map->data.mapping.pairs.start; q < p; q++)
			if (node(l, q->key)->type == YAML_SCALAR_NODE && strcmp(scalar(node(l, q->key)), key) == 0) {
				fail(l, k, "duplicate %s '%s' (first at line %zu)", what, key,
				     node(l, q->key)->start_mark.line + 1);
				return false;
			}
		for (size_t i = 0; keys && keys[i]; i++)
			known |= strcmp(keys[i], key) == 0;
		if (!known) {
			fail(l, k, "unknown key '%s' in %s", key, where);
			return false;
		}
		if (!each(l, key, k, v, data))
			return false;
	}
	return !l->failed;
}

/* A secret reference, {from_file: PATH} or {from_env: VAR} (+ trim_newline), resolved to its value. */
struct secret_ref {
	const char *from_file, *from_env;
	yaml_node_t *file_node, *env_node;
	bool trim;
};

static bool ref_pair(struct loader *l, const char *key, yaml_node_t *k, yaml_node_t *v, void *data)
{
	struct secret_ref *r = data;
	json_t *b;

	if (strcmp(key, "trim_newline") == 0) {
		if (!(b = typed(l, v, FIELD_BOOL, "trim_newline")))
			return false;
		r->trim = json_is_true(b);
		json_decref(b);
		return true;
	}
	if (strcmp(key, "from_file") == 0) {
		r->file_node = v;
		return (r->from_file = want_str(l, v, "from_file"));
	}
	r->env_node = v;
	return (r->from_env = want_str(l, v, "from_env"));
}

/* Read a secret file: relative paths are from the fleet file's directory. */
static json_t *read_secret_file(struct loader *l, yaml_node_t *n, const char *name)
{
	_cleanup_free_ char *dir_copy = xstrdup(l->path), *path = NULL, *buf = NULL;
	_cleanup_close_ int fd = -1;
	size_t len = 0;
	ssize_t got;

	path = name[0] == '/' ? xstrdup(name) : xasprintf("%s/%s", dirname(dir_copy), name);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
		fail(l, n, "cannot read the secret file '%s': %s", path, strerror(errno));
		return NULL;
	}
	buf = xmalloc(SECRET_VALUE_MAX + 1);
	while (len <= SECRET_VALUE_MAX && (got = read(fd, buf + len, SECRET_VALUE_MAX + 1 - len)) != 0) {
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			fail(l, n, "cannot read the secret file '%s': %s", path, strerror(errno));
			return NULL;
		}
		len += got;
	}
	if (len > SECRET_VALUE_MAX) {
		fail(l, n, "the secret file '%s' holds more than %u bytes", path, SECRET_VALUE_MAX);
		explicit_bzero(buf, SECRET_VALUE_MAX + 1);
		return NULL;
	}
	{
		json_t *j = json_stringn_nocheck(buf, len);
		explicit_bzero(buf, len);
		return j;
	}
}

static json_t *secret_value(struct loader *l, yaml_node_t *n, const char *what)
{
	static const char *const keys[] = { "from_file", "from_env", "trim_newline", NULL };
	struct secret_ref r = { 0 };
	json_t *val;
	const char *s;
	size_t len;

	if (n->type != YAML_MAPPING_NODE) {
		fail(l, n, "%s must be a reference, {from_file: PATH} or {from_env: VARIABLE}, never a value", what);
		return NULL;
	}
	if (!each_pair(l, n, "key", what, keys, ref_pair, &r))
		return NULL;
	if (!r.from_file == !r.from_env) {
		fail(l, n, "%s needs exactly one of from_file and from_env", what);
		return NULL;
	}
	if (r.from_env) {
		if (!(s = getenv(r.from_env))) {
			fail(l, r.env_node, "%s: the environment variable '%s' is not set", what, r.from_env);
			return NULL;
		}
		val = json_stringn_nocheck(s, strlen(s));
	} else if (!(val = read_secret_file(l, r.file_node, r.from_file)))
		return NULL;
	len = json_string_length(val);
	s = json_string_value(val);
	if (r.trim && len > 0 && s[len - 1] == '\n')
		json_string_setn_nocheck(val, s, len - 1);
	if (memchr(json_string_value(val), '\0', json_string_length(val))) {
		fail(l, n, "%s holds a NUL byte", what);
		json_decref(val);
		return NULL;
	}
	return val;
}

/* --- agents --- */

struct agent_ctx {
	const char *name;
	json_t *agent;	/* {"fields": {...}, ...} */
};

static bool schedule_pair(struct loader *l, const char *key, yaml_node_t *k, yaml_node_t *v, void *data)
{
	json_t *s;

	if (!(s = typed(l, v, FIELD_STR, key)))
		return false;
	json_object_set_new(data, key, s);
	return true;
}

static bool schedules(struct loader *l, struct agent_ctx *a, yaml_node_t *n)
{
	static const char *const keys[] = { "cron", "tz", "catch_up", "payload", NULL };
	json_t *list = json_array();

	json_object_set_new(a->agent, "schedules", list);
	if (!want_type(l, n, YAML_SEQUENCE_NODE, "schedules"))
		return false;
	for (yaml_node_item_t *i = n->data.sequence.items.start; i < n->data.sequence.items.top; i++) {
		yaml_node_t *item = node(l, *i);
		json_t *s = json_object(), *old;
		size_t idx;

		json_array_append_new(list, s);
		if (!want_type(l, item, YAML_MAPPING_NODE, "a schedule") ||
		    !each_pair(l, item, "key", "a schedule", keys, schedule_pair, s))
			return false;
		if (!json_object_get(s, "cron")) {
			fail(l, item, "a schedule needs 'cron'");
			return false;
		}
		if (!json_object_get(s, "catch_up"))
			json_object_set_new(s, "catch_up", json_string("once"));
		json_array_foreach(list, idx, old)
			if (old != s && json_equal(old, s)) {
				fail(l, item, "agent '%s' has this schedule twice", a->name);
				return false;
			}
	}
	return true;
}

static bool secret_pair(struct loader *l, const char *key, yaml_node_t *k, yaml_node_t *v, void *data)
{
	_cleanup_free_ char *what = xasprintf("secret '%s'", key);
	json_t *val;

	if (!(val = secret_value(l, v, what)))
		return false;
	json_object_set_new(data, key, val);
	return true;
}

/* The named choices (backend, network, restart, snapshot_policy): checked here, before anything changes. */
static bool enum_ok(struct loader *l, yaml_node_t *v, const char *key)
{
	static const struct {
		const char *key, *choices;
		int (*parse)(const char *s);
	} enums[] = {
		{ "backend", "vm or user", backend_kind_from_string },
		{ "network", "none or nat", network_kind_from_string },
		{ "restart", "on-failure, always or never", restart_policy_from_string },
		{ "snapshot_policy", "none, before-run or cron", snapshot_policy_from_string },
	};

	for (size_t i = 0; i < ARRAY_SIZE(enums); i++)
		if (strcmp(enums[i].key, key) == 0 && enums[i].parse(scalar(v)) < 0) {
			fail(l, v, "%s is %s, not '%s'", key, enums[i].choices, scalar(v));
			return false;
		}
	return true;
}

static bool agent_pair(struct loader *l, const char *key, yaml_node_t *k, yaml_node_t *v, void *data)
{
	struct agent_ctx *a = data;
	json_t *val, *secrets;

	if (strcmp(key, "schedules") == 0)
		return schedules(l, a, v);
	if (strcmp(key, "secrets") == 0) {
		secrets = json_object();
		json_object_set_new(a->agent, "secrets", secrets);
		return want_type(l, v, YAML_MAPPING_NODE, "secrets") &&
		       each_pair(l, v, "secret", "secrets", NULL, secret_pair, secrets);
	}
	for (size_t i = 0; i < fleet_n_fields; i++)
		if (strcmp(fleet_fields[i].name, key) == 0) {
			if (!(val = typed(l, v, fleet_fields[i].type, key)))
				return false;
			if (!enum_ok(l, v, key)) {
				json_decref(val);
				return false;
			}
			json_object_set_new(json_object_get(a->agent, "fields"), key, val);
			return true;
		}
	fail(l, k, "unknown key '%s' in agent '%s'", key, a->name);
	return false;
}

static bool agents_pair(struct loader *l, const char *key, yaml_node_t *k, yaml_node_t *v, void *data)
{
	struct agent_ctx a = { .name = key, .agent = json_pack("{s:o}", "fields", json_object()) };
	const char *why;

	json_object_set_new(data, key, a.agent);
	if (agent_name_check(key, &why) < 0) {
		fail(l, k, "invalid agent name '%s': %s", key, why);
		return false;
	}
	if (is_null(v))
		return true;	/* "name:" alone: an agent with every default */
	return want_type(l, v, YAML_MAPPING_NODE, "an agent") && each_pair(l, v, "key", "an agent", NULL, agent_pair, &a);
}

/* --- hooks --- */

struct route_ctx {
	const char *route;
	json_t *r;
};

static bool subscribers(struct loader *l, struct route_ctx *rc, yaml_node_t *n)
{
	static const char *const keys[] = { "agent", "events", NULL };
	json_t *subs = json_object_get(rc->r, "subscribers");

	if (!want_type(l, n, YAML_SEQUENCE_NODE, "subscribers"))
		return false;
	for (yaml_node_item_t *i = n->data.sequence.items.start; i < n->data.sequence.items.top; i++) {
		yaml_node_t *item = node(l, *i), *agent = NULL, *events = NULL;
		json_t *ev = json_null();
		const char *name, *why;

		if (!want_type(l, item, YAML_MAPPING_NODE, "a subscriber"))
			return false;
		for (yaml_node_pair_t *p = item->data.mapping.pairs.start; p < item->data.mapping.pairs.top; p++) {
			yaml_node_t *k = node(l, p->key);
			const char *key = want_str(l, k, "a key");

			if (!key)
				return false;
			if (strcmp(key, keys[0]) == 0 && !agent)
				agent = node(l, p->value);
			else if (strcmp(key, keys[1]) == 0 && !events)
				events = node(l, p->value);
			else {
				fail(l, k, strcmp(key, "agent") && strcmp(key, "events") ? "unknown key '%s' in a subscriber"
											  : "duplicate key '%s' in a subscriber", key);
				return false;
			}
		}
		if (!agent) {
			fail(l, item, "a subscriber needs 'agent'");
			return false;
		}
		if (!(name = want_str(l, agent, "agent")))
			return false;
		if (agent_name_check(name, &why) < 0) {
			fail(l, agent, "invalid agent name '%s': %s", name, why);
			return false;
		}
		if (json_object_get(subs, name)) {
			fail(l, agent, "agent '%s' subscribes to route '%s' twice", name, rc->route);
			return false;
		}
		if (events && !is_null(events)) {
			if (!want_type(l, events, YAML_SEQUENCE_NODE, "events"))
				return false;
			ev = json_array();
			for (yaml_node_item_t *e = events->data.sequence.items.start; e < events->data.sequence.items.top; e++) {
				const char *s = want_str(l, node(l, *e), "an event type");

				if (!s) {
					json_decref(ev);
					return false;
				}
				json_array_append_new(ev, json_string(s));
			}
		}
		json_object_set_new(subs, name, ev);
	}
	return true;
}

static bool route_pair(struct loader *l, const char *key, yaml_node_t *k, yaml_node_t *v, void *data)
{
	struct route_ctx *rc = data;
	json_t *val;

	if (strcmp(key, "subscribers") == 0)
		return subscribers(l, rc, v);
	if (strcmp(key, "secret") == 0) {
		_cleanup_free_ char *what = xasprintf("the secret of route '%s'", rc->route);

		json_t *text;

		if (!(val = secret_value(l, v, what)))
			return false;
		/* It travels in a JSON body (POST /v1/hooks): text only, as fleetd wants it. */
		if (!(text = json_stringn(json_string_value(val), json_string_length(val)))) {
			fail(l, v, "%s is not UTF-8 text", what);
			json_decref(val);
			return false;
		}
		json_decref(text);
		json_object_set_new(rc->r, "secret", val);
		return true;
	}
	if (!(val = typed(l, v, strcmp(key, "max_body") == 0 ? FIELD_INT : FIELD_STR, key)))
		return false;
	json_object_set_new(json_object_get(rc->r, "settings"), key, val);
	return true;
}

static bool hooks_pair(struct loader *l, const char *key, yaml_node_t *k, yaml_node_t *v, void *data)
{
	static const char *const keys[] = { "source", "secret", "subscribers", "header", "encoding", "prefix", "auth",
					    "delivery_field", "public_url", "max_body", NULL };
	struct route_ctx rc = { .route = key,
				.r = json_pack("{s:o, s:o}", "settings", json_object(), "subscribers", json_object()) };
	_cleanup_free_ char *what = xasprintf("route '%s'", key);

	json_object_set_new(data, key, rc.r);
	return want_type(l, v, YAML_MAPPING_NODE, "a route") && each_pair(l, v, "key", what, keys, route_pair, &rc);
}

static bool top_pair(struct loader *l, const char *key, yaml_node_t *k, yaml_node_t *v, void *data)
{
	json_t *fleet = data, *part;

	if (strcmp(key, "version") == 0) {
		if (!plain(v) || strcmp(scalar(v), "1") != 0) {
			fail(l, v, "version must be 1");
			return false;
		}
		return true;
	}
	part = json_object_get(fleet, key);
	if (is_null(v))
		return true;
	return want_type(l, v, YAML_MAPPING_NODE, key) &&
	       each_pair(l, v, strcmp(key, "agents") == 0 ? "agent name" : "route name", key, NULL,
			 strcmp(key, "agents") == 0 ? agents_pair : hooks_pair, part);
}

int fleet_file_load(const char *path, json_t **ret)
{
	static const char *const keys[] = { "version", "agents", "hooks", NULL };
	struct loader l = { .path = path };
	yaml_parser_t parser;
	yaml_node_t *root;
	_cleanup_fclose_ FILE *f = NULL;
	json_t *fleet;
	bool ok;

	if (!(f = fopen(path, "re"))) {
		fprintf(stderr, "fleetctl: cannot open %s: %s\n", path, strerror(errno));
		return -1;
	}
	yaml_parser_initialize(&parser);
	yaml_parser_set_input_file(&parser, f);
	if (!yaml_parser_load(&parser, &l.doc)) {
		fprintf(stderr, "%s:%zu:%zu: %s%s%s\n", path, parser.problem_mark.line + 1, parser.problem_mark.column + 1,
			parser.problem ? parser.problem : "not YAML", parser.context ? " " : "",
			parser.context ? parser.context : "");
		yaml_parser_delete(&parser);
		return -1;
	}
	yaml_parser_delete(&parser);
	fleet = json_pack("{s:o, s:o}", "agents", json_object(), "hooks", json_object());
	root = yaml_document_get_root_node(&l.doc);
	ok = !root || is_null(root) ||
	     (want_type(&l, root, YAML_MAPPING_NODE, "the file") && each_pair(&l, root, "key", "the file", keys, top_pair, fleet));
	yaml_document_delete(&l.doc);
	if (!ok) {
		json_decref(fleet);
		return -1;
	}
	*ret = fleet;
	return 0;
}

/* --- writing --- */

struct writer {
	yaml_emitter_t e;
	yaml_event_t ev;
	bool failed;
};

static void emit(struct writer *w)
{
	if (!w->failed && !yaml_emitter_emit(&w->e, &w->ev))
		w->failed = true;
}

static void put_str(struct writer *w, const char *s)
{
	yaml_scalar_event_initialize(&w->ev, NULL, NULL, (yaml_char_t *)s, (int)strlen(s), 1, 1, YAML_ANY_SCALAR_STYLE);
	emit(w);
}

/* A string field as a string even when it looks like a number or a boolean. */
static void put_quoted(struct writer *w, const char *s)
{
	yaml_scalar_event_initialize(&w->ev, NULL, NULL, (yaml_char_t *)s, (int)strlen(s), 0, 1,
				     YAML_DOUBLE_QUOTED_SCALAR_STYLE);
	emit(w);
}

static void put_map_style(struct writer *w, bool start, yaml_mapping_style_t style)
{
	if (start)
		yaml_mapping_start_event_initialize(&w->ev, NULL, NULL, 1, style);
	else
		yaml_mapping_end_event_initialize(&w->ev);
	emit(w);
}

static void put_map(struct writer *w, bool start)
{
	put_map_style(w, start, YAML_BLOCK_MAPPING_STYLE);
}

static void put_seq(struct writer *w, bool start, bool flow)
{
	if (start)
		yaml_sequence_start_event_initialize(&w->ev, NULL, NULL, 1,
						     flow ? YAML_FLOW_SEQUENCE_STYLE : YAML_BLOCK_SEQUENCE_STYLE);
	else
		yaml_sequence_end_event_initialize(&w->ev);
	emit(w);
}

/* A JSON scalar (string, integer, boolean) as a YAML value of its type. */
static void put_json(struct writer *w, json_t *v)
{
	char buf[32];

	if (json_is_string(v)) {
		const char *s = json_string_value(v);
		bool looks_typed = !*s || strspn(s, "-0123456789") == strlen(s) || !strcmp(s, "true") ||
				   !strcmp(s, "false") || !strcmp(s, "null") || !strcmp(s, "~");

		if (looks_typed)
			put_quoted(w, s);
		else
			put_str(w, s);
	} else if (json_is_boolean(v))
		put_str(w, json_is_true(v) ? "true" : "false");
	else {
		snprintf(buf, sizeof(buf), "%" JSON_INTEGER_FORMAT, json_integer_value(v));
		put_str(w, buf);
	}
}

static void put_kv(struct writer *w, const char *key, json_t *v)
{
	put_str(w, key);
	put_json(w, v);
}

static char *env_name(const char *prefix, const char *a, const char *b)
{
	char *s = b ? xasprintf("%s_%s_%s", prefix, a, b) : xasprintf("%s_%s", prefix, a);

	for (char *p = s; *p; p++)
		*p = *p == '-' ? '_' : (char)toupper((unsigned char)*p);
	return s;
}

char *fleet_secret_env_name(const char *agent, const char *key)
{
	return env_name("FLEET_SECRET", agent, key);
}

char *fleet_route_env_name(const char *route)
{
	return env_name("FLEET_HOOK_SECRET", route, NULL);
}

static void put_env_ref(struct writer *w, const char *var)
{
	put_map_style(w, true, YAML_FLOW_MAPPING_STYLE);	/* {from_env: VAR}: one line */
	put_str(w, "from_env");
	put_str(w, var);
	put_map(w, false);
}

static void write_agent(struct writer *w, json_t *a, json_t *secrets, json_t *schedules)
{
	const char *name = json_string_value(json_object_get(a, "name"));
	json_t *v, *s;
	size_t i;
	bool any = false;

	put_str(w, name);
	put_map(w, true);
	for (i = 0; i < fleet_n_fields; i++) {
		const struct fleet_field *fd = &fleet_fields[i];
		json_t *from = fd->parent ? json_object_get(a, fd->parent) : a;

		v = json_object_get(from, fd->member);
		if (!v || json_is_null(v))
			continue;	/* unset: the default */
		put_kv(w, fd->name, v);
	}
	json_array_foreach(secrets, i, s) {
		_cleanup_free_ char *var = fleet_secret_env_name(name, json_string_value(json_object_get(s, "key")));

		if (!any)
			put_str(w, "secrets"), put_map(w, true), any = true;
		put_str(w, json_string_value(json_object_get(s, "key")));
		put_env_ref(w, var);
	}
	if (any)
		put_map(w, false);
	any = false;
	json_array_foreach(schedules, i, s) {
		if (strcmp(json_string_value(json_object_get(s, "agent")), name) != 0)
			continue;
		if (!any)
			put_str(w, "schedules"), put_seq(w, true, false), any = true;
		put_map(w, true);
		put_kv(w, "cron", json_object_get(s, "cron"));
		if (json_is_string(json_object_get(s, "tz")))
			put_kv(w, "tz", json_object_get(s, "tz"));
		put_kv(w, "catch_up", json_object_get(s, "catch_up"));
		/* Inline: a payload is UTF-8 text, which a YAML string holds whole (quoted and escaped as need be). */
		if (json_is_string(json_object_get(s, "payload")))
			put_kv(w, "payload", json_object_get(s, "payload"));
		put_map(w, false);
	}
	if (any)
		put_seq(w, false, false);
	put_map(w, false);
}

static void write_route(struct writer *w, json_t *r)
{
	const char *route = json_string_value(json_object_get(r, "route"));
	_cleanup_free_ char *var = fleet_route_env_name(route);
	json_t *sub, *ev;
	size_t i, j;

	put_str(w, route);
	put_map(w, true);
	put_kv(w, "source", json_object_get(r, "source"));
	put_str(w, "secret");
	put_env_ref(w, var);
	for (i = 0; fleet_route_settings[i]; i++)
		if ((ev = json_object_get(r, fleet_route_settings[i])) && !json_is_null(ev))
			put_kv(w, fleet_route_settings[i], ev);
	put_str(w, "subscribers");
	put_seq(w, true, false);
	json_array_foreach(json_object_get(r, "subscribers"), i, sub) {
		put_map(w, true);
		put_kv(w, "agent", json_object_get(sub, "agent"));
		if (json_is_array(ev = json_object_get(sub, "events"))) {
			json_t *e;

			put_str(w, "events");
			put_seq(w, true, true);
			json_array_foreach(ev, j, e)
				put_json(w, e);
			put_seq(w, false, true);
		}
		put_map(w, false);
	}
	put_seq(w, false, false);
	put_map(w, false);
}

int fleet_file_write(FILE *out, json_t *agents, json_t *secrets, json_t *schedules, json_t *hooks)
{
	struct writer w = { 0 };
	json_t *a, *r;
	size_t i;

	yaml_emitter_initialize(&w.e);
	yaml_emitter_set_output_file(&w.e, out);
	yaml_emitter_set_unicode(&w.e, 1);
	yaml_emitter_set_width(&w.e, -1);
	yaml_stream_start_event_initialize(&w.ev, YAML_UTF8_ENCODING);
	emit(&w);
	yaml_document_start_event_initialize(&w.ev, NULL, NULL, NULL, 1);
	emit(&w);
	put_map(&w, true);
	put_str(&w, "version");
	put_str(&w, "1");
	put_str(&w, "agents");
	put_map(&w, true);
	json_array_foreach(agents, i, a)
		write_agent(&w, a, json_object_get(secrets, json_string_value(json_object_get(a, "name"))), schedules);
	put_map(&w, false);
	put_str(&w, "hooks");
	put_map(&w, true);
	json_array_foreach(hooks, i, r)
		write_route(&w, r);
	put_map(&w, false);
	put_map(&w, false);
	yaml_document_end_event_initialize(&w.ev, 1);
	emit(&w);
	yaml_stream_end_event_initialize(&w.ev);
	emit(&w);
	if (w.failed)
		fprintf(stderr, "fleetctl: cannot write the fleet file: %s\n", w.e.problem ? w.e.problem : "write error");
	yaml_emitter_delete(&w.e);
	return w.failed ? -1 : 0;
}
