/*
 * verify_standard: Standard Webhooks (standardwebhooks.com). The headers
 * webhook-id, webhook-timestamp and webhook-signature; the signature is a
 * space-separated list of "v1,BASE64" entries (several during the sender's
 * own key rotation; other versions are skipped), each an HMAC-SHA256 of
 * ID "." TIMESTAMP "." BODY under the secret (the whsec_ secret, already
 * base64-decoded by whoever built the route). Timestamps more than
 * HOOK_REPLAY_WINDOW_S off are refused. The delivery is webhook-id; the
 * event type the JSON body's "type" when it has one.
 */
#include <string.h>

#include "common/util.h"
#include "hooks/verify_common.h"

#define CANDIDATES_MAX 16	/* signatures tried per request: bounded work */

enum hook_verdict hv_verify_standard(const struct hook_route *route, const struct hook_request *req, struct hook_result *res)
{
	const char *id = hv_header(req, "webhook-id"), *ts = hv_header(req, "webhook-timestamp");
	const char *sigs = hv_header(req, "webhook-signature"), *p, *type;
	unsigned char want[HV_SHA256_LEN];
	bool match = false;
	int tried = 0;
	json_t *j;

	if (!id || !ts || !sigs)
		return hv_refuse(res, HOOK_UNSIGNED, "no webhook-id, webhook-timestamp or webhook-signature header");
	if (hv_check_timestamp(ts, req->now) != HOOK_OK)
		return hv_refuse(res, HOOK_STALE, "webhook-timestamp outside the replay window");
	const struct hv_part parts[] = {
		{ id, strlen(id) }, { ".", 1 }, { ts, strlen(ts) }, { ".", 1 }, { req->body, req->body_len },
	};
	for (p = sigs; *p && !match && tried < CANDIDATES_MAX;) {
		size_t len;

		p += strspn(p, " ");
		len = strcspn(p, " ");
		if (len == 0)
			break;
		if (len > 3 && strncmp(p, "v1,", 3) == 0 && hv_unbase64(p + 3, len - 3, want, sizeof(want))) {
			tried++;
			match = hv_mac_matches(route, "SHA256", parts, sizeof(parts) / sizeof(*parts), want, sizeof(want));
		}
		p += len;
	}
	if (!match)
		return hv_refuse(res, tried ? HOOK_BAD_SIGNATURE : HOOK_UNSIGNED,
				 tried ? "signature does not match" : "no v1,BASE64 signature");
	if (!hv_id_ok(id))
		return hv_refuse(res, HOOK_MALFORMED, "webhook-id is not a usable id");
	j = hv_json_object(req->body, req->body_len);
	if (!j)
		return hv_refuse(res, HOOK_MALFORMED, "body is not a JSON object");
	type = json_string_value(json_object_get(j, "type"));
	if (type && !hv_id_ok(type)) {
		json_decref(j);
		return hv_refuse(res, HOOK_MALFORMED, "type is not a usable word");
	}
	res->event_type = type ? xstrdup(type) : NULL;
	res->delivery_id = xstrdup(id);
	json_decref(j);
	return res->verdict = HOOK_OK;
}
