/*
 * backup: fleetctl backup (docs/operations.md, "Backup and restore"): into
 * a new directory, a consistent copy of the database (SQLite's online
 * backup), the secrets host key sealed with a passphrase (backup_key.h),
 * each user agent's home with its memory store (tar run as the agent,
 * user/home_archive.h), then a manifest of every file with its size and
 * SHA-256, written last. The database and key are copied on the loop (a
 * moment); the homes on a worker thread, while fleetd keeps serving.
 */
#ifndef FLEET_CORE_BACKUP_H
#define FLEET_CORE_BACKUP_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

struct fleetd;

/* done(): r 0 and the manifest (borrowed), or -errno and why. Called once, on the loop, after backup_start returned 0. */
typedef void (*backup_done_fn)(void *userdata, int r, const char *why, const json_t *manifest);

/*
 * Start a backup into dir (absolute; must not exist, or be an empty
 * directory of root's). 0: done() follows. -errno with *why: nothing
 * started: -EINVAL bad dir or passphrase, -EEXIST dir is not empty,
 * -EBUSY a backup is under way or (with_disks) a VM agent is mid-snapshot.
 */
int backup_start(struct fleetd *f, const char *dir, const char *pass, size_t pass_len, bool with_disks,
		 backup_done_fn done, void *userdata, char **why);

#endif
