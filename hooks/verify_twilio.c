/*
 * verify_twilio: X-Twilio-Signature = base64 HMAC-SHA1 (key: the auth
 * token) of the full URL Twilio requested (the route's public_url, which
 * may carry a path, followed by the path and query as received) and then
 * every POST parameter's name and value, sorted by name (then value),
 * decoded from the form body. The parameters are part of what is signed,
 * so they are parsed (bounded) to check the signature, and read only after
 * it matched. The delivery is MessageSid or CallSid.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/util.h"
#include "hooks/verify_common.h"

#define PARAMS_MAX 1024	/* Twilio sends a few dozen */
#define FORM_TYPE "application/x-www-form-urlencoded"

struct param {
	char *name, *value;	/* decoded, NUL-terminated (and may hold NULs: the lengths count) */
	size_t name_len, value_len;
};

static int hexval(char c)
{
	if (c >= '0' && c <= '9') return c - '0';
	if (c >= 'a' && c <= 'f') return c - 'a' + 10;
	if (c >= 'A' && c <= 'F') return c - 'A' + 10;
	return -1;
}

/* Form-decode s[0..len) ('+' is a space, %XX a byte) into a malloc'd string; NULL if an escape is bad. */
static char *form_decode(const char *s, size_t len, size_t *out_len)
{
	char *out = xmalloc(len + 1);
	size_t n = 0;

	for (size_t i = 0; i < len; i++) {
		if (s[i] == '+') {
			out[n++] = ' ';
		} else if (s[i] == '%') {
			int hi = i + 2 < len ? hexval(s[i + 1]) : -1, lo = i + 2 < len ? hexval(s[i + 2]) : -1;
			if (hi < 0 || lo < 0) {
				free(out);
				return NULL;
			}
			out[n++] = (char)(hi << 4 | lo);
			i += 2;
		} else {
			out[n++] = s[i];
		}
	}
	out[n] = '\0';
	*out_len = n;
	return out;
}

static int bytes_cmp(const char *a, size_t a_len, const char *b, size_t b_len)
{
	int c = memcmp(a, b, a_len < b_len ? a_len : b_len);
	return c ? c : (a_len > b_len) - (a_len < b_len);
}

static int param_cmp(const void *x, const void *y)
{
	const struct param *a = x, *b = y;
	int c = bytes_cmp(a->name, a->name_len, b->name, b->name_len);
	return c ? c : bytes_cmp(a->value, a->value_len, b->value, b->value_len);
}

static void params_free(struct param *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(p[i].name);
		free(p[i].value);
	}
	free(p);
}

/* Split and decode a form body; false if it is malformed or has too many parameters. */
static bool parse_form(const char *body, size_t len, struct param **ret, size_t *n_ret)
{
	struct param *p = NULL;
	size_t n = 0, start = 0;

	while (start < len) {
		const char *seg = body + start, *amp = memchr(seg, '&', len - start);
		size_t seg_len = amp ? (size_t)(amp - seg) : len - start;
		start += seg_len + 1;
		if (seg_len == 0)
			continue;
		if (n == PARAMS_MAX)
			goto bad;
		const char *eq = memchr(seg, '=', seg_len);
		size_t name_len = eq ? (size_t)(eq - seg) : seg_len;
		p = xrealloc(p, (n + 1) * sizeof(*p));
		p[n].value = NULL;
		p[n].name = form_decode(seg, name_len, &p[n].name_len);
		if (p[n].name)
			p[n].value = eq ? form_decode(eq + 1, seg_len - name_len - 1, &p[n].value_len)
				       : form_decode("", 0, &p[n].value_len);
		n++;
		if (!p[n - 1].name || !p[n - 1].value)
			goto bad;
	}
	*ret = p;
	*n_ret = n;
	return true;
bad:
	params_free(p, n);
	return false;
}

/* The value of the parameter named name if it is a usable id (no NULs hidden in it), else NULL. */
static const char *param_id(const struct param *p, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(p[i].name, name) == 0 && p[i].name_len == strlen(name))
			return p[i].value_len == strlen(p[i].value) && hv_id_ok(p[i].value) ? p[i].value : NULL;
	return NULL;
}

enum hook_verdict hv_verify_twilio(const struct hook_route *route, const struct hook_request *req, struct hook_result *res)
{
	const char *sig = hv_header(req, "X-Twilio-Signature"), *ctype = hv_header(req, "Content-Type");
	const char *base = route->public_url, *id;
	unsigned char want[HV_SHA1_LEN];
	struct param *params = NULL;
	struct hv_part *parts;
	size_t n_params = 0, base_len, n_parts = 0;
	bool match;

	if (!sig)
		return hv_refuse(res, HOOK_UNSIGNED, "no X-Twilio-Signature header");
	if (!hv_unbase64(sig, strlen(sig), want, sizeof(want)))
		return hv_refuse(res, HOOK_BAD_SIGNATURE, "X-Twilio-Signature is not base64 of a SHA-1 HMAC");
	if (!base || !*base)
		return hv_refuse(res, HOOK_BAD_SIGNATURE, "the route has no public URL to check the signature with");
	/* Only a form body is signed (as its parameters): any other body would ride along unchecked. */
	if (req->body_len > 0) {
		if (!ctype || strncasecmp(ctype, FORM_TYPE, strlen(FORM_TYPE)) != 0 ||
		    !strchr("; \t", ctype[strlen(FORM_TYPE)]))
			return hv_refuse(res, HOOK_MALFORMED, "body is not application/x-www-form-urlencoded");
		if (!parse_form((const char *)req->body, req->body_len, &params, &n_params))
			return hv_refuse(res, HOOK_MALFORMED, "form body is malformed or too long");
	}
	/* An empty form leaves params NULL, which qsort may not be given (even for 0 elements). */
	if (n_params)
		qsort(params, n_params, sizeof(*params), param_cmp);

	/* "https://host/base" + "/hooks/NAME?query": the base's trailing slashes would double the path's. */
	base_len = strlen(base);
	while (base_len > 0 && base[base_len - 1] == '/')
		base_len--;
	parts = xmalloc((2 + 2 * n_params) * sizeof(*parts));
	parts[n_parts++] = (struct hv_part){ base, base_len };
	parts[n_parts++] = (struct hv_part){ req->path_query, strlen(req->path_query) };
	for (size_t i = 0; i < n_params; i++) {
		parts[n_parts++] = (struct hv_part){ params[i].name, params[i].name_len };
		parts[n_parts++] = (struct hv_part){ params[i].value, params[i].value_len };
	}
	match = hv_mac_matches(route, "SHA1", parts, n_parts, want, sizeof(want));
	free(parts);
	if (!match) {
		params_free(params, n_params);
		return hv_refuse(res, HOOK_BAD_SIGNATURE, "signature does not match");
	}

	if ((id = param_id(params, n_params, "MessageSid")))
		res->event_type = xstrdup("message");
	else if ((id = param_id(params, n_params, "CallSid")))
		res->event_type = xstrdup("call");
	if (id)
		res->delivery_id = xstrdup(id);
	params_free(params, n_params);
	if (!id)
		return hv_refuse(res, HOOK_MALFORMED, "no usable MessageSid or CallSid");
	return res->verdict = HOOK_OK;
}
