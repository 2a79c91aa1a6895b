/*
 * images: the content-addressed store of guest images.
 *
 * The image as built (images/build-image.sh --out IMAGE_DIR: vmlinuz,
 * initramfs.img, base.qcow2, manifest.json) is copied into
 * <state_dir>/images/sha256/ID/ when an agent is created from it or
 * upgraded to it. ID is the SHA-256 of what `sha256sum vmlinuz
 * initramfs.img base.qcow2` prints in IMAGE_DIR, so the same build is
 * stored once. Agents' disks and domains name the store's files, never
 * IMAGE_DIR's, so a rebuild in IMAGE_DIR changes no existing agent. A store
 * image is never written after its import (files 0444, root's); removing
 * it is the caller's decision, once no agent uses it (api_images.c).
 * No libvirt here; functions return 0 or a negative errno.
 */
#ifndef FLEET_IMAGES_H
#define FLEET_IMAGES_H

#include <stdbool.h>
#include <stddef.h>

#define IMAGE_ID_LEN 64		/* hex SHA-256 */
#define IMAGE_ID_SHORT 12	/* what listings show */

/* The image directory in effect: the configured one, or <state_dir>/images. Caller frees. */
char *images_image_dir(const char *state_dir, const char *configured);
/* <state_dir>/images/sha256/ID/FILE (FILE NULL: the directory). Caller frees. */
char *image_store_path(const char *state_dir, const char *id, const char *file);
/* 64 lower-case hex digits. */
bool image_id_valid(const char *id);

/*
 * Make sure the image now in image_dir is in the store and put its ID in
 * id. A build found already stored (same manifest.json, or same files) is
 * not copied again. -ENOENT (image missing), -EAGAIN (image_dir changed
 * while it was being copied: a build in progress) or -errno, with *why.
 */
int image_import(const char *state_dir, const char *image_dir, char id[IMAGE_ID_LEN + 1], char **why);

/* The store ID of the image now in image_dir: 0, or -ENOENT when it is not stored (or missing). */
int image_current(const char *state_dir, const char *image_dir, char id[IMAGE_ID_LEN + 1]);

struct image_info {
	char id[IMAGE_ID_LEN + 1];
	long long imported_at;		/* unix seconds */
	long long size_bytes;		/* its four files */
	char *built;			/* manifest's build_time, or NULL */
	char *kernel;			/* manifest's kernel_version, or NULL */
	char *agentd_sha256;		/* manifest's agentd_sha256, or NULL */
};

/* Every stored image, oldest import first. */
int image_list(const char *state_dir, struct image_info **ret, size_t *n);
void image_info_free(struct image_info *v, size_t n);

/* The one stored image whose ID starts with prefix (at least 4 hex digits); -ENOENT, -EINVAL, with *why. */
int image_resolve(const char *state_dir, const char *prefix, char id[IMAGE_ID_LEN + 1], char **why);

/*
 * What `fleetctl doctor` compares: the image in image_dir (its four files
 * there, and the agentd_sha256 its manifest names: *agentd_sha256, caller
 * frees; NULL when the manifest names none), and a file's SHA-256 in hex.
 * -ENOENT with *why naming the first file missing, or -errno.
 */
int image_dir_inspect(const char *image_dir, char **agentd_sha256, char **why);
int image_file_sha256(const char *path, char sum[IMAGE_ID_LEN + 1]);

/*
 * The ID of an image from its files' SHA-256 sums (hex) in the order
 * vmlinuz, initramfs.img, base.qcow2: how a copy elsewhere (a host's
 * volumes, vm/remote_disks.c) is checked against the store. 0 or -EIO.
 */
int image_id_from_sums(char sums[3][IMAGE_ID_LEN + 1], char id[IMAGE_ID_LEN + 1]);

/* Delete a stored image (the caller has checked no agent uses it). */
int image_remove(const char *state_dir, const char *id, char **why);

#endif
