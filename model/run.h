/*
 * run: the in-memory shape of a run record (one execution of an agent's
 * command, core/runs.c; one row of the runs table) and the name table of
 * its state. Plain data; no I/O.
 */
#ifndef FLEET_RUN_H
#define FLEET_RUN_H

#include <stdint.h>

/*
 * queued: durable, waiting for its agent (one run per agent at a time).
 * running: started; a kill -9 of fleetd leaves it so, and start-up makes it
 *   interrupted (never run again). succeeded, failed, interrupted: final.
 */
enum run_state { RUN_QUEUED, RUN_RUNNING, RUN_SUCCEEDED, RUN_FAILED, RUN_INTERRUPTED, RUN_STATE__COUNT };

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
};

void run_free(struct run *r);
/* Frees a NULL-terminated array of runs and the array. */
void run_list_free(struct run **list);
static inline void run_freep(struct run **r) { run_free(*r); }

const char *run_state_to_string(enum run_state s);	/* "unknown" outside the enum */
int run_state_from_string(const char *s);		/* -EINVAL if unknown */

#endif
