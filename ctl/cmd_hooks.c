/*
 * fleetctl hook add|ls|rm|rotate and fleetctl events: webhook routes, their
 * subscribers and what arrived. A secret is read from standard input (or
 * made by --generate and printed once), never taken from argv, where every
 * user of the host can read it.
 */
#include <errno.h>
#include <string.h>
#include <sys/random.h>
#include <termios.h>
#include <unistd.h>

#include "common/base64.h"
#include "common/names.h"
#include "ctl/commands.h"
#include "hooks/route.h"
#include "hooks/verify.h"

#define SECRET_READ_MAX 4096
#define GENERATED_BYTES 32

struct hook_opts {
	const struct command *cmd;
	json_t *body;		/* what add sends */
	const char *route;
	bool generate;
	long grace_s;		/* rotate; -1: fleetd's default */
};

/* "90", "90s", "30m", "24h", "7d" -> seconds, 0 to 30 days; -1 if not. */
static long parse_duration(const char *s)
{
	static const struct { char unit; long mult; } units[] = { { 's', 1 }, { 'm', 60 }, { 'h', 3600 }, { 'd', 86400 } };
	char num[24];
	size_t n = strlen(s);
	long mult = 1, v;

	if (n == 0 || n >= sizeof(num))
		return -1;
	memcpy(num, s, n + 1);
	for (size_t i = 0; i < ARRAY_SIZE(units); i++)
		if (num[n - 1] == units[i].unit) {
			mult = units[i].mult;
			num[n - 1] = '\0';
		}
	if (parse_long(num, 0, 30L * 86400, &v) < 0 || v > 30L * 86400 / mult)
		return -1;
	return v * mult;
}

static int hook_opt(int c, const char *arg, void *data)
{
	static const char *const keys[] = {
		['s'] = "source", ['e'] = "events", ['H'] = "header", ['u'] = "public_url", ['E'] = "encoding",
		['p'] = "prefix", ['a'] = "auth", ['f'] = "delivery_field",
	};
	struct hook_opts *o = data;
	const char *why;
	long v;

	switch (c) {
	case 'S':
		/* Say nothing of the value: it is the secret. */
		usage_error(o->cmd, "a secret is never taken from the command line (other users can read it there): "
				    "pipe it to standard input, or use --generate");
		return -1;
	case 'r':
		if (hook_route_name_check(arg, &why) < 0) {
			usage_error(o->cmd, "invalid route name '%s': %s", arg, why);
			return -1;
		}
		o->route = arg;
		json_object_set_new(o->body, "route", json_string(arg));
		return 0;
	case 'g':
		o->generate = true;
		return 0;
	case 'G':
		if ((o->grace_s = parse_duration(arg)) < 0) {
			usage_error(o->cmd, "--grace is a duration from 0 to 30d, such as 3600, 90m, 24h or 7d; not '%s'", arg);
			return -1;
		}
		return 0;
	case 'm':
		if (parse_long(arg, 1024, 16L << 20, &v) < 0) {
			usage_error(o->cmd, "--max-body is a number of bytes from 1024 to 16777216");
			return -1;
		}
		json_object_set_new(o->body, "max_body", json_integer(v));
		return 0;
	case 's':
		if (hook_source_from_string(arg) < 0) {
			usage_error(o->cmd, "unknown source '%s': github, slack, twilio, datadog, standard or hmac", arg);
			return -1;
		}
		break;
	case 'e':
		if (hook_events_check(arg, &why) < 0) {
			usage_error(o->cmd, "--events '%s': %s", arg, why);
			return -1;
		}
		break;
	}
	if ((size_t)c < ARRAY_SIZE(keys) && keys[c]) {
		json_object_set_new(o->body, keys[c], json_string(arg));
		return 0;
	}
	return -1;
}

static const struct option hook_options[] = {
	{ "source", required_argument, NULL, 's' }, { "route", required_argument, NULL, 'r' },
	{ "events", required_argument, NULL, 'e' }, { "header", required_argument, NULL, 'H' },
	{ "public-url", required_argument, NULL, 'u' }, { "encoding", required_argument, NULL, 'E' },
	{ "prefix", required_argument, NULL, 'p' }, { "auth", required_argument, NULL, 'a' },
	{ "delivery-field", required_argument, NULL, 'f' }, { "max-body", required_argument, NULL, 'm' },
	{ "generate", no_argument, NULL, 'g' }, { "grace", required_argument, NULL, 'G' },
	{ "secret", optional_argument, NULL, 'S' }, { "help", no_argument, NULL, 'h' }, { 0 },
};

/*
 * The secret from standard input: its first line (a trailing newline is not
 * part of it), with echo off on a terminal. A new string, or NULL after
 * saying why.
 */
