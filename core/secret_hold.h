/*
 * secret_hold: which agents have secret values in their environment's
 * memory right now (a run or an exec that was given its secrets, as
 * variables or as files on a tmpfs). fleet takes no snapshot of such an
 * agent (snapshots.c asks here): a VM snapshot of a running guest is a RAM
 * checkpoint, and a user agent's tmpfs would be copied with its home.
 * Holds count: a run and an exec may hold at once; each enter has one leave.
 */
#ifndef FLEET_CORE_SECRET_HOLD_H
#define FLEET_CORE_SECRET_HOLD_H

struct fleetd;

/* what: who holds them, for the refusal ("run 12", "an exec"); copied. */
void secret_hold_enter(struct fleetd *f, const char *agent, const char *what);
void secret_hold_leave(struct fleetd *f, const char *agent);
/* Who holds agent's secrets now (the oldest holder), or NULL; valid until the next enter or leave. */
const char *secret_hold_who(struct fleetd *f, const char *agent);
/* At shutdown. */
void secret_hold_free(struct fleetd *f);

#endif
