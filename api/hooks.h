/* api/hooks.c: webhook routes, their subscribers, and the events log (routes.c lists them). */
#ifndef FLEET_API_HOOKS_H
#define FLEET_API_HOOKS_H

struct api_call;

void api_hooks_list(struct api_call *c);
void api_hook_add(struct api_call *c);
void api_hook_unsubscribe(struct api_call *c);
void api_hook_rotate(struct api_call *c);
void api_hook_subscription_update(struct api_call *c);
void api_events_list(struct api_call *c);

#endif
