/*
 * model/move.c: fleetctl move's decisions without a libvirtd: the target's
 * checks (its own host, unknown, drained, full, unreachable, memory) and,
 * after fleetd was killed mid-move, which host's copy is the stale one for
 * each point the kill can land (before and after the commit).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "model/move.h"
#include "../tap.h"

#define MIB (1024LL * 1024)

static struct host up(const char *name, long long free_mib, int agents)
{
	return (struct host){ .name = (char *)name, .agents = agents,
			      .facts = { .reachable = true, .free_memory_bytes = free_mib * MIB } };
}

/* move_check's answer; its message must be there exactly when it refuses, and contain want. */
static int check(const struct host *v, size_t n, const char *from, const char *to, int mib, const char *want)
{
	char *why = NULL;
	int r = move_check(v, n, from, to, mib, &why);

	ok(r == 0 ? why == NULL : why && (!want || strstr(why, want)), "  message: %s", why ? why : "(none)");
	free(why);
	return r;
}

int main(void)
{
	struct host v[] = { up("local", 4000, 1), up("h2", 4000, 0), up("full", 4000, 2), up("tiny", 100, 0) };

	is_int(check(v, 4, "local", "h2", 256, NULL), 0, "a host with room takes the agent");
	is_int(check(v, 4, "h2", "local", 256, NULL), 0, "and back: the local host is a host like the others");
	is_int(check(v, 4, "local", "local", 256, "already"), -EALREADY, "its own host: refused, saying it is there");
	is_int(check(v, 4, "local", "nowhere", 256, "nowhere"), -ENOENT, "an unknown host: -ENOENT (404)");
	v[1].draining = true;
	is_int(check(v, 4, "local", "h2", 256, "draining"), -EBUSY, "a draining host takes no agent moved in");
	v[1].draining = false;
	v[2].max_agents = 2;
	is_int(check(v, 4, "local", "full", 256, NULL), -EBUSY, "a host at its --max-agents takes none");
	is_int(check(v, 4, "local", "tiny", 256, NULL), -ENOSPC, "nor one without the agent's memory free (507)");
	v[1].reserve_memory_mib = 3900;
	is_int(check(v, 4, "local", "h2", 256, NULL), -ENOSPC, "its --reserve-memory is kept free");
	v[1].reserve_memory_mib = 0;
	v[1].facts.reachable = false;
	v[1].facts.error = "Failed to connect socket";
	is_int(check(v, 4, "local", "h2", 256, "Failed to connect"), -EBUSY, "an unreachable host, with libvirt's reason");

	/* A kill at each point of the move, as the record (from, to) and fleet's host say. */
	is_str(move_stale_host("local", "h2", "local"), "h2", "killed before the commit: the half copy on the target goes");
	is_str(move_stale_host("local", "h2", "h2"), "local", "killed after it: the old copy on the source goes");
	is_str(move_stale_host("h2", "local", "h2"), "local", "the same from a remote source: a half copy here goes");
	is_str(move_stale_host("h2", "h3", "h3"), "h2", "remote to remote, after the commit");
	ok(move_stale_host("local", "h2", "h3") == NULL, "a record naming neither of its hosts: nothing is touched");
	ok(move_stale_host("local", "local", "local") == NULL, "a record from a host to itself: nothing is touched");
	ok(move_stale_host(NULL, "h2", "local") == NULL, "an incomplete record: nothing is touched");
	return tap_done();
}
