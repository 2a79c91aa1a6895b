/*
 * User-agent snapshots through the backend's ops, on a real event loop, as
 * root: a home with every kind of entry is snapshotted while the agent runs,
 * wrecked, restored and compared entry by entry (type, mode, owner, size,
 * mtime, link target, link count, content); the agent cannot read its
 * snapshots; unchanged files are shared by hard links between snapshots but
 * a restored home shares nothing with them; refusals while busy; a writer
 * is frozen while its home is copied; failed restores leave the home as it
 * was; leftovers of a killed fleetd are cleaned. Agent names start with
 * "ust" so they collide with no other test's. USNAP_BENCH=1 adds a timing
 * run (1000 files, 50 MB).
 *
 * The state dir is in /var/lib, not /tmp: an agent's sandbox has a private
 * /tmp, where the snapshots would be invisible for the wrong reason.
 */
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "model/agent.h"
#include "backend/spawn.h"
#include "user/backend.h"
#include "user/cgroup.h"
#include "user/internal.h"
#include "model/config.h"
#include "model/fleetd.h"
#include "common/log.h"
#include "user/launch.h"
#include "user/snapshot.h"
#include "common/util.h"
#include "../tap.h"
#include "tests/unit/exec_out.h"

static struct fleetd F;
static const struct backend_ops *ops = &backend_user_ops;
static char state_dir[] = "/var/lib/fleet-ust-XXXXXX";
static bool made_state_dir;
static struct cgroup_host *cg;
static bool in_ci;

static struct agent *mk_agent(const char *name)
{
	struct agent *a = xcalloc(1, sizeof(*a));

	a->name = xstrdup(name);
	a->backend = BACKEND_USER;
	a->state = AGENT_PROVISIONING;
	a->memory_mib = 256;
	a->vcpus = 1;
	return a;
}

/* Run the loop until cond or about 60 s. */
#define LOOP_UNTIL(cond) do { \
	for (int _i = 0; _i < 6000 && !(cond); _i++) { \
		struct timeval _tv = { 0, 10000 }; \
		event_base_loopexit(F.base, &_tv); \
		event_base_dispatch(F.base); \
	} } while (0)

#define SH(...) ((const char *const[]){ "sh", "-c", __VA_ARGS__, NULL })

static int start_exec(struct agent *a, const char *const *argv, struct exec_out *o, struct exec_handle **h, char **why)
{
	struct exec_request req = { .argv = argv };
	struct exec_callbacks cb = { exec_out_on_output, exec_out_on_done, o };

	memset(o, 0, sizeof(*o));
	return ops->exec(&F, a, &req, &cb, h, why);
}

/* Run a shell command as the agent; its stdout in o->out. */
static int run_sh(struct agent *a, const char *script, struct exec_out *o)
{
	struct exec_handle *h;
	char *why = NULL;
	int r = start_exec(a, SH(script), o, &h, &why);

	if (r < 0) {
		printf("# exec failed: %s\n", why ? why : "");
		free(why);
		return r;
	}
	LOOP_UNTIL(o->done);
	if (o->res.exit_code != 0)
		printf("# exec '%.60s...' exit %d: %s\n", script, o->res.exit_code, o->err);
	return o->done ? o->res.exit_code : -ETIMEDOUT;
}

static bool op_done;
static int op_r;
static char op_why[512];
static void on_op(void *ud, int r, const char *why)
{
	op_done = true;
	op_r = r;
	snprintf(op_why, sizeof(op_why), "%s", why ? why : "");
}

static int do_start(struct agent *a)
{
	char *why = NULL;
	int r;

	op_done = false;
	if ((r = ops->start(&F, a, on_op, NULL, &why)) < 0) {
		printf("# start: %s\n", why ? why : "");
		free(why);
		return r;
	}
	LOOP_UNTIL(op_done);
	return op_r;
}

static int do_stop(struct agent *a)
{
	char *why = NULL;
	int r;

	op_done = false;
	if ((r = ops->stop(&F, a, 2, on_op, NULL, &why)) < 0) {
		free(why);
		return r;
	}
	LOOP_UNTIL(op_done);
	return op_r;
}

static int state_of(struct agent *a)
{
	enum agent_state s;
	int r = ops->state(&F, a, &s, NULL);

	return r < 0 ? r : (int)s;
}

struct snap_out {
	bool done;
	int calls;
	int error;
	char why[512], kind[16];
	long long size;
};

