/*
 * api_secrets: /v1/agents/NAME/secrets[/KEY] (core/secrets.c). PUT takes
 * the raw value as its body (any Content-Type; at most SECRET_VALUE_MAX
 * bytes), which is sealed, then wiped from the request buffer; no reply,
 * log line or audit record ever holds it: the audit names NAME/KEY only.
 */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/http.h>
#include <string.h>

#include "api/handler.h"
#include "api/secrets.h"
#include "api/server.h"
#include "core/redact.h"
#include "core/secrets.h"
#include "model/agent.h"
#include "model/fleetd.h"

static json_t *time_json(int64_t t)
{
	char buf[32];

	return json_string(format_utc(t, buf, sizeof(buf)));
}

/* The ":key" segment: a valid secret name, else 400 and false. The audit target becomes NAME/KEY. */
static bool key_param(struct api_call *c, const struct agent *a, char *target, size_t len)
{
	if (secret_key_check(c->param2) < 0) {
		api_error(c, 400, "invalid", "a secret's name is an environment variable name ([A-Za-z_][A-Za-z0-9_]*, "
					     "at most 128 bytes), not FLEET_* nor HOME, USER, LOGNAME, SHELL or PATH");
		return false;
	}
	snprintf(target, len, "%s/%s", a->name, c->param2);
	c->target = target;
	return true;
}

void api_secrets_list(struct api_call *c)
{
	_cleanup_(agent_freep) struct agent *a = NULL;
	struct secret_info *list = NULL;
	size_t n = 0;
	json_t *arr;
	int r;

	if (!(a = api_agent_param(c)))
		return;
	if ((r = secrets_list(c->fleetd, a->name, &list, &n)) < 0) {
		api_error_errno(c, r, "cannot list the secrets of '%s': %s", a->name, strerror(-r));
		return;
	}
	arr = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(arr, json_pack("{s:s, s:I, s:o, s:o}", "key", list[i].key, "size",
						     (json_int_t)list[i].size, "created_at", time_json(list[i].created_at),
						     "updated_at", time_json(list[i].updated_at)));
	secret_info_list_free(list, n);
	api_reply(c, 200, json_pack("{s:s, s:o}", "agent", a->name, "secrets", arr));
}

/* Wipes the request body: the buffer is freed without a wipe, and it may hold a secret's value. */
static void wipe_body(struct api_call *c)
{
	struct evbuffer *in = evhttp_request_get_input_buffer(c->req);
	size_t len = evbuffer_get_length(in);

	if (len > 0)
		explicit_bzero(evbuffer_pullup(in, -1), len);
}

/*
 * The agent and secret KEY of the path, and the value in the body (into the request buffer; ""
 * when empty). false: answered (400, 404 or 413) and the body wiped. true: the caller wipes it
 * with wipe_body() once the value is used. target holds the audit's NAME/KEY.
 */
static bool secret_value_param(struct api_call *c, char *target, size_t target_len, struct agent **ret_agent,
			       unsigned char **ret_value, size_t *ret_len)
{
	struct evbuffer *in = evhttp_request_get_input_buffer(c->req);
	size_t len = evbuffer_get_length(in);
	struct agent *a;

	if (!(a = api_agent_param(c)))
		goto wipe;
	if (!key_param(c, a, target, target_len))
		goto free_wipe;
	if (len > SECRET_VALUE_MAX) {
		api_error(c, 413, "too_large", "a secret's value is at most %u bytes; this one is %zu", SECRET_VALUE_MAX, len);
		goto free_wipe;
	}
	*ret_agent = a;
	*ret_value = len ? evbuffer_pullup(in, -1) : (unsigned char *)"";
	*ret_len = len;
	return true;
free_wipe:
	agent_free(a);
wipe:
	wipe_body(c);
	return false;
}

void api_secret_set(struct api_call *c)
{
	_cleanup_(agent_freep) struct agent *a = NULL;
	_cleanup_free_ char *why = NULL;
	unsigned char *value;
	size_t len;
	char target[200];
	int r;

	if (!secret_value_param(c, target, sizeof(target), &a, &value, &len))
		return;
	r = secrets_set(c->fleetd, a->name, c->param2, value, len, &why);
	wipe_body(c);
	if (r == -E2BIG) {
		api_error(c, 409, "limit", "%s", why);
		return;
	}
	if (r < 0) {
		api_error_core(c, r, why);
		return;
	}
	{
		json_t *ans = json_pack("{s:s, s:s, s:I}", "agent", a->name, "key", c->param2, "size", (json_int_t)len);

		/* Too short to take out of output without destroying it (core/redact.h): say so now. */
		if (len < REDACT_MIN_LEN)
			json_object_set_new(ans, "warning", json_sprintf("a value under %d bytes is not redacted from the "
									 "agent's run logs and health details",
									 REDACT_MIN_LEN));
		api_reply(c, 200, ans);
	}
}

void api_secret_remove(struct api_call *c)
{
	_cleanup_(agent_freep) struct agent *a = NULL;
	_cleanup_free_ char *why = NULL;
	char target[200];
	int r;

	if (!(a = api_agent_param(c)) || !key_param(c, a, target, sizeof(target)))
		return;
	if ((r = secrets_remove(c->fleetd, a->name, c->param2, &why)) < 0) {
		api_error_core(c, r, why);
		return;
	}
	api_reply(c, 200, json_pack("{s:s, s:s}", "agent", a->name, "removed", c->param2));
}

void api_secret_compare(struct api_call *c)
{
	_cleanup_(agent_freep) struct agent *a = NULL;
	_cleanup_free_ char *why = NULL;
	unsigned char *value;
	size_t len;
	char target[200];
	bool same = false;
	int r;

	if (!secret_value_param(c, target, sizeof(target), &a, &value, &len))
		return;
	r = secrets_compare(c->fleetd, a->name, c->param2, value, len, &same, &why);
	wipe_body(c);
	if (r < 0) {
		api_error_core(c, r, why);
		return;
	}
	api_reply(c, 200, json_pack("{s:s, s:s, s:b}", "agent", a->name, "key", c->param2, "same", same));
}
