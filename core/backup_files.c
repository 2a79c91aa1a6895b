/* backup_files: see backup_files.h. */
#include "core/backup_files.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"

int backup_file_create(int dir, const char *name)
{
	int fd = openat(dir, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);

	return fd < 0 ? -errno : fd;
}

int backup_file_write(int dir, const char *name, const void *data, size_t len)
{
	int fd = backup_file_create(dir, name), r;

	if (fd < 0)
		return fd;
	r = write_all(fd, data, len);
	if (!r && fsync(fd) < 0)
		r = -errno;
	close(fd);
	return r;
}

int backup_file_sync(int dir, const char *name)
{
	int fd = openat(dir, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC), r = 0;

	if (fd < 0)
		return -errno;
	if (fsync(fd) < 0)
		r = -errno;
	close(fd);
	return r;
}

int backup_file_hash(int dir, const char *name, char hex[65], long long *size)
{
	_cleanup_close_ int fd = openat(dir, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	unsigned char buf[65536], md[EVP_MAX_MD_SIZE];
	unsigned int md_len = 0;
	long long total = 0;
	EVP_MD_CTX *ctx;
	struct stat st;
	ssize_t n;
	int r = 0;

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -EINVAL;
	if (!(ctx = EVP_MD_CTX_new()))
		return -ENOMEM;
	if (EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1)
		r = -EIO;
	while (!r && (n = read(fd, buf, sizeof(buf))) != 0) {
		if (n < 0) {
			if (errno != EINTR)
				r = -errno;
			continue;
		}
		total += n;
		if (EVP_DigestUpdate(ctx, buf, (size_t)n) != 1)
			r = -EIO;
	}
	if (!r && EVP_DigestFinal_ex(ctx, md, &md_len) != 1)
		r = -EIO;
	EVP_MD_CTX_free(ctx);
	if (r < 0)
		return r;
	for (unsigned int i = 0; i < md_len && i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
	*size = total;
	return 0;
}
