/*
 * backup_files: the layout of a backup directory and the file operations
 * backup.c and restore.c share. Every file is made with
 * O_CREAT|O_EXCL|O_NOFOLLOW (never over anything, never through a link)
 * and read with O_NOFOLLOW; each is named in the manifest with its size and
 * SHA-256, and the manifest is written last.
 */
#ifndef FLEET_CORE_BACKUP_FILES_H
#define FLEET_CORE_BACKUP_FILES_H

#include <stddef.h>

#define BACKUP_FORMAT 1
#define BACKUP_MANIFEST "manifest.json"
#define BACKUP_DB "fleet.db"
#define BACKUP_KEY "secret.key.enc"
/* A user agent's home: "home-NAME.tar" (agent names are safe file names). */
#define BACKUP_HOME_FMT "home-%s.tar"
/* --with-disks: a user agent's snapshot "snap-NAME@SNAP.tar" (no name holds an @: no two give one file name). */
#define BACKUP_SNAP_FMT "snap-%s@%s.tar"
/* The largest manifest read back: agents are at most a few thousand. */
#define BACKUP_MANIFEST_MAX (16u << 20)

/* A new file name in dir, 0600, for writing: an fd or -errno. */
int backup_file_create(int dir, const char *name);
/* A new file with these bytes, fsynced: 0 or -errno. */
int backup_file_write(int dir, const char *name, const void *data, size_t len);
/* fsync a file of dir (what another writer made): 0 or -errno. */
int backup_file_sync(int dir, const char *name);
/* The size and SHA-256 (64 hex digits and a NUL) of a regular file of dir: 0, or -errno (-EINVAL not a regular file). */
int backup_file_hash(int dir, const char *name, char hex[65], long long *size);

#endif
