/* api/watch.c: GET /v1/watch, the event stream (routes.c lists it). */
#ifndef FLEET_API_WATCH_H
#define FLEET_API_WATCH_H

struct api_call;

void api_watch(struct api_call *c);

#endif
