/* metrics: see metrics.h. */
#include "api/metrics.h"

#include <dirent.h>
#include <event2/buffer.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/server.h"
#include "common/util.h"
#include "core/backends.h"
#include "core/listener.h"
#include "core/metrics.h"
#include "model/fleetd.h"
#include "store/db.h"

/* A label value, escaped as the format says: backslash, double quote and newline. */
static void put_value(struct evbuffer *out, const char *v)
{
	for (; *v; v++) {
		if (*v == '\\' || *v == '"')
			evbuffer_add_printf(out, "\\%c", *v);
		else if (*v == '\n')
			evbuffer_add(out, "\\n", 2);
		else
			evbuffer_add(out, v, 1);
	}
}

static void put_labels(struct evbuffer *out, const char *const *names, char *const *values, size_t n,
		       const char *le)
{
	if (n == 0 && !le)
		return;
	evbuffer_add(out, "{", 1);
	for (size_t i = 0; i < n; i++) {
		evbuffer_add_printf(out, "%s%s=\"", i ? "," : "", names[i]);
		put_value(out, values[i]);
		evbuffer_add(out, "\"", 1);
	}
	if (le)
		evbuffer_add_printf(out, "%sle=\"%s\"", n ? "," : "", le);
	evbuffer_add(out, "}", 1);
}

