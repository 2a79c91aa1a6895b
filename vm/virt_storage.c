/*
 * virt_storage: libvirt's storage API for the VM backend (virt.h): a fleet
 * `dir` pool on a host, volumes uploaded through a virStream in bounded
 * chunks, qcow2 overlays with a backing store, and their removal. This is
 * how a guest's disks reach a host other than fleetd's own (#15,
 * docs/multi-host.md): nothing but libvirt's remote protocol crosses.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "vm/virt.h"
#include "vm/virt_conn.h"
#include "vm/virt_xml.h"

#define UPLOAD_CHUNK (256 << 10)	/* what one virStreamSend carries */

/* Names and paths go into XML unescaped: only what needs no escaping passes. */
static bool xml_plain(const char *s)
{
	return s && *s && strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789/._-") == strlen(s);
}

static int pool_lookup(struct virt *v, const char *pool, virStoragePoolPtr *ret, char **why)
{
	_cleanup_conn_ virConnectPtr c = NULL;
	int r;

	if ((r = virt_conn(v, &c, why)) < 0)
		return r;
	if (!(*ret = virStoragePoolLookupByName(c, pool))) {
		_cleanup_free_ char *what = xasprintf("storage pool %s", pool);
		return virt_last_error(what, why);
	}
	return 0;
}

static int vol_lookup(struct virt *v, const char *pool, const char *vol, virStorageVolPtr *ret, char **why)
{
	virStoragePoolPtr p;
	int r;

	if ((r = pool_lookup(v, pool, &p, why)) < 0)
		return r;
	/* The error first: a libvirt call after it (the pool's free) clears it. */
	if (!(*ret = virStorageVolLookupByName(p, vol))) {
		_cleanup_free_ char *what = xasprintf("volume %s in pool %s", vol, pool);
		r = virt_last_error(what, why);
	}
	virStoragePoolFree(p);
	return r;
}

int virt_pool_ensure(struct virt *v, const char *pool, const char *path, char **why)
{
	_cleanup_free_ char *xml = NULL;
	virStoragePoolPtr p = NULL;
	_cleanup_conn_ virConnectPtr c = NULL;
	int r;

	if (!xml_plain(pool) || !xml_plain(path) || path[0] != '/') {
		*why = xasprintf("storage pool %s at %s: not a plain name and absolute path", pool, path);
		return -EINVAL;
	}
	if ((r = virt_conn(v, &c, why)) < 0)
		return r;
	if (!(p = virStoragePoolLookupByName(c, pool))) {
		/* Root's, and QEMU needs only the volumes libvirt labels for it: 0711. */
		xml = xasprintf("<pool type='dir'>\n"
				"  <name>%s</name>\n"
				"  <target>\n"
				"    <path>%s</path>\n"
				"    <permissions><mode>0711</mode></permissions>\n"
				"  </target>\n"
				"</pool>\n", pool, path);
		if (!(p = virStoragePoolDefineXML(c, xml, 0)))
			return virt_last_error("cannot define the storage pool", why);
		log_info("libvirt: defined storage pool %s at %s (%s)", pool, path, virt_uri(v));
		if (virStoragePoolBuild(p, 0) < 0) {
			r = virt_last_error("cannot build the storage pool's directory", why);
			goto out;
		}
		if (virStoragePoolSetAutostart(p, 1) < 0)
			log_debug("libvirt: cannot autostart pool %s: %s", pool, virGetLastErrorMessage());
	}
	if (virStoragePoolIsActive(p) != 1 && virStoragePoolCreate(p, 0) < 0) {
		r = virt_last_error("cannot start the storage pool", why);
		goto out;
	}
	r = 0;
out:
	virStoragePoolFree(p);
	return r;
}

int virt_vol_path(struct virt *v, const char *pool, const char *vol, char **ret, char **why)
{
	virStorageVolPtr s;
	char *path;
	int r;

	if ((r = vol_lookup(v, pool, vol, &s, why)) < 0)
		return r;
	path = virStorageVolGetPath(s);
	r = path ? 0 : virt_last_error("cannot read a volume's path", why);
	virStorageVolFree(s);
	if (path) {
		*ret = xstrdup(path);
		free(path);
	}
	return r;
}

int virt_pool_free(struct virt *v, const char *pool, long long *ret, char **why)
{
	virStoragePoolInfo info;
	virStoragePoolPtr p;
	int r;

	if ((r = pool_lookup(v, pool, &p, why)) < 0)
		return r;
	/* A dir pool's figures are those of its last refresh: now's, for a check of free space. */
	r = virStoragePoolRefresh(p, 0) < 0 || virStoragePoolGetInfo(p, &info) < 0
		? virt_last_error("cannot read a storage pool's free space", why) : 0;
	virStoragePoolFree(p);
	if (r == 0)
		*ret = (long long)info.available;
	return r;
}

