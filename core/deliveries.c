/* deliveries: see deliveries.h. */
#include "core/deliveries.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "core/runs.h"
#include "core/watch.h"
#include "hooks/route.h"
#include "model/fleetd.h"
#include "store/db.h"

#define JSON_TYPE "application/json"

static void answer_json(struct hook_answer *a, int status, json_t *body)
{
	a->status = status;
	a->body = json_dumps(body, JSON_COMPACT);
	a->content_type = xstrdup(JSON_TYPE);
	json_decref(body);
	if (!a->body)
		abort();	/* out of memory, as xmalloc would */
}

static void answer_error(struct hook_answer *a, int status, const char *code, const char *msg)
{
	answer_json(a, status, json_pack("{s:s, s:s}", "error", msg, "code", code));
}

/* The answer of a delivery recorded as res says. */
static void answer_ok(struct hook_answer *a, const struct hook_delivery *d, const struct db_hook_result *res)
{
	if (strcmp(res->outcome, "duplicate") == 0) {
		answer_json(a, 200, json_pack("{s:s, s:s}", "status", "duplicate", "delivery", d->delivery_id));
		return;
	}
	if (strcmp(res->outcome, "no-run") == 0) {
		if (d->reply_body) {
			/* Slack's url_verification: the sender expects exactly this body. */
			a->status = 200;
			a->body = xstrdup(d->reply_body);
			a->content_type = xstrdup(d->reply_type ? d->reply_type : "text/plain");
			return;
		}
		answer_json(a, 200, json_pack("{s:s, s:s, s:i}", "status", "no-run", "delivery", d->delivery_id,
					      "runs", 0));
		return;
	}
	answer_json(a, 202, json_pack("{s:s, s:s, s:i}", "status", "accepted", "delivery", d->delivery_id, "runs",
				      (int)res->n_runs));
}

/* At debug: one line per delivery cost fleetd's loop a formatted write each; the events table is the record. */
static void log_outcome(const struct hook_delivery *d, const struct db_hook_result *res)
{
	char runs[128] = "";
	size_t len = 0;

	if (!log_enabled(LOG_DEBUG))
		return;		/* the run ids' formatting is most of it */
	for (size_t i = 0; i < res->n_runs && len < sizeof(runs) - 24; i++)
		len += (size_t)snprintf(runs + len, sizeof(runs) - len, "%s%" PRId64, i ? "," : " run(s) ",
					res->run_ids[i]);
	log_debug("webhook route '%s': delivery '%s' (%s): %s%s", d->route, d->delivery_id,
		 d->event_type ? d->event_type : "no type", res->outcome, runs);
}

/* A stored delivery for the watchers, and each run it queued (as runs_enqueue_event says a run queued). */
static void publish(struct fleetd *f, const struct hook_delivery *d, const struct db_hook_result *res)
{
	watch_publish(f, "delivery", NULL,
		      json_pack("{s:s, s:s, s:s?, s:s, s:i}", "route", d->route, "delivery", d->delivery_id,
				"event_type", d->event_type, "outcome", res->outcome, "runs", (int)res->n_runs));
	for (size_t k = 0; k < res->n_runs && res->run_agents && res->run_agents[k]; k++)
		watch_publish(f, "run.queued", res->run_agents[k],
			      json_pack("{s:I, s:s}", "run", (json_int_t)res->run_ids[k], "trigger",
					res->trigger ? res->trigger : "webhook"));
}

size_t deliveries_commit(struct fleetd *f, const struct hook_delivery *d, size_t n, struct hook_answer *answers)
{
	struct db_hook_result *res = xcalloc(n ? n : 1, sizeof(*res));
	size_t ok = 0, runs = 0;
	int r = 0;

	for (size_t i = 0; i < n; i++) {
		memset(&answers[i], 0, sizeof(answers[i]));
		answers[i].seq = d[i].seq;
	}
	if (n == 0)
		goto out;
	if ((r = db_begin(f->db)) < 0)
		goto failed;
	for (size_t i = 0; i < n; i++) {
		const struct db_hook_delivery dd = {
			.route = d[i].route, .delivery_id = d[i].delivery_id, .event_type = d[i].event_type,
			.no_run = d[i].no_run, .received_at = d[i].received_at,
			/* The one text of the headers, made once from the decoded list: what the events row keeps. */
			.headers = hook_headers_json(d[i].headers, d[i].n_headers),
			.body = d[i].body, .body_len = d[i].body_len,
		};
		_cleanup_free_ char *msg = NULL;

		if (!dd.headers)
			abort();	/* out of memory, as xmalloc would */
		r = db_hook_delivery_record(f->db, &dd, hook_events_match, &res[i]);
		free((char *)dd.headers);
		if (r == -EDQUOT) {
			/* Refused, nothing of it kept: the sender retries later. */
			msg = xasprintf("agent '%s': its queue is full; try again later",
					res[i].full_agent ? res[i].full_agent : "?");
			log_warning("webhook route '%s': delivery '%s' refused: %s", d[i].route, d[i].delivery_id, msg);
			answer_error(&answers[i], 429, "queue_full", msg);
			continue;
		}
		if (r == -ENOENT) {
			/* Removed since the listener's table was sent. */
			answer_error(&answers[i], 404, "not_found", "no such route");
			continue;
		}
		if (r < 0)
			goto failed;
	}
	runs_pass_write(f);	/* the run queue's ends and starts share this commit's fsync */
	if ((r = db_commit(f->db)) < 0)
		goto failed;
	/* Committed: watchers see each delivery and its runs queued before the pass's starts (runs_pass_done). */
	for (size_t i = 0; i < n && watch_active(f); i++)
		if (!answers[i].status)
			publish(f, &d[i], &res[i]);
	runs_pass_done(f, true);
	/* Now, and only now, the answers may say so. */
	for (size_t i = 0; i < n; i++) {
		if (answers[i].status)
			continue;
		answer_ok(&answers[i], &d[i], &res[i]);
		log_outcome(&d[i], &res[i]);
		runs += res[i].n_runs;
		ok++;
	}
	if (runs)
		runs_kick(f);
	goto out;
failed:
	db_rollback(f->db);
	runs_pass_done(f, false);
	log_error("webhooks: cannot store %zu deliveries: %s; answering 503", n, strerror(-r));
	for (size_t i = 0; i < n; i++) {
		free(answers[i].body);
		free(answers[i].content_type);
		memset(&answers[i], 0, sizeof(answers[i]));
		answers[i].seq = d[i].seq;
		answer_error(&answers[i], 503, r == -ENOLCK ? "db_locked" : "unavailable",
			     r == -ENOLCK ? "the delivery could not be stored (the database is locked); try again later"
					  : "the delivery could not be stored; try again later");
	}
	ok = 0;
out:
	for (size_t i = 0; i < n; i++)
		db_hook_result_clear(&res[i]);
	free(res);
	return ok;
}
