/*
 * watch: fleetd's event bus for GET /v1/watch. One publisher call at each
 * place something happens to an agent (its state, runs, snapshots,
 * restores, rollbacks, health results, deliveries); each subscriber gets
 * every event as one JSON line ("\n"-terminated), synchronously, on
 * fleetd's loop. Events are not stored: a watcher sees what happens while
 * it watches. What a subscriber does with a line it cannot pass on at once
 * (bounding it) is its own business (api/watch.c).
 */
#ifndef FLEET_CORE_WATCH_H
#define FLEET_CORE_WATCH_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

struct fleetd;
struct watcher;

/*
 * Publish an event of type ("agent.state", "run.queued", ...) about agent
 * (NULL: none) with fields (stolen, may be NULL) merged in. The line is
 * {"seq": N, "time": UNIX_MS, "type": TYPE, "agent": AGENT, ...fields}.
 * Cheap when no one watches; never fails for the publisher.
 */
void watch_publish(struct fleetd *f, const char *type, const char *agent, json_t *fields);

/* Whether anyone watches now: a publisher on a per-delivery or per-run path builds no fields for nobody. */
bool watch_active(const struct fleetd *f);

/*
 * Get every event from now on (only agent's when agent is not NULL). A
 * subscriber's on_line may call watch_unsubscribe() on itself. Returns the
 * subscription (owned by the bus until watch_unsubscribe()).
 */
typedef void (*watch_line_fn)(void *userdata, const char *line, size_t len);
struct watcher *watch_subscribe(struct fleetd *f, const char *agent, watch_line_fn on_line, void *userdata);
void watch_unsubscribe(struct fleetd *f, struct watcher *w);

/* Watchers now (for GET /v1/status). */
size_t watch_count(const struct fleetd *f);
/* At exit, after the API is gone: free what is left. */
void watch_free(struct fleetd *f);

#endif
