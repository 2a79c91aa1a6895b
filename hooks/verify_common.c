/*
 * verify_common: hook_verify()'s dispatch to the sources and the helpers
 * they share (verify_common.h). Not verify.c: verify.h is a module of its
 * own, and a verify.c including verify_common.h (which includes verify.h)
 * would be an include cycle to tests/lint/layers.sh.
 */
#include "hooks/verify.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/base64.h"
#include "common/util.h"
#include "hooks/verify_common.h"

const char *hv_header(const struct hook_request *req, const char *name)
{
	for (size_t i = 0; i < req->n_headers; i++)
		if (req->headers[i].name && req->headers[i].value && strcasecmp(req->headers[i].name, name) == 0)
			return req->headers[i].value;
	return NULL;
}

size_t hv_hmac(const char *digest, const unsigned char *key, size_t key_len,
	       const struct hv_part *parts, size_t n_parts, unsigned char *out)
{
	EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
	EVP_MAC_CTX *ctx = mac ? EVP_MAC_CTX_new(mac) : NULL;
	OSSL_PARAM params[] = {
		OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)digest, 0),
		OSSL_PARAM_construct_end(),
	};
	size_t n = 0;
	bool good = ctx && EVP_MAC_init(ctx, key, key_len, params) == 1;

	for (size_t i = 0; good && i < n_parts; i++)
		good = EVP_MAC_update(ctx, parts[i].data, parts[i].len) == 1;
	if (!good || EVP_MAC_final(ctx, out, &n, HV_MAC_MAX) != 1)
		n = 0;
	EVP_MAC_CTX_free(ctx);
	EVP_MAC_free(mac);
	return n;
}

struct hook_mac_cache {
	EVP_MAC_CTX *ctx[HOOK_SECRETS_MAX];	/* keyed with the route's secrets[i], or NULL */
	const char *digest[HOOK_SECRETS_MAX];	/* the digest it was keyed for (a verifier's literal) */
};

struct hook_mac_cache *hook_mac_cache_new(void)
{
	return xcalloc(1, sizeof(struct hook_mac_cache));
}

void hook_mac_cache_free(struct hook_mac_cache *c)
{
	if (!c)
		return;
	for (int i = 0; i < HOOK_SECRETS_MAX; i++)
		EVP_MAC_CTX_free(c->ctx[i]);	/* HMAC's free cleanses its key state */
	free(c);
}

/* A context keyed with key for digest, or NULL on a libcrypto failure. */
static EVP_MAC_CTX *keyed_ctx(const char *digest, const unsigned char *key, size_t key_len)
{
	EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
	EVP_MAC_CTX *ctx = mac ? EVP_MAC_CTX_new(mac) : NULL;
	OSSL_PARAM params[] = {
		OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)digest, 0),
		OSSL_PARAM_construct_end(),
	};

	EVP_MAC_free(mac);	/* the context holds its own reference */
	if (ctx && EVP_MAC_init(ctx, key, key_len, params) != 1) {
		EVP_MAC_CTX_free(ctx);
		ctx = NULL;
	}
	return ctx;
}

/* The MAC of the parts with a keyed ctx, which is left to be reset by the next use; 0 on failure. */
static size_t mac_parts(EVP_MAC_CTX *ctx, const struct hv_part *parts, size_t n_parts, unsigned char *out)
{
	size_t n = 0;
	bool good = true;

	for (size_t i = 0; good && i < n_parts; i++)
		good = EVP_MAC_update(ctx, parts[i].data, parts[i].len) == 1;
	if (!good || EVP_MAC_final(ctx, out, &n, HV_MAC_MAX) != 1)
		n = 0;
	return n;
}

