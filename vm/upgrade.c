/*
 * upgrade: which guest images an agent's disk and boot use (its image
 * record, kept by fleet and reached through struct backend_host), adopting
 * agents made before the image store, bringing the overlay and the domain
 * definition in line with the record before each boot, and `fleetctl
 * upgrade` (a new boot image from the next start on).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vm/backend.h"
#include "backend/firewall.h"
#include "model/fleetd.h"
#include "vm/images.h"
#include "common/log.h"
#include "common/util.h"
#include "vm/virt.h"
#include "vm/virt_xml.h"
#include "vm/vm_internal.h"

static uint64_t be64(const unsigned char *p)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v = (v << 8) | p[i];
	return v;
}

/*
 * The backing file a qcow2 file's header names; -ENOENT if none, -EINVAL if
 * it is no qcow2. The header is written by qemu-img and QEMU, not by the guest.
 */
static int qcow2_backing_file(const char *path, char **ret)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	unsigned char h[20];
	uint64_t off;
	uint32_t len;
	char *name;
	ssize_t n;

	if (fd < 0)
		return -errno;
	if ((n = pread(fd, h, sizeof(h), 0)) < 0)
		return -errno;
	if (n != (ssize_t)sizeof(h) || memcmp(h, "QFI\xfb", 4) != 0)
		return -EINVAL;
	off = be64(h + 8);
	len = (uint32_t)h[16] << 24 | (uint32_t)h[17] << 16 | (uint32_t)h[18] << 8 | h[19];
	if (off == 0 || len == 0)
		return -ENOENT;
	if (len > 1023 || off > (1u << 20))
		return -EINVAL;		/* qcow2 allows at most 1023 bytes, within the first cluster */
	name = xmalloc(len + 1);
	if ((n = pread(fd, name, len, (off_t)off)) != (ssize_t)len) {
		free(name);
		return n < 0 ? -errno : -EINVAL;
	}
	name[len] = '\0';
	*ret = name;
	return 0;
}

int vm_load_images(struct vm_backend *b, const char *agent, struct agent_images *im)
{
	int r = b->host->get_images(b->f, agent, im);

	if (r < 0)
		log_warning("agent '%s': cannot read its guest images from the database: %s", agent, strerror(-r));
	return r;
}

/*
 * An agent created before the image store has an overlay on
 * <image_dir>/base.qcow2 and no image recorded. Record the image now in
 * image_dir as both its images (importing it), unless that base was
 * replaced after the disk was made: then its disk already reads another
 * base than it was made on, and no record would be true (-ESTALE). -ENOENT:
 * not such an agent. Its overlay and domain move to the store copy at its
 * next start (vm_prepare_boot()): a running QEMU holds the file open.
 */
static int adopt_legacy(struct vm_backend *b, const struct agent *a, struct agent_images *im, char **why)
{
	_cleanup_free_ char *disk = vm_path(b, a->name, "disk.qcow2"), *legacy = vm_image_path(b, "base.qcow2");
	_cleanup_free_ char *backing = NULL;
	char id[IMAGE_ID_LEN + 1];
	struct statx dx, bx;
	int r;

	if (qcow2_backing_file(disk, &backing) < 0 || strcmp(backing, legacy) != 0)
		return -ENOENT;
	if (statx(AT_FDCWD, disk, AT_SYMLINK_NOFOLLOW, STATX_BTIME, &dx) == 0 && (dx.stx_mask & STATX_BTIME) &&
	    statx(AT_FDCWD, legacy, 0, STATX_MTIME, &bx) == 0 && bx.stx_mtime.tv_sec > dx.stx_btime.tv_sec) {
		*why = xasprintf("its disk was made before %s was last replaced (rebuilt?): it no longer reads the "
				 "base it was made on, and fleet cannot tell which image that was", legacy);
		return -ESTALE;
	}
	if ((r = image_import(b->state_dir, b->image_dir, id, why)) < 0)
		return r;
	agent_images_clear(im);
	im->image = xstrdup(id);
	im->boot_image = xstrdup(id);
	if ((r = b->host->set_images(b->f, a->name, im)) < 0) {
		*why = xasprintf("cannot record its image: %s", strerror(-r));
		return r;
	}
	log_notice("agent '%s': created before the image store; its image is now sha256:%.12s (copied from %s)",
		   a->name, id, b->image_dir);
	return 0;
}

