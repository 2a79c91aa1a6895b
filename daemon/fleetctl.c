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

#include "agent.h"
#include "http_client.h"
#include "names.h"
#include "util.h"

#define DEFAULT_SOCKET "/run/fleet/fleetd.sock"
#define EXIT_USAGE 2

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
	       "disk:       %lld GiB\nnetwork:    %s\ncommand:    %s\ncreated:    %s\nupdated:    %s\n",
	       str(a, "name"), str(a, "backend"), str(a, "state"), num(a, "memory_mib"), num(a, "vcpus"),
	       num(a, "disk_gib"), str(a, "network"), str(a, "command"), str(a, "created_at"),
	       str(a, "updated_at"));
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

static int audit_opt(int c, const char *arg, void *data)
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

	if ((r = parse_opts(cmd, argc, argv, opts, audit_opt, &limit)) != 0)
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

static int cmd_help(struct ctl *ctl, const struct command *cmd, int argc, char **argv);

static const struct command commands[] = {
	{ "status", "", "Show whether fleetd runs, its version, uptime and agent count.", NULL, cmd_status },
	{ "create", "NAME [--backend vm|user] [--memory MIB] [--vcpus N] [--disk GIB] [--network none|nat] [--command CMD]",
	  "Create an agent and its isolated environment.",
	  "NAME is 1 to 32 characters: a lower-case letter, then lower-case letters, digits or '-'.\n"
	  "  --backend vm|user   a libvirt VM (default) or a Unix user on the host\n"
	  "  --memory MIB        guest memory, 64 to 65536 (default 256; vm only)\n"
	  "  --vcpus N           guest CPUs, 1 to 64 (default 1; vm only)\n"
	  "  --disk GIB          guest disk size, 1 to 1024 (default 2; vm only)\n"
	  "  --network none|nat  no network (default) or an isolated NAT network (vm only)\n"
	  "  --command CMD       what the agent runs when triggered\n",
	  cmd_create },
	{ "list", "", "List agents with their backend and state.", NULL, cmd_list },
	{ "show", "NAME", "Show one agent in detail.", NULL, cmd_show },
	{ "rm", "NAME [--force]", "Remove an agent, its environment and everything it owns.",
	  "  --force   remove even while the agent is running\n", cmd_rm },
	{ "audit", "[--limit N]", "Show the audit log: who changed what, when, and the outcome.",
	  "  --limit N   show the newest N records (default 50, at most 10000)\n", cmd_audit },
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
