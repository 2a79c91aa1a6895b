/*
 * backends: which isolation backends this fleetd has and whether the host
 * can serve them. core/builtin.c is the only file that names concrete
 * backends; everything else asks backend_get() for a struct backend_ops.
 */
#ifndef FLEET_BACKENDS_H
#define FLEET_BACKENDS_H

#include <stdbool.h>

#include "model/agent.h"
#include "backend/backend.h"

struct fleetd;

/*
 * Run each built-in backend's init(), giving it host (fleetd's is
 * core_backend_host, core/backend_host.h): where it reports what happens on its
 * own, and what fleet keeps for it. A failure makes that backend
 * unavailable, not fleetd.
 */
void backends_init(struct fleetd *f, const struct backend_host *host);
/*
 * The same with table (BACKEND__COUNT entries, NULL where none) in place of
 * the built-in backends: backends_init() is this with core/builtin.c's
 * table; core/'s unit tests give their fake's (tests/fakes/backend_fake.h).
 */
void backends_init_table(struct fleetd *f, const struct backend_ops *const *table, const struct backend_host *host);
void backends_shutdown(struct fleetd *f);

/* Is a backend of this kind compiled into fleetd at all? */
bool backend_built_in(enum backend_kind kind);

/*
 * What a built-in backend is and can do (env_word, health_default,
 * has_network), available or not; NULL if it is not built in.
 */
const struct backend_ops *backend_caps(enum backend_kind kind);

/* The backend for kind, or NULL with *why (static or owned by f) saying why not. */
const struct backend_ops *backend_get(struct fleetd *f, enum backend_kind kind, const char **why);

/*
 * Usage of agents[0..n), all of kind, by its backend (backend_ops.usage):
 * 0, or -EOPNOTSUPP when the backend is unavailable or cannot say, -errno.
 */
int backend_usage(struct fleetd *f, enum backend_kind kind, struct agent *const *agents, size_t n,
		  struct agent_usage *ret);

/* "available", "unavailable: WHY" or "not built in" for /v1/status; caller frees. */
char *backend_status(struct fleetd *f, enum backend_kind kind);


#endif
