/*
 * doctor: the findings of `fleetctl doctor` (GET /v1/doctor). Each layer
 * that owns a fact checks it and appends one line here (core/doctor.c
 * gathers them): OK, WARN or FAIL, what was found, and what to do about it.
 * The report owns every string in it.
 */
#ifndef FLEET_MODEL_DOCTOR_H
#define FLEET_MODEL_DOCTOR_H

#include <stddef.h>

#include "common/util.h"

enum doctor_status { DOCTOR_OK, DOCTOR_WARN, DOCTOR_FAIL };
const char *doctor_status_to_string(enum doctor_status s);

struct doctor_check {
	char *check;		/* a short stable name: "libvirt", "state-dir-space" */
	enum doctor_status status;
	char *detail;		/* what was found */
	char *fix;		/* what to do; NULL when OK */
};

struct doctor_report {
	struct doctor_check *checks;
	size_t n;
};

/* Append one finding; fix may be NULL. */
void doctor_add(struct doctor_report *r, const char *check, enum doctor_status status, const char *fix,
		const char *detail_fmt, ...) _printf_(5, 6);
/* The worst status in the report (DOCTOR_OK when empty). */
enum doctor_status doctor_worst(const struct doctor_report *r);
void doctor_report_free(struct doctor_report *r);

#endif
