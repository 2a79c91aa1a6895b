/*
 * snapshot_rehome: a libvirt snapshot definition made fit for the same
 * domain on another host (fleetctl move, vm/move.c). The definition embeds
 * the domain as it was when the snapshot was taken (<domain>, and
 * <inactiveDomain> for a running one): its disk, kernel, console and
 * channel paths are the old host's, and libvirt reverts to exactly that
 * definition. Both are replaced by the domain as defined on the new host
 * (same name and UUID); the rest (name, parent, state, disks by target,
 * times) stays as libvirt wrote it. The guest's internal qcow2 snapshots
 * travel inside its disks. Parsed with libxml2, never by hand.
 */
#ifndef FLEET_VM_SNAPSHOT_REHOME_H
#define FLEET_VM_SNAPSHOT_REHOME_H

/* snap_xml with its embedded domain(s) replaced by domain_xml: *ret (caller frees), or -errno with *why. */
int vm_snapshot_rehome(const char *snap_xml, const char *domain_xml, char **ret, char **why);

#endif
