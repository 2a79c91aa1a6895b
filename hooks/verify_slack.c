/*
 * verify_slack: Slack's Events API, signing version v0. X-Slack-Signature
 * = "v0=" + hex HMAC-SHA256 of "v0:" TIMESTAMP ":" BODY, with TIMESTAMP
 * the X-Slack-Request-Timestamp header, refused when more than
 * HOOK_REPLAY_WINDOW_S off. A url_verification is answered with its
 * challenge and runs nothing; an event_callback's delivery is its
 * event_id and its type event.type.
 */
#include <string.h>

#include "common/util.h"
#include "hooks/verify_common.h"

#define SIG_PREFIX "v0="

enum hook_verdict hv_verify_slack(const struct hook_route *route, const struct hook_request *req, struct hook_result *res)
{
	const char *sig = hv_header(req, "X-Slack-Signature"), *ts = hv_header(req, "X-Slack-Request-Timestamp");
	unsigned char want[HV_SHA256_LEN], digest[HV_SHA256_LEN];
	const char *type, *id, *challenge;
	json_t *j;

	if (!sig || !ts)
		return hv_refuse(res, HOOK_UNSIGNED, "no X-Slack-Signature or X-Slack-Request-Timestamp header");
	if (hv_check_timestamp(ts, req->now) != HOOK_OK)
		return hv_refuse(res, HOOK_STALE, "X-Slack-Request-Timestamp outside the replay window");
	if (strncmp(sig, SIG_PREFIX, strlen(SIG_PREFIX)) != 0 ||
	    !hv_unhex(sig + strlen(SIG_PREFIX), strlen(sig + strlen(SIG_PREFIX)), want, sizeof(want)))
		return hv_refuse(res, HOOK_BAD_SIGNATURE, "X-Slack-Signature is not v0=HEX");
	const struct hv_part parts[] = {
		{ "v0:", 3 }, { ts, strlen(ts) }, { ":", 1 }, { req->body, req->body_len },
	};
	if (!hv_mac_matches(route, "SHA256", parts, sizeof(parts) / sizeof(*parts), want, sizeof(want)))
		return hv_refuse(res, HOOK_BAD_SIGNATURE, "signature does not match");

	j = hv_json_object(req->body, req->body_len);
	if (!j)
		return hv_refuse(res, HOOK_MALFORMED, "body is not a JSON object");
	type = json_string_value(json_object_get(j, "type"));
	if (type && strcmp(type, "url_verification") == 0) {
		challenge = json_string_value(json_object_get(j, "challenge"));
		/* Echoed back as text/plain: a bounded printable word, like an id (Slack's are ~50 characters). */
		if (!hv_id_ok(challenge)) {
			json_decref(j);
			return hv_refuse(res, HOOK_MALFORMED, "url_verification without a usable challenge");
		}
		/* It has no event_id: the body's hash names it (a repeat is the same challenge). */
		if (!hv_sha256(req->body, req->body_len, digest)) {
			json_decref(j);
			return hv_refuse(res, HOOK_MALFORMED, "cannot hash the body");
		}
		res->delivery_id = hv_hex(digest, sizeof(digest));
		res->event_type = xstrdup("url_verification");
		res->reply_body = xstrdup(challenge);
		res->reply_type = xstrdup("text/plain");
		res->no_run = true;
		json_decref(j);
		return res->verdict = HOOK_OK;
	}
	id = json_string_value(json_object_get(j, "event_id"));
	if (!hv_id_ok(id)) {
		json_decref(j);
		return hv_refuse(res, HOOK_MALFORMED, "no usable event_id");
	}
	/* event.type ("app_mention"), else the envelope's type ("event_callback"). */
	const char *event_type = json_string_value(json_object_get(json_object_get(j, "event"), "type"));
	if (!event_type)
		event_type = type;
	if (event_type && !hv_id_ok(event_type)) {
		json_decref(j);
		return hv_refuse(res, HOOK_MALFORMED, "event type is not a usable word");
	}
	res->delivery_id = xstrdup(id);
	res->event_type = event_type ? xstrdup(event_type) : NULL;
	json_decref(j);
	return res->verdict = HOOK_OK;
}
