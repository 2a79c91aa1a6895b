/*
 * verify_common: what the per-source verifiers (hooks/verify_SOURCE.c)
 * share: header lookup, HMAC, constant-time comparison, signature decoding,
 * the replay window, bounded JSON and the checks on what ends up in a
 * result. Private to hooks/.
 */
#ifndef FLEET_HOOKS_VERIFY_COMMON_H
#define FLEET_HOOKS_VERIFY_COMMON_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "hooks/verify.h"

#define HV_SHA256_LEN 32
#define HV_SHA1_LEN 20
#define HV_MAC_MAX 64		/* room for any digest we use */
#define HV_ID_MAX 256		/* longest delivery id or event type we keep */
#define HV_JSON_DEPTH_MAX 64	/* deeper bodies are refused before jansson sees them */

/* The value of the first header named name (case-insensitive), or NULL. */
const char *hv_header(const struct hook_request *req, const char *name);

/* One piece of the data an HMAC covers. */
struct hv_part {
	const void *data;
	size_t len;
};
/*
 * HMAC over the concatenated parts with digest "SHA256" or "SHA1"; writes
 * the MAC to out (HV_MAC_MAX bytes) and returns its length, or 0 on a
 * libcrypto failure (the caller refuses the delivery).
 */
size_t hv_hmac(const char *digest, const unsigned char *key, size_t key_len,
	       const struct hv_part *parts, size_t n_parts, unsigned char *out);
/*
 * Does sig (sig_len bytes) equal the HMAC of the parts under any of the
 * route's secrets (the current one and, during a rotation, the one before)?
 */
bool hv_mac_matches(const struct hook_route *route, const char *digest,
		    const struct hv_part *parts, size_t n_parts, const unsigned char *sig, size_t sig_len);
/* SHA-256 of data into out (HV_SHA256_LEN bytes); false on a libcrypto failure. */
bool hv_sha256(const void *data, size_t len, unsigned char *out);
/* Equal bytes, compared in constant time for equal lengths (lengths are not secret here). */
bool hv_equal(const unsigned char *a, size_t a_len, const unsigned char *b, size_t b_len);
/*
 * Equal secrets without leaking where they differ or how long the expected
 * one is: both are hashed first and the hashes compared in constant time.
 */
bool hv_secret_equal(const void *a, size_t a_len, const void *b, size_t b_len);

/* Decode exactly want bytes of hex (either case) from s[0..len); false if it is anything else. */
bool hv_unhex(const char *s, size_t len, unsigned char *out, size_t want);
/* Decode exactly want bytes of padded standard base64 from s[0..len); false otherwise. */
bool hv_unbase64(const char *s, size_t len, unsigned char *out, size_t want);
/* Lower-case hex of len bytes; malloc'd. */
char *hv_hex(const unsigned char *data, size_t len);

/*
 * A Unix timestamp header (decimal digits only) within HOOK_REPLAY_WINDOW_S
 * of now either way: HOOK_OK, or HOOK_STALE (also for one that is no number).
 */
enum hook_verdict hv_check_timestamp(const char *ts, time_t now);

/* A string fit to be a delivery id or event type: 1..HV_ID_MAX printable ASCII, no spaces. */
bool hv_id_ok(const char *s);
/* A malloc'd copy of s if hv_id_ok(s), else NULL. */
char *hv_id_dup(const char *s);

/*
 * The body as a JSON object: depth-checked before parsing, duplicate keys
 * refused. NULL if it is not one. The caller json_decref()s it.
 */
json_t *hv_json_object(const unsigned char *body, size_t len);

/* Record a refusal, its verdict and a static why; returns the verdict. */
enum hook_verdict hv_refuse(struct hook_result *res, enum hook_verdict v, const char *why);
/* The route's usable secrets (non-empty, at most HOOK_SECRETS_MAX); 0 if it has none. */
int hv_n_secrets(const struct hook_route *route);

/* The per-source verifiers hook_verify() dispatches to; res is zeroed on entry; each returns res->verdict. */
enum hook_verdict hv_verify_github(const struct hook_route *route, const struct hook_request *req, struct hook_result *res);
enum hook_verdict hv_verify_slack(const struct hook_route *route, const struct hook_request *req, struct hook_result *res);
enum hook_verdict hv_verify_twilio(const struct hook_route *route, const struct hook_request *req, struct hook_result *res);
enum hook_verdict hv_verify_datadog(const struct hook_route *route, const struct hook_request *req, struct hook_result *res);
enum hook_verdict hv_verify_standard(const struct hook_route *route, const struct hook_request *req, struct hook_result *res);
enum hook_verdict hv_verify_hmac(const struct hook_route *route, const struct hook_request *req, struct hook_result *res);

#endif
