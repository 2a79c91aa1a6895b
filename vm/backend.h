/* backend_vm: agents as libvirt VMs reached over SSH on a virtio-serial channel. */
#ifndef FLEET_BACKEND_VM_H
#define FLEET_BACKEND_VM_H

#include "backend/backend.h"

extern const struct backend_ops backend_vm_ops;

struct fleetd;

/*
 * Make the agent boot the image now in image_dir (imported into the store)
 * from its next start on: its kernel and initramfs, whose init installs
 * that image's agentd and dropbear on the agent's disk (images/README.md).
 * The disk keeps the base it was made on. *ret_from and *ret_to (caller
 * frees) are the boot image's IDs before and after (equal: no change).
 * -errno with *why.
 */
int vm_upgrade(struct fleetd *f, const struct agent *a, char **ret_from, char **ret_to, char **why);

#endif
