/*
 * The launcher on its own, as root: identity, environment, fds, rlimits,
 * namespaces, private /tmp, cgroup limits, and that killing the sandbox's
 * init (or its payload exiting) ends every process it started.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/spawn.h"
#include "user/cgroup.h"
#include "user/launch.h"
#include "common/util.h"
#include "../tap.h"

static uid_t test_uid;
static char home[64];
/* Launch each command through a spare (spec.spare, then user_launch_hand), as fleetd's execs do. */
static bool via_spare;
static const struct exec_file *run_files;	/* secret files for the next run */
static size_t run_n_files;
/* The agentd every sandbox shows: a copy in a directory of /tmp, which each sandbox's private /tmp hides. */
static char agentd_dir[64], agentd_copy[96];
/* spec.users_dir of the next runs (store_checks) */
static const char *run_users_dir;
/* spec.netns_path and spec.netns_dir of the next runs (netns_checks) */
static const char *run_netns_path, *run_netns_dir;

struct run {
	char out[65536], err[8192];
	struct user_launch_report fail;
	bool failed, ready;
	int status;	/* payload's wait status (EXITED), or the init's */
};

static void skip_all(const char *why)
{
	if (getenv("CI") && strcmp(getenv("CI"), "true") == 0) {
		printf("not ok 1 - prerequisite missing under CI: %s\n1..1\n", why);
		exit(1);
	}
	printf("1..0 # SKIP %s\n", why);
	exit(0);
}

static void drain(int *fd, char *buf, size_t cap, size_t *len)
{
	ssize_t n = read(*fd, buf + *len, cap - 1 - *len);

	if (n <= 0) {
		close(*fd);
		*fd = -1;
		return;
	}
	*len += (size_t)n;
	buf[*len] = '\0';
	if (*len >= cap - 1)
		*len = 0;
}

/* Collect output and reports until the sandbox is gone. kill_after_ready: SIGKILL the init once READY. */
static int collect(struct user_launch_proc *p, int out, int err, struct run *res, int sig_after_ready)
{
	size_t lo = 0, le = 0, lr = 0;
	char rbuf[sizeof(struct user_launch_report)];
	int status = 0;
	bool exited = false;

	res->out[0] = res->err[0] = '\0';
	while (out >= 0 || err >= 0 || p->report_fd >= 0) {
		struct pollfd pf[3] = { { out, POLLIN, 0 }, { err, POLLIN, 0 }, { p->report_fd, POLLIN, 0 } };

		if (poll(pf, 3, 20000) <= 0)
			return -ETIMEDOUT;
		if (pf[0].revents)
			drain(&out, res->out, sizeof(res->out), &lo);
		if (pf[1].revents)
			drain(&err, res->err, sizeof(res->err), &le);
		if (pf[2].revents) {
			ssize_t n = read(p->report_fd, rbuf + lr, sizeof(rbuf) - lr);
			if (n <= 0) {
				close(p->report_fd);
				p->report_fd = -1;
			} else if ((lr += (size_t)n) == sizeof(rbuf)) {
				struct user_launch_report r;
				memcpy(&r, rbuf, sizeof(r));
				lr = 0;
				if (r.kind == LAUNCH_REPORT_READY) {
					res->ready = true;
					if (sig_after_ready)
						syscall(SYS_pidfd_send_signal, p->pidfd, sig_after_ready, NULL, 0);
				} else if (r.kind == LAUNCH_REPORT_FAILED) {
					res->failed = true;
					res->fail = r;
				} else {
					exited = true;
					res->status = r.value;
				}
			}
		}
	}
	if (spawn_wait(p->pidfd, false, &status) < 0)
		return -ECHILD;
	close(p->pidfd);
	if (!exited)
		res->status = status;
	return 0;
}

/* Run argv in a sandbox for test_uid with optional stdin and cgroup; fills res. */
static int run_(const char *const *argv, const char *const *extra_env, const char *in,
	       const int *cg_fds, size_t n_cg, struct run *res)
{
	char **env = NULL;
	int o[2], e[2], i[2] = { -1, -1 }, r;
	struct user_launch_proc p;
	struct user_launch_spec s = {
		.uid = test_uid, .gid = test_uid, .home = home, .argv = argv,
		.rlimit_nproc = 64, .rlimit_nofile = 256, .tmp_size_mib = 16,
		.cgroup_fds = cg_fds, .n_cgroup_fds = n_cg, .die_with_parent = true,
		.agentd_path = agentd_copy, .users_dir = run_users_dir,
		.netns_path = run_netns_path, .netns_dir = run_netns_dir,
	};

	memset(res, 0, sizeof(*res));
	if ((r = user_launch_env("tester", "fleet-tester", home, extra_env, &env)) < 0)
		return r;
	if (pipe2(o, O_CLOEXEC) < 0 || pipe2(e, O_CLOEXEC) < 0 || (in && pipe2(i, O_CLOEXEC) < 0))
		return -errno;
	s.envp = (const char *const *)env;
	s.stdout_fd = o[1];
	s.stderr_fd = e[1];
	s.stdin_fd = i[0];
	s.files = run_files;
	s.n_files = run_n_files;
	if (via_spare) {
		struct user_launch_spec sp = s;

		sp.spare = true;
		sp.argv = NULL;
		sp.envp = NULL;
		sp.files = NULL;
		sp.n_files = 0;
		sp.stdin_fd = sp.stdout_fd = sp.stderr_fd = -1;
		if ((r = user_launch(&sp, &p)) == 0) {
			r = user_launch_hand(p.ctl_fd, &s);
			close(p.ctl_fd);
			if (r < 0) {
				int st;

				spawn_signal(p.pidfd, SIGKILL);
				spawn_wait(p.pidfd, false, &st);
				close(p.pidfd);
				close(p.report_fd);
			}
		}
	} else {
		r = user_launch(&s, &p);
	}
	user_launch_env_free(env);
	close(o[1]);
	close(e[1]);
	if (in) {
		close(i[0]);
		(void)!write(i[1], in, strlen(in));
		close(i[1]);
	}
	if (r < 0)
		return r;
	return collect(&p, o[0], e[0], res, 0);
}

