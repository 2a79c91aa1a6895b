/* run_exec: see run_exec.h. */
#include "core/run_exec.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/base64.h"
#include "common/util.h"
#include "core/secrets.h"
#include "model/fleetd.h"
#include "store/db.h"

#define ENV_VALUE_MAX 256

/* NAME=VALUE with VALUE made safe for any shell or transport: printable ASCII, bounded. */
static char *env_pair(const char *name, const char *value)
{
	size_t n = value ? strnlen(value, ENV_VALUE_MAX) : 0;
	char *s = xasprintf("%s=%.*s", name, (int)n, value ? value : "");

	for (char *p = s + strlen(name) + 1; *p; p++)
		if ((unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e)
			*p = '_';
	return s;
}

/*
 * The headers column as the text to put in stdin. fleetd writes it only
 * with jansson (hook_headers_json: compact, ASCII-only, header values
 * printable) in the delivery's transaction, and a compact dump of that
 * text parsed again is the same bytes: so it goes in as it is, not parsed
 * and dumped again for every run (~70k instructions a run). Anything that
 * is not text of that shape (none; damage) goes through jansson: an
 * object is dumped again, anything else is an empty object. Free the
 * result.
 */
static char *headers_text(const char *text)
{
	size_t n = text ? strlen(text) : 0;
	bool as_stored = n >= 2 && text[0] == '{' && text[n - 1] == '}';
	json_t *j;
	char *out;

	for (size_t i = 0; as_stored && i < n; i++)
		as_stored = (unsigned char)text[i] >= 0x20 && (unsigned char)text[i] <= 0x7e;
	if (as_stored)
		return xstrdup(text);
	j = text ? json_loads(text, JSON_REJECT_DUPLICATES, NULL) : NULL;
	if (!json_is_object(j)) {
		json_decref(j);
		j = json_object();
	}
	out = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	if (!out)
		abort();	/* out of memory: as xmalloc does */
	return out;
}

/* An object's members as compact JSON text without its braces (JSON_EMBED); aborts when out of memory. */
static char *members_text(json_t *j)
{
	char *out = json_dumps(j, JSON_COMPACT | JSON_EMBED);

	if (!out)
		abort();
	return out;
}

static json_t *string_or_null(const char *s)
{
	return s ? json_string(s) : json_null();
}

int run_env_add_secrets(struct fleetd *f, const char *agent, char ***env, char **why)
{
	_cleanup_(secret_values_freep) struct secret_values *sv = NULL;
	size_t n = 0;
	int r;

	if ((r = secrets_load(f, agent, &sv)) < 0) {
		*why = r == -EBADMSG ? xasprintf("agent '%s': a stored secret does not decrypt (another host key, a row "
						 "copied from another agent or key, or damage); nothing was started",
						 agent)
				     : xasprintf("agent '%s': cannot load its secrets: %s", agent, strerror(-r));
		return r;
	}
	while (*env && (*env)[n])
		n++;
	*env = xrealloc(*env, (n + sv->n + 1) * sizeof(**env));
	/* The value as it is (no NUL can be in it): unlike FLEET_*, it is the operator's, not a sender's. */
	for (size_t i = 0; i < sv->n; i++)
		(*env)[n++] = xasprintf("%s=%s", sv->v[i].key, (const char *)sv->v[i].value);
	(*env)[n] = NULL;
	return 0;
}

void run_env_free(char **env)
{
	for (char **p = env; p && *p; p++) {
		explicit_bzero(*p, strlen(*p));
		free(*p);
	}
	free(env);
}

int run_input_make(struct fleetd *f, const struct agent *a, const struct run *run, struct run_input **ret,
		   char **why)
{
	_cleanup_(run_event_freep) struct run_event *ev = NULL;
	_cleanup_free_ char *head = NULL, *headers = NULL, *body = NULL;
	struct run_input *in;
	json_t *j;
	char when[32], id[32];
	int r;

	if (run->event_id > 0 && (r = db_event_get(f->db, run->event_id, &ev)) < 0) {
		*why = xasprintf("cannot read its event %" PRId64 ": %s", run->event_id, strerror(-r));
		return r;
	}
	/* Two parts dumped by jansson with the stored headers between them: {HEAD,"headers":H,BODY}. */
	j = json_object();
	json_object_set_new(j, "run_id", json_integer(run->id));
	json_object_set_new(j, "agent", json_string(a->name));
	json_object_set_new(j, "trigger", json_string(run->trigger));
	json_object_set_new(j, "source", json_string(ev && ev->source ? ev->source : run->trigger));
	json_object_set_new(j, "route", string_or_null(ev ? ev->route : NULL));
	json_object_set_new(j, "delivery_id", string_or_null(ev ? ev->delivery_id : NULL));
	json_object_set_new(j, "type", string_or_null(ev ? ev->type : NULL));
	json_object_set_new(j, "received_at", json_string(format_utc(ev ? ev->received_at : run->queued_at, when,
								     sizeof(when))));
	head = members_text(j);
	json_decref(j);
	j = json_object();
	if (!ev || !ev->body) {
		json_object_set_new(j, "body", json_null());
	} else {
		/* json_stringn refuses what is not UTF-8 (and NUL): then the bytes as base64. */
		json_t *b = json_stringn((const char *)ev->body, ev->body_len);

		if (b && !memchr(ev->body, '\0', ev->body_len)) {
			json_object_set_new(j, "body", b);
		} else {
			_cleanup_free_ char *b64 = base64_encode(ev->body, ev->body_len);

			json_decref(b);
			json_object_set_new(j, "body", json_null());
			json_object_set_new(j, "body_base64", json_string(b64));
		}
	}
	body = members_text(j);
	json_decref(j);
	headers = headers_text(ev ? ev->headers : NULL);
	in = xcalloc(1, sizeof(*in));
	{
		static const char key[] = ",\"headers\":";
		size_t nh = strlen(head), nk = sizeof(key) - 1, nx = strlen(headers), nb = strlen(body);
		char *p = xmalloc(nh + nk + nx + nb + 4);

		in->stdin_data = p;	/* (copied, not through printf: the body may be 16 MiB escaped) */
		*p++ = '{';
		p = mempcpy(mempcpy(mempcpy(p, head, nh), key, nk), headers, nx);
		*p++ = ',';
		p = mempcpy(p, body, nb);
		*p++ = '}';
		*p = '\0';
		in->stdin_len = (size_t)(p - in->stdin_data);
	}
	snprintf(id, sizeof(id), "%" PRId64, run->id);
	in->env = xcalloc(7, sizeof(*in->env));
	in->env[0] = env_pair("FLEET_RUN_ID", id);
	in->env[1] = env_pair("FLEET_TRIGGER", run->trigger);
	in->env[2] = env_pair("FLEET_AGENT", a->name);
	in->env[3] = env_pair("FLEET_EVENT_SOURCE", ev && ev->source ? ev->source : run->trigger);
	in->env[4] = env_pair("FLEET_EVENT_TYPE", ev ? ev->type : NULL);
	in->env[5] = env_pair("FLEET_DELIVERY_ID", ev ? ev->delivery_id : NULL);
	/* Loaded at each launch: a 'secret set' counts from the next run on. */
	if (!a->secret_files && (r = run_env_add_secrets(f, a->name, &in->env, why)) < 0) {
		run_input_free(in);
		return r;
	}
	*ret = in;
	return 0;
}

void run_input_free(struct run_input *in)
{
	if (!in)
		return;
	run_env_free(in->env);
	free(in->stdin_data);
	free(in);
}
