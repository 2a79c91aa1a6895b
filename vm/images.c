/* images: the content-addressed store of guest images (see images.h). */
#include "vm/images.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"

#define MANIFEST "manifest.json"
#define MANIFEST_MAX (64 << 10)
#define COPY_CHUNK (1 << 20)

/* The files that make an image's ID, in this order; the manifest is stored beside them. */
static const char *const id_files[] = { "vmlinuz", "initramfs.img", "base.qcow2" };

char *images_image_dir(const char *state_dir, const char *configured)
{
	return configured && *configured ? xstrdup(configured) : xasprintf("%s/images", state_dir);
}

static char *store_dir(const char *state_dir)
{
	return xasprintf("%s/images/sha256", state_dir);
}

char *image_store_path(const char *state_dir, const char *id, const char *file)
{
	return file ? xasprintf("%s/images/sha256/%s/%s", state_dir, id, file)
		    : xasprintf("%s/images/sha256/%s", state_dir, id);
}

bool image_id_valid(const char *id)
{
	size_t n = strspn(id, "0123456789abcdef");

	return n == IMAGE_ID_LEN && id[n] == '\0';
}

static void hex(const unsigned char *md, char out[IMAGE_ID_LEN + 1])
{
	for (int i = 0; i < IMAGE_ID_LEN / 2; i++)
		snprintf(out + 2 * i, 3, "%02x", md[i]);
}

static void md_ctx_freep(EVP_MD_CTX **c)
{
	EVP_MD_CTX_free(*c);
}

/*
 * Read src (not following a symlink) and, when dst is not NULL, write it to
 * the new file dst (fsync'd); its SHA-256 goes to sum when that is not NULL.
 */
static int copy_hash(const char *src, const char *dst, char sum[IMAGE_ID_LEN + 1])
{
	_cleanup_close_ int in = open(src, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	_cleanup_close_ int out = -1;
	_cleanup_(md_ctx_freep) EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	_cleanup_free_ char *buf = xmalloc(COPY_CHUNK);
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	ssize_t n;
	int r;

	if (in < 0)
		return -errno;
	if (!ctx || !EVP_DigestInit_ex(ctx, EVP_sha256(), NULL))
		return -ENOMEM;
	if (dst && (out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600)) < 0)
		return -errno;
	while ((n = read(in, buf, COPY_CHUNK)) != 0) {
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (!EVP_DigestUpdate(ctx, buf, (size_t)n))
			return -EIO;
		if (out >= 0 && (r = write_all(out, buf, (size_t)n)) < 0)
			return r;
	}
	if (out >= 0 && fsync(out) < 0)
		return -errno;
	if (!EVP_DigestFinal_ex(ctx, md, &mdlen) || mdlen != IMAGE_ID_LEN / 2)
		return -EIO;
	if (sum)
		hex(md, sum);
	return 0;
}

/* The ID from the three files' sums: sha256 of `sha256sum vmlinuz initramfs.img base.qcow2`. */
static int id_from_sums(char sums[ARRAY_SIZE(id_files)][IMAGE_ID_LEN + 1], char id[IMAGE_ID_LEN + 1])
{
	_cleanup_free_ char *text = xstrdup("");
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;

	for (size_t i = 0; i < ARRAY_SIZE(id_files); i++) {
		char *t = xasprintf("%s%s  %s\n", text, sums[i], id_files[i]);
		free(text);
		text = t;
	}
	if (!EVP_Digest(text, strlen(text), md, &mdlen, EVP_sha256(), NULL) || mdlen != IMAGE_ID_LEN / 2)
		return -EIO;
	hex(md, id);
	return 0;
}

int image_id_from_sums(char sums[3][IMAGE_ID_LEN + 1], char id[IMAGE_ID_LEN + 1])
{
	return id_from_sums(sums, id);
}

/* A whole small file (at most MANIFEST_MAX bytes); -ENOENT, -EFBIG, -errno. */
static int read_small(const char *path, char **ret, size_t *len)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	_cleanup_free_ char *buf = NULL;
	size_t got = 0;
	ssize_t n;

	if (fd < 0)
		return -errno;
	buf = xmalloc(MANIFEST_MAX + 1);
	while ((n = read(fd, buf + got, MANIFEST_MAX + 1 - got)) != 0) {
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		got += (size_t)n;
		if (got > MANIFEST_MAX)
			return -EFBIG;
	}
	buf[got] = '\0';
	*ret = TAKE_PTR(buf);
	*len = got;
	return 0;
}

