/*
 * verify_hmac: any sender that signs the raw body with HMAC-SHA256 and puts
 * the result, hex or base64, after an optional prefix ("sha256="), in a
 * header the route names. The body is never parsed: it can be anything.
 * The delivery id is always the hex SHA-256 of the body: only the body is
 * signed, so an id header (X-Webhook-Id) would let someone who saw one
 * signed delivery resend it under new ids and get a run each time. A
 * resend of the same body is a duplicate (docs/webhooks.md says so).
 */
#include <string.h>

#include "common/util.h"
#include "hooks/verify_common.h"

enum hook_verdict hv_verify_hmac(const struct hook_route *route, const struct hook_request *req, struct hook_result *res)
{
	const char *sig;
	unsigned char want[HV_SHA256_LEN], digest[HV_SHA256_LEN];
	struct hv_part body = { req->body, req->body_len };
	size_t prefix_len = route->prefix ? strlen(route->prefix) : 0;
	bool decoded;

	if (!route->header || !*route->header)
		return hv_refuse(res, HOOK_BAD_SIGNATURE, "the route names no signature header");
	sig = hv_header(req, route->header);
	if (!sig)
		return hv_refuse(res, HOOK_UNSIGNED, "no signature header");
	if (prefix_len && strncmp(sig, route->prefix, prefix_len) != 0)
		return hv_refuse(res, HOOK_BAD_SIGNATURE, "signature lacks the route's prefix");
	sig += prefix_len;
	decoded = route->encoding == HOOK_HEX ? hv_unhex(sig, strlen(sig), want, sizeof(want))
					      : hv_unbase64(sig, strlen(sig), want, sizeof(want));
	if (!decoded)
		return hv_refuse(res, HOOK_BAD_SIGNATURE, "signature is not an encoded SHA-256 HMAC");
	if (!hv_mac_matches(route, "SHA256", &body, 1, want, sizeof(want)))
		return hv_refuse(res, HOOK_BAD_SIGNATURE, "signature does not match");

	if (!hv_sha256(req->body, req->body_len, digest))
		return hv_refuse(res, HOOK_MALFORMED, "cannot hash the body");
	res->delivery_id = hv_hex(digest, sizeof(digest));
	return res->verdict = HOOK_OK;
}
