/*
 * fleet_yaml: the fleet file of `fleetctl apply` and `export`
 * (docs/apply.md), read and written with libyaml. Loading checks
 * everything that needs no fleetd: unknown keys, types, duplicate names,
 * and resolves every secret reference (from_file, from_env), so that a bad
 * file is refused before anything changes. Errors are printed as
 * FILE:LINE:COLUMN: message, from libyaml's marks.
 */
#ifndef FLEET_CTL_FLEET_YAML_H
#define FLEET_CTL_FLEET_YAML_H

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>

/* An agent setting of the file: its name is POST /v1/agents' field name. */
enum fleet_field_type { FIELD_STR, FIELD_INT, FIELD_BOOL };

struct fleet_field {
	const char *name;		/* the file's key and the API's field */
	enum fleet_field_type type;
	const char *parent;		/* the AGENT object holding it in GET /v1/agents (NULL: top level) */
	const char *member;		/* its name there */
	bool patchable;			/* PATCH /v1/agents/NAME changes it */
	bool empty_is_unset;		/* "" in the file is the same as null/absent in the AGENT */
	const char *default_json;	/* what a new agent gets (POST /v1/agents), as JSON text; NULL: no way
					 * back to it (command: once set, PATCH takes no "unset") */
};

extern const struct fleet_field fleet_fields[];
extern const size_t fleet_n_fields;

/* A hook route's settings the file may name (fixed when the route is made). */
extern const char *const fleet_route_settings[];

/*
 * Load and check path. On success *ret is the desired fleet:
 *   {"agents": {NAME: {"fields": {FIELD: value...},
 *                      "secrets": {KEY: "value"...}        (absent: not named),
 *                      "schedules": [{"cron", "tz", "catch_up"}...]  (absent: not named)}},
 *    "hooks": {ROUTE: {"settings": {...}, "secret": "value" (absent: none),
 *                      "subscribers": {AGENT: ["event"...] or null}}}}
 * Secret values are strings of raw bytes (json_stringn_nocheck). Returns 0,
 * or -1 after printing FILE:LINE:COLUMN: message on stderr.
 */
int fleet_file_load(const char *path, json_t **ret);

/*
 * Write the fleet described by GET answers as a fleet file to out: agents
 * (an array of AGENTs), secrets ({NAME: [{"key"...}]}), schedules (every
 * SCHEDULE) and hooks (every route). Secrets become from_env references
 * named by fleet_secret_env_name. Returns 0, or -1 after printing why.
 */
int fleet_file_write(FILE *out, json_t *agents, json_t *secrets, json_t *schedules, json_t *hooks);

/* The placeholder variable export writes for a secret: FLEET_SECRET_AGENT_KEY / FLEET_HOOK_SECRET_ROUTE. */
char *fleet_secret_env_name(const char *agent, const char *key);
char *fleet_route_env_name(const char *route);

#endif
