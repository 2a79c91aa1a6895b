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
#include "vm/snapshot_rehome.h"
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
	struct virt *virt;		/* its host's connection */
	bool remote;			/* its disks are volumes in that host's pool (remote_disks.c), its keys here */
	char *domain;
	char *uuid;
	char *paths[ARRAY_SIZE(files)];
	char **snaps;
	size_t n_snaps;
	char *pause_record;	/* BACKUP_PAUSED: kept while the guest is paused, for a fleetd killed meanwhile */
	long long paused_usec;	/* -1: not paused */
	char *resume_why;	/* the resume failed: the guest stays paused */
};

int vm_disk_copy_begin(struct fleetd *f, const struct agent *a, char *const *snaps, size_t n,
		       struct vm_disk_copy **ret, char **why)
{
	struct vm_backend *b = vm_backend_of(f);
	struct vm *v = vm_get(b, a->name);
	struct virt *virt;
	struct vm_disk_copy *c;
	char uuid[64];
	int r;

	if (v->busy) {
		*why = xasprintf("agent '%s': a snapshot, restore or move is under way; back up when it is done", a->name);
		return -EBUSY;
	}
	if (!(virt = vm_agent_virt(b, a, why)))
		return -EHOSTDOWN;
	c = xcalloc(1, sizeof(*c));
	c->domain = vm_domain_name(a->name);
	if ((r = virt_connect(virt, why)) < 0 || (r = virt_domain_uuid(virt, c->domain, uuid)) < 0) {
		if (!*why)
			*why = xasprintf("agent '%s': cannot read its domain %s: %s", a->name, c->domain, strerror(-r));
		else if (r < 0 && vm_agent_remote(a)) {
			char *inner = *why;
			*why = xasprintf("agent '%s': cannot reach its host %s: %s", a->name, a->host, inner);
			free(inner);
		}
		free(c->domain);
		free(c);
		return r;
	}
	c->vm = v;
	c->virt = virt;
	c->remote = vm_agent_remote(a);
	c->uuid = xstrdup(uuid);
	c->paused_usec = -1;
	c->pause_record = vm_path(b, a->name, BACKUP_PAUSED);
	for (size_t i = 0; i < ARRAY_SIZE(files); i++)
		c->paths[i] = files[i].key ? vm_key_path(b, a->name, files[i].name) : vm_path(b, a->name, files[i].name);
	c->snaps = xcalloc(n + 1, sizeof(*c->snaps));
	for (size_t i = 0; i < n; i++)
		c->snaps[i] = xstrdup(snaps[i]);
	c->n_snaps = n;
	v->busy = true;
	b->jobs++;	/* vm_shutdown frees nothing of c's while core/backup.c's worker copies */
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

/*
 * The agent's volume file on its host to a new file name in dir, 0600,
 * through libvirt (virStorageVolDownload, bounded chunks, holes kept):
 * 0, -ENOENT (no such volume: *why NULL) or -errno with *why.
 */
static int download_file(struct vm_disk_copy *c, int dir, const char *name, const char *file, char **why)
{
	_cleanup_free_ char *vol = vm_remote_agent_vol(c->vm->name, file);
	_cleanup_close_ int out = -1;
	long long size;
	int r;

	if ((r = virt_vol_size(c->virt, VM_POOL, vol, &size, why)) < 0) {
		if (r == -ENOENT) {
			free(*why);
			*why = NULL;
		}
		return r;
	}
	if ((out = openat(dir, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600)) < 0) {
		r = -errno;
		*why = xasprintf("cannot create %s: %s", name, strerror(-r));
		return r;
	}
	if ((r = virt_vol_download(c->virt, VM_POOL, vol, out, why)) == 0 && fsync(out) < 0) {
		r = -errno;
		*why = xasprintf("cannot sync %s: %s", name, strerror(-r));
	}
	if (r < 0)
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
		/* Written before the pause: a fleetd killed during the copy resumes the guest at its next start. */
		if ((r = vm_write_text(c->pause_record, "paused for a backup copy\n", 0600)) < 0) {
			*why = xasprintf("cannot write %s: %s", c->pause_record, strerror(-r));
			return r;
		}
		if ((r = virt_domain_suspend(c->virt, c->domain, why)) < 0) {
			(void)unlink(c->pause_record);
			return r;
		}
		t0 = now_usec();
	}
	for (size_t i = 0; i < ARRAY_SIZE(files) && !r; i++) {
		_cleanup_free_ char *name = xasprintf("vm-%s-%s", c->vm->name, files[i].name), *err = NULL;

		/* A remote agent's disks are volumes on its host; its keys (and a copy of its seed) are here. */
		if (c->remote && !files[i].key)
			r = download_file(c, dir, name, files[i].name, &err);
		else
			r = copy_file(c->paths[i], dir, name);
		if (r == -ENOENT && !files[i].required) {
			r = 0;	/* a memory disk is made at the first start */
			continue;
		}
		if (r < 0) {
			if (c->remote && !files[i].key) {
				_cleanup_free_ char *vol = vm_remote_agent_vol(c->vm->name, files[i].name);
				*why = xasprintf("cannot copy volume %s from %s: %s", vol, virt_uri(c->virt),
						 err ? err : strerror(-r));
			} else
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
		} else
			(void)unlink(c->pause_record);	/* a failed resume keeps it: the next start tries again */
	}
	return r;
}

