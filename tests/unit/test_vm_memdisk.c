/*
 * test_vm_memdisk: a VM agent's memory disk as fleetd builds it on the host
 * (vm/memdisk.c): a qcow2 of the size vm_memdisk_mib says, root's 0600,
 * holding ext4 labelled fleet-memory whose root is the agent user's and
 * whose free space holds the quota (and not much more); a link planted at
 * a temp file's name is replaced, never followed. Before a boot,
 * vm_memdisk_fit grows a disk a revert made smaller, and asks qemu-img only
 * when fleetd does not know the size (its start, a revert): qemu-img is
 * counted through a wrapper first on PATH. At start, the temp files of a
 * build cut short are swept, never a finished disk.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "tests/tap.h"
#include "vm/vm_internal.h"

#define MIB (1LL << 20)

/* The first line of a shell command's output (cmd is freed), or ""; caller frees. */
static char *sh(char *cmd)
{
	char buf[512] = "";
	FILE *p = popen(cmd, "r");

	if (p) {
		if (!fgets(buf, sizeof(buf), p))
			buf[0] = '\0';
		pclose(p);
	}
	free(cmd);
	buf[strcspn(buf, "\n")] = '\0';
	return xstrdup(buf);
}

static void check_quota(const char *dir, int quota)
{
	_cleanup_free_ char *path = xasprintf("%s/memory-%d.qcow2", dir, quota), *raw = xasprintf("%s.raw", path);
	_cleanup_free_ char *why = NULL, *fmt = NULL, *vsize = NULL, *label = NULL, *free_blocks = NULL, *owner = NULL;
	int mib = vm_memdisk_mib(quota), r;
	long long free_bytes;
	struct stat st;

	r = vm_memdisk_build(path, mib, &why);
	is_int(r, 0, "quota %d MiB: built (%s)", quota, why ? why : "no error");
	ok(lstat(path, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 07777) == 0600 && st.st_uid == geteuid(),
	   "quota %d: a regular file, ours, 0600", quota);
	fmt = sh(xasprintf("qemu-img info --output=json '%s' | jq -r .format", path));
	is_str(fmt, "qcow2", "quota %d: qcow2 (libvirt's internal snapshots cover it)", quota);
	vsize = sh(xasprintf("qemu-img info --output=json '%s' | jq -r '.[\"virtual-size\"]'", path));
	is_int(atoll(vsize), (long long)mib * MIB, "quota %d: %d MiB", quota, mib);
	{
		_cleanup_free_ char *conv = xasprintf("qemu-img convert -f qcow2 -O raw '%s' '%s.raw'", path, path);
		ok(system(conv) == 0, "quota %d: back to raw, to look inside", quota);
	}
	label = sh(xasprintf("dumpe2fs -h '%s' 2>/dev/null | sed -n 's/^Filesystem volume name: *//p'", raw));
	is_str(label, "fleet-memory", "quota %d: ext4 labelled fleet-memory", quota);
	owner = sh(xasprintf("debugfs -R 'stat /' '%s' 2>/dev/null | sed -n 's/.*User: *\\([0-9]*\\) *Group: *\\([0-9]*\\).*/\\1:\\2/p'", raw));
	is_str(owner, "1000:1000", "quota %d: its root is the agent user's (uid 1000 in the guest)", quota);
	free_blocks = sh(xasprintf("dumpe2fs -h '%s' 2>/dev/null | sed -n 's/^Free blocks: *//p'", raw));
	free_bytes = atoll(free_blocks) * 4096;
	ok(free_bytes >= (long long)quota * MIB, "quota %d: the file system holds the quota (%lld bytes free)", quota,
	   free_bytes);
	ok(free_bytes <= (long long)quota * MIB + (long long)quota * MIB / 25 + 5 * MIB,
	   "quota %d: and not much more (%lld MiB over)", quota, (free_bytes - (long long)quota * MIB) / MIB);
	unlink(raw);
	unlink(path);
}

/* Lines in the wrapper's log: how many times fleetd ran qemu-img. */
static int spawns(const char *log)
{
	_cleanup_free_ char *n = sh(xasprintf("cat '%s' 2>/dev/null | wc -l", log));

	return atoi(n);
}

