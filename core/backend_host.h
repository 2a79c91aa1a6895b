/*
 * backend_host: fleet's side of struct backend_host (backend/backend.h), what a
 * backend may ask of fleet: lifecycle_on_event() for what it reports, and
 * what the store keeps for it (a VM agent's image record, the agents of a
 * backend kind). Backends never include the store; they come through here.
 */
#ifndef FLEET_CORE_BACKEND_HOST_H
#define FLEET_CORE_BACKEND_HOST_H

#include "backend/backend.h"

/* What fleetd gives every backend at init (backends_init()). */
extern const struct backend_host core_backend_host;

#endif
