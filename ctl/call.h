/*
 * call: what every fleetctl command shares: the command record, calling
 * fleetd and printing its answer or error, and the argument helpers
 * (options, the one-agent check) that keep usage errors worded alike.
 * Exit codes: 0 success, 1 an error from fleetd (or fleetd unreachable),
 * 2 a usage error.
 */
#ifndef FLEET_CTL_CALL_H
#define FLEET_CTL_CALL_H

#include <getopt.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>

#include "common/util.h"

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

/* An option callback for parse_opts: -1 (after printing why) rejects the option. */
typedef int (*opt_fn)(int c, const char *arg, void *data);

/* Print "fleetctl: MESSAGE" and how to get help; returns EXIT_USAGE. */
int usage_error(const struct command *cmd, const char *fmt, ...) _printf_(2, 3);
void print_command_help(const struct command *cmd, FILE *out);

/*
 * When r (-errno from http_client) means nothing listens at ctl->socket,
 * say so and return true; other errors are the caller's to word.
 */
bool print_not_running(const struct ctl *ctl, int r);

/*
 * Call fleetd. On success *ret holds the parsed JSON answer (NULL for an
 * empty body) and 0 is returned; otherwise the error is printed and 1
 * returned.
 */
int call(struct ctl *ctl, const char *method, const char *path, json_t *body, json_t **ret);
/* call() with body_len raw bytes of type ctype as the body (NULL: none). */
int call_raw(struct ctl *ctl, const char *method, const char *path, const char *ctype, const char *body,
	     size_t body_len, json_t **ret);
/*
 * GET path whose answer is text, not JSON (a table fleetd rendered): 0
 * with *ret holding it (the caller frees it with http_response_free), or
 * 1 after printing the error, as call() does.
 */
struct http_response;
int call_text(struct ctl *ctl, const char *path, struct http_response *ret);
/* call() with the path made from fmt and what follows ("/v1/agents/%s"). */
int callf(struct ctl *ctl, const char *method, json_t *body, json_t **ret, const char *fmt, ...) _printf_(5, 6);

void print_json(json_t *j);
/* A string member, or "-" when it is missing. */
const char *str(json_t *obj, const char *key);
long long num(json_t *obj, const char *key);

/*
 * Parse the command's options with getopt_long, which lets options follow
 * positional arguments ("create NAME --backend user"); "--" ends options.
 * Returns 1 after printing help, -1 after a usage error, else 0.
 */
int parse_opts(const struct command *cmd, int argc, char **argv, const struct option *opts, opt_fn on_opt,
	       void *data);

/*
 * The argument check of every "VERB NAME [options]" command: options, then
 * exactly one valid agent NAME. Returns true with *name set when the command
 * goes on; false when it is done, with *status 0 (help printed) or EXIT_USAGE
 * (the error printed).
 */
bool one_agent(const struct command *cmd, int argc, char **argv, const struct option *opts, opt_fn on_opt,
	       void *data, const char **name, int *status);

/* The same for commands that take options only ("status", "audit"). */
bool no_args(const struct command *cmd, int argc, char **argv, const struct option *opts, opt_fn on_opt,
	     void *data, int *status);

/* Check an agent name given on the command line before sending it (prints why not). */
bool name_ok(const struct command *cmd, const char *name);

extern const struct option help_only[];	/* just --help */
int no_opts(int c, const char *arg, void *data);	/* for help_only: never called with a real option */
int flag_opt(int c, const char *arg, void *data);	/* a command's one flag: sets *(bool *)data */
int limit_opt(int c, const char *arg, void *data);	/* --limit N, 1 to 10000, into *(long *)data */
int timeout_opt(int c, const char *arg, void *data);	/* --timeout S, 0 to 86400, into *(long *)data */

#endif
