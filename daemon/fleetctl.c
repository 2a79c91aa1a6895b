/*
 * fleetctl: the operator's CLI. A thin client: one table row per command,
 * each handler packs what the user typed into an API call and prints the
 * answer; fleetd validates everything again. Exit codes: 0 success, 1 an
 * error from fleetd (or fleetd unreachable), 2 a usage error.
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "agent.h"
#include "base64.h"
#include "cron.h"
#include "http_client.h"
#include "names.h"
#include "termsafe.h"
#include "util.h"

#define DEFAULT_SOCKET "/run/fleet/fleetd.sock"
#define EXIT_USAGE 2
#define EXEC_STDIN_MAX (12 << 20)	/* base64 of it fits fleetd's 16 MiB exec body cap */

struct ctl {
	const char *socket;
	bool json;
};

struct command {
	const char *name;
	const char *args;	/* usage after the command name */
	const char *summary;
	const char *help;	/* options and details */
	int (*run)(struct ctl *ctl, const struct command *cmd, int argc, char **argv);
};

static const struct command *find_command(const char *name);

static int usage_error(const struct command *cmd, const char *fmt, ...) _printf_(2, 3);
static int usage_error(const struct command *cmd, const char *fmt, ...)
{
	va_list ap;

	fputs("fleetctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	if (cmd)
		fprintf(stderr, "\nUsage: fleetctl %s %s\nTry 'fleetctl help %s'.\n", cmd->name, cmd->args, cmd->name);
	else
		fputs("\nTry 'fleetctl help'.\n", stderr);
	return EXIT_USAGE;
}

static void print_command_help(const struct command *cmd, FILE *out)
{
	fprintf(out, "Usage: fleetctl [-s SOCKET] [--json] %s %s\n%s\n", cmd->name, cmd->args, cmd->summary);
	if (cmd->help && *cmd->help)
		fprintf(out, "\n%s", cmd->help);
}

/*
 * Call fleetd. On success *ret holds the parsed JSON answer (NULL for an
 * empty body) and 0 is returned; otherwise the error is printed and 1
 * returned.
 */
static int call(struct ctl *ctl, const char *method, const char *path, json_t *body, json_t **ret)
{
	struct http_response resp = { 0 };
	_cleanup_free_ char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	json_t *answer = NULL;
	int r;

	r = http_request(ctl->socket, method, path, text, &resp);
	if (r < 0) {
		if (r == -ENOENT || r == -ECONNREFUSED)
			fprintf(stderr, "fleetctl: cannot connect to fleetd at %s: %s (is fleetd running?)\n",
				ctl->socket, strerror(-r));
		else if (r == -EACCES)
			fprintf(stderr, "fleetctl: cannot connect to fleetd at %s: %s (root or the socket group only)\n",
				ctl->socket, strerror(-r));
		else
			fprintf(stderr, "fleetctl: talking to fleetd at %s: %s\n", ctl->socket, strerror(-r));
		return 1;
	}
	if (resp.body_len > 0) {
		answer = json_loadb(resp.body, resp.body_len, 0, NULL);
		if (!answer) {
			fprintf(stderr, "fleetctl: fleetd answered %d with a body that is not JSON\n", resp.status);
			http_response_free(&resp);
			return 1;
		}
	}
	if (resp.status >= 300) {
		const char *msg = json_string_value(json_object_get(answer, "error"));
		fprintf(stderr, "fleetctl: %s\n", msg ? msg : "request failed");
		if (!msg)
			fprintf(stderr, "fleetctl: (HTTP status %d)\n", resp.status);
		json_decref(answer);
		http_response_free(&resp);
		return 1;
	}
	http_response_free(&resp);
	*ret = answer;
	return 0;
}

static void print_json(json_t *j)
{
	char *s = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS);
	if (s)
		puts(s);
	free(s);
}

static const char *str(json_t *obj, const char *key)
{
	const char *s = json_string_value(json_object_get(obj, key));
	return s ? s : "-";
}

static long long num(json_t *obj, const char *key)
{
	return (long long)json_integer_value(json_object_get(obj, key));
}

/*
 * Parse the command's options with getopt_long, which lets options follow
 * positional arguments ("create NAME --backend user"); "--" ends options.
 * Returns 1 after printing help, -1 after a usage error, else 0.
 */
static int parse_opts(const struct command *cmd, int argc, char **argv, const struct option *opts,
		      int (*on_opt)(int c, const char *arg, void *data), void *data)
{
	int c;

	optind = 0;	/* 0, not 1: glibc then forgets main()'s "+" (no-permute) mode */
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (c == 'h') {
			print_command_help(cmd, stdout);
			return 1;
		}
		if (c == '?' || c == ':') {
			if (optopt)
				usage_error(cmd, "unknown option '-%c' or missing value", optopt);
			else
				usage_error(cmd, "unknown option '%s' or missing value", argv[optind - 1]);
			return -1;
		}
		if (on_opt(c, optarg, data) < 0)
			return -1;
	}
	return 0;
}

static int no_opts(int c, const char *arg, void *data)
{
	return -1;
}

/* Check an agent name given on the command line before sending it. */
static bool name_ok(const struct command *cmd, const char *name)
{
	const char *why;

	if (agent_name_check(name, &why) < 0) {
		usage_error(cmd, "invalid agent name '%s': %s", name, why);
		return false;
	}
	return true;
}

static const struct option help_only[] = { { "help", no_argument, NULL, 'h' }, { 0 } };

static int cmd_status(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	json_t *j = NULL, *b;
	const char *k;
	json_t *v;
	int r;

	if ((r = parse_opts(cmd, argc, argv, help_only, no_opts, NULL)) != 0)
		return r < 0 ? EXIT_USAGE : 0;
	if (optind != argc)
		return usage_error(cmd, "status takes no arguments");
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
	}
	json_decref(j);
	return 0;
}

