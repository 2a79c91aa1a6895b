/* routes: see routes.h. */
#include "api/routes.h"

#include "common/util.h"
#include "core/secrets.h"
#include "model/agent.h"
#include "model/run.h"

#include "api/agents.h"
#include "api/backup.h"
#include "api/exec.h"
#include "api/hooks.h"
#include "api/hosts.h"
#include "api/images.h"
#include "api/memory.h"
#include "api/metrics.h"
#include "api/runs.h"
#include "api/schedules.h"
#include "api/secrets.h"
#include "api/server.h"
#include "api/snapshots.h"
#include "api/system.h"
#include "api/watch.h"
#include "api/doctor.h"

/* exec carries the command's stdin in its body. */
#define EXEC_MAX_BODY (16u << 20)
/* A schedule's payload (1 MiB) as a JSON string, escapes included. */
#define SCHEDULE_MAX_BODY (7u << 20)
/* trigger carries a payload of at most RUN_PAYLOAD_MAX bytes, base64 (4/3), in JSON. */
#define TRIGGER_MAX_BODY ((RUN_PAYLOAD_MAX / 3 + 1) * 4 + 1024)
/* A memory value or a store's archive, raw: the largest quota plus tar's headers. */
#define MEMORY_MAX_BODY (((size_t)MEMORY_QUOTA_MAX << 20) + (16u << 20))

