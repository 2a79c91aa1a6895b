/*
 * run: the in-memory shape of a run record (one execution of an agent's
 * command, core/runs.c; one row of the runs table) and the name table of
 * its state. Plain data; no I/O.
 */
#ifndef FLEET_RUN_H
#define FLEET_RUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * queued: durable, waiting for its agent (one run per agent at a time) and
 *   for a free slot (max_concurrent_runs).
 * running: started; a kill -9 of fleetd leaves it so, and start-up makes it
 *   interrupted, or queued again while the agent's retry_interrupted allows.
 * succeeded (exit 0), failed, timed-out (killed after the agent's
 * run_timeout_s), cancelled (fleetctl cancel), interrupted: final.
 */
enum run_state {
	RUN_QUEUED,
	RUN_RUNNING,
	RUN_SUCCEEDED,
	RUN_FAILED,
	RUN_TIMED_OUT,
	RUN_CANCELLED,
	RUN_INTERRUPTED,
	RUN_STATE__COUNT,
};

struct run {
	int64_t id;
	char *agent;
	char *trigger;		/* manual, cron, github, ... */
	enum run_state state;
	int64_t queued_at, started_at, finished_at;	/* unix seconds; 0 not yet */
	int exit_code;		/* -1 none */
	char *log_path;
	char *snapshot;		/* taken before it (snapshot policy before-run), or NULL */
	char *error;		/* why it failed without an exit code, or NULL */
	int64_t event_id;	/* the event that caused it (its stdin), 0 none */
	int retries;		/* times it was queued again after an interruption */
};

/* A run in this state is over: nothing changes it any more. */
static inline bool run_state_final(enum run_state s) { return s != RUN_QUEUED && s != RUN_RUNNING; }

/*
 * What caused a run, given to it as its stdin (core/runs.c makes it JSON):
 * one row of the events table. A manual trigger's is source "manual" with
 * the payload as body; a webhook's what the sender sent. Strings may be NULL.
 */
struct run_event {
	int64_t id;		/* events row, 0 not stored yet */
	char *source;		/* manual, cron, github, slack, ... */
	char *route;
	char *delivery_id;
	char *type;		/* the sender's event type (events.event_type) */
	int64_t received_at;	/* unix seconds */
	char *headers;		/* the headers that matter, as a JSON object's text */
	unsigned char *body;
	size_t body_len;
};

#define RUN_PAYLOAD_MAX (1 << 20)	/* a manual trigger's payload */

void run_event_free(struct run_event *e);
static inline void run_event_freep(struct run_event **e) { run_event_free(*e); }

void run_free(struct run *r);
/* Frees a NULL-terminated array of runs and the array. */
void run_list_free(struct run **list);
static inline void run_freep(struct run **r) { run_free(*r); }

const char *run_state_to_string(enum run_state s);	/* "unknown" outside the enum */
int run_state_from_string(const char *s);		/* -EINVAL if unknown */

#endif