static void print_agent_details(json_t *a)
{
	printf("name:       %s\nbackend:    %s\nstate:      %s\nmemory:     %lld MiB\nvcpus:      %lld\n"
	       "disk:       %lld GiB\nnetwork:    %s\nrestart:    %s\ncommand:    %s\ncreated:    %s\nupdated:    %s\n",
	       str(a, "name"), str(a, "backend"), str(a, "state"), num(a, "memory_mib"), num(a, "vcpus"),
	       num(a, "disk_gib"), str(a, "network"), str(a, "restart"), str(a, "command"), str(a, "created_at"),
	       str(a, "updated_at"));
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
	if (json_object_get(a, "note"))
		printf("note:       %s\n", str(a, "note"));
}

struct create_opts {
	const struct command *cmd;
	json_t *body;
};

static int create_opt(int c, const char *arg, void *data)
{
	struct create_opts *o = data;
	long v;

	switch (c) {
	case 'b':
		if (backend_kind_from_string(arg) < 0) {
			usage_error(o->cmd, "--backend must be 'vm' or 'user', not '%s'", arg);
			return -1;
		}
		json_object_set_new(o->body, "backend", json_string(arg));
		return 0;
	case 'n':
		if (network_kind_from_string(arg) < 0) {
			usage_error(o->cmd, "--network must be 'none' or 'nat', not '%s'", arg);
			return -1;
		}
		json_object_set_new(o->body, "network", json_string(arg));
		return 0;
	case 'c':
		json_object_set_new(o->body, "command", json_string(arg));
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
		if (snapshot_policy_from_string(arg) < 0) {
			usage_error(o->cmd, "--snapshot-policy must be none, before-run or cron, not '%s'", arg);
			return -1;
		}
		json_object_set_new(o->body, "snapshot_policy", json_string(arg));
		return 0;
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
	case 'R':
		if (restart_policy_from_string(arg) < 0) {
			usage_error(o->cmd, "--restart must be 'on-failure', 'always' or 'never', not '%s'", arg);
			return -1;
		}
		json_object_set_new(o->body, "restart", json_string(arg));
		return 0;
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

static int cmd_create(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "backend", required_argument, NULL, 'b' }, { "memory", required_argument, NULL, 'm' },
		{ "vcpus", required_argument, NULL, 'v' }, { "disk", required_argument, NULL, 'd' },
		{ "network", required_argument, NULL, 'n' }, { "command", required_argument, NULL, 'c' },
		{ "restart", required_argument, NULL, 'R' }, { "health-cmd", required_argument, NULL, 'H' },
		{ "health-interval", required_argument, NULL, 'I' }, { "auto-rollback", no_argument, NULL, 'A' },
		{ "snapshot-policy", required_argument, NULL, 'P' }, { "snapshot-schedule", required_argument, NULL, 'S' },
		{ "snapshot-keep", required_argument, NULL, 'K' },
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
		printf("agent '%s' created (backend %s, state %s)\n", str(a, "name"), str(a, "backend"), str(a, "state"));
		if (json_object_get(a, "note"))
			printf("note: %s\n", str(a, "note"));
	}
	json_decref(a);
	return 0;
}

static int cmd_list(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	json_t *j = NULL, *agents, *a;
	size_t i;
	int r;

	if ((r = parse_opts(cmd, argc, argv, help_only, no_opts, NULL)) != 0)
		return r < 0 ? EXIT_USAGE : 0;
	if (optind != argc)
		return usage_error(cmd, "list takes no arguments");
	if (call(ctl, "GET", "/v1/agents", NULL, &j))
		return 1;
	agents = json_object_get(j, "agents");
	if (ctl->json) {
		print_json(agents);
	} else if (json_array_size(agents) == 0) {
		puts("no agents");
	} else {
		printf("%-32s %-7s %-12s %8s %5s %-7s %s\n", "NAME", "BACKEND", "STATE", "MEMORY", "VCPUS", "NETWORK",
		       "CREATED");
		json_array_foreach(agents, i, a)
			printf("%-32s %-7s %-12s %5lldMiB %5lld %-7s %s\n", str(a, "name"), str(a, "backend"),
			       str(a, "state"), num(a, "memory_mib"), num(a, "vcpus"), str(a, "network"),
			       str(a, "created_at"));
	}
	json_decref(j);
	return 0;
}

static int cmd_show(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	_cleanup_free_ char *path = NULL;
	json_t *a = NULL;
	int r;

	if ((r = parse_opts(cmd, argc, argv, help_only, no_opts, NULL)) != 0)
		return r < 0 ? EXIT_USAGE : 0;
	if (argc - optind != 1)
		return usage_error(cmd, "show needs exactly one agent NAME");
	if (!name_ok(cmd, argv[optind]))
		return EXIT_USAGE;
	path = xasprintf("/v1/agents/%s", argv[optind]);
	if (call(ctl, "GET", path, NULL, &a))
		return 1;
	if (ctl->json)
		print_json(a);
	else
		print_agent_details(a);
	json_decref(a);
	return 0;
}

static int rm_opt(int c, const char *arg, void *data)
{
	*(bool *)data = true;
	return 0;
}

static int cmd_rm(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "force", no_argument, NULL, 'f' }, { "help", no_argument, NULL, 'h' }, { 0 },
	};
	_cleanup_free_ char *path = NULL;
	bool force = false;
	json_t *a = NULL;
	int r;

	if ((r = parse_opts(cmd, argc, argv, opts, rm_opt, &force)) != 0)
		return r < 0 ? EXIT_USAGE : 0;
	if (argc - optind != 1)
		return usage_error(cmd, "rm needs exactly one agent NAME");
	if (!name_ok(cmd, argv[optind]))
		return EXIT_USAGE;
	path = xasprintf("/v1/agents/%s%s", argv[optind], force ? "?force=1" : "");
	if (call(ctl, "DELETE", path, NULL, &a))
		return 1;
	if (ctl->json)
		print_json(a);
	else
		printf("agent '%s' removed\n", str(a, "removed"));
	json_decref(a);
	return 0;
}

/* --limit N, 1 to 10000 (audit, runs) */
static int limit_opt(int c, const char *arg, void *data)
{
	long v;

	if (parse_long(arg, 1, 10000, &v) < 0) {
		fprintf(stderr, "fleetctl: --limit must be a number from 1 to 10000\n");
		return -1;
	}
	*(long *)data = v;
	return 0;
}

