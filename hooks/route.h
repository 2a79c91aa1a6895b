/*
 * route: the checks of what names a webhook route and what a subscription
 * filters on, shared by fleetd (which stores them), fleetctl (which checks
 * before sending) and the listener (which parses /hooks/NAME). libc only.
 */
#ifndef FLEET_HOOKS_ROUTE_H
#define FLEET_HOOKS_ROUTE_H

#include <stdbool.h>
#include <stddef.h>

#define HOOK_ROUTE_NAME_MAX 48		/* the URL is /hooks/NAME */
#define HOOK_EVENTS_MAX 32		/* event types in one subscription's filter */
#define HOOK_EVENT_TYPE_MAX 64
#define HOOK_SECRET_MIN 16		/* bytes, raw text or a whsec_ secret decoded */
#define HOOK_SECRET_MAX 512
#define HOOK_MAX_BODY_DEFAULT (1L << 20)

/* 0 if name is a valid route name (a lower-case letter or digit, then those, '-' or '_'), else -EINVAL with *why. */
int hook_route_name_check(const char *name, const char **why);
/*
 * A comma-separated list of event types ("push,pull_request.opened"): 0 if
 * each is 1 to HOOK_EVENT_TYPE_MAX of [A-Za-z0-9_.:-] and there are at most
 * HOOK_EVENTS_MAX, else -EINVAL with *why.
 */
int hook_events_check(const char *list, const char **why);
/*
 * Whether a subscription's filter (a comma-separated list as
 * hook_events_check takes; NULL: every event) takes event type (NULL: a
 * delivery without one, which only an unfiltered subscription takes). An
 * entry takes the type itself and, when the type is an event plus its
 * action (GitHub's "pull_request.opened"), the event alone takes it too:
 * "pull_request" takes "pull_request.opened". Case matters.
 */
bool hook_events_match(const char *filter, const char *type);
/* An HTTP header name (a token, 1 to 64 characters); -EINVAL with *why if not. */
int hook_header_check(const char *name, const char **why);

#endif
