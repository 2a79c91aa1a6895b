/*
 * The model's name tables: every value of every enum round-trips through
 * its word, the words are exactly the ones the database stores and the API
 * shows (changing one would orphan rows and break clients), and a word not
 * in a table is rejected, never mapped to some value.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "model/agent.h"
#include "model/run.h"
#include "model/snapshot.h"
#include "../tap.h"

struct table {
	const char *what;
	int count;
	const char *const *words;	/* the expected word of each value, in enum order */
	const char *(*to)(int v);
	int (*from)(const char *s);
};

/* Adapters: the real functions take their own enum; these call them with the value as is. */
#define ADAPT(name, type) static const char *name##_int(int v) { return name((type)v); }
ADAPT(snapshot_state_to_string, enum snapshot_state)
ADAPT(snapshot_kind_to_string, enum snapshot_kind)
ADAPT(run_state_to_string, enum run_state)
ADAPT(agent_state_to_string, enum agent_state)
ADAPT(backend_kind_to_string, enum backend_kind)
ADAPT(network_kind_to_string, enum network_kind)
ADAPT(restart_policy_to_string, enum restart_policy)
ADAPT(snapshot_policy_to_string, enum snapshot_policy)

static const char *const snapshot_states[] = { "creating", "ready", "deleting" };
static const char *const snapshot_kinds[] = { "pending", "full", "disk", "dir" };
static const char *const run_states[] = { "queued", "running", "succeeded", "failed", "timed-out", "cancelled",
					  "interrupted" };
static const char *const agent_states[] = { "defined", "provisioning", "stopped", "running", "bad", "removing",
					     "missing" };
static const char *const backend_kinds[] = { "vm", "user" };
static const char *const network_kinds[] = { "none", "nat" };
static const char *const restart_policies[] = { "on-failure", "always", "never" };
static const char *const snapshot_policies[] = { "none", "before-run", "cron" };

/* Each expected list has one word per enum value: a value added without its word fails to compile. */
#define N(a) (sizeof(a) / sizeof((a)[0]))
_Static_assert(N(snapshot_states) == SNAPSHOT_STATE__COUNT, "snapshot states");
_Static_assert(N(snapshot_kinds) == SNAPSHOT_KIND__COUNT, "snapshot kinds");
_Static_assert(N(run_states) == RUN_STATE__COUNT, "run states");
_Static_assert(N(agent_states) == AGENT_STATE__COUNT, "agent states");
_Static_assert(N(backend_kinds) == BACKEND__COUNT, "backend kinds");
_Static_assert(N(network_kinds) == NETWORK__COUNT, "network kinds");
_Static_assert(N(restart_policies) == RESTART__COUNT, "restart policies");
_Static_assert(N(snapshot_policies) == SNAPSHOT_POLICY__COUNT, "snapshot policies");

#define TABLE(what, n, words, stem) \
	{ what, n, words, stem##_to_string_int, stem##_from_string }

static const struct table tables[] = {
	TABLE("snapshot state", SNAPSHOT_STATE__COUNT, snapshot_states, snapshot_state),
	TABLE("snapshot kind", SNAPSHOT_KIND__COUNT, snapshot_kinds, snapshot_kind),
	TABLE("run state", RUN_STATE__COUNT, run_states, run_state),
	TABLE("agent state", AGENT_STATE__COUNT, agent_states, agent_state),
	TABLE("backend kind", BACKEND__COUNT, backend_kinds, backend_kind),
	TABLE("network kind", NETWORK__COUNT, network_kinds, network_kind),
	TABLE("restart policy", RESTART__COUNT, restart_policies, restart_policy),
	TABLE("snapshot policy", SNAPSHOT_POLICY__COUNT, snapshot_policies, snapshot_policy),
};

/* Words no table may accept: near misses of real words, and the to-name fallback. */
static const char *const strangers[] = { "", "bogus", "unknown", "READY", "Ready", "ready ", " ready", "read",
					 "readyy", "Full", "succeed", "on_failure", "before_run", "vm " };

int main(void)
{
	for (size_t t = 0; t < N(tables); t++) {
		const struct table *tb = &tables[t];

		for (int v = 0; v < tb->count; v++) {
			const char *w = tb->to(v);

			is_str(w, tb->words[v], "%s %d is named '%s'", tb->what, v, tb->words[v]);
			is_int(tb->from(w), v, "%s '%s' reads back as %d", tb->what, w, v);
		}
		for (int v = 0; v < tb->count; v++)
			for (int u = v + 1; u < tb->count; u++)
				ok(strcmp(tb->to(v), tb->to(u)) != 0, "%s: %d and %d have different words", tb->what, v, u);
		is_str(tb->to(tb->count), "unknown", "%s: a value past the table is 'unknown'", tb->what);
		is_str(tb->to(-1), "unknown", "%s: a negative value is 'unknown'", tb->what);
		is_int(tb->from(NULL), -EINVAL, "%s: NULL is rejected", tb->what);
		for (size_t i = 0; i < N(strangers); i++)
			is_int(tb->from(strangers[i]), -EINVAL, "%s: '%s' is rejected", tb->what, strangers[i]);
	}
	/* A word of one table is not a word of another (a snapshot is never 'queued', a run never 'ready'). */
	is_int(snapshot_state_from_string("queued"), -EINVAL, "a run state is not a snapshot state");
	is_int(run_state_from_string("ready"), -EINVAL, "a snapshot state is not a run state");
	is_int(snapshot_kind_from_string("creating"), -EINVAL, "a snapshot state is not a kind");
	return tap_done();
}
