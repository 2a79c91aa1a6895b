/* api/runs.c: an agent's runs (routes.c lists them). */
#ifndef FLEET_API_RUNS_H
#define FLEET_API_RUNS_H

struct api_call;

void api_run_trigger(struct api_call *c);
void api_runs_list(struct api_call *c);
void api_run_get(struct api_call *c);
void api_run_cancel(struct api_call *c);
void api_run_log(struct api_call *c);

#endif