/* hv_hmac with secret i of route, through its cached context when it has a cache. */
static size_t route_hmac(const struct hook_route *route, int i, const char *digest,
			 const struct hv_part *parts, size_t n_parts, unsigned char *out)
{
	struct hook_mac_cache *c = route->macs;

	if (!c)
		return hv_hmac(digest, route->secrets[i], route->secret_lens[i], parts, n_parts, out);
	if (c->ctx[i] && strcmp(c->digest[i], digest) == 0) {
		/* A NULL key: back to the state right after keying, whatever the last use left. */
		if (EVP_MAC_init(c->ctx[i], NULL, 0, NULL) != 1) {
			EVP_MAC_CTX_free(c->ctx[i]);
			c->ctx[i] = NULL;
		}
	} else {
		EVP_MAC_CTX_free(c->ctx[i]);
		c->ctx[i] = keyed_ctx(digest, route->secrets[i], route->secret_lens[i]);
		c->digest[i] = digest;
	}
	return c->ctx[i] ? mac_parts(c->ctx[i], parts, n_parts, out) : 0;
}

bool hv_mac_matches(const struct hook_route *route, const char *digest,
		    const struct hv_part *parts, size_t n_parts, const unsigned char *sig, size_t sig_len)
{
	unsigned char mac[HV_MAC_MAX];
	bool match = false;

	for (int i = 0; i < hv_n_secrets(route); i++) {
		size_t n = route_hmac(route, i, digest, parts, n_parts, mac);
		match |= n > 0 && hv_equal(mac, n, sig, sig_len);
	}
	OPENSSL_cleanse(mac, sizeof(mac));
	return match;
}

bool hv_sha256(const void *data, size_t len, unsigned char *out)
{
	unsigned int n = 0;

	return EVP_Digest(data, len, out, &n, EVP_sha256(), NULL) == 1 && n == HV_SHA256_LEN;
}

bool hv_equal(const unsigned char *a, size_t a_len, const unsigned char *b, size_t b_len)
{
	return a_len == b_len && a_len > 0 && CRYPTO_memcmp(a, b, a_len) == 0;
}

bool hv_secret_equal(const void *a, size_t a_len, const void *b, size_t b_len)
{
	unsigned char ha[HV_SHA256_LEN], hb[HV_SHA256_LEN];

	if (!hv_sha256(a, a_len, ha) || !hv_sha256(b, b_len, hb))
		return false;
	/* Both hashes are always compared, so timing says nothing about the lengths. */
	return (CRYPTO_memcmp(ha, hb, sizeof(ha)) == 0) & (a_len == b_len);
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9') return c - '0';
	if (c >= 'a' && c <= 'f') return c - 'a' + 10;
	if (c >= 'A' && c <= 'F') return c - 'A' + 10;
	return -1;
}

bool hv_unhex(const char *s, size_t len, unsigned char *out, size_t want)
{
	if (len != 2 * want)
		return false;
	for (size_t i = 0; i < want; i++) {
		int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return false;
		out[i] = (unsigned char)(hi << 4 | lo);
	}
	return true;
}

bool hv_unbase64(const char *s, size_t len, unsigned char *out, size_t want)
{
	unsigned char *dec = NULL;
	size_t n = 0;
	bool good;

	/* A signature is short: anything much longer is refused before decoding. */
	if (len > (want + 2) / 3 * 4 || base64_decode(s, len, &dec, &n) < 0)
		return false;
	good = n == want;
	if (good)
		memcpy(out, dec, want);
	free(dec);
	return good;
}

char *hv_hex(const unsigned char *data, size_t len)
{
	static const char digits[] = "0123456789abcdef";
	char *out = xmalloc(2 * len + 1);

	for (size_t i = 0; i < len; i++) {
		out[2 * i] = digits[data[i] >> 4];
		out[2 * i + 1] = digits[data[i] & 15];
	}
	out[2 * len] = '\0';
	return out;
}

enum hook_verdict hv_check_timestamp(const char *ts, time_t now)
{
	long long t = 0;
	size_t n = strlen(ts);

	/* At most 12 digits: no overflow, and any real timestamp fits. */
	if (n == 0 || n > 12 || strspn(ts, "0123456789") != n)
		return HOOK_STALE;
	for (size_t i = 0; i < n; i++)
		t = t * 10 + (ts[i] - '0');
	if (t > (long long)now + HOOK_REPLAY_WINDOW_S || t < (long long)now - HOOK_REPLAY_WINDOW_S)
		return HOOK_STALE;
	return HOOK_OK;
}

