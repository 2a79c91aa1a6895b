/*
 * hooks/verify: every source. Each valid signature is computed by the
 * openssl CLI at test time over a string this file spells out by hand (never
 * by the code under test); then forgeries, missing headers, the second
 * (grace) secret, replay windows and their edges, bad bodies after a good
 * signature, and what a verified delivery is (id, type, no_run, reply).
 * Last, a fuzz loop: random bodies and headers, half of them correctly
 * signed (by libcrypto called from here) so the parsers behind the
 * signature see them too, never crash and keep the result's promises.
 */
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hooks/verify.h"
#include "../tap.h"

#define NOW ((time_t)1764600000)

/* ---- independent computation: the openssl CLI ----------------------------- */

static char *run(const char *cmd)
{
	FILE *f = popen(cmd, "r");
	char buf[4096];
	size_t n;

	if (!f)
		return NULL;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	if (pclose(f) != 0)
		return NULL;
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
		buf[--n] = '\0';
	return strdup(buf);
}

/* data into a fresh temporary file; its name in path (the caller unlinks it). */
static void to_file(const void *data, size_t len, char path[static 32])
{
	strcpy(path, "/tmp/hookvXXXXXX");
	int fd = mkstemp(path);
	if (fd < 0 || write(fd, data, len) != (ssize_t)len) {
		perror("temp file");
		exit(99);
	}
	close(fd);
}

static void hexify(const unsigned char *p, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", p[i]);
	out[2 * n] = '\0';
}

/* HMAC (digest "sha256" or "sha1") of data under key, by `openssl dgst`; hex or base64 ('h'/'b'). */
static char *ossl_hmac(const char *digest, const void *key, size_t key_len, const void *data, size_t len, char enc)
{
	char path[32], hexkey[256], cmd[1024], *out;

	to_file(data, len, path);
	hexify(key, key_len, hexkey);
	snprintf(cmd, sizeof(cmd), "openssl dgst -%s -mac HMAC -macopt hexkey:%s -binary %s | %s", digest, hexkey, path,
		 enc == 'h' ? "od -An -v -tx1 | tr -d ' \\n'" : "openssl base64 -A");
	out = run(cmd);
	unlink(path);
	/* The pipeline's status is its last command's: an empty MAC is openssl failing. */
	if (!out || !*out) {
		printf("Bail out! openssl failed: %s\n", cmd);
		exit(99);
	}
	return out;
}

static char *ossl_sha256_hex(const void *data, size_t len)
{
	char path[32], cmd[256], *out;

	to_file(data, len, path);
	snprintf(cmd, sizeof(cmd), "openssl dgst -sha256 -binary %s | od -An -v -tx1 | tr -d ' \\n'", path);
	out = run(cmd);
	unlink(path);
	return out;
}

static char *ossl_base64(const char *s)
{
	char path[32], cmd[256], *out;

	to_file(s, strlen(s), path);
	snprintf(cmd, sizeof(cmd), "openssl base64 -A -in %s", path);
	out = run(cmd);
	unlink(path);
	return out;
}

static char *cat2(const char *a, const char *b)
{
	char *s = malloc(strlen(a) + strlen(b) + 1);
	strcpy(s, a);
	strcat(s, b);
	return s;
}

/* ---- requests and routes ------------------------------------------------------ */

#define H_MAX 8
struct req {
	struct hook_header h[H_MAX];
	struct hook_request r;
};

static void req_init(struct req *q, const char *body, const char *path_query)
{
	memset(q, 0, sizeof(*q));
	q->r.method = "POST";
	q->r.path_query = path_query ? path_query : "/hooks/test";
	q->r.headers = q->h;
	q->r.body = (const unsigned char *)body;
	q->r.body_len = strlen(body);
	q->r.now = NOW;
}

static void req_header(struct req *q, const char *name, const char *value)
{
	q->h[q->r.n_headers].name = name;
	q->h[q->r.n_headers].value = value;
	q->r.n_headers++;
}

/*
 * The listener's routes keep keyed HMAC contexts (hook_mac_cache), reset
 * and reused for each check: the sources that sign with HMAC run a second
 * time with a cache on every route_of() route, so a context left by a match,
 * a mismatch or the other secret must give every later check the same answer.
 */
static struct hook_mac_cache *caches[256];
static size_t n_caches;
static bool with_cache;

static struct hook_route route_of(enum hook_source s, const char *secret, const char *old)
{
	struct hook_route r = { .name = "test", .source = s, .n_secrets = old ? 2 : 1 };

	if (with_cache && n_caches < sizeof(caches) / sizeof(*caches))
		r.macs = caches[n_caches++] = hook_mac_cache_new();

	r.secrets[0] = (const unsigned char *)secret;
	r.secret_lens[0] = strlen(secret);
	if (old) {
		r.secrets[1] = (const unsigned char *)old;
		r.secret_lens[1] = strlen(old);
	}
	return r;
}

static enum hook_verdict verdict(const struct hook_route *route, const struct req *q)
{
	struct hook_result res;

	hook_verify(route, &q->r, &res);
	enum hook_verdict v = res.verdict;
	if (v != HOOK_OK && res.delivery_id)
		v = (enum hook_verdict)-1;	/* a refusal must carry nothing */
	hook_result_clear(&res);
	return v;
}

/* ---- GitHub ---------------------------------------------------------------------- */

static void github_req(struct req *q, const char *body, const char *sig, const char *event)
{
	req_init(q, body, NULL);
	if (sig)
		req_header(q, "x-hub-signature-256", sig);	/* lower case: names are case-insensitive */
	req_header(q, "X-GitHub-Event", event);
	req_header(q, "X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958");
}

static char *github_sig(const char *key, const char *body)
{
	char *hex = ossl_hmac("sha256", key, strlen(key), body, strlen(body), 'h');
	char *s = cat2("sha256=", hex);
	free(hex);
	return s;
}

