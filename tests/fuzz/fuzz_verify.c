/*
 * fuzz_verify: every webhook source's verifier (hooks/verify_*.c) through
 * hook_verify(), as fleet-hooksd calls it on a request it read. The input:
 *
 *   byte 0   the source (modulo the number of sources)
 *   byte 1   flags: 1 sign the request correctly (below), 2 hmac: base64
 *            (else hex), 4 datadog: Basic auth (else a header), 8 a second
 *            (grace) secret, 16 hmac: prefix "sha256="
 *   then     the path and query, one line; headers "Name: value", one a
 *            line, up to an empty line; the rest is the body (raw bytes).
 *
 * With flag 1 the harness signs the request as the sender would (libcrypto,
 * computed here, with the request's own timestamp and id headers when it
 * has them), so what the verifiers parse after the signature (JSON bodies,
 * Twilio's form parameters, delivery fields) is reached. Checks: a verdict
 * and a why always; a refusal carries nothing; an OK carries a usable
 * delivery id and its signature recomputes here under one of the route's
 * secrets (nothing unsigned gets through).
 */
#include <ctype.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "hooks/verify.h"

#define FAIL(what) do { fprintf(stderr, "fuzz_verify: %s\n", what); abort(); } while (0)
#define NOW ((time_t)1764600000)
#define H_MAX 32

static const unsigned char key1[] = "fuzz-key-current", key2[] = "fuzz-key-previous";

struct req {
	struct hook_header h[H_MAX + 4];
	char *owned[2 * H_MAX + 8];
	size_t n_owned;
	struct hook_request r;
};

static const char *header(const struct req *q, const char *name)
{
	for (size_t i = 0; i < q->r.n_headers; i++)
		if (strcasecmp(q->h[i].name, name) == 0)
			return q->h[i].value;
	return NULL;
}

static char *own(struct req *q, char *s)
{
	q->owned[q->n_owned++] = s;
	return s;
}

/* Put a header first, so it is the one found (a verifier reads the first of a name). */
static void prepend(struct req *q, const char *name, char *value)
{
	memmove(q->h + 1, q->h, q->r.n_headers * sizeof(*q->h));
	q->h[0].name = name;
	q->h[0].value = own(q, value);
	q->r.n_headers++;
}

static void hexify(const unsigned char *p, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", p[i]);
	out[2 * n] = '\0';
}

static char *b64(const unsigned char *p, size_t n)
{
	char *out = malloc(4 * ((n + 2) / 3) + 1);
	EVP_EncodeBlock((unsigned char *)out, p, (int)n);
	return out;
}

/* Decode exactly want bytes of padded base64 (here, by libcrypto); false otherwise. */
static bool unb64(const char *s, size_t len, unsigned char *out, size_t want)
{
	unsigned char buf[128];
	int n;

	if (len == 0 || len % 4 || len > 4 * ((sizeof(buf) + 2) / 3) - 4)
		return false;
	n = EVP_DecodeBlock(buf, (const unsigned char *)s, (int)len);
	if (n < 0)
		return false;
	n -= (s[len - 1] == '=') + (len > 1 && s[len - 2] == '=');
	if ((size_t)n != want)
		return false;
	memcpy(out, buf, want);
	return true;
}

static bool unhex(const char *s, size_t len, unsigned char *out, size_t want)
{
	if (len != 2 * want)
		return false;
	for (size_t i = 0; i < want; i++) {
		unsigned v;
		if (!isxdigit((unsigned char)s[2 * i]) || !isxdigit((unsigned char)s[2 * i + 1]) ||
		    sscanf(s + 2 * i, "%2x", &v) != 1)
			return false;
		out[i] = (unsigned char)v;
	}
	return true;
}

/* ---- Twilio's form parameters, decoded and sorted here (an independent reading) ---- */

struct param {
	char *name, *value;
	size_t nl, vl;
};

