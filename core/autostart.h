/*
 * autostart: after a host reboot, start the agents marked --autostart on,
 * by --boot-priority, at most boot_concurrency at a time (autostart.c).
 */
#ifndef FLEET_CORE_AUTOSTART_H
#define FLEET_CORE_AUTOSTART_H

struct fleetd;

/*
 * At fleetd's start, after the reconcile: if the host's boot id is not the
 * one recorded in the state dir, begin starting the autostart agents that
 * are stopped; the boot id is recorded once all have answered. 0 (also when
 * there is nothing to do), or -errno (logged; nothing is started).
 */
int autostart_init(struct fleetd *f);
/* At fleetd's stop: no further starts; starts still going finish on their own. */
void autostart_shutdown(struct fleetd *f);

#endif