void vm_disk_copy_end(struct vm_disk_copy *c)
{
	if (!c)
		return;
	c->vm->busy = false;
	c->vm->b->jobs--;
	if (c->paused_usec >= 0)
		log_notice("agent '%s': paused %.3f s while its disks were copied for the backup", c->vm->name,
			   c->paused_usec / 1e6);
	if (c->resume_why)
		log_error("agent '%s': its guest stays paused, the resume after the backup copy failed: %s "
			  "(fleetctl restart %s)", c->vm->name, c->resume_why, c->vm->name);
	free(c->resume_why);
	free(c->pause_record);
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

/*
 * A remote agent's disks from the backup's dir to volumes of its host's
 * pool (its image uploaded there first, once), its overlay rebased on that
 * host's base volume in a staged copy here, then its domain defined there
 * with uuid; its seed and keys are put back here by the caller first. What
 * reached the host goes again on failure. -errno with *why.
 */
static int restore_remote(struct vm_backend *b, struct virt *v, const struct agent *a, int dir, const json_t *entry,
			  const struct agent_images *im, const char *uuid, char **why)
{
	_cleanup_free_ char *stage = vm_path(b, a->name, "disk.qcow2.restore"), *base = NULL, *xml = NULL;
	_cleanup_free_ char *seed = vm_path(b, a->name, "seed.img");
	const char *disk = backup_name(entry, "disk.qcow2"), *memdisk = backup_name(entry, MEMDISK);
	int r;

	if ((r = vm_remote_image(b, v, im->image, why)) < 0 ||
	    (strcmp(im->boot_image, im->image) != 0 && (r = vm_remote_image(b, v, im->boot_image, why)) < 0) ||
	    (r = vm_remote_image_path(v, im->image, "base.qcow2", &base, why)) < 0)
		return r;
	/* The overlay's header names its base by path: that host's volume, written here before it travels. */
	const char *const rebase[] = { "qemu-img", "rebase", "-q", "-u", "-f", "qcow2", "-F", "qcow2", "-b", base, stage, NULL };
	if ((r = restore_file(dir, disk, stage)) < 0) {
		*why = xasprintf("cannot stage %s as %s: %s", disk, stage, strerror(-r));
		goto fail;
	}
	if ((r = vm_run_tool(rebase, "qemu-img rebase of the restored disk", why)) < 0)
		goto fail;
	{
		_cleanup_close_ int fd = open(stage, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);

		if (fd < 0) {
			r = -errno;
			*why = xasprintf("cannot open %s: %s", stage, strerror(-r));
			goto fail;
		}
		if ((r = vm_remote_upload_fd(v, a->name, "disk.qcow2", fd, why)) < 0)
			goto fail;
	}
	(void)unlink(stage);
	{
		_cleanup_close_ int fd = open(seed, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);

		if (fd < 0) {
			r = -errno;
			*why = xasprintf("cannot open %s: %s", seed, strerror(-r));
			goto fail;
		}
		if ((r = vm_remote_upload_fd(v, a->name, "seed.img", fd, why)) < 0)
			goto fail;
	}
	if (memdisk) {
		_cleanup_close_ int fd = openat(dir, memdisk, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);

		if (fd < 0) {
			r = -errno;
			*why = xasprintf("cannot open %s of the backup: %s", memdisk, strerror(-r));
			goto fail;
		}
		if ((r = vm_remote_upload_fd(v, a->name, MEMDISK, fd, why)) < 0)
			goto fail;
	}
	/* Its old UUID: libvirt gives a snapshot's definition back only to the domain it names. */
	if ((r = vm_remote_domain_xml(b, v, a, im->image, im->boot_image, uuid, &xml, why)) < 0 ||
	    (r = virt_domain_define(v, xml, why)) < 0)
		goto fail;
	return 0;
fail:
	(void)unlink(stage);
	vm_remote_disks_remove(v, a->name);
	return r < 0 ? r : -EIO;
}

int vm_disk_restore(struct fleetd *f, const struct agent *a, int dir, const json_t *entry, char **why)
{
	struct vm_backend *b = vm_backend_of(f);
	_cleanup_free_ char *dom = vm_domain_name(a->name);
	_cleanup_free_ char *vdir = vm_path(b, a->name, NULL), *keys = vm_key_path(b, a->name, NULL);
	_cleanup_free_ char *xml = NULL;
	_cleanup_images_ struct agent_images im = { 0 };
	const char *uuid = json_string_value(json_object_get(entry, "domain_uuid"));
	bool remote = vm_agent_remote(a);
	struct virt *v = NULL;
	char id[IMAGE_ID_LEN + 1];
	enum virt_state st;
	int r;

	/* Back on the host it was on: a remote agent's disks go to that host's pool again. */
	if ((r = vm_host_virt(b, a->host, &v, why)) < 0 || (r = virt_connect(v, why)) < 0) {
		if (remote) {
			char *inner = *why;
			*why = xasprintf("cannot reach its host %s: %s", a->host, inner ? inner : strerror(-r));
			free(inner);
		}
		return -EHOSTDOWN;
	}
	if (virt_domain_state(v, dom, &st) == 0) {
		*why = xasprintf("a libvirt domain named %s already exists%s%s; fleet will not take it over", dom,
				 remote ? " on host " : "", remote ? a->host : "");
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
		/* A remote agent keeps its keys and a copy of its seed here; its disk and memory disk are volumes there. */
		if (remote && !files[i].key && strcmp(files[i].name, "seed.img") != 0)
			continue;
		if ((r = restore_file(dir, file, dst)) < 0) {
			*why = xasprintf("cannot put %s back as %s: %s", file, dst, strerror(-r));
			goto fail;
		}
	}
	if (remote) {
		if ((r = restore_remote(b, v, a, dir, entry, &im, uuid, why)) < 0)
			goto fail;
		log_info("agent '%s': domain %s defined again on host %s, on its restored volumes", a->name, dom, a->host);
		return 0;
	}
	if (a->network == NETWORK_NAT) {
		_cleanup_free_ char *net = vm_network_xml();
		if ((r = virt_network_ensure(v, NETWORK_NAME, net, why)) < 0)
			goto fail;
	}
	/* Its old UUID: libvirt gives a snapshot's definition back only to the domain it names. */
	xml = vm_domain_xml(b, a, &im, uuid);
	if ((r = virt_domain_define(v, xml, why)) < 0)
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
	_cleanup_free_ char *dom = vm_domain_name(a->name), *dom_xml = NULL, *moved = NULL;
	struct virt *v = NULL;
	int r;

	if (!vm_agent_remote(a))
		return virt_snapshot_redefine(b->virt, dom, xml, why);
	/* Its embedded domain names the volumes' paths as they were: the domain as defined there now instead. */
	if ((r = vm_host_virt(b, a->host, &v, why)) < 0)
		return r;
	if ((r = virt_domain_xml(v, dom, &dom_xml)) < 0) {
		*why = xasprintf("cannot read domain %s back from %s", dom, virt_uri(v));
		return r;
	}
	if ((r = vm_snapshot_rehome(xml, dom_xml, &moved, why)) < 0)
		return r;
	return virt_snapshot_redefine(v, dom, moved, why);
}

int vm_backup_pause_undo(struct vm_backend *b, const char *agent, struct virt *virt)
{
	_cleanup_free_ char *record = vm_path(b, agent, BACKUP_PAUSED), *dom = NULL, *why = NULL;
	enum virt_state st;
	struct stat sb;
	int r;

	if (lstat(record, &sb) < 0)
		return 0;
	dom = vm_domain_name(agent);
	if ((r = virt_domain_state(virt, dom, &st)) < 0) {
		if (r != -ENOTCONN) {	/* no such domain: nothing is paused */
			(void)unlink(record);
			return 0;
		}
		return r;
	}
	if (st == VIRT_PAUSED && (r = virt_domain_resume(virt, dom, &why)) < 0) {
		log_error("agent '%s': its guest, paused for a backup copy cut short, cannot be resumed: %s "
			  "(fleetctl restart %s)", agent, why ? why : strerror(-r), agent);
		return r;
	}
	(void)unlink(record);
	if (st != VIRT_PAUSED)
		return 0;
	log_notice("agent '%s': its guest resumed (fleetd stopped while a backup copy had it paused)", agent);
	return 1;
}

void vm_backup_pause_recover(struct vm_backend *b)
{
	struct agent **list = NULL;

	if (b->host->list_agents(b->f, BACKEND_VM, &list) < 0)
		return;
	for (size_t i = 0; list[i]; i++) {
		_cleanup_free_ char *record = vm_path(b, list[i]->name, BACKUP_PAUSED);
		struct virt *virt;
		struct stat sb;

		if (lstat(record, &sb) < 0)
			continue;
		/* A host not reachable now: its record stays, and the agent's next exec resumes it. */
		if ((virt = vm_agent_virt(b, list[i], NULL)))
			(void)vm_backup_pause_undo(b, list[i]->name, virt);
	}
	agent_list_free(list);
}
