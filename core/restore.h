/*
 * restore: fleetd --restore-from DIR (docs/operations.md, "Backup and
 * restore"), in three steps around fleetd's own start:
 *  1. restore_prepare, before fleetd detaches (it reads the passphrase on
 *     stdin): the state dir has no database nor host key; the manifest is
 *     there (a backup without one is incomplete) and of a format and schema
 *     this fleetd reads; every file it names has its size and SHA-256; the
 *     passphrase opens the key. Nothing is written.
 *  2. restore_install, once the state dir is locked: the host key, then the
 *     database (copied beside and renamed in: its presence is the restore's
 *     point of no return).
 *  3. restore_agents, after the backends are up and before the reconcile:
 *     each agent provisioned afresh (a user agent's Unix user, a new uid
 *     allowed, and its home; a VM agent from its base image), a user agent's
 *     home and memory store extracted as the new user; its snapshots'
 *     records dropped (their data is not in a backup). Then fleetd starts
 *     as usual and autostart applies.
 */
#ifndef FLEET_CORE_RESTORE_H
#define FLEET_CORE_RESTORE_H

#include <stdio.h>

struct fleetd;
struct restore;

/* Step 1; the passphrase is the first line of pass_in. NULL and *why when refused. */
struct restore *restore_prepare(const char *dir, const char *state_dir, FILE *pass_in, char **why);
/* Step 2: 0, or -errno with *why (what it wrote removed again). */
int restore_install(struct restore *rs, const char *state_dir, char **why);
/* Step 3: each agent's outcome logged; one that fails is left in state missing with the reason. */
void restore_agents(struct fleetd *f, struct restore *rs);
void restore_free(struct restore *rs);

#endif
