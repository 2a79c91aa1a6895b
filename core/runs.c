/* runs: see runs.h. */
#include "core/runs.h"
#include "core/activity.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <dirent.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/backends.h"
#include "model/config.h"
#include "store/db.h"
#include "model/fleetd.h"
#include "core/lifecycle.h"
#include "core/metrics.h"
#include "core/health.h"
#include "common/log.h"
#include "core/snapshots.h"
#include "common/util.h"
#include "core/run_exec.h"
#include "core/redact.h"
#include "core/redaction.h"
#include "core/secret_files.h"
#include "core/secret_hold.h"
#include "core/watch.h"

#define TICK_S 1
#define BUSY_RETRY_S 1		/* the agent is busy (a snapshot, a restore, a check): */
#define BUSY_RETRIES 300	/* wait up to 5 minutes before the run fails */

/* A run that has left the queue and not finished yet; at most one per agent. */
struct active {
	struct active *next;
	struct runs *q;
	int64_t id;
	char *agent;
	const struct backend_ops *ops;
	int log_fd;
	size_t logged;
	bool truncated;
	int log_errno;		/* why its log could not be written (ENOSPC: the disk is full), or 0 */
	struct exec_handle *exec;
	struct event *retry;
	int busy_tries;
	int timeout_s;		/* the agent's run_timeout_s when it launched */
	bool cancelled;		/* fleetctl cancel: it ends as cancelled, whatever it was doing */
	struct redactor *redactor;	/* the agent's secrets, for the run's life (wiped when it ends) */
	struct redact_stream *redact;	/* its output on the way to the log */
	bool has_secrets;	/* the agent has secrets: its command gets them */
	bool holding;		/* they are in its environment: no snapshot until it ends (secret_hold.h) */
	int retries;		/* of the run: a retry appends to its log */
	struct active *next_start;	/* in runs.to_start */
	char *trigger;
	long long t_start;	/* now_usec() when it was taken off the queue */
};

/*
 * A run that ended and whose final state is not written yet: dispatch()
 * writes every one of them with the starts it makes, in one transaction
 * (one fsync for all, not one per transition). Until then its row says
 * 'running'; a crash in between leaves it so, and the next start finds it
 * cut off (interrupted), as a crash a moment before its end would.
 */
struct ended {
	struct ended *next;
	int64_t id;
	enum run_state state;
	int exit_code;
	char *error;
};

struct runs {
	struct fleetd *f;
	struct event *tick;
	struct event *kick;	/* dispatch soon: something was queued or finished */
	struct active *active;
	int n_active;
	struct ended *ended, **ended_tail;	/* in the order they ended */
	size_t n_ended_written;	/* the first ones of them, written by the pass not committed yet */
	struct active **taken;	/* taken by that pass: their rows say 'running' in it */
	size_t n_taken;
	struct active *to_start;	/* taken by a committed pass, not started yet (next_start) */
	bool closing;		/* fleetd stops: callbacks only free their run */
	int cpus;		/* the host's CPUs online, counted at start (host_cpus) */
};

/*
 * The default of max_concurrent_runs: one run per CPU. Counted once, at
 * start: sysconf opens and reads /sys/devices/system/cpu/online on every
 * call, and a pass asks on every commit (one openat and close each).
 */
static int host_cpus(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	return n > 0 ? (int)n : 1;
}

static struct active *active_find(struct runs *q, const char *agent)
{
	for (struct active *a = q->active; a; a = a->next)
		if (strcmp(a->agent, agent) == 0)
			return a;
	return NULL;
}

static void kick(struct runs *q)
{
	event_active(q->kick, 0, 0);
}

static void active_free(struct active *act)
{
	for (struct active **p = &act->q->active; *p; p = &(*p)->next)
		if (*p == act) {
			*p = act->next;
			break;
		}
	if (act->retry)
		event_free(act->retry);
	if (act->redact)
		redact_stream_flush(act->redact);	/* what it held back, redacted, to the log */
	redact_stream_free(act->redact);
	redactor_free(act->redactor);
	if (act->holding)
		secret_hold_leave(act->q->f, act->agent);
	if (act->log_fd >= 0)
		close(act->log_fd);
	act->q->n_active--;
	free(act->agent);
	free(act->trigger);
	free(act);
}

/* fleetd is stopping: the run was marked interrupted; a late callback only frees it. */
static bool closing(struct active *act)
{
	if (!act->q->closing)
		return false;
	active_free(act);
	return true;
}

