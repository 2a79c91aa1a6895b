/*
 * fleetd: the daemon's shared context. One instance lives in main(); every
 * module reaches the database, the config and the event loop through it.
 */
#ifndef FLEET_FLEETD_H
#define FLEET_FLEETD_H

#include <stdbool.h>
#include <time.h>

#include "model/agent.h"
#include "model/config.h"

struct event_base;
struct db;
struct api;
struct backend_ops;
struct health;
struct activity;
struct sched;
struct runs;
struct lifecycle;
struct hooks;
struct listener;
struct secret_hold;
struct secrets;
struct autostart;
struct watch_bus;
struct metrics;
struct metrics_http;

struct fleetd {
	struct event_base *base;
	struct config cfg;		/* effective settings */
	struct config cmdline;		/* what the command line set; wins over the file on reload */
	const char *config_path;
	bool config_must_exist;		/* --config given: the file must be there */
	struct db *db;
	struct api *api;
	int lock_fd;
	time_t started_at;
	/* Backends that passed init(); NULL where not built in or unavailable (see backends.c). */
	const struct backend_ops *backends[BACKEND__COUNT];
	char *backend_why[BACKEND__COUNT];	/* why a built-in backend is unavailable */
	void *backend_state[BACKEND__COUNT];	/* each backend's own runtime state */
	struct health *health;			/* health.c */
	struct activity *activity;		/* activity.c: what fleet did in each environment */
	struct sched *sched;			/* schedules.c */
	struct runs *runs;			/* runs.c */
	struct lifecycle *lifecycle;		/* lifecycle.c */
	struct hooks *hooks;			/* hooks.c: the daily pruning of events */
	struct listener *listener;		/* listener.c: the webhook listener process, NULL when off */
	char hooks_bound[80];			/* listener.c: the address it bound ("ADDR:PORT"), "" when none */
	struct secret_hold *secret_holds;	/* secret_hold.c: agents with secrets in memory now */
	struct secrets *secrets;		/* secrets.c: the host key of agents' secrets */
	struct autostart *autostart;		/* autostart.c: starts after a host reboot, while going */
	struct watch_bus *watch;		/* watch.c: the event bus of GET /v1/watch */
	struct metrics *metrics;		/* metrics.c: counters and histograms since start, NULL: none */
	struct metrics_http *metrics_http;	/* api/metrics_http.c: metrics_listen, NULL when off */
};

#endif