static void on_snap(void *ud, const struct snapshot_result *res)
{
	struct snap_out *o = ud;

	o->done = true;
	o->calls++;
	o->error = res->error;
	snprintf(o->why, sizeof(o->why), "%s", res->why ? res->why : "");
	snprintf(o->kind, sizeof(o->kind), "%s", snapshot_kind_to_string(res->kind));
	o->size = res->size_bytes;
}

/* Start a snapshot; *early is true if done() ran before create() returned. */
static int snap_start(struct agent *a, const char *name, struct snap_out *o, bool *early)
{
	char *why = NULL;
	int r;

	memset(o, 0, sizeof(*o));
	r = ops->snapshot_create(&F, a, name, on_snap, o, &why);
	if (early)
		*early = o->done;
	if (r < 0)
		snprintf(o->why, sizeof(o->why), "%s", why ? why : "");
	free(why);
	return r;
}

/* Take a snapshot and wait; its error (0) or the synchronous refusal. */
static int snap(struct agent *a, const char *name, struct snap_out *o)
{
	int r = snap_start(a, name, o, NULL);

	if (r < 0)
		return r;
	LOOP_UNTIL(o->done);
	if (o->error < 0)
		printf("# snapshot '%s': %s\n", name, o->why);
	return o->done ? o->error : -ETIMEDOUT;
}

static int restore_start(struct agent *a, const char *name)
{
	char *why = NULL;
	int r;

	op_done = false;
	*op_why = '\0';
	r = ops->snapshot_restore(&F, a, name, on_op, NULL, &why);
	if (r < 0)
		snprintf(op_why, sizeof(op_why), "%s", why ? why : "");
	free(why);
	return r;
}

static int restore(struct agent *a, const char *name)
{
	int r = restore_start(a, name);

	if (r < 0)
		return r;
	LOOP_UNTIL(op_done);
	return op_done ? op_r : -ETIMEDOUT;
}

/* A path below the state dir. */
static char *spath(const char *sub)
{
	return xasprintf("%s/%s", state_dir, sub);
}

/* Everything about a tree that a restore must bring back, one line per entry, then contents. */
static char *manifest(const char *dir, bool with_nlink)
{
	_cleanup_free_ char *cmd = xasprintf(
		"cd '%s' && find . -printf '%%p %%y %%m %%U %%G %%s %%T@ %%l%s\\n' | LC_ALL=C sort && "
		"find . -type f -exec md5sum {} + | LC_ALL=C sort -k2", dir, with_nlink ? " %n" : "");
	FILE *p = popen(cmd, "r");
	char *buf = NULL;
	size_t len = 0, cap = 0, n;
	char chunk[4096];

	if (!p)
		return xstrdup("");
	while ((n = fread(chunk, 1, sizeof(chunk), p)) > 0) {
		if (len + n + 1 > cap)
			buf = xrealloc(buf, cap = 2 * (len + n + 1));
		memcpy(buf + len, chunk, n);
		len += n;
	}
	pclose(p);
	if (!buf)
		return xstrdup("");
	buf[len] = '\0';
	return buf;
}

static int sh(const char *cmd)
{
	int r = system(cmd);

	if (r != 0)
		printf("# command failed: %s\n", cmd);
	return r;
}

static bool same_text(const char *a, const char *b, const char *what)
{
	if (strcmp(a, b) == 0)
		return true;
	/* show the first differing line of each */
	size_t i = 0, start = 0;
	while (a[i] && a[i] == b[i]) {
		if (a[i] == '\n')
			start = i + 1;
		i++;
	}
	printf("# %s differs at:\n#   got:  %.200s\n#   want: %.200s\n", what, b + start, a + start);
	return false;
}

static ino_t ino_of(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0 ? st.st_ino : 0;
}

static long read_count(const char *path)
{
	char buf[64] = "";
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	return atol(buf);
}

/* Is the dir empty (or absent)? */
static bool dir_empty(const char *dir)
{
	_cleanup_free_ char *cmd = xasprintf("[ -z \"$(ls -A '%s' 2>/dev/null)\" ]", dir);

	return system(cmd) == 0;
}

static bool private_dir(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == 0 && st.st_gid == 0 &&
	       (st.st_mode & 07777) == 0700;
}

