/*
 * agentd memory: the agent's key-value memory store in ~/memory, run inside
 * the environment as the agent's user (fleetd runs it through the
 * backend's exec; the agent's own command may run it too). docs/memory.md.
 */
#ifndef FLEET_AGENTD_MEMORY_H
#define FLEET_AGENTD_MEMORY_H

#include "common/names.h"

/* What `agentd memory` exits with; fleetd's core/memory.c maps them to errors. */
enum {
	MEMORY_EXIT_OK = 0,
	MEMORY_EXIT_FAIL = 1,		/* an I/O error, said on stderr */
	MEMORY_EXIT_USAGE = 2,		/* bad arguments or an invalid key */
	MEMORY_EXIT_NOKEY = 3,		/* get/rm of a key that is not there */
	MEMORY_EXIT_QUOTA = 4,		/* the write would take the store over its quota */
	MEMORY_EXIT_REFUSED = 5,	/* import: the archive holds something a store may not */
};

/* agentd memory ...: argv[0] is "memory". Returns the exit status. */
int memory_main(int argc, char **argv);

#endif
