/*
 * backend_fake: an in-memory backend for core/'s unit tests
 * (tests/unit/test_core_*.c), in the manner of libvirt's test driver.
 *
 * A TEST DOUBLE ONLY. It stands in for the real backends (vm/, user/) in
 * those tests and nowhere else: fleetd never links it, and nothing it does
 * says anything about a real environment. What core/ does with a backend
 * (state, restarts, snapshots' rows, the run queue, rollback) is what these
 * tests check; the backends themselves have their own tests.
 *
 * Its "host" (environments, their snapshots, the switches and counters)
 * lives in memory shared across fork(), so a test can kill -9 a child in the
 * middle of a verb (FAKE_DIE_*) and then look, from the parent, at what the
 * host was left with, as the next fleetd would.
 *
 * Like the real backends, start, stop, exec, snapshot_create and
 * snapshot_restore answer through the event loop (fleetd->base), never
 * before the verb has returned; provision, destroy, state, snapshot_delete
 * and snapshot_exists are synchronous. It plays the backend of kind
 * FAKE_KIND.
 */
#ifndef FLEET_BACKEND_FAKE_H
#define FLEET_BACKEND_FAKE_H

#include <stdbool.h>

#include "backend/backend.h"
#include "model/agent.h"

#define FAKE_KIND BACKEND_USER

enum fake_verb {
	FAKE_PROVISION,
	FAKE_DESTROY,
	FAKE_START,
	FAKE_STOP,
	FAKE_STATE,
	FAKE_EXEC,
	FAKE_SNAPSHOT_CREATE,
	FAKE_SNAPSHOT_RESTORE,
	FAKE_SNAPSHOT_DELETE,
	FAKE_SNAPSHOT_EXISTS,
	FAKE_VERB__COUNT,
};

/* What a verb does when called (a switch per verb; fake_set()). */
enum fake_mode {
	FAKE_OK,		/* its work; an asynchronous verb reports success on the loop */
	FAKE_FAIL,		/* refuse at once: the errno, *why set; nothing changes, no callback */
	FAKE_FAIL_LATER,	/* asynchronous verbs: accept, report the errno on the loop; nothing changes */
	FAKE_HANG,		/* asynchronous verbs: accept, report nothing until fake_release() */
	FAKE_CRASH,		/* start: succeed, then the environment stops unasked (a crash) on the loop */
	FAKE_DIE_BEFORE,	/* the process gets SIGKILL in the verb, before it does anything */
	FAKE_DIE_AFTER,		/* ... after its work, before it returns or reports */
};

/* The table for backends_init_table(): the fake as FAKE_KIND, nothing else built in. */
extern const struct backend_ops *const fake_backends[BACKEND__COUNT];

/* A clean host: no environments, every switch FAKE_OK, counters 0. Call first. */
void fake_reset(void);

/* Set verb's switch; err is the negative errno FAKE_FAIL* report, why their message (NULL: strerror). */
void fake_set(enum fake_verb verb, enum fake_mode mode, int err, const char *why);
/* How many times verb was called since fake_reset() (across fork: the child's calls count). */
int fake_calls(enum fake_verb verb);
/* How many calls of verb are hung (FAKE_HANG) in this process. */
int fake_hung(enum fake_verb verb);
/*
 * Finish every hung call of verb, oldest first: r 0 does the verb's work and
 * reports success, a negative errno reports that and changes nothing.
 * Returns how many. Call it from the test, not from a callback.
 */
int fake_release(enum fake_verb verb, int r);

/* The host's environments: 0 and *ret (AGENT_STOPPED or AGENT_RUNNING), or -ENOENT. */
int fake_env_state(const char *agent, enum agent_state *ret);
/*
 * What every exec in agent's environment exits with (0 at first): its
 * "files", which snapshots keep along with whether it ran, and a restore
 * brings back. An exec in an environment that does not run is refused.
 */
void fake_env_set_exit(const char *agent, int exit_code);
int fake_env_exit(const char *agent);
/* The argv of the newest exec in agent's environment, joined by spaces ("" if none). */
const char *fake_env_last_exec(const char *agent);
/* The newest exec with an environment (a run's, not a health check's): its stdin (cut at 2 KiB), env
 * (NAME=VALUE lines) and timeout_s ("", -1 if none). */
const char *fake_env_last_stdin(const char *agent);
const char *fake_env_last_env(const char *agent);
int fake_env_last_timeout(const char *agent);
/* Every hung exec's timeout expires now (the backend's timer): each reports timed out, killed. Returns how many. */
int fake_exec_time_out(void);
/* Is there a snapshot snap of agent's environment on the host? */
bool fake_snapshot_has(const char *agent, const char *snap);

/*
 * Report an event as the backend does from one of its own callbacks (so
 * call it from the test, not from inside a verb), after applying it to the
 * host: BACKEND_EV_STOPPED (clean: it shut itself down; else a crash) stops
 * the environment, BACKEND_EV_GONE removes it, BACKEND_EV_STARTED runs it,
 * BACKEND_EV_RESYNC changes nothing. asked: fleet asked for the stop (a
 * VM backend reports those too; the fake's stop() itself reports nothing).
 */
void fake_event(enum backend_event_kind kind, const char *agent, bool asked, bool clean);
/* How many events the fake has reported (fake_event() and FAKE_CRASH). */
int fake_events(void);

#endif
