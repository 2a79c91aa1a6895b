/*
 * virt_conn: what virt.c shares with the other files of its adapter
 * (virt_storage.c, virt_channel.c), the only files that include <libvirt/libvirt.h>.
 * Nothing outside them includes this.
 */
#ifndef FLEET_VIRT_CONN_H
#define FLEET_VIRT_CONN_H

#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>

struct virt;

/*
 * v's connection with a reference of the caller's own, which it gives back
 * with virConnectClose (or holds in a _cleanup_conn_ variable): 0, or
 * -errno with *why. On fleetd's loop it (re)connects first if needed; on a
 * worker thread it never does (-ENOTCONN while the loop reconnects). A
 * reconnect on the loop meanwhile leaves the caller's connection dead, never freed.
 */
int virt_conn(struct virt *v, virConnectPtr *ret, char **why);

static inline void virt_conn_put(virConnectPtr *c)
{
	if (*c)
		virConnectClose(*c);
}
#define _cleanup_conn_ __attribute__((cleanup(virt_conn_put)))
/* libvirt's last error as -errno (-ENOENT for no such domain, network, pool or volume), *why "what: message". */
int virt_last_error(const char *what, char **why);

#endif