/* To a final state; then the agent's health is checked (after a run that got to run) and the queue moves on. */
static void finish(struct active *act, enum run_state state, int exit_code, const char *error, bool check_health)
{
	struct runs *q = act->q;
	_cleanup_free_ char *agent = xstrdup(act->agent);
	struct ended *e = xcalloc(1, sizeof(*e));
	int r;

	*e = (struct ended){ .id = act->id, .state = state, .exit_code = exit_code, .error = error ? xstrdup(error) : NULL };
	metrics_inc(q->f, M_RUNS, (const char *[]){ agent, run_state_to_string(state) });
	metrics_observe(q->f, M_RUN_DURATION, (const char *[]){ agent, run_state_to_string(state) },
			(now_usec() - act->t_start) / 1e6);
	*q->ended_tail = e;	/* written by the next dispatch, kicked below */
	q->ended_tail = &e->next;
	if (error)
		log_warning("agent '%s': run %" PRId64 " %s: %s", agent, act->id, run_state_to_string(state), error);
	else
		log_info("agent '%s': run %" PRId64 " %s (exit %d)", agent, act->id, run_state_to_string(state), exit_code);
	if (watch_active(q->f))
		watch_publish(q->f, "run.finished", agent, json_pack("{s:I, s:s, s:i, s:s?}", "run", (json_int_t)act->id, "state", run_state_to_string(state), "exit_code", exit_code, "error", error));
	active_free(act);
	if (check_health) {
		r = health_check_and_act(q->f, agent);
		if (r < 0 && r != -EBUSY)
			log_info("agent '%s': no health check after the run: %s", agent, strerror(-r));
	}
	kick(q);
}

/* Bytes for the log (redacted already), up to RUN_LOG_MAX. */
static void log_write(void *userdata, const char *data, size_t len)
{
	struct active *act = userdata;
	static const char note[] = "\n[fleet: output truncated here: the run's log is limited to 16 MiB]\n";

	if (act->log_fd < 0 || act->truncated)
		return;
	if (act->logged + len > RUN_LOG_MAX) {
		len = RUN_LOG_MAX - act->logged;
		act->truncated = true;
	}
	while (len > 0) {
		ssize_t w = write(act->log_fd, data, len);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			log_warning("run %" PRId64 ": cannot write its log: %s", act->id, strerror(errno));
			act->log_errno = errno;	/* the run says so when it ends: a log cut short is no success */
			act->truncated = true;
			return;
		}
		data += w;
		len -= (size_t)w;
		act->logged += (size_t)w;
	}
	if (act->truncated)
		(void)!write(act->log_fd, note, sizeof(note) - 1);
}

/* The command's output: through the agent's redactor, whose stream holds back what could start a value. */
static void run_output(void *userdata, enum exec_stream stream, const char *data, size_t len)
{
	struct active *act = userdata;

	if (act->redact)
		redact_stream_push(act->redact, data, len);
	else
		log_write(act, data, len);	/* fleet's own notes, before the command starts */
}

static void run_done(void *userdata, const struct exec_result *res)
{
	struct active *act = userdata;
	_cleanup_free_ char *error = NULL;

	act->exec = NULL;
	activity_end(act->q->f, act->agent);
	if (closing(act))
		return;
	if (act->redact)
		redact_stream_flush(act->redact);	/* the whole log is there before the run reads as over */
	if (act->cancelled) {
		finish(act, RUN_CANCELLED, -1, "cancelled while it ran (its processes were killed)", true);
	} else if (res->error < 0) {
		error = xasprintf("could not run its command: %s", res->why ? res->why : strerror(-res->error));
		finish(act, RUN_FAILED, -1, error, true);
	} else if (res->timed_out) {
		error = xasprintf("timed out after %d s (the agent's --run-timeout) and was killed", act->timeout_s);
		finish(act, RUN_TIMED_OUT, -1, error, true);
	} else if (res->signal > 0) {
		error = xasprintf("killed by signal %d", res->signal);
		finish(act, RUN_FAILED, 128 + res->signal, error, true);
	} else if (act->log_errno) {
		error = xasprintf("its command exited with %d, but its log is incomplete: cannot write it: %s",
				  res->exit_code, strerror(act->log_errno));
		finish(act, RUN_FAILED, res->exit_code, error, true);
	} else {
		finish(act, res->exit_code == 0 ? RUN_SUCCEEDED : RUN_FAILED, res->exit_code, NULL, true);
	}
}

static void launch_retry(evutil_socket_t fd, short what, void *arg);

