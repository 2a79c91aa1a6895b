/*
 * fuzz_memory: `agentd memory import` (agentd/memory.c) on an archive from
 * the fuzz input, as fleetd runs it (the archive on stdin, libarchive
 * loaded by agentd itself), into a fresh store per input in a temp dir
 * (on /dev/shm when there is one: the import fsyncs). Checks: the exit
 * status is one memory.h names for an import; nothing is left beside the
 * store (no staging directory) and nothing appears outside it (a sibling
 * directory stays empty); the store holds only regular files and
 * directories, no set-id or sticky bits, no deeper than agentd allows.
 */
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agentd/memory.h"
#include "tests/dir_count.h"

#define FAIL(what) do { fprintf(stderr, "fuzz_memory: %s\n", what); abort(); } while (0)

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	return flag == FTW_DP ? rmdir(path) : unlink(path);
}

static int check_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)path;
	if (flag == FTW_SL || flag == FTW_SLN || (!S_ISREG(st->st_mode) && !S_ISDIR(st->st_mode)))
		FAIL("an import left something that is neither a file nor a directory");
	if (st->st_mode & (S_ISUID | S_ISGID | S_ISVTX))
		FAIL("an import left a set-id or sticky bit");
	if (ftw->level > 34)
		FAIL("an import nested deeper than agentd allows");
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char base[64];
	char tmp[128], parent[160], store[192], outside[160];
	int in, saved, code;

	if (!*base)
		snprintf(base, sizeof(base), "%s", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
	snprintf(tmp, sizeof(tmp), "%s/fuzz-memory-XXXXXX", base);
	if (!mkdtemp(tmp))
		FAIL("mkdtemp");
	snprintf(parent, sizeof(parent), "%s/home", tmp);
	snprintf(outside, sizeof(outside), "%s/outside", tmp);
	snprintf(store, sizeof(store), "%s/memory", parent);
	if (mkdir(parent, 0700) < 0 || mkdir(outside, 0700) < 0)
		FAIL("mkdir");
	/* The archive on stdin, as fleetd's exec gives it. */
	if ((in = memfd_create("archive", 0)) < 0 || write(in, data, size) != (ssize_t)size || lseek(in, 0, SEEK_SET) < 0)
		FAIL("memfd");
	saved = dup(STDIN_FILENO);
	if (saved < 0 || dup2(in, STDIN_FILENO) < 0)
		FAIL("dup2");
	close(in);
	char *argv[] = { "memory", "--dir", store, "--quota", "4194304", "import", NULL };
	code = memory_main(6, argv);
	if (dup2(saved, STDIN_FILENO) < 0)
		FAIL("dup2 back");
	close(saved);

	if (code != MEMORY_EXIT_OK && code != MEMORY_EXIT_FAIL && code != MEMORY_EXIT_QUOTA && code != MEMORY_EXIT_REFUSED)
		FAIL("an import exited with a status memory.h does not name for it");
	if (dir_count(parent, NULL, "memory") != 0)
		FAIL("an import left something beside the store (a staging directory?)");
	if (dir_count(outside, NULL, NULL) != 0 || dir_count(tmp, NULL, NULL) != 2)
		FAIL("an import wrote outside the store");
	if (code == MEMORY_EXIT_OK && access(store, F_OK) != 0)
		FAIL("an import that succeeded left no store");
	if (access(store, F_OK) == 0)
		(void)nftw(store, check_one, 16, FTW_PHYS);
	if (nftw(tmp, rm_one, 16, FTW_DEPTH | FTW_PHYS) < 0)
		FAIL("cannot clean up");
	return 0;
}