static void test_github(void)
{
	const char *body = "{\"action\":\"opened\",\"number\":7,\"pull_request\":{\"title\":\"x\"}}";
	struct hook_route route = route_of(HOOK_GITHUB, "new-secret", "old-secret");
	struct hook_result res;
	struct req q;
	char *sig = github_sig("new-secret", body), *old = github_sig("old-secret", body);
	char *other = github_sig("someone-else", body);

	github_req(&q, body, sig, "pull_request");
	hook_verify(&route, &q.r, &res);
	is_int(res.verdict, HOOK_OK, "github: valid delivery verified (%s)", res.why);
	is_str(res.event_type, "pull_request.opened", "github: event type is event plus action");
	is_str(res.delivery_id, "72d3162e-cc78-11e3-81ab-4c9367dc0958", "github: delivery id from X-GitHub-Delivery");
	ok(!res.no_run && !res.reply_body, "github: a pull request runs, with the default answer");
	hook_result_clear(&res);

	github_req(&q, body, old, "pull_request");
	is_int(verdict(&route, &q), HOOK_OK, "github: the grace (previous) secret is accepted");
	github_req(&q, body, other, "pull_request");
	is_int(verdict(&route, &q), HOOK_BAD_SIGNATURE, "github: another key's signature refused");
	struct hook_route single = route_of(HOOK_GITHUB, "new-secret", NULL);
	github_req(&q, body, old, "pull_request");
	is_int(verdict(&single, &q), HOOK_BAD_SIGNATURE, "github: the old secret refused once the grace is over");
	github_req(&q, "{\"action\":\"closed\",\"number\":7,\"pull_request\":{\"title\":\"x\"}}", sig, "pull_request");
	is_int(verdict(&route, &q), HOOK_BAD_SIGNATURE, "github: a changed body refused");
	github_req(&q, body, NULL, "pull_request");
	is_int(verdict(&route, &q), HOOK_UNSIGNED, "github: no signature header: unsigned");
	github_req(&q, body, sig + strlen("sha256="), "pull_request");
	is_int(verdict(&route, &q), HOOK_BAD_SIGNATURE, "github: signature without sha256= refused");
	char *trunc = strndup(sig, strlen(sig) - 2);
	github_req(&q, body, trunc, "pull_request");
	is_int(verdict(&route, &q), HOOK_BAD_SIGNATURE, "github: truncated signature refused");
	free(trunc);

	const char *ping = "{\"zen\":\"Keep it logically awesome.\",\"hook_id\":12345}";
	char *ping_sig = github_sig("new-secret", ping);
	github_req(&q, ping, ping_sig, "ping");
	hook_verify(&route, &q.r, &res);
	ok(res.verdict == HOOK_OK && res.no_run, "github: ping verified, stored, runs nothing");
	is_str(res.event_type, "ping", "github: ping's event type");
	hook_result_clear(&res);

	const char *push = "{\"ref\":\"refs/heads/main\",\"commits\":[{\"id\":\"abc\"}]}";
	char *push_sig = github_sig("new-secret", push);
	github_req(&q, push, push_sig, "push");
	hook_verify(&route, &q.r, &res);
	ok(res.verdict == HOOK_OK && !res.no_run, "github: push verified");
	is_str(res.event_type, "push", "github: no action: the event alone");
	hook_result_clear(&res);

	const char *bad = "{\"action\":\"opened\",";
	char *bad_sig = github_sig("new-secret", bad);
	github_req(&q, bad, bad_sig, "pull_request");
	is_int(verdict(&route, &q), HOOK_MALFORMED, "github: malformed JSON after a good signature: malformed");
	const char *dup = "{\"action\":\"opened\",\"action\":\"closed\"}";
	char *dup_sig = github_sig("new-secret", dup);
	github_req(&q, dup, dup_sig, "pull_request");
	is_int(verdict(&route, &q), HOOK_MALFORMED, "github: duplicate keys (ambiguous action) refused");
	const char *arr = "[1,2]";
	char *arr_sig = github_sig("new-secret", arr);
	github_req(&q, arr, arr_sig, "pull_request");
	is_int(verdict(&route, &q), HOOK_MALFORMED, "github: a JSON array is no event");

	/* Nesting of a body that is parsed (it has an action): 64 objects deep is parsed, 65 refused before jansson sees it. */
	char deep[1024];
	for (int depth = 64; depth <= 65; depth++) {
		size_t n = (size_t)sprintf(deep, "{\"action\":\"opened\",\"a\":");
		for (int i = 1; i < depth; i++)
			n += (size_t)sprintf(deep + n, "{\"a\":");
		n += (size_t)sprintf(deep + n, "1");
		for (int i = 0; i < depth; i++)
			deep[n++] = '}';
		deep[n] = '\0';
		char *deep_sig = github_sig("new-secret", deep);
		github_req(&q, deep, deep_sig, "pull_request");
		is_int(verdict(&route, &q), depth == 64 ? HOOK_OK : HOOK_MALFORMED, "github: JSON %d deep %s", depth,
		       depth == 64 ? "accepted" : "refused");
		free(deep_sig);
	}

	/*
	 * A body that cannot hold an action (neither "action" nor a \u escape in it) is not parsed: the type is the
	 * header's, the body must still be braced like one object; one that may hold one is parsed, escapes and all.
	 */
	static const struct { const char *body, *event, *type; enum hook_verdict v; const char *what; } unparsed[] = {
		{ "{\"ref\":\"refs/heads/main\",\"transaction\":\"x\"}", "push", "push", HOOK_OK,
		  "no \"action\" key: not parsed, the event alone" },
		{ " \n{\"zen\":\"x\"}\r\n", "push", "push", HOOK_OK, "whitespace around the braces" },
		{ "{\"a\":1,}", "push", "push", HOOK_OK, "not parsed: what is between the braces is the sender's" },
		{ "{\"\\u0061ction\":\"opened\"}", "pull_request", "pull_request.opened", HOOK_OK,
		  "an action key written with a \\u escape is parsed and read" },
		{ "{\"title\":\"caf\\u00e9\",\"action\":\"closed\"}", "issues", "issues.closed", HOOK_OK,
		  "an action beside an escape" },
		{ "{\"t\":\"\\u00e9\",\"t\":1}", "push", NULL, HOOK_MALFORMED, "a \\u escape: parsed, duplicate keys refused" },
		{ "{\"m\":\"a\\\\\",\"action\":\"synchronize\"}", "pull_request", "pull_request.synchronize", HOOK_OK,
		  "an action after an escaped backslash" },
		{ "{\"m\":\"\\\\u\",\"x\":1}\"action\"", "push", NULL, HOOK_MALFORMED,
		  "\"action\" after the object: parsed, refused" },
		{ "{\"m\":\"x\"}\"actio", "push", NULL, HOOK_MALFORMED, "a cut \"action\" at the end: braces checked" },
		{ "payload=%7B%22ref%22%3A%22x%22%7D", "push", NULL, HOOK_MALFORMED, "the form encoding refused" },
		{ "[{\"ref\":\"x\"}]", "push", NULL, HOOK_MALFORMED, "an array refused" },
		{ "", "push", NULL, HOOK_MALFORMED, "an empty body refused" },
		{ " { ", "push", NULL, HOOK_MALFORMED, "one brace refused" },
	};
	for (size_t i = 0; i < sizeof(unparsed) / sizeof(*unparsed); i++) {
		char *s = github_sig("new-secret", unparsed[i].body);
		github_req(&q, unparsed[i].body, s, unparsed[i].event);
		hook_verify(&route, &q.r, &res);
		is_int(res.verdict, unparsed[i].v, "github: %s", unparsed[i].what);
		if (unparsed[i].type)
			is_str(res.event_type, unparsed[i].type, "github: %s: its type", unparsed[i].what);
		hook_result_clear(&res);
		free(s);
	}

	req_init(&q, body, NULL);
	req_header(&q, "X-Hub-Signature-256", sig);
	req_header(&q, "X-GitHub-Event", "pull_request");
	is_int(verdict(&route, &q), HOOK_MALFORMED, "github: no X-GitHub-Delivery: malformed");
	free(sig), free(old), free(other), free(ping_sig), free(push_sig), free(bad_sig), free(dup_sig), free(arr_sig);
}

