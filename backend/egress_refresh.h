#ifndef FLEET_BACKEND_EGRESS_REFRESH_H
#define FLEET_BACKEND_EGRESS_REFRESH_H

/*
 * egress_refresh: keeps the host names in agents' egress lists current, for
 * both backends. Every period seconds the backend's collect() names, on the
 * loop, each agent whose rules are to be made again (egress_refresh_add);
 * apply() makes them on a worker thread (getaddrinfo blocks; the loop must
 * not). An address a name had between two refreshes is refused until the
 * next one. A list applied on the loop meanwhile (the backend's *gen moved)
 * may have been overwritten by this older one: the refresh runs again at once.
 */
#include <stdbool.h>

struct event_base;
struct egress_refresh;

typedef void (*egress_refresh_collect_fn)(struct egress_refresh *r, void *ctx);
/* iface: what egress_refresh_add was given (NULL for none); 0 or -errno with *why. */
typedef int (*egress_refresh_apply_fn)(const char *agent, const char *iface, const char *egress, char **why);

/* Started, the first refresh after period_s; *gen is read on the loop only. NULL without a base. */
struct egress_refresh *egress_refresh_new(struct event_base *base, int period_s, const unsigned *gen,
					  egress_refresh_collect_fn collect, egress_refresh_apply_fn apply, void *ctx);
/* Waits for a refresh that is running; NULL is fine. */
void egress_refresh_free(struct egress_refresh *r);

/* Does list name a host (so a refresh can change its rules)? Addresses alone never change. */
bool egress_refresh_wants(const char *list);
/* From collect(): refresh this agent's rules (copies are taken; a list without a name is skipped). */
void egress_refresh_add(struct egress_refresh *r, const char *agent, const char *iface, const char *egress);

#endif