static char *read_secret(const char *route)
{
	struct termios old, quiet;
	bool tty = isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &old) == 0;
	char *buf = xcalloc(1, SECRET_READ_MAX + 1);
	size_t len = 0;
	ssize_t got;

	if (tty) {
		fprintf(stderr, "secret for route '%s' (not echoed): ", route);
		quiet = old;
		quiet.c_lflag &= ~(tcflag_t)ECHO;
		(void)tcsetattr(STDIN_FILENO, TCSAFLUSH, &quiet);
	}
	while (len < SECRET_READ_MAX && (got = read(STDIN_FILENO, buf + len, SECRET_READ_MAX - len)) != 0) {
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0)
			break;
		len += (size_t)got;
		if (tty && memchr(buf, '\n', len))
			break;
	}
	if (tty) {
		(void)tcsetattr(STDIN_FILENO, TCSAFLUSH, &old);
		fputc('\n', stderr);
	}
	buf[len] = '\0';
	buf[strcspn(buf, "\r\n")] = '\0';
	if (!*buf) {
		fprintf(stderr, "fleetctl: no secret on standard input: pipe it in (printf '%%s' \"$SECRET\" | fleetctl hook ...),"
				" or use --generate\n");
		free(buf);
		return NULL;
	}
	return buf;
}

/* A new random secret in the form source takes: whsec_BASE64 for standard, else 64 hex digits. */
static char *generate_secret(const char *source)
{
	unsigned char raw[GENERATED_BYTES];
	char *out;

	if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw)) {
		fprintf(stderr, "fleetctl: cannot get random bytes: %s\n", strerror(errno));
		return NULL;
	}
	if (strcmp(source, "standard") == 0) {
		_cleanup_free_ char *b64 = base64_encode(raw, sizeof(raw));

		out = xasprintf("whsec_%s", b64);
	} else {
		out = xcalloc(1, 2 * sizeof(raw) + 1);
		for (size_t i = 0; i < sizeof(raw); i++)
			snprintf(out + 2 * i, 3, "%02x", raw[i]);
	}
	explicit_bzero(raw, sizeof(raw));
	return out;
}

/* Does route exist? 1 yes (its source in *ret_source, if not NULL; caller frees), 0 no, -1 after printing fleetd's error. */
static int route_lookup(struct ctl *ctl, const char *route, char **ret_source)
{
	_cleanup_(json_decrefp) json_t *j = NULL;
	json_t *h;
	size_t i;

	if (call(ctl, "GET", "/v1/hooks", NULL, &j))
		return -1;
	json_array_foreach(json_object_get(j, "hooks"), i, h)
		if (strcmp(str(h, "route"), route) == 0) {
			if (ret_source)
				*ret_source = xstrdup(str(h, "source"));
			return 1;
		}
	return 0;
}

static int route_exists(struct ctl *ctl, const char *route)
{
	return route_lookup(ctl, route, NULL);
}

static void wipe_json_secret(json_t *body)
{
	const char *s = json_string_value(json_object_get(body, "secret"));

	if (s)
		explicit_bzero((char *)s, strlen(s));
}

static int hook_add(struct ctl *ctl, struct hook_opts *o, const char *agent)
{
	_cleanup_(json_decrefp) json_t *answer = NULL;
	_cleanup_free_ char *route = NULL, *secret = NULL;
	const char *source = json_string_value(json_object_get(o->body, "source"));
	int exists, r;

	if (!name_ok(o->cmd, agent))
		return EXIT_USAGE;
	if (!source)
		return usage_error(o->cmd, "hook add needs --source github|slack|twilio|datadog|standard|hmac");
	if (o->grace_s >= 0)
		return usage_error(o->cmd, "--grace is for 'hook rotate'");
	route = o->route ? xstrdup(o->route) : xasprintf("%s-%s", agent, source);
	json_object_set_new(o->body, "agent", json_string(agent));
	if ((exists = route_exists(ctl, route)) < 0)
		return 1;
	if (exists && o->generate) {
		fprintf(stderr, "fleetctl: route '%s' exists and keeps its secret; --generate is for a new route "
				"('fleetctl hook rotate' changes a secret)\n", route);
		return 1;
	}
	if (!exists) {
		if (!(secret = o->generate ? generate_secret(source) : read_secret(route)))
			return 1;
		json_object_set_new(o->body, "secret", json_string(secret));
	}
	r = call(ctl, "POST", "/v1/hooks", o->body, &answer);
	wipe_json_secret(o->body);
	if (r) {
		if (secret)
			explicit_bzero(secret, strlen(secret));
		return 1;
	}
	if (ctl->json) {
		print_json(answer);
	} else {
		printf("agent '%s' subscribed to %s route '%s' (%s)\n", agent, str(answer, "source"), str(answer, "route"),
		       json_is_true(json_object_get(answer, "created")) ? "new" : "existing");
		printf("url: %s\n", str(answer, "url"));
	}
	/* Shown this once (also with --json): fleet never shows a secret again. */
	if (o->generate) {
		if (ctl->json)
			fprintf(stderr, "secret (shown once; give it to the sender): %s\n", secret);
		else
			printf("secret (shown once; give it to the sender): %s\n", secret);
	}
	if (secret)
		explicit_bzero(secret, strlen(secret));
	return 0;
}

