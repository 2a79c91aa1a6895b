/* api/agents.c: /v1/agents and /v1/agents/NAME (routes.c lists them). */
#ifndef FLEET_API_AGENTS_H
#define FLEET_API_AGENTS_H

struct api_call;

void api_agents_list(struct api_call *c);
void api_agents_create(struct api_call *c);
void api_agent_get(struct api_call *c);
void api_agent_delete(struct api_call *c);
void api_agent_update(struct api_call *c);
void api_agent_health(struct api_call *c);
void api_agent_start(struct api_call *c);
void api_agent_stop(struct api_call *c);
void api_agent_restart(struct api_call *c);
void api_agent_move(struct api_call *c);

#endif