/* ---- Slack ------------------------------------------------------------------------- */

static char *slack_sig(const char *key, const char *ts, const char *body)
{
	char base[4096];
	snprintf(base, sizeof(base), "v0:%s:%s", ts, body);
	char *hex = ossl_hmac("sha256", key, strlen(key), base, strlen(base), 'h');
	char *s = cat2("v0=", hex);
	free(hex);
	return s;
}

static void slack_req(struct req *q, const char *body, const char *sig, const char *ts)
{
	req_init(q, body, NULL);
	if (sig)
		req_header(q, "X-Slack-Signature", sig);
	if (ts)
		req_header(q, "X-Slack-Request-Timestamp", ts);
}

/* Verdict of a body signed (with key) at NOW+offset. */
static enum hook_verdict slack_at(const struct hook_route *route, const char *key, const char *body, long offset)
{
	char ts[32];
	struct req q;

	snprintf(ts, sizeof(ts), "%lld", (long long)NOW + offset);
	char *sig = slack_sig(key, ts, body);
	slack_req(&q, body, sig, ts);
	enum hook_verdict v = verdict(route, &q);
	free(sig);
	return v;
}

static void test_slack(void)
{
	const char *body = "{\"token\":\"t\",\"type\":\"event_callback\",\"event_id\":\"Ev0PV52K21\","
			   "\"event\":{\"type\":\"app_mention\",\"text\":\"<@U1> triage INC-4\"}}";
	struct hook_route route = route_of(HOOK_SLACK, "8f742231b10e8888abcd99yyyzzz85a5", "previous");
	struct hook_result res;
	struct req q;
	char ts[32];

	snprintf(ts, sizeof(ts), "%lld", (long long)NOW);
	char *sig = slack_sig("8f742231b10e8888abcd99yyyzzz85a5", ts, body);
	slack_req(&q, body, sig, ts);
	hook_verify(&route, &q.r, &res);
	is_int(res.verdict, HOOK_OK, "slack: valid event verified (%s)", res.why);
	is_str(res.delivery_id, "Ev0PV52K21", "slack: delivery id is event_id");
	is_str(res.event_type, "app_mention", "slack: event type is event.type");
	ok(!res.no_run && !res.reply_body, "slack: an event runs");
	hook_result_clear(&res);

	const char *k = "8f742231b10e8888abcd99yyyzzz85a5";
	is_int(slack_at(&route, "previous", body, 0), HOOK_OK, "slack: the grace secret is accepted");
	is_int(slack_at(&route, "unknown", body, 0), HOOK_BAD_SIGNATURE, "slack: a wrong secret refused");
	is_int(slack_at(&route, k, body, -HOOK_REPLAY_WINDOW_S), HOOK_OK, "slack: exactly 5 minutes old accepted");
	is_int(slack_at(&route, k, body, -HOOK_REPLAY_WINDOW_S - 1), HOOK_STALE, "slack: 5 minutes and 1 s old: stale");
	is_int(slack_at(&route, k, body, HOOK_REPLAY_WINDOW_S), HOOK_OK, "slack: exactly 5 minutes ahead accepted");
	is_int(slack_at(&route, k, body, HOOK_REPLAY_WINDOW_S + 1), HOOK_STALE, "slack: 5 minutes and 1 s ahead: stale");
	is_int(slack_at(&route, k, body, -86400), HOOK_STALE, "slack: a day old: stale");

	/* The timestamp is signed: a replay under a fresh timestamp does not verify. */
	char old_ts[32];
	snprintf(old_ts, sizeof(old_ts), "%lld", (long long)NOW - 3600);
	char *old_sig = slack_sig(k, old_ts, body);
	slack_req(&q, body, old_sig, ts);
	is_int(verdict(&route, &q), HOOK_BAD_SIGNATURE, "slack: an old signature under a fresh timestamp refused");
	slack_req(&q, body, sig, NULL);
	is_int(verdict(&route, &q), HOOK_UNSIGNED, "slack: no timestamp: unsigned");
	slack_req(&q, body, NULL, ts);
	is_int(verdict(&route, &q), HOOK_UNSIGNED, "slack: no signature: unsigned");
	slack_req(&q, body, sig, "17646e0000");
	is_int(verdict(&route, &q), HOOK_STALE, "slack: a timestamp that is no number refused");

	const char *challenge = "{\"token\":\"Jhj5dZrVaK7ZwHHjRyZWjbDl\",\"challenge\":"
				"\"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P\",\"type\":\"url_verification\"}";
	char *csig = slack_sig(k, ts, challenge), *chash = ossl_sha256_hex(challenge, strlen(challenge));
	slack_req(&q, challenge, csig, ts);
	hook_verify(&route, &q.r, &res);
	ok(res.verdict == HOOK_OK && res.no_run, "slack: url_verification verified, runs nothing");
	is_str(res.reply_body, "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P", "slack: answers the challenge");
	is_str(res.reply_type, "text/plain", "slack: as text/plain");
	is_str(res.delivery_id, chash, "slack: the challenge's delivery id is the body's SHA-256");
	hook_result_clear(&res);
	slack_req(&q, challenge, sig, ts);
	is_int(verdict(&route, &q), HOOK_BAD_SIGNATURE, "slack: an unsigned challenge is not answered");

	const char *bad = "{\"type\":\"event_callback\",\"event_id\":";
	char *bsig = slack_sig(k, ts, bad);
	slack_req(&q, bad, bsig, ts);
	is_int(verdict(&route, &q), HOOK_MALFORMED, "slack: malformed JSON after a good signature");
	const char *noid = "{\"type\":\"event_callback\",\"event\":{\"type\":\"message\"}}";
	char *nsig = slack_sig(k, ts, noid);
	slack_req(&q, noid, nsig, ts);
	is_int(verdict(&route, &q), HOOK_MALFORMED, "slack: no event_id: malformed");
	free(sig), free(old_sig), free(csig), free(chash), free(bsig), free(nsig);
}

