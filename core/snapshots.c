/* snapshots: see snapshots.h. */
#include "core/snapshots.h"

#include <errno.h>
#include <event2/event.h>
#include <string.h>
#include <time.h>

#include "core/activity.h"
#include "core/backends.h"
#include "store/db.h"
#include "model/fleetd.h"
#include "core/lifecycle.h"
#include "core/metrics.h"
#include "core/secret_hold.h"
#include "core/watch.h"
#include "common/log.h"
#include "common/names.h"
#include "common/util.h"

#define CHECK_WAIT_MS 500	/* fleet's own health check holds an exec for a moment: */
#define CHECK_WAIT_TRIES 120	/* wait for it (at most 60 s) rather than refuse */
#define BUSY_WAIT_MS 2000	/* with SNAPSHOTS_WAIT_ANY, a person's command ... */
#define BUSY_WAIT_TRIES 15	/* ... is waited for this long (30 s) */

int snapshots_target(struct fleetd *f, const char *agent, struct agent **ret_a, const struct backend_ops **ret_ops,
		     char **why)
{
	_cleanup_(agent_freep) struct agent *a = NULL;
	const char *reason;
	int r;

	if ((r = db_agent_get(f->db, agent, &a)) < 0) {
		*why = xasprintf("agent '%s': %s", agent, r == -ENOENT ? "no such agent" : strerror(-r));
		return r;
	}
	if (a->state == AGENT_DEFINED || a->state == AGENT_PROVISIONING) {
		*why = xasprintf("agent '%s': its environment is not provisioned", agent);
		return -EAGAIN;
	}
	if (!(*ret_ops = backend_get(f, a->backend, &reason))) {
		*why = xasprintf("agent '%s': the %s backend is unavailable: %s", agent,
				 backend_kind_to_string(a->backend), reason);
		return -ENODEV;
	}
	if (!(*ret_ops)->snapshot_create) {
		*why = xasprintf("agent '%s': the %s backend has no snapshots", agent, backend_kind_to_string(a->backend));
		return -EOPNOTSUPP;
	}
	*ret_a = TAKE_PTR(a);
	return 0;
}

static const struct snapshots_health *health;	/* health.c's, set at its init */

void snapshots_use_health(const struct snapshots_health *h)
{
	health = h;
}

/* Should a busy answer be waited out? Schedules the retry and says yes, or says no. */
static bool wait_busy(struct fleetd *f, const char *agent, int flags, int *tries, struct event **ev,
		      event_callback_fn cb, void *arg)
{
	struct timeval tv = { 0, 0 };

	if (flags & SNAPSHOTS_WAIT_ANY) {
		if (++*tries > BUSY_WAIT_TRIES)
			return false;
		tv.tv_sec = BUSY_WAIT_MS / 1000;
	} else {
		if (!health || !health->checking(f, agent) || ++*tries > CHECK_WAIT_TRIES)
			return false;
		tv.tv_usec = CHECK_WAIT_MS * 1000;
	}
	if (!*ev)
		*ev = evtimer_new(f->base, cb, arg);
	evtimer_add(*ev, &tv);
	return true;
}

/* --- taking ------------------------------------------------------------------------- */

struct take {
	struct fleetd *f;
	char *agent, *snap;
	const struct backend_ops *ops;
	int good;		/* what the check before it said: 1, 0, or -1 (not checked) */
	bool reused;		/* good is a recent check's (health_recent_pass()) */
	long long t_begin, t_checked, t_backend;	/* now_usec(): for the log line that says where the time went */
	int flags;
	struct event *retry;
	int tries;
	snapshots_taken_fn done;
	void *userdata;
};

static void take_free(struct take *t)
{
	if (t->retry)
		event_free(t->retry);
	free(t->agent);
	free(t->snap);
	free(t);
}

/* Drop the row of a snapshot that was not made; if even that fails (a full disk), start-up removes it. */
static void forget_row(struct take *t)
{
	int r = db_snapshot_delete(t->f->db, t->agent, t->snap);

	if (r < 0 && r != -ENOENT)
		log_error("agent '%s': cannot remove the row of the failed snapshot '%s' (%s); it reads 'creating' "
			  "and blocks the name until fleetd restarts", t->agent, t->snap, strerror(-r));
}

