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

/* v's connection, (re)connected first if needed: 0, or -errno with *why. Owned by v. */
int virt_conn(struct virt *v, virConnectPtr *ret, char **why);
/* libvirt's last error as -errno (-ENOENT for no such domain, network, pool or volume), *why "what: message". */
int virt_last_error(const char *what, char **why);

#endif
