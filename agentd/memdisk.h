/*
 * memdisk: a VM agent's memory store on a disk of its own (vm/memdisk.c on
 * the host) grows with its quota: fleetd grows the disk while the guest is
 * off, and agentd grows the file system to it when it starts in the guest.
 */
#ifndef FLEET_AGENTD_MEMDISK_H
#define FLEET_AGENTD_MEMDISK_H

#define MEMDISK_STORE "/home/agent/memory"

/*
 * Grow the ext4 file system mounted on dir to the whole of its block device
 * (online, as root); 1 grown, 0 nothing to do (not an ext4 mount point, or
 * already that size), -errno.
 */
int memdisk_grow(const char *dir);

#endif