static void take_fail(struct take *t, int r, const char *why)
{
	_cleanup_free_ char *msg = xasprintf("agent '%s': snapshot '%s' failed: %s", t->agent, t->snap,
					     why ? why : strerror(-r));

	forget_row(t);
	metrics_observe(t->f, M_SNAPSHOT_DURATION, (const char *[]){ t->ops->name, "failed" },
			(now_usec() - t->t_begin) / 1e6);
	log_error("%s", msg);
	t->done(t->userdata, r, msg, NULL);
	take_free(t);
}

static void take_created(void *userdata, const struct snapshot_result *res)
{
	struct take *t = userdata;
	struct db *db = t->f->db;
	struct snapshot *s = NULL;
	_cleanup_free_ char *msg = NULL;
	int r;

	t->t_backend = now_usec();
	if (res->error < 0) {
		take_fail(t, res->error, res->why);
		return;
	}
	if ((r = db_snapshot_ready(db, t->agent, t->snap, res->kind, res->size_bytes, t->good)) < 0 ||
	    (r = db_snapshot_get(db, t->agent, t->snap, &s)) < 0) {
		msg = xasprintf("agent '%s': snapshot '%s' was made but cannot be recorded: %s", t->agent, t->snap,
				strerror(-r));
		log_error("%s", msg);
		t->done(t->userdata, r, msg, NULL);
		take_free(t);
		return;
	}
	log_info("agent '%s': snapshot '%s' taken (%s, %s) in %.3f s: health check %.3f s%s, backend %.3f s, "
		 "records %.3f s", t->agent, t->snap, snapshot_kind_to_string(res->kind),
		 t->good == 1 ? "good" : t->good == 0 ? "bad" : "health unknown", (now_usec() - t->t_begin) / 1e6,
		 (t->t_checked - t->t_begin) / 1e6, t->reused ? " (a recent one's)" : "",
		 (t->t_backend - t->t_checked) / 1e6, (now_usec() - t->t_backend) / 1e6);
	watch_publish(t->f, "snapshot.taken", t->agent, json_pack("{s:s, s:s, s:o}", "snapshot", t->snap, "kind", snapshot_kind_to_string(res->kind), "good", t->good >= 0 ? json_boolean(t->good) : json_null()));
	metrics_observe(t->f, M_SNAPSHOT_DURATION, (const char *[]){ t->ops->name, "ok" }, (now_usec() - t->t_begin) / 1e6);
	(void)snapshots_prune(t->f, t->agent);
	t->done(t->userdata, 0, NULL, s);
	snapshot_free(s);
	take_free(t);
}

static void take_retry(evutil_socket_t fd, short what, void *arg);

/*
 * -EBUSY with *why while a run or exec holding agent's secrets is in its
 * environment: a snapshot now would keep them (a RAM checkpoint, a copied
 * tmpfs). A pre-run snapshot comes before its run's secrets go in.
 */
static int secrets_held(struct fleetd *f, const char *agent, char **why)
{
	const char *who = secret_hold_who(f, agent);

	if (!who)
		return 0;
	free(*why);
	*why = xasprintf("agent '%s': %s holds its secrets in memory; fleet takes no snapshot until it ends", agent,
			 who);
	return -EBUSY;
}

/* Ask the backend; 0 if it started (or a retry is scheduled), else -errno with *why and the row gone. */
static int take_attempt(struct take *t, char **why)
{
	_cleanup_(agent_freep) struct agent *a = NULL;
	int r;

	if ((r = secrets_held(t->f, t->agent, why)) == 0 && (r = db_agent_get(t->f->db, t->agent, &a)) == 0)
		r = t->ops->snapshot_create(t->f, a, t->snap, take_created, t, why);
	if (r == -EBUSY && wait_busy(t->f, t->agent, t->flags, &t->tries, &t->retry, take_retry, t)) {
		free(*why);
		*why = NULL;
		return 0;
	}
	if (r < 0)
		forget_row(t);
	return r;
}

static void take_retry(evutil_socket_t fd, short what, void *arg)
{
	struct take *t = arg;
	_cleanup_free_ char *why = NULL;
	int r;

	if ((r = take_attempt(t, &why)) < 0)
		take_fail(t, r, why);
}

