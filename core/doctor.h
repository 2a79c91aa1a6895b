/*
 * doctor (core): what `fleetctl doctor` asks fleetd (GET /v1/doctor): one
 * finding per fact about the host, each checked by the layer that owns it.
 */
#ifndef FLEET_CORE_DOCTOR_H
#define FLEET_CORE_DOCTOR_H

#include "model/doctor.h"

struct fleetd;

/* Fill r (the caller frees it with doctor_report_free); 0, or -errno with *why. */
int doctor_run(struct fleetd *f, struct doctor_report *r, char **why);

#endif
