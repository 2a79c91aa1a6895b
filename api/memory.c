/*
 * memory: the agent's memory store (docs/memory.md). Values and archives
 * travel as raw bodies (application/octet-stream, application/x-tar); the
 * work is core/memory.c's, which runs agentd in the environment.
 */
#include "api/memory.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "api/handler.h"
#include "api/server.h"
#include "common/names.h"
#include "common/util.h"
#include "core/memory.h"
#include "model/agent.h"

/* A refusal from core/memory.c: each error its own status and code. */
static void memory_error(struct api_call *c, int r, const char *why)
{
	const char *agent = c->param;

	switch (-r) {
	case ENOENT:
		api_error(c, 404, "not_found", "agent '%s': %s", agent, why);
		break;
	case EDQUOT:
		api_error(c, 507, "quota_exceeded", "agent '%s': %s", agent, why);
		break;
	case EPERM:
		api_error(c, 422, "refused", "agent '%s': %s", agent, why);
		break;
	case EINVAL:
		api_error(c, 400, "invalid", "agent '%s': %s", agent, why);
		break;
	case EBUSY:
		api_error(c, 409, "busy", "agent '%s': %s", agent, why);
		break;
	case EAGAIN:
		api_error_core(c, r, why);
		break;
	case EFBIG:
		api_error(c, 413, "too_large", "agent '%s': %s", agent, why);
		break;
	default:
		api_error(c, 409, "exec_failed", "agent '%s': the memory store cannot be reached: %s", agent, why);
	}
}

/* The agent named by the path exists and the key (if any) is valid; replies and returns false if not. */
static bool check_params(struct api_call *c, bool with_key)
{
	struct agent *a;

	if (with_key && !memory_key_valid(c->param2)) {
		api_error(c, 400, "invalid", "invalid memory key: 1 to %d of A-Z a-z 0-9 . _ -, not starting with a dot",
			  MEMORY_KEY_MAX);
		return false;
	}
	if (!(a = api_agent_param(c)))
		return false;
	agent_free(a);
	return true;
}

static void start(struct api_call *c, enum memory_verb verb, const void *in, size_t len, memory_done_fn done)
{
	_cleanup_free_ char *why = NULL;
	struct api_call *d = api_defer(c);
	int r;

	if ((r = memory_call(d->fleetd, d->param, verb, d->param2, in, len, done, d, &why)) < 0)
		memory_error(d, r, why ? why : strerror(-r));
}

static void listed(void *userdata, const struct memory_result *res)
{
	struct api_call *d = userdata;
	json_t *keys = json_array();
	const char *p = res->out, *end = res->out + res->out_len;

	if (res->error < 0) {
		json_decref(keys);
		memory_error(d, res->error, res->why);
		return;
	}
	/* agentd's lines: KEY TAB SIZE TAB MTIME; anything else is skipped, not trusted. */
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		char line[MEMORY_KEY_MAX + 64], key[MEMORY_KEY_MAX + 1], when[32];
		long long size, mtime;
		size_t n = (size_t)((nl ? nl : end) - p);

		if (n < sizeof(line)) {
			memcpy(line, p, n);
			line[n] = '\0';
			if (sscanf(line, "%128[^\t]\t%lld\t%lld", key, &size, &mtime) == 3 && memory_key_valid(key))
				json_array_append_new(keys, json_pack("{s:s, s:I, s:s}", "key", key, "size", (json_int_t)size,
								      "mtime", format_utc(mtime, when, sizeof(when))));
		}
		p = nl ? nl + 1 : end;
	}
	api_reply(d, 200, json_pack("{s:s, s:o}", "agent", d->param, "keys", keys));
}

/* GET /v1/agents/NAME/memory: the keys with their sizes and mtimes. */
void api_memory_list(struct api_call *c)
{
	if (check_params(c, false))
		start(c, MEMORY_LS, NULL, 0, listed);
}

static void got(void *userdata, const struct memory_result *res)
{
	struct api_call *d = userdata;

	if (res->error < 0)
		memory_error(d, res->error, res->why);
	else
		api_reply_raw(d, 200, "application/octet-stream", res->out, res->out_len);
}

/* GET /v1/agents/NAME/memory/KEY: the value, raw. */
void api_memory_get(struct api_call *c)
{
	if (check_params(c, true))
		start(c, MEMORY_GET, NULL, 0, got);
}

static void changed(void *userdata, const struct memory_result *res)
{
	struct api_call *d = userdata;

	if (res->error < 0)
		memory_error(d, res->error, res->why);
	else
		api_reply(d, 200, json_pack("{s:s, s:s?}", "agent", d->param, "key", d->param2));
}

/* PUT /v1/agents/NAME/memory/KEY: the body is the new value, whole. */
void api_memory_put(struct api_call *c)
{
	const void *body;
	size_t len;

	if (check_params(c, true) && (body = api_body_raw(c, &len)))
		start(c, MEMORY_PUT, body, len, changed);
}

/* DELETE /v1/agents/NAME/memory/KEY */
void api_memory_delete(struct api_call *c)
{
	if (check_params(c, true))
		start(c, MEMORY_RM, NULL, 0, changed);
}

static void exported(void *userdata, const struct memory_result *res)
{
	struct api_call *d = userdata;

	if (res->error < 0)
		memory_error(d, res->error, res->why);
	else
		api_reply_raw(d, 200, "application/x-tar", res->out, res->out_len);
}

/* GET /v1/agents/NAME/memory-archive: the whole store as a tar archive. */
void api_memory_export(struct api_call *c)
{
	if (check_params(c, false))
		start(c, MEMORY_EXPORT, NULL, 0, exported);
}

/* PUT /v1/agents/NAME/memory-archive: replace the whole store with a tar archive, or change nothing. */
void api_memory_import(struct api_call *c)
{
	const void *body;
	size_t len;

	if (check_params(c, false) && (body = api_body_raw(c, &len)))
		start(c, MEMORY_IMPORT, body, len, changed);
}