/*
 * Run the command: `sh -c COMMAND` as the agent, its stdin the event as
 * JSON, with FLEET_RUN_ID, FLEET_TRIGGER, FLEET_AGENT and FLEET_EVENT_*
 * (run_exec.c) set. known: the agent's row as the caller read it in this
 * same callback (not read again), or NULL.
 */
static void launch(struct active *act, const struct agent *known)
{
	struct fleetd *f = act->q->f;
	_cleanup_(agent_freep) struct agent *owned = NULL;
	const struct agent *a = known;
	_cleanup_(run_freep) struct run *run = NULL;
	_cleanup_(run_input_freep) struct run_input *in = NULL;
	_cleanup_(secret_files_freep) struct secret_files *files = NULL;
	_cleanup_free_ char *why = NULL, *msg = NULL;
	struct exec_callbacks cb = { run_output, run_done, act };
	int r;

	if (act->cancelled) {
		finish(act, RUN_CANCELLED, -1, "cancelled before its command started", false);
		return;
	}
	if ((!a && (r = db_agent_get(f->db, act->agent, &owned)) < 0) || (r = db_run_get(f->db, act->id, &run)) < 0) {
		finish(act, RUN_FAILED, -1, "the agent or the run was removed", false);
		return;
	}
	if (!a)
		a = owned;
	if (!a->command) {
		finish(act, RUN_FAILED, -1, "the agent has no command to run", false);
		return;
	}
	if ((r = run_input_make(f, a, run, &in, &why)) < 0) {
		msg = xasprintf("could not prepare it: %s", why);
		finish(act, RUN_FAILED, -1, msg, false);
		return;
	}
	/*
	 * Its secrets, read now (again at each attempt, as its variables are)
	 * and kept for the run's life only: no output reaches the log unredacted.
	 */
	{
		size_t n_secrets = 0;

		redact_stream_free(act->redact);	/* an attempt the backend refused: nothing went through it */
		redactor_free(act->redactor);
		act->redact = NULL;
		act->redactor = NULL;
		if ((r = redaction_load(f, act->agent, &act->redactor, &n_secrets, &why)) < 0) {
			finish(act, RUN_FAILED, -1, why, false);
			return;
		}
		act->redact = redact_stream_new(act->redactor, log_write, act);
		act->has_secrets = n_secrets > 0;
	}
	/* --secret-files: as files on a tmpfs the backend makes inside the environment for this run. */
	if (a->secret_files && (r = secret_files_load(f, act->agent, &files, &why)) < 0) {
		finish(act, RUN_FAILED, -1, why, false);
		return;
	}
	act->timeout_s = a->run_timeout_s > 0 ? a->run_timeout_s : RUN_TIMEOUT_DEFAULT;
	if (act->has_secrets) {
		_cleanup_free_ char *who = xasprintf("run %" PRId64, act->id);

		secret_hold_enter(f, act->agent, who);	/* before its secrets go in; active_free() leaves */
		act->holding = true;
	}
	{
		const char *argv[] = { "sh", "-c", a->command, NULL };
		struct exec_request req = { .argv = argv, .env = (const char *const *)in->env, .stdin_data = in->stdin_data,
					    .stdin_len = in->stdin_len, .timeout_s = act->timeout_s,
					    .files = files ? files->files : NULL, .n_files = files ? files->n : 0 };

		activity_begin(f, act->agent);
		r = act->ops->exec(f, a, &req, &cb, &act->exec, &why);
		if (r < 0)
			activity_end(f, act->agent);
	}
	if (r < 0 && act->holding) {
		secret_hold_leave(f, act->agent);	/* nothing went in: not held while it waits */
		act->holding = false;
	}
	if (r == -EBUSY && ++act->busy_tries <= BUSY_RETRIES) {
		struct timeval tv = { BUSY_RETRY_S, 0 };

		if (!act->retry)
			act->retry = evtimer_new(f->base, launch_retry, act);
		evtimer_add(act->retry, &tv);
		return;
	}
	if (r < 0) {
		msg = xasprintf("could not run its command: %s", why ? why : strerror(-r));
		finish(act, RUN_FAILED, -1, msg, false);
	}
}

static void launch_retry(evutil_socket_t fd, short what, void *arg)
{
	if (!closing(arg))
		launch(arg, NULL);
}

