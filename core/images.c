/*
 * images (core): see images.h. The store's files are vm/images.c's and the
 * switch of a boot image vm_upgrade()'s; which agent uses which image is
 * the database's (db_agent_get_images). This file decides, the API only
 * answers.
 */
#include "core/images.h"

#include <errno.h>
#include <string.h>

#include "common/util.h"
#include "model/agent.h"
#include "model/config.h"
#include "model/fleetd.h"
#include "store/db.h"
#include "vm/backend.h"
#include "vm/images.h"

_Static_assert(FLEET_IMAGE_ID_LEN == IMAGE_ID_LEN, "core/images.h and vm/images.h agree on the ID length");

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

static void add_user(struct image_user **v, size_t *n, const char *agent, const char *as)
{
	*v = xrealloc(*v, (*n + 1) * sizeof(**v));
	(*v)[*n].agent = xstrdup(agent);
	(*v)[*n].as = as;
	(*n)++;
}

void image_users_free(struct image_user *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i].agent);
	free(v);
}

int images_users(struct fleetd *f, const char *id, struct image_user **ret, size_t *ret_n)
{
	struct agent **list = NULL;
	struct image_user *users = NULL;
	size_t n = 0, nu = 0;
	int r;

	if ((r = db_agent_list(f->db, &list, &n)) < 0)
		return r;
	for (size_t i = 0; i < n; i++) {
		struct agent_images im = { 0 };

		/* Only VM agents have a guest image; the others have no row to read. */
		if (list[i]->backend != BACKEND_VM || db_agent_get_images(f->db, list[i]->name, &im) < 0)
			continue;
		if (im.image && strcmp(im.image, id) == 0)
			add_user(&users, &nu, list[i]->name, "disk");
		if (im.boot_image && strcmp(im.boot_image, id) == 0)
			add_user(&users, &nu, list[i]->name, "boot");
		if (word_in(im.old_images, id) && has_snapshots(f, list[i]->name))
			add_user(&users, &nu, list[i]->name, "snapshots");
		agent_images_clear(&im);
	}
	agent_list_free(list);
	*ret = users;
	*ret_n = nu;
	return 0;
}

static const char *state_dir(struct fleetd *f)
{
	return config_get(&f->cfg, CFG_STATE_DIR);
}

void image_catalog_clear(struct image_catalog *cat)
{
	for (size_t i = 0; i < cat->n; i++) {
		free(cat->v[i].built);
		free(cat->v[i].kernel);
		free(cat->v[i].agentd_sha256);
		image_users_free(cat->v[i].users, cat->v[i].n_users);
	}
	free(cat->v);
	free(cat->image_dir);
	memset(cat, 0, sizeof(*cat));
}

int images_catalog(struct fleetd *f, struct image_catalog *ret, char **why)
{
	struct image_catalog cat = { 0 };
	struct image_info *v = NULL;
	size_t n = 0;
	int r;

	if ((r = image_list(state_dir(f), &v, &n)) < 0) {
		*why = xasprintf("cannot read the image store: %s", strerror(-r));
		return r;
	}
	cat.image_dir = images_image_dir(state_dir(f), config_get(&f->cfg, CFG_IMAGE_DIR));
	cat.has_current = image_current(state_dir(f), cat.image_dir, cat.current) == 0;
	cat.v = xcalloc(n ? n : 1, sizeof(*cat.v));
	for (size_t i = 0; i < n; i++) {
		struct image_entry *e = &cat.v[cat.n++];

		memcpy(e->id, v[i].id, sizeof(e->id));
		e->imported_at = v[i].imported_at;
		e->size_bytes = v[i].size_bytes;
		e->built = v[i].built ? xstrdup(v[i].built) : NULL;
		e->kernel = v[i].kernel ? xstrdup(v[i].kernel) : NULL;
		e->agentd_sha256 = v[i].agentd_sha256 ? xstrdup(v[i].agentd_sha256) : NULL;
		e->current = cat.has_current && strcmp(cat.current, e->id) == 0;
		if ((r = images_users(f, e->id, &e->users, &e->n_users)) < 0) {
			image_info_free(v, n);
			image_catalog_clear(&cat);
			*why = xasprintf("cannot read which agents use the images: %s", strerror(-r));
			return r;
		}
	}
	image_info_free(v, n);
	*ret = cat;
	return 0;
}

int images_remove(struct fleetd *f, const char *prefix, char id[FLEET_IMAGE_ID_LEN + 1], char **why)
{
	struct image_user *users = NULL;
	size_t n = 0;
	int r;

	if ((r = image_resolve(state_dir(f), prefix, id, why)) < 0)
		return r;
	if ((r = images_users(f, id, &users, &n)) < 0) {
		*why = xasprintf("cannot read which agents use image sha256:%.12s: %s", id, strerror(-r));
		return r;
	}
	if (n > 0) {
		char *names = xstrdup("");

		for (size_t i = 0; i < n; i++) {
			char *t = xasprintf("%s%s'%s' (%s)", names, i ? ", " : "", users[i].agent, users[i].as);

			free(names);
			names = t;
		}
		image_users_free(users, n);
		*why = xasprintf("image sha256:%.12s is in use by %s; it is removed only once no agent uses it",
				 id, names);
		free(names);
		return -ETXTBSY;
	}
	return image_remove(state_dir(f), id, why);
}

int images_upgrade_target(struct fleetd *f, const char *name, struct agent **ret, char **why)
{
	struct agent *a = NULL;
	int r;

	if ((r = db_agent_get(f->db, name, &a)) < 0) {
		*why = xasprintf("agent '%s': %s", name, r == -ENOENT ? "no such agent" : strerror(-r));
		return r;
	}
	if (a->backend != BACKEND_VM) {
		*why = xasprintf("agent '%s': only vm agents have a guest image", a->name);
		agent_free(a);
		return -EINVAL;
	}
	if (a->state == AGENT_DEFINED || a->state == AGENT_PROVISIONING) {
		*why = xasprintf("agent '%s': its environment is not provisioned", a->name);
		agent_free(a);
		return -EAGAIN;
	}
	*ret = a;
	return 0;
}

int images_upgrade(struct fleetd *f, const struct agent *a, char **from, char **to, char **why)
{
	_cleanup_free_ char *vm_why = NULL;
	int r;

	if (a->backend != BACKEND_VM) {
		*why = xasprintf("agent '%s': only vm agents have a guest image", a->name);
		return -EINVAL;
	}
	if ((r = vm_upgrade(f, a, from, to, &vm_why)) < 0)
		*why = xasprintf("agent '%s': cannot upgrade: %s", a->name, vm_why ? vm_why : strerror(-r));
	return r;
}