static int cmd_audit(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "limit", required_argument, NULL, 'n' }, { "help", no_argument, NULL, 'h' }, { 0 },
	};
	_cleanup_free_ char *path = NULL;
	json_t *j = NULL, *entries, *e;
	long limit = 50;
	size_t i;
	int r;

	if ((r = parse_opts(cmd, argc, argv, opts, limit_opt, &limit)) != 0)
		return r < 0 ? EXIT_USAGE : 0;
	if (optind != argc)
		return usage_error(cmd, "audit takes no arguments");
	path = xasprintf("/v1/audit?limit=%ld", limit);
	if (call(ctl, "GET", path, NULL, &j))
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

static int timeout_opt(int c, const char *arg, void *data)
{
	long v;

	if (parse_long(arg, 0, 86400, &v) < 0) {
		fprintf(stderr, "fleetctl: --timeout needs a number of seconds from 0 to 86400, not '%s'\n", arg);
		return -1;
	}
	*(long *)data = v;
	return 0;
}

/* start, stop, restart: NAME [--timeout S] -> POST /v1/agents/NAME/VERB. */
static int cmd_lifecycle(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "timeout", required_argument, NULL, 't' }, { "help", no_argument, NULL, 'h' }, { 0 },
	};
	_cleanup_free_ char *path = NULL;
	json_t *a = NULL, *body = NULL;
	long timeout = -1;
	int r;

	if ((r = parse_opts(cmd, argc, argv, opts, timeout_opt, &timeout)) != 0)
		return r < 0 ? EXIT_USAGE : 0;
	if (argc - optind != 1)
		return usage_error(cmd, "%s needs exactly one agent NAME", cmd->name);
	if (!name_ok(cmd, argv[optind]))
		return EXIT_USAGE;
	if (timeout >= 0)
		body = json_pack("{s:i}", "timeout_s", (int)timeout);
	path = xasprintf("/v1/agents/%s/%s", argv[optind], cmd->name);
	r = call(ctl, "POST", path, body, &a);
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

struct exec_opts {
	bool root, no_stdin;
	long timeout;
	json_t *env;
	const struct command *cmd;
};

static int exec_opt(int c, const char *arg, void *data)
{
	struct exec_opts *o = data;
	const char *eq;

	switch (c) {
	case 'r': o->root = true; return 0;
	case 'n': o->no_stdin = true; return 0;
	case 't': return timeout_opt(c, arg, &o->timeout);
	case 'e':
		eq = strchr(arg, '=');
		if (!eq || eq == arg) {
			usage_error(o->cmd, "--env needs NAME=VALUE, not '%s'", arg);
			return -1;
		}
		{
			_cleanup_free_ char *k = xstrndup(arg, (size_t)(eq - arg));
			json_object_set_new(o->env, k, json_string(eq + 1));
		}
		return 0;
	}
	return -1;
}

struct exec_out {
	int exit_code;
	bool finished;
};

/* One JSON line of the exec stream: output to pass through, or how it ended. */
static int exec_line(void *ud, const char *line, size_t len)
{
	struct exec_out *o = ud;
	_cleanup_(json_decrefp) json_t *j = json_loadb(line, len, 0, NULL);
	json_t *v;

	if (!j)
		return -EPROTO;
	if ((v = json_object_get(j, "data"))) {
		unsigned char *bytes;
		size_t n;
		int fd = strcmp(str(j, "stream"), "stderr") == 0 ? STDERR_FILENO : STDOUT_FILENO;

		if (base64_decode(json_string_value(v), json_string_length(v), &bytes, &n) < 0)
			return -EPROTO;
		(void)write_all(fd, bytes, n);
		free(bytes);
		return 0;
	}
	o->finished = true;
	if ((v = json_object_get(j, "exit_code"))) {
		o->exit_code = (int)json_integer_value(v);
	} else if ((v = json_object_get(j, "signal"))) {
		fprintf(stderr, "fleetctl: the command was killed by signal %d\n", (int)json_integer_value(v));
		o->exit_code = 128 + (int)json_integer_value(v);
	} else if (json_is_true(json_object_get(j, "timed_out"))) {
		fprintf(stderr, "fleetctl: %s\n", str(j, "error"));
		o->exit_code = 124;
	} else {
		fprintf(stderr, "fleetctl: %s\n", str(j, "error"));
		o->exit_code = 1;
	}
	return 0;
}

/* Read all of stdin (bounded); NULL with *len 0 when there is none. */
static int read_stdin(char **ret, size_t *len)
{
	size_t cap = 0, n = 0;
	char *buf = NULL;

	for (;;) {
		ssize_t k;

		if (cap - n < 65536) {
			cap = cap ? cap * 2 : 65536;
			if (cap > EXEC_STDIN_MAX * 2) {
				free(buf);
				return -EFBIG;
			}
			buf = xrealloc(buf, cap);
		}
		k = read(STDIN_FILENO, buf + n, cap - n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0) {
			free(buf);
			return -errno;
		}
		if (k == 0)
			break;
		n += (size_t)k;
		if (n > EXEC_STDIN_MAX) {
			free(buf);
			return -EFBIG;
		}
	}
	*ret = buf;
	*len = n;
	return 0;
}

