/*
 * backends: see backends.h. The registry over a table of backends; which
 * backends fleetd has built in is core/builtin.c's, so that core/'s unit
 * tests link without them and give their fake backend's table instead.
 */
#include "core/backends.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "model/fleetd.h"
#include "common/log.h"
#include "common/util.h"

/* The table backends_init_table() was given: BACKEND__COUNT entries, NULL where none is built in. */
static const struct backend_ops *const *built_in;

bool backend_built_in(enum backend_kind kind)
{
	return built_in && (unsigned)kind < BACKEND__COUNT && built_in[kind];
}

void backends_init_table(struct fleetd *f, const struct backend_ops *const *table, const struct backend_host *host)
{
	built_in = table;
	for (int k = 0; k < BACKEND__COUNT; k++) {
		char *why = NULL;
		int r;

		if (!built_in[k])
			continue;
		r = built_in[k]->init(f, host, &why);
		if (r < 0) {
			f->backend_why[k] = why ? why : xstrdup(strerror(-r));
			log_warning("%s backend unavailable: %s", built_in[k]->name, f->backend_why[k]);
			continue;
		}
		free(why);
		f->backends[k] = built_in[k];
		log_info("%s backend ready", built_in[k]->name);
	}
}

void backends_shutdown(struct fleetd *f)
{
	for (int k = 0; k < BACKEND__COUNT; k++) {
		if (f->backends[k] && f->backends[k]->shutdown)
			f->backends[k]->shutdown(f);
		f->backends[k] = NULL;
		free(f->backend_why[k]);
		f->backend_why[k] = NULL;
	}
}

const struct backend_ops *backend_caps(enum backend_kind kind)
{
	return backend_built_in(kind) ? built_in[kind] : NULL;
}

const struct backend_ops *backend_get(struct fleetd *f, enum backend_kind kind, const char **why)
{
	if (!backend_built_in(kind)) {
		*why = "this fleetd has no such backend built in";
		return NULL;
	}
	if (!f->backends[kind]) {
		*why = f->backend_why[kind] ? f->backend_why[kind] : "backend unavailable";
		return NULL;
	}
	return f->backends[kind];
}

char *backend_status(struct fleetd *f, enum backend_kind kind)
{
	if (!backend_built_in(kind))
		return xstrdup("not built in");
	if (!f->backends[kind])
		return xasprintf("unavailable: %s", f->backend_why[kind] ? f->backend_why[kind] : "unknown");
	return xstrdup("available");
}

int backend_usage(struct fleetd *f, enum backend_kind kind, struct agent *const *agents, size_t n,
		  struct agent_usage *ret)
{
	const char *why;
	const struct backend_ops *ops = backend_get(f, kind, &why);

	if (!ops || !ops->usage)
		return -EOPNOTSUPP;
	return ops->usage(f, agents, n, ret);
}
