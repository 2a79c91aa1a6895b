/* etc_overlay: see etc_overlay.h. */
#include "etc_overlay.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "model/config.h"

const char *etc_overlay_enter(struct etc_overlay *o, const char *tag, long uid_base, const char *const *tools)
{
	_cleanup_free_ char *upper = NULL, *work = NULL, *opts = NULL;

	memset(o, 0, sizeof(*o));
	if (geteuid() != 0)
		return "needs root (creates users, mounts an overlay on /etc)";
	for (const char *const *t = tools; t && *t; t++) {
		_cleanup_free_ char *p = xasprintf("/usr/sbin/%s", *t);

		if (access(p, X_OK) < 0)
			return "a shadow tool (useradd, usermod, userdel, groupadd) is missing";
	}
	snprintf(o->etc_dir, sizeof(o->etc_dir), "/tmp/fleet-%s-etc-XXXXXX", tag);
	snprintf(o->state_dir, sizeof(o->state_dir), "/tmp/fleet-%s-XXXXXX", tag);
	if (!mkdtemp(o->etc_dir))
		return "cannot make a temporary directory";
	if (!mkdtemp(o->state_dir)) {
		rmdir(o->etc_dir);
		return "cannot make a temporary directory";
	}
	upper = xasprintf("%s/upper", o->etc_dir);
	work = xasprintf("%s/work", o->etc_dir);
	opts = xasprintf("lowerdir=/etc,upperdir=%s,workdir=%s", upper, work);
	/* Our own mount namespace: the overlay, and everything the tools write, goes with the process. */
	if (mkdir(upper, 0755) < 0 || mkdir(work, 0755) < 0 || unshare(CLONE_NEWNS) < 0 ||
	    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 || mount("overlay", "/etc", "overlay", 0, opts) < 0) {
		rmdir(upper);
		rmdir(work);
		rmdir(o->etc_dir);
		rmdir(o->state_dir);
		return "cannot mount an overlay on /etc in a mount namespace of our own";
	}
	o->mounted = 1;
	(void)chmod(o->state_dir, 0711);
	o->uid_min = uid_base + 100 * (long)(getpid() % 500);
	return NULL;
}

int etc_overlay_config(struct etc_overlay *o, struct config *cfg)
{
	_cleanup_free_ char *smin = xasprintf("%ld", o->uid_min), *smax = xasprintf("%ld", o->uid_min + 99);
	const char *why = NULL;

	config_init(cfg);
	if (config_set(cfg, CFG_STATE_DIR, o->state_dir, CFG_FROM_CMDLINE, 0, &why) < 0 ||
	    config_set(cfg, CFG_USER_UID_MIN, smin, CFG_FROM_CMDLINE, 0, &why) < 0 ||
	    config_set(cfg, CFG_USER_UID_MAX, smax, CFG_FROM_CMDLINE, 0, &why) < 0) {
		printf("Bail out! cannot set the state dir and the uid range: %s\n", why ? why : "unknown key");
		etc_overlay_leave(o);
		return -1;
	}
	return 0;
}

void etc_overlay_leave(struct etc_overlay *o)
{
	_cleanup_free_ char *cmd = NULL;

	if (!o->mounted)
		return;
	/* The overlay goes with this namespace; its upper layer and the state dir are ours to remove. */
	(void)umount2("/etc", MNT_DETACH);
	cmd = xasprintf("rm -rf --one-file-system -- '%s' '%s'", o->etc_dir, o->state_dir);
	(void)!system(cmd);
	o->mounted = 0;
}
