/*
 * metrics: GET /metrics in Prometheus's text exposition format (0.0.4), on
 * the control socket and on metrics_listen (docs/metrics.md lists every
 * metric). The registry is core/metrics.c's; what is cheaper to derive at
 * scrape time (agents by state, queue depths, per-agent usage from the
 * backends, the listener's counters, fleetd's own process) is read here.
 */
#ifndef FLEET_API_METRICS_H
#define FLEET_API_METRICS_H

struct fleetd;
struct evbuffer;
struct api_call;

#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* Append the whole exposition to out. */
void metrics_write(struct fleetd *f, struct evbuffer *out);

/* GET /metrics on the control socket. */
void api_metrics_get(struct api_call *c);

#endif