static int cmd_exec(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "root", no_argument, NULL, 'r' }, { "timeout", required_argument, NULL, 't' },
		{ "env", required_argument, NULL, 'e' }, { "no-stdin", no_argument, NULL, 'n' },
		{ "help", no_argument, NULL, 'h' }, { 0 },
	};
	struct exec_opts o = { .timeout = -1, .env = json_object(), .cmd = cmd };
	struct exec_out out = { 0 };
	struct http_response err = { 0 };
	_cleanup_(json_decrefp) json_t *body = NULL;
	_cleanup_free_ char *path = NULL, *text = NULL, *in = NULL;
	json_t *args;
	size_t in_len = 0;
	int dashdash = -1, r;

	/* Everything after "--" is the command, untouched by option parsing. */
	for (int i = 1; i < argc; i++)
		if (strcmp(argv[i], "--") == 0) {
			dashdash = i;
			break;
		}
	if (dashdash < 0) {
		json_decref(o.env);
		if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
			print_command_help(cmd, stdout);
			return 0;
		}
		return usage_error(cmd, "exec needs '--' before the command");
	}
	r = parse_opts(cmd, dashdash, argv, opts, exec_opt, &o);
	if (r != 0) {
		json_decref(o.env);
		return r < 0 ? EXIT_USAGE : 0;
	}
	if (dashdash - optind != 1 || dashdash + 1 >= argc) {
		json_decref(o.env);
		return usage_error(cmd, "exec needs an agent NAME, then '--' and a command");
	}
	if (!name_ok(cmd, argv[optind])) {
		json_decref(o.env);
		return EXIT_USAGE;
	}
	args = json_array();
	for (int i = dashdash + 1; i < argc; i++)
		json_array_append_new(args, json_string(argv[i]));
	body = json_pack("{s:o, s:b, s:o}", "argv", args, "root", o.root, "env", o.env);
	if (o.timeout >= 0)
		json_object_set_new(body, "timeout_s", json_integer(o.timeout));
	if (!o.no_stdin && !isatty(STDIN_FILENO)) {
		if ((r = read_stdin(&in, &in_len)) < 0) {
			fprintf(stderr, "fleetctl: reading stdin: %s (at most %d MiB)\n", strerror(-r), EXEC_STDIN_MAX >> 20);
			return 1;
		}
		if (in_len > 0) {
			_cleanup_free_ char *b64 = base64_encode(in, in_len);
			json_object_set_new(body, "stdin", json_string(b64));
		}
	}
	text = json_dumps(body, JSON_COMPACT);
	path = xasprintf("/v1/agents/%s/exec", argv[optind]);
	r = http_request_lines(ctl->socket, "POST", path, text, strlen(text), exec_line, &out, &err);
	if (r < 0) {
		if (r == -ENOENT || r == -ECONNREFUSED)
			fprintf(stderr, "fleetctl: cannot connect to fleetd at %s: %s (is fleetd running?)\n",
				ctl->socket, strerror(-r));
		else
			fprintf(stderr, "fleetctl: exec stream from fleetd broke off: %s\n", strerror(-r));
		return 1;
	}
	if (r != 200) {
		_cleanup_(json_decrefp) json_t *e = json_loadb(err.body ? err.body : "", err.body_len, 0, NULL);
		fprintf(stderr, "fleetctl: %s\n", e ? str(e, "error") : "exec failed");
		http_response_free(&err);
		return 1;
	}
	if (!out.finished) {
		fprintf(stderr, "fleetctl: exec stream ended without an exit status\n");
		return 1;
	}
	return out.exit_code;
}

static int bytes_opt(int c, const char *arg, void *data)
{
	long v;

	if (parse_long(arg, 1, 16L << 20, &v) < 0) {
		fprintf(stderr, "fleetctl: --bytes must be a number from 1 to 16777216\n");
		return -1;
	}
	*(long *)data = v;
	return 0;
}

static int cmd_console(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "bytes", required_argument, NULL, 'b' }, { "help", no_argument, NULL, 'h' }, { 0 },
	};
	_cleanup_free_ char *path = NULL;
	_cleanup_(json_decrefp) json_t *j = NULL;
	unsigned char *text;
	long bytes = 65536;
	size_t n;
	int r;

	if ((r = parse_opts(cmd, argc, argv, opts, bytes_opt, &bytes)) != 0)
		return r < 0 ? EXIT_USAGE : 0;
	if (argc - optind != 1)
		return usage_error(cmd, "console needs exactly one agent NAME");
	if (!name_ok(cmd, argv[optind]))
		return EXIT_USAGE;
	path = xasprintf("/v1/agents/%s/console?bytes=%ld", argv[optind], bytes);
	if (call(ctl, "GET", path, NULL, &j))
		return 1;
	if (ctl->json) {
		print_json(j);
		return 0;
	}
	if (base64_decode(str(j, "data"), strlen(str(j, "data")), &text, &n) < 0) {
		fprintf(stderr, "fleetctl: fleetd sent a console that is not base64\n");
		return 1;
	}
	/* Guest bytes on a terminal could drive it (escape sequences); piped, they stay raw. */
	if (isatty(STDOUT_FILENO)) {
		size_t clean_len;
		char *clean = term_sanitize(text, n, &clean_len);

		(void)write_all(STDOUT_FILENO, clean, clean_len);
		free(clean);
	} else {
		(void)write_all(STDOUT_FILENO, text, n);
	}
	free(text);
	return 0;
}

struct snap_opts {
	json_t *body;
	const struct command *cmd;
};

static int snapshot_opt(int c, const char *arg, void *data)
{
	struct snap_opts *o = data;

	if (c == 'p') {
		json_object_set_new(o->body, "pin", json_true());
		return 0;
	}
	if (c == 'N') {
		json_object_set_new(o->body, "note", json_string(arg));
		return 0;
	}
	return -1;
}

