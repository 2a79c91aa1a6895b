/*
 * etc_overlay: what the unit tests that run shadow's real tools (useradd,
 * userdel, usermod, groupadd) share: a mount namespace of the test's own
 * with an overlay on /etc, so everything the tools write (passwd, group,
 * shadow, their locks) goes to a temporary upper layer and the host's
 * files are never touched, and a state dir for fleet. The namespace and
 * the overlay go with the test's process; etc_overlay_leave removes the
 * temporary directories.
 */
#ifndef FLEET_TESTS_ETC_OVERLAY_H
#define FLEET_TESTS_ETC_OVERLAY_H

struct etc_overlay {
	char etc_dir[64];	/* /tmp/fleet-TAG-etc-XXXXXX: the overlay's upper and work dirs */
	char state_dir[64];	/* /tmp/fleet-TAG-XXXXXX, mode 0711: a state dir for fleetd's code */
	long uid_min;		/* a range of 100 uids of this process's own (by pid) from base */
	int mounted;
};

/*
 * Root, the tools (NULL-terminated names in /usr/sbin) present, then the
 * namespace, the overlay and the state dir. NULL when set up; else why the
 * test cannot run (for tap_skip_all), nothing left behind. uid_base: where
 * this test's uids start (tests must not share ranges).
 */
const char *etc_overlay_enter(struct etc_overlay *o, const char *tag, long uid_base, const char *const *tools);

struct config;

/*
 * config_init cfg, then set, as from the command line, the state dir and
 * the uid range (uid_min to uid_min + 99). 0 when set; else -1 after a TAP
 * "Bail out!" line that says why and etc_overlay_leave (the test ends).
 */
int etc_overlay_config(struct etc_overlay *o, struct config *cfg);

/* Unmount the overlay and remove both directories. */
void etc_overlay_leave(struct etc_overlay *o);

#endif