static void print_subscribers(json_t *h)
{
	json_t *s;
	size_t i;

	json_array_foreach(json_object_get(h, "subscribers"), i, s) {
		json_t *ev = json_object_get(s, "events"), *e;
		size_t k;

		printf("%s%s", i ? "," : "", str(s, "agent"));
		if (json_is_array(ev)) {
			printf("[");
			json_array_foreach(ev, k, e)
				printf("%s%s", k ? "," : "", json_string_value(e));
			printf("]");
		}
	}
}

static int hook_ls(struct ctl *ctl, const struct command *cmd, const char *agent)
{
	_cleanup_(json_decrefp) json_t *j = NULL;
	json_t *list, *h;
	size_t i;

	if (agent && !name_ok(cmd, agent))
		return EXIT_USAGE;
	if (agent ? callf(ctl, "GET", NULL, &j, "/v1/hooks?agent=%s", agent) : call(ctl, "GET", "/v1/hooks", NULL, &j))
		return 1;
	list = json_object_get(j, "hooks");
	if (ctl->json) {
		print_json(list);
		return 0;
	}
	if (json_array_size(list) == 0) {
		printf(agent ? "agent '%s' has no webhook routes\n" : "no webhook routes%s\n", agent ? agent : "");
		return 0;
	}
	printf("%-24s %-9s %-36s %s\n", "ROUTE", "SOURCE", "URL", "SUBSCRIBERS[EVENTS]");
	json_array_foreach(list, i, h) {
		printf("%-24s %-9s %-36s ", str(h, "route"), str(h, "source"), str(h, "url"));
		print_subscribers(h);
		if (json_is_string(json_object_get(h, "rotating_until")))
			printf("  (previous secret works until %s)", str(h, "rotating_until"));
		printf("\n");
	}
	return 0;
}

static int hook_rm(struct ctl *ctl, const struct command *cmd, const char *agent, const char *route)
{
	_cleanup_(json_decrefp) json_t *answer = NULL;
	const char *why;

	if (!name_ok(cmd, agent))
		return EXIT_USAGE;
	if (hook_route_name_check(route, &why) < 0)
		return usage_error(cmd, "invalid route name '%s': %s", route, why);
	if (callf(ctl, "DELETE", NULL, &answer, "/v1/hooks/%s/subscribers/%s", route, agent))
		return 1;
	if (ctl->json)
		print_json(answer);
	else
		printf("agent '%s' unsubscribed from route '%s'%s\n", agent, route,
		       json_is_true(json_object_get(answer, "route_removed")) ? "; it was the last subscriber: route removed"
									      : "");
	return 0;
}

static int hook_rotate(struct ctl *ctl, struct hook_opts *o, const char *route)
{
	_cleanup_(json_decrefp) json_t *answer = NULL, *body = NULL;
	_cleanup_free_ char *secret = NULL;
	const char *why;
	int r;

	if (hook_route_name_check(route, &why) < 0)
		return usage_error(o->cmd, "invalid route name '%s': %s", route, why);
	if (json_object_size(o->body))
		return usage_error(o->cmd, "hook rotate takes only --grace and --generate (else the new secret "
					   "comes on standard input)");
	if (o->generate) {
		/* The route's source says the secret's form (whsec_ for standard). */
		_cleanup_free_ char *source = NULL;

		if ((r = route_lookup(ctl, route, &source)) <= 0) {
			if (r == 0)
				fprintf(stderr, "fleetctl: no webhook route '%s'\n", route);
			return 1;
		}
		if (!(secret = generate_secret(source)))
			return 1;
	} else if (!(secret = read_secret(route))) {
		return 1;
	}
	body = json_pack("{s:s}", "secret", secret);
	if (!o->generate)
		explicit_bzero(secret, strlen(secret));
	if (o->grace_s >= 0)
		json_object_set_new(body, "grace_s", json_integer(o->grace_s));
	r = callf(ctl, "POST", body, &answer, "/v1/hooks/%s/rotate", route);
	wipe_json_secret(body);
	if (!r) {
		if (ctl->json)
			print_json(answer);
		else
			printf("route '%s': new secret in use; the previous one works until %s\n", route,
			       str(answer, "rotating_until"));
		/* Shown this once (also with --json): fleet never shows a secret again. */
		if (o->generate)
			fprintf(ctl->json ? stderr : stdout, "secret (shown once; give it to the sender): %s\n", secret);
	}
	explicit_bzero(secret, strlen(secret));
	return r ? 1 : 0;
}

