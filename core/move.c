/* move (core): see move.h. */
#include "core/move.h"

#include <errno.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "core/backends.h"
#include "core/hosts.h"
#include "core/lifecycle.h"
#include "model/fleetd.h"
#include "model/move.h"
#include "store/db.h"

struct move_op {
	struct fleetd *f;
	const struct backend_ops *ops;
	struct agent *agent;		/* as it was: agent->host is where it comes from */
	char *to;
	move_done_fn done;
	void *userdata;
};

static void op_finish(struct move_op *op, int r, const char *why)
{
	op->done(op->userdata, r, why);
	agent_free(op->agent);
	free(op->to);
	free(op);
}

static void copied(void *userdata, int r, const char *why)
{
	struct move_op *op = userdata;
	_cleanup_free_ char *from = xstrdup(op->agent->host), *fwhy = NULL;

	if (r < 0) {
		op_finish(op, r, why);
		return;
	}
	/* The commit: from now on fleet knows the agent on its new host. */
	if ((r = db_agent_set_host(op->f->db, op->agent->name, from, op->to)) < 0) {
		_cleanup_free_ char *msg = xasprintf("cannot record its new host: %s", strerror(-r));

		/* Still on from: the copy there is the stale one. */
		if (op->ops->move_finish(op->f, op->agent, op->to, &fwhy) < 0)
			log_warning("agent '%s': its copy on %s stays until fleetd's next start: %s", op->agent->name,
				    op->to, fwhy ? fwhy : "?");
		op_finish(op, r, msg);
		return;
	}
	free(op->agent->host);
	op->agent->host = xstrdup(op->to);
	/* A failure here leaves the old copy for the backend's next start; the agent is on its new host. */
	(void)op->ops->move_finish(op->f, op->agent, from, &fwhy);
	log_info("agent '%s': moved from host %s to %s", op->agent->name, from, op->to);
	op_finish(op, 0, NULL);
}

static void copy(struct move_op *op)
{
	_cleanup_free_ char *why = NULL;
	int r = op->ops->move(op->f, op->agent, op->to, copied, op, &why);

	if (r < 0)
		op_finish(op, r, why);
}

static void stopped(void *userdata, int r, const char *why)
{
	struct move_op *op = userdata;

	if (r < 0) {
		_cleanup_free_ char *msg = xasprintf("cannot stop it: %s", why ? why : strerror(-r));
		op_finish(op, r, msg);
		return;
	}
	op->agent->state = AGENT_STOPPED;
	copy(op);
}

int move_agent(struct fleetd *f, const char *agent, const char *host, bool stop, move_done_fn done, void *userdata,
	       char **why)
{
	const struct backend_ops *ops;
	struct agent *a = NULL;
	struct host *hosts = NULL;
	struct move_op *op;
	const char *reason = NULL;
	size_t n = 0;
	int r;

	if ((r = db_agent_get(f->db, agent, &a)) < 0) {
		*why = r == -ENOENT ? xasprintf("no agent '%s'", agent) : xasprintf("cannot read agent '%s': %s", agent,
										      strerror(-r));
		return r;
	}
	if (a->backend != BACKEND_VM || !a->host) {
		*why = xasprintf("%s agents run on fleetd's own host; only vm agents move", backend_kind_to_string(a->backend));
		r = -EINVAL;
		goto fail;
	}
	if (!(ops = backend_get(f, BACKEND_VM, &reason)) || !ops->move || !ops->move_finish) {
		*why = xasprintf("the vm backend is unavailable: %s", reason ? reason : "it cannot move agents");
		r = -EOPNOTSUPP;
		goto fail;
	}
	if (a->state == AGENT_DEFINED || a->state == AGENT_PROVISIONING || a->state == AGENT_REMOVING ||
	    a->state == AGENT_MISSING) {
		*why = xasprintf("it is %s", agent_state_to_string(a->state));
		r = -EBUSY;
		goto fail;
	}
	if ((r = hosts_list(f, true, &hosts, &n)) < 0) {
		*why = xasprintf("cannot read the hosts: %s", strerror(-r));
		goto fail;
	}
	r = move_check(hosts, n, a->host, host, a->memory_mib, why);
	host_list_free(hosts, n);
	if (r < 0)
		goto fail;
	lifecycle_refresh(f, ops, a);
	if ((a->state == AGENT_RUNNING || a->state == AGENT_BAD) && !stop) {
		*why = xstrdup("it is running; stop it first, or move it with --stop");
		r = -EBUSY;
		goto fail;
	}
	/* An automatic restart waiting now would only meet a busy agent. */
	(void)lifecycle_cancel_restart(f, a->name);
	op = xcalloc(1, sizeof(*op));
	*op = (struct move_op){ f, ops, a, xstrdup(host), done, userdata };
	log_info("agent '%s': move from host %s to %s requested%s", a->name, a->host, host,
		 a->state == AGENT_RUNNING || a->state == AGENT_BAD ? " (stopping it first)" : "");
	if (a->state == AGENT_RUNNING || a->state == AGENT_BAD) {
		if ((r = lifecycle_stop(f, ops, a, 30, stopped, op, why)) < 0) {
			free(op->to);
			free(op);
			goto fail;
		}
		return 0;
	}
	/* Refused at once: said here, not through done(). */
	if ((r = ops->move(f, a, host, copied, op, why)) < 0) {
		free(op->to);
		free(op);
		goto fail;
	}
	return 0;
fail:
	agent_free(a);
	return r;
}
