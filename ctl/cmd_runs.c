/* fleetctl trigger, runs, cancel, logs: queue a run, follow it, list runs, show one, stop one, read its log. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "common/base64.h"
#include "ctl/commands.h"
#include "model/run.h"

#define POLL_US (300 * 1000)	/* how often --wait and logs -f ask */

/* Read fd to its end, at most RUN_PAYLOAD_MAX bytes: 0, -EFBIG above, or -errno. */
static int read_payload(int fd, char **ret, size_t *len)
{
	size_t n = 0;
	char *buf = xmalloc(RUN_PAYLOAD_MAX + 1);

	for (;;) {
		ssize_t k = read(fd, buf + n, RUN_PAYLOAD_MAX + 1 - n);

		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0) {
			int r = -errno;
			free(buf);
			return r;
		}
		if (k == 0)
			break;
		n += (size_t)k;
		if (n > RUN_PAYLOAD_MAX) {
			free(buf);
			return -EFBIG;
		}
	}
	*ret = buf;
	*len = n;
	return 0;
}

struct trigger_opts {
	bool wait;
	const char *payload;	/* FILE, "-" stdin, or NULL */
};

static int trigger_opt(int c, const char *arg, void *data)
{
	struct trigger_opts *o = data;

	if (c == 'w')
		o->wait = true;
	else if (c == 'p')
		o->payload = arg;
	else
		return -1;
	return 0;
}

/* The body of POST .../runs with the payload from o->payload, or NULL without one; false after an error (printed). */
static bool payload_body(const struct trigger_opts *o, json_t **ret)
{
	_cleanup_free_ char *data = NULL, *b64 = NULL;
	size_t len = 0;
	int fd, r;

	*ret = NULL;
	if (!o->payload)
		return true;
	if (strcmp(o->payload, "-") == 0) {
		fd = STDIN_FILENO;
	} else if ((fd = open(o->payload, O_RDONLY | O_CLOEXEC)) < 0) {
		fprintf(stderr, "fleetctl: --payload %s: %s\n", o->payload, strerror(errno));
		return false;
	}
	r = read_payload(fd, &data, &len);
	if (fd != STDIN_FILENO)
		close(fd);
	if (r == -EFBIG) {
		fprintf(stderr, "fleetctl: --payload %s: larger than %d bytes (1 MiB), the most a run's payload may be\n",
			o->payload, RUN_PAYLOAD_MAX);
		return false;
	}
	if (r < 0) {
		fprintf(stderr, "fleetctl: --payload %s: %s\n", o->payload, strerror(-r));
		return false;
	}
	b64 = base64_encode(data, len);
	*ret = json_pack("{s:s}", "payload", b64);
	return true;
}

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

/* What `trigger --wait` exits with: the run's exit code, 124 if it timed out (as exec), or 1 if it failed without one. */
static int run_exit_status(json_t *r)
{
	if (json_is_integer(json_object_get(r, "exit_code")))
		return (int)num(r, "exit_code");
	if (strcmp(str(r, "state"), "timed-out") == 0)
		return 124;
	return strcmp(str(r, "state"), "succeeded") == 0 ? 0 : 1;
}

int cmd_trigger(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "wait", no_argument, NULL, 'w' }, { "payload", required_argument, NULL, 'p' },
		{ "help", no_argument, NULL, 'h' }, { 0 },
	};
	_cleanup_(json_decrefp) json_t *answer = NULL, *body = NULL;
	_cleanup_free_ char *run_path = NULL;
	struct trigger_opts o = { 0 };
	const char *name;
	int r, status;

	if (!one_agent(cmd, argc, argv, opts, trigger_opt, &o, &name, &status))
		return status;
	if (!payload_body(&o, &body))
		return 1;
	if (callf(ctl, "POST", body, &answer, "/v1/agents/%s/runs", name))
		return 1;
	if (!o.wait) {
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
		usleep(POLL_US);
	}
}

/* "NAME ID" after the options: true with *name and *id, else *status (help or a usage error). */
static bool agent_and_run(const struct command *cmd, int argc, char **argv, const struct option *opts, opt_fn on_opt,
			  void *data, const char **name, long *id, int *status)
{
	int r;

	*status = 0;
	if ((r = parse_opts(cmd, argc, argv, opts, on_opt, data)) != 0) {
		*status = r < 0 ? EXIT_USAGE : 0;
		return false;
	}
	if (argc - optind != 2) {
		*status = usage_error(cmd, "%s needs an agent NAME and a run ID", cmd->name);
		return false;
	}
	if (!name_ok(cmd, argv[optind])) {
		*status = EXIT_USAGE;
		return false;
	}
	if (parse_long(argv[optind + 1], 1, INT64_MAX, id) < 0) {
		*status = usage_error(cmd, "a run ID is a positive number, not '%s'", argv[optind + 1]);
		return false;
	}
	*name = argv[optind];
	return true;
}

int cmd_cancel(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	_cleanup_(json_decrefp) json_t *j = NULL;
	const char *name;
	long id;
	int status;

	if (!agent_and_run(cmd, argc, argv, help_only, no_opts, NULL, &name, &id, &status))
		return status;
	if (callf(ctl, "POST", NULL, &j, "/v1/agents/%s/runs/%ld/cancel", name, id))
		return 1;
	if (ctl->json)
		print_json(j);
	else if (json_is_true(json_object_get(j, "cancelling")))
		printf("agent '%s': run %ld is being cancelled (its processes are killed)\n", name, id);
	else
		printf("agent '%s': run %ld %s\n", name, id, str(j, "state"));
	return 0;
}

/*
 * Print the run's log; with follow, keep asking from where the last answer
 * ended while fleetd says more may come (the run goes on), then end with
 * the run: exit 0, whatever the run's outcome (trigger --wait gives that).
 */
int cmd_logs(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "follow", no_argument, NULL, 'f' }, { "help", no_argument, NULL, 'h' }, { 0 },
	};
	bool follow = false;
	const char *name;
	long long offset = 0;
	long id;
	int status;

	/* parse_opts knows no short options but -h: -f is --follow's (up to a "--"). */
	for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
		if (strcmp(argv[i], "-f") == 0)
			argv[i] = (char *)"--follow";
	if (!agent_and_run(cmd, argc, argv, opts, flag_opt, &follow, &name, &id, &status))
		return status;
	for (;;) {
		_cleanup_(json_decrefp) json_t *j = NULL;
		json_t *data;

		if (callf(ctl, "GET", NULL, &j, "/v1/agents/%s/runs/%ld/log?offset=%lld", name, id, offset))
			return 1;
		data = json_object_get(j, "data");
		fwrite(json_string_value(data), 1, json_string_length(data), stdout);
		fflush(stdout);
		offset = num(j, "next_offset");
		if (!json_is_true(json_object_get(j, "more")))
			return 0;
		if (json_string_length(data) == 0) {
			if (!follow)
				return 0;	/* all there is now */
			usleep(POLL_US);
		}
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
