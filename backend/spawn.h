/*
 * spawn: run a host tool (qemu-img, mke2fs, dropbearkey) to completion and
 * capture what it printed. Only for short steps of provisioning: it blocks
 * the caller until the tool exits.
 */
#ifndef FLEET_SPAWN_H
#define FLEET_SPAWN_H

/*
 * Run argv (argv[0] looked up in PATH) with stdin from /dev/null. Returns
 * the exit status (0..255), or -errno if it could not be run or was killed.
 * When output is not NULL it receives stdout and stderr together (at most
 * 64 KiB; caller frees).
 */
int spawn_run(const char *const argv[], char **output);

#endif