/* snapshot NAME [SNAP] [--note TEXT] [--pin]  |  snapshot rm NAME SNAP */
static int cmd_snapshot(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "note", required_argument, NULL, 'N' }, { "pin", no_argument, NULL, 'p' },
		{ "help", no_argument, NULL, 'h' }, { 0 },
	};
	struct snap_opts o = { json_object(), cmd };
	_cleanup_(json_decrefp) json_t *answer = NULL;
	json_t *body;
	_cleanup_free_ char *path = NULL;
	const char *why;
	int r;

	r = parse_opts(cmd, argc, argv, opts, snapshot_opt, &o);
	if (r != 0) {
		json_decref(o.body);
		return r < 0 ? EXIT_USAGE : 0;
	}
	/* "snapshot rm NAME SNAP" deletes; an agent named rm still works as "snapshot rm [SNAP]". */
	if (argc - optind == 3 && strcmp(argv[optind], "rm") == 0) {
		json_decref(o.body);
		if (!name_ok(cmd, argv[optind + 1]))
			return EXIT_USAGE;
		if (snapshot_name_check(argv[optind + 2], &why) < 0)
			return usage_error(cmd, "invalid snapshot name '%s': %s", argv[optind + 2], why);
		path = xasprintf("/v1/agents/%s/snapshots/%s", argv[optind + 1], argv[optind + 2]);
		if (call(ctl, "DELETE", path, NULL, &answer))
			return 1;
		if (ctl->json)
			print_json(answer);
		else
			printf("agent '%s': snapshot '%s' removed\n", str(answer, "agent"), str(answer, "removed"));
		return 0;
	}
	/* "snapshot pin|unpin NAME SNAP": keep it whatever retention says, or no longer. */
	if (argc - optind == 3 && (strcmp(argv[optind], "pin") == 0 || strcmp(argv[optind], "unpin") == 0)) {
		bool pin = strcmp(argv[optind], "pin") == 0;

		json_decref(o.body);
		if (!name_ok(cmd, argv[optind + 1]))
			return EXIT_USAGE;
		if (snapshot_name_check(argv[optind + 2], &why) < 0)
			return usage_error(cmd, "invalid snapshot name '%s': %s", argv[optind + 2], why);
		path = xasprintf("/v1/agents/%s/snapshots/%s", argv[optind + 1], argv[optind + 2]);
		body = json_pack("{s:b}", "pinned", pin);
		r = call(ctl, "PATCH", path, body, &answer);
		json_decref(body);
		if (r)
			return 1;
		if (ctl->json)
			print_json(answer);
		else if (json_is_true(json_object_get(answer, "pruned")))
			printf("agent '%s': snapshot '%s' unpinned, and deleted by the retention policy\n",
			       argv[optind + 1], argv[optind + 2]);
		else
			printf("agent '%s': snapshot '%s' %s\n", argv[optind + 1], argv[optind + 2],
			       pin ? "pinned" : "unpinned");
		return 0;
	}
	if (argc - optind < 1 || argc - optind > 2) {
		json_decref(o.body);
		return usage_error(cmd, "snapshot needs an agent NAME and optionally a snapshot name");
	}
	if (!name_ok(cmd, argv[optind])) {
		json_decref(o.body);
		return EXIT_USAGE;
	}
	if (argc - optind == 2) {
		if (snapshot_name_check(argv[optind + 1], &why) < 0) {
			json_decref(o.body);
			return usage_error(cmd, "invalid snapshot name '%s': %s", argv[optind + 1], why);
		}
		json_object_set_new(o.body, "name", json_string(argv[optind + 1]));
	}
	path = xasprintf("/v1/agents/%s/snapshots", argv[optind]);
	r = call(ctl, "POST", path, o.body, &answer);
	json_decref(o.body);
	if (r)
		return 1;
	if (ctl->json)
		print_json(answer);
	else
		printf("agent '%s': snapshot '%s' taken (%s)\n", argv[optind], str(answer, "name"), str(answer, "kind"));
	return 0;
}

static const char *yes_no_unknown(json_t *v)
{
	return json_is_true(v) ? "good" : json_is_false(v) ? "bad" : "-";
}

static int cmd_snapshots(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	_cleanup_(json_decrefp) json_t *j = NULL;
	_cleanup_free_ char *path = NULL;
	json_t *list, *s;
	size_t i;
	int r;

	if ((r = parse_opts(cmd, argc, argv, help_only, no_opts, NULL)) != 0)
		return r < 0 ? EXIT_USAGE : 0;
	if (argc - optind != 1)
		return usage_error(cmd, "snapshots needs exactly one agent NAME");
	if (!name_ok(cmd, argv[optind]))
		return EXIT_USAGE;
	path = xasprintf("/v1/agents/%s/snapshots", argv[optind]);
	if (call(ctl, "GET", path, NULL, &j))
		return 1;
	list = json_object_get(j, "snapshots");
	if (ctl->json) {
		print_json(list);
		return 0;
	}
	if (json_array_size(list) == 0) {
		printf("agent '%s' has no snapshots\n", argv[optind]);
		return 0;
	}
	printf("%-28s %-20s %10s %-5s %-5s %-6s %s\n", "NAME", "TIME", "SIZE", "KIND", "STATE", "PINNED", "NOTE");
	json_array_foreach(list, i, s) {
		char size[32] = "-";
		json_t *sz = json_object_get(s, "size_bytes");

		if (json_is_integer(sz))
			snprintf(size, sizeof(size), "%.1fMiB", (double)json_integer_value(sz) / (1 << 20));
		printf("%-28s %-20s %10s %-5s %-5s %-6s %s\n", str(s, "name"), str(s, "created_at"), size, str(s, "kind"),
		       yes_no_unknown(json_object_get(s, "good")), json_is_true(json_object_get(s, "pinned")) ? "yes" : "no",
		       json_object_get(s, "note") ? str(s, "note") : "");
	}
	return 0;
}

static int restore_opt(int c, const char *arg, void *data)
{
	*(bool *)data = true;
	return 0;
}

static int cmd_restore(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "last-good", no_argument, NULL, 'g' }, { "help", no_argument, NULL, 'h' }, { 0 },
	};
	_cleanup_(json_decrefp) json_t *answer = NULL, *body = NULL;
	_cleanup_free_ char *path = NULL;
	bool last_good = false;
	const char *why;
	int r;

	if ((r = parse_opts(cmd, argc, argv, opts, restore_opt, &last_good)) != 0)
		return r < 0 ? EXIT_USAGE : 0;
	if (argc - optind != (last_good ? 1 : 2))
		return usage_error(cmd, "restore needs an agent NAME and either a snapshot name or --last-good");
	if (!name_ok(cmd, argv[optind]))
		return EXIT_USAGE;
	if (last_good) {
		body = json_pack("{s:b}", "last_good", 1);
	} else {
		if (snapshot_name_check(argv[optind + 1], &why) < 0)
			return usage_error(cmd, "invalid snapshot name '%s': %s", argv[optind + 1], why);
		body = json_pack("{s:s}", "snapshot", argv[optind + 1]);
	}
	path = xasprintf("/v1/agents/%s/restore", argv[optind]);
	if (call(ctl, "POST", path, body, &answer))
		return 1;
	if (ctl->json)
		print_json(answer);
	else
		printf("agent '%s' restored to snapshot '%s' (state %s)\n", str(answer, "agent"), str(answer, "restored"),
		       str(answer, "state"));
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

