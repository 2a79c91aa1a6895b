/*
 * hooks: webhook routes and their subscribers, as fleet keeps them. A route
 * (a name, a source, a secret and how the source signs) is made by its
 * first subscriber and goes with its last; rotating its secret keeps the
 * old one working for a grace period. This file also hands the listener
 * every live route (hooks_route_table) and prunes old events daily.
 * Secrets never appear in a message this file makes.
 */
#ifndef FLEET_CORE_HOOKS_H
#define FLEET_CORE_HOOKS_H

#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#include "hooks/verify.h"

struct fleetd;

#define HOOKS_GRACE_DEFAULT_S (24 * 3600)
#define HOOKS_GRACE_MAX_S (30 * 24 * 3600)
#define HOOKS_DEFAULT_PUBLIC_URL "http://127.0.0.1:8470"

/* What `fleetctl hook add` asks for. NULL (0 for max_body): unset, the source's default. */
struct hooks_add_req {
	const char *agent;
	const char *source;		/* a word of hook_source_to_string */
	const char *route;		/* NULL: AGENT-SOURCE */
	const char *events;		/* comma-separated filter, NULL: every event */
	const char *secret;		/* as given (whsec_... for standard); NULL to subscribe to an existing route */
	const char *header, *encoding, *prefix, *datadog_auth, *delivery_field, *public_url;
	long max_body;
};

/*
 * Create the route with req->agent as its subscriber, or subscribe the
 * agent to the existing route of that name (same source; no secret or
 * route setting may be given then). *route_ret (caller frees) is the
 * route's name, *created whether it is new. -EINVAL, -ENOENT (no such
 * agent), -EEXIST (already subscribed, or a route of another source), with
 * *why (caller frees).
 */
int hooks_add(struct fleetd *f, const struct hooks_add_req *req, char **route_ret, bool *created, char **why);
/* Unsubscribe agent from route; *route_removed: it was the last, the route is gone. -ENOENT with *why. */
int hooks_remove(struct fleetd *f, const char *route, const char *agent, bool *route_removed, char **why);
/*
 * Change the event filter of agent's subscription to route: events is a list
 * as hook_events_check takes, or NULL for every event. -EINVAL, -ENOENT (not
 * subscribed) with *why.
 */
int hooks_set_events(struct fleetd *f, const char *route, const char *agent, const char *events, char **why);
/* A new secret for route; the old one works until now + grace_s (*until). -EINVAL, -ENOENT with *why. */
int hooks_rotate(struct fleetd *f, const char *route, const char *secret, long grace_s, time_t now, time_t *until,
		 char **why);

/*
 * The secret as given for source: standard's "whsec_BASE64" decoded,
 * anything else raw text; HOOK_SECRET_MIN to HOOK_SECRET_MAX bytes.
 * *ret (caller frees) and *len, or -EINVAL with a static *why.
 */
int hooks_secret_parse(enum hook_source source, const char *text, unsigned char **ret, size_t *len,
		       const char **why);

/*
 * The URL a sender of route is given: its public_url (NULL: hooks_public_url,
 * else the listener's address, else the default) + /hooks/ROUTE.
 */
char *hooks_url(const struct fleetd *f, const char *public_url, const char *route);

/*
 * Every live route as the listener needs it (verify.h): its current secret
 * and, while a rotation's grace lasts (prev_until > now), the previous one
 * second; public_url resolved. Owns every string and secret it points to;
 * free with hooks_route_table_free (which wipes the secrets).
 */
struct hooks_route_table {
	struct hook_route *routes;
	size_t n;
	struct db_hook_route **rows;	/* what routes[] points into */
	char **urls;			/* the resolved public_url of each */
};
int hooks_route_table(struct fleetd *f, time_t now, struct hooks_route_table **ret);
void hooks_route_table_free(struct hooks_route_table *t);

/* Delete events older than events_keep_days and delivery ids older than that or 7 days, whichever is longer. */
int hooks_prune(struct fleetd *f, time_t now);
/*
 * cb (NULL: none) is called after every change hooks_add, hooks_remove and
 * hooks_rotate made: the listener (core/listener.c) sends its table again.
 * A callback, so this file needs nothing of the listener's.
 */
void hooks_on_change(struct fleetd *f, void (*cb)(struct fleetd *f));
/* Routes or subscriptions changed behind this file's back (an agent removed): call the callback. */
void hooks_changed(struct fleetd *f);
/* Prune at start and then daily on f->base. */
int hooks_init(struct fleetd *f);
void hooks_shutdown(struct fleetd *f);

#endif
