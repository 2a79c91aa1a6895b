/*
 * api_images: GET /v1/images, DELETE /v1/images/ID and
 * POST /v1/agents/NAME/upgrade: the HTTP face of core/images.c, which
 * decides who uses an image and whether one may go.
 */
#include <errno.h>
#include <string.h>

#include "api/images.h"
#include "api/handler.h"
#include "api/server.h"
#include "core/images.h"
#include "model/agent.h"

static json_t *users_to_json(const struct image_user *v, size_t n)
{
	json_t *users = json_array();

	for (size_t i = 0; i < n; i++)
		json_array_append_new(users, json_pack("{s:s, s:s}", "agent", v[i].agent, "as", v[i].as));
	return users;
}

/* GET /v1/images: the stored images, which one image_dir holds now, and who uses each. */
void api_images_list(struct api_call *c)
{
	_cleanup_free_ char *why = NULL;
	struct image_catalog cat;
	json_t *list;
	int r;

	if ((r = images_catalog(c->fleetd, &cat, &why)) < 0) {
		api_error_errno(c, r, "%s", why);
		return;
	}
	list = json_array();
	for (size_t i = 0; i < cat.n; i++) {
		const struct image_entry *e = &cat.v[i];
		char imported[32];

		json_array_append_new(list, json_pack("{s:s, s:s, s:s?, s:s?, s:s?, s:I, s:b, s:o}",
			"id", e->id,
			"imported_at", format_utc(e->imported_at, imported, sizeof(imported)),
			"built", e->built,
			"kernel", e->kernel,
			"agentd_sha256", e->agentd_sha256,
			"size_bytes", (json_int_t)e->size_bytes,
			"current", e->current,
			"used_by", users_to_json(e->users, e->n_users)));
	}
	api_reply(c, 200, json_pack("{s:s, s:o, s:o}", "image_dir", cat.image_dir,
				    "current", cat.has_current ? json_string(cat.current) : json_null(), "images", list));
	image_catalog_clear(&cat);
}

/* DELETE /v1/images/ID (or a unique prefix): refused while any agent uses it. */
void api_image_delete(struct api_call *c)
{
	_cleanup_free_ char *why = NULL;
	char id[FLEET_IMAGE_ID_LEN + 1];
	int r;

	if ((r = images_remove(c->fleetd, c->param, id, &why)) == -ETXTBSY)
		api_error(c, 409, "in_use", "%s", why);
	else if (r < 0)
		api_error_errno(c, r, "%s", why);
	else
		api_reply(c, 200, json_pack("{s:s}", "removed", id));
}

/* POST /v1/agents/NAME/upgrade: boot the image now in image_dir from the next start on. */
void api_agent_upgrade(struct api_call *c)
{
	_cleanup_(agent_freep) struct agent *a = NULL;
	_cleanup_free_ char *why = NULL, *from = NULL, *to = NULL;
	int r;

	if (!api_check_name_param(c))
		return;
	if ((r = images_upgrade_target(c->fleetd, c->param, &a, &why)) < 0) {
		api_error_core(c, r, why);
		return;
	}
	if ((r = images_upgrade(c->fleetd, a, &from, &to, &why)) < 0) {
		api_error_errno(c, r, "%s", why);
		return;
	}
	api_reply(c, 200, json_pack("{s:s, s:s, s:s, s:b, s:b}", "agent", a->name, "from", from, "to", to,
				    "changed", strcmp(from, to) != 0, "running", a->state == AGENT_RUNNING));
}
