/* memory: the handlers of an agent's memory store (GET/PUT/DELETE /v1/agents/NAME/memory...). */
#ifndef FLEET_API_MEMORY_H
#define FLEET_API_MEMORY_H

struct api_call;

void api_memory_list(struct api_call *c);
void api_memory_get(struct api_call *c);
void api_memory_put(struct api_call *c);
void api_memory_delete(struct api_call *c);
void api_memory_export(struct api_call *c);
void api_memory_import(struct api_call *c);

#endif