/* ---- Twilio ---------------------------------------------------------------------- */

static void test_twilio(void)
{
	/* Sent in another order, percent-encoded; signed sorted and decoded, after the full URL. */
	const char *body = "To=%2B18005551212&From=%2B12349013030&CallSid=CA1234567890ABCDE&Digits=1234"
			   "&Caller=%2B12349013030&Body=hello+world%21";
	const char *signed_str = "https://fleet.example.com/bots/hooks/phone?foo=1&bar=2"
				 "Bodyhello world!CallSidCA1234567890ABCDECaller+12349013030Digits1234"
				 "From+12349013030To+18005551212";
	struct hook_route route = route_of(HOOK_TWILIO, "12345", "67890");
	struct hook_result res;
	struct req q;
	char *sig = ossl_hmac("sha1", "12345", 5, signed_str, strlen(signed_str), 'b');
	char *old = ossl_hmac("sha1", "67890", 5, signed_str, strlen(signed_str), 'b');

	route.public_url = "https://fleet.example.com/bots/";	/* its trailing slash does not double */
#define TWILIO(b, s, ctype) do { \
		req_init(&q, b, "/hooks/phone?foo=1&bar=2"); \
		if (s) req_header(&q, "X-Twilio-Signature", s); \
		req_header(&q, "Content-Type", ctype); \
	} while (0)
	TWILIO(body, sig, "application/x-www-form-urlencoded; charset=utf-8");
	hook_verify(&route, &q.r, &res);
	is_int(res.verdict, HOOK_OK, "twilio: valid call verified: URL with path and query, sorted params (%s)", res.why);
	is_str(res.delivery_id, "CA1234567890ABCDE", "twilio: delivery id is CallSid");
	is_str(res.event_type, "call", "twilio: a call");
	hook_result_clear(&res);
	TWILIO(body, sig, "application/x-www-form-urlencoded-not");
	is_int(verdict(&route, &q), HOOK_MALFORMED, "twilio: a content type that only starts like a form refused");
	TWILIO(body, old, "Application/X-WWW-Form-Urlencoded ;charset=utf-8");
	is_int(verdict(&route, &q), HOOK_OK, "twilio: the grace auth token is accepted");
	TWILIO(body, NULL, "application/x-www-form-urlencoded");
	is_int(verdict(&route, &q), HOOK_UNSIGNED, "twilio: no signature: unsigned");
	TWILIO("To=%2B18005551212&From=%2B12349013030&CallSid=CA1234567890ABCDE&Digits=9999"
	       "&Caller=%2B12349013030&Body=hello+world%21", sig, "application/x-www-form-urlencoded");
	is_int(verdict(&route, &q), HOOK_BAD_SIGNATURE, "twilio: a changed parameter refused");
	TWILIO(body, sig, "application/x-www-form-urlencoded");
	q.r.path_query = "/hooks/phone?foo=1&bar=3";
	is_int(verdict(&route, &q), HOOK_BAD_SIGNATURE, "twilio: a changed query refused");
	route.public_url = "https://evil.example.com/bots";
	TWILIO(body, sig, "application/x-www-form-urlencoded");
	is_int(verdict(&route, &q), HOOK_BAD_SIGNATURE, "twilio: another public URL refused");
	route.public_url = "https://fleet.example.com/bots";
	TWILIO(body, sig, "application/json");
	is_int(verdict(&route, &q), HOOK_MALFORMED, "twilio: a body that is not a form is refused (it would be unsigned)");
	TWILIO("To=%2&CallSid=CA1", sig, "application/x-www-form-urlencoded");
	is_int(verdict(&route, &q), HOOK_MALFORMED, "twilio: a bad percent escape refused");

	const char *sms = "MessageSid=SM0123456789abcdef&Body=INC-4+down&From=%2B15550001111&Body=%C3%A9t%C3%A9";
	const char *sms_signed = "https://fleet.example.com/bots/hooks/phone?foo=1&bar=2"
				 "BodyINC-4 downBody\xc3\xa9t\xc3\xa9" "From+15550001111MessageSidSM0123456789abcdef";
	char *ssig = ossl_hmac("sha1", "12345", 5, sms_signed, strlen(sms_signed), 'b');
	TWILIO(sms, ssig, "application/x-www-form-urlencoded");
	hook_verify(&route, &q.r, &res);
	is_int(res.verdict, HOOK_OK, "twilio: SMS with a repeated parameter (values sorted) verified (%s)", res.why);
	is_str(res.delivery_id, "SM0123456789abcdef", "twilio: delivery id is MessageSid");
	is_str(res.event_type, "message", "twilio: a message");
	hook_result_clear(&res);

	const char *nosid = "Body=hi";
	const char *nosid_signed = "https://fleet.example.com/bots/hooks/phone?foo=1&bar=2Bodyhi";
	char *nsig = ossl_hmac("sha1", "12345", 5, nosid_signed, strlen(nosid_signed), 'b');
	TWILIO(nosid, nsig, "application/x-www-form-urlencoded");
	is_int(verdict(&route, &q), HOOK_MALFORMED, "twilio: signed but no MessageSid or CallSid: malformed");
	route.public_url = NULL;
	TWILIO(body, sig, "application/x-www-form-urlencoded");
	is_int(verdict(&route, &q), HOOK_BAD_SIGNATURE, "twilio: a route without a public URL verifies nothing");
