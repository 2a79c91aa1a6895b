/* api_system: GET /v1/status and GET /v1/audit. Read-only. */
#include <errno.h>
#include <string.h>
#include <stdlib.h>
#include <unistd.h>

#include "api/system.h"
#include "api/server.h"
#include "api/metrics_http.h"
#include "core/backends.h"
#include "core/listener.h"
#include "core/watch.h"
#include "model/config.h"
#include "store/db.h"
#include "model/fleetd.h"

void api_status_get(struct api_call *c)
{
	struct fleetd *f = c->fleetd;
	struct listener_status ls;
	json_t *backends, *hooks;
	char started[32];
	long agents = 0;
	int r;

	if ((r = db_agent_count(f->db, &agents)) < 0) {
		api_error_errno(c, r, "cannot count agents: %s", strerror(-r));
		return;
	}
	backends = json_object();
	for (int k = 0; k < BACKEND__COUNT; k++) {
		char *status = backend_status(f, (enum backend_kind)k);
		json_object_set_new(backends, backend_kind_to_string((enum backend_kind)k), json_string(status));
		free(status);
	}
	listener_status(f, &ls);
	hooks = json_pack("{s:s?, s:s, s:o, s:I, s:I, s:I, s:I}", "listen", ls.listen,
			  "state", listener_state_to_string(ls.state),
			  "pid", ls.pid ? json_integer(ls.pid) : json_null(), "restarts", (json_int_t)ls.restarts,
			  "accepted", (json_int_t)ls.accepted, "refused", (json_int_t)ls.refused,
			  "connections", (json_int_t)ls.connections);
	api_reply(c, 200, json_pack("{s:s, s:i, s:s, s:I, s:i, s:s, s:s, s:i, s:I, s:I, s:o, s:o, s:s?}",
		"version", PACKAGE_VERSION,
		"pid", (int)getpid(),
		"started_at", format_utc(f->started_at, started, sizeof(started)),
		"uptime_seconds", (json_int_t)(time(NULL) - f->started_at),
		"agents", (int)agents,
		"state_dir", config_get(&f->cfg, CFG_STATE_DIR),
		"socket", config_get(&f->cfg, CFG_SOCKET),
		"schema_version", db_schema_version(),
		"api_connections", (json_int_t)api_connections(f->api),
		"watchers", (json_int_t)watch_count(f),
		"backends", backends,
		"hooks", hooks,
		"metrics_listen", metrics_http_address(f)));
}

void api_audit_get(struct api_call *c)
{
	struct audit_entry *e = NULL;
	char buf[32];
	long limit = 50;
	size_t n = 0;
	json_t *list;
	int r;

	if (api_query(c, "limit", buf, sizeof(buf)) && parse_long(buf, 1, 10000, &limit) < 0) {
		api_error(c, 400, "invalid", "limit must be a number from 1 to 10000");
		return;
	}
	if ((r = db_audit_list(c->fleetd->db, (int)limit, &e, &n)) < 0) {
		api_error_errno(c, r, "cannot read the audit log: %s", strerror(-r));
		return;
	}
	list = json_array();
	for (size_t i = 0; i < n; i++) {
		char when[40], secs[32];

		snprintf(when, sizeof(when), "%.19s.%03dZ", format_utc(e[i].at_ms / 1000, secs, sizeof(secs)),
			 (int)(e[i].at_ms % 1000));
		json_array_append_new(list, json_pack("{s:I, s:s, s:I, s:s, s:s?, s:s, s:s?}",
			"id", (json_int_t)e[i].id, "time", when, "uid", (json_int_t)e[i].uid,
			"action", e[i].action, "target", e[i].target, "outcome", e[i].outcome,
			"detail", e[i].detail));
	}
	audit_entries_free(e, n);
	api_reply(c, 200, json_pack("{s:o}", "entries", list));
}
