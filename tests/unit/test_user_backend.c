/*
 * The user backend through its ops, on a real event loop, as root: users,
 * homes and cgroups made and removed; exec output, stdin, exit codes,
 * timeouts, cancel; start, stop and state; refusals that leave nothing
 * behind; and agent A failing to reach agent B. Agent names start with
 * "ubt" so they collide with no other test's.
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
#include <sys/wait.h>
#include <unistd.h>

#include "model/agent.h"
#include "user/backend.h"
#include "model/config.h"
#include "model/fleetd.h"
#include "user/launch.h"
#include "common/util.h"
#include "../tap.h"
#include "tests/unit/exec_out.h"

static struct fleetd F;
static const struct backend_ops *ops = &backend_user_ops;
static char state_dir[] = "/tmp/fleet-ubt-XXXXXX";

static struct agent *mk_agent(const char *name)
{
	struct agent *a = xcalloc(1, sizeof(*a));

	a->name = xstrdup(name);
	a->backend = BACKEND_USER;
	a->state = AGENT_PROVISIONING;
	a->memory_mib = 128;
	a->vcpus = 1;
	return a;
}

/* Run the loop until cond or about 20 s. */
#define LOOP_UNTIL(cond) do { \
	for (int _i = 0; _i < 2000 && !(cond); _i++) { \
		struct timeval _tv = { 0, 10000 }; \
		event_base_loopexit(F.base, &_tv); \
		event_base_dispatch(F.base); \
	} } while (0)

static int start_exec(struct agent *a, const char *const *argv, const char *const *env, const char *in,
		      int timeout, struct exec_out *o, struct exec_handle **h)
{
	struct exec_request req = { .argv = argv, .env = env, .stdin_data = in, .stdin_len = in ? strlen(in) : 0,
				    .timeout_s = timeout };
	struct exec_callbacks cb = { exec_out_on_output, exec_out_on_done, o };
	char *why = NULL;
	int r;

	memset(o, 0, sizeof(*o));
	r = ops->exec(&F, a, &req, &cb, h, &why);
	if (r < 0)
		printf("# exec failed: %s\n", why ? why : "");
	free(why);
	return r;
}

static int run_exec(struct agent *a, const char *const *argv, const char *const *env, const char *in,
		    int timeout, struct exec_out *o)
{
	struct exec_handle *h;
	int r = start_exec(a, argv, env, in, timeout, o, &h);

	if (r < 0)
		return r;
	LOOP_UNTIL(o->done);
	return o->done ? 0 : -ETIMEDOUT;
}

#define SH(...) ((const char *const[]){ "sh", "-c", __VA_ARGS__, NULL })