static int cmd_set(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "health-cmd", required_argument, NULL, 'H' }, { "default-health", no_argument, NULL, 'D' },
		{ "health-interval", required_argument, NULL, 'I' }, { "auto-rollback", required_argument, NULL, 'A' },
		{ "snapshot-policy", required_argument, NULL, 'P' }, { "snapshot-schedule", required_argument, NULL, 'S' },
		{ "snapshot-keep", required_argument, NULL, 'K' },
		{ "command", required_argument, NULL, 'c' },
		{ "help", no_argument, NULL, 'h' }, { 0 },
	};
	struct create_opts o = { cmd, json_object() };
	_cleanup_(json_decrefp) json_t *a = NULL;
	_cleanup_free_ char *path = NULL;
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
	path = xasprintf("/v1/agents/%s", argv[optind]);
	r = call(ctl, "PATCH", path, o.body, &a);
	json_decref(o.body);
	if (r)
		return 1;
	if (ctl->json)
		print_json(a);
	else
		print_agent_details(a);
	return 0;
}

static int cmd_health(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	_cleanup_(json_decrefp) json_t *j = NULL;
	_cleanup_free_ char *path = NULL;
	int r;

	if ((r = parse_opts(cmd, argc, argv, help_only, no_opts, NULL)) != 0)
		return r < 0 ? EXIT_USAGE : 0;
	if (argc - optind != 1)
		return usage_error(cmd, "health needs exactly one agent NAME");
	if (!name_ok(cmd, argv[optind]))
		return EXIT_USAGE;
	path = xasprintf("/v1/agents/%s/health", argv[optind]);
	if (call(ctl, "POST", path, NULL, &j))
		return 1;
	if (ctl->json)
		print_json(j);
	else
		printf("agent '%s': %s (%s)\n", argv[optind],
		       json_is_true(json_object_get(j, "healthy")) ? "healthy" : "unhealthy", str(j, "detail"));
	return json_is_true(json_object_get(j, "healthy")) ? 0 : 3;
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

/* What `trigger --wait` exits with: the run's exit code, or 1 if it failed without one. */
static int run_exit_status(json_t *r)
{
	if (json_is_integer(json_object_get(r, "exit_code")))
		return (int)num(r, "exit_code");
	return strcmp(str(r, "state"), "succeeded") == 0 ? 0 : 1;
}

static int trigger_opt(int c, const char *arg, void *data)
{
	*(bool *)data = true;
	return 0;
}

static int cmd_trigger(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "wait", no_argument, NULL, 'w' }, { "help", no_argument, NULL, 'h' }, { 0 },
	};
	_cleanup_(json_decrefp) json_t *answer = NULL;
	_cleanup_free_ char *path = NULL, *run_path = NULL;
	bool wait = false;
	int r;

	if ((r = parse_opts(cmd, argc, argv, opts, trigger_opt, &wait)) != 0)
		return r < 0 ? EXIT_USAGE : 0;
	if (argc - optind != 1)
		return usage_error(cmd, "trigger needs exactly one agent NAME");
	if (!name_ok(cmd, argv[optind]))
		return EXIT_USAGE;
	path = xasprintf("/v1/agents/%s/runs", argv[optind]);
	if (call(ctl, "POST", path, NULL, &answer))
		return 1;
	if (!wait) {
		if (ctl->json)
			print_json(answer);
		else
			printf("agent '%s': run %lld queued\n", argv[optind], num(answer, "id"));
		return 0;
	}
	run_path = xasprintf("/v1/agents/%s/runs/%lld", argv[optind], num(answer, "id"));
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

static int cmd_runs(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "limit", required_argument, NULL, 'n' }, { "help", no_argument, NULL, 'h' }, { 0 },
	};
	_cleanup_(json_decrefp) json_t *j = NULL;
	_cleanup_free_ char *path = NULL;
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
		path = xasprintf("/v1/agents/%s/runs/%ld", argv[optind], id);
		if (call(ctl, "GET", path, NULL, &j))
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
	path = xasprintf("/v1/agents/%s/runs?limit=%ld", argv[optind], limit);
	if (call(ctl, "GET", path, NULL, &j))
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

/* "a (disk, boot), b (boot)" from an image's used_by list; caller frees. */
static char *image_users_text(json_t *users)
{
	char *text = xstrdup("");
	const char *last = NULL;
	json_t *u;
	size_t i;

	json_array_foreach(users, i, u) {
		const char *agent = str(u, "agent");
		char *t = last && strcmp(last, agent) == 0 ? xasprintf("%.*s, %s)", (int)strlen(text) - 1, text, str(u, "as"))
			: xasprintf("%s%s%s (%s)", text, *text ? ", " : "", agent, str(u, "as"));
		free(text);
		text = t;
		last = agent;
	}
	return text;
}

static int cmd_image(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	_cleanup_free_ char *path = NULL;
	json_t *j = NULL, *images, *im;
	const char *sub;
	size_t i;
	int r;

	if ((r = parse_opts(cmd, argc, argv, help_only, no_opts, NULL)) != 0)
		return r < 0 ? EXIT_USAGE : 0;
	if (argc - optind < 1)
		return usage_error(cmd, "image needs ls or rm");
	sub = argv[optind];
	if (strcmp(sub, "rm") == 0) {
		if (argc - optind != 2)
			return usage_error(cmd, "image rm needs exactly one image ID");
		path = xasprintf("/v1/images/%s", argv[optind + 1]);
		if (strspn(argv[optind + 1], "0123456789abcdefsha:") != strlen(argv[optind + 1]))
			return usage_error(cmd, "an image ID is hex digits, as 'fleetctl image ls' shows it");
		if (call(ctl, "DELETE", path, NULL, &j))
			return 1;
		if (ctl->json)
			print_json(j);
		else
			printf("image sha256:%.12s removed\n", str(j, "removed"));
		json_decref(j);
		return 0;
	}
	if (strcmp(sub, "ls") != 0 || argc - optind != 1)
		return usage_error(cmd, "unknown image command '%s'", sub);
	if (call(ctl, "GET", "/v1/images", NULL, &j))
		return 1;
	images = json_object_get(j, "images");
	if (ctl->json) {
		print_json(j);
	} else if (json_array_size(images) == 0) {
		printf("no stored images (the image in %s is stored when an agent is created from it)\n",
		       str(j, "image_dir"));
	} else {
		printf("%-20s %-8s %-20s %-20s %-16s %8s  %s\n", "ID", "CURRENT", "IMPORTED", "BUILT", "KERNEL", "SIZE",
		       "USED BY");
		json_array_foreach(images, i, im) {
			_cleanup_free_ char *users = image_users_text(json_object_get(im, "used_by"));

			printf("sha256:%-13.12s %-8s %-20s %-20s %-16s %5lldMiB  %s\n", str(im, "id"),
			       json_is_true(json_object_get(im, "current")) ? "yes" : "", str(im, "imported_at"),
			       str(im, "built"), str(im, "kernel"), num(im, "size_bytes") >> 20, *users ? users : "-");
		}
		if (json_is_null(json_object_get(j, "current")))
			printf("the image in %s is not stored yet (it is when an agent is created or upgraded)\n",
			       str(j, "image_dir"));
	}
	json_decref(j);
	return 0;
}

