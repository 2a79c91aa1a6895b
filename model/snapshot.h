/*
 * snapshot: the in-memory shape of a snapshot record (one row of the
 * snapshots table) and the name tables of its state and kind. Plain data;
 * no I/O.
 */
#ifndef FLEET_SNAPSHOT_H
#define FLEET_SNAPSHOT_H

#include <stdbool.h>
#include <stdint.h>

/*
 * creating: its row is written before the backend makes it (a kill -9 in
 *   between leaves an intent that start-up undoes: it was never acknowledged).
 * ready: it exists; only ready snapshots are listed, restored or deleted.
 * deleting: a delete is under way (finished at start if interrupted).
 */
enum snapshot_state { SNAPSHOT_CREATING, SNAPSHOT_READY, SNAPSHOT_DELETING, SNAPSHOT_STATE__COUNT };

/*
 * What a snapshot holds, as its backend made it. pending: not known yet (a
 * row still 'creating'); no backend reports it. full: RAM and disk of a
 * running guest; disk: a stopped guest's disk; dir: a user agent's home.
 */
enum snapshot_kind {
	SNAPSHOT_KIND_PENDING,
	SNAPSHOT_KIND_FULL,
	SNAPSHOT_KIND_DISK,
	SNAPSHOT_KIND_DIR,
	SNAPSHOT_KIND__COUNT,
};

struct snapshot {
	int64_t id;
	char *agent;		/* agent name */
	char *name;
	enum snapshot_kind kind;
	enum snapshot_state state;
	int64_t created_at;
	long long size_bytes;	/* -1 unknown */
	int good;		/* -1 unknown, 0 bad, 1 good */
	bool pinned;
	char *note;
};

void snapshot_free(struct snapshot *s);
/* Frees a NULL-terminated array of snapshots and the array. */
void snapshot_list_free(struct snapshot **list);

const char *snapshot_state_to_string(enum snapshot_state s);	/* "unknown" outside the enum */
int snapshot_state_from_string(const char *s);			/* -EINVAL if unknown */
const char *snapshot_kind_to_string(enum snapshot_kind k);
int snapshot_kind_from_string(const char *s);

#endif