static void cleanup(void)
{
	static const char *const names[] = { "ust-a", "ust-bench" };
	char *why = NULL;

	for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
		struct agent *a = mk_agent(names[i]);
		(void)ops->destroy(&F, a, true, &why);
		free(why);
		why = NULL;
		agent_free(a);
	}
	if (F.base)
		ops->shutdown(&F);
	if (made_state_dir) {
		/* users/ and netns/ are mounts of their own (account_own_mount): lazily, with whatever is below */
		_cleanup_free_ char *rm = xasprintf("umount -l '%s/users' '%s/netns' 2>/dev/null; "
						    "rm -rf --one-file-system '%s'", state_dir, state_dir, state_dir);
		sh(rm);
	}
	cgroup_host_free(cg);
}

/*
 * A crash must not leave users behind either: kill what runs under the
 * test's agent uids (nothing else), remove the users, groups and state dir.
 */
static long uid_min;
static void on_fatal(int sig)
{
	static const char *const names[] = { "fleet-ust-a", "fleet-ust-bench" };

	for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
		struct passwd *pw = getpwnam(names[i]);
		if (pw && (long)pw->pw_uid >= uid_min && (long)pw->pw_uid < uid_min + 100) {
			/* the keeper's init is root: the cgroup finds it, the uid sweep would not */
			(void)cgroup_thaw(cg, names[i] + 6);
			(void)cgroup_kill(cg, names[i] + 6, 2000);
			(void)cgroup_remove(cg, names[i] + 6);
			(void)user_launch_kill_uid(pw->pw_uid, 2000);
			_cleanup_free_ char *cmd = xasprintf("userdel %s; groupdel %s", names[i], names[i]);
			(void)!system(cmd);
		}
	}
	if (made_state_dir) {
		/* users/ and netns/ are mounts of their own (account_own_mount): lazily, with whatever is below */
		_cleanup_free_ char *rm = xasprintf("umount -l '%s/users' '%s/netns' 2>/dev/null; "
						    "rm -rf --one-file-system '%s'", state_dir, state_dir, state_dir);
		(void)!system(rm);
	}
	signal(sig, SIG_DFL);
	raise(sig);
}

/*
 * A process of the agent that is no exec: in its cgroup, as its user,
 * counting into work/count. 1<> overwrites without truncating, so a reader
 * never sees the file empty (the number only grows in length).
 */
static int start_writer(uid_t uid, const char *home, struct user_launch_proc *proc)
{
	static const char *const argv[] = { "sh", "-c", "i=0; while :; do i=$((i+1)); echo $i 1<>work/count; done", NULL };
	char **env = NULL;
	int fds[8], n, r;
	struct user_launch_spec spec = { .uid = uid, .gid = uid, .home = home, .argv = argv, .stdin_fd = -1,
					 .stdout_fd = -1, .stderr_fd = -1, .tmp_size_mib = 16, .die_with_parent = true };

	if ((n = cgroup_open_join_fds(cg, "ust-a", fds, ARRAY_SIZE(fds))) < 0)
		return n;
	user_launch_env("ust-a", "fleet-ust-a", home, NULL, &env);
	spec.envp = (const char *const *)env;
	spec.cgroup_fds = fds;
	spec.n_cgroup_fds = (size_t)n;
	r = user_launch(&spec, proc);
	for (int i = 0; i < n; i++)
		close(fds[i]);
	user_launch_env_free(env);
	return r;
}

static void bench(void)
{
	struct agent *b = mk_agent("ust-bench");
	struct exec_out o;
	struct snap_out so;
	char *why = NULL;
	long long t;

	log_set_max_priority(LOG_DEBUG);	/* the backend logs each snapshot's freeze and copy times */
	if (ops->provision(&F, b, &why) < 0) {
		printf("# bench: provision failed: %s\n", why ? why : "");
		free(why);
		agent_free(b);
		return;
	}
	/* 1000 files of 50 KiB in 10 directories: 50 MB */
	run_sh(b, "for d in 0 1 2 3 4 5 6 7 8 9; do mkdir -p work/$d; head -c 5120000 /dev/urandom | "
		  "split -b 51200 -a 3 - work/$d/f; done; find work -exec touch -d '-1 min' {} +; "
		  "find work -type f | wc -l; du -sm work", &o);
	o.out[strcspn(o.out, "\n")] = ' ';
	printf("# bench: home: files, MB: %s", o.out);
	do_start(b);
	t = now_usec();
	snap(b, "b1", &so);
	printf("# bench: snapshot (full copy, agent running/frozen): %lld ms, %lld bytes added\n",
	       (now_usec() - t) / 1000, so.size);
	t = now_usec();
	snap(b, "b2", &so);
	printf("# bench: snapshot (nothing changed, hard links): %lld ms, %lld bytes added\n",
	       (now_usec() - t) / 1000, so.size);
	run_sh(b, "rm -rf work/*", &o);
	t = now_usec();
	restore(b, "b2");
	printf("# bench: restore (copy of 1000 files / 50 MB, swap, keeper restarted): %lld ms (r=%d)\n",
	       (now_usec() - t) / 1000, op_r);
	run_sh(b, "find work -type f | wc -l", &o);
	printf("# bench: files after restore: %s", o.out);
	ops->destroy(&F, b, true, &why);
	free(why);
	agent_free(b);
}