static void take_checked(void *userdata, int healthy, const char *detail)
{
	struct take *t = userdata;

	t->good = healthy == 1 ? 1 : 0;
	t->t_checked = now_usec();
	take_retry(-1, 0, t);
}

/* PREFIX-YYYYmmdd-HHMMSS, with -2, -3... if taken this second. */
static void generate_name(struct fleetd *f, const char *agent, const char *prefix, char *name, size_t len)
{
	time_t now = time(NULL);
	struct snapshot *s = NULL;
	char stamp[32];
	struct tm tm;

	gmtime_r(&now, &tm);
	strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", &tm);
	snprintf(name, len, "%s-%s", prefix, stamp);
	for (int i = 2; db_snapshot_get(f->db, agent, name, &s) == 0 && i < 100; i++) {
		snapshot_free(s);
		s = NULL;
		snprintf(name, len, "%s-%s-%d", prefix, stamp, i);
	}
}

int snapshots_take(struct fleetd *f, const char *agent, const char *name, const char *prefix, const char *note,
		   bool pin, int flags, snapshots_taken_fn done, void *userdata, char **why)
{
	_cleanup_(agent_freep) struct agent *a = NULL;
	const struct backend_ops *ops;
	const char *bad;
	char generated[96];
	struct take *t;
	long long age = 0;
	int r;

	if ((r = snapshots_target(f, agent, &a, &ops, why)) < 0)
		return r;
	if (name && snapshot_name_check(name, &bad) < 0) {
		*why = xasprintf("invalid snapshot name: %s", bad);
		return -EINVAL;
	}
	if (!name) {
		generate_name(f, agent, prefix ? prefix : "snap", generated, sizeof(generated));
		name = generated;
	}
	if (note && strlen(note) > SNAPSHOT_NOTE_MAX) {
		*why = xasprintf("note is longer than %d characters", SNAPSHOT_NOTE_MAX);
		return -EINVAL;
	}
	/* A person's command is refused at once; fleet's own (a schedule, a run) wait a while. */
	if (!(flags & SNAPSHOTS_WAIT_ANY) && (r = secrets_held(f, agent, why)) < 0)
		return r;
	if ((r = db_snapshot_begin(f->db, agent, name, note, pin)) < 0) {
		*why = r == -EEXIST ? xasprintf("agent '%s': snapshot '%s' already exists", agent, name)
				    : xasprintf("agent '%s': cannot record snapshot '%s': %s", agent, name, strerror(-r));
		return r;
	}
	t = xcalloc(1, sizeof(*t));
	t->f = f;
	t->agent = xstrdup(agent);
	t->snap = xstrdup(name);
	t->ops = ops;
	t->good = -1;
	t->t_begin = t->t_checked = now_usec();
	t->flags = flags;
	t->done = done;
	t->userdata = userdata;
	/*
	 * A snapshot of a running agent that passes its health check first is
	 * marked good. A check that passed moments ago with nothing done in the
	 * environment since (no exec, run, put, start, stop or restore: see
	 * health_recent_pass()) checked the state this snapshot captures: it
	 * stands, and the snapshot is not held up by a second one.
	 */
	if (a->state == AGENT_RUNNING && health && health->recent_pass && health->recent_pass(f, agent, &age)) {
		log_info("agent '%s': snapshot '%s' is marked by the health check that passed %.1f s ago "
			 "(nothing done in it since)", agent, name, age / 1e6);
		t->good = 1;
		t->reused = true;
	} else if (a->state == AGENT_RUNNING && health && health->check(f, agent, take_checked, t) == 0) {
		return 0;
	}
	if ((r = take_attempt(t, why)) < 0) {
		if (!*why)
			*why = xstrdup(strerror(-r));
		if (t->reused) {	/* worded as after a check (take_fail): the caller cannot tell the paths apart */
			char *msg = xasprintf("agent '%s': snapshot '%s' failed: %s", t->agent, t->snap, *why);

			free(*why);
			*why = msg;
		}
		take_free(t);
		return r;
	}
	return 0;
}