int virt_vol_size(struct virt *v, const char *pool, const char *vol, long long *ret, char **why)
{
	virStorageVolInfo info;
	virStorageVolPtr s;
	int r;

	if ((r = vol_lookup(v, pool, vol, &s, why)) < 0)
		return r;
	/* PHYSICAL: the file's size, not a qcow2's virtual capacity. */
	r = virStorageVolGetInfoFlags(s, &info, VIR_STORAGE_VOL_GET_PHYSICAL) < 0
		? virt_last_error("cannot read a volume's size", why) : 0;
	virStorageVolFree(s);
	if (r == 0)
		*ret = (long long)info.allocation;
	return r;
}

int virt_vol_delete(struct virt *v, const char *pool, const char *vol, char **why)
{
	virStorageVolPtr s;
	int r;

	if ((r = vol_lookup(v, pool, vol, &s, why)) < 0)
		return r;
	r = virStorageVolDelete(s, 0) < 0 ? virt_last_error("cannot delete a volume", why) : 0;
	virStorageVolFree(s);
	if (r == 0)
		log_debug("libvirt: deleted volume %s/%s (%s)", pool, vol, virt_uri(v));
	return r;
}

static int vol_create(struct virt *v, const char *pool, const char *xml, virStorageVolPtr *ret, char **why)
{
	virStoragePoolPtr p;
	int r;

	if ((r = pool_lookup(v, pool, &p, why)) < 0)
		return r;
	if (!(*ret = virStorageVolCreateXML(p, xml, 0)))
		r = virt_last_error("cannot create a volume", why);
	virStoragePoolFree(p);
	return r;
}

/* Send size bytes of fd on st in UPLOAD_CHUNK pieces, each seen by observe; -errno with *why. */
static int send_file(virStreamPtr st, int fd, long long size, virt_upload_observer observe, void *userdata, char **why)
{
	_cleanup_free_ char *buf = xmalloc(UPLOAD_CHUNK);
	long long left = size;

	while (left > 0) {
		ssize_t n = read(fd, buf, left < UPLOAD_CHUNK ? (size_t)left : UPLOAD_CHUNK);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			int r = n < 0 ? -errno : -EIO;
			*why = xasprintf("cannot read what is uploaded: %s", n < 0 ? strerror(-r) : "the file got shorter");
			return r;
		}
		if (observe)
			observe(userdata, buf, (size_t)n);
		for (ssize_t off = 0; off < n;) {
			int sent = virStreamSend(st, buf + off, (size_t)(n - off));

			if (sent < 0)
				return virt_last_error("upload", why);
			off += sent;
		}
		left -= n;
	}
	return 0;
}

int virt_vol_upload(struct virt *v, const char *pool, const char *vol, int fd, long long size,
		    virt_upload_observer observe, void *userdata, char **why)
{
	_cleanup_free_ char *xml = NULL;
	virStorageVolPtr s = NULL;
	virStreamPtr st = NULL;
	_cleanup_conn_ virConnectPtr c = NULL;
	int r;

	if (!xml_plain(vol) || size <= 0) {
		*why = xasprintf("volume %s: not a plain name, or nothing to upload", vol);
		return -EINVAL;
	}
	/* A sparse raw file of the right size, then the bytes: libvirt never guesses a format from them. */
	xml = xasprintf("<volume>\n"
			"  <name>%s</name>\n"
			"  <capacity unit='bytes'>%lld</capacity>\n"
			"  <allocation unit='bytes'>0</allocation>\n"
			"  <target>\n"
			"    <format type='raw'/>\n"
			"    <permissions><mode>0600</mode></permissions>\n"
			"  </target>\n"
			"</volume>\n", vol, size);
	if ((r = virt_conn(v, &c, why)) < 0 || (r = vol_create(v, pool, xml, &s, why)) < 0)
		return r;
	if (!(st = virStreamNew(c, 0))) {
		r = virt_last_error("cannot open a stream", why);
		goto fail;
	}
	if (virStorageVolUpload(s, st, 0, (unsigned long long)size, 0) < 0) {
		r = virt_last_error("cannot start the upload", why);
		goto fail;
	}
	if ((r = send_file(st, fd, size, observe, userdata, why)) < 0) {
		virStreamAbort(st);
		goto fail;
	}
	if (virStreamFinish(st) < 0) {
		r = virt_last_error("cannot finish the upload", why);
		goto fail;
	}
	virStreamFree(st);
	virStorageVolFree(s);
	return 0;
fail:
	/* Nothing half-uploaded stays under the name. */
	if (st)
		virStreamFree(st);
	if (virStorageVolDelete(s, 0) < 0)
		log_warning("libvirt: cannot delete the half-uploaded volume %s/%s: %s", pool, vol, virGetLastErrorMessage());
	virStorageVolFree(s);
	return r;
}

