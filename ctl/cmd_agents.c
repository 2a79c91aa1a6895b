/* fleetctl's agent commands: create, list, show, rm, start, stop, restart, set, health. */
#include <string.h>

#include "common/cron.h"
#include "common/names.h"
#include "ctl/commands.h"
#include "ctl/http_client.h"
#include "model/agent.h"

static void print_agent_details(json_t *a)
{
	printf("name:       %s\nbackend:    %s\nstate:      %s\nmemory:     %lld MiB\nvcpus:      %lld\n"
	       "disk:       %lld GiB\nnetwork:    %s\nrestart:    %s\ncommand:    %s\ncreated:    %s\nupdated:    %s\n",
	       str(a, "name"), str(a, "backend"), str(a, "state"), num(a, "memory_mib"), num(a, "vcpus"),
	       num(a, "disk_gib"), str(a, "network"), str(a, "restart"), str(a, "command"), str(a, "created_at"),
	       str(a, "updated_at"));
	/* Why the state is what it is (a missing environment says what is gone). */
	if (json_is_string(json_object_get(a, "state_detail")))
		printf("why:        %s\n", str(a, "state_detail"));
	{
		json_t *h = json_object_get(a, "health");
		if (h) {
			printf("health:     %s%s%s%s%s\n", str(h, "status"),
			       json_object_get(h, "detail") ? " (" : "", json_object_get(h, "detail") ? str(h, "detail") : "",
			       json_object_get(h, "detail") ? ")" : "",
			       json_is_string(json_object_get(h, "checked_at")) ? "" : "");
			if (json_is_string(json_object_get(h, "checked_at")))
				printf("checked:    %s\n", str(h, "checked_at"));
			printf("check:      %s, every %llds%s\n",
			       json_object_get(h, "command") ? str(h, "command") : "default",
			       num(h, "interval_s"), json_is_true(json_object_get(h, "auto_rollback")) ? ", auto-rollback on" : "");
			if (json_object_get(h, "last_rollback"))
				printf("rollback:   %s\n", str(h, "last_rollback"));
		}
	}
	{
		json_t *sn = json_object_get(a, "snapshots");
		if (sn) {
			printf("snapshots:  policy %s", str(sn, "policy"));
			if (json_is_string(json_object_get(sn, "schedule")))
				printf(" (%s)", str(sn, "schedule"));
			if (num(sn, "keep") > 0)
				printf(", keep the newest %lld (plus pinned and the newest good)\n", num(sn, "keep"));
			else
				printf(", keep all\n");
			if (json_is_string(json_object_get(sn, "restoring")))
				printf("restoring:  %s\n", str(sn, "restoring"));
		}
	}
	{
		json_t *rn = json_object_get(a, "runs");
		if (rn)
			printf("runs:       timeout %llds, at most %lld queued, interrupted runs retried %lld time(s)%s\n",
			       num(rn, "timeout_s"), num(rn, "max_queued"), num(rn, "retry_interrupted"),
			       json_is_true(json_object_get(rn, "secret_files")) ? ", secrets as files" : "");
	}
	{
		json_t *mem = json_object_get(a, "memory");
		if (mem)
			printf("memory:     store ~/memory, quota %lld MiB\n", num(mem, "quota_mib"));
	}
	{
		json_t *boot = json_object_get(a, "boot");
		if (boot)
			printf("boot:       autostart %s, priority %lld\n",
			       json_is_true(json_object_get(boot, "autostart")) ? "on" : "off", num(boot, "priority"));
	}
	if (json_is_string(json_object_get(a, "host_unreachable")))
		printf("host:       %s (unreachable: %s; its state is the last known)\n", str(a, "host"),
		       str(a, "host_unreachable"));
	else if (json_is_string(json_object_get(a, "host")))
		printf("host:       %s\n", str(a, "host"));
	if (json_is_string(json_object_get(a, "egress_allow")))
		printf("egress:     only %s\n", str(a, "egress_allow"));
	if (json_is_integer(json_object_get(a, "egress_refused_packets")))
		printf("refused:    %lld packet(s) outside the egress list\n", num(a, "egress_refused_packets"));
	if (json_object_get(a, "note"))
		printf("note:       %s\n", str(a, "note"));
}

/* The run queue's per-agent options, shared by create and set. */
#define RUN_OPTIONS \
	{ "run-timeout", required_argument, NULL, 'T' }, { "max-queued", required_argument, NULL, 'Q' }, \
	{ "retry-interrupted", required_argument, NULL, 'Y' }, { "memory-quota", required_argument, NULL, 'M' }, \
	{ "egress-allow", required_argument, NULL, 'E' }, \
	{ "secret-files", required_argument, NULL, 'X' }, { "autostart", required_argument, NULL, 'B' }, \
	{ "boot-priority", required_argument, NULL, 'O' }

