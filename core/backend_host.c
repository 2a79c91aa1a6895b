/* backend_host: see backend_host.h. Thin on purpose: the store answers, lifecycle.c decides. */
#include "core/backend_host.h"

#include "common/util.h"

#include "core/lifecycle.h"
#include "model/fleetd.h"
#include "store/db.h"

static int host_get_images(struct fleetd *f, const char *agent, struct agent_images *ret)
{
	return db_agent_get_images(f->db, agent, ret);
}

static int host_set_images(struct fleetd *f, const char *agent, const struct agent_images *im)
{
	return db_agent_set_images(f->db, agent, im);
}

/* db_agent_list() filtered to one kind, in place: the list keeps its one owner. */
static int host_list_agents(struct fleetd *f, enum backend_kind kind, struct agent ***ret)
{
	struct agent **list = NULL;
	size_t n = 0, k = 0;
	int r;

	if ((r = db_agent_list(f->db, &list, &n)) < 0)
		return r;
	for (size_t i = 0; i < n; i++) {
		if (list[i]->backend == kind)
			list[k++] = list[i];
		else
			agent_free(list[i]);
	}
	list[k] = NULL;
	*ret = list;
	return 0;
}

static int host_host_uri(struct fleetd *f, const char *host, char **ret)
{
	struct host h = { 0 };
	int r;

	if ((r = db_host_get(f->db, host, &h)) < 0)
		return r;
	*ret = TAKE_PTR(h.uri);
	host_clear(&h);
	return 0;
}

const struct backend_host core_backend_host = {
	.on_event = lifecycle_on_event,
	.get_images = host_get_images,
	.set_images = host_set_images,
	.list_agents = host_list_agents,
	.host_uri = host_host_uri,
};
