/*
 * remote_disks: a VM agent's disks on a host other than local (#15,
 * docs/multi-host.md), through libvirt's storage API only. On each such host
 * a `dir` pool named fleet (host_pool_dir) holds:
 *   image-ID.vmlinuz, image-ID.initramfs.img, image-ID.base.qcow2
 *       the stored image ID's files, uploaded once per host;
 *   image-ID.complete
 *       written last, once the three arrived whole and hashed to ID: without
 *       it (an upload cut short by a kill) the others are deleted and sent again;
 *   agent-NAME.disk.qcow2   the agent's overlay, backed by image-ID.base.qcow2;
 *   agent-NAME.seed.img     its seed disk (provision.c writes it on fleetd's host);
 *   agent-NAME.memory.qcow2 its memory disk (vdc): made on fleetd's host and uploaded at
 *                           create (provision.c), or brought by a move (move.c).
 * The local host keeps its files under state_dir as before (provision.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "model/fleetd.h"
#include "vm/images.h"
#include "vm/vm_internal.h"

static const char *const image_files[3] = { "vmlinuz", "initramfs.img", "base.qcow2" };	/* image_id_from_sums' order */

static char *image_vol(const char *id, const char *file)
{
	return xasprintf("image-%s.%s", id, file);
}

char *vm_remote_agent_vol(const char *agent, const char *file)
{
	return xasprintf("agent-%s.%s", agent, file);
}

static const char *pool_dir(struct vm_backend *b)
{
	return config_get(&b->f->cfg, CFG_HOST_POOL_DIR);
}

static void delete_quiet(struct virt *v, const char *vol)
{
	_cleanup_free_ char *why = NULL;
	int r = virt_vol_delete(v, VM_POOL, vol, &why);

	if (r < 0 && r != -ENOENT)
		log_warning("vm backend: %s: %s", virt_uri(v), why ? why : strerror(-r));
}

/* A missing volume is an answer here (0), not an error. */
static int vol_size(struct virt *v, const char *vol, long long *size, char **why)
{
	int r = virt_vol_size(v, VM_POOL, vol, size, why);

	if (r == -ENOENT) {
		free(*why);
		*why = NULL;
		return 0;
	}
	return r < 0 ? r : 1;
}

/* 1: the image's three volumes are there, each as large as the store's file; 0: not; -errno. */
static int image_sizes_match(struct vm_backend *b, struct virt *v, const char *id, char **why)
{
	for (size_t i = 0; i < ARRAY_SIZE(image_files); i++) {
		_cleanup_free_ char *vol = image_vol(id, image_files[i]);
		_cleanup_free_ char *path = image_store_path(b->state_dir, id, image_files[i]);
		long long size;
		struct stat st;
		int r;

		if (stat(path, &st) < 0) {
			r = -errno;
			*why = xasprintf("cannot stat %s: %s", path, strerror(-r));
			return r;
		}
		if ((r = vol_size(v, vol, &size, why)) <= 0)
			return r;
		if (size != (long long)st.st_size)
			return 0;
	}
	return 1;
}

/* 1: the image is complete there (its marker, and the sizes); 0: not; -errno. */
static int image_there(struct vm_backend *b, struct virt *v, const char *id, char **why)
{
	_cleanup_free_ char *done = image_vol(id, "complete");
	long long size;
	int r;

	if ((r = vol_size(v, done, &size, why)) <= 0)
		return r;
	return image_sizes_match(b, v, id, why);
}

static void md_update(void *userdata, const void *data, size_t len)
{
	(void)EVP_DigestUpdate(userdata, data, len);
}

/* Upload one store file as vol; its SHA-256 (of the bytes sent) into sum. */
static int upload_file(struct virt *v, const char *path, const char *vol, char sum[IMAGE_ID_LEN + 1], char **why)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	struct stat st;
	int r;

	if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		r = fd < 0 ? -errno : -EINVAL;
		*why = xasprintf("cannot open %s: %s", path, strerror(-r));
		EVP_MD_CTX_free(ctx);
		return r;
	}
	if (!ctx || !EVP_DigestInit_ex(ctx, EVP_sha256(), NULL)) {
		EVP_MD_CTX_free(ctx);
		return -ENOMEM;
	}
	r = virt_vol_upload(v, VM_POOL, vol, fd, (long long)st.st_size, md_update, ctx, why);
	if (r == 0 && (!EVP_DigestFinal_ex(ctx, md, &mdlen) || mdlen != IMAGE_ID_LEN / 2))
		r = -EIO;
	EVP_MD_CTX_free(ctx);
	for (unsigned int i = 0; r == 0 && i < mdlen; i++)
		snprintf(sum + 2 * i, 3, "%02x", md[i]);
	return r;
}