int cmd_hook(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	_cleanup_(json_decrefp) json_t *body = json_object();
	struct hook_opts o = { .cmd = cmd, .body = body, .grace_s = -1 };
	const char *sub;
	int r, nargs;

	if ((r = parse_opts(cmd, argc, argv, hook_options, hook_opt, &o)) != 0)
		return r < 0 ? EXIT_USAGE : 0;
	nargs = argc - optind;
	if (nargs < 1)
		return usage_error(cmd, "hook needs add, ls, rm or rotate");
	sub = argv[optind];
	argv += optind + 1;
	nargs--;
	if (strcmp(sub, "add") == 0) {
		if (nargs != 1)
			return usage_error(cmd, "hook add takes one agent NAME (the secret comes on standard input)");
		return hook_add(ctl, &o, argv[0]);
	}
	if (strcmp(sub, "rotate") == 0) {
		if (nargs != 1)
			return usage_error(cmd, "hook rotate takes one ROUTE (the secret comes on standard input)");
		return hook_rotate(ctl, &o, argv[0]);
	}
	if (json_object_size(body) || o.generate || o.grace_s >= 0)
		return usage_error(cmd, "hook %s takes no options", sub);
	if (strcmp(sub, "ls") == 0) {
		if (nargs > 1)
			return usage_error(cmd, "hook ls takes at most one agent NAME");
		return hook_ls(ctl, cmd, nargs ? argv[0] : NULL);
	}
	if (strcmp(sub, "rm") == 0) {
		if (nargs != 2)
			return usage_error(cmd, "hook rm takes an agent NAME and a ROUTE");
		return hook_rm(ctl, cmd, argv[0], argv[1]);
	}
	return usage_error(cmd, "unknown hook command '%s': add, ls, rm or rotate", sub);
}

struct events_opts {
	const struct command *cmd;
	const char *route;
	long limit;
};

static int events_opt(int c, const char *arg, void *data)
{
	struct events_opts *o = data;
	const char *why;

	if (c == 'n')
		return limit_opt(c, arg, &o->limit);
	if (c == 'r') {
		if (hook_route_name_check(arg, &why) < 0) {
			usage_error(o->cmd, "invalid route name '%s': %s", arg, why);
			return -1;
		}
		o->route = arg;
		return 0;
	}
	return -1;
}

int cmd_events(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "route", required_argument, NULL, 'r' }, { "limit", required_argument, NULL, 'n' },
		{ "help", no_argument, NULL, 'h' }, { 0 },
	};
	_cleanup_(json_decrefp) json_t *j = NULL;
	struct events_opts o = { .cmd = cmd, .limit = 50 };
	json_t *list, *e;
	size_t i;
	int status;

	if (!no_args(cmd, argc, argv, opts, events_opt, &o, &status))
		return status;
	if (o.route ? callf(ctl, "GET", NULL, &j, "/v1/events?route=%s&limit=%ld", o.route, o.limit)
		    : callf(ctl, "GET", NULL, &j, "/v1/events?limit=%ld", o.limit))
		return 1;
	list = json_object_get(j, "events");
	if (ctl->json) {
		print_json(list);
		return 0;
	}
	if (json_array_size(list) == 0) {
		printf(o.route ? "no events for route '%s'\n" : "no events%s\n", o.route ? o.route : "");
		return 0;
	}
	printf("%-20s %-8s %-20s %-36s %-24s %-14s %s\n", "RECEIVED", "SOURCE", "ROUTE", "DELIVERY", "TYPE", "OUTCOME",
	       "RUNS");
	json_array_foreach(list, i, e) {
		json_t *runs = json_object_get(e, "runs"), *r;
		size_t k;

		printf("%-20s %-8s %-20s %-36s %-24s %-14s ", str(e, "received_at"), str(e, "source"), str(e, "route"),
		       str(e, "delivery_id"), str(e, "type"), str(e, "outcome"));
		json_array_foreach(runs, k, r)
			printf("%s%lld", k ? "," : "", (long long)json_integer_value(r));
		printf("%s\n", json_array_size(runs) ? "" : "-");
	}
	return 0;
}