static void pre_run_taken(void *userdata, int r, const char *why, const struct snapshot *s)
{
	struct active *act = userdata;
	_cleanup_free_ char *msg = NULL;

	if (closing(act))
		return;
	if (r < 0) {
		/* The snapshot is the run's safety net: no snapshot, no run. */
		msg = xasprintf("the snapshot before the run failed: %s", why);
		finish(act, RUN_FAILED, -1, msg, false);
		return;
	}
	(void)db_run_set_snapshot(act->q->f->db, act->id, s->name);
	launch(act, NULL);
}

/*
 * The environment runs: snapshot first if the agent's policy says so, then
 * launch. known: the agent's row as the caller read it in this same
 * callback, or NULL (read here).
 */
static void prepare(struct active *act, const struct agent *known)
{
	struct fleetd *f = act->q->f;
	_cleanup_(agent_freep) struct agent *owned = NULL;
	const struct agent *a = known;
	_cleanup_free_ char *why = NULL, *note = NULL, *msg = NULL;
	int r;

	if (act->cancelled) {
		finish(act, RUN_CANCELLED, -1, "cancelled before its command started", false);
		return;
	}
	if (!a && db_agent_get(f->db, act->agent, &owned) < 0) {
		finish(act, RUN_FAILED, -1, "the agent was removed", false);
		return;
	}
	if (!a)
		a = owned;
	if (a->snapshot_policy != SNAPSHOT_POLICY_BEFORE_RUN) {
		launch(act, a);	/* the row just read: not read again */
		return;
	}
	note = xasprintf("before run %" PRId64, act->id);
	r = snapshots_take(f, act->agent, NULL, "run", note, false, SNAPSHOTS_WAIT_ANY, pre_run_taken, act, &why);
	if (r < 0) {
		msg = xasprintf("the snapshot before the run failed: %s", why);
		finish(act, RUN_FAILED, -1, msg, false);
	}
}

static void env_started(void *userdata, int r, const char *why)
{
	struct active *act = userdata;
	_cleanup_free_ char *msg = NULL;

	if (closing(act))
		return;
	if (r < 0) {
		msg = xasprintf("could not start its environment: %s", why ? why : strerror(-r));
		finish(act, RUN_FAILED, -1, msg, false);	/* lifecycle_start reports a boot failure */
		return;
	}
	prepare(act, NULL);	/* lifecycle_start recorded 'running': read the row again */
}

/*
 * Take run off the queue: its row becomes 'running' in the caller's
 * transaction, and it is active from now on (so no second run of its agent
 * is taken). NULL if it cannot be taken now (the agent is being made or
 * restored: the next tick looks again; or it was removed).
 */
static struct active *take_run(struct runs *q, const struct run *run)
{
	struct fleetd *f = q->f;
	_cleanup_(agent_freep) struct agent *a = NULL;
	_cleanup_free_ char *dir = NULL, *path = NULL;
	struct active *act;

	if (db_agent_get(f->db, run->agent, &a) < 0)
		return NULL;	/* removed: its runs went with it */
	if (a->state == AGENT_PROVISIONING || a->restoring)
		return NULL;	/* not yet: the next tick looks again */
	dir = xasprintf("%s/runs", config_get(&f->cfg, CFG_STATE_DIR));
	path = xasprintf("%s/%" PRId64 ".log", dir, run->id);
	if ((mkdir(dir, 0700) < 0 && errno != EEXIST) || db_run_start(f->db, run->id, path) < 0) {
		log_error("run %" PRId64 ": cannot start it: %s", run->id, strerror(errno));
		return NULL;
	}
	act = xcalloc(1, sizeof(*act));
	act->q = q;
	act->id = run->id;
	act->agent = xstrdup(run->agent);
	act->log_fd = -1;
	act->retries = run->retries;
	act->trigger = xstrdup(run->trigger);
	act->t_start = now_usec();
	act->next = q->active;
	q->active = act;
	q->n_active++;
	return act;	/* run.started once the pass is committed (runs_pass_done) */
}

