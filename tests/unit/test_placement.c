/*
 * model/placement.c: where a new VM agent goes, over host facts alone (no
 * libvirtd): the reachable, non-draining host under its max_agents whose
 * free memory minus its reserve holds the agent, the one with most such
 * memory, ties to the fewest agents; --host names one, still within its
 * limits; every refusal says why, host by host, as 409 (-EBUSY) or, when
 * memory alone stood in the way, 507 (-ENOSPC).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "model/host.h"
#include "../tap.h"

#define MIB (1024LL * 1024)

static struct host up(const char *name, long long free_mib, int agents)
{
	return (struct host){ .name = (char *)name, .agents = agents,
			      .facts = { .reachable = true, .free_memory_bytes = free_mib * MIB } };
}

/* placement_choose's index (or -errno), its why freed; *why_out gets a copy when asked. */
static int choose(const struct host *v, size_t n, const char *wanted, int mib, char **why_out)
{
	char *why = NULL;
	int r = placement_choose(v, n, wanted, mib, &why);

	ok(r >= 0 ? why == NULL : why != NULL && *why, "  %s", r >= 0 ? "no message when placed" : why ? why : "(no message)");
	if (why_out)
		*why_out = why;
	else
		free(why);
	return r;
}

int main(void)
{
	char *why = NULL;

	{
		struct host v[] = { up("local", 4000, 0), up("big", 8000, 3), up("small", 1000, 0) };

		is_int(choose(v, 3, NULL, 512, NULL), 1, "the host with most free memory wins, whatever its agents");
		v[1].reserve_memory_mib = 5000;
		is_int(choose(v, 3, NULL, 512, NULL), 0, "free memory counts after the host's reserve");
		is_int(choose(v, 3, "small", 512, NULL), 2, "--host picks a host that fits, not the best");
	}
	{
		struct host v[] = { up("a", 4000, 2), up("b", 4000, 1), up("c", 4000, 1) };

		is_int(choose(v, 3, NULL, 256, NULL), 1, "a tie in memory goes to the fewest agents, then the first");
	}
	{
		struct host v[] = { up("a", 9000, 0), up("b", 2000, 0), up("c", 3000, 0), up("d", 2500, 4) };

		v[0].draining = true;
		v[2].facts.reachable = false;
		v[2].facts.error = "connection refused";
		v[3].max_agents = 4;
		is_int(choose(v, 4, NULL, 256, NULL), 1, "draining, unreachable and full hosts are passed over");
		is_int(choose(v, 4, "a", 256, &why), -EBUSY, "--host of a draining host: 409");
		ok(strstr(why, "a: draining") != NULL, "  it says the host drains");
		free(why);
		is_int(choose(v, 4, "c", 256, &why), -EBUSY, "--host of an unreachable host: 409");
		ok(strstr(why, "connection refused") != NULL, "  with the connection's error");
		free(why);
		is_int(choose(v, 4, "d", 256, &why), -EBUSY, "--host of a host at its max_agents: 409");
		ok(strstr(why, "4 of 4 agents") != NULL, "  it says how many are placed");
		free(why);
		is_int(choose(v, 4, "nowhere", 256, &why), -ENOENT, "--host of no such host: 404");
		ok(strstr(why, "no host 'nowhere'") != NULL, "  it names the host");
		free(why);
		v[1].facts.free_memory_bytes = 100 * MIB;
		is_int(choose(v, 4, NULL, 256, &why), -EBUSY, "none fits, some for other reasons than memory: 409");
		ok(strstr(why, "a: draining") && strstr(why, "b: 100 MiB free") && strstr(why, "c: unreachable") &&
		   strstr(why, "d: 4 of 4"), "  every host's reason is given: %s", why);
		free(why);
	}
	{
		struct host v[] = { up("a", 1000, 0), up("b", 400, 0) };

		v[0].reserve_memory_mib = 600;
		is_int(choose(v, 2, NULL, 512, &why), -ENOSPC, "only memory stands in the way: 507");
		ok(strstr(why, "a: 1000 MiB free, 600 MiB reserved, 512 MiB needed") != NULL, "  with the figures");
		free(why);
		is_int(choose(v, 2, NULL, 400, NULL), 0, "a exactly holds 400 MiB after its reserve (the boundary fits)");
		v[0].facts.free_memory_bytes = -1;
		is_int(choose(v, 2, NULL, 400, NULL), 1, "a host whose free memory is unknown is passed over");
	}
	is_int(choose(NULL, 0, NULL, 256, &why), -EBUSY, "no hosts at all: 409");
	free(why);
	return tap_done();
}