int virt_vol_overlay(struct virt *v, const char *pool, const char *vol, const char *backing, long long capacity,
		     char **why)
{
	_cleanup_free_ char *xml = NULL;
	virStorageVolPtr s;
	int r;

	if (!xml_plain(vol) || !xml_plain(backing) || capacity <= 0) {
		*why = xasprintf("volume %s on %s: not a plain name and path", vol, backing);
		return -EINVAL;
	}
	/* libvirt runs qemu-img on the host: the backing file is named in the overlay, its format too. */
	xml = xasprintf("<volume>\n"
			"  <name>%s</name>\n"
			"  <capacity unit='bytes'>%lld</capacity>\n"
			"  <target>\n"
			"    <format type='qcow2'/>\n"
			"    <permissions><mode>0600</mode></permissions>\n"
			"  </target>\n"
			"  <backingStore>\n"
			"    <path>%s</path>\n"
			"    <format type='qcow2'/>\n"
			"  </backingStore>\n"
			"</volume>\n", vol, capacity, backing);
	if ((r = vol_create(v, pool, xml, &s, why)) < 0)
		return r;
	virStorageVolFree(s);
	return 0;
}

/* The format libvirt gives the volume (its <target><format type=...>); caller frees, NULL if none. */
static char *vol_format(virStorageVolPtr s)
{
	_cleanup_free_ char *xml = virStorageVolGetXMLDesc(s, 0);
	char *ret = NULL;

	if (xml)
		(void)virt_xml_string(xml, "string(/volume/target/format/@type)", &ret);
	return ret;
}

int virt_vol_grow_qcow2(struct virt *v, const char *pool, const char *vol, long long capacity, char **why)
{
	_cleanup_free_ char *format = NULL;
	virStoragePoolPtr p;
	virStorageVolPtr s;
	virStorageVolInfo info;
	int r;

	/* A refresh first: libvirt probes each file's format then (an upload made it a raw volume). */
	if ((r = pool_lookup(v, pool, &p, why)) < 0)
		return r;
	r = virStoragePoolRefresh(p, 0) < 0 ? virt_last_error("cannot refresh the storage pool", why) : 0;
	virStoragePoolFree(p);
	if (r < 0 || (r = vol_lookup(v, pool, vol, &s, why)) < 0)
		return r;
	/* A raw resize would only lengthen the file: only a volume libvirt knows as qcow2 grows (qemu-img resize there). */
	if (!(format = vol_format(s)) || strcmp(format, "qcow2") != 0) {
		*why = xasprintf("volume %s in pool %s is not qcow2 to libvirt (%s)", vol, pool, format ? format : "no format");
		r = -EINVAL;
	} else if (virStorageVolGetInfo(s, &info) < 0) {
		r = virt_last_error("cannot read a volume's capacity", why);
	} else if ((long long)info.capacity < capacity) {
		r = virStorageVolResize(s, (unsigned long long)capacity, 0) < 0 ? virt_last_error("cannot grow a volume", why) : 1;
	}
	virStorageVolFree(s);
	if (r >= 0)
		log_debug("libvirt: volume %s/%s at least %lld bytes (%s)", pool, vol, capacity, virt_uri(v));
	return r;
}

/* Write n bytes of buf at fd's offset, a chunk of zeros as a hole (the copy stays as sparse as the volume). */
static int write_sparse(int fd, const char *buf, size_t n)
{
	static const char zeros[4096];
	bool zero = true;

	for (size_t off = 0; off < n && zero; off += sizeof(zeros))
		zero = memcmp(buf + off, zeros, n - off < sizeof(zeros) ? n - off : sizeof(zeros)) == 0;
	if (zero)
		return lseek(fd, (off_t)n, SEEK_CUR) < 0 ? -errno : 0;
	return write_all(fd, buf, n);
}

int virt_vol_download(struct virt *v, const char *pool, const char *vol, int fd, char **why)
{
	_cleanup_free_ char *buf = xmalloc(UPLOAD_CHUNK);
	virStorageVolPtr s = NULL;
	virStreamPtr st = NULL;
	_cleanup_conn_ virConnectPtr c = NULL;
	off_t end;
	int r;

	if ((r = virt_conn(v, &c, why)) < 0 || (r = vol_lookup(v, pool, vol, &s, why)) < 0)
		return r;
	if (!(st = virStreamNew(c, 0))) {
		r = virt_last_error("cannot open a stream", why);
		goto out;
	}
	/* Length 0: to the volume's end. */
	if (virStorageVolDownload(s, st, 0, 0, 0) < 0) {
		r = virt_last_error("cannot start the download", why);
		goto out;
	}
	for (;;) {
		int got = virStreamRecv(st, buf, UPLOAD_CHUNK);

		if (got == 0)
			break;
		if (got < 0) {
			r = virt_last_error("download", why);
			virStreamAbort(st);
			goto out;
		}
		if ((r = write_sparse(fd, buf, (size_t)got)) < 0) {
			*why = xasprintf("cannot write what is downloaded: %s", strerror(-r));
			virStreamAbort(st);
			goto out;
		}
	}
	if (virStreamFinish(st) < 0) {
		r = virt_last_error("cannot finish the download", why);
		goto out;
	}
	/* A hole at the end: the file's size is the volume's. */
	if ((end = lseek(fd, 0, SEEK_CUR)) < 0 || ftruncate(fd, end) < 0) {
		r = -errno;
		*why = xasprintf("cannot size what is downloaded: %s", strerror(-r));
		goto out;
	}
	r = 0;
out:
	if (st)
		virStreamFree(st);
	virStorageVolFree(s);
	return r;
}