static int hexval(int c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static char *form_decode(const char *s, size_t len, size_t *out_len)
{
	char *out = malloc(len + 1);
	size_t n = 0;

	for (size_t i = 0; i < len; i++) {
		if (s[i] == '+') {
			out[n++] = ' ';
		} else if (s[i] == '%') {
			if (len - i < 3 || hexval(s[i + 1]) < 0 || hexval(s[i + 2]) < 0) {
				free(out);
				return NULL;
			}
			out[n++] = (char)(hexval(s[i + 1]) << 4 | hexval(s[i + 2]));
			i += 2;
		} else {
			out[n++] = s[i];
		}
	}
	*out_len = n;
	return out;
}

static int bcmp2(const char *a, size_t al, const char *b, size_t bl)
{
	int c = memcmp(a, b, al < bl ? al : bl);
	return c ? c : (al > bl) - (al < bl);
}

static int param_cmp(const void *x, const void *y)
{
	const struct param *a = x, *b = y;
	int c = bcmp2(a->name, a->nl, b->name, b->nl);
	return c ? c : bcmp2(a->value, a->vl, b->value, b->vl);
}

/* Twilio's HMAC-SHA1 of public_url (less trailing '/') + path + sorted name/value pairs; false if the form is bad. */
static bool twilio_mac(const unsigned char *key, size_t key_len, const char *base, const struct hook_request *r,
		       unsigned char *mac)
{
	struct param *p = NULL;
	size_t n = 0, start = 0, blen = strlen(base);
	const char *body = (const char *)r->body;
	bool good = true;
	unsigned int ml = 0;

	while (start < r->body_len && good) {
		const char *seg = body + start, *amp = memchr(seg, '&', r->body_len - start);
		size_t sl = amp ? (size_t)(amp - seg) : r->body_len - start;
		start += sl + 1;
		if (sl == 0)
			continue;
		const char *eq = memchr(seg, '=', sl);
		size_t nl = eq ? (size_t)(eq - seg) : sl;
		p = realloc(p, (n + 1) * sizeof(*p));
		p[n].name = form_decode(seg, nl, &p[n].nl);
		p[n].value = eq ? form_decode(eq + 1, sl - nl - 1, &p[n].vl) : form_decode("", 0, &p[n].vl);
		good = p[n].name && p[n].value;
		n++;
	}
	if (good) {
		HMAC_CTX *c = HMAC_CTX_new();
		while (blen > 0 && base[blen - 1] == '/')
			blen--;
		if (n)
			qsort(p, n, sizeof(*p), param_cmp);
		HMAC_Init_ex(c, key, (int)key_len, EVP_sha1(), NULL);
		HMAC_Update(c, (const unsigned char *)base, blen);
		HMAC_Update(c, (const unsigned char *)r->path_query, strlen(r->path_query));
		for (size_t i = 0; i < n; i++) {
			HMAC_Update(c, (const unsigned char *)p[i].name, p[i].nl);
			HMAC_Update(c, (const unsigned char *)p[i].value, p[i].vl);
		}
		HMAC_Final(c, mac, &ml);
		HMAC_CTX_free(c);
	}
	for (size_t i = 0; i < n; i++) {
		free(p[i].name);
		free(p[i].value);
	}
	free(p);
	return good;
}

/* HMAC-SHA256 of a + b + body. */
static void mac256(const unsigned char *key, size_t key_len, const char *a, const char *b, const struct hook_request *r,
		   unsigned char *mac)
{
	HMAC_CTX *c = HMAC_CTX_new();
	unsigned int ml = 0;

	HMAC_Init_ex(c, key, (int)key_len, EVP_sha256(), NULL);
	HMAC_Update(c, (const unsigned char *)a, strlen(a));
	HMAC_Update(c, (const unsigned char *)b, strlen(b));
	HMAC_Update(c, r->body, r->body_len);
	HMAC_Final(c, mac, &ml);
	HMAC_CTX_free(c);
}

/* What each source signs, under key: the MAC (sha256 or sha1) into mac; false when nothing can be signed. */
static bool expected(const struct hook_route *rt, const struct req *q, const unsigned char *key, size_t key_len,
		     unsigned char *mac)
{
	const char *ts, *id;
	char *a;

	switch (rt->source) {
	case HOOK_GITHUB:
	case HOOK_HMAC:
		mac256(key, key_len, "", "", &q->r, mac);
		return true;
	case HOOK_SLACK:
		if (!(ts = header(q, "X-Slack-Request-Timestamp")))
			return false;
		if (asprintf(&a, "v0:%s:", ts) < 0)
			abort();
		mac256(key, key_len, a, "", &q->r, mac);
		free(a);
		return true;
	case HOOK_STANDARD:
		if (!(ts = header(q, "webhook-timestamp")) || !(id = header(q, "webhook-id")))
			return false;
		if (asprintf(&a, "%s.%s.", id, ts) < 0)
			abort();
		mac256(key, key_len, a, "", &q->r, mac);
		free(a);
		return true;
	case HOOK_TWILIO:
		return twilio_mac(key, key_len, rt->public_url, &q->r, mac);
	default:
		return false;
	}
}

/* Add the headers a correct sender would (under key1). */
static void sign(const struct hook_route *rt, struct req *q)
{
	unsigned char mac[32];
	char hex[65], *s;

	if (rt->source == HOOK_SLACK && !header(q, "X-Slack-Request-Timestamp"))
		prepend(q, "X-Slack-Request-Timestamp", strdup("1764600000"));
	if (rt->source == HOOK_STANDARD && !header(q, "webhook-timestamp"))
		prepend(q, "webhook-timestamp", strdup("1764600000"));
	if (rt->source == HOOK_STANDARD && !header(q, "webhook-id"))
		prepend(q, "webhook-id", strdup("msg_fuzz"));
	if (rt->source == HOOK_DATADOG) {
		if (rt->datadog_auth == HOOK_DATADOG_HEADER) {
			prepend(q, rt->header, strdup((const char *)key1));
		} else {
			char *cred = b64(key1, sizeof(key1) - 1);
			if (asprintf(&s, "Basic %s", cred) < 0)
				abort();
			free(cred);
			prepend(q, "Authorization", s);
		}
		return;
	}
	if (!expected(rt, q, key1, sizeof(key1) - 1, mac))
		return;
	size_t ml = rt->source == HOOK_TWILIO ? 20 : 32;
	hexify(mac, ml, hex);
	switch (rt->source) {
	case HOOK_GITHUB:
		if (asprintf(&s, "sha256=%s", hex) < 0)
			abort();
		prepend(q, "X-Hub-Signature-256", s);
		break;
	case HOOK_SLACK:
		if (asprintf(&s, "v0=%s", hex) < 0)
			abort();
		prepend(q, "X-Slack-Signature", s);
		break;
	case HOOK_STANDARD: {
		char *b = b64(mac, ml);
		if (asprintf(&s, "v1,%s", b) < 0)
			abort();
		free(b);
		prepend(q, "webhook-signature", s);
		break;
	}
	case HOOK_TWILIO:
		prepend(q, "X-Twilio-Signature", b64(mac, ml));
		break;
	case HOOK_HMAC:
		if (asprintf(&s, "%s%s", rt->prefix ? rt->prefix : "", rt->encoding == HOOK_HEX ? hex : "") < 0)
			abort();
		if (rt->encoding == HOOK_BASE64) {
			char *b = b64(mac, ml), *t;
			if (asprintf(&t, "%s%s", s, b) < 0)
				abort();
			free(b);
			free(s);
			s = t;
		}
		prepend(q, rt->header, s);
		break;
	default:
		break;
	}
}

/* Does the request's signature (or credential) match one of the route's secrets, by this file's reading? */
static bool authentic(const struct hook_route *rt, const struct req *q)
{
	for (int k = 0; k < rt->n_secrets; k++) {
		const unsigned char *key = rt->secrets[k];
		size_t kl = rt->secret_lens[k], ml = rt->source == HOOK_TWILIO ? 20 : 32;
		unsigned char want[32], got[32];
		const char *v;

		if (rt->source == HOOK_DATADOG) {
			if (rt->datadog_auth == HOOK_DATADOG_HEADER) {
				v = header(q, rt->header);
				if (v && strlen(v) == kl && memcmp(v, key, kl) == 0)
					return true;
			} else if ((v = header(q, "Authorization")) && strncasecmp(v, "Basic ", 6) == 0) {
				unsigned char cred[64];
				v += 6 + strspn(v + 6, " ");
				if (unb64(v, strlen(v), cred, kl) && memcmp(cred, key, kl) == 0)
					return true;
			}
			continue;
		}
		if (!expected(rt, q, key, kl, want))
			continue;
		switch (rt->source) {
		case HOOK_GITHUB:
			v = header(q, "X-Hub-Signature-256");
			if (v && strncmp(v, "sha256=", 7) == 0 && unhex(v + 7, strlen(v + 7), got, ml) && !memcmp(got, want, ml))
				return true;
			break;
		case HOOK_SLACK:
			v = header(q, "X-Slack-Signature");
			if (v && strncmp(v, "v0=", 3) == 0 && unhex(v + 3, strlen(v + 3), got, ml) && !memcmp(got, want, ml))
				return true;
			break;
		case HOOK_TWILIO:
			v = header(q, "X-Twilio-Signature");
			if (v && unb64(v, strlen(v), got, ml) && !memcmp(got, want, ml))
				return true;
			break;
		case HOOK_HMAC: {
			size_t pl = rt->prefix ? strlen(rt->prefix) : 0;
			v = header(q, rt->header);
			if (!v || strncmp(v, rt->prefix ? rt->prefix : "", pl) != 0)
				break;
			v += pl;
			if ((rt->encoding == HOOK_HEX ? unhex(v, strlen(v), got, ml) : unb64(v, strlen(v), got, ml)) &&
			    !memcmp(got, want, ml))
				return true;
			break;
		}
		case HOOK_STANDARD:
			v = header(q, "webhook-signature");
			for (const char *p = v; p && *p;) {
				p += strspn(p, " ");
				size_t len = strcspn(p, " ");
				if (len > 3 && strncmp(p, "v1,", 3) == 0 && unb64(p + 3, len - 3, got, ml) && !memcmp(got, want, ml))
					return true;
				p += len;
			}
			break;
		default:
			break;
		}
	}
	return false;
}

static bool id_ok(const char *s)
{
	size_t n = s ? strlen(s) : 0;

	if (n == 0 || n > 256)
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] <= ' ' || (unsigned char)s[i] >= 0x7f)
			return false;
	return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct hook_route rt = { .name = "fuzz", .n_secrets = 1, .max_body = 1 << 20 };
	struct hook_result res;
	struct req q;
	const char *p, *end;
	uint8_t flags;

	if (size < 2)
		return 0;
	memset(&q, 0, sizeof(q));
	rt.source = (enum hook_source)(data[0] % HOOK_SOURCE__COUNT);
	flags = data[1];
	rt.secrets[0] = key1;
	rt.secret_lens[0] = sizeof(key1) - 1;
	if (flags & 8) {
		rt.secrets[1] = key2;
		rt.secret_lens[1] = sizeof(key2) - 1;
		rt.n_secrets = 2;
	}
	rt.encoding = flags & 2 ? HOOK_BASE64 : HOOK_HEX;
	rt.datadog_auth = flags & 4 ? HOOK_DATADOG_BASIC : HOOK_DATADOG_HEADER;
	rt.prefix = flags & 16 ? "sha256=" : NULL;
	rt.header = rt.source == HOOK_DATADOG ? "X-Token" : "X-Signature";
	rt.delivery_field = "id";
	rt.public_url = "https://hooks.example.com/base/";

	p = (const char *)data + 2;
	end = (const char *)data + size;
	/* The path: the first line. */
	const char *nl = memchr(p, '\n', (size_t)(end - p));
	size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
	q.r.method = "POST";
	q.r.path_query = own(&q, strndup(p, len));
	p = nl ? nl + 1 : end;
	/* Headers up to an empty line. */
	while (p < end && q.r.n_headers < H_MAX) {
		nl = memchr(p, '\n', (size_t)(end - p));
		len = nl ? (size_t)(nl - p) : (size_t)(end - p);
		if (len == 0) {
			p++;
			break;
		}
		const char *colon = memchr(p, ':', len);
		if (colon) {
			const char *v = colon + 1;
			while (v < p + len && *v == ' ')
				v++;
			q.h[q.r.n_headers].name = own(&q, strndup(p, (size_t)(colon - p)));
			q.h[q.r.n_headers].value = own(&q, strndup(v, (size_t)(p + len - v)));
			q.r.n_headers++;
		}
		p = nl ? nl + 1 : end;
	}
	q.r.headers = q.h;
	/* The body: a copy of exactly its bytes, so ASan sees a read past it. */
	q.r.body_len = (size_t)(end - p);
	q.r.body = (const unsigned char *)own(&q, q.r.body_len ? malloc(q.r.body_len) : NULL);
	if (q.r.body_len)
		memcpy((char *)q.r.body, p, q.r.body_len);
	q.r.now = NOW;
	if (flags & 1)
		sign(&rt, &q);

	hook_verify(&rt, &q.r, &res);
	if (getenv("FUZZ_VERIFY_DEBUG"))	/* to see what the seeds reach: verdict and why */
		fprintf(stderr, "fuzz_verify: source %d verdict %d: %s\n", rt.source, res.verdict, res.why);
	if (!res.why || res.verdict < HOOK_OK || res.verdict > HOOK_MALFORMED)
		FAIL("a result without a verdict or why");
	if (res.verdict == HOOK_OK) {
		if (!id_ok(res.delivery_id))
			FAIL("a verified delivery without a usable id");
		if ((res.event_type && !id_ok(res.event_type)) || (res.reply_body && !res.reply_type))
			FAIL("a verified delivery with an unusable type or reply");
		if (!authentic(&rt, &q))
			FAIL("a delivery verified whose signature does not recompute");
	} else if (res.delivery_id || res.event_type || res.reply_body || res.reply_type || res.no_run) {
		FAIL("a refusal that carries something");
	}
	hook_result_clear(&res);
	for (size_t i = 0; i < q.n_owned; i++)
		free(q.owned[i]);
	return 0;
}