/* A taken run whose 'running' row is durable: it fails at once (with a reason) if the agent cannot run it. */
static void start_run(struct active *act)
{
	struct fleetd *f = act->q->f;
	_cleanup_(agent_freep) struct agent *a = NULL;
	_cleanup_free_ char *path = NULL, *why = NULL, *msg = NULL;
	const char *reason;
	int r;

	if (db_agent_get(f->db, act->agent, &a) < 0) {
		finish(act, RUN_FAILED, -1, "the agent was removed", false);
		return;
	}
	path = xasprintf("%s/runs/%" PRId64 ".log", config_get(&f->cfg, CFG_STATE_DIR), act->id);
	/* A run queued again after fleetd stopped keeps what its cut-off attempt wrote, and says so. */
	act->log_fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | (act->retries > 0 ? O_APPEND : O_TRUNC),
			   0600);
	if (act->log_fd < 0) {
		msg = xasprintf("cannot create its log %s: %s", path, strerror(errno));
		finish(act, RUN_FAILED, -1, msg, false);
		return;
	}
	if (act->retries > 0) {
		off_t end = lseek(act->log_fd, 0, SEEK_END);
		static const char note[] = "\n[fleet: fleetd stopped during the run; it runs again from here]\n";

		act->logged = end > 0 ? (size_t)end : 0;	/* the 16 MiB cap counts both attempts */
		run_output(act, EXEC_STDOUT, note, sizeof(note) - 1);
	}
	log_info("agent '%s': run %" PRId64 " (%s) starts", a->name, act->id, act->trigger);
	if (!(act->ops = backend_get(f, a->backend, &reason))) {
		msg = xasprintf("the %s backend is unavailable: %s", backend_kind_to_string(a->backend), reason);
		finish(act, RUN_FAILED, -1, msg, false);
		return;
	}
	if (a->state == AGENT_DEFINED) {
		finish(act, RUN_FAILED, -1, "its environment is not provisioned", false);
		return;
	}
	if (a->state == AGENT_BAD) {
		finish(act, RUN_FAILED, -1, "the agent is bad (its health check fails): restore or fix it first", false);
		return;
	}
	if (a->state == AGENT_STOPPED) {
		if ((r = lifecycle_start(f, act->ops, a, env_started, act, &why)) < 0) {
			msg = xasprintf("could not start its environment: %s", why ? why : strerror(-r));
			finish(act, RUN_FAILED, -1, msg, false);
		}
		return;
	}
	prepare(act, a);	/* the row read above: nothing since has written it */
}

static void ended_free(struct ended *e)
{
	while (e) {
		struct ended *next = e->next;

		free(e->error);
		free(e);
		e = next;
	}
}

/* The final states of the runs that ended, in the caller's transaction; -errno if one could not be written. */
static int write_ended(struct runs *q)
{
	for (struct ended *e = q->ended; e; e = e->next) {
		int r = db_run_finish(q->f->db, e->id, e->state, e->exit_code, e->error);

		if (r < 0 && r != -ENOENT)	/* -ENOENT: its agent was removed, and the row with it */
			return r;
	}
	return 0;
}

/* Forget the ends the last pass wrote, now committed. */
static void ended_drop_written(struct runs *q)
{
	while (q->n_ended_written > 0 && q->ended) {
		struct ended *e = q->ended;

		q->ended = e->next;
		e->next = NULL;
		ended_free(e);
		q->n_ended_written--;
	}
	q->n_ended_written = 0;
	if (!q->ended)
		q->ended_tail = &q->ended;
}

/* Whether a pass has anything to do: ends to write, or room for a run to start (*limit: max_concurrent_runs). */
static bool pass_wanted(struct runs *q, int *limit)
{
	long max = config_get_long(&q->f->cfg, CFG_MAX_CONCURRENT_RUNS);	/* SIGHUP may change it */

	*limit = max > 0 ? (int)max : q->cpus;
	return q->ended || q->n_active < *limit;	/* else not even a look at the queue */
}

/*
 * A pass of the queue, in the caller's open transaction (in a savepoint of
 * its own: a failure here spoils nothing else of it): the ends of the runs
 * that ended, and the runs that may start now taken ('running'). Which:
 * each agent's oldest queued run, oldest first, at most one per agent and
 * max_concurrent_runs in all; an agent's next run waits for the next pass
 * (the kick of its run's end). Nothing starts before runs_pass_done().
 */
void runs_pass_write(struct fleetd *f)
{
	struct runs *q = f->runs;
	struct run **heads = NULL;
	int limit, r;
	size_t n = 0, n_ended = 0;

	if (!q || q->closing || q->n_taken > 0 || !pass_wanted(q, &limit))
		return;		/* (a pass open already: one at a time) */
	if ((r = db_runs_pass_begin(f->db)) < 0) {
		log_error("run queue: cannot write its changes: %s", strerror(-r));
		return;
	}
	if ((r = write_ended(q)) < 0) {
		(void)db_runs_pass_end(f->db, false);
		log_error("run queue: cannot write the end of runs: %s", strerror(-r));
		return;		/* the ends stay; the tick tries again */
	}
	for (struct ended *e = q->ended; e; e = e->next)
		n_ended++;
	if (q->n_active < limit && db_run_heads(f->db, &heads, &n) == 0) {
		q->taken = xrealloc(q->taken, (n ? n : 1) * sizeof(*q->taken));
		for (size_t i = 0; i < n && q->n_active < limit; i++)
			if (!active_find(q, heads[i]->agent) && (q->taken[q->n_taken] = take_run(q, heads[i])))
				q->n_taken++;
	}
	run_list_free(heads);
	if ((r = db_runs_pass_end(f->db, true)) < 0) {
		/* (Nothing of the pass stays: its runs would say 'running' and never run.) */
		log_error("run queue: cannot write its changes: %s", strerror(-r));
		runs_pass_done(f, false);
		return;
	}
	q->n_ended_written = n_ended;
}