/* Is the store's image id complete (all of id_files there)? */
static bool stored(const char *state_dir, const char *id)
{
	for (size_t i = 0; i < ARRAY_SIZE(id_files); i++) {
		_cleanup_free_ char *p = image_store_path(state_dir, id, id_files[i]);
		struct stat st;

		if (lstat(p, &st) < 0 || !S_ISREG(st.st_mode))
			return false;
	}
	return true;
}

/* The IDs in the store (NULL-terminated; caller frees with strv_free); -errno. */
static int store_ids(const char *state_dir, char ***ret)
{
	_cleanup_free_ char *dir = store_dir(state_dir);
	DIR *d = opendir(dir);
	char **v = xcalloc(1, sizeof(*v));
	size_t n = 0;
	struct dirent *e;

	if (!d) {
		if (errno != ENOENT) {
			int r = -errno;
			free(v);
			return r;
		}
		*ret = v;
		return 0;
	}
	while ((e = readdir(d)))
		if (image_id_valid(e->d_name) && stored(state_dir, e->d_name)) {
			v = xrealloc(v, (n + 2) * sizeof(*v));
			v[n++] = xstrdup(e->d_name);
			v[n] = NULL;
		}
	closedir(d);
	*ret = v;
	return 0;
}

int image_current(const char *state_dir, const char *image_dir, char id[IMAGE_ID_LEN + 1])
{
	_cleanup_free_ char *mpath = xasprintf("%s/" MANIFEST, image_dir), *manifest = NULL;
	char sums[ARRAY_SIZE(id_files)][IMAGE_ID_LEN + 1];
	char **ids = NULL;
	size_t mlen = 0;
	int r;

	if ((r = read_small(mpath, &manifest, &mlen)) == 0) {
		/* A build writes its manifest last and a new one each time: it names the build. */
		if ((r = store_ids(state_dir, &ids)) < 0)
			return r;
		r = -ENOENT;
		for (char **p = ids; *p && r < 0; p++) {
			_cleanup_free_ char *sp = image_store_path(state_dir, *p, MANIFEST), *sm = NULL;
			size_t slen = 0;

			if (read_small(sp, &sm, &slen) == 0 && slen == mlen && memcmp(sm, manifest, mlen) == 0) {
				memcpy(id, *p, IMAGE_ID_LEN + 1);
				r = 0;
			}
		}
		strv_free(ids);
		return r;
	}
	/* No manifest (an image copied by hand): hash its files. */
	for (size_t i = 0; i < ARRAY_SIZE(id_files); i++) {
		_cleanup_free_ char *p = xasprintf("%s/%s", image_dir, id_files[i]);
		if ((r = copy_hash(p, NULL, sums[i])) < 0)
			return r;
	}
	if ((r = id_from_sums(sums, id)) < 0)
		return r;
	return stored(state_dir, id) ? 0 : -ENOENT;
}

/* Remove dir and the plain files in it (store directories hold nothing else). */
static int remove_flat_dir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int r = 0;

	if (!d)
		return errno == ENOENT ? 0 : -errno;
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 &&
		    unlinkat(dirfd(d), e->d_name, 0) < 0 && errno != ENOENT)
			r = -errno;
	closedir(d);
	if (r == 0 && rmdir(dir) < 0)
		r = -errno;
	return r;
}

static int fsync_path(const char *path)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0 || fsync(fd) < 0)
		return -errno;
	return 0;
}

/* <state_dir>/images and its sha256/: QEMU (not root) must reach the files. */
static int make_store_dir(const char *state_dir, char **why)
{
	_cleanup_free_ char *top = xasprintf("%s/images", state_dir), *dir = store_dir(state_dir);
	struct stat st;
	int r;

	if ((r = mkdir_p(dir, 0755)) < 0 || (chmod(dir, 0755) < 0 && (r = -errno)) ||
	    (stat(top, &st) < 0 && (r = -errno)) ||
	    ((st.st_mode & 0011) != 0011 && chmod(top, (st.st_mode & 07777) | 0111) < 0 && (r = -errno))) {
		*why = xasprintf("cannot create the image store %s: %s", dir, strerror(-r));
		return r;
	}
	return 0;
}

