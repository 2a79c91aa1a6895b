/*
 * api_backup: POST /v1/backup {"dir", "passphrase", "with_disks"}: the work
 * is core/backup.c's; the passphrase lives only in the body, never in a
 * path, reply, log or audit record.
 */
#include "api/backup.h"

#include <errno.h>
#include <string.h>

#include "api/server.h"
#include "common/util.h"
#include "core/backup.h"

static void backed_up(void *userdata, int r, const char *why, const json_t *manifest)
{
	struct api_call *d = userdata;

	if (r < 0) {
		api_error(d, r == -ENOSPC ? 507 : 500, r == -ENOSPC ? "no_space" : "backup_failed", "%s", why);
		return;
	}
	api_reply(d, 200, json_deep_copy(manifest));
}

void api_backup_create(struct api_call *c)
{
	static const char *const spec[] = { "dir:s", "passphrase:s", "with_disks:b", NULL };
	_cleanup_free_ char *why = NULL;
	json_t *body = api_body_object(c, spec);
	const char *dir, *pass;
	struct api_call *d;
	int r;

	if (!body)
		return;
	dir = json_string_value(json_object_get(body, "dir"));
	pass = json_string_value(json_object_get(body, "passphrase"));
	if (!dir || !pass) {
		json_decref(body);
		api_error(c, 400, "invalid", "dir and passphrase are required");
		return;
	}
	c->target = dir;	/* the audit's: where it went */
	d = api_defer(c);
	r = backup_start(d->fleetd, dir, pass, json_string_length(json_object_get(body, "passphrase")),
			 json_is_true(json_object_get(body, "with_disks")), backed_up, d, &why);
	json_decref(body);
	if (r == 0)
		return;
	switch (r) {
	case -EINVAL: api_error(d, 400, "invalid", "%s", why); break;
	case -EEXIST: api_error(d, 409, "exists", "%s", why); break;
	case -EBUSY: api_error(d, 409, "busy", "%s", why); break;
	case -ENODEV: api_error(d, 503, "unavailable", "%s", why); break;
	default: api_error_errno(d, r, "%s", why ? why : strerror(-r)); break;
	}
}