struct create_opts {
	const struct command *cmd;
	json_t *body;
};

/* An option naming a value of one of the agent's enums: checked here, sent as given. */
static int enum_opt(struct create_opts *o, const char *key, const char *arg, int (*from_string)(const char *),
		    const char *must)
{
	if (from_string(arg) < 0) {
		usage_error(o->cmd, "%s, not '%s'", must, arg);
		return -1;
	}
	json_object_set_new(o->body, key, json_string(arg));
	return 0;
}

static int create_opt(int c, const char *arg, void *data)
{
	struct create_opts *o = data;
	long v;

	switch (c) {
	case 'b':
		return enum_opt(o, "backend", arg, backend_kind_from_string, "--backend must be 'vm' or 'user'");
	case 'n':
		return enum_opt(o, "network", arg, network_kind_from_string, "--network must be 'none' or 'nat'");
	case 'c':
		json_object_set_new(o->body, "command", json_string(arg));
		return 0;
	case 'W': {	/* --host: a VM agent's hypervisor host (fleetctl host ls) */
		const char *why;

		if (agent_name_check(arg, &why) < 0) {
			usage_error(o->cmd, "invalid host name '%s': %s", arg, why);
			return -1;
		}
		json_object_set_new(o->body, "host", json_string(arg));
		return 0;
	}
	case 'E':	/* checked by fleetd (model/egress.c), which also resolves the names */
		json_object_set_new(o->body, "egress_allow", json_string(arg));
		return 0;
	case 'H':
		json_object_set_new(o->body, "health_command", json_string(arg));
		return 0;
	case 'I':
		if (parse_long(arg, 0, 86400, &v) < 0) {
			usage_error(o->cmd, "--health-interval needs seconds from 0 to 86400, not '%s'", arg);
			return -1;
		}
		json_object_set_new(o->body, "health_interval_s", json_integer(v));
		return 0;
	case 'A':
		json_object_set_new(o->body, "auto_rollback", json_true());
		return 0;
	case 'P':
		return enum_opt(o, "snapshot_policy", arg, snapshot_policy_from_string, "--snapshot-policy must be none, before-run or cron");
	case 'S': {
		_cleanup_free_ char *why = NULL;
		struct cron_spec spec;

		if (*arg && cron_parse(arg, &spec, &why) < 0) {
			usage_error(o->cmd, "--snapshot-schedule '%s': %s", arg, why);
			return -1;
		}
		json_object_set_new(o->body, "snapshot_schedule", json_string(arg));
		return 0;
	}
	case 'K':
		if (parse_long(arg, 0, SNAPSHOT_KEEP_MAX, &v) < 0) {
			usage_error(o->cmd, "--snapshot-keep needs a count from 0 to %d, not '%s'", SNAPSHOT_KEEP_MAX, arg);
			return -1;
		}
		json_object_set_new(o->body, "snapshot_keep", json_integer(v));
		return 0;
	case 'T':
	case 'Q':
	case 'Y':
	case 'M': {
		static const struct { int c; const char *opt, *key, *what; long min, max; } k[] = {
			{ 'T', "--run-timeout", "run_timeout_s", "seconds", 1, RUN_TIMEOUT_MAX },
			{ 'Q', "--max-queued", "max_queued", "a count", 1, MAX_QUEUED_MAX },
			{ 'Y', "--retry-interrupted", "retry_interrupted", "a count", 0, RETRY_INTERRUPTED_MAX },
			{ 'M', "--memory-quota", "memory_quota_mib", "MiB", 1, MEMORY_QUOTA_MAX },
		};
		for (size_t i = 0; i < ARRAY_SIZE(k); i++) {
			if (k[i].c != c)
				continue;
			if (parse_long(arg, k[i].min, k[i].max, &v) < 0) {
				usage_error(o->cmd, "%s needs %s from %ld to %ld, not '%s'", k[i].opt, k[i].what,
					    k[i].min, k[i].max, arg);
				return -1;
			}
			json_object_set_new(o->body, k[i].key, json_integer(v));
		}
		return 0;
	}
	case 'X':
	case 'B': {
		const char *opt = c == 'X' ? "--secret-files" : "--autostart";

		if (strcmp(arg, "on") != 0 && strcmp(arg, "off") != 0) {
			usage_error(o->cmd, "%s takes on or off, not '%s'", opt, arg);
			return -1;
		}
		json_object_set_new(o->body, c == 'X' ? "secret_files" : "autostart", json_boolean(strcmp(arg, "on") == 0));
		return 0;
	}
	case 'O':
		if (parse_long(arg, BOOT_PRIORITY_MIN, BOOT_PRIORITY_MAX, &v) < 0) {
			usage_error(o->cmd, "--boot-priority needs a number from %d to %d, not '%s'", BOOT_PRIORITY_MIN,
				    BOOT_PRIORITY_MAX, arg);
			return -1;
		}
		json_object_set_new(o->body, "boot_priority", json_integer(v));
		return 0;
	case 'R':
		return enum_opt(o, "restart", arg, restart_policy_from_string, "--restart must be 'on-failure', 'always' or 'never'");
	case 'm':
	case 'v':
	case 'd': {
		const char *key = c == 'm' ? "memory_mib" : c == 'v' ? "vcpus" : "disk_gib";
		/* Range checks are fleetd's; here only "is it a number". */
		if (parse_long(arg, 0, 1L << 30, &v) < 0) {
			usage_error(o->cmd, "--%s needs a whole number, not '%s'",
				    c == 'm' ? "memory" : c == 'v' ? "vcpus" : "disk", arg);
			return -1;
		}
		json_object_set_new(o->body, key, json_integer(v));
		return 0;
	}
	}
	return -1;
}

