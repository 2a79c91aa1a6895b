/*
 * disk_backup: a VM agent's disks for fleetctl backup --with-disks and
 * fleetd --restore-from (core/backup.c, core/restore.c; docs/operations.md
 * "Backup and restore"). Copied: its qcow2 overlay (which holds fleet's
 * internal snapshots), its memory store's disk (memdisk.c), its seed disk
 * and its keys; the domain's UUID and each snapshot's libvirt definition go
 * into the manifest. A running guest is paused for the copy (QEMU drains
 * and flushes its block layer on a pause) and resumed on every path. The
 * files are fleetd's own, in its state dir: opened with O_NOFOLLOW all the
 * same, and copied sparse (holes stay holes). An agent on another host
 * (#15) has its disks there, volumes of the fleet pool: downloaded, and at
 * restore uploaded again to that host (its overlay rebased on that host's
 * base volume first, on fleetd's host).
 */
#ifndef FLEET_VM_DISK_BACKUP_H
#define FLEET_VM_DISK_BACKUP_H

#include <jansson.h>

struct fleetd;
struct agent;
struct vm_disk_copy;

/*
 * On the loop: what to copy of a VM agent, and its snapshots' names
 * (snaps, n); of an agent on another host, its disks are that host's
 * volumes (read through libvirt's storage API), its keys fleetd's. The
 * agent is busy (no snapshot, revert or removal) until vm_disk_copy_end(). -EBUSY (a snapshot or restore is under way) or
 * -errno, with *why.
 */
int vm_disk_copy_begin(struct fleetd *f, const struct agent *a, char *const *snaps, size_t n,
		       struct vm_disk_copy **ret, char **why);
/*
 * On a worker (touches only c): pause the guest if it runs, copy each file
 * into dir as "vm-AGENT-FILE" (a remote agent's disks downloaded with
 * virStorageVolDownload into files made O_EXCL|O_NOFOLLOW), resume it, and fill entry (the agent's
 * object in the manifest): "domain_uuid", "vm_files" [{file, as}], and
 * "snapshots" [{name, libvirt_xml}]. The names written go on *names (a JSON
 * array of strings the caller hashes). 0, or -errno with *why.
 */
int vm_disk_copy_run(struct vm_disk_copy *c, int dir, json_t *entry, json_t *names, char **why);
/* On the loop: the agent free again (the pause logged), c freed. */
void vm_disk_copy_end(struct vm_disk_copy *c);

/*
 * At restore, on the loop: the agent's disks and keys put back from the
 * backup's dir as entry lists them, and its domain defined again with its
 * old UUID, on its recorded image (which must be in the image store, or
 * in image_dir to be imported). Nothing is left half-made on failure.
 * 0, or -errno with *why.
 */
int vm_disk_restore(struct fleetd *f, const struct agent *a, int dir, const json_t *entry, char **why);
/* Then each snapshot's definition given back to libvirt: 0, or -errno with *why. */
int vm_disk_restore_snapshot(struct fleetd *f, const struct agent *a, const char *xml, char **why);

#endif
