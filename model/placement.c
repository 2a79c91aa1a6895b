/* placement: see host.h (placement_choose). Pure: host facts in, a choice out. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "model/host.h"

enum verdict { FITS, NO_ROOM, BUSY };

/* Whether h can take an agent of memory_mib now; *why (caller frees) when not; *room: MiB to spare. */
static enum verdict judge(const struct host *h, int memory_mib, long long *room, char **why)
{
	long long free_mib;

	if (h->draining)
		return *why = xasprintf("%s: draining", h->name), BUSY;
	if (!h->facts.reachable)
		return *why = xasprintf("%s: unreachable (is libvirtd running there? %s)", h->name,
					h->facts.error ? h->facts.error : "no connection"), BUSY;
	if (h->max_agents > 0 && h->agents >= h->max_agents)
		return *why = xasprintf("%s: %d of %d agents placed", h->name, h->agents, h->max_agents), BUSY;
	if (h->facts.free_memory_bytes < 0)
		return *why = xasprintf("%s: its free memory is unknown", h->name), BUSY;
	free_mib = h->facts.free_memory_bytes >> 20;
	*room = free_mib - h->reserve_memory_mib - memory_mib;
	if (*room < 0)
		return *why = xasprintf("%s: %lld MiB free, %d MiB reserved, %d MiB needed", h->name, free_mib,
					h->reserve_memory_mib, memory_mib), NO_ROOM;
	return FITS;
}

int placement_choose(const struct host *hosts, size_t n, const char *wanted, int memory_mib, char **why)
{
	_cleanup_free_ char *reasons = xstrdup("");
	long long best_room = -1;
	bool all_room = true;
	int best = -1;

	for (size_t i = 0; i < n; i++) {
		_cleanup_free_ char *no = NULL;
		long long room = 0;
		enum verdict v;
		char *t;

		if (wanted && strcmp(hosts[i].name, wanted) != 0)
			continue;
		v = judge(&hosts[i], memory_mib, &room, &no);
		if (v == FITS) {
			if (best < 0 || room > best_room || (room == best_room && hosts[i].agents < hosts[best].agents)) {
				best = (int)i;
				best_room = room;
			}
			continue;
		}
		if (v == BUSY)
			all_room = false;
		t = xasprintf("%s%s%s", reasons, *reasons ? "; " : "", no);
		free(reasons);
		reasons = t;
	}
	if (best >= 0)
		return best;
	if (wanted && !*reasons) {
		*why = xasprintf("no host '%s' (fleetctl host ls)", wanted);
		return -ENOENT;
	}
	if (!*reasons) {
		*why = xstrdup("no hosts");
		return -EBUSY;
	}
	*why = wanted ? xasprintf("cannot place a %d MiB agent on %s", memory_mib, reasons)
		      : xasprintf("no host can take a %d MiB agent now: %s", memory_mib, reasons);
	/* Only memory stood in the way: 507, as for a full disk; else 409. */
	return all_room ? -ENOSPC : -EBUSY;
}
