/*
 * core/backend_host.c, fleet's side of struct backend_host, on a real database file:
 * what a backend reads and writes through it (an agent's image record, the
 * agents of its kind) is what the store holds, and it reports to the
 * lifecycle owner.
 */
#include <errno.h>
#include <stdlib.h>

#include "core/backend_host.h"
#include "core/lifecycle.h"
#include "model/fleetd.h"
#include "store/db.h"
#include "common/util.h"
#include "../tap.h"

static void add(struct db *db, const char *name, enum backend_kind kind)
{
	struct agent a = { .name = (char *)name, .backend = kind, .state = AGENT_STOPPED, .memory_mib = 256,
			   .vcpus = 1, .disk_gib = 2 };

	is_int(db_agent_insert(db, &a), 0, "insert %s (%s)", name, backend_kind_to_string(kind));
}

int main(void)
{
	char dir[] = "/tmp/fleet-test-host-XXXXXX";
	const struct backend_host *h = &core_backend_host;
	struct fleetd f = { 0 };
	struct agent **list = NULL;
	struct agent_images im = { 0 };
	char *path;

	if (!mkdtemp(dir))
		return 1;
	path = xasprintf("%s/fleet.db", dir);
	is_int(db_open(path, &f.db), 0, "open a fresh database");

	ok(h->on_event == lifecycle_on_event, "what a backend reports goes to the lifecycle owner");

	is_int(h->list_agents(&f, BACKEND_VM, &list), 0, "list VM agents of an empty fleet");
	ok(list && !list[0], "an empty, NULL-terminated list");
	agent_list_free(list);

	add(f.db, "hv-b", BACKEND_VM);
	add(f.db, "hu-a", BACKEND_USER);
	add(f.db, "hv-a", BACKEND_VM);
	add(f.db, "hu-c", BACKEND_USER);
	list = NULL;
	is_int(h->list_agents(&f, BACKEND_VM, &list), 0, "list VM agents");
	ok(list && list[0] && list[1] && !list[2], "two of them");
	if (list && list[0] && list[1]) {
		is_str(list[0]->name, "hv-a", "by name: hv-a");
		is_str(list[1]->name, "hv-b", "then hv-b");
		ok(list[0]->backend == BACKEND_VM && list[1]->backend == BACKEND_VM, "both VM agents");
	}
	agent_list_free(list);
	list = NULL;
	is_int(h->list_agents(&f, BACKEND_USER, &list), 0, "list user agents");
	ok(list && list[0] && list[1] && !list[2], "the other two");
	if (list && list[0] && list[1]) {
		is_str(list[0]->name, "hu-a", "hu-a");
		is_str(list[1]->name, "hu-c", "hu-c");
	}
	agent_list_free(list);

	is_int(h->get_images(&f, "nobody", &im), -ENOENT, "no image record for an unknown agent");
	is_int(h->get_images(&f, "hv-a", &im), 0, "read hv-a's image record");
	ok(!im.image && !im.boot_image && !im.old_images, "none recorded yet");
	im = (struct agent_images){ .image = "1111", .boot_image = "2222", .old_images = "3333 4444" };
	is_int(h->set_images(&f, "hv-a", &im), 0, "record hv-a's images");
	im = (struct agent_images){ 0 };
	is_int(h->get_images(&f, "hv-a", &im), 0, "read them back");
	is_str(im.image, "1111", "image");
	is_str(im.boot_image, "2222", "boot image");
	is_str(im.old_images, "3333 4444", "old images");
	agent_images_clear(&im);
	ok(!im.image && !im.boot_image && !im.old_images, "agent_images_clear empties the record");
	is_int(db_agent_get_images(f.db, "hv-b", &im), 0, "hv-b's record, straight from the store");
	ok(!im.image, "is untouched");
	agent_images_clear(&im);

	db_close(f.db);
	free(path);
	path = xasprintf("rm -rf %s", dir);
	if (system(path) != 0)
		return 1;
	free(path);
	return tap_done();
}