/*
 * The transaction of runs_pass_write() was committed (the ends are durable,
 * the taken runs' 'running' rows too: they may start, from the loop's next
 * pass, so a launch never sits between a commit and its answers) or rolled
 * back (the ends stay to be written, the taken runs stay queued).
 */
void runs_pass_done(struct fleetd *f, bool committed)
{
	struct runs *q = f->runs;

	if (!q)
		return;
	if (committed) {
		ended_drop_written(q);
		for (size_t i = 0; i < q->n_taken; i++) {
			struct active *act = q->taken[i];

			/* Said only now: a pass rolled back started nothing, and a delivery's runs are said
			 * queued between its commit and here (deliveries_commit). */
			if (watch_active(f))
				watch_publish(f, "run.started", act->agent,
					      json_pack("{s:I, s:s}", "run", (json_int_t)act->id, "trigger", act->trigger));
			act->next_start = q->to_start;
			q->to_start = act;
		}
		if (q->n_taken)
			kick(q);
	} else {
		q->n_ended_written = 0;
		for (size_t i = 0; i < q->n_taken; i++)
			active_free(q->taken[i]);
	}
	q->n_taken = 0;
}

/* The runs taken by a committed pass start, oldest first. */
static void start_taken(struct runs *q)
{
	struct active *list = NULL;

	while (q->to_start) {	/* (to_start holds them newest first) */
		struct active *act = q->to_start;

		q->to_start = act->next_start;
		act->next_start = list;
		list = act;
	}
	while (list) {
		struct active *act = list;

		list = act->next_start;
		act->next_start = NULL;
		start_run(act);
	}
}

/* A pass of its own, when nothing else commits one (runs_pass_write joins a group commit of webhook deliveries). */
static void dispatch(struct runs *q)
{
	int limit, r;

	start_taken(q);
	if (q->closing || !pass_wanted(q, &limit))
		return;
	if ((r = db_begin(q->f->db)) < 0) {
		log_error("run queue: cannot write its changes: %s", strerror(-r));
		return;		/* the tick tries again */
	}
	runs_pass_write(q->f);
	if ((r = db_commit(q->f->db)) < 0) {
		db_rollback(q->f->db);
		log_error("run queue: cannot write its changes: %s", strerror(-r));
		runs_pass_done(q->f, false);
		return;
	}
	runs_pass_done(q->f, true);
	start_taken(q);
}

static void on_event(evutil_socket_t fd, short what, void *arg)
{
	dispatch(arg);
}

int runs_enqueue_event(struct fleetd *f, const char *agent, const char *trigger, struct run_event *ev,
		       int64_t *ret_id, char **why)
{
	_cleanup_(agent_freep) struct agent *a = NULL;
	int r;

	if ((r = db_agent_get(f->db, agent, &a)) < 0) {
		*why = xasprintf("agent '%s': %s", agent, r == -ENOENT ? "no such agent" : strerror(-r));
		return r;
	}
	if (!a->command) {
		*why = xasprintf("agent '%s' has no command to run (give it one with --command)", agent);
		return -EINVAL;
	}
	if (a->state == AGENT_DEFINED || a->state == AGENT_PROVISIONING) {
		*why = xasprintf("agent '%s': its environment is not provisioned", agent);
		return -EAGAIN;
	}
	if ((r = db_run_enqueue(f->db, agent, trigger, ev, ret_id)) < 0) {
		if (r == -EDQUOT)
			*why = xasprintf("agent '%s': its queue is full: %d runs wait already (its --max-queued)",
					 agent, a->max_queued);
		else
			*why = xasprintf("agent '%s': cannot queue a run: %s", agent, strerror(-r));
		return r;
	}
	log_info("agent '%s': run %" PRId64 " queued (%s)", agent, *ret_id, trigger);
	watch_publish(f, "run.queued", agent, json_pack("{s:I, s:s}", "run", (json_int_t)*ret_id, "trigger", trigger));
	kick(f->runs);
	return 0;
}

