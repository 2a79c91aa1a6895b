/*
 * run_exec: what a run's command gets from the event that caused it (the
 * runs queue, runs.c, hands it to the backend's exec): its stdin, the event
 * as one JSON object, and its FLEET_* environment variables.
 *
 * stdin: {"run_id", "agent", "trigger", "source", "route", "delivery_id",
 *   "type", "received_at" (UTC, ISO 8601), "headers" (an object), "body"
 *   (a string; "body_base64" instead when the body is not UTF-8)}, unknown
 *   values null. A run without an event (queued by core code) gets source
 *   = its trigger and body null.
 * env: FLEET_RUN_ID, FLEET_TRIGGER, FLEET_AGENT, FLEET_EVENT_SOURCE,
 *   FLEET_EVENT_TYPE, FLEET_DELIVERY_ID. Values come from senders, so
 *   bytes outside printable ASCII become '_' and each is cut at 256 bytes.
 *   Then the agent's secrets (core/secrets.h), KEY=VALUE, loaded at launch;
 *   one that does not decrypt fails the run (nothing is started).
 */
#ifndef FLEET_RUN_EXEC_H
#define FLEET_RUN_EXEC_H

#include <stddef.h>

#include "model/agent.h"
#include "model/run.h"

struct fleetd;

struct run_input {
	char **env;		/* NAME=VALUE, NULL-terminated */
	char *stdin_data;	/* the JSON text */
	size_t stdin_len;
};

/*
 * Append agent's secrets as KEY=VALUE to the NULL-terminated heap array
 * *env (may be NULL): 0, or -errno and *why (-EBADMSG: one does not
 * decrypt) with *env as it was. Free the array with run_env_free.
 */
int run_env_add_secrets(struct fleetd *f, const char *agent, char ***env, char **why);
/* Wipe (values may be secrets) and free a NULL-terminated array of NAME=VALUE. */
void run_env_free(char **env);

/* 0 and *ret (free with run_input_free), or -errno and *why (the event or a secret could not be read). */
int run_input_make(struct fleetd *f, const struct agent *a, const struct run *run, struct run_input **ret,
		   char **why);
void run_input_free(struct run_input *in);
static inline void run_input_freep(struct run_input **in) { run_input_free(*in); }

#endif
