/* backends: see backends.h. */
#include "core/backends.h"

#include "user/backend.h"
#include "vm/backend.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "model/fleetd.h"
#include "common/log.h"
#include "common/util.h"

/* The backends compiled into this fleetd; NULL where that issue has not landed. */
static const struct backend_ops *const built_in[BACKEND__COUNT] = {
	[BACKEND_VM] = &backend_vm_ops,
	[BACKEND_USER] = &backend_user_ops,
};

bool backend_built_in(enum backend_kind kind)
{
	return (unsigned)kind < BACKEND__COUNT && built_in[kind];
}

void backends_init(struct fleetd *f, const struct backend_host *host)
{
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
	if ((unsigned)kind >= BACKEND__COUNT || !built_in[kind]) {
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
