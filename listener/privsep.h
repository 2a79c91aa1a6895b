/*
 * privsep: how fleet-hooksd gives up root before it reads a byte from the
 * network, in the order docs/webhooks.md gives (OpenSSH's and OpenSMTPD's
 * model): libcrypto initialised, USER looked up, chroot(ROOT) and chdir("/"),
 * the capability bounding set emptied, no supplementary groups,
 * setresgid/setresuid to USER, no capability left (checked with capget),
 * PR_SET_NO_NEW_PRIVS, resource limits. Every step is checked.
 */
#ifndef FLEET_LISTENER_PRIVSEP_H
#define FLEET_LISTENER_PRIVSEP_H

#include <sys/types.h>

/* The address space and descriptors the listener may use once dropped. */
#define PRIVSEP_AS_MAX (2UL << 30)
#define PRIVSEP_NOFILE_MAX (65536 + 512)

/* Drop to user inside root (an empty root-owned directory nobody may write). 0, or -1 after logging why. */
int privsep_drop(const char *user, const char *root);

#endif
