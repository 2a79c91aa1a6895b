/*
 * metrics_http: metrics_listen, a TCP evhttp server that answers GET
 * /metrics (api/metrics.c) and nothing else: no control API over TCP.
 * Refuses a non-loopback address unless metrics_allow_remote is yes.
 */
#ifndef FLEET_API_METRICS_HTTP_H
#define FLEET_API_METRICS_HTTP_H

struct fleetd;

/* Start serving metrics_listen unless it is none: 0, or -errno (logged: fleetd does not start). */
int metrics_http_start(struct fleetd *f);
/* The address bound ("127.0.0.1:PORT"), or NULL when off. */
const char *metrics_http_address(struct fleetd *f);
void metrics_http_stop(struct fleetd *f);

#endif