static int cmd_upgrade(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	_cleanup_free_ char *path = NULL;
	json_t *j = NULL;
	int r;

	if ((r = parse_opts(cmd, argc, argv, help_only, no_opts, NULL)) != 0)
		return r < 0 ? EXIT_USAGE : 0;
	if (argc - optind != 1)
		return usage_error(cmd, "upgrade needs exactly one agent NAME");
	if (!name_ok(cmd, argv[optind]))
		return EXIT_USAGE;
	path = xasprintf("/v1/agents/%s/upgrade", argv[optind]);
	if (call(ctl, "POST", path, NULL, &j))
		return 1;
	if (ctl->json)
		print_json(j);
	else if (!json_is_true(json_object_get(j, "changed")))
		printf("agent '%s' boots image sha256:%.12s already\n", str(j, "agent"), str(j, "to"));
	else
		printf("agent '%s' boots image sha256:%.12s (was sha256:%.12s) from its next start%s\n", str(j, "agent"),
		       str(j, "to"), str(j, "from"),
		       json_is_true(json_object_get(j, "running")) ? ": 'fleetctl restart' it" : "");
	json_decref(j);
	return 0;
}

static int cmd_help(struct ctl *ctl, const struct command *cmd, int argc, char **argv);

#define SNAPSHOT_OPTIONS_HELP \
	"  --snapshot-policy P when fleet snapshots the agent by itself: none (default),\n" \
	"                      before-run (before every run), or cron (on a schedule)\n" \
	"  --snapshot-schedule CRON  5-field cron spec in the host's time zone, e.g.\n" \
	"                      '0 * * * *' or '@daily'; implies --snapshot-policy cron\n" \
	"  --snapshot-keep N   keep the newest N snapshots plus pinned ones and the newest\n" \
	"                      good one, delete the rest (default 0: keep all)\n"