/* The marker, written last: a small volume holding the ID (its name already says it). */
static int upload_marker(struct virt *v, const char *id, char **why)
{
	_cleanup_free_ char *vol = image_vol(id, "complete"), *text = xasprintf("sha256:%s\n", id);
	_cleanup_close_ int fd = memfd_create("fleet-image-complete", MFD_CLOEXEC);

	if (fd < 0 || write_all(fd, text, strlen(text)) < 0 || lseek(fd, 0, SEEK_SET) < 0) {
		int r = -errno;
		*why = xasprintf("cannot stage the image's marker: %s", strerror(-r));
		return r;
	}
	return virt_vol_upload(v, VM_POOL, vol, fd, (long long)strlen(text), NULL, NULL, why);
}

int vm_remote_image(struct vm_backend *b, struct virt *v, const char *id, char **why)
{
	char sums[3][IMAGE_ID_LEN + 1], got[IMAGE_ID_LEN + 1];
	_cleanup_free_ char *done = image_vol(id, "complete");
	int r;

	if ((r = virt_pool_ensure(v, VM_POOL, pool_dir(b), why)) < 0)
		return r;
	if ((r = image_there(b, v, id, why)) != 0)
		return r < 0 ? r : 0;
	/* Whatever is there under these names is not known good: an upload cut short, or older. */
	delete_quiet(v, done);
	for (size_t i = 0; i < ARRAY_SIZE(image_files); i++) {
		_cleanup_free_ char *vol = image_vol(id, image_files[i]);
		delete_quiet(v, vol);
	}
	log_info("vm backend: uploading image sha256:%.12s to %s (pool " VM_POOL ")", id, virt_uri(v));
	for (size_t i = 0; i < ARRAY_SIZE(image_files); i++) {
		_cleanup_free_ char *vol = image_vol(id, image_files[i]);
		_cleanup_free_ char *path = image_store_path(b->state_dir, id, image_files[i]);

		if ((r = upload_file(v, path, vol, sums[i], why)) < 0)
			goto fail;
	}
	/* What was sent must be the image: a store file changed under us is not sent as it. */
	if ((r = image_id_from_sums(sums, got)) < 0 || strcmp(got, id) != 0) {
		*why = xasprintf("the image uploaded to %s hashes to sha256:%.12s, not sha256:%.12s", virt_uri(v), got, id);
		r = -EIO;
		goto fail;
	}
	if ((r = image_sizes_match(b, v, id, why)) <= 0 || (r = upload_marker(v, id, why)) < 0) {
		if (r == 0)
			*why = xasprintf("the image's volumes on %s are not the size uploaded", virt_uri(v));
		goto fail;
	}
	log_info("vm backend: image sha256:%.12s is on %s", id, virt_uri(v));
	return 0;
fail:
	for (size_t i = 0; i < ARRAY_SIZE(image_files); i++) {
		_cleanup_free_ char *vol = image_vol(id, image_files[i]);
		delete_quiet(v, vol);
	}
	return r < 0 ? r : -EIO;
}

int vm_remote_upload_fd(struct virt *v, const char *agent, const char *file, int fd, char **why)
{
	_cleanup_free_ char *vol = vm_remote_agent_vol(agent, file);
	struct stat st;
	int r;

	if (fstat(fd, &st) < 0) {
		r = -errno;
		*why = xasprintf("cannot upload %s: %s", vol, strerror(-r));
		return r;
	}
	if (!S_ISREG(st.st_mode)) {
		*why = xasprintf("cannot upload %s: not a regular file", vol);
		return -EINVAL;
	}
	delete_quiet(v, vol);
	return virt_vol_upload(v, VM_POOL, vol, fd, (long long)st.st_size, NULL, NULL, why);
}

/* Upload the local file path as the agent's volume file (a new volume: a leftover of that name is replaced). */
static int upload_agent_file(struct virt *v, const char *agent, const char *file, const char *path, char **why)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	int r;

	if (fd < 0) {
		r = -errno;
		*why = xasprintf("cannot open %s: %s", path, strerror(-r));
		return r;
	}
	return vm_remote_upload_fd(v, agent, file, fd, why);
}

