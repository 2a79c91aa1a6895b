/* move: see move.h. */
#include "model/move.h"

#include <errno.h>
#include <string.h>

#include "common/util.h"

int move_check(const struct host *hosts, size_t n, const char *from, const char *to, int memory_mib, char **why)
{
	if (strcmp(from, to) == 0) {
		*why = xasprintf("it is on host '%s' already", to);
		return -EALREADY;
	}
	/* The target's limits as for a new agent there: draining, max agents, free memory minus its reserve. */
	int r = placement_choose(hosts, n, to, memory_mib, why);

	return r < 0 ? r : 0;
}

const char *move_stale_host(const char *from, const char *to, const char *current)
{
	if (!from || !to || !current || strcmp(from, to) == 0)
		return NULL;
	if (strcmp(current, from) == 0)
		return to;
	if (strcmp(current, to) == 0)
		return from;
	return NULL;
}
