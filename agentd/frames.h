/*
 * frames: what fleetd sends an exec ahead of the command's own stdin
 * (vm/ssh_quote.h): a head line "MAGIC N\n", then N bytes. Read byte-exact
 * with read(2), no buffering, so the command's stdin starts right after.
 */
#ifndef FLEET_AGENTD_FRAMES_H
#define FLEET_AGENTD_FRAMES_H

#include <stddef.h>
#include <sys/types.h>

/* One frame whose head is magic ("FLEET-ENV "): its body (malloc'd, NUL after it) in *ret; -1 if malformed. */
int frame_read(const char *magic, size_t max, char **ret, size_t *len);

/*
 * --files-stdin (FLEET-FILES): records NAME NUL LENGTH NUL DATA, each NAME
 * an environment variable name. Written, 0400 and uid's, on a fresh tmpfs
 * (0700, uid's) at dir, in a mount namespace of this process's own made
 * here (so it runs as root, before the privileges are dropped): never on
 * the guest's disk, gone with the last process of the command. The body
 * is wiped. 0, or -1 after printing why on stderr.
 */
int files_install(char *body, size_t len, const char *dir, uid_t uid, gid_t gid);

#endif
