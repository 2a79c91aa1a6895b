/* fleetctl status and audit: fleetd itself and its audit log. */
#include "ctl/commands.h"

#include <string.h>

int cmd_status(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	json_t *j = NULL, *b, *h;
	const char *k;
	json_t *v;
	int status;

	if (!no_args(cmd, argc, argv, help_only, no_opts, NULL, &status))
		return status;
	if (call(ctl, "GET", "/v1/status", NULL, &j))
		return 1;
	if (ctl->json) {
		print_json(j);
	} else {
		printf("fleetd %s (pid %lld), up %llds since %s\n", str(j, "version"), num(j, "pid"),
		       num(j, "uptime_seconds"), str(j, "started_at"));
		printf("state dir: %s\nsocket:    %s\nagents:    %lld\nbackends: ", str(j, "state_dir"),
		       str(j, "socket"), num(j, "agents"));
		b = json_object_get(j, "backends");
		json_object_foreach(b, k, v)
			printf(" %s %s", k, json_string_value(v));
		putchar('\n');
		h = json_object_get(j, "hooks");
		if (!h || strcmp(str(h, "state"), "off") == 0) {
			printf("webhooks: off\n");
		} else {
			printf("webhooks: %s on %s", str(h, "state"), str(h, "listen"));
			if (num(h, "pid") > 0)
				printf(" (pid %lld)", num(h, "pid"));
			printf(", %lld accepted, %lld refused", num(h, "accepted"), num(h, "refused"));
			if (num(h, "restarts") > 0)
				printf(", %lld restart(s)", num(h, "restarts"));
			putchar('\n');
		}
		v = json_object_get(j, "metrics_listen");
		printf("metrics:  GET /metrics on the socket%s%s\n", json_is_string(v) ? " and on " : "",
		       json_is_string(v) ? json_string_value(v) : "");
	}
	json_decref(j);
	return 0;
}

int cmd_audit(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "limit", required_argument, NULL, 'n' }, { "help", no_argument, NULL, 'h' }, { 0 },
	};
	json_t *j = NULL, *entries, *e;
	long limit = 50;
	size_t i;
	int status;

	if (!no_args(cmd, argc, argv, opts, limit_opt, &limit, &status))
		return status;
	if (callf(ctl, "GET", NULL, &j, "/v1/audit?limit=%ld", limit))
		return 1;
	entries = json_object_get(j, "entries");
	if (ctl->json) {
		print_json(entries);
	} else {
		printf("%-24s %6s %-14s %-20s %-8s %s\n", "TIME", "UID", "ACTION", "TARGET", "OUTCOME", "DETAIL");
		json_array_foreach(entries, i, e)
			printf("%-24s %6lld %-14s %-20s %-8s %s\n", str(e, "time"), num(e, "uid"), str(e, "action"),
			       str(e, "target"), str(e, "outcome"),
			       json_object_get(e, "detail") ? str(e, "detail") : "");
	}
	json_decref(j);
	return 0;
}