int cmd_create(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "backend", required_argument, NULL, 'b' }, { "memory", required_argument, NULL, 'm' },
		{ "vcpus", required_argument, NULL, 'v' }, { "disk", required_argument, NULL, 'd' },
		{ "network", required_argument, NULL, 'n' }, { "command", required_argument, NULL, 'c' },
		{ "restart", required_argument, NULL, 'R' }, { "health-cmd", required_argument, NULL, 'H' },
		{ "health-interval", required_argument, NULL, 'I' }, { "auto-rollback", no_argument, NULL, 'A' },
		{ "snapshot-policy", required_argument, NULL, 'P' }, { "snapshot-schedule", required_argument, NULL, 'S' },
		{ "snapshot-keep", required_argument, NULL, 'K' }, { "host", required_argument, NULL, 'W' },
		RUN_OPTIONS,
		{ "help", no_argument, NULL, 'h' }, { 0 },
	};
	struct create_opts o = { cmd, json_object() };
	json_t *a = NULL;
	int r;

	if ((r = parse_opts(cmd, argc, argv, opts, create_opt, &o)) != 0) {
		json_decref(o.body);
		return r < 0 ? EXIT_USAGE : 0;
	}
	if (optind >= argc) {
		json_decref(o.body);
		return usage_error(cmd, "create needs an agent NAME");
	}
	json_object_set_new(o.body, "name", json_string(argv[optind++]));
	if (optind != argc) {
		json_decref(o.body);
		return usage_error(cmd, "unexpected argument '%s'", argv[optind]);
	}
	if (!name_ok(cmd, json_string_value(json_object_get(o.body, "name")))) {
		json_decref(o.body);
		return EXIT_USAGE;
	}
	r = call(ctl, "POST", "/v1/agents", o.body, &a);
	json_decref(o.body);
	if (r)
		return 1;
	if (ctl->json) {
		print_json(a);
	} else {
		printf("agent '%s' created (backend %s, state %s%s%s)\n", str(a, "name"), str(a, "backend"),
		       str(a, "state"), json_is_string(json_object_get(a, "host")) ? ", host " : "",
		       json_is_string(json_object_get(a, "host")) ? str(a, "host") : "");
		if (json_object_get(a, "note"))
			printf("note: %s\n", str(a, "note"));
	}
	json_decref(a);
	return 0;
}

int cmd_list(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	struct http_response table = { 0 };
	json_t *j = NULL;
	int status;

	if (!no_args(cmd, argc, argv, help_only, no_opts, NULL, &status))
		return status;
	if (ctl->json) {
		if (call(ctl, "GET", "/v1/agents", NULL, &j))
			return 1;
		print_json(json_object_get(j, "agents"));
		json_decref(j);
		return 0;
	}
	/* The table comes rendered (api/agents.c, ?view=table): parsing a large fleet's JSON would cost more. */
	if (call_text(ctl, "/v1/agents?view=table", &table))
		return 1;
	status = fwrite(table.body, 1, table.body_len, stdout) == table.body_len ? 0 : 1;
	http_response_free(&table);
	return status;
}

int cmd_show(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	json_t *a = NULL;
	const char *name;
	int status;

	if (!one_agent(cmd, argc, argv, help_only, no_opts, NULL, &name, &status))
		return status;
	if (callf(ctl, "GET", NULL, &a, "/v1/agents/%s", name))
		return 1;
	if (ctl->json)
		print_json(a);
	else
		print_agent_details(a);
	json_decref(a);
	return 0;
}

