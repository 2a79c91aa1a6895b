/* backend_vm: agents as libvirt VMs reached over SSH on a virtio-serial channel. */
#ifndef FLEET_BACKEND_VM_H
#define FLEET_BACKEND_VM_H

#include "backend.h"

extern const struct backend_ops backend_vm_ops;

#endif
