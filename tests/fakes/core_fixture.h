/*
 * core_fixture: a fleetd context for core/'s unit tests, as daemon/fleetd.c
 * wires one, but with the fake backend (backend_fake.h) as its only
 * backend: a real SQLite file in a temp dir, a real event loop, the real
 * core/ modules. Header-only (static inline) so each test is one file.
 */
#ifndef FLEET_CORE_FIXTURE_H
#define FLEET_CORE_FIXTURE_H

#include <errno.h>
#include <event2/event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/activity.h"
#include "core/backends.h"
#include "core/health.h"
#include "core/backend_host.h"
#include "core/lifecycle.h"
#include "core/runs.h"
#include "core/secret_hold.h"
#include "core/secrets.h"
#include "core/snapshots.h"
#include "model/fleetd.h"
#include "store/db.h"
#include "common/log.h"
#include "common/util.h"
#include "tests/fakes/backend_fake.h"

/* What of core/ a test starts besides the lifecycle: flags for fixture_open(). */
#define FX_HEALTH 1	/* health_init (the boot-failed hook, rollback) */
#define FX_RUNS 2	/* runs_init (after snapshots_recover, as fleetd does) */
#define FX_RECOVER 4	/* lifecycle_reconcile and snapshots_recover, as at fleetd's start */

struct fixture {
	struct fleetd f;
	char dir[64];
	int flags;
};

/* A fresh state dir for this test program (removed by fixture_cleanup). */
static inline void fixture_mkdir(struct fixture *x)
{
	snprintf(x->dir, sizeof(x->dir), "/tmp/fleet-test-core-XXXXXX");
	if (!mkdtemp(x->dir)) {
		perror("mkdtemp");
		exit(1);
	}
}

/* "Start fleetd" on x->dir; exits the test program if it cannot (nothing could be checked). */
static inline void fixture_open(struct fixture *x, int flags, const char *const *settings)
{
	_cleanup_free_ char *path = xasprintf("%s/fleet.db", x->dir), *err = NULL;
	const char *why;
	int r;

	memset(&x->f, 0, sizeof(x->f));
	x->flags = flags;
	config_init(&x->f.cfg);
	(void)config_set(&x->f.cfg, CFG_STATE_DIR, x->dir, CFG_FROM_CMDLINE, 0, &why);
	/* settings: NULL-terminated pairs of a fleetd.conf key and its value. */
	for (int i = 0; settings && settings[i]; i += 2) {
		for (int k = 0; k < CFG__COUNT; k++)
			if (strcmp(config_defs[k].key, settings[i]) == 0 &&
			    config_set(&x->f.cfg, (enum config_key)k, settings[i + 1], CFG_FROM_CMDLINE, 0, &why) < 0) {
				fprintf(stderr, "fixture: %s: %s\n", settings[i], why);
				exit(1);
			}
	}
	x->f.lock_fd = -1;
	x->f.base = event_base_new();
	if (!x->f.base || (r = db_open(path, &x->f.db)) < 0) {
		fprintf(stderr, "fixture: cannot open %s\n", path);
		exit(1);
	}
	/* The host key of agents' secrets, as fleetd makes it at start (runs read the secrets to redact). */
	if (secrets_init(&x->f, &err) < 0) {
		fprintf(stderr, "fixture: %s\n", err);
		exit(1);
	}
	backends_init_table(&x->f, fake_backends, &core_backend_host);
	if (flags & FX_RECOVER)
		lifecycle_reconcile(&x->f);
	if (flags & FX_HEALTH)
		health_init(&x->f);
	if (flags & FX_RECOVER)
		snapshots_recover(&x->f);
	if (flags & FX_RUNS)
		runs_init(&x->f);
}

/* "Stop fleetd", in fleetd's order. */
static inline void fixture_close(struct fixture *x)
{
	runs_shutdown(&x->f);
	health_shutdown(&x->f);
	backends_shutdown(&x->f);
	health_free(&x->f);
	lifecycle_shutdown(&x->f);
	runs_free(&x->f);
	secret_hold_free(&x->f);
	activity_free(&x->f);
	secrets_free(&x->f);
	db_close(x->f.db);
	event_base_free(x->f.base);
	config_free(&x->f.cfg);
	memset(&x->f, 0, sizeof(x->f));
}

static inline void fixture_cleanup(struct fixture *x)
{
	_cleanup_free_ char *cmd = xasprintf("rm -rf '%s'", x->dir);

	if (system(cmd) != 0)
		fprintf(stderr, "fixture: could not remove %s\n", x->dir);
}