bool hv_id_ok(const char *s)
{
	size_t n = 0;

	if (!s)
		return false;
	for (; s[n]; n++)
		if (n >= HV_ID_MAX || (unsigned char)s[n] <= 0x20 || (unsigned char)s[n] >= 0x7f)
			return false;
	return n > 0;
}

char *hv_id_dup(const char *s)
{
	return hv_id_ok(s) ? xstrdup(s) : NULL;
}

/* Nesting of [ and { outside strings never deeper than max (the body is not trusted yet as JSON). */
static bool json_depth_ok(const unsigned char *p, size_t len, int max)
{
	int depth = 0;
	bool in_string = false, escaped = false;

	for (size_t i = 0; i < len; i++) {
		unsigned char c = p[i];
		if (in_string) {
			if (escaped)
				escaped = false;
			else if (c == '\\')
				escaped = true;
			else if (c == '"')
				in_string = false;
		} else if (c == '"') {
			in_string = true;
		} else if (c == '[' || c == '{') {
			if (++depth > max)
				return false;
		} else if ((c == ']' || c == '}') && depth > 0) {
			depth--;
		}
	}
	return true;
}

json_t *hv_json_object(const unsigned char *body, size_t len)
{
	json_error_t err;
	json_t *j;

	if (!json_depth_ok(body, len, HV_JSON_DEPTH_MAX))
		return NULL;
	j = json_loadb((const char *)body, len, JSON_REJECT_DUPLICATES, &err);
	if (j && !json_is_object(j)) {
		json_decref(j);
		j = NULL;
	}
	return j;
}

enum hook_verdict hv_refuse(struct hook_result *res, enum hook_verdict v, const char *why)
{
	res->verdict = v;
	res->why = why;
	return v;
}

int hv_n_secrets(const struct hook_route *route)
{
	if (route->n_secrets < 1 || route->n_secrets > HOOK_SECRETS_MAX)
		return 0;
	/* An empty secret would make anyone's HMAC valid: a route with one is unusable. */
	for (int i = 0; i < route->n_secrets; i++)
		if (!route->secrets[i] || route->secret_lens[i] == 0)
			return 0;
	return route->n_secrets;
}

void hook_verify(const struct hook_route *route, const struct hook_request *req_in, struct hook_result *res)
{
	struct hook_request copy = *req_in, *req = &copy;

	memset(res, 0, sizeof(*res));
	if (!req->body && req->body_len > 0) {
		hv_refuse(res, HOOK_MALFORMED, "no body");
		return;
	}
	/* Verifiers always get a body pointer, and a path to sign, even when there is none. */
	if (!req->body)
		req->body = (const unsigned char *)"";
	if (!req->path_query)
		req->path_query = "";
	if (hv_n_secrets(route) == 0) {
		hv_refuse(res, HOOK_BAD_SIGNATURE, "the route has no usable secret");
		return;
	}
	switch (route->source) {
	case HOOK_GITHUB: hv_verify_github(route, req, res); break;
	case HOOK_SLACK: hv_verify_slack(route, req, res); break;
	case HOOK_TWILIO: hv_verify_twilio(route, req, res); break;
	case HOOK_DATADOG: hv_verify_datadog(route, req, res); break;
	case HOOK_STANDARD: hv_verify_standard(route, req, res); break;
	case HOOK_HMAC: hv_verify_hmac(route, req, res); break;
	default: hv_refuse(res, HOOK_BAD_SIGNATURE, "unknown source"); break;
	}
	/* A verifier that refused keeps nothing; one that accepted always names the delivery. */
	if (res->verdict == HOOK_OK && !res->delivery_id)
		hv_refuse(res, HOOK_MALFORMED, "no delivery id");
	if (res->verdict != HOOK_OK) {
		const char *why = res->why;
		enum hook_verdict v = res->verdict;
		hook_result_clear(res);
		hv_refuse(res, v, why);
	} else if (!res->why) {
		res->why = "verified";
	}
}

void hook_result_clear(struct hook_result *res)
{
	free(res->delivery_id);
	free(res->event_type);
	free(res->reply_body);
	free(res->reply_type);
	memset(res, 0, sizeof(*res));
}
