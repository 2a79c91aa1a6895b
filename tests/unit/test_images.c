/*
 * test_images: the guest image store (vm/images.c) on plain files: an
 * import copies the build read-only under its ID (the sha256 of
 * `sha256sum vmlinuz initramfs.img base.qcow2`), a rebuild in image_dir
 * leaves the stored copy as it was, the same build is stored once, and
 * removal and prefixes behave.
 */
#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "../tap.h"
#include "vm/images.h"
#include "common/util.h"

static char *shell(const char *cmd)
{
	FILE *p = popen(cmd, "r");
	char buf[256] = "";

	if (!p || !fgets(buf, sizeof(buf), p))
		buf[0] = '\0';
	if (p)
		pclose(p);
	buf[strcspn(buf, "\n ")] = '\0';
	return xstrdup(buf);
}

static void put(const char *dir, const char *name, const char *text)
{
	char *p = xasprintf("%s/%s", dir, name);
	FILE *f = fopen(p, "w");

	fputs(text, f);
	fclose(f);
	free(p);
}

static void build(const char *dir, const char *tag)
{
	char *m = xasprintf("{\"build_time\": \"%s\", \"kernel_version\": \"6.1-test\"}\n", tag);

	put(dir, "vmlinuz", "kernel");
	put(dir, "initramfs.img", tag);	/* what changes between builds */
	put(dir, "base.qcow2", "base");
	put(dir, "manifest.json", m);
	free(m);
}

int main(void)
{
	char tmpl[] = "/tmp/test_images.XXXXXX";
	const char *root = mkdtemp(tmpl);
	char *state = xasprintf("%s/state", root), *imgdir = xasprintf("%s/build", root);
	char *cmd, *want, *why = NULL, *p, *text;
	char id1[IMAGE_ID_LEN + 1], id2[IMAGE_ID_LEN + 1], id[IMAGE_ID_LEN + 1];
	struct image_info *v = NULL;
	struct stat st;
	size_t n = 0;

	mkdir_p(state, 0755);
	mkdir_p(imgdir, 0755);
	is_int(image_import(state, imgdir, id1, &why), -ENOENT, "no image in image_dir: -ENOENT");
	ok(why && strstr(why, "guest image missing"), "and says it is missing: %s", why ? why : "");
	free(why);
	why = NULL;

	build(imgdir, "one");
	is_int(image_current(state, imgdir, id), -ENOENT, "a build not stored yet is not current");
	is_int(image_import(state, imgdir, id1, &why), 0, "the build is imported");
	cmd = xasprintf("cd %s && sha256sum vmlinuz initramfs.img base.qcow2 | sha256sum", imgdir);
	want = shell(cmd);
	is_str(id1, want, "its ID is the sha256 of sha256sum's lines");
	free(cmd);
	free(want);
	p = image_store_path(state, id1, "initramfs.img");
	ok(stat(p, &st) == 0 && (st.st_mode & 07777) == 0444, "the stored files are 0444");
	is_int(image_current(state, imgdir, id), 0, "the imported build is current");
	is_str(id, id1, "by its ID");

	build(imgdir, "two");
	is_int(image_import(state, imgdir, id2, &why), 0, "a rebuild is imported");
	ok(strcmp(id1, id2) != 0, "under another ID");
	cmd = xasprintf("cat %s", p);
	text = shell(cmd);
	is_str(text, "one", "the first build's stored files are unchanged by the rebuild");
	free(cmd);
	free(text);
	free(p);
	is_int(image_import(state, imgdir, id, &why), 0, "importing the same build again");
	is_str(id, id2, "gives the same ID");
	is_int(image_list(state, &v, &n), 0, "the store lists");
	is_int(n, 2, "two images, each stored once");
	if (n == 2)
		is_str(v[1].kernel, "6.1-test", "with the manifest's kernel");
	image_info_free(v, n);

	is_int(image_resolve(state, "zz", id, &why), -EINVAL, "a prefix that is not hex is refused");
	free(why);
	why = NULL;
	p = xasprintf("sha256:%.8s", id1);
	is_int(image_resolve(state, p, id, &why), 0, "a unique prefix resolves (sha256: allowed)");
	is_str(id, id1, "to its image");
	free(p);
	is_int(image_remove(state, id1, &why), 0, "an image is removed");
	p = image_store_path(state, id1, NULL);
	ok(stat(p, &st) < 0 && errno == ENOENT, "its directory is gone");
	free(p);
	is_int(image_list(state, &v, &n), 0, "the store lists");
	is_int(n, 1, "one image left");
	image_info_free(v, n);

	cmd = xasprintf("rm -rf %s", root);
	if (system(cmd) != 0)
		printf("# could not remove %s\n", root);
	free(cmd);
	free(state);
	free(imgdir);
	return tap_done();
}
