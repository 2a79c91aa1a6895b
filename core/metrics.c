/* metrics: see metrics.h. Linear lookups: a family holds a few hundred series at most in practice. */
#include "core/metrics.h"

#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "model/fleetd.h"

#define LABEL_VALUE_MAX 128
#define LAG_INTERVAL_USEC 1000000LL

/* Durations: from a cheap exec (10 ms) to a long run (an hour). */
#define DURATION_BUCKETS 12, { 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300 }
#define RUN_BUCKETS 12, { 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, 3600 }

const struct metric_def metric_defs[M__COUNT] = {
	[M_RUNS] = { "fleet_runs", "Runs that ended, by agent and outcome (succeeded, failed, timed-out, cancelled, "
		     "interrupted).", METRIC_COUNTER, 2, { "agent", "outcome" } },
	[M_RUN_DURATION] = { "fleet_run_duration_seconds", "How long runs took from start to end, by agent and outcome.",
			     METRIC_HISTOGRAM, 2, { "agent", "outcome" }, RUN_BUCKETS },
	[M_DELIVERIES] = { "fleet_webhook_deliveries", "Verified webhook deliveries fleetd answered, by route, source "
			   "and answer (the HTTP status).", METRIC_COUNTER, 3, { "route", "source", "answer" } },
	[M_SNAPSHOT_DURATION] = { "fleet_snapshot_duration_seconds", "How long taking a snapshot took, by backend and "
				  "outcome (ok, failed).", METRIC_HISTOGRAM, 2, { "backend", "outcome" }, DURATION_BUCKETS },
	[M_RESTORE_DURATION] = { "fleet_restore_duration_seconds", "How long restoring a snapshot took, by backend and "
				 "outcome (ok, failed).", METRIC_HISTOGRAM, 2, { "backend", "outcome" }, DURATION_BUCKETS },
	[M_HEALTH_DURATION] = { "fleet_health_check_duration_seconds", "How long health checks took, by backend and "
				"outcome (healthy, unhealthy).", METRIC_HISTOGRAM, 2, { "backend", "outcome" },
				DURATION_BUCKETS },
	[M_ROLLBACKS] = { "fleet_rollbacks", "Automatic rollbacks to the newest good snapshot that ended, by outcome "
			  "(ok, failed).", METRIC_COUNTER, 1, { "outcome" } },
};

struct family {
	struct metric_series *series;
	size_t n, alloc;
};

struct metrics {
	struct family fam[M__COUNT];
	uint64_t dropped;
	struct event *lag_timer;
	long long lag_due;		/* now_usec() the timer should fire */
	double lag_last, lag_max;
};

static void on_lag_timer(evutil_socket_t fd, short what, void *arg)
{
	struct metrics *m = arg;
	long long now = now_usec();
	struct timeval tv = { LAG_INTERVAL_USEC / 1000000, 0 };

	m->lag_last = now > m->lag_due ? (now - m->lag_due) / 1e6 : 0;
	if (m->lag_last > m->lag_max)
		m->lag_max = m->lag_last;
	m->lag_due = now + LAG_INTERVAL_USEC;
	event_add(m->lag_timer, &tv);
}

int metrics_init(struct fleetd *f)
{
	struct metrics *m = calloc(1, sizeof(*m));
	struct timeval tv = { LAG_INTERVAL_USEC / 1000000, 0 };

	if (!m)
		return -ENOMEM;
	m->lag_timer = evtimer_new(f->base, on_lag_timer, m);
	if (!m->lag_timer) {
		free(m);
		return -ENOMEM;
	}
	m->lag_due = now_usec() + LAG_INTERVAL_USEC;
	event_add(m->lag_timer, &tv);
	f->metrics = m;
	return 0;
}

void metrics_free(struct fleetd *f)
{
	struct metrics *m = f->metrics;

	if (!m)
		return;
	for (int i = 0; i < M__COUNT; i++) {
		for (size_t k = 0; k < m->fam[i].n; k++)
			for (size_t l = 0; l < METRICS_LABELS_MAX; l++)
				free(m->fam[i].series[k].labels[l]);
		free(m->fam[i].series);
	}
	if (m->lag_timer)
		event_free(m->lag_timer);
	free(m);
	f->metrics = NULL;
}

/* The series of id with these labels, made if new; NULL when the family is full. */
static struct metric_series *series_get(struct metrics *m, enum metric_id id, const char *const *labels)
{
	const struct metric_def *d = &metric_defs[id];
	struct family *fam = &m->fam[id];
	char v[METRICS_LABELS_MAX][LABEL_VALUE_MAX + 1];
	struct metric_series *s;

	for (size_t l = 0; l < d->n_labels; l++)
		snprintf(v[l], sizeof(v[l]), "%s", labels && labels[l] ? labels[l] : "unknown");
	for (size_t k = 0; k < fam->n; k++) {
		size_t l = 0;

		while (l < d->n_labels && strcmp(fam->series[k].labels[l], v[l]) == 0)
			l++;
		if (l == d->n_labels)
			return &fam->series[k];
	}
	if (fam->n >= METRICS_SERIES_MAX) {
		if (m->dropped++ == 0)
			log_warning("metrics: %s has %d series; new label values are not counted", d->name,
				    METRICS_SERIES_MAX);
		return NULL;
	}
	if (fam->n == fam->alloc) {
		size_t alloc = fam->alloc ? fam->alloc * 2 : 16;
		struct metric_series *grown = reallocarray(fam->series, alloc, sizeof(*grown));

		if (!grown)
			return NULL;
		fam->series = grown;
		fam->alloc = alloc;
	}
	s = &fam->series[fam->n++];
	memset(s, 0, sizeof(*s));
	for (size_t l = 0; l < d->n_labels; l++)
		s->labels[l] = xstrdup(v[l]);
	return s;
}

void metrics_inc(struct fleetd *f, enum metric_id id, const char *const *labels)
{
	struct metric_series *s;

	if (!f->metrics || metric_defs[id].type != METRIC_COUNTER || !(s = series_get(f->metrics, id, labels)))
		return;
	s->value += 1;
}

void metrics_observe(struct fleetd *f, enum metric_id id, const char *const *labels, double value)
{
	const struct metric_def *d = &metric_defs[id];
	struct metric_series *s;

	if (!f->metrics || d->type != METRIC_HISTOGRAM || !(s = series_get(f->metrics, id, labels)))
		return;
	if (value < 0)
		value = 0;
	s->value += value;
	s->count++;
	for (size_t b = 0; b < d->n_buckets; b++)
		if (value <= d->buckets[b])
			s->buckets[b]++;
}

const struct metric_series *metrics_series(struct fleetd *f, enum metric_id id, size_t *n)
{
	*n = f->metrics ? f->metrics->fam[id].n : 0;
	return f->metrics ? f->metrics->fam[id].series : NULL;
}

uint64_t metrics_dropped(struct fleetd *f)
{
	return f->metrics ? f->metrics->dropped : 0;
}

void metrics_loop_lag(struct fleetd *f, double *last, double *max)
{
	*last = f->metrics ? f->metrics->lag_last : 0;
	*max = f->metrics ? f->metrics->lag_max : 0;
}
