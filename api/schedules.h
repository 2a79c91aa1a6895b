/* api/schedules.c: cron triggers, per agent and all (routes.c lists them). */
#ifndef FLEET_API_SCHEDULES_H
#define FLEET_API_SCHEDULES_H

struct api_call;

void api_schedules_list(struct api_call *c);
void api_schedules_list_all(struct api_call *c);
void api_schedule_add(struct api_call *c);
void api_schedule_get(struct api_call *c);
void api_schedule_delete(struct api_call *c);

#endif
