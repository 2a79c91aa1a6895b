/* fleetctl trigger and runs: queue a run, follow it, list runs and show one. */
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "ctl/commands.h"

static void print_run(json_t *r)
{
	printf("run:        %lld\nagent:      %s\ntrigger:    %s\nstate:      %s\nqueued:     %s\n",
	       num(r, "id"), str(r, "agent"), str(r, "trigger"), str(r, "state"), str(r, "queued_at"));
	if (json_is_string(json_object_get(r, "started_at")))
		printf("started:    %s\n", str(r, "started_at"));
	if (json_is_string(json_object_get(r, "finished_at")))
		printf("finished:   %s\n", str(r, "finished_at"));
	if (json_is_integer(json_object_get(r, "exit_code")))
		printf("exit code:  %lld\n", num(r, "exit_code"));
	if (json_is_string(json_object_get(r, "snapshot")))
		printf("snapshot:   %s (taken before the run)\n", str(r, "snapshot"));
	if (json_is_string(json_object_get(r, "error")))
		printf("error:      %s\n", str(r, "error"));
}

static bool run_finished(json_t *r)
{
	const char *st = str(r, "state");

	return strcmp(st, "queued") != 0 && strcmp(st, "running") != 0;
}

/* What `trigger --wait` exits with: the run's exit code, or 1 if it failed without one. */
static int run_exit_status(json_t *r)
{
	if (json_is_integer(json_object_get(r, "exit_code")))
		return (int)num(r, "exit_code");
	return strcmp(str(r, "state"), "succeeded") == 0 ? 0 : 1;
}

int cmd_trigger(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "wait", no_argument, NULL, 'w' }, { "help", no_argument, NULL, 'h' }, { 0 },
	};
	_cleanup_(json_decrefp) json_t *answer = NULL;
	_cleanup_free_ char *run_path = NULL;
	bool wait = false;
	const char *name;
	int r, status;

	if (!one_agent(cmd, argc, argv, opts, flag_opt, &wait, &name, &status))
		return status;
	if (callf(ctl, "POST", NULL, &answer, "/v1/agents/%s/runs", name))
		return 1;
	if (!wait) {
		if (ctl->json)
			print_json(answer);
		else
			printf("agent '%s': run %lld queued\n", name, num(answer, "id"));
		return 0;
	}
	run_path = xasprintf("/v1/agents/%s/runs/%lld", name, num(answer, "id"));
	for (;;) {
		json_t *run = NULL;

		if (call(ctl, "GET", run_path, NULL, &run))
			return 1;
		if (run_finished(run)) {
			if (ctl->json) {
				print_json(run);
			} else {
				fputs(json_is_string(json_object_get(run, "log")) ? str(run, "log") : "", stdout);
				fflush(stdout);
				fprintf(stderr, "fleetctl: run %lld %s%s%s\n", num(run, "id"), str(run, "state"),
					json_is_string(json_object_get(run, "error")) ? ": " : "",
					json_is_string(json_object_get(run, "error")) ? str(run, "error") : "");
			}
			r = run_exit_status(run);
			json_decref(run);
			return r;
		}
		json_decref(run);
		usleep(300 * 1000);
	}
}

int cmd_runs(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "limit", required_argument, NULL, 'n' }, { "help", no_argument, NULL, 'h' }, { 0 },
	};
	_cleanup_(json_decrefp) json_t *j = NULL;
	json_t *list, *run;
	long limit = 20, id;
	size_t i;
	int r;

	if ((r = parse_opts(cmd, argc, argv, opts, limit_opt, &limit)) != 0)
		return r < 0 ? EXIT_USAGE : 0;
	if (argc - optind < 1 || argc - optind > 2)
		return usage_error(cmd, "runs needs an agent NAME and optionally a run ID");
	if (!name_ok(cmd, argv[optind]))
		return EXIT_USAGE;
	if (argc - optind == 2) {
		if (parse_long(argv[optind + 1], 1, INT64_MAX, &id) < 0)
			return usage_error(cmd, "a run ID is a positive number, not '%s'", argv[optind + 1]);
		if (callf(ctl, "GET", NULL, &j, "/v1/agents/%s/runs/%ld", argv[optind], id))
			return 1;
		if (ctl->json) {
			print_json(j);
		} else {
			print_run(j);
			printf("log%s:\n%s", json_is_true(json_object_get(j, "log_truncated")) ? " (its end)" : "",
			       json_is_string(json_object_get(j, "log")) ? str(j, "log") : "(none)\n");
		}
		return 0;
	}
	if (callf(ctl, "GET", NULL, &j, "/v1/agents/%s/runs?limit=%ld", argv[optind], limit))
		return 1;
	list = json_object_get(j, "runs");
	if (ctl->json) {
		print_json(list);
		return 0;
	}
	if (json_array_size(list) == 0) {
		printf("agent '%s' has no runs\n", argv[optind]);
		return 0;
	}
	printf("%-6s %-8s %-11s %-20s %-20s %4s %s\n", "ID", "TRIGGER", "STATE", "QUEUED", "FINISHED", "EXIT",
	       "SNAPSHOT / ERROR");
	json_array_foreach(list, i, run) {
		char code[16] = "-";

		if (json_is_integer(json_object_get(run, "exit_code")))
			snprintf(code, sizeof(code), "%lld", num(run, "exit_code"));
		printf("%-6lld %-8s %-11s %-20s %-20s %4s %s%s%s\n", num(run, "id"), str(run, "trigger"),
		       str(run, "state"), str(run, "queued_at"),
		       json_is_string(json_object_get(run, "finished_at")) ? str(run, "finished_at") : "-", code,
		       json_is_string(json_object_get(run, "snapshot")) ? str(run, "snapshot") : "",
		       json_is_string(json_object_get(run, "snapshot")) && json_is_string(json_object_get(run, "error"))
			       ? " / " : "",
		       json_is_string(json_object_get(run, "error")) ? str(run, "error") : "");
	}
	return 0;
}