static bool same_stat(const struct stat *a, const struct stat *b)
{
	return a->st_ino == b->st_ino && a->st_dev == b->st_dev && a->st_size == b->st_size &&
	       a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

int image_import(const char *state_dir, const char *image_dir, char id[IMAGE_ID_LEN + 1], char **why)
{
	_cleanup_free_ char *sdir = store_dir(state_dir), *tmp = NULL, *final = NULL;
	_cleanup_free_ char *mpath = xasprintf("%s/" MANIFEST, image_dir);
	char sums[ARRAY_SIZE(id_files)][IMAGE_ID_LEN + 1];
	struct stat m1, m2;
	bool has_manifest;
	int r;

	for (size_t i = 0; i < ARRAY_SIZE(id_files); i++) {
		_cleanup_free_ char *p = xasprintf("%s/%s", image_dir, id_files[i]);
		if (access(p, R_OK) < 0) {
			*why = xasprintf("guest image missing: %s (build it with images/build-image.sh --out %s)", p,
					 image_dir);
			return -ENOENT;
		}
	}
	if (image_current(state_dir, image_dir, id) == 0)
		return 0;
	if ((r = make_store_dir(state_dir, why)) < 0)
		return r;
	has_manifest = stat(mpath, &m1) == 0;
	tmp = xasprintf("%s/.import-XXXXXX", sdir);
	if (!mkdtemp(tmp)) {
		r = -errno;
		*why = xasprintf("cannot create a directory in %s: %s", sdir, strerror(-r));
		return r;
	}
	for (size_t i = 0; i <= ARRAY_SIZE(id_files); i++) {
		const char *name = i < ARRAY_SIZE(id_files) ? id_files[i] : MANIFEST;
		_cleanup_free_ char *src = xasprintf("%s/%s", image_dir, name), *dst = xasprintf("%s/%s", tmp, name);

		if (i == ARRAY_SIZE(id_files) && !has_manifest)
			break;
		if ((r = copy_hash(src, dst, i < ARRAY_SIZE(id_files) ? sums[i] : NULL)) < 0 ||
		    (chmod(dst, 0444) < 0 && (r = -errno))) {
			*why = xasprintf("cannot copy %s into the image store: %s", src, strerror(-r));
			goto fail;
		}
	}
	/* A build replaces the files one by one, manifest last: a changed manifest means a mixed copy. */
	if (has_manifest != (stat(mpath, &m2) == 0) || (has_manifest && !same_stat(&m1, &m2))) {
		*why = xasprintf("the image in %s changed while it was being copied (a build in progress?); try again",
				 image_dir);
		r = -EAGAIN;
		goto fail;
	}
	if ((r = id_from_sums(sums, id)) < 0) {
		*why = xstrdup("cannot compute the image's SHA-256");
		goto fail;
	}
	final = image_store_path(state_dir, id, NULL);
	if (chmod(tmp, 0755) < 0 || fsync_path(tmp) < 0) {
		r = -errno;
		*why = xasprintf("cannot finish %s: %s", tmp, strerror(-r));
		goto fail;
	}
	if (stored(state_dir, id)) {
		(void)remove_flat_dir(tmp);	/* the same files, stored before (under another manifest) */
		return 0;
	}
	(void)remove_flat_dir(final);		/* an incomplete leftover */
	if (rename(tmp, final) < 0) {
		r = -errno;
		*why = xasprintf("cannot store the image as %s: %s", final, strerror(-r));
		goto fail;
	}
	(void)fsync_path(sdir);
	return 0;
fail:
	(void)remove_flat_dir(tmp);
	return r < 0 ? r : -EIO;
}

static char *manifest_string(json_t *m, const char *key)
{
	const char *s = json_string_value(json_object_get(m, key));

	return s ? xstrdup(s) : NULL;
}

static int info_cmp(const void *a, const void *b)
{
	const struct image_info *x = a, *y = b;

	if (x->imported_at != y->imported_at)
		return x->imported_at < y->imported_at ? -1 : 1;
	return strcmp(x->id, y->id);
}

int image_list(const char *state_dir, struct image_info **ret, size_t *n)
{
	char **ids = NULL;
	struct image_info *v;
	size_t k = 0;
	int r;

	if ((r = store_ids(state_dir, &ids)) < 0)
		return r;
	for (char **p = ids; *p; p++)
		k++;
	v = xcalloc(k + 1, sizeof(*v));
	for (size_t i = 0; i < k; i++) {
		_cleanup_free_ char *dir = image_store_path(state_dir, ids[i], NULL);
		_cleanup_free_ char *mpath = image_store_path(state_dir, ids[i], MANIFEST), *text = NULL;
		json_t *m = NULL;
		struct stat st;
		size_t len = 0;

		memcpy(v[i].id, ids[i], IMAGE_ID_LEN + 1);
		if (stat(dir, &st) == 0)
			v[i].imported_at = st.st_mtim.tv_sec;
		for (size_t j = 0; j <= ARRAY_SIZE(id_files); j++) {
			_cleanup_free_ char *f = image_store_path(state_dir, ids[i],
								  j < ARRAY_SIZE(id_files) ? id_files[j] : MANIFEST);
			if (lstat(f, &st) == 0)
				v[i].size_bytes += st.st_size;
		}
		if (read_small(mpath, &text, &len) == 0 && (m = json_loadb(text, len, 0, NULL))) {
			v[i].built = manifest_string(m, "build_time");
			v[i].kernel = manifest_string(m, "kernel_version");
			v[i].agentd_sha256 = manifest_string(m, "agentd_sha256");
			json_decref(m);
		}
	}
	strv_free(ids);
	qsort(v, k, sizeof(*v), info_cmp);
	*ret = v;
	*n = k;
	return 0;
}

void image_info_free(struct image_info *v, size_t n)
{
	if (!v)
		return;
	for (size_t i = 0; i < n; i++) {
		free(v[i].built);
		free(v[i].kernel);
		free(v[i].agentd_sha256);
	}
	free(v);
}

int image_resolve(const char *state_dir, const char *prefix, char id[IMAGE_ID_LEN + 1], char **why)
{
	size_t len = strlen(prefix), matches = 0;
	char **ids = NULL;
	int r;

	/* Listings show "sha256:" before the ID: accept it. */
	if (strncmp(prefix, "sha256:", 7) == 0) {
		prefix += 7;
		len -= 7;
	}
	if (len < 4 || len > IMAGE_ID_LEN || strspn(prefix, "0123456789abcdef") != len) {
		*why = xstrdup("an image ID is 4 to 64 lower-case hex digits (as 'fleetctl image ls' shows them)");
		return -EINVAL;
	}
	if ((r = store_ids(state_dir, &ids)) < 0) {
		*why = xasprintf("cannot read the image store: %s", strerror(-r));
		return r;
	}
	for (char **p = ids; *p; p++)
		if (strncmp(*p, prefix, len) == 0) {
			if (matches++ == 0)
				memcpy(id, *p, IMAGE_ID_LEN + 1);
		}
	strv_free(ids);
	if (matches == 0) {
		*why = xasprintf("no stored image %s", prefix);
		return -ENOENT;
	}
	if (matches > 1) {
		*why = xasprintf("%s names %zu stored images; give more of its ID", prefix, matches);
		return -EINVAL;
	}
	return 0;
}

int image_remove(const char *state_dir, const char *id, char **why)
{
	_cleanup_free_ char *dir = NULL, *gone = NULL;
	int r;

	if (!image_id_valid(id)) {
		*why = xstrdup("not an image ID");
		return -EINVAL;
	}
	dir = image_store_path(state_dir, id, NULL);
	gone = xasprintf("%s/images/sha256/.removing-%s", state_dir, id);
	/* Out of sight first, so a half-removed image is never taken for a stored one. */
	(void)remove_flat_dir(gone);
	if (rename(dir, gone) < 0) {
		r = -errno;
		*why = xasprintf("cannot remove %s: %s", dir, strerror(-r));
		return r;
	}
	if ((r = remove_flat_dir(gone)) < 0) {
		*why = xasprintf("cannot remove all of %s: %s", gone, strerror(-r));
		return r;
	}
	return 0;
}

int image_dir_inspect(const char *image_dir, char **agentd_sha256, char **why)
{
	_cleanup_free_ char *mpath = xasprintf("%s/" MANIFEST, image_dir), *text = NULL;
	size_t len = 0;
	json_t *m;
	int r;

	*agentd_sha256 = NULL;
	for (size_t i = 0; i < ARRAY_SIZE(id_files); i++) {
		_cleanup_free_ char *p = xasprintf("%s/%s", image_dir, id_files[i]);
		struct stat st;

		if (stat(p, &st) < 0) {
			r = -errno;
			*why = xasprintf("%s: %s", p, strerror(errno));
			return r;
		}
	}
	if ((r = read_small(mpath, &text, &len)) < 0) {
		*why = xasprintf("%s: %s", mpath, strerror(-r));
		return r;
	}
	if (!(m = json_loadb(text, len, 0, NULL))) {
		*why = xasprintf("%s: not JSON", mpath);
		return -EBADMSG;
	}
	*agentd_sha256 = manifest_string(m, "agentd_sha256");
	json_decref(m);
	return 0;
}

int image_file_sha256(const char *path, char sum[IMAGE_ID_LEN + 1])
{
	return copy_hash(path, NULL, sum);
}