#undef TWILIO
	free(sig), free(old), free(ssig), free(nsig);
}

/* ---- DataDog ------------------------------------------------------------------- */

static void test_datadog(void)
{
	const char *body = "{\"id\":\"7318926413\",\"title\":\"[Triggered] CPU high\",\"alert_type\":\"error\"}";
	struct hook_route route = route_of(HOOK_DATADOG, "tok-Current-1", "tok-Previous-0");
	struct hook_result res;
	struct req q;

	route.datadog_auth = HOOK_DATADOG_HEADER;
	route.header = "X-Fleet-Token";
	route.delivery_field = "id";
	req_init(&q, body, NULL);
	req_header(&q, "x-fleet-token", "tok-Current-1");
	hook_verify(&route, &q.r, &res);
	is_int(res.verdict, HOOK_OK, "datadog: header secret verified (%s)", res.why);
	is_str(res.delivery_id, "7318926413", "datadog: delivery id from the route's field");
	hook_result_clear(&res);
	req_init(&q, body, NULL);
	req_header(&q, "X-Fleet-Token", "tok-Previous-0");
	is_int(verdict(&route, &q), HOOK_OK, "datadog: the grace secret is accepted");
	req_init(&q, body, NULL);
	req_header(&q, "X-Fleet-Token", "tok-Current-2");
	is_int(verdict(&route, &q), HOOK_BAD_SIGNATURE, "datadog: a wrong secret refused");
	req_init(&q, body, NULL);
	req_header(&q, "X-Fleet-Token", "tok-Current-");
	is_int(verdict(&route, &q), HOOK_BAD_SIGNATURE, "datadog: a prefix of the secret refused");
	req_init(&q, body, NULL);
	req_header(&q, "X-Other", "tok-Current-1");
	is_int(verdict(&route, &q), HOOK_UNSIGNED, "datadog: no secret header: unsigned");

	const char *num = "{\"id\":42,\"title\":\"x\"}";
	req_init(&q, num, NULL);
	req_header(&q, "X-Fleet-Token", "tok-Current-1");
	hook_verify(&route, &q.r, &res);
	is_str(res.delivery_id, "42", "datadog: an integer delivery field");
	hook_result_clear(&res);
	req_init(&q, "{\"title\":\"x\"}", NULL);
	req_header(&q, "X-Fleet-Token", "tok-Current-1");
	is_int(verdict(&route, &q), HOOK_MALFORMED, "datadog: no delivery field: malformed");
	req_init(&q, "{\"id\":\"1\",", NULL);
	req_header(&q, "X-Fleet-Token", "tok-Current-1");
	is_int(verdict(&route, &q), HOOK_MALFORMED, "datadog: malformed JSON after good credentials");

	struct hook_route basic = route_of(HOOK_DATADOG, "datadog:pa55:word", NULL);
	basic.datadog_auth = HOOK_DATADOG_BASIC;
	basic.delivery_field = "id";
	char *good = ossl_base64("datadog:pa55:word"), *bad = ossl_base64("datadog:pa55:wore");
	char *good_h = cat2("Basic ", good), *bad_h = cat2("basic ", bad);
	req_init(&q, body, NULL);
	req_header(&q, "Authorization", good_h);
	is_int(verdict(&basic, &q), HOOK_OK, "datadog: basic auth verified");
	req_init(&q, body, NULL);
	req_header(&q, "Authorization", bad_h);
	is_int(verdict(&basic, &q), HOOK_BAD_SIGNATURE, "datadog: wrong basic password refused");
	req_init(&q, body, NULL);
	req_header(&q, "Authorization", "Bearer datadog:pa55:word");
	is_int(verdict(&basic, &q), HOOK_UNSIGNED, "datadog: not Basic: unsigned");
	req_init(&q, body, NULL);
	req_header(&q, "Authorization", "Basic !!!!");
	is_int(verdict(&basic, &q), HOOK_BAD_SIGNATURE, "datadog: Basic that is not base64 refused");
	req_init(&q, body, NULL);
	is_int(verdict(&basic, &q), HOOK_UNSIGNED, "datadog: no Authorization: unsigned");
	free(good), free(bad), free(good_h), free(bad_h);
}

/* ---- Standard Webhooks ------------------------------------------------------------- */

static const unsigned char std_key[] = "\x31\xf2\x90\xf6\xbf\x06\x29\x8a\xab\x4f\x08\xd4\x3c\x3f\x08\x2c"
				       "\xf6\x48\xa3\x62\xda\x2d\xa4\xb0";

static char *std_sig(const unsigned char *key, size_t key_len, const char *id, const char *ts, const char *body)
{
	char base[4096];
	snprintf(base, sizeof(base), "%s.%s.%s", id, ts, body);
	char *b64 = ossl_hmac("sha256", key, key_len, base, strlen(base), 'b');
	char *s = cat2("v1,", b64);
	free(b64);
	return s;
}