static const struct command commands[] = {
	{ "status", "", "Show whether fleetd runs, its version, uptime and agent count.", NULL, cmd_status },
	{ "create", "NAME [--backend vm|user] [--memory MIB] [--vcpus N] [--disk GIB] [--network none|nat]\n"
	  "                [--restart on-failure|always|never] [--health-cmd CMD] [--health-interval S]\n"
	  "                [--auto-rollback] [--command CMD] [--snapshot-policy none|before-run|cron]\n"
	  "                [--snapshot-schedule CRON] [--snapshot-keep N]",
	  "Create an agent and its isolated environment.",
	  "NAME is 1 to 32 characters: a lower-case letter, then lower-case letters, digits or '-'.\n"
	  "  --backend vm|user   a libvirt VM (default) or a Unix user on the host\n"
	  "  --memory MIB        guest memory, 64 to 65536 (default 256; vm only)\n"
	  "  --vcpus N           guest CPUs, 1 to 64 (default 1; vm only)\n"
	  "  --disk GIB          guest disk size, 1 to 1024 (default 2; vm only)\n"
	  "  --network none|nat  no network (default) or an isolated NAT network (vm only)\n"
	  "  --restart POLICY    when the environment stops without being asked: restart it\n"
	  "                      on-failure (default: crashed or killed), always, or never\n"
	  "  --health-cmd CMD    its health check, run as the agent (default: agentd health;\n"
	  "                      user agents: a write to the home)\n"
	  "  --health-interval S seconds between checks while it runs (default 60; 0: none)\n"
	  "  --auto-rollback     when a check fails, restore the newest good snapshot\n"
	  "  --command CMD       what the agent runs when triggered\n"
	  SNAPSHOT_OPTIONS_HELP,
	  cmd_create },
	{ "list", "", "List agents with their backend and state.", NULL, cmd_list },
	{ "show", "NAME", "Show one agent in detail.", NULL, cmd_show },
	{ "rm", "NAME [--force]", "Remove an agent, its environment and everything it owns.",
	  "  --force   remove even while the agent is running\n", cmd_rm },
	{ "start", "NAME", "Start an agent's environment (boot its VM).", NULL, cmd_lifecycle },
	{ "stop", "NAME [--timeout S]", "Stop an agent's environment: clean shutdown, forced after S seconds.",
	  "  --timeout S   seconds to wait for a clean shutdown (default 30)\n", cmd_lifecycle },
	{ "restart", "NAME [--timeout S]", "Stop, then start an agent's environment.",
	  "  --timeout S   seconds to wait for a clean shutdown (default 30)\n", cmd_lifecycle },
	{ "exec", "NAME [--root] [--timeout S] [--env NAME=VALUE]... [--no-stdin] -- CMD [ARG]...",
	  "Run a command in an agent's environment; exit with its exit code.",
	  "Output streams back as it comes; stdin is forwarded when it is not a terminal\n"
	  "(at most 12 MiB). Exit status: the command's, 128+N if it was killed by signal N,\n"
	  "124 if it timed out, 1 if fleetd could not run it.\n"
	  "  --root          run as the environment's root (vm agents)\n"
	  "  --timeout S     kill the command after S seconds\n"
	  "  --env N=V       set an environment variable (repeatable)\n"
	  "  --no-stdin      do not read stdin\n",
	  cmd_exec },
	{ "console", "NAME [--bytes N]", "Show the end of a VM agent's console log.",
	  "  --bytes N   how much of the end to show (default 65536)\n", cmd_console },
	{ "snapshot", "NAME [SNAP] [--note TEXT] [--pin]  |  snapshot rm|pin|unpin NAME SNAP",
	  "Take a snapshot of an agent's environment, or delete one.",
	  "A running VM gets a full checkpoint (memory and disk: processes come back on\n"
	  "restore); a stopped VM a disk snapshot; a user agent a copy of its home. SNAP\n"
	  "defaults to snap-YYYYmmdd-HHMMSS.\n"
	  "  --note TEXT   a note shown by 'fleetctl snapshots'\n"
	  "  --pin         keep it whatever the retention policy says\n"
	  "'snapshot pin NAME SNAP' and 'snapshot unpin NAME SNAP' change that later; an\n"
	  "unpinned snapshot past the agent's --snapshot-keep is deleted at once.\n",
	  cmd_snapshot },
	{ "snapshots", "NAME", "List an agent's snapshots.", NULL, cmd_snapshots },
	{ "restore", "NAME SNAP | NAME --last-good", "Roll an agent back to a snapshot.",
	  "  --last-good   the newest snapshot marked good by a health check\n", cmd_restore },
	{ "set", "NAME [--command CMD] [--health-cmd CMD | --default-health] [--health-interval S]\n"
	  "             [--auto-rollback on|off] [--snapshot-policy none|before-run|cron]\n"
	  "             [--snapshot-schedule CRON] [--snapshot-keep N]",
	  "Change an agent's command, health check, automatic rollback and snapshot policy.",
	  "  --command CMD       what the agent runs when triggered (from the next run on)\n"
	  SNAPSHOT_OPTIONS_HELP, cmd_set },
	{ "health", "NAME", "Run an agent's health check now (exit 0 healthy, 3 unhealthy).", NULL, cmd_health },
	{ "trigger", "NAME [--wait]", "Queue a run of the agent's command (as a webhook or schedule would).",
	  "Runs of one agent go one at a time, oldest first. A stopped environment is\n"
	  "started first; with --snapshot-policy before-run a snapshot is taken first;\n"
	  "the health check runs after. The command runs as the agent with FLEET_RUN_ID,\n"
	  "FLEET_TRIGGER and FLEET_AGENT set; its output goes to the run's log.\n"
	  "  --wait   wait for the run, print its log, exit with its exit code\n",
	  cmd_trigger },
	{ "runs", "NAME [ID] [--limit N]", "List an agent's runs, or show one with the end of its log.",
	  "  --limit N   show the newest N runs (default 20)\n", cmd_runs },
	{ "audit", "[--limit N]", "Show the audit log: who changed what, when, and the outcome.",
	  "  --limit N   show the newest N records (default 50, at most 10000)\n", cmd_audit },
	{ "image", "ls  |  image rm ID", "List the stored guest images and who uses each, or remove an unused one.",
	  "Every VM agent keeps the image it was created from (its disk's base) in the\n"
	  "image store, whatever is rebuilt in image_dir later. 'image ls' shows each\n"
	  "stored image, whether it is the one now in image_dir (CURRENT), and which\n"
	  "agents use it: as the base of their disk, as the kernel and initramfs they\n"
	  "boot, or through snapshots taken before an upgrade. 'image rm ID' (a unique\n"
	  "prefix will do) removes an image no agent uses, and refuses otherwise.\n",
	  cmd_image },
	{ "upgrade", "NAME", "Make a VM agent boot the image now in image_dir (new agentd, kernel).",
	  "The agent keeps its disk (still on the base it was made on); from its next\n"
	  "start it boots the current image's kernel and initramfs, which install that\n"
	  "image's agentd and dropbear on its disk. A running agent: 'fleetctl restart'.\n",
	  cmd_upgrade },
	{ "help", "[COMMAND]", "Show help for fleetctl or one command.", NULL, cmd_help },
};

static const struct command *find_command(const char *name)
{
	for (size_t i = 0; i < ARRAY_SIZE(commands); i++)
		if (strcmp(commands[i].name, name) == 0)
			return &commands[i];
	return NULL;
}

static void usage(FILE *out)
{
	fprintf(out,
		"Usage: fleetctl [-s SOCKET] [--json] COMMAND [ARG]...\n"
		"Control fleetd, the keeper of isolated per-agent environments.\n"
		"\n"
		"  -s, --socket SOCKET  fleetd's control socket (default $FLEET_SOCKET, else " DEFAULT_SOCKET ")\n"
		"      --json           print fleetd's JSON answers instead of tables\n"
		"  -h, --help           show this help\n"
		"      --version        show the version\n"
		"\nCommands:\n");
	for (size_t i = 0; i < ARRAY_SIZE(commands); i++)
		fprintf(out, "  %-8s %s\n", commands[i].name, commands[i].summary);
	fprintf(out, "\nExit status: 0 on success, 1 when fleetd reports an error, 2 on a usage error.\n"
		     "'fleetctl help COMMAND' shows a command's arguments.\n");
}

static int cmd_help(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	const struct command *c;

	if (argc < 2) {
		usage(stdout);
		return 0;
	}
	if (!(c = find_command(argv[1])))
		return usage_error(NULL, "unknown command '%s'", argv[1]);
	print_command_help(c, stdout);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, 's' }, { "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' }, { "version", no_argument, NULL, 'V' }, { 0 },
	};
	struct ctl ctl = { .socket = getenv("FLEET_SOCKET") };
	const struct command *cmd;
	int c;

	if (!ctl.socket || !*ctl.socket)
		ctl.socket = DEFAULT_SOCKET;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+s:h", opts, NULL)) != -1) {
		switch (c) {
		case 's': ctl.socket = optarg; break;
		case 'j': ctl.json = true; break;
		case 'h': usage(stdout); return 0;
		case 'V': printf("fleetctl %s\n", PACKAGE_VERSION); return 0;
		default:
			return usage_error(NULL, "unknown option '%s' or missing value", argv[optind - 1]);
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return EXIT_USAGE;
	}
	if (!(cmd = find_command(argv[optind])))
		return usage_error(NULL, "unknown command '%s'", argv[optind]);
	return cmd->run(&ctl, cmd, argc - optind, argv + optind);
}
