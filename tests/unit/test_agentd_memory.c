/*
 * test_agentd_memory: memory keys (agentd/memory.c), and the atomic put
 * of the real agentd binary ($AGENTD): killed with SIGKILL at random points
 * while it reads a large value, the key holds the old value or the new one,
 * whole, every time; what killed puts and imports leave behind is
 * swept by the next write, never what a live put is still writing; and an
 * import of an archive made the usual way (`tar -C DIR .`, whose first
 * entry is "./") is taken.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agentd/memory.h"
#include "tests/dir_count.h"
#include "tests/tap.h"

#define OLD_SIZE (3u << 20)
#define NEW_SIZE (5u << 20)
#define ROUNDS 12

static void test_keys(void)
{
	char longest[MEMORY_KEY_MAX + 2];

	ok(memory_key_valid("notes"), "a plain word is a key");
	ok(memory_key_valid("a.b_c-D9"), "letters, digits, dot, underscore, dash");
	ok(!memory_key_valid(""), "empty is not");
	ok(!memory_key_valid(NULL), "NULL is not");
	ok(!memory_key_valid("."), "'.' is not");
	ok(!memory_key_valid(".."), "'..' is not");
	ok(!memory_key_valid(".hidden"), "a leading dot is not (temp files and the store's own names)");
	ok(!memory_key_valid("a/b"), "a '/' is not");
	ok(!memory_key_valid("../etc"), "'../etc' is not");
	ok(!memory_key_valid("a b"), "a space is not");
	ok(!memory_key_valid("a\nb"), "a newline is not (ls prints one key a line)");
	ok(!memory_key_valid("caf\xc3\xa9"), "non-ASCII is not");
	memset(longest, 'k', MEMORY_KEY_MAX);
	longest[MEMORY_KEY_MAX] = '\0';
	ok(memory_key_valid(longest), "%d bytes is a key", MEMORY_KEY_MAX);
	longest[MEMORY_KEY_MAX] = 'k';
	longest[MEMORY_KEY_MAX + 1] = '\0';
	ok(!memory_key_valid(longest), "%d bytes is not", MEMORY_KEY_MAX + 1);
}

/* Run agentd memory --dir DIR VERB KEY with stdin from fd_in (or /dev/null); its pid. */
static pid_t spawn_agentd(const char *agentd, const char *dir, const char *verb, const char *key, int fd_in, int fd_out)
{
	pid_t pid = fork();

	if (pid == 0) {
		if (fd_in >= 0)
			dup2(fd_in, 0);
		if (fd_out >= 0)
			dup2(fd_out, 1);
		execl(agentd, "agentd", "memory", "--dir", dir, verb, key, (char *)NULL);
		_exit(127);
	}
	return pid;
}