void runs_kick(struct fleetd *f)
{
	if (f->runs)
		kick(f->runs);
}

int runs_enqueue(struct fleetd *f, const char *agent, const char *trigger, int64_t *ret_id, char **why)
{
	return runs_enqueue_event(f, agent, trigger, NULL, ret_id, why);
}

static struct active *active_by_id(struct runs *q, int64_t id)
{
	for (struct active *a = q->active; a; a = a->next)
		if (a->id == id)
			return a;
	return NULL;
}

int runs_cancel(struct fleetd *f, const char *agent, int64_t id, char **why)
{
	_cleanup_(run_freep) struct run *run = NULL;
	struct active *act;
	int r;

	if ((r = db_run_get(f->db, id, &run)) < 0 || strcmp(run->agent, agent) != 0) {
		*why = xasprintf("agent '%s': no run %" PRId64, agent, id);
		return r < 0 && r != -ENOENT ? r : -ENOENT;
	}
	if (run->state == RUN_QUEUED) {
		if ((r = db_run_cancel_queued(f->db, id, "cancelled while it was queued")) == 0) {
			log_info("agent '%s': run %" PRId64 " cancelled while queued", agent, id);
			watch_publish(f, "run.finished", agent, json_pack("{s:I, s:s, s:i, s:s}", "run", (json_int_t)id, "state", run_state_to_string(RUN_CANCELLED), "exit_code", -1, "error", "cancelled while it was queued"));
			return 0;
		}
		if (r != -ENOENT) {
			*why = xasprintf("run %" PRId64 ": cannot cancel it: %s", id, strerror(-r));
			return r;
		}
		run_free(run);	/* it started in between: read it again */
		run = NULL;
		if ((r = db_run_get(f->db, id, &run)) < 0) {
			*why = xasprintf("agent '%s': no run %" PRId64, agent, id);
			return r;
		}
	}
	if (run->state != RUN_RUNNING || !(act = active_by_id(f->runs, id))) {
		*why = xasprintf("run %" PRId64 " is over already (%s)", id, run_state_to_string(run->state));
		return -EALREADY;
	}
	if (act->cancelled)
		return 0;	/* asked twice: the first is under way */
	act->cancelled = true;
	log_info("agent '%s': run %" PRId64 " cancelled while running", agent, id);
	if (act->exec) {
		act->ops->exec_cancel(act->exec);	/* its whole process tree; run_done() reports */
	} else if (act->retry && evtimer_pending(act->retry, NULL)) {
		evtimer_del(act->retry);	/* waiting to launch: it ends now */
		finish(act, RUN_CANCELLED, -1, "cancelled before its command started", false);
	}
	/* Else the environment starts or the snapshot is taken: prepare() or launch() ends it. */
	return 0;
}

int runs_ids_of(struct fleetd *f, const char *agent, int64_t **ret_ids, size_t *ret_n)
{
	struct run **list = NULL;
	int64_t *ids;
	size_t n = 0;
	int r;

	if ((r = db_run_list(f->db, agent, DB_ANY_STATE, 0, &list, &n)) < 0)
		return r;
	ids = xcalloc(n ? n : 1, sizeof(*ids));
	for (size_t i = 0; i < n; i++)
		ids[i] = list[i]->id;
	run_list_free(list);
	*ret_ids = ids;
	*ret_n = n;
	return 0;
}

/* STATE/runs, opened without following links; -errno. */
static int open_log_dir(struct fleetd *f)
{
	_cleanup_free_ char *dir = xasprintf("%s/runs", config_get(&f->cfg, CFG_STATE_DIR));
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

	return fd < 0 ? -errno : fd;
}

int runs_remove_logs(struct fleetd *f, const int64_t *ids, size_t n)
{
	_cleanup_close_ int dfd = -1;
	int failed = 0;

	if (n == 0)
		return 0;
	if ((dfd = open_log_dir(f)) < 0) {
		if (dfd == -ENOENT)
			return 0;	/* no run ever started */
		log_error("cannot open the run log directory: %s", strerror(-dfd));
		return (int)n;
	}
	for (size_t i = 0; i < n; i++) {
		char name[32];

		snprintf(name, sizeof(name), "%" PRId64 ".log", ids[i]);
		if (unlinkat(dfd, name, 0) < 0 && errno != ENOENT) {
			log_error("run %" PRId64 ": cannot remove its log: %s", ids[i], strerror(errno));
			failed++;
		}
	}
	return failed;
}

