/* api_doctor: GET /v1/doctor, the host's findings for `fleetctl doctor` (core/doctor.h). Read-only. */
#include <stdlib.h>

#include "api/doctor.h"
#include "api/server.h"
#include "core/doctor.h"

void api_doctor_get(struct api_call *c)
{
	struct doctor_report r = { 0 };
	_cleanup_free_ char *why = NULL;
	json_t *list;
	int e;

	if ((e = doctor_run(c->fleetd, &r, &why)) < 0) {
		doctor_report_free(&r);
		api_error_errno(c, e, "%s", why);
		return;
	}
	list = json_array();
	for (size_t i = 0; i < r.n; i++)
		json_array_append_new(list, json_pack("{s:s, s:s, s:s, s:s?}", "check", r.checks[i].check, "status",
						      doctor_status_to_string(r.checks[i].status), "detail",
						      r.checks[i].detail, "fix", r.checks[i].fix));
	api_reply(c, 200, json_pack("{s:s, s:o}", "status", doctor_status_to_string(doctor_worst(&r)), "checks", list));
	doctor_report_free(&r);
}
