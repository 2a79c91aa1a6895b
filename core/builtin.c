/*
 * builtin: the backends compiled into fleetd, the one place that names
 * them. Apart from core/backends.c so that core/'s unit tests, which give
 * backends_init_table() a fake backend's table, link without vm/ and user/.
 */
#include "core/backends.h"

#include "user/backend.h"
#include "vm/backend.h"

/* NULL where a backend is not built in. */
static const struct backend_ops *const built_in[BACKEND__COUNT] = {
	[BACKEND_VM] = &backend_vm_ops,
	[BACKEND_USER] = &backend_user_ops,
};

void backends_init(struct fleetd *f, const struct backend_host *host)
{
	backends_init_table(f, built_in, host);
}
