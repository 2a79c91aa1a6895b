/*
 * api_images: GET /v1/images, DELETE /v1/images/ID and
 * POST /v1/agents/NAME/upgrade. The store is images.c's; which agent uses
 * which image is the database's (db_agent_get_images): an image is in use
 * while an agent's disk is backed by it, while an agent boots it, and while
 * an agent that booted it before has snapshots (their saved domain
 * definitions name its kernel). An image in use is never removed.
 */
#include <errno.h>
#include <string.h>

#include "api/server.h"
#include "vm/backend.h"
#include "model/config.h"
#include "store/db.h"
#include "model/fleetd.h"
#include "vm/images.h"

/* Is id one of the space-separated words of list? */
static bool word_in(const char *list, const char *id)
{
	size_t n = strlen(id);

	for (const char *p = list; p && (p = strstr(p, id)); p += n)
		if ((p == list || p[-1] == ' ') && (p[n] == '\0' || p[n] == ' '))
			return true;
	return false;
}

static bool has_snapshots(struct fleetd *f, const char *agent)
{
	struct snapshot **list = NULL;
	size_t n = 0;

	if (db_snapshot_list(f->db, agent, DB_ANY_STATE, &list, &n) < 0)
		return true;	/* unknown: count it as in use */
	snapshot_list_free(list);
	return n > 0;
}

/* The agents using image id, as a JSON array of {agent, as}; -errno. */
static int image_users(struct fleetd *f, const char *id, json_t **ret)
{
	struct agent **list = NULL;
	json_t *users;
	size_t n = 0;
	int r;

	if ((r = db_agent_list(f->db, &list, &n)) < 0)
		return r;
	users = json_array();
	for (size_t i = 0; i < n; i++) {
		struct agent_images im = { 0 };

		if (list[i]->backend != BACKEND_VM || db_agent_get_images(f->db, list[i]->name, &im) < 0)
			continue;
		if (im.image && strcmp(im.image, id) == 0)
			json_array_append_new(users, json_pack("{s:s, s:s}", "agent", list[i]->name, "as", "disk"));
		if (im.boot_image && strcmp(im.boot_image, id) == 0)
			json_array_append_new(users, json_pack("{s:s, s:s}", "agent", list[i]->name, "as", "boot"));
		if (word_in(im.old_images, id) && has_snapshots(f, list[i]->name))
			json_array_append_new(users, json_pack("{s:s, s:s}", "agent", list[i]->name, "as", "snapshots"));
		agent_images_clear(&im);
	}
	agent_list_free(list);
	*ret = users;
	return 0;
}

static const char *state_dir(struct fleetd *f)
{
	return config_get(&f->cfg, CFG_STATE_DIR);
}

static char *image_dir(struct fleetd *f)
{
	return images_image_dir(state_dir(f), config_get(&f->cfg, CFG_IMAGE_DIR));
}

/* GET /v1/images: the stored images, which one image_dir holds now, and who uses each. */
void api_images_list(struct api_call *c)
{
	struct fleetd *f = c->fleetd;
	_cleanup_free_ char *dir = image_dir(f);
	struct image_info *v = NULL;
	char current[IMAGE_ID_LEN + 1];
	bool has_current;
	json_t *list;
	size_t n = 0;
	int r;

	if ((r = image_list(state_dir(f), &v, &n)) < 0) {
		api_error_errno(c, r, "cannot read the image store: %s", strerror(-r));
		return;
	}
	has_current = image_current(state_dir(f), dir, current) == 0;
	list = json_array();
	for (size_t i = 0; i < n; i++) {
		json_t *users = NULL;
		char imported[32];

		if ((r = image_users(f, v[i].id, &users)) < 0) {
			json_decref(list);
			image_info_free(v, n);
			api_error_errno(c, r, "cannot read which agents use the images: %s", strerror(-r));
			return;
		}
		json_array_append_new(list, json_pack("{s:s, s:s, s:s?, s:s?, s:s?, s:I, s:b, s:o}",
			"id", v[i].id,
			"imported_at", format_utc(v[i].imported_at, imported, sizeof(imported)),
			"built", v[i].built,
			"kernel", v[i].kernel,
			"agentd_sha256", v[i].agentd_sha256,
			"size_bytes", (json_int_t)v[i].size_bytes,
			"current", has_current && strcmp(current, v[i].id) == 0,
			"used_by", users));
	}
	image_info_free(v, n);
	api_reply(c, 200, json_pack("{s:s, s:o, s:o}", "image_dir", dir,
				    "current", has_current ? json_string(current) : json_null(), "images", list));
}

/* DELETE /v1/images/ID (or a unique prefix): refused while any agent uses it. */
void api_image_delete(struct api_call *c)
{
	struct fleetd *f = c->fleetd;
	_cleanup_free_ char *why = NULL, *names = NULL;
	char id[IMAGE_ID_LEN + 1];
	json_t *users = NULL, *u;
	size_t i;
	int r;

	if ((r = image_resolve(state_dir(f), c->param, id, &why)) < 0) {
		api_error_errno(c, r, "%s", why);
		return;
	}
	if ((r = image_users(f, id, &users)) < 0) {
		api_error_errno(c, r, "cannot read which agents use image sha256:%.12s: %s", id, strerror(-r));
		return;
	}
	if (json_array_size(users) > 0) {
		names = xstrdup("");
		json_array_foreach(users, i, u) {
			char *t = xasprintf("%s%s'%s' (%s)", names, i ? ", " : "",
					    json_string_value(json_object_get(u, "agent")),
					    json_string_value(json_object_get(u, "as")));
			free(names);
			names = t;
		}
		json_decref(users);
		api_error(c, 409, "in_use", "image sha256:%.12s is in use by %s; it is removed only once no agent uses it",
			  id, names);
		return;
	}
	json_decref(users);
	if ((r = image_remove(state_dir(f), id, &why)) < 0) {
		api_error_errno(c, r, "%s", why);
		return;
	}
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
	if ((r = db_agent_get(c->fleetd->db, c->param, &a)) < 0) {
		api_error_errno(c, r, "agent '%s': %s", c->param, r == -ENOENT ? "no such agent" : strerror(-r));
		return;
	}
	if (a->backend != BACKEND_VM) {
		api_error(c, 400, "invalid", "agent '%s': only vm agents have a guest image", a->name);
		return;
	}
	if (a->state == AGENT_DEFINED || a->state == AGENT_PROVISIONING) {
		api_error(c, 409, "not_provisioned", "agent '%s': its environment is not provisioned", a->name);
		return;
	}
	if ((r = vm_upgrade(c->fleetd, a, &from, &to, &why)) < 0) {
		api_error_errno(c, r, "agent '%s': cannot upgrade: %s", a->name, why ? why : strerror(-r));
		return;
	}
	api_reply(c, 200, json_pack("{s:s, s:s, s:s, s:b, s:b}", "agent", a->name, "from", from, "to", to,
				    "changed", strcmp(from, to) != 0, "running", a->state == AGENT_RUNNING));
}
