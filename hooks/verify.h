/*
 * verify: is a webhook delivery from the sender it claims, and what is it?
 * One function per source (hooks/verify_SOURCE.c), each over the raw body
 * before any parsing, comparing in constant time. Pure: no I/O, no global
 * state (a route's keyed HMAC contexts are its own, see struct
 * hook_mac_cache), libcrypto and jansson only, so the unprivileged listener process
 * (fleet-hooksd, built from listener/) runs it and unit tests call it directly.
 */
#ifndef FLEET_HOOKS_VERIFY_H
#define FLEET_HOOKS_VERIFY_H

#include <stdbool.h>
#include <stddef.h>
#include <time.h>

enum hook_source {
	HOOK_GITHUB,
	HOOK_SLACK,
	HOOK_TWILIO,
	HOOK_DATADOG,
	HOOK_STANDARD,	/* Standard Webhooks (webhook-id, webhook-timestamp, webhook-signature) */
	HOOK_HMAC,	/* generic HMAC-SHA256 in a configurable header */
	HOOK_SOURCE__COUNT,
};

/* "github", "slack", ...; "unknown" outside the enum. */
const char *hook_source_to_string(enum hook_source s);
/* The source named s, or -EINVAL. */
int hook_source_from_string(const char *s);

enum hook_encoding { HOOK_HEX, HOOK_BASE64 };
enum hook_datadog_auth { HOOK_DATADOG_HEADER, HOOK_DATADOG_BASIC };

#define HOOK_SECRETS_MAX 2	/* the current secret and, during a rotation's grace, the one before */
#define HOOK_REPLAY_WINDOW_S 300	/* Slack and Standard Webhooks: timestamps further off are refused */

/*
 * A route's keyed HMAC contexts, one per secret, made at the first check
 * and reset to their keyed state for each next one: keying a new context
 * per request (fetching HMAC and its digest by name) cost fleet-hooksd
 * about 2/3 of each check. Owned by the route set (hook_mac_cache_free);
 * a route without one (macs NULL) keys a new context for every check.
 */
struct hook_mac_cache;
struct hook_mac_cache *hook_mac_cache_new(void);
void hook_mac_cache_free(struct hook_mac_cache *c);

/* What the listener knows of one route (fleetd hands it over; see proto.h). */
struct hook_route {
	const char *name;		/* the route's name: the URL path is /hooks/NAME */
	enum hook_source source;
	/* Raw secret bytes (a whsec_ secret already base64-decoded); n_secrets >= 1. */
	const unsigned char *secrets[HOOK_SECRETS_MAX];
	size_t secret_lens[HOOK_SECRETS_MAX];
	int n_secrets;
	const char *header;		/* hmac: the signature header; datadog (header auth): the secret's header */
	enum hook_encoding encoding;	/* hmac */
	const char *prefix;		/* hmac: e.g. "sha256=", or NULL */
	enum hook_datadog_auth datadog_auth;
	const char *delivery_field;	/* datadog: the top-level JSON field that holds the delivery id */
	const char *public_url;		/* twilio: the base URL the sender was given (hooks_public_url) */
	long max_body;			/* the listener answers 413 past this many body bytes (verify ignores it) */
	struct hook_mac_cache *macs;	/* keyed contexts of secrets[] (may be NULL); only for these secrets */
};

/* One request as received (headers as sent; names compared case-insensitively). */
struct hook_header {
	const char *name, *value;
};
struct hook_request {
	const char *method;		/* "POST" */
	const char *path_query;		/* as requested, e.g. "/hooks/alerts?x=1" (twilio signs the full URL) */
	const struct hook_header *headers;
	size_t n_headers;
	const unsigned char *body;
	size_t body_len;
	time_t now;			/* for replay windows */
};

enum hook_verdict {
	HOOK_OK,		/* verified: queue it */
	HOOK_UNSIGNED,		/* signature or credentials missing -> 401 */
	HOOK_BAD_SIGNATURE,	/* wrong signature or credentials -> 401 */
	HOOK_STALE,		/* timestamp outside the replay window -> 401 */
	HOOK_MALFORMED,		/* verified or not, it cannot be understood (bad JSON where one is needed, no delivery id) -> 400 */
};

/* What a verified delivery is. Strings are malloc'd; hook_result_clear() frees them. */
struct hook_result {
	enum hook_verdict verdict;
	const char *why;	/* a static explanation of a refusal, for the log; never names a secret */
	char *delivery_id;	/* dedup key; never NULL when verdict is HOOK_OK */
	char *event_type;	/* github: "pull_request.opened" (event plus action) or "push"; slack: event.type; may be NULL */
	bool no_run;		/* answered and stored, but queues nothing: github ping, slack url_verification */
	char *reply_body;	/* what to answer instead of the default (slack's challenge), or NULL */
	char *reply_type;	/* its Content-Type, or NULL */
};

/* Verify req against route; always fills *res (verdict and why at least). */
void hook_verify(const struct hook_route *route, const struct hook_request *req, struct hook_result *res);
void hook_result_clear(struct hook_result *res);

#endif