static int wait_exit(pid_t pid)
{
	int st;

	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Put size bytes of c under key, to the end. */
static int put_all(const char *agentd, const char *dir, const char *key, char c, size_t size)
{
	char buf[65536];
	int p[2];
	pid_t pid;

	if (pipe2(p, O_CLOEXEC) < 0)
		return -1;
	pid = spawn_agentd(agentd, dir, "put", key, p[0], -1);
	close(p[0]);
	memset(buf, c, sizeof(buf));
	for (size_t done = 0; done < size;) {
		size_t n = size - done < sizeof(buf) ? size - done : sizeof(buf);

		if (write(p[1], buf, n) != (ssize_t)n)
			break;
		done += n;
	}
	close(p[1]);
	return wait_exit(pid);
}

/* What the file holds: 'A'/'B' when it is exactly size_a x 'A' or size_b x 'B', else '?'. */
static char classify(const char *path)
{
	char buf[65536];
	size_t total = 0;
	char first = 0;
	ssize_t n;
	int fd = open(path, O_RDONLY);

	if (fd < 0)
		return '-';
	while ((n = read(fd, buf, sizeof(buf))) > 0) {
		if (!first)
			first = buf[0];
		for (ssize_t i = 0; i < n; i++)
			if (buf[i] != first) {
				close(fd);
				return '?';
			}
		total += (size_t)n;
	}
	close(fd);
	if (first == 'A' && total == OLD_SIZE)
		return 'A';
	if (first == 'B' && total == NEW_SIZE)
		return 'B';
	return '?';
}

static void test_kill9(const char *agentd)
{
	char dir[] = "/tmp/test-agentd-memory.XXXXXX", store[256], value[300], buf[65536];
	int olds = 0, news = 0, bad = 0;

	if (!mkdtemp(dir)) {
		ok(0, "mkdtemp: %s", strerror(errno));
		return;
	}
	snprintf(store, sizeof(store), "%s/memory", dir);
	snprintf(value, sizeof(value), "%s/k", store);
	is_int(put_all(agentd, store, "k", 'A', OLD_SIZE), 0, "put of the old value (%u bytes) succeeds", OLD_SIZE);
	is_int(classify(value), 'A', "the key holds it");
	srand((unsigned)time(NULL) ^ (unsigned)getpid());
	memset(buf, 'B', sizeof(buf));
	for (int round = 0; round < ROUNDS; round++) {
		/* Kill after a random share of the new value, sometimes after all of it (before or during the rename). */
		size_t kill_at = (size_t)rand() % (NEW_SIZE + NEW_SIZE / 4), done = 0;
		int p[2];
		pid_t pid;
		char got;

		if (put_all(agentd, store, "k", 'A', OLD_SIZE) != 0) {
			bad++;
			continue;
		}
		if (pipe2(p, O_CLOEXEC) < 0)
			break;
		pid = spawn_agentd(agentd, store, "put", "k", p[0], -1);
		close(p[0]);
		while (done < NEW_SIZE && done < kill_at) {
			size_t n = NEW_SIZE - done < sizeof(buf) ? NEW_SIZE - done : sizeof(buf);

			if (n > kill_at - done)
				n = kill_at - done;
			if (write(p[1], buf, n) != (ssize_t)n)
				break;
			done += n;
		}
		if (done == NEW_SIZE) {
			close(p[1]);
			p[1] = -1;
			usleep((useconds_t)(rand() % 200000));	/* before, during or after the fsync and rename */
		}
		kill(pid, SIGKILL);
		wait_exit(pid);
		if (p[1] >= 0)
			close(p[1]);
		got = classify(value);
		if (got == 'A')
			olds++;
		else if (got == 'B')
			news++;
		else
			bad++;
		printf("# round %d: killed after %zu of %u bytes: %s\n", round, done, NEW_SIZE,
		     got == 'A' ? "old value" : got == 'B' ? "new value" : "BROKEN");
	}
	is_int(bad, 0, "%d puts killed at random points: every time the old (%d) or the new value (%d), never a mix",
	       ROUNDS, olds, news);
	ok(olds > 0, "at least one kill landed before the rename (old value kept)");

	/* get and rm, and a link planted under a key is never followed. */
	{
		char out[] = "/tmp/test-agentd-memory-out.XXXXXX", link[300], target[300];
		int fd = mkstemp(out);
		struct stat st;

		is_int(put_all(agentd, store, "k", 'B', NEW_SIZE), 0, "a whole put succeeds");
		pid_t pid = spawn_agentd(agentd, store, "get", "k", -1, fd);
		is_int(wait_exit(pid), 0, "get succeeds");
		close(fd);
		is_int(classify(out), 'B', "get writes the value");
		unlink(out);
		snprintf(target, sizeof(target), "%s/outside", dir);
		snprintf(link, sizeof(link), "%s/planted", store);
		fd = open(target, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		if (fd >= 0 && write(fd, "secret", 6) == 6)
			close(fd);
		ok(symlink(target, link) == 0, "a symlink planted in the store");
		pid = spawn_agentd(agentd, store, "get", "planted", -1, open("/dev/null", O_WRONLY));
		is_int(wait_exit(pid), MEMORY_EXIT_FAIL, "get does not follow it");
		is_int(put_all(agentd, store, "planted", 'A', 10), 0, "put over it replaces the link itself");
		ok(lstat(link, &st) == 0 && S_ISREG(st.st_mode), "the key is now a file");
		ok(stat(target, &st) == 0 && st.st_size == 6, "what the link pointed to is untouched");
		pid = spawn_agentd(agentd, store, "rm", "k", -1, -1);
		is_int(wait_exit(pid), 0, "rm succeeds");
		pid = spawn_agentd(agentd, store, "rm", "k", -1, -1);
		is_int(wait_exit(pid), MEMORY_EXIT_NOKEY, "rm of a missing key says so");
		pid = spawn_agentd(agentd, store, "get", "../outside", -1, -1);
		is_int(wait_exit(pid), MEMORY_EXIT_USAGE, "get of '../outside' is refused as an invalid key");
	}
	{
		char cmd[400];

		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
		if (system(cmd) != 0)
			printf("# could not remove %s\n", dir);
	}
}

static void write_file(const char *path, char c, size_t size)
{
	char buf[65536];
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	memset(buf, c, sizeof(buf));
	for (size_t done = 0; fd >= 0 && done < size;) {
		size_t n = size - done < sizeof(buf) ? size - done : sizeof(buf);

		if (write(fd, buf, n) != (ssize_t)n)
			break;
		done += n;
	}
	if (fd >= 0)
		close(fd);
}

static void test_leftovers(const char *agentd)
{
	char dir[] = "/tmp/test-agentd-memory.XXXXXX", store[256], path[400], cmd[400];
	int p[2], live;
	pid_t slow, q;

	if (!mkdtemp(dir)) {
		ok(0, "mkdtemp: %s", strerror(errno));
		return;
	}
	snprintf(store, sizeof(store), "%s/memory", dir);
	is_int(put_all(agentd, store, "k", 'A', 10), 0, "a store with one key");
	/* a put and an import killed mid-way: their temp file (5 MiB) and staging tree, no lock held */
	snprintf(path, sizeof(path), "%s/.put-k.0123456789abcdef.tmp", store);
	write_file(path, 'B', 5u << 20);
	snprintf(path, sizeof(path), "%s/.memory.import-0123456789abcdef", dir);
	mkdir(path, 0700);
	snprintf(path, sizeof(path), "%s/.memory.import-0123456789abcdef/half", dir);
	write_file(path, 'C', 1000);
	/* what the agent may plant under a temp name: a directory, a FIFO (left alone, no error, no hang) */
	snprintf(path, sizeof(path), "%s/.put-x.planted.tmp", store);
	mkdir(path, 0700);
	snprintf(path, sizeof(path), "%s/.put-y.planted.tmp", store);
	mkfifo(path, 0600);
	/* a live put, still reading its value: its temp file exists and is locked */
	if (pipe2(p, O_CLOEXEC) < 0)
		return;
	slow = spawn_agentd(agentd, store, "put", "slow", p[0], -1);
	close(p[0]);
	if (write(p[1], "first half ", 11) != 11)
		printf("# write to the live put failed\n");
	for (int i = 0; i < 500 && dir_count(store, ".put-slow.", NULL) < 1; i++)
		usleep(10000);	/* until agentd made its temp file */
	is_int(dir_count(store, ".put-slow.", NULL), 1, "the live put has its temp file");

	/* the next put, with a 1 MiB quota the killed put's 5 MiB would exceed */
	snprintf(path, sizeof(path), "%s/value", dir);
	write_file(path, 'D', 1000);
	q = fork();
	if (q == 0) {
		int fd = open(path, O_RDONLY);

		dup2(fd, 0);
		execl(agentd, "agentd", "memory", "--dir", store, "--quota", "1048576", "put", "next", (char *)NULL);
		_exit(127);
	}
	is_int(wait_exit(q), 0, "a put of 1000 bytes under a 1 MiB quota succeeds: the killed put's 5 MiB temp file no longer counts");
	is_int(dir_count(store, ".put-k.", NULL), 0, "the killed put's temp file is swept");
	is_int(dir_count(store, ".put-x.", NULL) + dir_count(store, ".put-y.", NULL), 2,
	       "a directory and a FIFO under temp names are left alone");
	is_int(dir_count(dir, ".memory.import-", NULL), 0, "the killed import's staging tree is swept");
	live = dir_count(store, ".put-slow.", NULL);
	is_int(live, 1, "the live put's temp file is left alone");
	if (write(p[1], "second half", 11) != 11)
		printf("# write to the live put failed\n");
	close(p[1]);
	is_int(wait_exit(slow), 0, "and the live put completes");
	snprintf(path, sizeof(path), "%s/slow", store);
	{
		char got[64] = "";
		int fd = open(path, O_RDONLY);
		ssize_t n = fd >= 0 ? read(fd, got, sizeof(got) - 1) : -1;

		got[n > 0 ? n : 0] = '\0';
		if (fd >= 0)
			close(fd);
		is_str(got, "first half second half", "with its whole value");
	}
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		printf("# could not remove %s\n", dir);
}

/* memory_main's import, in this process, of the archive `tar -C src .` makes; its exit status. */
static int import_tar_of(const char *src, const char *store)
{
	char cmd[512], path[] = "/tmp/test-memory-tar-XXXXXX";
	int fd = mkstemp(path), saved = dup(STDIN_FILENO), code;
	char *argv[] = { "memory", "--dir", (char *)store, "import", NULL };

	snprintf(cmd, sizeof(cmd), "tar cf %s -C %s .", path, src);
	if (fd < 0 || saved < 0 || system(cmd) != 0 || dup2(fd, STDIN_FILENO) < 0)
		return -1;
	code = memory_main(4, argv);
	dup2(saved, STDIN_FILENO);
	close(saved);
	close(fd);
	unlink(path);
	return code;
}

static void test_import_dot(void)
{
	char tmp[] = "/tmp/test-memory-XXXXXX", src[64], store[64], cmd[256], buf[16] = "";
	FILE *f;

	if (!mkdtemp(tmp)) {
		ok(0, "mkdtemp: %s", strerror(errno));
		return;
	}
	snprintf(src, sizeof(src), "%s/src", tmp);
	snprintf(store, sizeof(store), "%s/memory", tmp);
	snprintf(cmd, sizeof(cmd), "mkdir -p %s/notes && printf today > %s/notes/today.md", src, src);
	if (system(cmd) != 0) {
		ok(0, "cannot make the source tree");
		return;
	}
	is_int(import_tar_of(src, store), MEMORY_EXIT_OK, "import of `tar -C DIR .` (entries ./ and ./notes/...) is taken");
	snprintf(cmd, sizeof(cmd), "%s/notes/today.md", store);
	if ((f = fopen(cmd, "r"))) {
		(void)!fgets(buf, sizeof(buf), f);
		fclose(f);
	}
	is_str(buf, "today", "  and its files are in the store");
	snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp);
	(void)!system(cmd);
}

int main(void)
{
	const char *agentd = getenv("AGENTD");

	test_keys();
	test_import_dot();
	if (agentd && access(agentd, X_OK) == 0) {
		test_kill9(agentd);
		test_leftovers(agentd);
	} else
		ok(0, "AGENTD (the built agentd) is not set or not executable: '%s'", agentd ? agentd : "");
	return tap_done();
}
