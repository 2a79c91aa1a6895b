/* handler: see handler.h. */
#include "api/handler.h"

#include <errno.h>
#include <string.h>

#include "api/server.h"
#include "common/names.h"
#include "model/agent.h"
#include "model/fleetd.h"
#include "store/db.h"

bool api_check_name_param(struct api_call *c)
{
	const char *why;

	if (agent_name_check(c->param, &why) < 0) {
		api_error(c, 400, "invalid_name", "invalid agent name: %s", why);
		return false;
	}
	return true;
}

struct agent *api_agent_param(struct api_call *c)
{
	struct agent *a = NULL;
	int r;

	if (!api_check_name_param(c))
		return NULL;
	if ((r = db_agent_get(c->fleetd->db, c->param, &a)) < 0) {
		api_error_errno(c, r, "agent '%s': %s", c->param, r == -ENOENT ? "no such agent" : strerror(-r));
		return NULL;
	}
	return a;
}

void api_error_core(struct api_call *c, int r, const char *why)
{
	if (r == -EAGAIN)
		api_error(c, 409, "not_provisioned", "%s", why);
	else
		api_error_errno(c, r, "%s", why);
}