static int op_r;
static bool op_done;
static void on_op(void *ud, int r, const char *why)
{
	op_r = r;
	op_done = true;
	if (r < 0)
		printf("# op failed: %s\n", why ? why : "");
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

static int do_stop(struct agent *a, int timeout)
{
	char *why = NULL;
	int r;

	op_done = false;
	if ((r = ops->stop(&F, a, timeout, on_op, NULL, &why)) < 0) {
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

static bool user_exists(const char *name)
{
	return getpwnam(name) != NULL;
}

static bool group_exists(const char *name)
{
	return getgrnam(name) != NULL;
}

/* Does <state_dir>/users/NAME<sub> exist? */
static bool path_exists(const char *name, const char *sub)
{
	_cleanup_free_ char *p = xasprintf("%s/users/%s%s", state_dir, name, sub);
	struct stat st;

	return lstat(p, &st) == 0;
}

/* Nothing of agent name exists: user, group, home. */
static bool nothing_of(const char *name)
{
	_cleanup_free_ char *user = xasprintf("fleet-%s", name);

	return !user_exists(user) && !group_exists(user) && !path_exists(name, "");
}

static void sh(const char *cmd)
{
	if (system(cmd) != 0)
		printf("# command failed: %s\n", cmd);
}

static void cleanup(void)
{
	static const char *const names[] = { "ubt-a", "ubt-b", "ubt-r1", "ubt-r2", "ubt-x" };
	char *why = NULL;

	for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
		struct agent *a = mk_agent(names[i]);
		(void)ops->destroy(&F, a, true, &why);
		free(why);
		why = NULL;
		agent_free(a);
	}
	sh("userdel fleet-ubt-pre >/dev/null 2>&1; groupdel fleet-ubt-pre >/dev/null 2>&1; "
	   "groupdel fleet-ubt-grp >/dev/null 2>&1; true");
	if (F.base)
		ops->shutdown(&F);
	/* users/ and netns/ are mounts of their own (account_own_mount): lazily, with whatever is still below */
	_cleanup_free_ char *rm = xasprintf("umount -l %s/users %s/netns 2>/dev/null; rm -rf %s", state_dir, state_dir,
					    state_dir);
	sh(rm);
}

int main(void)
{
	const char *why_c;
	char *why = NULL;
	struct exec_out o;
	struct exec_handle *h;
	struct agent *a, *b;
	struct passwd *pw;
	struct stat st;
	uid_t ua, ub;
	long min = 0;

	signal(SIGPIPE, SIG_IGN);
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (geteuid() != 0)
		tap_skip_all("needs root (creates users)");
	if (access("/usr/sbin/useradd", X_OK) < 0)
		tap_skip_all("useradd missing");
	if (!mkdtemp(state_dir))
		return 1;
	chmod(state_dir, 0711);
	/* a uid range nobody uses: 4100000 + 100 * (pid % 500) */
	min = 4100000 + 100 * (long)(getpid() % 500);
	config_init(&F.cfg);
	_cleanup_free_ char *smin = xasprintf("%ld", min), *smax = xasprintf("%ld", min + 99);
	config_set(&F.cfg, CFG_STATE_DIR, state_dir, CFG_FROM_CMDLINE, 0, &why_c);
	config_set(&F.cfg, CFG_USER_UID_MIN, smin, CFG_FROM_CMDLINE, 0, &why_c);
	config_set(&F.cfg, CFG_USER_UID_MAX, smax, CFG_FROM_CMDLINE, 0, &why_c);
	F.base = event_base_new();
	atexit(cleanup);

	{
		/* What a fleetd killed between writing the uid mark aside and renaming it left behind. */
		_cleanup_free_ char *stale = xasprintf("%s/user-uid-next.tmp", state_dir);
		FILE *fp = fopen(stale, "w");

		ok(fp && fputs("4100007\n", fp) >= 0 && fclose(fp) == 0, "a stale user-uid-next.tmp (a kill -9 mid-write)");
		is_int(ops->init(&F, NULL, &why), 0, "init: the host can serve user agents");
		ok(access(stale, F_OK) < 0 && errno == ENOENT, "init removes the stale uid mark temp file");
	}
	free(why);
	why = NULL;

	/* ---- provision ---- */
	a = mk_agent("ubt-a");
	b = mk_agent("ubt-b");
	b->memory_mib = 96;
	is_int(ops->provision(&F, a, &why), 0, "provision ubt-a");
	is_int(ops->provision(&F, b, &why), 0, "provision ubt-b");
	pw = getpwnam("fleet-ubt-a");
	ok(pw != NULL, "user fleet-ubt-a exists");
	if (!pw)
		return tap_done();
	ua = pw->pw_uid;
	is_int(ua, min, "it got the first uid of the range");
	is_int(pw->pw_gid, ua, "gid == uid");
	is_str(pw->pw_shell, "/usr/sbin/nologin", "no login shell");
	{
		_cleanup_free_ char *home = xasprintf("%s/users/ubt-a", state_dir);
		gid_t groups[16];
		int ng = 16;

		is_str(pw->pw_dir, home, "home is <state_dir>/users/NAME");
		ok(getgrouplist("fleet-ubt-a", pw->pw_gid, groups, &ng) >= 0 && ng == 1, "no supplementary groups");
		ok(lstat(home, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 07777) == 0700 && st.st_uid == ua &&
		   st.st_gid == ua, "home is 0700, owned by the agent");
	}
	ok(path_exists("ubt-a", "/memory") && path_exists("ubt-a", "/work"), "home holds memory/ and work/");
	{
		_cleanup_free_ char *users = xasprintf("%s/users", state_dir);
		ok(lstat(users, &st) == 0 && (st.st_mode & 07777) == 0711 && st.st_uid == 0, "users/ is 0711 root");
		_cleanup_free_ char *mp = xasprintf("mountpoint -q '%s'", users);
		ok(system(mp) == 0, "users/ is a mount of its own: every store is below it, a sandbox drops the others at once");
		_cleanup_free_ char *nmp = xasprintf("mountpoint -q '%s/netns'", state_dir);
		ok(system(nmp) == 0, "netns/ is a mount of its own: a sandbox drops every agent's namespace mount at once");
	}
	ub = getpwnam("fleet-ubt-b") ? getpwnam("fleet-ubt-b")->pw_uid : 0;
	is_int(ub, min + 1, "ubt-b got the next uid");
	is_int(state_of(a), AGENT_STOPPED, "a provisioned agent is stopped");

	/* ---- exec ---- */
	{
		const char *env[] = { "FLEET_RUN=7", "SECRET=a-secret", NULL };
		is_int(run_exec(a, SH("id -un; echo $FLEET_AGENT $FLEET_RUN $SECRET; cat; echo oops >&2"), env, "from stdin\n", 0, &o), 0,
		       "exec runs");
		is_str(o.out, "fleet-ubt-a\nubt-a 7 a-secret\nfrom stdin\n", "stdout: user, env, stdin");
		is_str(o.err, "oops\n", "stderr is a separate stream");
		ok(o.res.exit_code == 0 && o.res.error == 0 && o.res.signal == 0 && !o.res.timed_out, "exit 0");
	}
	run_exec(a, SH("exit 3"), NULL, NULL, 0, &o);
	is_int(o.res.exit_code, 3, "exit code 3");
	run_exec(a, (const char *const[]){ "no-such-command", NULL }, NULL, NULL, 0, &o);
	ok(o.res.error == -ENOENT && strstr(o.why, "No such file"), "a missing command is an error with a reason (%s)", o.why);
	{
		/* big stdin and output, through non-blocking pipes */
		char *big = xmalloc(1 << 20);
		memset(big, 'x', (1 << 20) - 1);
		big[(1 << 20) - 1] = '\0';
		run_exec(a, SH("wc -c"), NULL, big, 0, &o);
		is_str(o.out, "1048575\n", "1 MiB of stdin arrives whole");
		free(big);
	}
	{
		long long t0 = now_usec();
		run_exec(a, SH("(sleep 100 &); sleep 100"), NULL, NULL, 1, &o);
		ok(o.res.timed_out && o.res.signal == SIGKILL, "timeout kills the exec");
		ok(now_usec() - t0 < 5000000, "within about the timeout");
		ok(!user_launch_uid_alive(ua), "no process of the agent survives the timeout, double fork included");
	}
	{
		is_int(start_exec(a, SH("echo started; exec sleep 100"), NULL, NULL, 0, &o, &h), 0, "start a long exec");
		LOOP_UNTIL(o.lo > 0);
		is_int(state_of(a), AGENT_RUNNING, "state is running while an exec runs");
		ops->exec_cancel(h);
		LOOP_UNTIL(o.done);
		ok(o.done && o.res.signal == SIGKILL, "cancel kills it and done() still comes");
		is_int(state_of(a), AGENT_STOPPED, "stopped again afterwards");
	}
	{
		const char *const *bad = (const char *const[]){ "BAD ENTRY", NULL };
		struct exec_request req = { .argv = SH("true"), .env = bad };
		struct exec_callbacks cb = { exec_out_on_output, exec_out_on_done, &o };
		ok(ops->exec(&F, a, &req, &cb, &h, &why) == -EINVAL, "a malformed env entry is refused");
		free(why);
		why = NULL;
	}

	/* ---- start / stop / state ---- */
	is_int(do_start(a), 0, "start");
	is_int(state_of(a), AGENT_RUNNING, "running after start");
	is_int(do_start(a), 0, "start again is fine");
	is_int(start_exec(a, SH("(setsid sleep 300 &); sleep 300"), NULL, NULL, 0, &o, &h), 0, "an exec with a double fork");
	LOOP_UNTIL(user_launch_uid_alive(ua));
	is_int(ops->destroy(&F, a, false, &why), -EBUSY, "destroy refuses a running agent without force");
	ok(why && strstr(why, "running"), "and says why (%s)", why ? why : "");
	free(why);
	why = NULL;
	is_int(do_stop(a, 2), 0, "stop");
	LOOP_UNTIL(o.done);
	ok(o.done && o.res.signal > 0, "stop ended the exec");
	is_int(state_of(a), AGENT_STOPPED, "stopped after stop");
	ok(!user_launch_uid_alive(ua), "no process of the agent is left");

	/* ---- isolation: A against B ---- */
	{
		const char *benv[] = { "SECRET=b-secret-value", NULL };
		struct exec_out bo;
		struct exec_handle *bh;
		_cleanup_free_ char *bhome = xasprintf("%s/users/ubt-b", state_dir), *script = NULL;
		_cleanup_free_ char *db = xasprintf("%s/fleet.db", state_dir);
		char bpid[32] = "";
		int fd;

		fd = open(db, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);	/* stands for fleetd's database */
		(void)!write(fd, "secret-db\n", 10);
		close(fd);
		run_exec(b, SH("echo b-memory > memory/notes; echo b-work > work/file; ls memory work"), NULL, NULL, 0, &o);
		is_str(o.out, "memory:\nnotes\n\nwork:\nfile\n", "B writes its memory and work");
		is_int(start_exec(b, SH("exec sleep 300"), benv, NULL, 0, &bo, &bh), 0, "B runs a process holding its secret");
		LOOP_UNTIL(user_launch_uid_alive(ub));
		{
			/* B's process as the host sees it */
			_cleanup_free_ char *cmd = xasprintf("for p in /proc/[0-9]*; do [ \"$(stat -c %%u $p 2>/dev/null)\" = %u ] && "
							     "grep -q sleep $p/comm && basename $p; done | head -1", ub);
			FILE *f = popen(cmd, "r");
			if (f && fgets(bpid, sizeof(bpid), f))
				bpid[strcspn(bpid, "\n")] = '\0';
			if (f)
				pclose(f);
		}
		ok(*bpid, "found B's process on the host (pid %s)", bpid);
		script = xasprintf(
			"B=%s; P=%s; S=%s\n"
			"cat $B/memory/notes 2>/dev/null && echo READ-MEMORY\n"
			"cat $B/work/file 2>/dev/null && echo READ-WORK\n"
			"ls $B 2>/dev/null && echo LIST-HOME\n"
			"echo x > $B/work/evil 2>/dev/null && echo WROTE-WORK\n"
			"echo x > $B/memory/notes 2>/dev/null && echo WROTE-MEMORY\n"
			"cat /proc/$P/environ 2>/dev/null && echo READ-ENVIRON\n"
			"cat /proc/$P/cmdline 2>/dev/null && echo READ-CMDLINE\n"
			"kill -0 $P 2>/dev/null && echo SIGNALLED\n"
			"perl -e 'exit(syscall(101, 16, $ARGV[0], 0, 0) == -1 ? 1 : 0)' $P && echo PTRACED\n"
			"grep -l b-secret-value /proc/[0-9]*/environ 2>/dev/null && echo FOUND-SECRET\n"
			"cat $S/fleet.db 2>/dev/null && echo READ-DB\n"
			"ls $S 2>/dev/null && echo LIST-STATE\n"
			"ls $S/users 2>/dev/null && echo LIST-USERS\n"
			"echo done\n", bhome, bpid, state_dir);
		run_exec(a, SH(script), NULL, NULL, 10, &o);
		is_str(o.out, "done\n", "A can read, list, write, signal, ptrace nothing of B's, nor fleetd's state");
		if (strcmp(o.out, "done\n") != 0)
			printf("# stderr: %s\n", o.err);
		/* Counted by the shell alone: a pipeline's second process may not exist yet when ls looks. */
		run_exec(a, SH("n=0; for p in /proc/[0-9]*; do n=$((n + 1)); done; echo $n"), NULL, NULL, 0, &o);
		is_str(o.out, "1\n", "A's /proc shows only its own process (the sandbox's init is hidden)");
		ops->exec_cancel(bh);
		LOOP_UNTIL(bo.done);
	}
	/* ---- limits ---- */
	run_exec(b, (const char *const[]){ "tail", "/dev/zero", NULL }, NULL, NULL, 30, &o);
	ok(o.res.signal == SIGKILL && !o.res.timed_out, "a memory hog is killed at the agent's memory limit");
	run_exec(b, (const char *const[]){ "perl", "-e", "my $n = 0; for (1..2000) { my $p = fork; last unless defined $p; "
		"if (!$p) { sleep 30; exit } $n++ } print qq($n\\n)", NULL }, NULL, NULL, 30, &o);
	ok(atoi(o.out) > 100 && atoi(o.out) < USER_AGENT_PIDS_MAX, "a fork bomb stops below %d processes (%d forks)",
	   USER_AGENT_PIDS_MAX, atoi(o.out));
	ok(!user_launch_uid_alive(ub), "and its processes are gone when it ends");

	/* ---- destroy ---- */
	is_int(do_start(b), 0, "start B");
	is_int(ops->destroy(&F, b, true, &why), 0, "destroy --force a running agent");
	ok(nothing_of("ubt-b"), "user, group and home are gone");
	ok(!user_launch_uid_alive(ub), "and every process");
	is_int(ops->destroy(&F, a, false, &why), 0, "destroy a stopped agent");
	ok(nothing_of("ubt-a"), "nothing of A is left");
	is_int(ops->destroy(&F, a, false, &why), 0, "destroy again is fine (nothing to do)");
	is_int(state_of(a), -ENOENT, "state of a destroyed agent is -ENOENT");

	/* ---- refusals leave nothing behind ---- */
	{
		struct agent *x = mk_agent("ubt-x");
		struct agent *pre = mk_agent("ubt-pre");
		struct agent *grp = mk_agent("ubt-grp");
		struct agent *longname = mk_agent("ubt-abcdefghijklmnopqrstuv");	/* 26: fits */
		struct agent *toolong = mk_agent("ubt-abcdefghijklmnopqrstuvw");	/* 27 */

		sh("useradd --system -M -s /usr/sbin/nologin fleet-ubt-pre");
		is_int(ops->provision(&F, pre, &why), -EEXIST, "an existing system user fleet-NAME is refused");
		ok(why && strstr(why, "fleet-ubt-pre") && strstr(why, "exists"), "the message names it (%s)", why ? why : "");
		free(why);
		why = NULL;
		ok(!path_exists("ubt-pre", ""), "no home was made");
		is_int(ops->destroy(&F, pre, true, &why), 0, "destroy of the refused agent succeeds...");
		ok(user_exists("fleet-ubt-pre"), "...and leaves the system user that was not fleet's alone");
		sh("userdel fleet-ubt-pre");

		sh("groupadd fleet-ubt-grp");
		is_int(ops->provision(&F, grp, &why), -EEXIST, "an existing group fleet-NAME is refused");
		free(why);
		why = NULL;
		ok(!user_exists("fleet-ubt-grp") && !path_exists("ubt-grp", ""), "no user, no home");
		sh("groupdel fleet-ubt-grp");

		_cleanup_free_ char *xhome = xasprintf("%s/users/ubt-x", state_dir);
		mkdir(xhome, 0755);
		is_int(ops->provision(&F, x, &why), -EEXIST, "an existing home is refused");
		ok(why && strstr(why, "already exists"), "and says so (%s)", why ? why : "");
		free(why);
		why = NULL;
		ok(!user_exists("fleet-ubt-x") && !group_exists("fleet-ubt-x"), "no user, no group");
		ok(lstat(xhome, &st) == 0 && (st.st_mode & 0777) == 0755, "the existing home is untouched");
		is_int(ops->destroy(&F, x, true, &why), 0, "destroy of it succeeds...");
		ok(lstat(xhome, &st) == 0, "...without removing a home fleet did not make");
		rmdir(xhome);

		is_int(ops->provision(&F, toolong, &why), -ENAMETOOLONG, "a name too long for a user name is refused");
		free(why);
		why = NULL;
		ok(nothing_of(toolong->name), "nothing made");
		is_int(ops->provision(&F, longname, &why), 0, "26 characters is fine");
		is_int(ops->destroy(&F, longname, false, &why), 0, "and goes away");
		ok(nothing_of(longname->name), "entirely");

		/* a fresh range of two uids (uids handed out above are never reused): the third agent finds none */
		_cleanup_free_ char *smin2 = xasprintf("%ld", min + 50), *smax2 = xasprintf("%ld", min + 51);
		config_set(&F.cfg, CFG_USER_UID_MIN, smin2, CFG_FROM_CMDLINE, 0, &why_c);
		config_set(&F.cfg, CFG_USER_UID_MAX, smax2, CFG_FROM_CMDLINE, 0, &why_c);
		struct agent *r1 = mk_agent("ubt-r1"), *r2 = mk_agent("ubt-r2"), *r3 = mk_agent("ubt-x");
		is_int(ops->provision(&F, r1, &why), 0, "range of 2: first agent");
		is_int(ops->provision(&F, r2, &why), 0, "second agent");
		is_int(ops->provision(&F, r3, &why), -ENOSPC, "third: uid range exhausted");
		ok(why && strstr(why, "no free uid"), "the message says so (%s)", why ? why : "");
		free(why);
		why = NULL;
		ok(nothing_of("ubt-x"), "nothing of the third agent was made");
		is_int(ops->destroy(&F, r1, false, &why), 0, "destroy the first");
		is_int(ops->provision(&F, r3, &why), -ENOSPC, "its uid is not handed out again: still exhausted");
		ok(why && strstr(why, "never handed out again"), "the message says why (%s)", why ? why : "");
		free(why);
		why = NULL;
		ok(nothing_of("ubt-x"), "nothing of the third agent was made");
		ops->destroy(&F, r2, false, &why);
		ok(nothing_of("ubt-r1") && nothing_of("ubt-r2"), "both removed");
		agent_free(r1);
		agent_free(r2);
		agent_free(r3);
		agent_free(x);
		agent_free(pre);
		agent_free(grp);
		agent_free(longname);
		agent_free(toolong);
	}

	agent_free(a);
	agent_free(b);
	return tap_done();
}
