/* disk_backup: see disk_backup.h. */
#include "vm/disk_backup.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "model/fleetd.h"
#include "vm/images.h"
#include "vm/virt.h"
#include "vm/vm_internal.h"

/* What is copied, where it lives: the agent's dir (vms/) or its keys (keys/). */
static const struct {
	const char *name;
	bool key, required;
} files[] = {
	{ "disk.qcow2", false, true }, { "seed.img", false, true }, { MEMDISK, false, false },
	{ "client", true, true }, { "host", true, true }, { "host.fingerprint", true, true },
};

struct vm_disk_copy {
	struct vm *vm;
	struct virt *virt;
	char *domain;
	char *uuid;
	char *paths[ARRAY_SIZE(files)];
	char **snaps;
	size_t n_snaps;
	long long paused_usec;	/* -1: not paused */
	char *resume_why;	/* the resume failed: the guest stays paused */
};

int vm_disk_copy_begin(struct fleetd *f, const char *agent, char *const *snaps, size_t n,
		       struct vm_disk_copy **ret, char **why)
{
	struct vm_backend *b = vm_backend_of(f);
	struct vm *v = vm_get(b, agent);
	struct vm_disk_copy *c;
	char uuid[64];
	int r;

	if (v->busy) {
		*why = xasprintf("agent '%s': a snapshot, restore or move is under way; back up when it is done", agent);
		return -EBUSY;
	}
	c = xcalloc(1, sizeof(*c));
	c->domain = vm_domain_name(agent);
	if ((r = virt_connect(b->virt, why)) < 0 || (r = virt_domain_uuid(b->virt, c->domain, uuid)) < 0) {
		if (!*why)
			*why = xasprintf("agent '%s': cannot read its domain %s: %s", agent, c->domain, strerror(-r));
		free(c->domain);
		free(c);
		return r;
	}
	c->vm = v;
	c->virt = b->virt;
	c->uuid = xstrdup(uuid);
	c->paused_usec = -1;
	for (size_t i = 0; i < ARRAY_SIZE(files); i++)
		c->paths[i] = files[i].key ? vm_key_path(b, agent, files[i].name) : vm_path(b, agent, files[i].name);
	c->snaps = xcalloc(n + 1, sizeof(*c->snaps));
	for (size_t i = 0; i < n; i++)
		c->snaps[i] = xstrdup(snaps[i]);
	c->n_snaps = n;
	v->busy = true;
	*ret = c;
	return 0;
}

/* Copy in_fd to out_fd keeping holes (SEEK_DATA/SEEK_HOLE), then out's size set to in's: 0 or -errno. */
static int copy_sparse(int in, int out)
{
	struct stat st;
	char buf[1 << 16];
	off_t pos = 0, end;

	if (fstat(in, &st) < 0)
		return -errno;
	while (pos < st.st_size) {
		off_t data = lseek(in, pos, SEEK_DATA);

		if (data < 0 && errno == ENXIO)
			break;	/* only a hole is left */
		if (data < 0)
			return -errno;	/* a read error is no hole: copying zeros there would lose data */
		if ((end = lseek(in, data, SEEK_HOLE)) < 0)
			return -errno;
		for (pos = data; pos < end;) {
			ssize_t n = pread(in, buf, (size_t)(end - pos < (off_t)sizeof(buf) ? end - pos : (off_t)sizeof(buf)), pos);

			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				return n < 0 ? -errno : -EIO;
			for (ssize_t w = 0; w < n;) {
				ssize_t k = pwrite(out, buf + w, (size_t)(n - w), pos + w);

				if (k < 0 && errno == EINTR)
					continue;
				if (k < 0)
					return -errno;
				w += k;
			}
			pos += n;
		}
	}
	if (ftruncate(out, st.st_size) < 0 || fsync(out) < 0)
		return -errno;
	return 0;
}