static int run(const char *const *argv, const char *const *extra_env, const char *in,
	       const int *cg_fds, size_t n_cg, struct run *res)
{
	int r = run_(argv, extra_env, in, cg_fds, n_cg, res);

	if (getenv("TEST_DEBUG"))
		printf("# r=%d failed=%d stage=%d errno=%d status=%#x err='%s'\n", r, res->failed, res->fail.stage,
		       res->fail.value, res->status, res->err);
	return r;
}

#define SH(...) ((const char *const[]){ "sh", "-c", __VA_ARGS__, NULL })

static bool uid_alive(uid_t uid)
{
	return user_launch_uid_alive(uid);
}

/* What every sandbox is, launched directly or through a spare (via_spare). */
static void sandbox_checks(void)
{
	const char *extra[] = { "FLEET_RUN=42", "SECRET_TOKEN=s3cr3t", "PATH=/evil", NULL };
	struct run res;
	char *want;

	/* identity */
	is_int(run(SH("id -u; id -g; id -G"), NULL, NULL, NULL, 0, &res), 0, "id runs");
	want = xasprintf("%u\n%u\n%u\n", test_uid, test_uid, test_uid);
	is_str(res.out, want, "uid, gid and the only group are the agent's");
	free(want);
	ok(WIFEXITED(res.status) && WEXITSTATUS(res.status) == 0, "exit status 0 reported");

	/* environment: exactly the extra entries plus the four fixed ones, which extra cannot override */
	is_int(run((const char *const[]){ "env", NULL }, extra, NULL, NULL, 0, &res), 0, "env runs");
	want = xasprintf("FLEET_RUN=42\nSECRET_TOKEN=s3cr3t\nHOME=%s\nUSER=fleet-tester\nPATH=%s\nFLEET_AGENT=tester\n",
			 home, USER_LAUNCH_PATH);
	is_str(res.out, want, "clean environment; PATH cannot be overridden");
	free(want);

	/* process attributes */
	run(SH("umask; grep NoNewPrivs /proc/self/status; "
	       "grep -E '^Max (core file size|open files|processes) ' /proc/self/limits | awk '{print $(NF-2)}'; pwd"),
	    NULL, NULL, NULL, 0, &res);
	want = xasprintf("0077\nNoNewPrivs:\t1\n0\n64\n256\n%s\n", home);
	is_str(res.out, want, "umask 077, no_new_privs, core 0, nofile, nproc, cwd = home");
	free(want);

	/*
	 * Signals: what the launcher ignores (SIGPIPE above, SIGUSR2 here) is not
	 * ignored in the command, and nothing is blocked there (fleet-init resets
	 * only what it inherited as ignored, from /proc/self/status).
	 */
	signal(SIGUSR2, SIG_IGN);
	run(SH("exec grep -E '^Sig(Blk|Ign):' /proc/self/status"), NULL, NULL, NULL, 0, &res);
	signal(SIGUSR2, SIG_DFL);
	is_str(res.out, "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n",
	       "no signal ignored or blocked in the command, though the launcher ignores SIGPIPE and SIGUSR2");

	{
		int leak = open("/etc/hostname", O_RDONLY);	/* not CLOEXEC: would leak without the close */
		/* No pipe in the probe: the shell's own pipe fds would race with ls. */
		run(SH("ls /proc/$$/fd; true"), NULL, NULL, NULL, 0, &res);
		is_str(res.out, "0\n1\n2\n", "only stdin, stdout and stderr are open");
		close(leak);
	}

	/* namespaces */
	/* Counted by the shell alone: a pipeline's second process may not exist yet when ls looks. */
	run(SH("echo $$; n=0; for p in /proc/[0-9]*; do n=$((n + 1)); done; echo $n"), NULL, NULL, NULL, 0, &res);
	is_str(res.out, "2\n1\n", "own PID namespace: the payload is pid 2, /proc shows only itself (init hidden)");
	run(SH("for d in /tmp /var/tmp /dev/shm; do echo $(stat -c '%u %a' $d) $(stat -f -c %T $d); done; "
	       "ls -A /tmp /var/tmp /dev/shm | tr '\\n' ' '; echo x > /tmp/mark-$$ && echo wrote"),
	    NULL, NULL, NULL, 0, &res);
	want = xasprintf("%u 700 tmpfs\n%u 700 tmpfs\n%u 700 tmpfs\n/dev/shm:  /tmp: %s  /var/tmp: wrote\n",
			 test_uid, test_uid, test_uid, home + 5);
	is_str(res.out, want, "private, empty /tmp, /var/tmp and /dev/shm owned by the agent");
	free(want);
	ok(access("/tmp/mark-2", F_OK) < 0, "a file in the private /tmp is not on the host's /tmp");
	(void)unlink("/run/lock/mark-2");	/* a leftover of a run against a launcher without a private /run */
	run(SH("stat -c '%n %u %a' /run /run/lock; stat -f -c %T /run; ls -A /run /var/run | tr '\\n' ' ';"
	       "echo x > /run/lock/mark-$$ && echo wrote"), NULL, NULL, NULL, 0, &res);
	is_str(res.out, "/run 0 755\n/run/lock 0 1777\ntmpfs\n/run: fleet lock  /var/run: fleet lock wrote\n",
	       "a fresh /run: root's tmpfs holding only fleet/ and a 1777 lock/; /var/run is it");

	/* fleetd's agentd, though the host path it was given is in /tmp, hidden here */
	run(SH("command -v agentd; agentd --version >/dev/null && echo runs; stat -c '%u %a' /run/fleet /run/fleet/bin;"
	       "ls -A /run/fleet/bin; grep -c ' /run/fleet/bin/agentd [^ ]* ro,nosuid,nodev' /proc/self/mounts;"
	       "echo x >> /run/fleet/bin/agentd 2>/dev/null || echo cannot-write;"
	       "rm -f /run/fleet/bin/agentd 2>/dev/null || echo cannot-remove;"
	       "mkdir /run/fleet/bin/x 2>/dev/null || echo cannot-add; test -e \"$1\" || echo host-path-hidden", "sh",
	       agentd_copy), NULL, NULL, NULL, 0, &res);
	is_str(res.out, "/run/fleet/bin/agentd\nruns\n0 755\n0 755\nagentd\n1\ncannot-write\ncannot-remove\ncannot-add\n"
	       "host-path-hidden\n",
	       "`agentd` is fleetd's, first on PATH, read-only in root's directory; its host path in /tmp is hidden");
	ok(access("/run/lock/mark-2", F_OK) < 0, "a file in the private /run/lock is not on the host's");
	/* /proc/net is the network namespace's: only lo, up (IFF_UP 0x1), no route */
	run(SH("sed 1,2d /proc/net/dev | cut -d: -f1 | tr -d ' ';"
	       "sed 1d /proc/net/route | wc -l; perl -MSocket -e 'socket(S, PF_INET, SOCK_STREAM, 0);"
	       "bind(S, pack_sockaddr_in(0, inet_aton(\"127.0.0.1\"))) or die; listen(S, 1) or die; print \"lo-ok\\n\"'"),
	    NULL, NULL, NULL, 0, &res);
	is_str(res.out, "lo\n0\nlo-ok\n", "own network namespace: only lo, no route, a listener on 127.0.0.1 works");

	/* stdin */
	run((const char *const[]){ "cat", NULL }, NULL, "hello\nworld\n", NULL, 0, &res);
	is_str(res.out, "hello\nworld\n", "stdin reaches the command");

	/* failures are reported, not guessed */
	run((const char *const[]){ "no-such-command-xyz", NULL }, NULL, NULL, NULL, 0, &res);
	ok(res.failed && res.fail.stage == LAUNCH_STAGE_EXEC && res.fail.value == ENOENT,
	   "a missing command is reported as execute: ENOENT");
	{
		_cleanup_free_ char *noexec = xasprintf("%s/noexec", home);
		int fd = open(noexec, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
		close(fd);
		run((const char *const[]){ noexec, NULL }, NULL, NULL, NULL, 0, &res);
		unlink(noexec);
	}
	ok(res.failed && res.fail.value == EACCES, "a non-executable file is reported as EACCES");
	run(SH("exit 7"), NULL, NULL, NULL, 0, &res);
	ok(WIFEXITED(res.status) && WEXITSTATUS(res.status) == 7, "exit code 7 is reported");
	run(SH("kill -SEGV $$"), NULL, NULL, NULL, 0, &res);
	ok(WIFSIGNALED(res.status) && WTERMSIG(res.status) == SIGSEGV, "death by signal is reported");

}

/* What only a spare does: its command's files are its own, it ends unused when dropped, it has a key. */
static void spare_checks(void)
{
	static const unsigned char tok[] = "tok-1";
	const struct exec_file files[] = { { "API_TOKEN", tok, 5 } };
	struct user_launch_spec a = { .uid = test_uid, .gid = test_uid, .home = home, .tmp_size_mib = 16 }, b = a;
	struct run res;

	run_files = files;
	run_n_files = 1;
	run(SH("stat -c '%a %u' /run/secrets /run/secrets/API_TOKEN; cat /run/secrets/API_TOKEN"), NULL, NULL, NULL, 0, &res);
	run_files = NULL;
	run_n_files = 0;
	{
		_cleanup_free_ char *want = xasprintf("700 %u\n400 %u\ntok-1", test_uid, test_uid);
		is_str(res.out, want, "a spare writes its command's secret files (0700 dir, 0400 file, the agent's)");
	}
	run(SH("ls -A /run; ls /run/secrets 2>&1 >/dev/null | wc -l"), NULL, NULL, NULL, 0, &res);
	is_str(res.out, "fleet\nlock\n1\n", "the next spare has none of them: only fleet/ and lock/ in its /run");

	{
		/* dropped unused: fleetd closes its end; the spare ends without running anything */
		struct user_launch_spec sp = { .uid = test_uid, .gid = test_uid, .home = home, .spare = true,
					       .stdin_fd = -1, .stdout_fd = -1, .stderr_fd = -1, .die_with_parent = true };
		struct user_launch_proc p;
		char buf[64];
		int st = -1;

		is_int(user_launch(&sp, &p), 0, "launch a spare");
		ok(p.ctl_fd >= 0, "a spare has a control fd");
		close(p.ctl_fd);
		ok(spawn_wait(p.pidfd, false, &st) == 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
		   "a spare whose control fd is closed exits 0");
		is_int(read(p.report_fd, buf, sizeof(buf)), 0, "and reports nothing: it ran nothing");
		close(p.report_fd);
		close(p.pidfd);
		ok(!uid_alive(test_uid), "nothing of the agent's uid runs");
		{
			/* a spare that died before its command: the command is refused, not lost in silence */
			char **env = NULL;
			struct user_launch_spec cmd = { .argv = SH("true"), .stdin_fd = -1, .stdout_fd = -1, .stderr_fd = -1 };

			is_int(user_launch(&sp, &p), 0, "launch another spare");
			spawn_signal(p.pidfd, SIGKILL);
			spawn_wait(p.pidfd, false, &st);
			user_launch_env("tester", "fleet-tester", home, NULL, &env);
			cmd.envp = (const char *const *)env;
			is_int(user_launch_hand(p.ctl_fd, &cmd), -EPIPE, "handing a command to a dead spare is -EPIPE");
			user_launch_env_free(env);
			close(p.ctl_fd);
			close(p.report_fd);
			close(p.pidfd);
		}
	}
	{
		_cleanup_free_ char *ka = user_launch_key(&a), *kb = NULL, *kc = NULL;

		b.argv = SH("true");
		kb = user_launch_key(&b);
		b.tmp_size_mib = 32;
		kc = user_launch_key(&b);
		ok(ka && kb && strcmp(ka, kb) == 0, "a spare's key ignores the command");
		ok(ka && kc && strcmp(ka, kc) != 0, "and changes with what the sandbox is made of (tmp size)");
	}
}

/*
 * A users dir holding two agents' "stores" (tmpfs mounts, named own-store
 * and other-store, in a mount namespace of the test's own): a sandbox of
 * the agent whose home is users/own holds its own store and no mount of
 * the other, directly and through a spare; with users not a mount point
 * (an old state dir) it holds both, and works, as before.
 */
static void store_checks(void)
{
	char users[64] = "/tmp/fleet-launch-users-XXXXXX", saved_home[sizeof(home)], cmd[512];
	_cleanup_free_ char *own = NULL, *other = NULL, *own_mem = NULL, *other_mem = NULL;
	struct run res;

	if (unshare(CLONE_NEWNS) < 0 || mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 || !mkdtemp(users)) {
		ok(false, "a mount namespace of the test's own for the stores: %s", strerror(errno));
		return;
	}
	chmod(users, 0711);
	own = xasprintf("%s/own", users);
	other = xasprintf("%s/other", users);
	own_mem = xasprintf("%s/memory", own);
	other_mem = xasprintf("%s/memory", other);
	snprintf(cmd, sizeof(cmd), "mode=0700,uid=%u,gid=%u,size=1m", (unsigned)test_uid, (unsigned)test_uid);
	if (mkdir(own, 0700) < 0 || chown(own, test_uid, test_uid) < 0 || mkdir(other, 0700) < 0 ||
	    mkdir(own_mem, 0700) < 0 || mkdir(other_mem, 0700) < 0 ||
	    mount(users, users, NULL, MS_BIND, NULL) < 0 ||	/* what fleetd's account_users_mount makes */
	    mount("own-store", own_mem, "tmpfs", MS_NOSUID | MS_NODEV, cmd) < 0 ||
	    mount("other-store", other_mem, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0700,size=1m") < 0) {
		ok(false, "set up a users mount with two stores: %s", strerror(errno));
		return;
	}
	snprintf(cmd, sizeof(cmd), "%s/marker", own_mem);
	{
		FILE *m = fopen(cmd, "w");

		if (m) {
			fputs("mine\n", m);
			fclose(m);
		}
		(void)!chown(cmd, test_uid, test_uid);
	}
	memcpy(saved_home, home, sizeof(home));
	snprintf(home, sizeof(home), "%s", own);
	run_users_dir = users;
#define STORES_SH SH("grep -c other-store /proc/self/mountinfo; grep -c own-store /proc/self/mountinfo; " \
		     "cat ~/memory/marker; echo new > ~/memory/new && cat ~/memory/new")
	for (int spare = 0; spare < 2; spare++) {
		via_spare = spare;
		run(STORES_SH, NULL, NULL, NULL, 0, &res);
		is_str(res.out, "0\n2\nmine\nnew\n",
		       "%s: no mount of the other agent's store; its own (under the private /tmp as well) reads and writes",
		       spare ? "through a spare" : "a sandbox");
		ok(!res.failed, "%s: set up without a failure (stage %d)", spare ? "through a spare" : "a sandbox",
		   res.fail.stage);
	}
	via_spare = false;
	/* The users dir no mount point (an old state dir, one unmounted by hand): every mount stays, as before. */
	umount2(users, MNT_DETACH);
	if (mount("own-store", own_mem, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m") == 0 &&
	    mount("other-store", other_mem, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m") == 0) {
		(void)!chown(own_mem, test_uid, test_uid);
		run(SH("grep -c other-store /proc/self/mountinfo; echo ran"), NULL, NULL, NULL, 0, &res);
		ok(!res.failed && strstr(res.out, "ran") && atoi(res.out) >= 1,
		   "users not a mount point: the sandbox works and keeps every store, as before");
	} else {
		ok(false, "mount the stores again without a users mount: %s", strerror(errno));
	}
	run_users_dir = NULL;
	memcpy(home, saved_home, sizeof(home));
	umount2(own_mem, MNT_DETACH);
	umount2(other_mem, MNT_DETACH);
	rmdir(own_mem);
	rmdir(other_mem);
	rmdir(own);
	rmdir(other);
	rmdir(users);
}

/* A new network namespace bound at path (what fleetd's `unshare --net=PATH` makes); the test stays in its own. */
static int bind_new_netns(const char *path, ino_t *ino)
{
	_cleanup_close_ int self = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC), fd = -1;
	struct stat st;
	int r = 0;

	if (self < 0 || (fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600)) < 0 || unshare(CLONE_NEWNET) < 0)
		return -errno;
	if (mount("/proc/self/ns/net", path, NULL, MS_BIND, NULL) < 0 || stat("/proc/self/ns/net", &st) < 0)
		r = -errno;
	*ino = st.st_ino;
	if (setns(self, CLONE_NEWNET) < 0)
		return -errno;
	return r;
}

/*
 * A netns dir (a mount of its own, as netns.c's netns_dir_mount makes it)
 * holding two agents' namespace mounts: a sandbox of the agent "own" is in
 * own's namespace and holds a mount of neither (directly and through a
 * spare); with the dir no mount point, it works and keeps both, as before.
 */
static void netns_checks(void)
{
	char dir[64] = "/tmp/fleet-launch-netns-XXXXXX", want[64];
	_cleanup_free_ char *own = NULL, *other = NULL;
	ino_t own_ino = 0, other_ino = 0;
	struct run res;
	int r;

	if (unshare(CLONE_NEWNS) < 0 || mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 || !mkdtemp(dir)) {
		ok(false, "a mount namespace of the test's own for the netns dir: %s", strerror(errno));
		return;
	}
	own = xasprintf("%s/own", dir);
	other = xasprintf("%s/other", dir);
	if (mount(dir, dir, NULL, MS_BIND, NULL) < 0 || (r = bind_new_netns(own, &own_ino)) < 0 ||
	    (r = bind_new_netns(other, &other_ino)) < 0) {
		ok(false, "set up a netns mount with two namespaces: %s", strerror(errno));
		return;
	}
	run_netns_path = own;
	run_netns_dir = dir;
	snprintf(want, sizeof(want), "0\nnet:[%lu]\n", (unsigned long)own_ino);
	for (int spare = 0; spare < 2; spare++) {
		char sh[256];

		snprintf(sh, sizeof(sh), "grep -c ' %s/' /proc/self/mountinfo; readlink /proc/self/ns/net", dir);
		via_spare = spare;
		run((const char *const[]){ "/bin/sh", "-c", sh, NULL }, NULL, NULL, NULL, 0, &res);
		is_str(res.out, want, "%s: in its own network namespace, no mount of its own or the other agent's",
		       spare ? "through a spare" : "a sandbox");
		ok(!res.failed, "%s: set up without a failure (stage %d)", spare ? "through a spare" : "a sandbox",
		   res.fail.stage);
	}
	via_spare = false;
	/* The netns dir no mount point (unmounted by hand): every mount stays, as before. */
	umount2(dir, MNT_DETACH);
	if (bind_new_netns(own, &own_ino) == 0 && bind_new_netns(other, &other_ino) == 0) {
		char sh[256];

		snprintf(sh, sizeof(sh), "grep -c ' %s/' /proc/self/mountinfo; readlink /proc/self/ns/net", dir);
		snprintf(want, sizeof(want), "2\nnet:[%lu]\n", (unsigned long)own_ino);
		run((const char *const[]){ "/bin/sh", "-c", sh, NULL }, NULL, NULL, NULL, 0, &res);
		is_str(res.out, want, "netns dir not a mount point: the sandbox works and keeps both, as before");
	} else {
		ok(false, "bind the namespaces again without a netns mount: %s", strerror(errno));
	}
	run_netns_path = run_netns_dir = NULL;
	umount2(own, MNT_DETACH);
	umount2(other, MNT_DETACH);
	unlink(own);
	unlink(other);
	rmdir(dir);
}

/*
 * The command's search in USER_LAUNCH_PATH (user/init.c's exec_search), as
 * execvp searches its PATH: an earlier match that cannot be executed (no
 * execute bit, a directory) is passed over for a later one; when nothing
 * runs, EACCES if something matched but could not be executed, else ENOENT,
 * both at the execute stage. A tmpfs on /usr/local/bin (second on the path,
 * after agentd's directory), in a mount namespace of this test's own that
 * the sandboxes copy, holds the earlier matches: the host's is untouched.
 * Last in the test: its namespace stays the test's.
 */
static void path_checks(void)
{
	static const char *const dir = "/usr/local/bin";
	struct run res;
	char want[32];
	int fd;

	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount("fleet-launch-path", dir, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m") < 0) {
		ok(getenv("CI") == NULL || strcmp(getenv("CI"), "true") != 0,
		   "a tmpfs on %s in a namespace of our own # SKIP cannot mount it: %s", dir, strerror(errno));
		return;
	}
	/* id: not executable in /usr/local/bin, a directory there for printf; both found later, in /usr/bin or /bin. */
	fd = open("/usr/local/bin/id", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	ok(fd >= 0 && write(fd, "#!/bin/sh\necho wrong-id\n", 24) == 24 && close(fd) == 0 &&
	   chmod("/usr/local/bin/id", 0644) == 0 && mkdir("/usr/local/bin/printf", 0755) == 0,
	   "%s/id not executable (0644), %s/printf a directory", dir, dir);
	run((const char *const[]){ "id", "-u", NULL }, NULL, NULL, NULL, 0, &res);
	snprintf(want, sizeof(want), "%ld\n", (long)test_uid);
	is_str(res.out, want, "a non-executable earlier match on the path is passed over: the later id runs");
	run((const char *const[]){ "printf", "later", NULL }, NULL, NULL, NULL, 0, &res);
	is_str(res.out, "later", "so is a directory of the command's name");
	/* Only a non-executable match anywhere: EACCES, not ENOENT; a directory alone the same. */
	fd = open("/usr/local/bin/fleet-launch-noexec", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0755);
	ok(fd >= 0 && close(fd) == 0 && chmod("/usr/local/bin/fleet-launch-noexec", 0644) == 0,
	   "fleet-launch-noexec: only in %s, not executable", dir);
	run((const char *const[]){ "fleet-launch-noexec", NULL }, NULL, NULL, NULL, 0, &res);
	ok(res.failed && res.fail.stage == LAUNCH_STAGE_EXEC && res.fail.value == EACCES,
	   "found but not executable: execute: EACCES (stage %d, %s)", res.failed ? res.fail.stage : -1,
	   res.failed ? strerror(res.fail.value) : "not failed");
	ok(mkdir("/usr/local/bin/fleet-launch-dir", 0755) == 0, "fleet-launch-dir: only a directory in %s", dir);
	run((const char *const[]){ "fleet-launch-dir", NULL }, NULL, NULL, NULL, 0, &res);
	ok(res.failed && res.fail.stage == LAUNCH_STAGE_EXEC && res.fail.value == EACCES,
	   "a directory alone: execute: EACCES");
	/* Nowhere at all: ENOENT at the execute stage, not at a stage of the setup. */
	run((const char *const[]){ "fleet-launch-nowhere", NULL }, NULL, NULL, NULL, 0, &res);
	ok(res.failed && res.fail.stage == LAUNCH_STAGE_EXEC && res.fail.value == ENOENT,
	   "in no directory of the path: execute: ENOENT");
	/* A name with a slash is no search: the file itself, even where a later one on the path would run. */
	run((const char *const[]){ "/usr/local/bin/id", NULL }, NULL, NULL, NULL, 0, &res);
	ok(res.failed && res.fail.stage == LAUNCH_STAGE_EXEC && res.fail.value == EACCES,
	   "/usr/local/bin/id by its path: execute: EACCES, no search");
	(void)umount2(dir, MNT_DETACH);
}

int main(void)
{
	const char *bad_env[] = { "NOEQUALS", NULL };
	struct run res;
	char **env = NULL;

	signal(SIGPIPE, SIG_IGN);
	if (geteuid() != 0)
		skip_all("needs root (setuid, namespaces, cgroups)");
	for (test_uid = 3999000 + (uid_t)(getpid() % 900); getpwuid(test_uid); test_uid++)
		;
	strcpy(home, "/tmp/fleet-launch-XXXXXX");
	if (!mkdtemp(home) || chown(home, test_uid, test_uid) < 0 || chmod(home, 0700) < 0)
		skip_all("cannot create a temp home");
	chmod("/tmp", 01777);
	umask(077);	/* fleetd's: whatever fleet-init makes for the agent to reach must not depend on it */
	{
		const char *built = user_launch_agentd_path();
		char cmd[640];

		strcpy(agentd_dir, "/tmp/fleet-launch-agentd-XXXXXX");
		if (!built || !mkdtemp(agentd_dir) || chmod(agentd_dir, 0755) < 0)
			skip_all("no agentd built beside the tests, or no temp dir for its copy");
		snprintf(agentd_copy, sizeof(agentd_copy), "%s/agentd", agentd_dir);
		snprintf(cmd, sizeof(cmd), "cp '%s' '%s' && chmod 0755 '%s'", built, agentd_copy, agentd_copy);
		if (system(cmd) != 0)
			skip_all("cannot copy agentd");
	}

	/* environment building */
	is_int(user_launch_env("a", "fleet-a", "/h", bad_env, &env), -EINVAL, "env entry without '=' is refused");

	sandbox_checks();
	via_spare = true;
	printf("# the same through a spare\n");
	sandbox_checks();
	spare_checks();
	via_spare = false;

	/* everything dies with the sandbox */
	run(SH("(setsid sleep 1000 &); (sleep 1000 &); echo started"), NULL, NULL, NULL, 0, &res);
	is_str(res.out, "started\n", "double-forking command returned");
	ok(!uid_alive(test_uid), "its double-forked children died with it");

	{
		int o[2], st;
		char **e2 = NULL;
		struct user_launch_proc p;
		struct user_launch_spec s = { .uid = test_uid, .gid = test_uid, .home = home,
			.argv = SH("(sleep 1000 &); sleep 1000 & sleep 1000"), .stdin_fd = -1, .stderr_fd = -1 };

		user_launch_env("tester", "fleet-tester", home, NULL, &e2);
		s.envp = (const char *const *)e2;
		(void)!pipe2(o, O_CLOEXEC);
		s.stdout_fd = o[1];
		is_int(user_launch(&s, &p), 0, "launch a long-running tree");
		close(o[1]);
		user_launch_env_free(e2);
		collect(&p, o[0], -1, &res, SIGKILL);
		ok(res.ready && WIFSIGNALED(res.status) && WTERMSIG(res.status) == SIGKILL, "SIGKILL to the init ends it");
		ok(!uid_alive(test_uid), "and every process of the tree, double forks included");
		(void)st;
	}
	{
		int o[2];
		char **e2 = NULL;
		struct user_launch_proc p;
		struct user_launch_spec s = { .uid = test_uid, .gid = test_uid, .home = home,
			.argv = SH("trap 'echo got-term; exit 3' TERM; echo up; while :; do sleep 0.05; done"),
			.stdin_fd = -1, .stderr_fd = -1 };

		user_launch_env("tester", "fleet-tester", home, NULL, &e2);
		s.envp = (const char *const *)e2;
		(void)!pipe2(o, O_CLOEXEC);
		s.stdout_fd = o[1];
		user_launch(&s, &p);
		close(o[1]);
		user_launch_env_free(e2);
		{
			/* until the trap is set ("up"), not a guessed delay: a busy host may take longer */
			char line[8] = "";
			size_t n = 0;

			while (n < sizeof(line) - 1 && read(o[0], line + n, 1) == 1 && line[n] != '\n')
				n++;
		}
		collect(&p, o[0], -1, &res, SIGTERM);
		ok(WIFEXITED(res.status) && WEXITSTATUS(res.status) == 3, "SIGTERM to the init reaches the command");
		ok(strstr(res.out, "got-term") != NULL, "the command's trap ran");
	}
	{
		char **e2 = NULL;
		struct user_launch_proc p;
		struct user_launch_spec s = { .uid = test_uid, .gid = test_uid, .home = home,
			.stdin_fd = -1, .stdout_fd = -1, .stderr_fd = -1 };

		user_launch_env("tester", "fleet-tester", home, NULL, &e2);
		s.envp = (const char *const *)e2;
		{
			/* fleet-init gets the spec as JSON: a string that is not UTF-8 is refused, not dropped */
			static const char *const nonutf8_env[] = { "X=\xff\xfe", NULL };
			struct user_launch_spec b = s;

			b.envp = nonutf8_env;
			is_int(user_launch(&b, &p), -EINVAL, "an environment entry that is not UTF-8 is refused");
		}
		is_int(user_launch(&s, &p), 0, "launch an idle sandbox (no payload)");
		user_launch_env_free(e2);
		collect(&p, -1, -1, &res, SIGTERM);
		ok(res.ready && WIFEXITED(res.status) && WEXITSTATUS(res.status) == 0, "it reports READY and ends cleanly on SIGTERM");
	}

	/* cgroup limits */
	{
		struct cgroup_host *h = NULL;
		struct cgroup_limits lim = { .memory_bytes = 64ull << 20, .pids_max = 20, .cpus = 1 };
		_cleanup_free_ char *cgname = xasprintf("launchtest-%d", (int)getpid()), *why = NULL;
		int fds[8], n;

		cgroup_host_detect(&h);
		if (!cgroup_host_usable(h) || !cgroup_host_has(h, "memory") || !cgroup_host_has(h, "pids")) {
			ok(getenv("CI") == NULL || strcmp(getenv("CI"), "true") != 0, "cgroups with memory and pids present # SKIP not on this host");
		} else {
			_cleanup_free_ char *desc = cgroup_host_describe(h);
			printf("# cgroups: %s\n", desc);
			is_int(cgroup_create(h, cgname, &lim, &why), 0, "create a cgroup with limits");
			is_int(cgroup_create(h, cgname, &lim, &why), 0, "creating it again while it is empty takes it over");
			n = cgroup_open_join_fds(h, cgname, fds, 8);
			ok(n > 0, "open its cgroup.procs files");
			{
				/* with a process in it, it is someone's: refused */
				pid_t kid = fork();

				if (kid == 0) {
					for (int i = 0; i < n; i++)
						(void)!write(fds[i], "0", 1);
					pause();
					_exit(0);
				}
				for (int i = 0; i < 200 && cgroup_count(h, cgname) == 0; i++)
					usleep(10000);
				free(why);
				why = NULL;
				is_int(cgroup_create(h, cgname, &lim, &why), -EBUSY, "creating it while a process is in it is -EBUSY");
				kill(kid, SIGKILL);
				waitpid(kid, NULL, 0);
				for (int i = 0; i < 200 && cgroup_count(h, cgname) > 0; i++)
					usleep(10000);
			}
			run(SH("grep -c /fleet/launchtest /proc/self/cgroup"), NULL, NULL, fds, (size_t)n, &res);
			ok(atoi(res.out) >= 1, "the payload is in the agent's cgroup");
			via_spare = true;	/* a spare joins them at its setup: its command is there from its first instruction */
			run(SH("grep -c /fleet/launchtest /proc/self/cgroup"), NULL, NULL, fds, (size_t)n, &res);
			ok(atoi(res.out) >= 1, "a spare's payload is in the agent's cgroup");
			via_spare = false;
			run((const char *const[]){ "perl", "-e", "my $n = 0; for (1..40) { my $p = fork; last unless defined $p; "
				"if (!$p) { sleep 5; exit } $n++ } print qq($n\\n)", NULL }, NULL, NULL, fds, (size_t)n, &res);
			ok(atoi(res.out) > 0 && atoi(res.out) < 20, "pids.max 20 caps a fork loop (%d forks succeeded)", atoi(res.out));
			run((const char *const[]){ "tail", "/dev/zero", NULL }, NULL, NULL, fds, (size_t)n, &res);
			ok(WIFSIGNALED(res.status) && WTERMSIG(res.status) == SIGKILL, "a memory hog is OOM-killed at the limit");
			run(SH("sleep 1000 & sleep 1000 & echo bg"), NULL, NULL, NULL, 0, &res);
			is_int(cgroup_count(h, cgname), 0, "nothing left in the cgroup");
			for (int i = 0; i < n; i++)
				close(fds[i]);
			is_int(cgroup_remove(h, cgname), 0, "remove the cgroup");
			ok(!cgroup_exists(h, cgname), "it is gone");
		}
		cgroup_host_free(h);
	}

	store_checks();
	netns_checks();
	path_checks();
	via_spare = true;
	printf("# the path's search through a spare\n");
	path_checks();
	via_spare = false;

	(void)user_launch_kill_uid(test_uid, 2000);
	rmdir(home);
	unlink(agentd_copy);
	rmdir(agentd_dir);
	{
		/* a sandbox whose agentd path does not exist is refused at its setup, not started without it */
		char **e2 = NULL;
		struct user_launch_proc p;
		struct user_launch_spec s = { .uid = test_uid, .gid = test_uid, .home = "/", .argv = SH("true"),
			.stdin_fd = -1, .stdout_fd = -1, .stderr_fd = -1, .agentd_path = agentd_copy };

		user_launch_env("tester", "fleet-tester", "/", NULL, &e2);
		s.envp = (const char *const *)e2;
		is_int(user_launch(&s, &p), 0, "launch with a missing agentd");
		user_launch_env_free(e2);
		collect(&p, -1, -1, &res, 0);
		ok(res.failed && res.fail.stage == LAUNCH_STAGE_AGENTD && res.fail.value == ENOENT,
		   "reported as show fleetd's agentd: ENOENT");
	}
	return tap_done();
}
