/* api/doctor.c: GET /v1/doctor (routes.c lists it). */
#ifndef FLEET_API_DOCTOR_H
#define FLEET_API_DOCTOR_H

struct api_call;

void api_doctor_get(struct api_call *c);

#endif