const struct api_route api_routes[] = {
	{ "GET", "/v1/status", api_status_get, NULL, API_NO_BODY },
	{ "GET", "/v1/audit", api_audit_get, NULL, API_NO_BODY },
	/* fleetctl backup: the passphrase in the body only. */
	{ "POST", "/v1/backup", api_backup_create, "backup.create", 0 },
	/* Prometheus's text format (docs/metrics.md); metrics_listen serves the same over TCP. */
	{ "GET", "/metrics", api_metrics_get, NULL, API_NO_BODY },
	{ "GET", "/v1/doctor", api_doctor_get, NULL, API_NO_BODY },
	{ "GET", "/v1/agents", api_agents_list, NULL, API_NO_BODY },
	{ "POST", "/v1/agents", api_agents_create, "agent.create", 0 },
	{ "GET", "/v1/agents/:name", api_agent_get, NULL, API_NO_BODY },
	{ "DELETE", "/v1/agents/:name", api_agent_delete, "agent.remove", API_NO_BODY },
	{ "PATCH", "/v1/agents/:name", api_agent_update, "agent.update", 0 },
	{ "POST", "/v1/agents/:name/health", api_agent_health, NULL, 0 },
	{ "POST", "/v1/agents/:name/start", api_agent_start, "agent.start", 0 },
	{ "POST", "/v1/agents/:name/stop", api_agent_stop, "agent.stop", 0 },
	{ "POST", "/v1/agents/:name/restart", api_agent_restart, "agent.restart", 0 },
	{ "POST", "/v1/agents/:name/exec", api_agent_exec, "agent.exec", EXEC_MAX_BODY },
	{ "GET", "/v1/agents/:name/console", api_agent_console, NULL, API_NO_BODY },
	{ "GET", "/v1/agents/:name/snapshots", api_snapshots_list, NULL, API_NO_BODY },
	{ "POST", "/v1/agents/:name/snapshots", api_snapshot_create, "snapshot.create", 0 },
	{ "DELETE", "/v1/agents/:name/snapshots/:snap", api_snapshot_delete, "snapshot.remove", API_NO_BODY },
	{ "PATCH", "/v1/agents/:name/snapshots/:snap", api_snapshot_update, "snapshot.update", 0 },
	{ "POST", "/v1/agents/:name/restore", api_snapshot_restore, "snapshot.restore", 0 },
	{ "POST", "/v1/agents/:name/runs", api_run_trigger, "run.trigger", TRIGGER_MAX_BODY },
	{ "GET", "/v1/agents/:name/runs", api_runs_list, NULL, API_NO_BODY },
	{ "GET", "/v1/agents/:name/runs/:id", api_run_get, NULL, API_NO_BODY },
	{ "GET", "/v1/agents/:name/schedules", api_schedules_list, NULL, API_NO_BODY },
	{ "POST", "/v1/agents/:name/schedules", api_schedule_add, "schedule.add", SCHEDULE_MAX_BODY },
	{ "GET", "/v1/agents/:name/schedules/:id", api_schedule_get, NULL, API_NO_BODY },
	{ "DELETE", "/v1/agents/:name/schedules/:id", api_schedule_delete, "schedule.remove", API_NO_BODY },
	{ "GET", "/v1/schedules", api_schedules_list_all, NULL, API_NO_BODY },
	{ "POST", "/v1/agents/:name/runs/:id/cancel", api_run_cancel, "run.cancel", API_NO_BODY },
	{ "GET", "/v1/agents/:name/runs/:id/log", api_run_log, NULL, API_NO_BODY },
	{ "POST", "/v1/agents/:name/upgrade", api_agent_upgrade, "agent.upgrade", 0 },
	{ "POST", "/v1/agents/:name/move", api_agent_move, "agent.move", 0 },
	/* The memory store (#12): raw bodies, the work done by agentd in the environment. */
	{ "GET", "/v1/agents/:name/memory", api_memory_list, NULL, API_NO_BODY },
	{ "GET", "/v1/agents/:name/memory/:key", api_memory_get, NULL, API_NO_BODY },
	{ "PUT", "/v1/agents/:name/memory/:key", api_memory_put, "memory.put", MEMORY_MAX_BODY },
	{ "DELETE", "/v1/agents/:name/memory/:key", api_memory_delete, "memory.remove", API_NO_BODY },
	{ "GET", "/v1/agents/:name/memory-archive", api_memory_export, NULL, API_NO_BODY },
	{ "PUT", "/v1/agents/:name/memory-archive", api_memory_import, "memory.import", MEMORY_MAX_BODY },
	/* Hypervisor hosts (#15): VM agents are placed on them. */
	{ "GET", "/v1/hosts", api_hosts_list, NULL, API_NO_BODY },
	{ "POST", "/v1/hosts", api_host_add, "host.add", 0 },
	{ "PATCH", "/v1/hosts/:name", api_host_update, "host.update", 0 },
	{ "DELETE", "/v1/hosts/:name", api_host_delete, "host.remove", API_NO_BODY },
	{ "GET", "/v1/images", api_images_list, NULL, API_NO_BODY },
	{ "DELETE", "/v1/images/:id", api_image_delete, "image.remove", API_NO_BODY },
	/* Webhooks (#11): secrets only in bodies, never in a path or query. */
	{ "GET", "/v1/hooks", api_hooks_list, NULL, API_NO_BODY },
	{ "POST", "/v1/hooks", api_hook_add, "hook.add", 0 },
	{ "DELETE", "/v1/hooks/:route/subscribers/:agent", api_hook_unsubscribe, "hook.remove", API_NO_BODY },
	{ "PATCH", "/v1/hooks/:route/subscribers/:agent", api_hook_subscription_update, "hook.update", 0 },
	{ "POST", "/v1/hooks/:route/rotate", api_hook_rotate, "hook.rotate", 0 },
	{ "GET", "/v1/events", api_events_list, NULL, API_NO_BODY },
	/* What happens, as it happens: a stream of JSON lines (api/watch.c). */
	{ "GET", "/v1/watch", api_watch, NULL, API_NO_BODY },
	/* Secrets (#12): the value is PUT's raw body, never in a path, query, reply or audit record. */
	{ "GET", "/v1/agents/:name/secrets", api_secrets_list, NULL, API_NO_BODY },
	{ "PUT", "/v1/agents/:name/secrets/:key", api_secret_set, "secret.set", SECRET_VALUE_MAX },
	{ "DELETE", "/v1/agents/:name/secrets/:key", api_secret_remove, "secret.remove", API_NO_BODY },
	{ "POST", "/v1/agents/:name/secrets/:key/compare", api_secret_compare, NULL, SECRET_VALUE_MAX },
};
const size_t api_n_routes = ARRAY_SIZE(api_routes);
