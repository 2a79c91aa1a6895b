/*
 * verify_datadog: DataDog signs nothing, so the route's secret is a shared
 * credential: the whole value of the route's header (header auth, e.g. a
 * custom header set in the webhook's "Custom Headers"), or "USER:PASSWORD"
 * from HTTP basic auth. Compared through hashes in constant time. The body
 * is then read as JSON and the delivery id is its top-level field named by
 * the route's delivery_field (a string or an integer).
 */
#include <inttypes.h>
#include <openssl/crypto.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/base64.h"
#include "common/util.h"
#include "hooks/verify_common.h"

#define BASIC "Basic "
#define CREDENTIALS_MAX 1024	/* longer Authorization headers are refused before decoding */

static bool secret_matches(const struct hook_route *route, const void *given, size_t len)
{
	bool match = false;

	for (int i = 0; i < hv_n_secrets(route); i++)
		match |= hv_secret_equal(given, len, route->secrets[i], route->secret_lens[i]);
	return match;
}

/* Check the credentials; HOOK_OK or a refusal. */
static enum hook_verdict check_credentials(const struct hook_route *route, const struct hook_request *req,
					   struct hook_result *res)
{
	const char *v;
	unsigned char *dec = NULL;
	size_t n = 0;
	bool match;

	if (route->datadog_auth == HOOK_DATADOG_HEADER) {
		if (!route->header || !*route->header)
			return hv_refuse(res, HOOK_BAD_SIGNATURE, "the route names no secret header");
		v = hv_header(req, route->header);
		if (!v)
			return hv_refuse(res, HOOK_UNSIGNED, "no secret header");
		return secret_matches(route, v, strlen(v)) ? HOOK_OK
							    : hv_refuse(res, HOOK_BAD_SIGNATURE, "secret header does not match");
	}
	v = hv_header(req, "Authorization");
	if (!v)
		return hv_refuse(res, HOOK_UNSIGNED, "no Authorization header");
	if (strncasecmp(v, BASIC, strlen(BASIC)) != 0)
		return hv_refuse(res, HOOK_UNSIGNED, "Authorization is not Basic");
	v += strlen(BASIC);
	v += strspn(v, " ");
	if (strlen(v) > CREDENTIALS_MAX || base64_decode(v, strlen(v), &dec, &n) < 0)
		return hv_refuse(res, HOOK_BAD_SIGNATURE, "Basic credentials are not base64");
	match = secret_matches(route, dec, n);
	OPENSSL_cleanse(dec, n);
	free(dec);
	return match ? HOOK_OK : hv_refuse(res, HOOK_BAD_SIGNATURE, "Basic credentials do not match");
}

enum hook_verdict hv_verify_datadog(const struct hook_route *route, const struct hook_request *req, struct hook_result *res)
{
	json_t *j, *field;

	if (check_credentials(route, req, res) != HOOK_OK)
		return res->verdict;
	if (!route->delivery_field || !*route->delivery_field)
		return hv_refuse(res, HOOK_MALFORMED, "the route names no delivery field");
	j = hv_json_object(req->body, req->body_len);
	if (!j)
		return hv_refuse(res, HOOK_MALFORMED, "body is not a JSON object");
	field = json_object_get(j, route->delivery_field);
	if (json_is_integer(field))
		res->delivery_id = xasprintf("%" JSON_INTEGER_FORMAT, json_integer_value(field));
	else
		res->delivery_id = hv_id_dup(json_string_value(field));
	json_decref(j);
	if (!res->delivery_id)
		return hv_refuse(res, HOOK_MALFORMED, "no usable delivery field in the body");
	return res->verdict = HOOK_OK;
}