int vm_remote_disks_make(struct vm_backend *b, struct virt *v, const struct agent *a, const char *id,
			 const char *seed, const char *memdisk, char **why)
{
	_cleanup_free_ char *base_vol = image_vol(id, "base.qcow2"), *base = NULL;
	_cleanup_free_ char *disk = vm_remote_agent_vol(a->name, "disk.qcow2");
	int r;

	if ((r = vm_remote_image(b, v, id, why)) < 0 || (r = virt_vol_path(v, VM_POOL, base_vol, &base, why)) < 0)
		return r;
	if ((r = virt_vol_overlay(v, VM_POOL, disk, base, (long long)a->disk_gib << 30, why)) < 0)
		return r;
	if ((r = upload_agent_file(v, a->name, "seed.img", seed, why)) < 0 ||
	    (memdisk && (r = upload_agent_file(v, a->name, MEMDISK, memdisk, why)) < 0)) {
		vm_remote_disks_remove(v, a->name);
		return r;
	}
	return 0;
}

int vm_remote_refuse(const struct agent *a, const char *what, char **why)
{
	if (!vm_agent_remote(a))
		return 0;
	if (why)
		*why = xasprintf("%s of an agent on another host (%s) is not built yet (docs/multi-host.md)", what, a->host);
	return -EOPNOTSUPP;
}

void vm_remote_disks_remove(struct virt *v, const char *agent)
{
	_cleanup_free_ char *disk = vm_remote_agent_vol(agent, "disk.qcow2");
	_cleanup_free_ char *seed = vm_remote_agent_vol(agent, "seed.img");
	_cleanup_free_ char *memdisk = vm_remote_agent_vol(agent, MEMDISK);

	delete_quiet(v, disk);
	delete_quiet(v, seed);
	delete_quiet(v, memdisk);
}

int vm_remote_image_path(struct virt *v, const char *id, const char *file, char **ret, char **why)
{
	_cleanup_free_ char *vol = image_vol(id, file);

	return virt_vol_path(v, VM_POOL, vol, ret, why);
}

int vm_remote_files(struct vm_backend *b, struct virt *v, const struct agent *a, const char *id,
		    struct vm_domain_files *ret, char **why)
{
	_cleanup_free_ char *kernel = image_vol(id, "vmlinuz"), *initrd = image_vol(id, "initramfs.img");
	_cleanup_free_ char *base = image_vol(id, "base.qcow2");
	_cleanup_free_ char *disk = vm_remote_agent_vol(a->name, "disk.qcow2");
	_cleanup_free_ char *seed = vm_remote_agent_vol(a->name, "seed.img");
	int r;

	*ret = (struct vm_domain_files){ 0 };
	if ((r = virt_vol_path(v, VM_POOL, kernel, &ret->kernel, why)) < 0 ||
	    (r = virt_vol_path(v, VM_POOL, initrd, &ret->initrd, why)) < 0 ||
	    (r = virt_vol_path(v, VM_POOL, base, &ret->backing, why)) < 0 ||
	    (r = virt_vol_path(v, VM_POOL, disk, &ret->disk, why)) < 0 ||
	    (r = virt_vol_path(v, VM_POOL, seed, &ret->seed, why)) < 0) {
		vm_domain_files_clear(ret);
		return r;
	}
	/* Its memory disk, if it has one there (every agent made or moved there since they have one). */
	{
		_cleanup_free_ char *memdisk = vm_remote_agent_vol(a->name, MEMDISK);

		if ((r = virt_vol_path(v, VM_POOL, memdisk, &ret->memdisk, why)) < 0 && r != -ENOENT) {
			vm_domain_files_clear(ret);
			return r;
		}
		if (r == -ENOENT) {
			free(*why);
			*why = NULL;
		}
	}
	/* KVM where that host's libvirt offers it and it was not found to run no guest (channel.c). */
	ret->domain_type = vm_host_domain_type(b, a->host, v);
	ret->remote_nat = a->network == NETWORK_NAT;
	return 0;
}

int vm_remote_domain_xml(struct vm_backend *b, struct virt *v, const struct agent *a, const char *image,
			 const char *boot_image, const char *uuid, char **ret, char **why)
{
	struct vm_domain_files files;
	int r;

	/* Its memory disk's volume, if it has one there, is named too. */
	if ((r = vm_remote_files(b, v, a, image, &files, why)) < 0)
		return r;
	/* An upgrade boots another image's kernel and initramfs; the disk stays on the base it was made on. */
	if (boot_image && strcmp(boot_image, image) != 0) {
		free(files.kernel);
		free(files.initrd);
		files.kernel = files.initrd = NULL;
		if ((r = vm_remote_image_path(v, boot_image, "vmlinuz", &files.kernel, why)) < 0 ||
		    (r = vm_remote_image_path(v, boot_image, "initramfs.img", &files.initrd, why)) < 0) {
			vm_domain_files_clear(&files);
			return r;
		}
	}
	*ret = vm_domain_xml_files(b, a, &files, uuid);
	vm_domain_files_clear(&files);
	return 0;
}
