/*
 * metrics: fleetd's registry of counters and histograms since it started
 * (docs/metrics.md). The places doing the work count with one call; the
 * exposition writer (api/metrics.c) reads the registry at scrape time and
 * adds what is cheaper to derive then (agents by state, queue depths, the
 * process, the listener's counters, per-agent usage). Every family has a
 * fixed list of label names; their values are agent names, route names,
 * sources and enum words, never ids, and a family holds at most
 * METRICS_SERIES_MAX series (more are dropped and counted), so a scrape
 * stays bounded. Owned by fleetd (f->metrics); with none (unit tests of
 * core/) every call is a no-op.
 */
#ifndef FLEET_CORE_METRICS_H
#define FLEET_CORE_METRICS_H

#include <stddef.h>
#include <stdint.h>

struct fleetd;

#define METRICS_LABELS_MAX 3
#define METRICS_SERIES_MAX 4096
#define METRICS_BUCKETS_MAX 16

enum metric_id {
	M_RUNS,			/* counter {agent, outcome} */
	M_RUN_DURATION,		/* histogram {agent, outcome}: from start to end, seconds */
	M_DELIVERIES,		/* counter {route, source, answer}: deliveries fleetd answered */
	M_SNAPSHOT_DURATION,	/* histogram {backend, outcome} */
	M_RESTORE_DURATION,	/* histogram {backend, outcome} */
	M_HEALTH_DURATION,	/* histogram {backend, outcome} */
	M_ROLLBACKS,		/* counter {outcome}: automatic rollbacks ended */
	M__COUNT,
};

enum metric_type { METRIC_COUNTER, METRIC_HISTOGRAM };

struct metric_def {
	const char *name;	/* without _total / _bucket: the exposition writer adds them */
	const char *help;
	enum metric_type type;
	size_t n_labels;
	const char *labels[METRICS_LABELS_MAX];
	size_t n_buckets;
	double buckets[METRICS_BUCKETS_MAX];	/* upper bounds, ascending; +Inf is implied */
};

extern const struct metric_def metric_defs[M__COUNT];

struct metric_series {
	char *labels[METRICS_LABELS_MAX];	/* values, owned */
	double value;				/* a counter's count; a histogram's sum */
	uint64_t count;				/* a histogram's observations */
	uint64_t buckets[METRICS_BUCKETS_MAX];	/* cumulative, as exposed */
};

/* Make f's registry and its event-loop lag timer (after f->base exists); 0 or -ENOMEM. */
int metrics_init(struct fleetd *f);
void metrics_free(struct fleetd *f);

/*
 * Count one (a counter) or observe value (a histogram) in the series of id
 * with these label values (metric_defs[id].n_labels of them; NULL reads
 * "unknown"). Values longer than 128 bytes are cut.
 */
void metrics_inc(struct fleetd *f, enum metric_id id, const char *const *labels);
void metrics_observe(struct fleetd *f, enum metric_id id, const char *const *labels, double value);

/* The series of id now (pointer valid until the next count), or NULL and 0. */
const struct metric_series *metrics_series(struct fleetd *f, enum metric_id id, size_t *n);
/* Series not made because a family was full, since start. */
uint64_t metrics_dropped(struct fleetd *f);
/* How late the loop ran the last lag timer, and the most it ever was: seconds. */
void metrics_loop_lag(struct fleetd *f, double *last, double *max);

#endif