int cmd_rm(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "force", no_argument, NULL, 'f' }, { "help", no_argument, NULL, 'h' }, { 0 },
	};
	bool force = false;
	json_t *a = NULL;
	const char *name;
	int status;

	if (!one_agent(cmd, argc, argv, opts, flag_opt, &force, &name, &status))
		return status;
	if (callf(ctl, "DELETE", NULL, &a, "/v1/agents/%s%s", name, force ? "?force=1" : ""))
		return 1;
	if (ctl->json)
		print_json(a);
	else
		printf("agent '%s' removed\n", str(a, "removed"));
	json_decref(a);
	return 0;
}

/* start, stop, restart: NAME [--timeout S] -> POST /v1/agents/NAME/VERB. */
int cmd_lifecycle(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "timeout", required_argument, NULL, 't' }, { "help", no_argument, NULL, 'h' }, { 0 },
	};
	json_t *a = NULL, *body = NULL;
	long timeout = -1;
	const char *name;
	int r, status;

	if (!one_agent(cmd, argc, argv, opts, timeout_opt, &timeout, &name, &status))
		return status;
	if (timeout >= 0)
		body = json_pack("{s:i}", "timeout_s", (int)timeout);
	r = callf(ctl, "POST", body, &a, "/v1/agents/%s/%s", name, cmd->name);
	json_decref(body);
	if (r)
		return 1;
	if (ctl->json)
		print_json(a);
	else
		printf("agent '%s' %s (state %s)\n", str(a, "name"),
		       strcmp(cmd->name, "stop") == 0 ? "stopped" : strcmp(cmd->name, "start") == 0 ? "started" : "restarted",
		       str(a, "state"));
	json_decref(a);
	return 0;
}

static int set_opt(int c, const char *arg, void *data)
{
	struct create_opts *o = data;

	if (c == 'A') {
		if (strcmp(arg, "on") != 0 && strcmp(arg, "off") != 0) {
			usage_error(o->cmd, "--auto-rollback takes on or off, not '%s'", arg);
			return -1;
		}
		json_object_set_new(o->body, "auto_rollback", json_boolean(strcmp(arg, "on") == 0));
		return 0;
	}
	if (c == 'D') {
		json_object_set_new(o->body, "health_command", json_string(""));
		return 0;
	}
	return create_opt(c, arg, data);
}

int cmd_set(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "health-cmd", required_argument, NULL, 'H' }, { "default-health", no_argument, NULL, 'D' },
		{ "health-interval", required_argument, NULL, 'I' }, { "auto-rollback", required_argument, NULL, 'A' },
		{ "snapshot-policy", required_argument, NULL, 'P' }, { "snapshot-schedule", required_argument, NULL, 'S' },
		{ "snapshot-keep", required_argument, NULL, 'K' },
		{ "command", required_argument, NULL, 'c' }, { "network", required_argument, NULL, 'n' }, RUN_OPTIONS,
		{ "help", no_argument, NULL, 'h' }, { 0 },
	};
	struct create_opts o = { cmd, json_object() };
	_cleanup_(json_decrefp) json_t *a = NULL;
	int r;

	if ((r = parse_opts(cmd, argc, argv, opts, set_opt, &o)) != 0 || argc - optind != 1 ||
	    json_object_size(o.body) == 0) {
		json_decref(o.body);
		if (r > 0)
			return 0;
		return r < 0 ? EXIT_USAGE : usage_error(cmd, "set needs an agent NAME and at least one setting");
	}
	if (!name_ok(cmd, argv[optind])) {
		json_decref(o.body);
		return EXIT_USAGE;
	}
	r = callf(ctl, "PATCH", o.body, &a, "/v1/agents/%s", argv[optind]);
	json_decref(o.body);
	if (r)
		return 1;
	if (ctl->json)
		print_json(a);
	else
		print_agent_details(a);
	return 0;
}

int cmd_health(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	_cleanup_(json_decrefp) json_t *j = NULL;
	const char *name;
	int status;

	if (!one_agent(cmd, argc, argv, help_only, no_opts, NULL, &name, &status))
		return status;
	if (callf(ctl, "POST", NULL, &j, "/v1/agents/%s/health", name))
		return 1;
	if (ctl->json)
		print_json(j);
	else
		printf("agent '%s': %s (%s)\n", name,
		       json_is_true(json_object_get(j, "healthy")) ? "healthy" : "unhealthy", str(j, "detail"));
	return json_is_true(json_object_get(j, "healthy")) ? 0 : 3;
}