static void std_req(struct req *q, const char *body, const char *id, const char *ts, const char *sig)
{
	req_init(q, body, NULL);
	if (id)
		req_header(q, "webhook-id", id);
	if (ts)
		req_header(q, "Webhook-Timestamp", ts);
	if (sig)
		req_header(q, "webhook-signature", sig);
}

static enum hook_verdict std_at(const struct hook_route *route, const char *body, long offset)
{
	char ts[32];
	struct req q;

	snprintf(ts, sizeof(ts), "%lld", (long long)NOW + offset);
	char *sig = std_sig(std_key, sizeof(std_key) - 1, "msg_1", ts, body);
	std_req(&q, body, "msg_1", ts, sig);
	enum hook_verdict v = verdict(route, &q);
	free(sig);
	return v;
}

static void test_standard(void)
{
	const char *body = "{\"type\":\"invoice.paid\",\"timestamp\":\"2026-12-01T14:40:00Z\",\"data\":{\"id\":1}}";
	struct hook_route route = { .name = "std", .source = HOOK_STANDARD, .n_secrets = 2 };
	struct hook_result res;
	struct req q;
	char ts[32];

	route.secrets[0] = std_key;
	route.secret_lens[0] = sizeof(std_key) - 1;
	route.secrets[1] = (const unsigned char *)"older";
	route.secret_lens[1] = 5;
	snprintf(ts, sizeof(ts), "%lld", (long long)NOW);
	char *sig = std_sig(std_key, sizeof(std_key) - 1, "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", ts, body);
	std_req(&q, body, "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", ts, sig);
	hook_verify(&route, &q.r, &res);
	is_int(res.verdict, HOOK_OK, "standard: valid delivery verified (%s)", res.why);
	is_str(res.delivery_id, "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", "standard: delivery id is webhook-id");
	is_str(res.event_type, "invoice.paid", "standard: event type is the body's type");
	hook_result_clear(&res);

	char *old = std_sig((const unsigned char *)"older", 5, "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", ts, body);
	std_req(&q, body, "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", ts, old);
	is_int(verdict(&route, &q), HOOK_OK, "standard: the grace secret is accepted");
	char *other = std_sig((const unsigned char *)"nobody", 6, "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", ts, body);
	std_req(&q, body, "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", ts, other);
	is_int(verdict(&route, &q), HOOK_BAD_SIGNATURE, "standard: a wrong secret refused");
	std_req(&q, body, "msg_other", ts, sig);
	is_int(verdict(&route, &q), HOOK_BAD_SIGNATURE, "standard: the id is signed: another id refused");

	/* Several signatures, space-separated; other versions skipped. */
	char *several = malloc(strlen(other) + strlen(sig) + 64);
	sprintf(several, "v1a,c2lnbmF0dXJl %s  %s", other, sig);
	std_req(&q, body, "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", ts, several);
	is_int(verdict(&route, &q), HOOK_OK, "standard: the matching one of several signatures accepted");
	std_req(&q, body, "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", ts, "v1a,c2lnbmF0dXJl");
	is_int(verdict(&route, &q), HOOK_UNSIGNED, "standard: no v1 signature: unsigned");
	std_req(&q, body, "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", ts, NULL);
	is_int(verdict(&route, &q), HOOK_UNSIGNED, "standard: no signature header: unsigned");
	std_req(&q, body, NULL, ts, sig);
	is_int(verdict(&route, &q), HOOK_UNSIGNED, "standard: no webhook-id: unsigned");

	is_int(std_at(&route, body, 0), HOOK_OK, "standard: now accepted");
	is_int(std_at(&route, body, -HOOK_REPLAY_WINDOW_S), HOOK_OK, "standard: exactly 5 minutes old accepted");
	is_int(std_at(&route, body, -HOOK_REPLAY_WINDOW_S - 1), HOOK_STALE, "standard: 5 minutes and 1 s old: stale");
	is_int(std_at(&route, body, HOOK_REPLAY_WINDOW_S), HOOK_OK, "standard: exactly 5 minutes ahead accepted");
	is_int(std_at(&route, body, HOOK_REPLAY_WINDOW_S + 1), HOOK_STALE, "standard: 5 minutes and 1 s ahead: stale");

	const char *bad = "{\"type\":";
	char *bsig = std_sig(std_key, sizeof(std_key) - 1, "msg_3", ts, bad);
	std_req(&q, bad, "msg_3", ts, bsig);
	is_int(verdict(&route, &q), HOOK_MALFORMED, "standard: malformed JSON after a good signature");

	/* The specification's own example (standard-webhooks, its test vector). */
	struct hook_route vec = { .name = "vec", .source = HOOK_STANDARD, .n_secrets = 1 };
	static const char spec_key_b64[] = "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "printf %%s %s | openssl base64 -d -A | od -An -v -tx1 | tr -d ' \\n'", spec_key_b64);
	char *hexkey = run(cmd);
	unsigned char key[64];
	size_t key_len = hexkey ? strlen(hexkey) / 2 : 0;
	for (size_t i = 0; i < key_len && i < sizeof(key); i++)
		sscanf(hexkey + 2 * i, "%2hhx", &key[i]);
	vec.secrets[0] = key;
	vec.secret_lens[0] = key_len;
	std_req(&q, "{\"test\": 2432232314}", "msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265330",
		"v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
	q.r.now = 1614265330;
	hook_verify(&vec, &q.r, &res);
	is_int(res.verdict, HOOK_OK, "standard: the specification's test vector verifies (%s)", res.why);
	hook_result_clear(&res);
	free(hexkey), free(sig), free(old), free(other), free(several), free(bsig);
}

/* ---- generic HMAC ------------------------------------------------------------------ */

static void test_hmac(void)
{
	const char *body = "not json at all: the generic source never parses the body\n";
	struct hook_route route = route_of(HOOK_HMAC, "generic-key", "generic-old");
	struct hook_result res;
	struct req q;
	char *hex = ossl_hmac("sha256", "generic-key", 11, body, strlen(body), 'h');
	char *b64 = ossl_hmac("sha256", "generic-key", 11, body, strlen(body), 'b');
	char *old = ossl_hmac("sha256", "generic-old", 11, body, strlen(body), 'h');
	char *hash = ossl_sha256_hex(body, strlen(body));
	char *prefixed = cat2("sha256=", hex);

	route.header = "X-Signature";
	route.encoding = HOOK_HEX;
	route.prefix = "sha256=";
	req_init(&q, body, NULL);
	req_header(&q, "x-signature", prefixed);
	hook_verify(&route, &q.r, &res);
	is_int(res.verdict, HOOK_OK, "hmac: hex with a prefix verified (%s)", res.why);
	is_str(res.delivery_id, hash, "hmac: no id header: delivery id is the body's SHA-256");
	ok(res.event_type == NULL, "hmac: no event type");
	hook_result_clear(&res);
	req_init(&q, body, NULL);
	req_header(&q, "X-Signature", hex);
	is_int(verdict(&route, &q), HOOK_BAD_SIGNATURE, "hmac: the prefix is required when the route has one");

	route.prefix = NULL;
	req_init(&q, body, NULL);
	req_header(&q, "X-Signature", old);
	is_int(verdict(&route, &q), HOOK_OK, "hmac: hex without prefix, the grace secret accepted");
	req_init(&q, body, NULL);
	req_header(&q, "X-Signature", b64);
	is_int(verdict(&route, &q), HOOK_BAD_SIGNATURE, "hmac: base64 where hex is configured refused");

	route.encoding = HOOK_BASE64;
	route.header = "Signature";
	req_init(&q, body, NULL);
	req_header(&q, "Signature", b64);
	req_header(&q, "X-Webhook-Id", "evt-000123");
	hook_verify(&route, &q.r, &res);
	is_int(res.verdict, HOOK_OK, "hmac: base64 verified");
	is_str(res.delivery_id, hash, "hmac: an unsigned X-Webhook-Id does not choose the delivery id: the body's hash");
	hook_result_clear(&res);
	req_init(&q, body, NULL);
	req_header(&q, "Webhook-Id", "evt-9");
	req_header(&q, "Signature", b64);
	hook_verify(&route, &q.r, &res);
	is_str(res.delivery_id, hash, "hmac: a replay under another Webhook-Id is the same delivery");
	hook_result_clear(&res);
	req_init(&q, body, NULL);
	req_header(&q, "Signature", b64);
	req_header(&q, "Webhook-Id", "two words");
	is_int(verdict(&route, &q), HOOK_OK, "hmac: an id header that is no id is ignored, not refused");
	req_init(&q, "another body", NULL);
	req_header(&q, "Signature", b64);
	is_int(verdict(&route, &q), HOOK_BAD_SIGNATURE, "hmac: another body refused");
	req_init(&q, body, NULL);
	is_int(verdict(&route, &q), HOOK_UNSIGNED, "hmac: no signature header: unsigned");
	free(hex), free(b64), free(old), free(hash), free(prefixed);
}

/* ---- routes that cannot verify anything ---------------------------------------------- */

static void test_routes(void)
{
	const char *body = "{}";
	char *hex = ossl_hmac("sha256", "k", 1, body, 2, 'h');
	struct hook_route route = route_of(HOOK_HMAC, "k", NULL);
	struct req q;

	route.header = "X-Sig";
	req_init(&q, body, NULL);
	req_header(&q, "X-Sig", hex);
	is_int(verdict(&route, &q), HOOK_OK, "routes: a good route verifies");
	route.n_secrets = 0;
	is_int(verdict(&route, &q), HOOK_BAD_SIGNATURE, "routes: no secret: nothing verifies");
	route.n_secrets = 3;
	is_int(verdict(&route, &q), HOOK_BAD_SIGNATURE, "routes: more secrets than the interface holds: refused");
	/* The openssl CLI takes no empty key: libcrypto, called from here, signs with one. */
	unsigned char mac[32];
	unsigned int mac_len = 0;
	char empty_hex[65];
	HMAC(EVP_sha256(), "", 0, (const unsigned char *)body, 2, mac, &mac_len);
	hexify(mac, mac_len, empty_hex);
	struct hook_route empty = route_of(HOOK_HMAC, "", NULL);
	empty.header = "X-Sig";
	req_init(&q, body, NULL);
	req_header(&q, "X-Sig", empty_hex);
	is_int(verdict(&empty, &q), HOOK_BAD_SIGNATURE, "routes: an empty secret (anyone could sign) is never used");
	route = route_of((enum hook_source)99, "k", NULL);
	is_int(verdict(&route, &q), HOOK_BAD_SIGNATURE, "routes: an unknown source verifies nothing");
	free(hex);
}

/* ---- fuzz ---------------------------------------------------------------------------- */

static uint64_t rng_state;
static uint32_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (uint32_t)rng_state;
}

