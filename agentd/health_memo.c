/* health_memo: see health_memo.h. libc only. */
#include "agentd/health_memo.h"

#include <elf.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#define KEY_FILES 16		/* stats in a key: more path components than that, no memo */
#define KEY_GROUPS 64
#define LOCK_TRIES 10000	/* yields before a busy memo counts as none */
#define SETTLE_S 1		/* a key with a change younger than this is not kept */

/* What of a file's stat a change to it moves (ctime: any write, chmod, chown, link count). */
struct file_id {
	dev_t dev;
	ino_t ino;
	mode_t mode;
	uid_t uid;
	gid_t gid;
	off_t size;
	struct timespec mtim, ctim;
};

/* Compared with memcmp: always calloc'ed, so padding is zero. */
struct health_memo_key {
	uid_t uid, euid;
	gid_t gid, egid;
	int ngroups;
	gid_t groups[KEY_GROUPS];
	char real[256];		/* the shell's path resolved */
	unsigned long fs_flag, fs_id;
	int nfiles;
	struct file_id files[KEY_FILES];
};

struct health_memo {
	atomic_flag busy;
	bool kept;
	struct health_memo_key key;
};

struct health_memo *health_memo_new(void)
{
	struct health_memo *m = mmap(NULL, sizeof(*m), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	if (m == MAP_FAILED)
		return NULL;
	atomic_flag_clear(&m->busy);
	m->kept = false;
	return m;
}

static bool memo_lock(struct health_memo *m)
{
	for (int i = 0; i < LOCK_TRIES; i++) {
		if (!atomic_flag_test_and_set(&m->busy))
			return true;
		sched_yield();
	}
	return false;
}

static bool key_add(struct health_memo_key *k, const char *path)
{
	struct stat st;
	struct file_id *f;

	if (k->nfiles >= KEY_FILES || stat(path, &st) < 0)
		return false;
	f = &k->files[k->nfiles++];
	f->dev = st.st_dev;
	f->ino = st.st_ino;
	f->mode = st.st_mode;
	f->uid = st.st_uid;
	f->gid = st.st_gid;
	f->size = st.st_size;
	f->mtim = st.st_mtim;
	f->ctim = st.st_ctim;
	return true;
}

/* Every directory on an absolute path, then the path itself (followed). */
static bool key_add_path(struct health_memo_key *k, const char *path)
{
	char prefix[sizeof(k->real)];
	size_t len = strlen(path);

	if (path[0] != '/' || len >= sizeof(prefix) || !key_add(k, "/"))
		return false;
	for (size_t i = 1; i < len; i++)
		if (path[i] == '/') {
			memcpy(prefix, path, i);
			prefix[i] = '\0';
			if (!key_add(k, prefix))
				return false;
		}
	return key_add(k, path);
}

struct health_memo_key *health_memo_key_read(const char *shell)
{
	struct health_memo_key *k = calloc(1, sizeof(*k));
	char real[PATH_MAX];
	struct statvfs vfs;

	if (!k)
		return NULL;
	k->uid = getuid();
	k->euid = geteuid();
	k->gid = getgid();
	k->egid = getegid();
	k->ngroups = getgroups(KEY_GROUPS, k->groups);
	if (k->ngroups < 0 || !realpath(shell, real) || strlen(real) >= sizeof(k->real))
		goto none;
	memcpy(k->real, real, strlen(real) + 1);
	if (!key_add_path(k, shell) || !key_add_path(k, k->real) || statvfs(k->real, &vfs) < 0)
		goto none;
	k->fs_flag = vfs.f_flag;
	k->fs_id = vfs.f_fsid;
	return k;
none:
	free(k);
	return NULL;
}

/* Whether k's file is (still) that file and a static ELF executable: no loader, no library to change under it. */
static bool key_static_elf(const struct health_memo_key *k)
{
	const struct file_id *f = &k->files[k->nfiles - 1];	/* the resolved file */
	unsigned char ident[EI_NIDENT];
	struct stat st;
	bool ok = false;
	int fd = open(k->real, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);

	if (fd < 0)
		return false;
	if (fstat(fd, &st) < 0 || st.st_dev != f->dev || st.st_ino != f->ino || st.st_ctim.tv_sec != f->ctim.tv_sec ||
	    st.st_ctim.tv_nsec != f->ctim.tv_nsec || pread(fd, ident, sizeof(ident), 0) != (ssize_t)sizeof(ident) ||
	    memcmp(ident, ELFMAG, SELFMAG) != 0)
		goto out;
	if (ident[EI_CLASS] == ELFCLASS64) {
		Elf64_Ehdr eh;
		Elf64_Phdr ph;

		if (pread(fd, &eh, sizeof(eh), 0) != (ssize_t)sizeof(eh) || eh.e_phentsize != sizeof(ph))
			goto out;
		ok = eh.e_phnum > 0;
		for (unsigned i = 0; ok && i < eh.e_phnum; i++)
			if (pread(fd, &ph, sizeof(ph), (off_t)(eh.e_phoff + (Elf64_Off)i * sizeof(ph))) != (ssize_t)sizeof(ph) ||
			    ph.p_type == PT_INTERP)
				ok = false;
	} else if (ident[EI_CLASS] == ELFCLASS32) {
		Elf32_Ehdr eh;
		Elf32_Phdr ph;

		if (pread(fd, &eh, sizeof(eh), 0) != (ssize_t)sizeof(eh) || eh.e_phentsize != sizeof(ph))
			goto out;
		ok = eh.e_phnum > 0;
		for (unsigned i = 0; ok && i < eh.e_phnum; i++)
			if (pread(fd, &ph, sizeof(ph), (off_t)(eh.e_phoff + (Elf32_Off)i * sizeof(ph))) != (ssize_t)sizeof(ph) ||
			    ph.p_type == PT_INTERP)
				ok = false;
	}
out:
	close(fd);
	return ok;
}

/*
 * Whether every stat in k changed at least SETTLE_S ago: a file's times
 * have the kernel's coarse clock (a tick, a few ms, on older kernels), so
 * a change within the tick of the one before could leave its ctime as it
 * was; one made after a key is kept is in a later tick than any time in
 * it. A time in the future (a clock set back) is not settled either.
 */
static bool key_settled(const struct health_memo_key *k)
{
	struct timespec now;

	if (clock_gettime(CLOCK_REALTIME, &now) < 0)
		return false;
	for (int i = 0; i < k->nfiles; i++)
		if (k->files[i].mtim.tv_sec > now.tv_sec - SETTLE_S || k->files[i].ctim.tv_sec > now.tv_sec - SETTLE_S)
			return false;
	return true;
}

bool health_memo_holds(struct health_memo *m, const struct health_memo_key *k)
{
	bool holds;

	if (!m || !k || !memo_lock(m))
		return false;
	holds = m->kept && memcmp(&m->key, k, sizeof(*k)) == 0;
	atomic_flag_clear(&m->busy);
	return holds;
}

void health_memo_update(struct health_memo *m, const struct health_memo_key *k, bool passed)
{
	bool keep;

	if (!m)
		return;
	keep = passed && k && key_settled(k) && key_static_elf(k);
	if (!memo_lock(m))
		return;
	m->kept = keep;
	if (keep)
		memcpy(&m->key, k, sizeof(*k));	/* padding too: holds() compares bytes */
	atomic_flag_clear(&m->busy);
}
