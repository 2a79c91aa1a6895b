/*
 * verify_github: X-Hub-Signature-256 = "sha256=" + hex HMAC-SHA256 of the
 * body; the event is X-GitHub-Event plus the body's "action" when it has
 * one ("pull_request.opened"); the delivery is X-GitHub-Delivery; a ping
 * is stored but runs nothing. The body must be a JSON object (the hook's
 * content type application/json), checked only after the signature matched;
 * it is parsed (jansson) only when it may hold an "action" (see
 * may_have_action), as nothing else of it is read here.
 */
#include <string.h>

#include "common/util.h"
#include "hooks/verify_common.h"

#define SIG_PREFIX "sha256="

static bool json_space(unsigned char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/*
 * Whether a JSON object in body could have a member named "action": its key
 * would be written either as those six letters between quotes, or with a
 * \u escape somewhere in it. With neither in the body (a push, a ping),
 * the event type is the header's alone, as it would be after parsing it, so
 * it is not parsed: jansson's parse of a 1 KiB push was ~60 % of the
 * listener's instructions per delivery.
 */
static bool may_have_action(const unsigned char *body, size_t len)
{
	const unsigned char *end = body + len, *p;

	/* memchr, not memmem: glibc's memmem builds a shift table per call (~5 instructions a byte here). */
	for (p = body; (p = memchr(p, '\\', (size_t)(end - p))) && p + 1 < end; p++)
		if (p[1] == 'u')
			return true;
	for (p = body; (p = memchr(p, '"', (size_t)(end - p))) && (size_t)(end - p) >= 8; p++)
		if (memcmp(p, "\"action\"", 8) == 0)
			return true;
	return false;
}

/*
 * An unparsed body is still refused unless it is braced like one object (a
 * form-encoded body, an array, an empty body are malformed, as when parsed);
 * what is between the braces is the signed sender's, handed on as bytes.
 */
static bool braced(const unsigned char *body, size_t len)
{
	size_t a = 0, b = len;

	while (a < b && json_space(body[a]))
		a++;
	while (b > a && json_space(body[b - 1]))
		b--;
	return b - a >= 2 && body[a] == '{' && body[b - 1] == '}';
}

enum hook_verdict hv_verify_github(const struct hook_route *route, const struct hook_request *req, struct hook_result *res)
{
	const char *sig = hv_header(req, "X-Hub-Signature-256");
	const char *event = hv_header(req, "X-GitHub-Event"), *delivery = hv_header(req, "X-GitHub-Delivery");
	unsigned char want[HV_SHA256_LEN];
	struct hv_part body = { req->body, req->body_len };
	const char *action = NULL;
	json_t *j = NULL;

	if (!sig)
		return hv_refuse(res, HOOK_UNSIGNED, "no X-Hub-Signature-256 header");
	if (strncmp(sig, SIG_PREFIX, strlen(SIG_PREFIX)) != 0 ||
	    !hv_unhex(sig + strlen(SIG_PREFIX), strlen(sig + strlen(SIG_PREFIX)), want, sizeof(want)))
		return hv_refuse(res, HOOK_BAD_SIGNATURE, "X-Hub-Signature-256 is not sha256=HEX");
	if (!hv_mac_matches(route, "SHA256", &body, 1, want, sizeof(want)))
		return hv_refuse(res, HOOK_BAD_SIGNATURE, "signature does not match");

	/* Signed: now what it says may be read. */
	if (!hv_id_ok(event))
		return hv_refuse(res, HOOK_MALFORMED, "no usable X-GitHub-Event header");
	if (!hv_id_ok(delivery))
		return hv_refuse(res, HOOK_MALFORMED, "no usable X-GitHub-Delivery header");
	if (may_have_action(req->body, req->body_len)) {
		j = hv_json_object(req->body, req->body_len);
		if (!j)
			return hv_refuse(res, HOOK_MALFORMED, "body is not a JSON object");
		action = json_string_value(json_object_get(j, "action"));
	} else if (!braced(req->body, req->body_len)) {
		return hv_refuse(res, HOOK_MALFORMED, "body is not a JSON object");
	}
	if (action && *action)
		res->event_type = xasprintf("%s.%s", event, action);
	else
		res->event_type = xstrdup(event);
	json_decref(j);
	if (!hv_id_ok(res->event_type))
		return hv_refuse(res, HOOK_MALFORMED, "event action is not a usable word");
	res->delivery_id = xstrdup(delivery);
	res->no_run = strcmp(event, "ping") == 0;
	return res->verdict = HOOK_OK;
}
