/*
 * home_archive: a user agent's home (its memory store included: it is
 * mounted inside) as a tar stream, and back, for fleetctl backup and fleetd
 * --restore-from (core/backup.c, core/restore.c). tar runs as the agent's
 * own uid and gid, with no supplementary groups, in the home: it reads only
 * what the agent could read, stores a symlink as a symlink, and extracts
 * every file as the (new) agent user, so fleetd never walks or writes an
 * agent's tree as root and ownership follows the uid, whatever it is now.
 * The same for the copies of the home a user agent's snapshots keep
 * (fleetctl backup --with-disks).
 */
#ifndef FLEET_USER_HOME_ARCHIVE_H
#define FLEET_USER_HOME_ARCHIVE_H

#include <sys/types.h>

struct fleetd;

/* On the loop: the agent's uid and home (caller frees); -ENOENT no such user, -EPERM not fleet's. */
int user_home_of(struct fleetd *f, const char *agent, uid_t *uid, char **home);

/*
 * Worker-safe (reads nothing of fleetd's): write the home as a pax tar to
 * out_fd. What the agent cannot read itself is left out (tar's
 * --ignore-failed-read); sockets are skipped. 0, or -errno with *why.
 */
int user_home_archive(uid_t uid, const char *home, int out_fd, char **why);

/* Extract the tar on in_fd into home as uid (existing directories keep their modes). 0, or -errno with *why. */
int user_home_unpack(uid_t uid, const char *home, int in_fd, char **why);

/* On the loop: where a user agent's snapshot keeps its copy of the home (user/snapshot_jobs.c's layout). */
char *user_snapshot_home_path(struct fleetd *f, const char *agent, const char *snap);
/*
 * At restore, the agent's user made again: snapshot snap (no such directory
 * yet) from the tar on in_fd, extracted as the agent's uid into a staging
 * directory of fleet's the agent cannot reach, then renamed into place.
 * 0, or -errno with *why (the staging directory is the next start's sweep).
 */
int user_snapshot_unpack(struct fleetd *f, const char *agent, const char *snap, int in_fd, char **why);

#endif