static void check_fit(const char *dir)
{
	_cleanup_free_ char *bin = xasprintf("%s/bin", dir), *log = xasprintf("%s/qemu-img.log", dir);
	_cleanup_free_ char *real = sh(xstrdup("command -v qemu-img")), *wrapper = xasprintf("%s/qemu-img", bin);
	_cleanup_free_ char *path = NULL, *why = NULL, *vsize = NULL, *newpath = NULL;
	_cleanup_free_ char *oldpath = xstrdup(getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin");
	struct vm_backend b = { .state_dir = xstrdup(dir) };
	struct vm v = { .name = (char *)"fit", .b = &b };
	struct agent a = { .name = (char *)"fit", .memory_quota_mib = 64 };
	int small = vm_memdisk_mib(1), want = vm_memdisk_mib(64);
	FILE *w;

	b.vms = &v;
	ok(mkdir(bin, 0700) == 0 && (w = fopen(wrapper, "w")) != NULL, "a qemu-img wrapper that counts its runs");
	fprintf(w, "#!/bin/sh\necho \"$*\" >> '%s'\nexec '%s' \"$@\"\n", log, real);
	fclose(w);
	chmod(wrapper, 0755);
	newpath = xasprintf("%s:%s", bin, oldpath);
	setenv("PATH", newpath, 1);
	{
		_cleanup_free_ char *vdir = xasprintf("%s/vms", dir), *adir = xasprintf("%s/vms/fit", dir);
		ok(mkdir(vdir, 0711) == 0 && mkdir(adir, 0700) == 0, "the agent's directory");
	}
	path = vm_path(&b, "fit", MEMDISK);
	/* As a revert to a snapshot from before the quota grew leaves it: the disk of a smaller quota. */
	is_int(vm_memdisk_build(path, small, &why), 0, "a disk of quota 1 MiB (%s)", why ? why : "no error");
	unlink(log);

	is_int(vm_memdisk_fit(&b, &a, &why), 0, "size unknown: fit (%s)", why ? why : "no error");
	vsize = sh(xasprintf("'%s' info --output=json '%s' | jq -r '.[\"virtual-size\"]'", real, path));
	is_int(atoll(vsize), (long long)want * MIB, "it grew to quota 64's %d MiB", want);
	is_int(spawns(log), 2, "qemu-img asked (info) and grew it (resize)");
	is_int(v.memdisk_mib, want, "the size is known now");

	unlink(log);
	is_int(vm_memdisk_fit(&b, &a, &why), 0, "the next boot: fit");
	is_int(spawns(log), 0, "no qemu-img at a boot when the size is known");

	/* A revert brings back a smaller disk: forgotten, read and grown again. */
	vm_memdisk_forget(&v);
	unlink(path);
	is_int(vm_memdisk_build(path, small, &why), 0, "the reverted disk of quota 1 MiB");
	unlink(log);
	is_int(vm_memdisk_fit(&b, &a, &why), 0, "after the revert: fit");
	free(vsize);
	vsize = sh(xasprintf("'%s' info --output=json '%s' | jq -r '.[\"virtual-size\"]'", real, path));
	is_int(atoll(vsize), (long long)want * MIB, "grown again to %d MiB", want);
	is_int(spawns(log), 2, "qemu-img asked again after the revert");

	/* Unknown again (fleetd's start) with a disk of the right size: asked once, not grown. */
	vm_memdisk_forget(&v);
	unlink(log);
	is_int(vm_memdisk_fit(&b, &a, &why), 0, "size unknown, disk already large enough: fit");
	is_int(spawns(log), 1, "qemu-img asked (info) only");
	is_int(v.memdisk_mib, want, "and the size is known");

	setenv("PATH", oldpath, 1);
	unlink(path);
	unlink(log);
	unlink(wrapper);
	rmdir(bin);
	{
		_cleanup_free_ char *adir = xasprintf("%s/vms/fit", dir), *vdir = xasprintf("%s/vms", dir);
		rmdir(adir);
		rmdir(vdir);
	}
	free(b.state_dir);
}

/* A build cut short left its temp files: swept at start; the finished disk and what links point at stay. */
static void check_sweep(const char *dir)
{
	static const char *const names[] = { MEMDISK, MEMDISK ".tmp", MEMDISK ".raw.tmp" };
	_cleanup_free_ char *adir = xasprintf("%s/vms/swept", dir), *other = xasprintf("%s/other", dir);
	_cleanup_free_ char *link = xasprintf("%s/vms/linked", dir);
	struct vm_backend b = { .state_dir = xstrdup(dir) };
	struct stat st;

	{
		_cleanup_free_ char *vdir = xasprintf("%s/vms", dir);
		ok(mkdir(vdir, 0711) == 0 && mkdir(adir, 0700) == 0 && mkdir(other, 0700) == 0,
		   "an agent's directory and one elsewhere");
	}
	for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
		_cleanup_free_ char *p = xasprintf("%s/%s", adir, names[i]), *q = xasprintf("%s/%s", other, names[i]);
		int fd = open(p, O_WRONLY | O_CREAT | O_EXCL, 0600), fd2 = open(q, O_WRONLY | O_CREAT | O_EXCL, 0600);

		ok(fd >= 0 && fd2 >= 0, "%s in both", names[i]);
		close(fd);
		close(fd2);
	}
	ok(symlink(other, link) == 0, "an agent 'directory' that is a link to the other one");
	vm_memdisk_sweep(&b);
	for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
		_cleanup_free_ char *p = xasprintf("%s/%s", adir, names[i]), *q = xasprintf("%s/%s", other, names[i]);

		if (i == 0)
			ok(lstat(p, &st) == 0, "the finished disk %s stays", names[i]);
		else
			ok(lstat(p, &st) < 0 && errno == ENOENT, "the leftover %s is gone", names[i]);
		ok(lstat(q, &st) == 0, "%s behind the link is untouched", names[i]);
		unlink(p);
		unlink(q);
	}
	unlink(link);
	rmdir(adir);
	rmdir(other);
	{
		_cleanup_free_ char *vms = xasprintf("%s/vms", dir);
		rmdir(vms);
	}
	free(b.state_dir);
}