/*
 * Run the loop until cond holds. The deadline is only a guard against a
 * hung test (cond is checked, never the time it took).
 */
#define LOOP_UNTIL(x, cond) ({ \
	time_t _end = time(NULL) + 30; \
	while (!(cond) && time(NULL) < _end) \
		event_base_loop((x)->f.base, EVLOOP_ONCE); \
	(cond); \
})

/* Run what is due now (callbacks deferred with a zero timeout), without waiting. */
static inline void loop_now(struct fixture *x)
{
	for (int i = 0; i < 8; i++)
		event_base_loop(x->f.base, EVLOOP_NONBLOCK);
}

/*
 * A marker timer: *fired becomes true after ms. Timers fire in deadline
 * order, so "the marker fired and X did not happen" shows X was not due
 * before it, whatever the machine's speed.
 */
static inline void marker_fire(evutil_socket_t fd, short what, void *arg)
{
	*(bool *)arg = true;
}
static inline void marker(struct fixture *x, long ms, bool *fired)
{
	*fired = false;
	event_base_once(x->f.base, -1, EV_TIMEOUT, marker_fire, fired,
			&(struct timeval){ ms / 1000, (ms % 1000) * 1000 });
}

/* An agent of the fake's kind, as the API would build one. */
static inline struct agent *fixture_agent(const char *name, enum restart_policy restart)
{
	struct agent *a = xcalloc(1, sizeof(*a));

	a->name = xstrdup(name);
	a->backend = FAKE_KIND;
	a->memory_mib = AGENT_MEMORY_DEFAULT;
	a->vcpus = 1;
	a->disk_gib = AGENT_DISK_DEFAULT;
	a->restart = restart;
	a->health = -1;
	a->snapshot_keep = 0;
	return a;
}

/* The agent's state in the database, or -1 if it has no row. */
static inline int db_state(struct fixture *x, const char *name)
{
	_cleanup_(agent_freep) struct agent *a = NULL;

	return db_agent_get(x->f.db, name, &a) < 0 ? -1 : (int)a->state;
}

/* Its state_detail ("" if none, "(no row)" if no row); static buffer. */
static inline const char *db_detail(struct fixture *x, const char *name)
{
	static char buf[512];
	_cleanup_(agent_freep) struct agent *a = NULL;

	if (db_agent_get(x->f.db, name, &a) < 0)
		return "(no row)";
	snprintf(buf, sizeof(buf), "%s", a->state_detail ? a->state_detail : "");
	return buf;
}

/* The host's view: AGENT_STOPPED/RUNNING, or -1 without an environment. */
static inline int env_state(const char *name)
{
	enum agent_state st;

	return fake_env_state(name, &st) < 0 ? -1 : (int)st;
}

/* Create (provision) and start a; fails the test program if it cannot. */
static inline void fixture_start_agent(struct fixture *x, struct agent *a)
{
	_cleanup_free_ char *why = NULL;
	int before = fake_calls(FAKE_START);

	if (lifecycle_create(&x->f, fake_backends[FAKE_KIND], a, &why) < 0 ||
	    lifecycle_start(&x->f, fake_backends[FAKE_KIND], a, NULL, NULL, &why) < 0 ||
	    !LOOP_UNTIL(x, fake_calls(FAKE_START) > before && db_state(x, a->name) == AGENT_RUNNING)) {
		fprintf(stderr, "fixture: cannot make '%s' run: %s\n", a->name, why ? why : "?");
		exit(1);
	}
}

static inline void fixture_running(struct fixture *x, const char *name, enum restart_policy restart)
{
	_cleanup_(agent_freep) struct agent *a = fixture_agent(name, restart);

	fixture_start_agent(x, a);
}

/*
 * Run fn in a child that is to die of SIGKILL inside a verb (a FAKE_DIE_*
 * switch): the child "starts fleetd" on x->dir itself. True if it died so.
 */
static inline bool fixture_kill9(struct fixture *x, int flags, void (*fn)(struct fixture *, void *), void *arg)
{
	int status;
	pid_t pid;

	fflush(stdout);
	fflush(stderr);
	if ((pid = fork()) < 0)
		return false;
	if (pid == 0) {
		struct fixture child = *x;

		fixture_open(&child, flags, NULL);
		fn(&child, arg);
		_exit(3);	/* it was to die before this */
	}
	if (waitpid(pid, &status, 0) != pid)
		return false;
	return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

#endif
