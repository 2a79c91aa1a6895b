/*
 * handler: what the handler files share above the server: the agent the
 * path names, and the reply to a refusal from core/. Not the server's
 * (server.c knows HTTP, not agents).
 */
#ifndef FLEET_API_HANDLER_H
#define FLEET_API_HANDLER_H

#include <stdbool.h>

struct agent;
struct api_call;

/* Check the ":name" path segment is a valid agent name; replies 400 and returns false if not. */
bool api_check_name_param(struct api_call *c);

/*
 * The agent the ":name" segment names (caller frees): the name is checked
 * (400), then the row read; replies (404 "no such agent", or 500) and
 * returns NULL on failure.
 */
struct agent *api_agent_param(struct api_call *c);

/*
 * Reply with a refusal from core/, its message (why) as is: -EAGAIN is
 * core's "not provisioned" (409 not_provisioned), any other r as
 * api_error_errno().
 */
void api_error_core(struct api_call *c, int r, const char *why);

#endif