/* src (a regular file, no link followed) to a new file name in dir, 0600: 0, -ENOENT (no src) or -errno. */
static int copy_file(const char *src, int dir, const char *name)
{
	_cleanup_close_ int in = open(src, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	_cleanup_close_ int out = -1;
	struct stat st;
	int r;

	if (in < 0)
		return -errno;
	if (fstat(in, &st) < 0 || !S_ISREG(st.st_mode))
		return -EINVAL;
	if ((out = openat(dir, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600)) < 0)
		return -errno;
	if ((r = copy_sparse(in, out)) < 0)
		(void)unlinkat(dir, name, 0);
	return r;
}

int vm_disk_copy_run(struct vm_disk_copy *c, int dir, json_t *entry, json_t *names, char **why)
{
	json_t *list = json_array(), *snaps = json_array();
	enum virt_state st = VIRT_OFF;
	long long t0 = 0;
	int r = 0, rr;

	json_object_set_new(entry, "domain_uuid", json_string(c->uuid));
	json_object_set_new(entry, "vm_files", list);
	json_object_set_new(entry, "snapshots", snaps);
	/* The definitions first: the snapshots are in the qcow2, libvirt's metadata is not. */
	for (size_t i = 0; i < c->n_snaps && !r; i++) {
		char *xml = NULL;

		if ((r = virt_snapshot_xml(c->virt, c->domain, c->snaps[i], &xml, why)) < 0)
			break;
		json_array_append_new(snaps, json_pack("{s:s, s:s}", "name", c->snaps[i], "libvirt_xml", xml));
		free(xml);
	}
	if (r < 0)
		return r;
	if (virt_domain_state(c->virt, c->domain, &st) == 0 && st == VIRT_RUNNING) {
		if ((r = virt_domain_suspend(c->virt, c->domain, why)) < 0)
			return r;
		t0 = now_usec();
	}
	for (size_t i = 0; i < ARRAY_SIZE(files) && !r; i++) {
		_cleanup_free_ char *name = xasprintf("vm-%s-%s", c->vm->name, files[i].name);

		r = copy_file(c->paths[i], dir, name);
		if (r == -ENOENT && !files[i].required) {
			r = 0;	/* a memory disk is made at the first start */
			continue;
		}
		if (r < 0) {
			*why = xasprintf("cannot copy %s: %s", c->paths[i], strerror(-r));
			break;
		}
		json_array_append_new(list, json_pack("{s:s, s:s}", "file", name, "as", files[i].name));
		json_array_append_new(names, json_string(name));
	}
	/* Resumed whatever happened above. */
	if (t0) {
		c->paused_usec = now_usec() - t0;
		if ((rr = virt_domain_resume(c->virt, c->domain, &c->resume_why)) < 0) {
			if (!c->resume_why)
				c->resume_why = xstrdup(strerror(-rr));
			if (!r) {
				r = rr;
				*why = xasprintf("cannot resume its guest after the copy: %s", c->resume_why);
			}
		}
	}
	return r;
}

void vm_disk_copy_end(struct vm_disk_copy *c)
{
	if (!c)
		return;
	c->vm->busy = false;
	if (c->paused_usec >= 0)
		log_notice("agent '%s': paused %.3f s while its disks were copied for the backup", c->vm->name,
			   c->paused_usec / 1e6);
	if (c->resume_why)
		log_error("agent '%s': its guest stays paused, the resume after the backup copy failed: %s "
			  "(fleetctl restart %s)", c->vm->name, c->resume_why, c->vm->name);
	free(c->resume_why);
	for (size_t i = 0; i < ARRAY_SIZE(files); i++)
		free(c->paths[i]);
	for (size_t i = 0; i < c->n_snaps; i++)
		free(c->snaps[i]);
	free(c->snaps);
	free(c->uuid);
	free(c->domain);
	free(c);
}

/* The file of the backup named as (one of files[]) in entry's vm_files, or NULL. */
static const char *backup_name(const json_t *entry, const char *as)
{
	const json_t *e;
	size_t i;

	json_array_foreach(json_object_get(entry, "vm_files"), i, e) {
		const char *file = json_string_value(json_object_get(e, "file"));

		if (file && !strchr(file, '/') && file[0] != '.' &&
		    strcmp(json_string_value(json_object_get(e, "as")) ?: "", as) == 0)
			return file;
	}
	return NULL;
}

static int restore_file(int dir, const char *file, const char *dst)
{
	_cleanup_close_ int in = openat(dir, file, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	_cleanup_close_ int out = -1;
	struct stat st;

	if (in < 0)
		return -errno;
	if (fstat(in, &st) < 0 || !S_ISREG(st.st_mode))
		return -EINVAL;
	if ((out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600)) < 0)
		return -errno;
	return copy_sparse(in, out);
}

int vm_disk_restore(struct fleetd *f, const struct agent *a, int dir, const json_t *entry, char **why)
{
	struct vm_backend *b = vm_backend_of(f);
	_cleanup_free_ char *dom = vm_domain_name(a->name);
	_cleanup_free_ char *vdir = vm_path(b, a->name, NULL), *keys = vm_key_path(b, a->name, NULL);
	_cleanup_free_ char *xml = NULL;
	_cleanup_images_ struct agent_images im = { 0 };
	const char *uuid = json_string_value(json_object_get(entry, "domain_uuid"));
	char id[IMAGE_ID_LEN + 1];
	enum virt_state st;
	int r;

	if ((r = virt_connect(b->virt, why)) < 0)
		return -EHOSTDOWN;
	if (virt_domain_state(b->virt, dom, &st) == 0) {
		*why = xasprintf("a libvirt domain named %s already exists; fleet will not take it over", dom);
		return -EEXIST;
	}
	if (access(vdir, F_OK) == 0 || access(keys, F_OK) == 0) {
		*why = xasprintf("%s or %s already exists; remove it first", vdir, keys);
		return -EEXIST;
	}
	if ((r = vm_load_images(b, a->name, &im)) < 0 || !im.image || !im.boot_image) {
		*why = xstrdup("the database records no image for it");
		return r < 0 ? r : -ENOENT;
	}
	/* The overlay reads its recorded base: that build must be in the store (imported now if image_dir has it). */
	(void)image_import(b->state_dir, b->image_dir, id, why);
	free(*why);
	*why = NULL;
	for (int k = 0; k < 2; k++) {
		_cleanup_free_ char *p = image_store_path(b->state_dir, k ? im.boot_image : im.image, k ? "vmlinuz" : "base.qcow2");

		if (access(p, F_OK) < 0) {
			*why = xasprintf("its image sha256:%.12s is neither in the image store nor in the image directory: "
					 "put that build in image_dir (the disk is an overlay on it)", k ? im.boot_image : im.image);
			return -ENOENT;
		}
	}
	if ((r = mkdir_p(vdir, 0711)) < 0 || (r = mkdir_p(keys, 0700)) < 0 ||
	    (chmod(vdir, 0711) < 0 && (r = -errno)) || (chmod(keys, 0700) < 0 && (r = -errno))) {
		*why = xasprintf("cannot create %s: %s", vdir, strerror(-r));
		goto fail;
	}
	for (size_t i = 0; i < ARRAY_SIZE(files); i++) {
		const char *file = backup_name(entry, files[i].name);
		_cleanup_free_ char *dst = files[i].key ? vm_key_path(b, a->name, files[i].name)
							: vm_path(b, a->name, files[i].name);

		if (!file && !files[i].required)
			continue;
		if (!file) {
			*why = xasprintf("the backup has no %s of it", files[i].name);
			r = -ENOENT;
			goto fail;
		}
		if ((r = restore_file(dir, file, dst)) < 0) {
			*why = xasprintf("cannot put %s back as %s: %s", file, dst, strerror(-r));
			goto fail;
		}
	}
	if (a->network == NETWORK_NAT) {
		_cleanup_free_ char *net = vm_network_xml();
		if ((r = virt_network_ensure(b->virt, NETWORK_NAME, net, why)) < 0)
			goto fail;
	}
	/* Its old UUID: libvirt gives a snapshot's definition back only to the domain it names. */
	xml = vm_domain_xml(b, a, &im, uuid);
	if ((r = virt_domain_define(b->virt, xml, why)) < 0)
		goto fail;
	log_info("agent '%s': domain %s defined again on its restored disks", a->name, dom);
	return 0;
fail:
	vm_remove_tree(vdir);
	vm_remove_tree(keys);
	return r < 0 ? r : -EIO;
}

int vm_disk_restore_snapshot(struct fleetd *f, const struct agent *a, const char *xml, char **why)
{
	struct vm_backend *b = vm_backend_of(f);
	_cleanup_free_ char *dom = vm_domain_name(a->name);

	return virt_snapshot_redefine(b->virt, dom, xml, why);
}
