/*
 * images (core): the guest image store as the API sees it, above the VM
 * backend that keeps it (vm/images.c) and boots it (vm_upgrade): which
 * images are stored, who uses each, removing one nobody uses, and moving an
 * agent to the image now in image_dir. An image is in use while an agent's
 * disk is backed by it, while an agent boots it, and while an agent that
 * booted it before has snapshots (their saved domain definitions name its
 * kernel). An image in use is never removed.
 */
#ifndef FLEET_CORE_IMAGES_H
#define FLEET_CORE_IMAGES_H

#include <stdbool.h>
#include <stddef.h>

struct agent;
struct fleetd;

#define FLEET_IMAGE_ID_LEN 64	/* hex SHA-256, as vm/images.h's IMAGE_ID_LEN */

/* One agent's use of an image; as is "disk", "boot" or "snapshots" (static). */
struct image_user {
	char *agent;
	const char *as;
};

struct image_entry {
	char id[FLEET_IMAGE_ID_LEN + 1];
	long long imported_at;		/* unix seconds */
	long long size_bytes;
	char *built, *kernel, *agentd_sha256;	/* from its manifest, or NULL */
	bool current;			/* the image image_dir holds now */
	struct image_user *users;
	size_t n_users;
};

struct image_catalog {
	char *image_dir;		/* the image directory in effect */
	bool has_current;		/* image_dir's image is stored: current is its ID */
	char current[FLEET_IMAGE_ID_LEN + 1];
	struct image_entry *v;		/* oldest import first */
	size_t n;
};

/* Every stored image and its users: 0, or -errno with *why (caller frees). */
int images_catalog(struct fleetd *f, struct image_catalog *ret, char **why);
void image_catalog_clear(struct image_catalog *cat);

/* The agents using image id (*ret, free with image_users_free); -errno. */
int images_users(struct fleetd *f, const char *id, struct image_user **ret, size_t *n);
void image_users_free(struct image_user *v, size_t n);

/*
 * Remove the stored image prefix names (its ID or a unique prefix; the
 * full ID into id). 0, -ETXTBSY when an agent uses it (*why names them),
 * or -errno (-ENOENT, -EINVAL: no such image or an ambiguous prefix) with
 * *why (caller frees).
 */
int images_remove(struct fleetd *f, const char *prefix, char id[FLEET_IMAGE_ID_LEN + 1], char **why);

/*
 * The agent whose guest image may be upgraded (*ret, the caller frees it).
 * -errno with *why (caller frees): -ENOENT no such agent, -EINVAL its
 * backend has no guest image, -EAGAIN its environment is not provisioned.
 */
int images_upgrade_target(struct fleetd *f, const char *name, struct agent **ret, char **why);

/*
 * Make a (from images_upgrade_target) boot the image now in image_dir from
 * its next start on; *from and *to (caller frees) are its boot image's IDs
 * before and after (equal: no change). -errno with *why (caller frees).
 */
int images_upgrade(struct fleetd *f, const struct agent *a, char **from, char **to, char **why);

#endif