static const char *const fragments[] = {
	"{", "}", "[", "]", "\"", ":", ",", "\\", "\"type\"", "\"action\"", "\"event_id\"", "\"event\"",
	"\"url_verification\"", "\"challenge\"", "\"id\"", "1", "-0", "1e999", "null", "true", "\"x\"", "\"\\u0000\"",
	"&", "=", "%", "%2", "%zz", "+", "MessageSid", "CallSid", "\xff", "\x00", " ", "\n", "v1,", "sha256=", "=",
};

static size_t random_body(char *buf, size_t cap)
{
	size_t n = 0, parts = rnd() % 64;

	if (rnd() % 8 == 0) {	/* deep nesting */
		size_t depth = rnd() % 200;
		for (size_t i = 0; i < depth && n + 2 < cap; i++)
			buf[n++] = rnd() % 2 ? '[' : '{';
	}
	for (size_t i = 0; i < parts; i++) {
		if (rnd() % 4 == 0) {
			if (n < cap)
				buf[n++] = (char)rnd();
		} else {
			const char *f = fragments[rnd() % (sizeof(fragments) / sizeof(*fragments))];
			size_t len = f[0] ? strlen(f) : 1;
			if (n + len <= cap)
				memcpy(buf + n, f, len), n += len;
		}
	}
	return n;
}