int main(void)
{
	const char *why_c;
	char *why = NULL;
	struct exec_out o;
	struct exec_handle *h;
	struct snap_out so, so2;
	struct agent *a;
	struct passwd *pw;
	struct stat st;
	bool early = true;
	uid_t ua;
	long min;

	signal(SIGPIPE, SIG_IGN);
	setvbuf(stdout, NULL, _IOLBF, 0);
	in_ci = getenv("CI") && strcmp(getenv("CI"), "true") == 0;
	if (geteuid() != 0)
		tap_skip_all("needs root (creates users)");
	if (access("/usr/sbin/useradd", X_OK) < 0)
		tap_skip_all("useradd missing");
	if (!mkdtemp(state_dir))
		tap_skip_all("cannot create a state dir in /var/lib");
	made_state_dir = true;
	chmod(state_dir, 0711);
	min = uid_min = 4300000 + 100 * (long)(getpid() % 500);
	signal(SIGSEGV, on_fatal);
	signal(SIGABRT, on_fatal);
	signal(SIGBUS, on_fatal);
	signal(SIGTERM, on_fatal);
	signal(SIGINT, on_fatal);
	config_init(&F.cfg);
	_cleanup_free_ char *smin = xasprintf("%ld", min), *smax = xasprintf("%ld", min + 99);
	config_set(&F.cfg, CFG_STATE_DIR, state_dir, CFG_FROM_CMDLINE, 0, &why_c);
	config_set(&F.cfg, CFG_USER_UID_MIN, smin, CFG_FROM_CMDLINE, 0, &why_c);
	config_set(&F.cfg, CFG_USER_UID_MAX, smax, CFG_FROM_CMDLINE, 0, &why_c);
	F.base = event_base_new();
	atexit(cleanup);
	cgroup_host_detect(&cg);

	if (ops->init(&F, NULL, &why) < 0)
		tap_skip_all(why);
	ok(ops->snapshot_create && ops->snapshot_restore && ops->snapshot_delete && ops->snapshot_exists,
	   "the user backend has the four snapshot verbs");

	a = mk_agent("ust-a");
	is_int(ops->provision(&F, a, &why), 0, "provision ust-a");
	if (!(pw = getpwnam("fleet-ust-a")))
		return tap_done();
	ua = pw->pw_uid;
	_cleanup_free_ char *home = spath("users/ust-a");
	_cleanup_free_ char *snaps = spath("snapshots"), *asnaps = spath("snapshots/ust-a");
	_cleanup_free_ char *s1 = spath("snapshots/ust-a/s1/home"), *s2 = spath("snapshots/ust-a/s2/home");

	/* ---- a home with every kind of entry ---- */
	is_int(run_sh(a,
		"set -e; mkdir -p work/dir/sub; echo notes > memory/notes; chmod 600 memory/notes\n"
		"printf '#!/bin/sh\\necho hi\\n' > work/run.sh; chmod 755 work/run.sh\n"
		"echo deep > work/dir/sub/file; head -c 1048576 /dev/urandom > work/big; ln work/big work/big-hardlink\n"
		"ln -s ../memory/notes work/link-notes; ln -s /etc work/etc-link; ln -s /nonexistent work/dangling\n"
		"mkfifo work/fifo; : > work/empty; echo ro > work/ro; chmod 444 work/ro\n"
		"touch -d '2001-02-03 04:05:06' work/old; truncate -s 10M work/sparse; echo tail >> work/sparse\n"
		"mkdir work/private; echo x > work/private/x; chmod 500 work/private\n"
		"echo dot > .dotfile; for i in $(seq 1 200); do echo $i > work/dir/f$i; done\n"
		/* as if written a while ago: files written within a second of a snapshot are copied again next time */
		"find . ! -name old -exec touch -h -d '-1 min' {} +", &o), 0,
	       "the agent fills its home: files, modes, symlinks in and out, a hard link, a FIFO, a sparse file");
	{
		_cleanup_free_ char *rf = xasprintf("%s/work/rootfile", home);
		int fd = open(rf, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		(void)!write(fd, "root's\n", 7);
		fchmod(fd, 04755);
		close(fd);
	}
	_cleanup_free_ char *m0 = manifest(home, true);

	/* ---- create, with the agent running ---- */
	is_int(do_start(a), 0, "start the agent (its keeper runs)");
	is_int(snap_start(a, "s1", &so, &early), 0, "snapshot_create s1 is accepted");
	ok(!early, "done() does not run before create() returns");
	is_int(ops->snapshot_create(&F, a, "s1b", on_snap, &so2, &why), -EBUSY, "a second snapshot while one is made: -EBUSY");
	free(why);
	why = NULL;
	LOOP_UNTIL(so.done);
	ok(so.done && so.error == 0, "s1 is made (%s)", so.why);
	is_int(so.calls, 1, "done() once");
	is_str(so.kind, "dir", "kind is \"dir\"");
	ok(so.size > 1048576 && so.size < 4 * 1048576, "size_bytes counts the blocks added: %lld (1 MiB file, sparse 10 MiB file)",
	   so.size);
	is_int(ops->snapshot_exists(&F, a, "s1"), 1, "exists(s1) is 1");
	is_int(ops->snapshot_exists(&F, a, "nope"), 0, "exists(nope) is 0");
	ok(private_dir(snaps) && private_dir(asnaps), "snapshots/ and snapshots/NAME/ are 0700 root");
	{
		_cleanup_free_ char *d = spath("snapshots/ust-a/s1"), *tmp = spath("snapshots/ust-a/.s1.tmp");
		ok(private_dir(d), "snapshots/NAME/s1 is 0700 root");
		ok(lstat(tmp, &st) < 0 && errno == ENOENT, "no .s1.tmp is left");
	}
	{
		_cleanup_free_ char *m = manifest(s1, true);
		ok(same_text(m0, m, "snapshot"), "the snapshot holds the home exactly: types, modes, owners, sizes, mtimes, "
						  "link targets, link counts, contents");
	}
	{
		_cleanup_free_ char *rf = xasprintf("%s/work/rootfile", s1), *el = xasprintf("%s/work/etc-link", s1);
		_cleanup_free_ char *sp = xasprintf("%s/work/sparse", s1), *b1 = xasprintf("%s/work/big", s1),
				       *b2 = xasprintf("%s/work/big-hardlink", s1);
		char target[64] = "";
		ok(lstat(rf, &st) == 0 && st.st_uid == 0 && (st.st_mode & 07777) == 04755, "a root file keeps its owner and mode");
		ok(lstat(el, &st) == 0 && S_ISLNK(st.st_mode) && readlink(el, target, sizeof(target) - 1) > 0 &&
		   strcmp(target, "/etc") == 0, "a symlink out of the home is copied as a link, not followed");
		ok(lstat(sp, &st) == 0 && st.st_size == 10 * 1048576 + 5 && st.st_blocks * 512 < 1048576,
		   "a sparse file stays sparse (%lld bytes in blocks)", (long long)st.st_blocks * 512);
		ok(ino_of(b1) && ino_of(b1) == ino_of(b2), "a hard link inside the home stays one inode");
	}
	is_int(state_of(a), AGENT_RUNNING, "the agent still runs after the snapshot");
	is_int(cgroup_frozen(cg, "ust-a"), 0, "and is not frozen");

	/* ---- the agent cannot reach its snapshots ---- */
	{
		_cleanup_free_ char *script = xasprintf(
			"S=%s\n"
			"ls -d $S/snapshots >/dev/null 2>&1 && echo visible\n"
			"cat ~/memory/notes >/dev/null 2>&1 && echo own\n"
			"ls $S/snapshots 2>/dev/null && echo LIST-SNAPSHOTS\n"
			"ls $S/snapshots/ust-a 2>/dev/null && echo LIST-AGENT\n"
			"ls $S/snapshots/ust-a/s1/home 2>/dev/null && echo LIST-SNAP\n"
			"cat $S/snapshots/ust-a/s1/home/memory/notes 2>/dev/null && echo READ-SNAP\n"
			"echo x > $S/snapshots/ust-a/s1/home/memory/notes 2>/dev/null && echo WRITE-SNAP\n"
			"echo done\n", state_dir);
		run_sh(a, script, &o);
		is_str(o.out, "visible\nown\ndone\n", "the agent can list, read and write nothing of its snapshots "
						       "(the path is visible, its own home readable)");
	}

	/* ---- refusals while an exec runs ---- */
	is_int(start_exec(a, SH("echo started; exec sleep 100"), &o, &h, &why), 0, "start a long exec");
	LOOP_UNTIL(o.lo > 0);
	is_int(ops->snapshot_create(&F, a, "busy", on_snap, &so2, &why), -EBUSY, "snapshot while an exec runs: -EBUSY");
	ok(why && strstr(why, "command"), "and says why (%s)", why ? why : "");
	free(why);
	why = NULL;
	is_int(restore_start(a, "s1"), -EBUSY, "restore while an exec runs: -EBUSY (%s)", op_why);
	ops->exec_cancel(h);
	LOOP_UNTIL(o.done);
	is_int(ops->snapshot_exists(&F, a, "busy"), 0, "nothing was made");

	/* ---- wreck the home, restore ---- */
	/* memory/ is the store's own file system (user/memfs.c): a mount point, emptied but not removable */
	is_int(run_sh(a, "chmod u+w ~/work/private && rm -rf ~/work ~/memory/* && echo new > ~/newfile && echo x > ~/.newdot && "
			 "chmod 755 ~ && ls -A ~ && echo -- && ls -A ~/memory", &o), 0,
	       "the agent runs rm -rf ~/work ~/memory/* and changes its home");
	is_str(o.out, ".dotfile\n.newdot\nmemory\nnewfile\n--\n", "work/ is gone, memory/ is empty");
	is_int(restore_start(a, "s1"), 0, "restore s1 is accepted");
	ok(!op_done, "done() does not run before restore() returns");
	{
		struct exec_handle *h2;
		is_int(start_exec(a, SH("true"), &o, &h2, &why), -EBUSY, "an exec during the restore: -EBUSY");
		free(why);
		why = NULL;
		is_int(ops->snapshot_delete(&F, a, "s1", &why), -EBUSY, "delete during the restore: -EBUSY");
		free(why);
		why = NULL;
	}
	LOOP_UNTIL(op_done);
	ok(op_done && op_r == 0, "restore s1 succeeds (%s)", op_why);
	{
		_cleanup_free_ char *m = manifest(home, true);
		ok(same_text(m0, m, "restored home"), "the home is back exactly: every entry, mode, owner, mtime, link, "
						       "hard link and content; the new files are gone");
	}
	ok(lstat(home, &st) == 0 && st.st_uid == ua && st.st_gid == ua && (st.st_mode & 07777) == 0700,
	   "the home is the agent's, 0700");
	{
		_cleanup_free_ char *rf = xasprintf("%s/work/rootfile", home), *r = spath("users/ust-a.restore");
		ok(lstat(rf, &st) == 0 && st.st_uid == 0 && st.st_gid == 0 && (st.st_mode & 07777) == 04755,
		   "a file that was root's comes back root's, mode kept (never handed to the agent)");
		ok(lstat(r, &st) < 0 && errno == ENOENT, "no <home>.restore is left");
	}
	is_int(state_of(a), AGENT_RUNNING, "the keeper runs again after the restore");
	run_sh(a, "cat memory/notes work/dir/sub/file; ./work/run.sh; cat work/link-notes", &o);
	is_str(o.out, "notes\ndeep\nhi\nnotes\n", "the agent reads its restored files, runs its script, follows its link");
	{
		_cleanup_free_ char *hb = xasprintf("%s/work/big", home), *sb = xasprintf("%s/work/big", s1);
		_cleanup_free_ char *sn = xasprintf("%s/memory/notes", s1);
		ok(ino_of(hb) && ino_of(hb) != ino_of(sb), "restored files are copies, not links into the snapshot");
		run_sh(a, "echo modified > memory/notes; echo modified >> work/dir/f1", &o);
		_cleanup_free_ char *m = manifest(s1, true);
		ok(same_text(m0, m, "snapshot after a write to the home"), "writing the restored home leaves the snapshot as it was");
		char buf[32] = "";
		int fd = open(sn, O_RDONLY);
		(void)!read(fd, buf, sizeof(buf) - 1);
		close(fd);
		is_str(buf, "notes\n", "the snapshot's memory/notes is unchanged");
	}

	/* ---- sharing between snapshots ---- */
	is_int(snap(a, "s2", &so2), 0, "snapshot s2 after two files changed");
	{
		_cleanup_free_ char *a1 = xasprintf("%s/work/big", s1), *a2 = xasprintf("%s/work/big", s2);
		_cleanup_free_ char *f1 = xasprintf("%s/work/dir/f2", s1), *f2 = xasprintf("%s/work/dir/f2", s2);
		_cleanup_free_ char *c1 = xasprintf("%s/work/dir/f1", s1), *c2 = xasprintf("%s/work/dir/f1", s2);
		_cleanup_free_ char *n1 = xasprintf("%s/memory/notes", s1), *n2 = xasprintf("%s/memory/notes", s2);
		_cleanup_free_ char *h1 = xasprintf("%s/work/big-hardlink", s2);
		ok(ino_of(a1) && ino_of(a1) == ino_of(a2), "an unchanged 1 MiB file is one inode in s1 and s2");
		ok(ino_of(f1) && ino_of(f1) == ino_of(f2), "so is an unchanged small file");
		ok(ino_of(h1) == ino_of(a2), "the home's hard link still points at the same (shared) inode");
		ok(ino_of(c1) && ino_of(c2) && ino_of(c1) != ino_of(c2), "a changed file is a new copy");
		ok(ino_of(n1) && ino_of(n2) && ino_of(n1) != ino_of(n2), "memory/notes (changed) too");
		ok(so2.size < so.size / 4, "s2 adds little: %lld bytes against %lld", so2.size, so.size);
		_cleanup_free_ char *m = manifest(s2, false), *mh = manifest(home, false);
		ok(same_text(mh, m, "s2"), "s2 holds the home as it is now");
	}

	/* ---- the freezer ---- */
	if (!cgroup_host_can_freeze(cg)) {
		ok(!in_ci, "no cgroup freezer on this host: the freeze is not tested%s", in_ci ? " (required under CI)" : "");
	} else {
		struct user_launch_proc wp;
		_cleanup_free_ char *count = xasprintf("%s/work/count", home);
		_cleanup_free_ char *s3count = spath("snapshots/ust-a/s3/home/work/count");
		long samples[4096], before, after;
		int ns = 0, status;
		bool steady = true;

		run_sh(a, "head -c 67108864 /dev/zero > work/fz", &o);	/* something new to copy: the freeze lasts a while */
		is_int(start_writer(ua, home, &wp), 0, "a writer process of the agent counts into work/count");
		for (int i = 0; i < 500 && read_count(count) < 1000; i++)
			usleep(10000);
		before = read_count(count);
		ok(before >= 1000, "it counts (%ld)", before);
		is_int(snap_start(a, "s3", &so, NULL), 0, "snapshot s3 while it writes");
		while (!so.done) {
			/* sample only while frozen both before and after the read: then the read saw the frozen state */
			int f1 = cgroup_frozen(cg, "ust-a");
			long c = read_count(count);
			int f2 = cgroup_frozen(cg, "ust-a");
			if (f1 == 1 && f2 == 1 && c >= 0 && ns < (int)ARRAY_SIZE(samples))
				samples[ns++] = c;
			event_base_loop(F.base, EVLOOP_NONBLOCK);
			usleep(500);
		}
		ok(so.error == 0, "s3 is made (%s)", so.why);
		for (int i = 1; i < ns; i++)
			steady &= samples[i] == samples[0];
		ok(ns >= 2, "the agent's cgroup was seen frozen during the copy (%d samples)", ns);
		ok(ns >= 2 && steady, "the counter did not move while frozen (%ld)", ns ? samples[0] : -1L);
		ok(ns >= 1 && read_count(s3count) == samples[0],
		   "the snapshot holds the counter as it was while frozen (%ld): a consistent copy", read_count(s3count));
		is_int(cgroup_frozen(cg, "ust-a"), 0, "thawed afterwards");
		usleep(50000);
		after = read_count(count);
		ok(ns >= 1 && after > samples[0], "the writer runs on after the snapshot (%ld)", after);
		(void)syscall(SYS_pidfd_send_signal, wp.pidfd, SIGKILL, NULL, 0);
		(void)spawn_wait(wp.pidfd, false, &status);
		close(wp.pidfd);
		close(wp.report_fd);
		run_sh(a, "rm -f work/fz work/count", &o);

		/*
		 * A group left frozen by a killed fleetd is thawed by the next use. Its spares died
		 * with it (an exec a spare takes skips the check: user/keeper.c), so none waits here.
		 */
		spare_drop("ust-a");
		is_int(cgroup_freeze(cg, "ust-a", 2000), 0, "freeze the agent by hand, as a killed fleetd would leave it");
		is_int(run_sh(a, "echo alive", &o), 0, "an exec still runs");
		is_str(o.out, "alive\n", "because it thawed the agent first");
	}

	/* ---- a failed restore leaves the home as it was ---- */
	{
		_cleanup_free_ char *mk = xasprintf("cd '%s' && mkdir -p $(printf 'd/%%.0s' $(seq 1 %d))", s2,
						    USER_SNAPSHOT_DEPTH_MAX + 2);
		_cleanup_free_ char *mb = manifest(home, true), *r = spath("users/ust-a.restore");
		sh(mk);
		is_int(restore(a, "s2"), -ELOOP, "a restore that cannot copy the snapshot fails (%s)", op_why);
		ok(strstr(op_why, "nested"), "and says why");
		_cleanup_free_ char *ma = manifest(home, true);
		ok(same_text(mb, ma, "home after a failed restore"), "the home is exactly as it was");
		ok(lstat(r, &st) < 0 && errno == ENOENT, "no <home>.restore is left");
		is_int(state_of(a), AGENT_RUNNING, "the agent still runs");
		is_int(restore(a, "nope"), -ENOENT, "restore of a snapshot that does not exist: -ENOENT");
	}

	/* ---- stopped agent, existing name, delete ---- */
	is_int(do_stop(a), 0, "stop the agent");
	is_int(snap(a, "s4", &so), 0, "a snapshot of a stopped agent (nothing to freeze)");
	is_int(snap_start(a, "s4", &so, NULL), -EEXIST, "a name already used: -EEXIST");
	{
		_cleanup_free_ char *s1d = spath("snapshots/ust-a/s1"), *b2 = xasprintf("%s/work/big", s2);
		struct stat before_st;
		lstat(b2, &before_st);
		is_int(ops->snapshot_delete(&F, a, "s1", &why), 0, "delete s1");
		ok(lstat(s1d, &st) < 0 && errno == ENOENT, "it is gone at once");
		is_int(ops->snapshot_exists(&F, a, "s1"), 0, "exists(s1) is 0");
		is_int(ops->snapshot_delete(&F, a, "s1", &why), -ENOENT, "delete it again: -ENOENT");
		free(why);
		why = NULL;
		ok(lstat(b2, &st) == 0 && st.st_ino == before_st.st_ino && st.st_size == 1048576,
		   "s2's shared files survive the deletion of s1");
		_cleanup_free_ char *trash = spath("snapshots/.trash");
		LOOP_UNTIL(dir_empty(trash));
		ok(dir_empty(trash), "the trash is emptied in the background");
	}

	/* ---- leftovers of a killed fleetd ---- */
	{
		_cleanup_free_ char *t = spath("snapshots/ust-a/.s9.tmp"), *r = spath("users/ust-a.restore");
		_cleanup_free_ char *trash = spath("snapshots/.trash");
		_cleanup_free_ char *mk = xasprintf("mkdir -p '%s/home/x' '%s/y' '%s/old/z'", t, r, trash);
		sh(mk);
		ops->shutdown(&F);
		is_int(ops->init(&F, NULL, &why), 0, "fleetd starts again");
		ok(lstat(t, &st) < 0 && lstat(r, &st) < 0, "a half-made snapshot and a half-built restore are swept at init");
		LOOP_UNTIL(dir_empty(trash));
		ok(dir_empty(trash), "and removed, with what was left in the trash");
		is_int(ops->snapshot_exists(&F, a, "s2"), 1, "finished snapshots stay");
	}

	/* ---- fleetd stops during a snapshot ---- */
	{
		_cleanup_free_ char *t = spath("snapshots/ust-a/.s5.tmp");
		is_int(do_start(a), 0, "start the agent again");
		run_sh(a, "head -c 67108864 /dev/zero > work/fz", &o);
		is_int(snap_start(a, "s5", &so, NULL), 0, "snapshot s5 starts");
		ops->shutdown(&F);
		ok(so.calls == 1, "shutdown reports it (%s)", so.error ? so.why : "made");
		ok(so.error == 0 || so.error == -ECANCELED, "either made or cancelled");
		ok(lstat(t, &st) < 0, "no .s5.tmp is left");
		is_int(cgroup_frozen(cg, "ust-a"), 0, "the agent is not left frozen");
		is_int(ops->init(&F, NULL, &why), 0, "init again");
	}

	/* ---- destroy takes the snapshots ---- */
	is_int(ops->destroy(&F, a, true, &why), 0, "destroy the agent");
	ok(lstat(asnaps, &st) < 0 && errno == ENOENT, "its snapshots are gone");

	if (getenv("USNAP_BENCH"))
		bench();

	agent_free(a);
	return tap_done();
}
