/*
 * memory: each agent's memory store, reached from the host (docs/memory.md).
 * fleetd never opens a file in an agent's home or guest: every operation is
 * `agentd memory ...` run through the backend's exec as the agent user,
 * the same path for both backends, with the agent's quota on its argv.
 */
#ifndef FLEET_CORE_MEMORY_H
#define FLEET_CORE_MEMORY_H

#include <stddef.h>

#include "model/agent.h"

struct fleetd;

enum memory_verb {
	MEMORY_LS, MEMORY_GET, MEMORY_PUT, MEMORY_RM, MEMORY_EXPORT, MEMORY_IMPORT,
	MEMORY_IMPORT_KEPT,	/* an import not held to the quota: the agent's own store, kept over a restore */
};

/* What an export (or a get) may bring back to fleetd: the largest quota plus the archive's headers. */
#define MEMORY_OUT_MAX (((size_t)MEMORY_QUOTA_MAX << 20) + ((size_t)16 << 20))

struct memory_result {
	/*
	 * 0, or: -ENOENT no such key, -EDQUOT the quota would be exceeded,
	 * -EPERM an import refused (a link, device, path out of the store...),
	 * -EINVAL bad arguments, -EBUSY a snapshot or restore is under way,
	 * -EIO anything else; why says what (agentd's own words).
	 */
	int error;
	const char *why;
	const char *out;	/* stdout: a value, an archive, ls lines "KEY\tSIZE\tMTIME" */
	size_t out_len;
};
typedef void (*memory_done_fn)(void *userdata, const struct memory_result *res);

/*
 * Run verb on agent's store: key for get, put and rm; in for put (the value)
 * and import (a tar archive). done() is called once on the loop, never
 * before this returns; res is valid only during it. A negative return
 * (-ENOENT no such agent, -EINVAL bad key, -EAGAIN not provisioned or its
 * backend unavailable, or the backend's exec refusal) means done() is not
 * called; *why says why.
 */
int memory_call(struct fleetd *f, const char *agent, enum memory_verb verb, const char *key, const void *in,
		size_t in_len, memory_done_fn done, void *userdata, char **why);

/*
 * The agentd on the host: next to fleetd, in a build tree's agentd/, else
 * where make install puts it (user agents run it; doctor compares the guest
 * image's with it). Caller frees; NULL when there is none.
 */
char *memory_host_agentd(void);

typedef void (*memory_restored_fn)(void *userdata, int r, const char *why);

/*
 * Restore agent to snap but keep its memory as it is now: export the store,
 * keep the archive in STATE_DIR/memory-keep/AGENT.tar (0600 root) while the
 * restore runs, import it after. done() as for snapshots_restore; a failed
 * import after a good restore is an error that names the kept file.
 */
int memory_restore_keep(struct fleetd *f, const char *agent, const char *snap, memory_restored_fn done,
			void *userdata, char **why);

#endif
