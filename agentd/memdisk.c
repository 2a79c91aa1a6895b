/* memdisk: see memdisk.h. */
#include "agentd/memdisk.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "common/util.h"

#ifndef EXT4_IOC_RESIZE_FS
#define EXT4_IOC_RESIZE_FS _IOW('f', 16, uint64_t)	/* linux/fs/ext4/ext4.h; not in the uapi headers */
#endif

/* The size in bytes of the block device dev, from sysfs (512-byte sectors); -errno. */
static int device_bytes(dev_t dev, uint64_t *ret)
{
	char path[64], buf[32], *end;
	_cleanup_close_ int fd = -1;
	unsigned long long sectors;
	ssize_t n;

	snprintf(path, sizeof(path), "/sys/dev/block/%u:%u/size", major(dev), minor(dev));
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return -errno;
	if ((n = read(fd, buf, sizeof(buf) - 1)) <= 0)
		return n < 0 ? -errno : -EIO;
	buf[n] = '\0';
	errno = 0;
	sectors = strtoull(buf, &end, 10);
	if (errno || end == buf || (*end && *end != '\n'))
		return -EIO;
	*ret = (uint64_t)sectors * 512;
	return 0;
}

int memdisk_grow(const char *dir)
{
	_cleanup_close_ int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	_cleanup_close_ int pfd = -1;
	_cleanup_free_ char *parent = NULL;
	struct statfs sfs;
	struct stat st, ps;
	uint64_t bytes = 0, blocks;
	int r;

	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	parent = xasprintf("%s/..", dir);
	if ((pfd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0 || fstat(fd, &st) < 0 || fstat(pfd, &ps) < 0 ||
	    fstatfs(fd, &sfs) < 0)
		return -errno;
	/* Only the memory disk's own mount: a plain directory on the root disk has nothing to grow. */
	if (st.st_dev == ps.st_dev || sfs.f_type != EXT4_SUPER_MAGIC || sfs.f_bsize <= 0)
		return 0;
	if ((r = device_bytes(st.st_dev, &bytes)) < 0)
		return r;
	blocks = bytes / (uint64_t)sfs.f_bsize;
	/* f_blocks leaves ext4's own metadata out: it is below the total even at full size, so ask the kernel. */
	if (ioctl(fd, EXT4_IOC_RESIZE_FS, &blocks) < 0)
		return -errno;
	{
		struct statfs after;

		if (fstatfs(fd, &after) == 0 && after.f_blocks > sfs.f_blocks)
			return 1;
	}
	return 0;
}
