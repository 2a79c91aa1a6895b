/* call: calling fleetd, printing its answers and errors, argument helpers (call.h). */
#include "ctl/call.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>

#include "common/names.h"
#include "ctl/http_client.h"

int usage_error(const struct command *cmd, const char *fmt, ...)
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

void print_command_help(const struct command *cmd, FILE *out)
{
	fprintf(out, "Usage: fleetctl [-s SOCKET] [--json] %s %s\n%s\n", cmd->name, cmd->args, cmd->summary);
	if (cmd->help && *cmd->help)
		fprintf(out, "\n%s", cmd->help);
}

bool print_not_running(const struct ctl *ctl, int r)
{
	if (r != -ENOENT && r != -ECONNREFUSED)
		return false;
	fprintf(stderr, "fleetctl: cannot connect to fleetd at %s: %s (is fleetd running?)\n", ctl->socket,
		strerror(-r));
	return true;
}

int call(struct ctl *ctl, const char *method, const char *path, json_t *body, json_t **ret)
{
	_cleanup_free_ char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;

	return call_raw(ctl, method, path, "application/json", text, text ? strlen(text) : 0, ret);
}

/* What an http_client error r means, printed. */
static void print_transport_error(const struct ctl *ctl, int r)
{
	if (print_not_running(ctl, r))
		return;
	if (r == -EACCES)
		fprintf(stderr, "fleetctl: cannot connect to fleetd at %s: %s (root or the socket group only)\n",
			ctl->socket, strerror(-r));
	else
		fprintf(stderr, "fleetctl: talking to fleetd at %s: %s\n", ctl->socket, strerror(-r));
}

int call_text(struct ctl *ctl, const char *path, struct http_response *ret)
{
	json_t *err;
	int r = http_request_body(ctl->socket, "GET", path, NULL, NULL, 0, ret);

	if (r < 0) {
		print_transport_error(ctl, r);
		return 1;
	}
	if (ret->status < 300)
		return 0;
	/* An error is JSON, as for every call. */
	err = ret->body_len ? json_loadb(ret->body, ret->body_len, 0, NULL) : NULL;
	fprintf(stderr, "fleetctl: %s\n", json_string_value(json_object_get(err, "error")) ?: "request failed");
	if (!json_string_value(json_object_get(err, "error")))
		fprintf(stderr, "fleetctl: (HTTP status %d)\n", ret->status);
	json_decref(err);
	http_response_free(ret);
	return 1;
}

int call_raw(struct ctl *ctl, const char *method, const char *path, const char *ctype, const char *body,
	     size_t body_len, json_t **ret)
{
	struct http_response resp = { 0 };
	json_t *answer = NULL;
	int r;

	r = http_request_body(ctl->socket, method, path, ctype, body, body_len, &resp);
	if (r < 0) {
		print_transport_error(ctl, r);
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

int callf(struct ctl *ctl, const char *method, json_t *body, json_t **ret, const char *fmt, ...)
{
	_cleanup_free_ char *path = NULL;
	va_list ap;

	va_start(ap, fmt);
	if (vasprintf(&path, fmt, ap) < 0)
		path = NULL;
	va_end(ap);
	if (!path) {
		fprintf(stderr, "fleetctl: out of memory\n");
		return 1;
	}
	return call(ctl, method, path, body, ret);
}

void print_json(json_t *j)
{
	char *s = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS);
	if (s)
		puts(s);
	free(s);
}

const char *str(json_t *obj, const char *key)
{
	const char *s = json_string_value(json_object_get(obj, key));
	return s ? s : "-";
}

long long num(json_t *obj, const char *key)
{
	return (long long)json_integer_value(json_object_get(obj, key));
}

int parse_opts(const struct command *cmd, int argc, char **argv, const struct option *opts, opt_fn on_opt,
	       void *data)
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

bool name_ok(const struct command *cmd, const char *name)
{
	const char *why;

	if (agent_name_check(name, &why) < 0) {
		usage_error(cmd, "invalid agent name '%s': %s", name, why);
		return false;
	}
	return true;
}

bool one_agent(const struct command *cmd, int argc, char **argv, const struct option *opts, opt_fn on_opt,
	       void *data, const char **name, int *status)
{
	int r;

	if ((r = parse_opts(cmd, argc, argv, opts, on_opt, data)) != 0) {
		*status = r < 0 ? EXIT_USAGE : 0;
		return false;
	}
	if (argc - optind != 1) {
		*status = usage_error(cmd, "%s needs exactly one agent NAME", cmd->name);
		return false;
	}
	if (!name_ok(cmd, argv[optind])) {
		*status = EXIT_USAGE;
		return false;
	}
	*name = argv[optind];
	return true;
}

bool no_args(const struct command *cmd, int argc, char **argv, const struct option *opts, opt_fn on_opt,
	     void *data, int *status)
{
	int r;

	if ((r = parse_opts(cmd, argc, argv, opts, on_opt, data)) != 0) {
		*status = r < 0 ? EXIT_USAGE : 0;
		return false;
	}
	if (optind != argc) {
		*status = usage_error(cmd, "%s takes no arguments", cmd->name);
		return false;
	}
	return true;
}

const struct option help_only[] = { { "help", no_argument, NULL, 'h' }, { 0 } };

int no_opts(int c, const char *arg, void *data)
{
	return -1;
}

int flag_opt(int c, const char *arg, void *data)
{
	*(bool *)data = true;
	return 0;
}

int limit_opt(int c, const char *arg, void *data)
{
	long v;

	if (parse_long(arg, 1, 10000, &v) < 0) {
		fprintf(stderr, "fleetctl: --limit must be a number from 1 to 10000\n");
		return -1;
	}
	*(long *)data = v;
	return 0;
}

int timeout_opt(int c, const char *arg, void *data)
{
	long v;

	if (parse_long(arg, 0, 86400, &v) < 0) {
		fprintf(stderr, "fleetctl: --timeout needs a number of seconds from 0 to 86400, not '%s'\n", arg);
		return -1;
	}
	*(long *)data = v;
	return 0;
}