int snapshots_newest_good(struct fleetd *f, const char *agent, char **ret)
{
	struct snapshot **list = NULL;
	size_t n = 0;
	int r;

	if ((r = db_snapshot_list(f->db, agent, SNAPSHOT_READY, &list, &n)) < 0)
		return r;
	*ret = NULL;
	for (size_t i = n; i > 0 && !*ret; i--)
		if (list[i - 1]->good == 1)
			*ret = xstrdup(list[i - 1]->name);
	snapshot_list_free(list);
	return *ret ? 0 : -ENOENT;
}

/* --- deleting and retention ----------------------------------------------------------- */

int snapshots_delete(struct fleetd *f, const char *agent, const char *snap, char **why)
{
	_cleanup_(agent_freep) struct agent *a = NULL;
	const struct backend_ops *ops;
	struct snapshot *s = NULL;
	bool ready;
	int r;

	if ((r = snapshots_target(f, agent, &a, &ops, why)) < 0)
		return r;
	r = db_snapshot_get(f->db, agent, snap, &s);
	ready = r == 0 && s->state == SNAPSHOT_READY;
	snapshot_free(s);
	if (!ready) {
		*why = xasprintf("agent '%s': no snapshot '%s'", agent, snap);
		return -ENOENT;
	}
	if (a->restoring && strcmp(a->restoring, snap) == 0) {
		*why = xasprintf("agent '%s': a restore to snapshot '%s' is under way", agent, snap);
		return -EBUSY;
	}
	/* 'deleting' first: a kill -9 between the backend's delete and the row's is finished at start. */
	if ((r = db_snapshot_set_state(f->db, agent, snap, SNAPSHOT_DELETING)) < 0) {
		*why = xasprintf("agent '%s': cannot delete snapshot '%s': %s", agent, snap, strerror(-r));
		return r;
	}
	r = ops->snapshot_delete(f, a, snap, why);
	if (r < 0 && r != -ENOENT) {
		(void)db_snapshot_set_state(f->db, agent, snap, SNAPSHOT_READY);
		if (!*why)
			*why = xstrdup(strerror(-r));
		return r;
	}
	free(*why);
	*why = NULL;
	if ((r = db_snapshot_delete(f->db, agent, snap)) < 0) {
		*why = xasprintf("agent '%s': cannot delete snapshot '%s': %s", agent, snap, strerror(-r));
		return r;
	}
	return 0;
}

int snapshots_prune(struct fleetd *f, const char *agent)
{
	_cleanup_(agent_freep) struct agent *a = NULL;
	struct snapshot **list = NULL;
	size_t n = 0, newest_good = SIZE_MAX;
	int r, removed = 0;

	if ((r = db_agent_get(f->db, agent, &a)) < 0)
		return r;
	if (a->snapshot_keep <= 0)
		return 0;
	if ((r = db_snapshot_list(f->db, agent, SNAPSHOT_READY, &list, &n)) < 0)
		return r;
	for (size_t i = 0; i < n; i++)
		if (list[i]->good == 1)
			newest_good = i;
	/* Oldest first: everything before the newest `keep` is a candidate. */
	for (size_t i = 0; i + (size_t)a->snapshot_keep < n; i++) {
		struct snapshot *s = list[i];
		_cleanup_free_ char *why = NULL, *target = NULL;

		if (s->pinned || i == newest_good || (a->restoring && strcmp(a->restoring, s->name) == 0))
			continue;
		target = xasprintf("%s/%s", agent, s->name);
		if ((r = snapshots_delete(f, agent, s->name, &why)) < 0) {
			log_warning("agent '%s': retention could not delete snapshot '%s': %s", agent, s->name,
				    why ? why : strerror(-r));
			(void)db_audit_add(f->db, 0, "snapshot.prune", target, "failed", why);
			continue;
		}
		log_info("agent '%s': snapshot '%s' deleted by retention (keep %d)", agent, s->name, a->snapshot_keep);
		(void)db_audit_add(f->db, 0, "snapshot.prune", target, "ok", NULL);
		removed++;
	}
	snapshot_list_free(list);
	return removed;
}

/* --- restoring ------------------------------------------------------------------------ */

struct restore {
	struct fleetd *f;
	const struct backend_ops *ops;
	struct agent *agent;
	char *snap;
	int flags;
	long long t_begin;	/* now_usec() */
	struct event *retry;
	int tries;
	snapshots_restored_fn done;
	void *userdata;
};

