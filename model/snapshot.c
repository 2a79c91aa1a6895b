/* snapshot: see snapshot.h. */
#include "model/snapshot.h"

#include <stdlib.h>

#include "model/name_table.h"

static const char *const state_names[SNAPSHOT_STATE__COUNT] = {
	[SNAPSHOT_CREATING] = "creating", [SNAPSHOT_READY] = "ready", [SNAPSHOT_DELETING] = "deleting",
};
static const char *const kind_names[SNAPSHOT_KIND__COUNT] = {
	[SNAPSHOT_KIND_PENDING] = "pending", [SNAPSHOT_KIND_FULL] = "full", [SNAPSHOT_KIND_DISK] = "disk",
	[SNAPSHOT_KIND_DIR] = "dir",
};

void snapshot_free(struct snapshot *s)
{
	if (!s)
		return;
	free(s->agent);
	free(s->name);
	free(s->note);
	free(s);
}

void snapshot_list_free(struct snapshot **list)
{
	for (struct snapshot **p = list; p && *p; p++)
		snapshot_free(*p);
	free(list);
}

const char *snapshot_state_to_string(enum snapshot_state s)
{
	return name_table_word(state_names, SNAPSHOT_STATE__COUNT, s);
}

int snapshot_state_from_string(const char *s)
{
	return name_table_value(state_names, SNAPSHOT_STATE__COUNT, s);
}

const char *snapshot_kind_to_string(enum snapshot_kind k)
{
	return name_table_word(kind_names, SNAPSHOT_KIND__COUNT, k);
}

int snapshot_kind_from_string(const char *s)
{
	return name_table_value(kind_names, SNAPSHOT_KIND__COUNT, s);
}