static void put_head(struct evbuffer *out, const char *name, const char *type, const char *help)
{
	evbuffer_add_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A sample with up to 3 labels given as name/value pairs. */
static void put_sample(struct evbuffer *out, const char *name, const char *const *names, const char *const *values,
		       size_t n, double v)
{
	evbuffer_add_printf(out, "%s", name);
	put_labels(out, names, (char *const *)values, n, NULL);
	evbuffer_add_printf(out, " %.17g\n", v);
}

static void write_registry(struct fleetd *f, struct evbuffer *out)
{
	for (int id = 0; id < M__COUNT; id++) {
		const struct metric_def *d = &metric_defs[id];
		size_t n;
		const struct metric_series *s = metrics_series(f, (enum metric_id)id, &n);
		char name[160];

		if (d->type == METRIC_COUNTER) {
			snprintf(name, sizeof(name), "%s_total", d->name);
			put_head(out, name, "counter", d->help);
			for (size_t k = 0; k < n; k++)
				put_sample(out, name, d->labels, (const char *const *)s[k].labels, d->n_labels, s[k].value);
			continue;
		}
		put_head(out, d->name, "histogram", d->help);
		for (size_t k = 0; k < n; k++) {
			for (size_t b = 0; b <= d->n_buckets; b++) {
				char le[32];

				if (b < d->n_buckets)
					snprintf(le, sizeof(le), "%g", d->buckets[b]);
				else
					snprintf(le, sizeof(le), "+Inf");
				evbuffer_add_printf(out, "%s_bucket", d->name);
				put_labels(out, d->labels, s[k].labels, d->n_labels, le);
				evbuffer_add_printf(out, " %llu\n", (unsigned long long)(b < d->n_buckets ? s[k].buckets[b]
													 : s[k].count));
			}
			evbuffer_add_printf(out, "%s_sum", d->name);
			put_labels(out, d->labels, s[k].labels, d->n_labels, NULL);
			evbuffer_add_printf(out, " %.17g\n", s[k].value);
			evbuffer_add_printf(out, "%s_count", d->name);
			put_labels(out, d->labels, s[k].labels, d->n_labels, NULL);
			evbuffer_add_printf(out, " %llu\n", (unsigned long long)s[k].count);
		}
	}
	put_head(out, "fleet_metrics_series_dropped_total", "counter",
		 "Label combinations not counted because their family was full.");
	evbuffer_add_printf(out, "fleet_metrics_series_dropped_total %llu\n", (unsigned long long)metrics_dropped(f));
}

/* Agents by backend and state (every pair, zeros too), and what each running one uses. */
static void write_agents(struct fleetd *f, struct evbuffer *out)
{
	static const char *const bs[] = { "backend", "state" }, *const ab[] = { "agent", "backend" };
	struct agent **list = NULL;
	size_t n = 0;
	long count[BACKEND__COUNT][AGENT_STATE__COUNT] = { { 0 } };

	if (db_agent_list(f->db, &list, &n) < 0) {
		list = NULL;
		n = 0;
	}
	for (size_t i = 0; i < n; i++)
		if ((unsigned)list[i]->backend < BACKEND__COUNT && (unsigned)list[i]->state < AGENT_STATE__COUNT)
			count[list[i]->backend][list[i]->state]++;
	put_head(out, "fleet_agents", "gauge", "Agents by backend and state.");
	for (int b = 0; b < BACKEND__COUNT; b++)
		for (int s = 0; s < AGENT_STATE__COUNT; s++)
			put_sample(out, "fleet_agents", bs,
				   (const char *[]){ backend_kind_to_string((enum backend_kind)b),
						     agent_state_to_string((enum agent_state)s) }, 2, (double)count[b][s]);

	/* Each backend answers for its own agents at once (a VM's: one bulk libvirt call). */
	struct agent_usage *use = xcalloc(n ? n : 1, sizeof(*use));
	for (int b = 0; b < BACKEND__COUNT; b++) {
		struct agent **mine = xcalloc(n ? n : 1, sizeof(*mine));
		size_t *at = xcalloc(n ? n : 1, sizeof(*at)), m = 0;
		struct agent_usage *got = xcalloc(n ? n : 1, sizeof(*got));

		for (size_t i = 0; i < n; i++)
			if (list[i]->backend == (enum backend_kind)b) {
				at[m] = i;
				mine[m++] = list[i];
			}
		if (m > 0 && backend_usage(f, (enum backend_kind)b, mine, m, got) == 0)
			for (size_t k = 0; k < m; k++)
				use[at[k]] = got[k];
		free(mine);
		free(at);
		free(got);
	}
	put_head(out, "fleet_agent_memory_bytes", "gauge",
		 "Host memory a running agent's environment holds: a VM's QEMU resident memory (libvirt balloon.rss), "
		 "a user agent's cgroup memory charge.");
	for (size_t i = 0; i < n; i++)
		if (use[i].known && use[i].memory_bytes >= 0)
			put_sample(out, "fleet_agent_memory_bytes", ab,
				   (const char *[]){ list[i]->name, backend_kind_to_string(list[i]->backend) }, 2,
				   (double)use[i].memory_bytes);
	put_head(out, "fleet_agent_cpu_seconds_total", "counter",
		 "CPU time a running agent's environment has used: a VM's (libvirt cpu.time), a user agent's cgroup's.");
	for (size_t i = 0; i < n; i++)
		if (use[i].known && use[i].cpu_seconds >= 0)
			put_sample(out, "fleet_agent_cpu_seconds_total", ab,
				   (const char *[]){ list[i]->name, backend_kind_to_string(list[i]->backend) }, 2,
				   use[i].cpu_seconds);
	free(use);
	agent_list_free(list);
}

static void write_queues(struct fleetd *f, struct evbuffer *out)
{
	static const char *const a[] = { "agent" };
	char **names = NULL;
	long *counts = NULL;
	size_t n = 0;

	put_head(out, "fleet_run_queue_depth", "gauge", "Runs waiting in each agent's queue.");
	if (db_run_queue_depths(f->db, &names, &counts, &n) < 0)
		return;
	for (size_t i = 0; i < n; i++) {
		put_sample(out, "fleet_run_queue_depth", a, (const char *[]){ names[i] }, 1, (double)counts[i]);
		free(names[i]);
	}
	free(names);
	free(counts);
}

static void write_webhooks(struct fleetd *f, struct evbuffer *out)
{
	static const char *const statuses[6] = { "400", "401", "404", "405", "413", "other" };
	static const char *const st[] = { "status" };
	struct listener_status ls;

	listener_status(f, &ls);
	put_head(out, "fleet_webhook_refusals_total", "counter",
		 "Webhook requests the listener refused, by status (401: a bad signature; other: 408, 429, 503, ...).");
	for (int i = 0; i < 6; i++)
		put_sample(out, "fleet_webhook_refusals_total", st, (const char *[]){ statuses[i] }, 1,
			   (double)ls.refused_by[i]);
	put_head(out, "fleet_webhook_signature_failures_total", "counter",
		 "Webhook requests refused because their signature or token did not verify, by the route's source.");
	for (int i = 0; i < HOOK_SOURCE__COUNT; i++)
		put_sample(out, "fleet_webhook_signature_failures_total", (const char *[]){ "source" },
			   (const char *[]){ hook_source_to_string((enum hook_source)i) }, 1, (double)ls.sig_failed[i]);
	put_head(out, "fleet_webhook_connections", "gauge", "Connections open to the webhook listener.");
	evbuffer_add_printf(out, "fleet_webhook_connections %lld\n", (long long)ls.connections);
	put_head(out, "fleet_webhook_connections_dropped_total", "counter",
		 "Webhook connections the listener closed by a limit (per source, total, deadline).");
	evbuffer_add_printf(out, "fleet_webhook_connections_dropped_total %lld\n", (long long)ls.dropped);
	put_head(out, "fleet_webhook_listener_restarts_total", "counter", "Times fleetd restarted the webhook listener.");
	evbuffer_add_printf(out, "fleet_webhook_listener_restarts_total %ld\n", ls.restarts);
}

/* fleetd's own process: resident memory, descriptors, the event loop's lag. */
static void write_process(struct fleetd *f, struct evbuffer *out)
{
	long pages = 0, rss = 0, fds = 0;
	double lag, lag_max;
	FILE *statm = fopen("/proc/self/statm", "re");
	DIR *d = opendir("/proc/self/fd");

	if (statm) {
		if (fscanf(statm, "%ld %ld", &pages, &rss) != 2)
			rss = 0;
		fclose(statm);
	}
	if (d) {
		struct dirent *e;

		while ((e = readdir(d)))
			fds += e->d_name[0] != '.';
		closedir(d);
		fds--;	/* the directory's own descriptor */
	}
	metrics_loop_lag(f, &lag, &lag_max);
	put_head(out, "fleet_process_resident_memory_bytes", "gauge", "fleetd's resident memory.");
	evbuffer_add_printf(out, "fleet_process_resident_memory_bytes %lld\n", (long long)rss * sysconf(_SC_PAGESIZE));
	put_head(out, "fleet_process_open_fds", "gauge", "File descriptors fleetd has open.");
	evbuffer_add_printf(out, "fleet_process_open_fds %ld\n", fds);
	put_head(out, "fleet_process_start_time_seconds", "gauge", "When fleetd started, in Unix seconds.");
	evbuffer_add_printf(out, "fleet_process_start_time_seconds %lld\n", (long long)f->started_at);
	put_head(out, "fleet_event_loop_lag_seconds", "gauge",
		 "How late fleetd's event loop ran its last once-a-second timer.");
	evbuffer_add_printf(out, "fleet_event_loop_lag_seconds %.6f\n", lag);
	put_head(out, "fleet_event_loop_lag_max_seconds", "gauge", "The most the event loop was ever late, since start.");
	evbuffer_add_printf(out, "fleet_event_loop_lag_max_seconds %.6f\n", lag_max);
	put_head(out, "fleet_build_info", "gauge", "fleetd's version, always 1.");
	evbuffer_add_printf(out, "fleet_build_info{version=\"%s\"} 1\n", PACKAGE_VERSION);
}

void metrics_write(struct fleetd *f, struct evbuffer *out)
{
	write_agents(f, out);
	write_queues(f, out);
	write_registry(f, out);
	write_webhooks(f, out);
	write_process(f, out);
}

void api_metrics_get(struct api_call *c)
{
	struct evbuffer *out = evbuffer_new();
	size_t len;

	if (!out)
		abort();	/* out of memory */
	metrics_write(c->fleetd, out);
	len = evbuffer_get_length(out);
	api_reply_raw(c, 200, METRICS_CONTENT_TYPE, evbuffer_pullup(out, -1), len);
	evbuffer_free(out);
}