static void restore_free(struct restore *rs)
{
	if (rs->retry)
		event_free(rs->retry);
	agent_free(rs->agent);
	free(rs->snap);
	free(rs);
}

static void restore_finish(struct restore *rs, int r, const char *why)
{
	_cleanup_free_ char *msg = NULL;
	enum agent_state st;

	(void)db_agent_set_restoring(rs->f->db, rs->agent->name, NULL);
	metrics_observe(rs->f, M_RESTORE_DURATION, (const char *[]){ rs->ops->name, r < 0 ? "failed" : "ok" },
			(now_usec() - rs->t_begin) / 1e6);
	if (r < 0) {
		msg = xasprintf("agent '%s': restore of '%s' failed: %s", rs->agent->name, rs->snap,
				why ? why : strerror(-r));
		log_error("%s", msg);
	} else {
		if (rs->ops->state(rs->f, rs->agent, &st, NULL) == 0)
			(void)lifecycle_set_state(rs->f, rs->agent->name, st, NULL);
		log_notice("agent '%s': restored snapshot '%s' in %.3f s (until its environment answers)", rs->agent->name,
			   rs->snap, (now_usec() - rs->t_begin) / 1e6);
	}
	watch_publish(rs->f, "restore.finished", rs->agent->name, json_pack("{s:s, s:b, s:s?}", "snapshot", rs->snap, "ok", r >= 0, "error", msg));
	rs->done(rs->userdata, r, msg);
	restore_free(rs);
}

static void restore_done(void *userdata, int r, const char *why)
{
	restore_finish(userdata, r, why);
}

static void restore_retry(evutil_socket_t fd, short what, void *arg);

/* 0 if the backend started (or a retry is scheduled), else -errno with *why. */
static int restore_attempt(struct restore *rs, char **why)
{
	int r = rs->ops->snapshot_restore(rs->f, rs->agent, rs->snap, restore_done, rs, why);

	if (r == -EBUSY && wait_busy(rs->f, rs->agent->name, rs->flags, &rs->tries, &rs->retry, restore_retry, rs)) {
		log_info("agent '%s': restore of '%s' waits: %s", rs->agent->name, rs->snap, *why ? *why : "busy");
		free(*why);
		*why = NULL;
		return 0;
	}
	return r;
}

static void restore_retry(evutil_socket_t fd, short what, void *arg)
{
	struct restore *rs = arg;
	_cleanup_free_ char *why = NULL;
	int r;

	if ((r = restore_attempt(rs, &why)) < 0)
		restore_finish(rs, r, why);
}

int snapshots_restore(struct fleetd *f, const char *agent, const char *snap, int flags,
		      snapshots_restored_fn done, void *userdata, char **why)
{
	_cleanup_(agent_freep) struct agent *a = NULL;
	const struct backend_ops *ops;
	struct snapshot *s = NULL;
	struct restore *rs;
	bool ready;
	int r;

	if ((r = snapshots_target(f, agent, &a, &ops, why)) < 0)
		return r;
	r = db_snapshot_get(f->db, agent, snap, &s);
	ready = r == 0 && s->state == SNAPSHOT_READY;
	snapshot_free(s);
	if (!ready) {
		*why = xasprintf("agent '%s': no snapshot '%s'", agent, snap);
		return -ENOENT;
	}
	if (a->restoring && strcmp(a->restoring, snap) != 0) {
		*why = xasprintf("agent '%s': a restore to '%s' is under way", agent, a->restoring);
		return -EBUSY;
	}
	if ((r = db_agent_set_restoring(f->db, agent, snap)) < 0) {
		*why = xasprintf("agent '%s': cannot record the restore: %s", agent, strerror(-r));
		return r;
	}
	activity_note(f, agent);	/* whatever a check said before is about another state now */
	rs = xcalloc(1, sizeof(*rs));
	rs->f = f;
	rs->ops = ops;
	rs->agent = TAKE_PTR(a);
	rs->snap = xstrdup(snap);
	rs->flags = flags;
	rs->t_begin = now_usec();
	rs->done = done;
	rs->userdata = userdata;
	if ((r = restore_attempt(rs, why)) < 0) {
		(void)db_agent_set_restoring(f->db, agent, NULL);
		if (!*why)
			*why = xstrdup(strerror(-r));
		restore_free(rs);
		return r;
	}
	return 0;
}

