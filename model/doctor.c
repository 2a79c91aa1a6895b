/* doctor: the findings list of `fleetctl doctor` (doctor.h). */
#include <stdarg.h>
#include <stdlib.h>

#include "model/doctor.h"

const char *doctor_status_to_string(enum doctor_status s)
{
	switch (s) {
	case DOCTOR_OK: return "OK";
	case DOCTOR_WARN: return "WARN";
	case DOCTOR_FAIL: return "FAIL";
	}
	return "FAIL";
}

void doctor_add(struct doctor_report *r, const char *check, enum doctor_status status, const char *fix,
		const char *detail_fmt, ...)
{
	struct doctor_check *c;
	va_list ap;

	r->checks = xrealloc(r->checks, (r->n + 1) * sizeof(*r->checks));
	c = &r->checks[r->n++];
	c->check = xstrdup(check);
	c->status = status;
	c->fix = fix ? xstrdup(fix) : NULL;
	va_start(ap, detail_fmt);
	if (vasprintf(&c->detail, detail_fmt, ap) < 0)
		abort();	/* out of memory: as xasprintf */
	va_end(ap);
}

enum doctor_status doctor_worst(const struct doctor_report *r)
{
	enum doctor_status worst = DOCTOR_OK;

	for (size_t i = 0; i < r->n; i++)
		if (r->checks[i].status > worst)
			worst = r->checks[i].status;
	return worst;
}

void doctor_report_free(struct doctor_report *r)
{
	for (size_t i = 0; i < r->n; i++) {
		free(r->checks[i].check);
		free(r->checks[i].detail);
		free(r->checks[i].fix);
	}
	free(r->checks);
	r->checks = NULL;
	r->n = 0;
}
