/*
 * tz: named time zones from the system's tz database (/usr/share/zoneinfo)
 * for cron triggers. libc knows one zone per process (TZ), so work in
 * another zone happens between tz_enter() and tz_leave(), which swap TZ
 * under a lock. Only code between the two may rely on local time: fleetd
 * uses gmtime everywhere else. A tool another thread spawns while a zone
 * is swapped in inherits that TZ (a window of microseconds); a TZif reader
 * of our own would end the swap if that ever matters.
 */
#ifndef FLEET_TZ_H
#define FLEET_TZ_H

#define TZ_NAME_MAX 64		/* longest accepted zone name */

/*
 * Check that zone names a zone in the tz database ("Asia/Kolkata", "UTC"):
 * a name of letters, digits and ._+- in /-separated parts (no "." or ".."
 * part, no leading '/'), and a TZif file of that name. 0, or -EINVAL with
 * *why (malloc'd) saying what is wrong.
 */
int tz_check(const char *zone, char **why);

/* Make zone (checked with tz_check; NULL: the host's own) the local time zone until tz_leave(). */
void tz_enter(const char *zone);
void tz_leave(void);

#endif