/* --- recovery at start ----------------------------------------------------------------- */

struct recovery {
	struct fleetd *f;
	char *agent;
	char *snap;
};

static void recovery_done(void *userdata, int r, const char *why)
{
	struct recovery *rc = userdata;
	_cleanup_free_ char *target = xasprintf("%s/%s", rc->agent, rc->snap);

	if (r < 0) {
		log_error("agent '%s': could not finish the interrupted restore of '%s': %s; state bad", rc->agent,
			  rc->snap, why);
		(void)lifecycle_set_state(rc->f, rc->agent, AGENT_BAD, NULL);
	} else {
		log_notice("agent '%s': finished the restore of '%s' that fleetd's stop interrupted", rc->agent,
			   rc->snap);
	}
	(void)db_audit_add(rc->f->db, 0, "snapshot.restore.recover", target, r < 0 ? "failed" : "ok", why);
	free(rc->agent);
	free(rc->snap);
	free(rc);
}

/* Rows a kill -9 left 'creating' (never acknowledged: undo) or 'deleting' (asked for: finish). */
static void recover_rows(struct fleetd *f, enum snapshot_state state)
{
	struct snapshot **list = NULL;
	size_t n = 0;

	if (db_snapshot_list(f->db, NULL, state, &list, &n) < 0)
		return;
	for (size_t i = 0; i < n; i++) {
		struct snapshot *s = list[i];
		_cleanup_(agent_freep) struct agent *a = NULL;
		_cleanup_free_ char *msg = NULL;
		const struct backend_ops *ops;
		const char *why;
		int r = 0;

		if (db_agent_get(f->db, s->agent, &a) < 0)
			continue;
		if (!(ops = backend_get(f, a->backend, &why))) {
			log_error("agent '%s': snapshot '%s' is left '%s': the %s backend is unavailable (%s)", a->name,
				  s->name, snapshot_state_to_string(state), backend_kind_to_string(a->backend), why);
			continue;
		}
		if (ops->snapshot_exists && ops->snapshot_exists(f, a, s->name) == 1)
			r = ops->snapshot_delete(f, a, s->name, &msg);
		if (r < 0 && r != -ENOENT) {
			log_error("agent '%s': cannot remove the unfinished snapshot '%s': %s", a->name, s->name,
				  msg ? msg : strerror(-r));
		} else if (db_snapshot_delete(f->db, a->name, s->name) == 0) {
			if (state == SNAPSHOT_CREATING)
				log_warning("agent '%s': snapshot '%s' was interrupted (fleetd stopped); removed it, it "
					    "was never acknowledged", a->name, s->name);
			else
				log_warning("agent '%s': finished deleting snapshot '%s' (fleetd stopped in the middle)",
					    a->name, s->name);
		}
	}
	snapshot_list_free(list);
}

void snapshots_recover(struct fleetd *f)
{
	struct agent **list = NULL;
	size_t n = 0;

	recover_rows(f, SNAPSHOT_CREATING);
	recover_rows(f, SNAPSHOT_DELETING);
	if (db_agent_list(f->db, &list, &n) < 0)
		return;
	for (size_t i = 0; i < n; i++) {
		struct agent *a = list[i];
		struct recovery *rc;
		_cleanup_free_ char *why = NULL;
		int r;

		if (!a->restoring)
			continue;
		log_warning("agent '%s': a restore of '%s' was interrupted (fleetd stopped); restoring it again",
			    a->name, a->restoring);
		rc = xcalloc(1, sizeof(*rc));
		rc->f = f;
		rc->agent = xstrdup(a->name);
		rc->snap = xstrdup(a->restoring);
		if ((r = snapshots_restore(f, a->name, a->restoring, SNAPSHOTS_WAIT_ANY, recovery_done, rc, &why)) < 0) {
			(void)db_agent_set_restoring(f->db, a->name, NULL);
			recovery_done(rc, r, why);
		}
	}
	agent_list_free(list);
}