static void random_value(char *buf, size_t cap)
{
	size_t n = rnd() % (cap - 1);
	for (size_t i = 0; i < n; i++)
		buf[i] = (char)(1 + rnd() % 255);
	buf[n] = '\0';
}

/* Sign body as source would (by libcrypto here), so the verifier's parsing runs. */
static void fuzz_sign(enum hook_source s, const unsigned char *key, size_t key_len, const char *id, const char *ts,
		      const char *body, size_t len, char *out, size_t cap)
{
	unsigned char mac[64];
	unsigned int mac_len = 0;
	char hex[129];
	unsigned char *base = malloc(len + 512);
	size_t blen = 0;

	if (s == HOOK_SLACK)
		blen = (size_t)sprintf((char *)base, "v0:%s:", ts);
	else if (s == HOOK_STANDARD)
		blen = (size_t)sprintf((char *)base, "%s.%s.", id, ts);
	memcpy(base + blen, body, len);
	blen += len;
	HMAC(EVP_sha256(), key, (int)key_len, base, blen, mac, &mac_len);
	free(base);
	hexify(mac, mac_len, hex);
	if (s == HOOK_STANDARD) {
		unsigned char b64[128];
		EVP_EncodeBlock(b64, mac, (int)mac_len);
		snprintf(out, cap, "v1,%s", b64);
	} else {
		snprintf(out, cap, "%s%s", s == HOOK_SLACK ? "v0=" : s == HOOK_GITHUB ? "sha256=" : "", hex);
	}
}

static void test_fuzz(void)
{
	static const char *const names[] = {
		"X-Hub-Signature-256", "X-GitHub-Event", "X-GitHub-Delivery", "X-Slack-Signature",
		"X-Slack-Request-Timestamp", "X-Twilio-Signature", "Content-Type", "Authorization", "X-Token",
		"webhook-id", "webhook-timestamp", "webhook-signature", "X-Sig", "X-Webhook-Id", "Webhook-Id",
	};
	const unsigned char key[] = "fuzz-key";
	long iterations = 20000, promises_broken = 0, verified = 0;
	const char *env = getenv("FLEET_FUZZ_SEED");
	char ts[32], id[] = "msg_fuzz";
	static char body[4096], values[H_MAX][300], sig[256];

	rng_state = env ? strtoull(env, NULL, 10) : 0x5eed1234abcdULL;
	printf("# fuzz seed %llu (FLEET_FUZZ_SEED repeats a run)\n", (unsigned long long)rng_state);
	snprintf(ts, sizeof(ts), "%lld", (long long)NOW);
	for (long it = 0; it < iterations; it++) {
		enum hook_source s = (enum hook_source)(rnd() % HOOK_SOURCE__COUNT);
		struct hook_route route = { .name = "fuzz", .source = s, .n_secrets = 1 };
		struct hook_result res;
		struct req q;
		size_t len = random_body(body, sizeof(body) - 1);

		body[len] = '\0';
		route.secrets[0] = key;
		route.secret_lens[0] = sizeof(key) - 1;
		route.header = s == HOOK_DATADOG ? "X-Token" : "X-Sig";
		route.datadog_auth = rnd() % 2 ? HOOK_DATADOG_HEADER : HOOK_DATADOG_BASIC;
		route.delivery_field = "id";
		route.public_url = "https://h.example/p";
		route.encoding = HOOK_HEX;
		req_init(&q, "", "/hooks/fuzz?q=1");
		q.r.body = (const unsigned char *)body;
		q.r.body_len = len;
		size_t nh = rnd() % (H_MAX - 4);
		for (size_t i = 0; i < nh; i++) {
			random_value(values[i], sizeof(values[i]));
			req_header(&q, names[rnd() % (sizeof(names) / sizeof(*names))], values[i]);
		}
		if (rnd() % 2) {	/* a correct signature and the headers that go with it */
			fuzz_sign(s, key, sizeof(key) - 1, id, ts, body, len, sig, sizeof(sig));
			req_header(&q, s == HOOK_GITHUB ? "X-Hub-Signature-256" : s == HOOK_SLACK ? "X-Slack-Signature"
				       : s == HOOK_STANDARD ? "webhook-signature" : s == HOOK_DATADOG ? "X-Token" : "X-Sig",
				   s == HOOK_DATADOG ? "fuzz-key" : sig);
			req_header(&q, s == HOOK_SLACK ? "X-Slack-Request-Timestamp" : "webhook-timestamp", ts);
			req_header(&q, s == HOOK_GITHUB ? "X-GitHub-Event" : "webhook-id", rnd() % 2 ? "push" : id);
			req_header(&q, "X-GitHub-Delivery", "d-1");
		}
		hook_verify(&route, &q.r, &res);
		bool kept = res.why != NULL && res.verdict >= HOOK_OK && res.verdict <= HOOK_MALFORMED;
		if (res.verdict == HOOK_OK) {
			verified++;
			kept = kept && res.delivery_id && *res.delivery_id && strlen(res.delivery_id) <= 256;
		} else {
			kept = kept && !res.delivery_id && !res.event_type && !res.reply_body && !res.no_run;
		}
		if (!kept && promises_broken++ < 5)
			printf("# broken promise: source %d iteration %ld verdict %d\n", s, it, res.verdict);
		hook_result_clear(&res);
	}
	is_int(promises_broken, 0, "fuzz: %ld random requests, no crash, every result keeps its promises", iterations);
	ok(verified > 0, "fuzz: some signed random bodies got past the signature (%ld), so the parsers were reached", verified);
}

int main(void)
{
	test_github();
	test_slack();
	test_twilio();
	test_datadog();
	test_standard();
	test_hmac();
	test_routes();
	test_fuzz();
	printf("# again, each route with its keyed HMAC contexts reused (hook_mac_cache)\n");
	with_cache = true;
	test_github();
	test_slack();
	test_twilio();
	test_hmac();
	test_routes();
	ok(n_caches > 0, "the second pass used %zu caches", n_caches);
	while (n_caches)
		hook_mac_cache_free(caches[--n_caches]);
	return tap_done();
}