/*
 * Logs whose run row is gone (fleetd was killed between removing an agent
 * and its logs) are removed at start: nothing can show them any more.
 * Names fleetd did not write are left alone. 0, or -errno if the directory
 * could not be read, or the number of logs that could not be removed
 * (each logged).
 */
static int sweep_logs(struct fleetd *f)
{
	_cleanup_close_ int dfd = open_log_dir(f);
	DIR *d;
	struct dirent *de;
	int removed = 0, failed = 0, fd2;

	if (dfd < 0) {
		if (dfd == -ENOENT)
			return 0;	/* no run ever started */
		log_error("cannot open the run log directory: %s", strerror(-dfd));
		return dfd;
	}
	if ((fd2 = dup(dfd)) < 0 || !(d = fdopendir(fd2))) {
		int r = -errno;

		if (fd2 >= 0)
			close(fd2);
		log_error("cannot read the run log directory: %s", strerror(-r));
		return r;
	}
	while ((de = readdir(d))) {
		_cleanup_(run_freep) struct run *run = NULL;
		char *end;
		long long id;

		errno = 0;
		id = strtoll(de->d_name, &end, 10);
		if (de->d_name[0] < '1' || de->d_name[0] > '9' || errno || strcmp(end, ".log") != 0)
			continue;
		if (db_run_get(f->db, (int64_t)id, &run) != -ENOENT)
			continue;	/* its run exists, or the database could not say */
		if (unlinkat(dfd, de->d_name, 0) < 0) {
			log_error("cannot remove the orphaned run log %s: %s", de->d_name, strerror(errno));
			failed++;
		} else {
			removed++;
		}
	}
	closedir(d);
	if (removed)
		log_notice("removed %d run log(s) left behind by removed agents", removed);
	return failed;
}

int runs_init(struct fleetd *f)
{
	struct runs *q = xcalloc(1, sizeof(*q));
	struct timeval tv = { TICK_S, 0 };
	int n = 0, requeued = 0, r;

	if ((r = db_runs_interrupt(f->db, 0, "fleetd stopped during the run; it was not run again", &n, &requeued)) < 0)
		log_error("cannot mark interrupted runs: %s", strerror(-r));
	else if (n > 0 || requeued > 0)
		log_warning("%d run(s) were cut off by fleetd stopping: %d marked interrupted, %d queued again "
			    "(their agent's --retry-interrupted)", n + requeued, n, requeued);
	(void)sweep_logs(f);	/* failures are logged; the logs stay unreachable, and ids are not reused */
	q->f = f;
	q->cpus = host_cpus();
	q->ended_tail = &q->ended;
	q->tick = event_new(f->base, -1, EV_PERSIST, on_event, q);
	q->kick = event_new(f->base, -1, 0, on_event, q);
	event_add(q->tick, &tv);
	f->runs = q;
	kick(q);
	return 0;
}

void runs_shutdown(struct fleetd *f)
{
	struct runs *q = f->runs;
	bool txn;
	int r;

	if (!q)
		return;
	/*
	 * Runs under way end with fleetd: the backends' shutdown ends their
	 * execs and reports them. One transaction with the ends not written
	 * yet (without it each write commits alone; a failure leaves rows
	 * 'running', which the next start marks as cut off).
	 */
	q->closing = true;
	txn = db_begin(f->db) == 0;
	if ((r = write_ended(q)) < 0)
		log_error("run queue: cannot write the end of runs: %s", strerror(-r));
	for (struct active *act = q->active; act; act = act->next) {
		int n, requeued;

		if (act->cancelled)
			(void)db_run_finish(f->db, act->id, RUN_CANCELLED, -1, "cancelled; fleetd stopped before it ended");
		else
			(void)db_runs_interrupt(f->db, act->id, "fleetd stopped during the run", &n, &requeued);
		if (act->retry)
			evtimer_del(act->retry);
	}
	if (txn && (r = db_commit(f->db)) < 0) {
		log_error("run queue: cannot write the end of runs: %s", strerror(-r));
		db_rollback(f->db);
	}
	event_del(q->tick);
}

void runs_free(struct fleetd *f)
{
	struct runs *q = f->runs;

	if (!q)
		return;
	while (q->active)
		active_free(q->active);	/* no callback came for these */
	ended_free(q->ended);
	free(q->taken);
	event_free(q->tick);
	event_free(q->kick);
	free(q);
	f->runs = NULL;
}