int main(void)
{
	char tmpl[] = "/tmp/test_vm_memdisk.XXXXXX";
	const char *dir;
	int quotas[] = { 1, 64, MEMORY_QUOTA_MAX };

	if (system("command -v mke2fs && command -v qemu-img && command -v dumpe2fs && command -v debugfs && "
		   "command -v jq") != 0) {
		printf("1..0 # SKIP needs mke2fs, dumpe2fs, debugfs (e2fsprogs), qemu-img and jq\n");
		return 0;
	}
	if (!(dir = mkdtemp(tmpl)))
		return 99;
	for (size_t i = 0; i < ARRAY_SIZE(quotas); i++)
		check_quota(dir, quotas[i]);

	/* A link at a temp file's name (a killed build's leftover, or planted): replaced, not followed. */
	{
		_cleanup_free_ char *path = xasprintf("%s/memory.qcow2", dir), *raw = xasprintf("%s.raw.tmp", path);
		_cleanup_free_ char *victim = xasprintf("%s/victim", dir), *why = NULL, *tmp = xasprintf("%s.tmp", path);
		struct stat st;
		int fd = open(victim, O_WRONLY | O_CREAT | O_TRUNC, 0644);

		ok(fd >= 0 && write(fd, "keep", 4) == 4 && close(fd) == 0, "a file the link points at");
		ok(symlink(victim, raw) == 0 && symlink(victim, tmp) == 0, "links at both temp names");
		is_int(vm_memdisk_build(path, vm_memdisk_mib(1), &why), 0, "built anyway (%s)", why ? why : "no error");
		ok(stat(victim, &st) == 0 && st.st_size == 4, "the file the links pointed at is untouched");
		ok(lstat(raw, &st) < 0 && errno == ENOENT, "no raw temp file is left");
		ok(lstat(tmp, &st) < 0 && errno == ENOENT, "no qcow2 temp file is left");
		unlink(path);
		unlink(victim);
	}
	check_fit(dir);
	check_sweep(dir);
	rmdir(dir);
	return tap_done();
}
