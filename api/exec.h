/* api/exec.c: the exec stream and the console (routes.c lists them). */
#ifndef FLEET_API_EXEC_H
#define FLEET_API_EXEC_H

struct api_call;

void api_agent_exec(struct api_call *c);
void api_agent_console(struct api_call *c);

#endif