/* At fleetd's start: adopt every agent from before the image store (see adopt_legacy()). */
void vm_adopt_legacy_agents(struct vm_backend *b)
{
	struct agent **list = NULL;

	if (b->host->list_agents(b->f, BACKEND_VM, &list) < 0)
		return;
	for (size_t i = 0; list[i]; i++) {
		_cleanup_images_ struct agent_images im = { 0 };
		_cleanup_free_ char *why = NULL;
		int r;

		if (list[i]->state == AGENT_DEFINED || list[i]->state == AGENT_PROVISIONING ||
		    b->host->get_images(b->f, list[i]->name, &im) < 0 || im.image)
			continue;
		if ((r = adopt_legacy(b, list[i], &im, &why)) < 0 && r != -ENOENT)
			log_error("agent '%s': cannot move it to the image store: %s", list[i]->name,
				  why ? why : strerror(-r));
	}
	agent_list_free(list);
}

/*
 * Before a boot: the overlay names its image's store base (an adopted
 * agent's overlay is moved there: the same bytes, so only its header
 * changes), and the domain definition names its images and this host's
 * domain type (else it is redefined: an adopted agent, a revert to a
 * snapshot taken before an upgrade, a switch from KVM to TCG) and its
 * memory disk (an agent made, or a snapshot taken, before memory disks).
 */
int vm_prepare_boot(struct vm_backend *b, const struct agent *a, char **why)
{
	_cleanup_free_ char *dom = vm_domain_name(a->name), *cur = NULL, *xml = NULL, *kernel = NULL, *base = NULL;
	_cleanup_free_ char *cur_type = NULL;
	_cleanup_(virt_xml_freep) struct virt_xml *doc = NULL;
	_cleanup_free_ char *disk = vm_path(b, a->name, "disk.qcow2"), *backing = NULL, *legacy = NULL;
	_cleanup_free_ char *tapdev = NULL, *memdisk = NULL;
	_cleanup_images_ struct agent_images im = { 0 };
	char uuid[40];
	int r;

	if (vm_load_images(b, a->name, &im) < 0)
		return 0;	/* boot as defined */
	if (!im.image && (r = adopt_legacy(b, a, &im, why)) < 0) {
		if (r != -ENOENT)
			log_warning("agent '%s': %s", a->name, *why ? *why : strerror(-r));
		free(*why);
		*why = NULL;
	}
	if (im.image) {
		base = image_store_path(b->state_dir, im.image, "base.qcow2");
		legacy = vm_image_path(b, "base.qcow2");
		if ((r = qcow2_backing_file(disk, &backing)) < 0) {
			*why = xasprintf("cannot read the backing file of %s: %s", disk, strerror(-r));
			return r;
		}
		if (strcmp(backing, base) != 0) {
			const char *rebase[] = { "qemu-img", "rebase", "-q", "-u", "-f", "qcow2", "-F", "qcow2",
						 "-b", base, disk, NULL };

			if (strcmp(backing, legacy) != 0) {
				*why = xasprintf("its disk %s is backed by %s, not by its image's %s; fleet will not "
						 "guess which is right", disk, backing, base);
				return -EIO;
			}
			if ((r = vm_run_tool(rebase, "qemu-img rebase -u", why)) < 0)
				return r;
			log_notice("agent '%s': its disk is now backed by the image store's copy %s", a->name, base);
		}
	}
	if (virt_domain_xml(b->virt, dom, &cur) < 0 || virt_domain_uuid(b->virt, dom, uuid) < 0)
		return 0;	/* the start reports what is wrong */
	kernel = im.boot_image ? image_store_path(b->state_dir, im.boot_image, "vmlinuz") : vm_image_path(b, "vmlinuz");
	if (a->network == NETWORK_NAT) {
		char tap[FIREWALL_TAP_SIZE];

		/* A definition from before fleet named the tap: its egress rules would not match. */
		firewall_vm_tap(a->name, tap);
		tapdev = xstrdup(tap);
	}
	memdisk = vm_path(b, a->name, MEMDISK);
	if (!(doc = virt_xml_parse(cur)) || virt_xml_doc_string(doc, "string(/domain/@type)", &cur_type) < 0) {
		*why = xasprintf("libvirt's definition of domain %s is not XML libxml2 can read", dom);
		return -EINVAL;
	}
	if (virt_xml_doc_has(doc, "/domain/os/kernel", kernel) > 0 &&
	    (!base || virt_xml_doc_has(doc, "/domain/devices/disk/source/@file", base) > 0) &&
	    (!tapdev || virt_xml_doc_has(doc, "/domain/devices/interface/target/@dev", tapdev) > 0) &&
	    virt_xml_doc_has(doc, "/domain/devices/disk/source/@file", memdisk) > 0 &&
	    !(strcmp(b->domain_type, "qemu") == 0 && cur_type && strcmp(cur_type, "kvm") == 0))
		return 0;
	xml = vm_domain_xml(b, a, &im, uuid);
	log_info("agent '%s': redefining domain %s (its images, domain type %s, tap name, memory disk)", a->name, dom, b->domain_type);
	return virt_domain_define(b->virt, xml, why);
}

int vm_upgrade(struct fleetd *f, const struct agent *a, char **ret_from, char **ret_to, char **why)
{
	struct vm_backend *b = vm_backend_of(f);
	_cleanup_free_ char *dom = NULL, *xml = NULL, *old = NULL;
	_cleanup_images_ struct agent_images im = { 0 };
	struct agent_images next = { 0 };
	char id[IMAGE_ID_LEN + 1], uuid[40];
	struct vm *v;
	int r;

	if (!b) {
		*why = xstrdup("the vm backend is not available");
		return -ENODEV;
	}
	if ((v = vm_find(b, a->name)) && v->busy) {
		*why = xstrdup("a snapshot, restore or move is under way; try again when it is done");
		return -EBUSY;
	}
	if ((r = b->host->get_images(f, a->name, &im)) < 0) {
		*why = xasprintf("cannot read its images: %s", strerror(-r));
		return r;
	}
	if (!im.image && (r = adopt_legacy(b, a, &im, why)) < 0) {
		if (r == -ENOENT)
			*why = xstrdup("the base image of its disk is unknown (its overlay is not on the image store)");
		return r == -ENOENT ? -EINVAL : r;
	}
	if ((r = image_import(b->state_dir, b->image_dir, id, why)) < 0)
		return r;
	*ret_from = xstrdup(im.boot_image ? im.boot_image : im.image);
	*ret_to = xstrdup(id);
	if (im.boot_image && strcmp(im.boot_image, id) == 0)
		return 0;	/* boots it already */
	/* Its snapshots' saved definitions may name the boot image it leaves: keep that in use. */
	old = im.old_images ? xstrdup(im.old_images) : xstrdup("");
	if (im.boot_image && strcmp(im.boot_image, im.image) != 0 && !strstr(old, im.boot_image)) {
		char *t = xasprintf("%s%s%s", old, *old ? " " : "", im.boot_image);
		free(old);
		old = t;
	}
	next = (struct agent_images){ .image = im.image, .boot_image = id, .old_images = *old ? old : NULL };
	if (vm_agent_remote(a)) {
		/*
		 * The image reaches its host at its next start (remote_boot.c: on a
		 * worker, uploaded once per host, hashed), and its domain is
		 * redefined then: nothing long runs here, on the loop.
		 */
		if ((r = b->host->set_images(f, a->name, &next)) < 0) {
			*why = xasprintf("cannot record its new boot image: %s", strerror(-r));
			return r;
		}
		log_notice("agent '%s': boots image sha256:%.12s from its next start on (was sha256:%.12s); it is "
			   "uploaded to host %s then if it is not there yet", a->name, id, *ret_from, a->host);
		return 0;
	}
	dom = vm_domain_name(a->name);
	if ((r = virt_domain_uuid(b->virt, dom, uuid)) < 0) {
		*why = xasprintf("cannot read the UUID of domain %s", dom);
		return r;
	}
	/* For a running domain this is its next boot's definition. */
	xml = vm_domain_xml(b, a, &next, uuid);
	if ((r = virt_domain_define(b->virt, xml, why)) < 0)
		return r;
	if ((r = b->host->set_images(f, a->name, &next)) < 0) {
		*why = xasprintf("cannot record its new boot image: %s", strerror(-r));
		return r;
	}
	log_notice("agent '%s': boots image sha256:%.12s from its next start on (was sha256:%.12s)", a->name, id,
		   *ret_from);
	return 0;
}
