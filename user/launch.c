/*
 * user_launch: see user/launch.h. This is fleetd's half: the spec to JSON,
 * the fds, and the clone that execs fleet-init (user/init.c), which sets
 * the sandbox up and starts the payload.
 */
#include "user/launch.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <linux/sched.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

#include "backend/spawn.h"
#include "common/names.h"
#include "common/util.h"

#ifndef P_PIDFD
#define P_PIDFD 3
#endif
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

static const char *const stage_names[LAUNCH_STAGE__COUNT] = {
	[LAUNCH_STAGE_CGROUP] = "join cgroup",
	[LAUNCH_STAGE_MOUNT] = "make mounts private",
	[LAUNCH_STAGE_PROC] = "mount /proc",
	[LAUNCH_STAGE_TMP] = "mount private /tmp",
	[LAUNCH_STAGE_RLIMIT] = "set rlimits",
	[LAUNCH_STAGE_FORK] = "fork",
	[LAUNCH_STAGE_FDS] = "set up fds",
	[LAUNCH_STAGE_GROUPS] = "drop groups",
	[LAUNCH_STAGE_GID] = "set gid",
	[LAUNCH_STAGE_UID] = "set uid",
	[LAUNCH_STAGE_NO_NEW_PRIVS] = "set no_new_privs",
	[LAUNCH_STAGE_CHDIR] = "enter home",
	[LAUNCH_STAGE_EXEC] = "execute",
	[LAUNCH_STAGE_NET] = "bring up loopback",
	[LAUNCH_STAGE_RUN] = "mount private /run",
	[LAUNCH_STAGE_SECRETS] = "write the secret files",
	[LAUNCH_STAGE_DNS] = "set up /etc/resolv.conf",
	[LAUNCH_STAGE_AGENTD] = "show fleetd's agentd",
	[LAUNCH_STAGE_INIT] = "start fleet-init",
	[LAUNCH_STAGE_STORES] = "drop the other agents' memory stores",
	[LAUNCH_STAGE_NETNS] = "drop the agents' network namespace mounts",
};

const char *user_launch_stage_to_string(enum user_launch_stage s)
{
	return s >= 0 && s < LAUNCH_STAGE__COUNT ? stage_names[s] : "?";
}

static bool env_is_fixed(const char *e)
{
	static const char *const fixed[] = { "HOME=", "USER=", "PATH=", "FLEET_AGENT=" };

	for (size_t i = 0; i < ARRAY_SIZE(fixed); i++)
		if (strncmp(e, fixed[i], strlen(fixed[i])) == 0)
			return true;
	return false;
}

int user_launch_env(const char *agent, const char *user, const char *home,
		    const char *const *extra, char ***ret)
{
	size_t n = 0, k = 0;
	char **env;

	for (; extra && extra[n]; n++)
		if (!env_entry_valid(extra[n]))
			return -EINVAL;
	env = xcalloc(n + 5, sizeof(*env));
	for (size_t i = 0; i < n; i++)
		if (!env_is_fixed(extra[i]))	/* what identifies the agent is not the caller's to choose */
			env[k++] = xstrdup(extra[i]);
	env[k++] = xasprintf("HOME=%s", home);
	env[k++] = xasprintf("USER=%s", user);
	env[k++] = xstrdup("PATH=" USER_LAUNCH_PATH);
	env[k++] = xasprintf("FLEET_AGENT=%s", agent);
	*ret = env;
	return 0;
}

void user_launch_env_free(char **env)
{
	for (size_t i = 0; env && env[i]; i++) {
		explicit_bzero(env[i], strlen(env[i]));	/* the agent's secrets are among them */
		free(env[i]);
	}
	free(env);
}

pid_t user_launch_fork(int *pidfd)
{
	return spawn_clone(pidfd);	/* a clone child: invisible to waitpid(-1) elsewhere in fleetd */
}

/* ---- the parent ---- */

/* One of fleet's programs, looked up once (find_own_program); the answer, NULL included, is kept. */
struct own_program {
	const char *name, *build_dir, *installed;
	bool looked;
	char *found;
};

static const char *own_program(struct own_program *p)
{
	if (!p->looked) {
		p->found = find_own_program(p->name, p->build_dir, p->installed);
		p->looked = true;
	}
	return p->found;
}

const char *user_launch_init_path(void)
{
	static struct own_program init = { "fleet-init", "daemon", FLEET_INIT_PATH, false, NULL };

	return own_program(&init);
}

const char *user_launch_agentd_path(void)
{
	static struct own_program agentd = { "agentd", "agentd", FLEET_AGENTD_PATH, false, NULL };

	return own_program(&agentd);
}

/* Append a copy of each of n strings (n < 0: up to a NULL) to arr; false if one is not UTF-8. */
static bool append_strings(json_t *arr, const char *const *v, ssize_t n)
{
	for (ssize_t i = 0; n < 0 ? v[i] != NULL : i < n; i++) {
		json_t *s = json_string(v[i]);

		if (!s || json_array_append_new(arr, s) < 0)
			return false;
	}
	return true;
}

/* The part of a spec a sandbox is set up from (init.c's read_spec); the payload's part is payload_json's. */
static json_t *static_json(const struct user_launch_spec *s)
{
	json_t *shared = json_array();

	if (!append_strings(shared, s->shared_dirs, (ssize_t)s->n_shared_dirs)) {
		json_decref(shared);
		return NULL;
	}
	/* json_pack takes the array ("o"), also when it fails */
	return json_pack("{s:I, s:I, s:s, s:I, s:I, s:I, s:I, s:o, s:s?, s:s?, s:s?, s:s?, s:s?}",
			 "uid", (json_int_t)s->uid, "gid", (json_int_t)s->gid, "home", s->home,
			 "cgroups", (json_int_t)s->n_cgroup_fds,
			 "rlimit_nproc", (json_int_t)s->rlimit_nproc, "rlimit_nofile", (json_int_t)s->rlimit_nofile,
			 "tmp_size_mib", (json_int_t)s->tmp_size_mib, "shared_dirs", shared,
			 "netns_path", s->netns_path, "resolv_conf", s->resolv_conf,
			 "agentd", s->agentd_path ? s->agentd_path : user_launch_agentd_path(),
			 "users_dir", s->users_dir, "netns_dir", s->netns_dir);
}

/* Add the payload's part of s (argv, envp, files' names and lengths) to o; false: a string is not UTF-8. */
static bool payload_json(json_t *o, const struct user_launch_spec *s)
{
	json_t *argv = s->argv ? json_array() : json_null(), *envp = json_array(), *files = json_array();
	bool ok = (!s->argv || append_strings(argv, s->argv, -1)) && (!s->envp || append_strings(envp, s->envp, -1));

	for (size_t i = 0; ok && i < s->n_files; i++) {
		json_t *f = json_pack("{s:s, s:I}", "name", s->files[i].name, "len", (json_int_t)s->files[i].len);

		ok = f && json_array_append_new(files, f) == 0;
	}
	if (json_object_set_new(o, "argv", argv) < 0)
		ok = false;
	if (json_object_set_new(o, "envp", envp) < 0)
		ok = false;
	if (json_object_set_new(o, "files", files) < 0)
		ok = false;
	return ok;
}

/* The spec as fleet-init reads it (init.c's read_spec); the fds go as fds. NULL: a string is not UTF-8. */
static json_t *spec_json(const struct user_launch_spec *s)
{
	json_t *j = static_json(s);

	if (!j)
		return NULL;
	if (s->spare) {	/* its payload comes later, through user_launch_hand */
		struct user_launch_spec none = { 0 };

		if (!payload_json(j, &none) || json_object_set_new(j, "spare", json_true()) < 0) {
			json_decref(j);
			return NULL;
		}
		return j;
	}
	if (!payload_json(j, s)) {
		json_decref(j);
		return NULL;
	}
	return j;
}

char *user_launch_key(const struct user_launch_spec *spec)
{
	json_t *j = static_json(spec);
	char *text;

	if (!j)
		return NULL;
	text = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(j);
	return text;
}

/* Zero jansson's copies of the environment's strings before they are freed: the agent's secrets are among them. */
static void scrub_strings(json_t *arr)
{
	size_t i;
	json_t *v;

	json_array_foreach(arr, i, v)
		if (json_is_string(v))
			explicit_bzero((char *)json_string_value(v), json_string_length(v));
}

/* /dev/null, opened once and kept (O_CLOEXEC): each hand-over sends it for what it lacks; -errno. */
static int devnull_kept(void)
{
	static int fd = -1;

	if (fd < 0 && (fd = open("/dev/null", O_RDWR | O_CLOEXEC)) < 0) {
		int r = -errno;
		fd = -1;
		return r;
	}
	return fd;
}

/* A memfd holding len bytes of data, at offset 0; -errno. */
static int memfd_with(const char *name, const void *data, size_t len)
{
	int fd = memfd_create(name, MFD_CLOEXEC);
	size_t done = 0;

	if (fd < 0)
		return -errno;
	while (done < len) {
		ssize_t w = write(fd, (const char *)data + done, len - done);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			int r = w < 0 ? -errno : -EIO;
			close(fd);
			return r;
		}
		done += (size_t)w;
	}
	if (lseek(fd, 0, SEEK_SET) < 0) {	/* fleet-init reads it from the start */
		int r = -errno;
		close(fd);
		return r;
	}
	return fd;
}

/* The spec j (consumed) as compact JSON, or NULL; j's environment strings are wiped (wipe the text too). */
static char *spec_text(json_t *j)
{
	char *text = json_dumps(j, JSON_COMPACT);

	scrub_strings(json_object_get(j, "envp"));
	json_decref(j);
	return text;
}

/*
 * The spec j (consumed) as compact JSON in a new memfd, for fleet-init:
 * the fd, or -errno. The agent's environment is among it, secrets
 * included: the text and j's strings are wiped before they are freed.
 */
static int spec_memfd(json_t *j)
{
	_cleanup_free_ char *text = spec_text(j);
	int fd;

	if (!text)
		return -ENOMEM;
	fd = memfd_with("fleet-launch-spec", text, strlen(text));
	explicit_bzero(text, strlen(text));
	return fd;
}

/* What the vfork child needs: everything computed, so it only makes system calls. */
struct init_exec {
	const char *path;
	int src[6 + USER_LAUNCH_MAX_CGROUPS];	/* fd i of fleet-init (init.c's layout); -1: none */
	int n_src;
	int report_fd;
	bool die_with_parent;
};

/*
 * The clone child, in the sandbox's new namespaces, sharing fleetd's memory
 * while fleetd waits (CLONE_VFORK): only system calls on its own stack, then
 * execve. Nothing of fleetd's runs here: every signal is blocked (the parent
 * did) until fleet-init sets its own mask, so no handler of fleetd's can run
 * on this stack (a fault's signal, which cannot be blocked, kills the child
 * instead), and execve resets every handler. Not resetting them one by one
 * here saves 127 system calls while fleetd waits: 0.35-0.65 ms on this kind
 * of host (docs/benchmarks.md, issue #16). Ignored signals stay ignored
 * through execve; fleet-init resets those for the command (init.c).
 */
static int init_exec_child(void *arg)
{
	const struct init_exec *c = arg;
	static const char *const argv[] = { "fleet-init", NULL };
	static const char *const envp[] = { NULL };
	int lifted[6 + USER_LAUNCH_MAX_CGROUPS], err;

	if (c->die_with_parent)
		(void)prctl(PR_SET_PDEATHSIG, SIGKILL);
	/* Lift every source above the layout first, so dup2 onto 0..n cannot clobber one. */
	for (int i = 0; i < c->n_src; i++) {
		int fd = c->src[i];

		if (fd < 0 && i <= 2 && (fd = open("/dev/null", O_RDWR | O_CLOEXEC)) < 0)
			goto fail;
		lifted[i] = fd < 0 ? -1 : fcntl(fd, F_DUPFD_CLOEXEC, c->n_src + 10);
		if (fd >= 0 && lifted[i] < 0)
			goto fail;
	}
	for (int i = 0; i < c->n_src; i++) {
		if (lifted[i] < 0)
			(void)close(i);	/* no such fd for fleet-init: not whatever fleetd had there */
		else if (dup2(lifted[i], i) < 0)
			goto fail;
	}
	(void)syscall(SYS_close_range, (unsigned)c->n_src, ~0U, 0);
	execve(c->path, (char *const *)argv, (char *const *)envp);
fail:
	err = errno;
	{
		struct user_launch_report r = { LAUNCH_REPORT_FAILED, LAUNCH_STAGE_INIT, err };

		(void)!write(c->report_fd, &r, sizeof(r));
	}
	_exit(127);
}

/*
 * Held for reading across each sandbox clone (on the loop, on the spare
 * maker): the clone copies our fd table (the child must not share it), and
 * with CLONE_VFORK it returns only once the child's execve dropped the
 * copy, after the new namespaces were made: 1-25 ms. Writers first, so a
 * stream of clones cannot keep user_launch_clones_wait waiting.
 */
static pthread_rwlock_t clone_lock = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;

void user_launch_clones_wait(void)
{
	pthread_rwlock_wrlock(&clone_lock);
	pthread_rwlock_unlock(&clone_lock);
}

int user_launch(const struct user_launch_spec *spec, struct user_launch_proc *ret)
{
	struct init_exec c = { 0 };
	json_t *j;
	int rep[2], ctl[2] = { -1, -1 }, pidfd = -1, spec_fd = -1, files_fd = -1, r = 0;
	/* The clone child's stack: fleetd is stopped meanwhile (CLONE_VFORK), so a part of ours serves. */
	_Alignas(16) char stack[32768];
	sigset_t all, old;
	pid_t pid;

	if (!spec->home || spec->home[0] != '/' || strlen(spec->home) >= 4096 ||
	    (!spec->envp && !spec->spare) || (spec->argv && !spec->argv[0] && !spec->spare) ||
	    spec->n_cgroup_fds > USER_LAUNCH_MAX_CGROUPS)
		return -EINVAL;
	if (!(c.path = spec->init_path ? spec->init_path : user_launch_init_path()))
		return -ENOEXEC;
	if (!(j = spec_json(spec)))
		return -EINVAL;	/* a string that is not UTF-8 */
	if ((spec_fd = spec_memfd(j)) < 0)
		return spec_fd;
	if (spec->spare) {
		/* fd 5 of a spare: where its command comes (user_launch_hand); the files come with it */
		if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ctl) < 0) {
			r = -errno;
			goto out;
		}
		files_fd = ctl[1];
	} else if (spec->n_files > 0) {
		if ((files_fd = memfd_create("fleet-launch-files", MFD_CLOEXEC)) < 0) {
			r = -errno;
			goto out;
		}
		for (size_t i = 0; i < spec->n_files; i++)
			for (size_t done = 0; done < spec->files[i].len;) {
				ssize_t w = write(files_fd, spec->files[i].data + done, spec->files[i].len - done);

				if (w < 0 && errno == EINTR)
					continue;
				if (w <= 0) {
					r = w < 0 ? -errno : -EIO;
					goto out;
				}
				done += (size_t)w;
			}
	}
	if (pipe2(rep, O_CLOEXEC) < 0) {
		r = -errno;
		goto out;
	}
	c.src[0] = spec->spare ? -1 : spec->stdin_fd;
	c.src[1] = spec->spare ? -1 : spec->stdout_fd;
	c.src[2] = spec->spare ? -1 : spec->stderr_fd;
	c.src[3] = rep[1];
	c.src[4] = spec_fd;
	c.src[5] = files_fd;
	for (size_t i = 0; i < spec->n_cgroup_fds; i++)
		c.src[6 + i] = spec->cgroup_fds[i];
	c.n_src = 6 + (int)spec->n_cgroup_fds;
	c.report_fd = rep[1];
	c.die_with_parent = spec->die_with_parent;

	/*
	 * CLONE_NEWNET: no host network at all (loopback services, abstract
	 * sockets, metadata service). CLONE_VM | CLONE_VFORK: the child shares
	 * our memory until its execve, so nothing of fleetd's heap is copied or
	 * made copy-on-write (that cost fleetd page faults on every run).
	 */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_rwlock_rdlock(&clone_lock);
	pid = clone(init_exec_child, stack + sizeof(stack),
		    CLONE_VM | CLONE_VFORK | CLONE_PIDFD | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWNET,
		    &c, &pidfd);
	if (pid < 0)
		r = -errno;
	pthread_rwlock_unlock(&clone_lock);
#if defined(__SANITIZE_ADDRESS__)
	/*
	 * The child's frames were on stack[], in our memory, and it never returned
	 * (execve): AddressSanitizer's poison of their redzones is still there and
	 * would fault our own later frames at those addresses.
	 */
	ASAN_UNPOISON_MEMORY_REGION(stack, sizeof(stack));
#endif
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	close(rep[1]);
	if (pid < 0) {
		close(rep[0]);
		goto out;
	}
	ret->pid = pid;
	ret->pidfd = pidfd;
	ret->report_fd = rep[0];
	ret->ctl_fd = TAKE_FD(ctl[0]);
out:
	if (spec_fd >= 0)
		close(spec_fd);
	if (files_fd >= 0)
		close(files_fd);	/* a spare's: ctl[1] */
	if (ctl[0] >= 0)
		close(ctl[0]);
	return r;
}

/* What a spare gets with its command, in this order (init.c's await_command). */
enum { HAND_SPEC, HAND_STDIN, HAND_STDOUT, HAND_STDERR, HAND_FILES, HAND__COUNT };

int user_launch_hand(int ctl_fd, const struct user_launch_spec *spec)
{
	_cleanup_close_ int spec_fd = -1, files_fd = -1;
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int) * HAND__COUNT)];
	} cm;
	int fds[HAND__COUNT], devnull;
	char byte = 'c';
	_cleanup_free_ char *text = NULL;
	size_t text_len = 0;
	struct iovec iov = { &byte, 1 };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf, .msg_controllen = sizeof(cm.buf) };
	struct cmsghdr *c;
	json_t *j = json_object();
	ssize_t n;

	if (!spec->argv || !spec->argv[0] || !spec->envp) {
		json_decref(j);
		return -EINVAL;
	}
	if (!payload_json(j, spec)) {
		json_decref(j);
		return -EINVAL;	/* a string that is not UTF-8 */
	}
	if ((devnull = devnull_kept()) < 0) {
		json_decref(j);
		return devnull;
	}
	/* The spec in the message when it fits (USER_LAUNCH_HAND_INLINE_MAX), else in a memfd. */
	if (!(text = spec_text(j)))
		return -ENOMEM;
	text_len = strlen(text);
	if (text[0] == '{' && text_len <= USER_LAUNCH_HAND_INLINE_MAX) {
		iov = (struct iovec){ text, text_len };
	} else {
		spec_fd = memfd_with("fleet-launch-spec", text, text_len);
		explicit_bzero(text, text_len);
		if (spec_fd < 0)
			return spec_fd;
	}
	if (spec->n_files > 0) {
		size_t total = 0;
		_cleanup_free_ unsigned char *all = NULL;

		for (size_t i = 0; i < spec->n_files; i++)
			total += spec->files[i].len;
		all = xmalloc(total ? total : 1);
		for (size_t i = 0, off = 0; i < spec->n_files; off += spec->files[i].len, i++)
			memcpy(all + off, spec->files[i].data, spec->files[i].len);
		files_fd = memfd_with("fleet-launch-files", all, total);
		explicit_bzero(all, total);
		if (files_fd < 0)
			return files_fd;
	}
	fds[HAND_SPEC] = spec_fd >= 0 ? spec_fd : devnull;
	fds[HAND_STDIN] = spec->stdin_fd >= 0 ? spec->stdin_fd : devnull;
	fds[HAND_STDOUT] = spec->stdout_fd >= 0 ? spec->stdout_fd : devnull;
	fds[HAND_STDERR] = spec->stderr_fd >= 0 ? spec->stderr_fd : devnull;
	fds[HAND_FILES] = files_fd >= 0 ? files_fd : devnull;
	memset(&cm, 0, sizeof(cm));
	c = CMSG_FIRSTHDR(&m);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(fds));
	memcpy(CMSG_DATA(c), fds, sizeof(fds));
	while ((n = sendmsg(ctl_fd, &m, MSG_NOSIGNAL)) < 0 && errno == EINTR)
		;
	if (n < 0)
		n = errno == ECONNREFUSED || errno == ECONNRESET ? -EPIPE : -errno;
	explicit_bzero(text, text_len);	/* the agent's environment, secrets among it */
	return n < 0 ? (int)n : 0;
}

bool user_launch_uid_alive(uid_t uid)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	bool found = false;

	if (!d)
		return false;
	while (!found && (de = readdir(d))) {
		char path[300], line[256];
		bool zombie = false;
		FILE *f;

		if (de->d_name[0] < '1' || de->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/status", de->d_name);
		if (!(f = fopen(path, "re")))
			continue;	/* gone meanwhile */
		while (fgets(line, sizeof(line), f)) {
			unsigned long r, e, sv, fs;

			if (strncmp(line, "State:", 6) == 0 && strchr(line, 'Z'))
				zombie = true;	/* runs nothing; its parent reaps it */
			else if (sscanf(line, "Uid: %lu %lu %lu %lu", &r, &e, &sv, &fs) == 4) {
				found = !zombie && (r == uid || e == uid || sv == uid || fs == uid);
				break;
			}
		}
		fclose(f);
	}
	closedir(d);
	return found;
}

int user_launch_kill_uid(uid_t uid, int timeout_ms)
{
	long long deadline = now_usec() + (long long)timeout_ms * 1000;

	if (uid == 0)
		return -EINVAL;
	for (int pass = 1;; pass++) {
		int pidfd = -1, status = 0, r;
		pid_t pid;

		if (!user_launch_uid_alive(uid))
			return pass;
		if ((pid = user_launch_fork(&pidfd)) < 0)
			return -errno;
		if (pid == 0) {
			/* kill(-1) as uid reaches exactly the processes of that uid, in every namespace below ours. */
			if (syscall(SYS_setgroups, 0, NULL) < 0 || syscall(SYS_setresgid, 65534, 65534, 65534) < 0 ||
			    syscall(SYS_setresuid, uid, uid, uid) < 0)
				_exit(2);
			(void)kill(-1, SIGKILL);
			_exit(0);
		}
		r = spawn_wait(pidfd, false, &status);
		close(pidfd);
		if (r < 0)
			return r;
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			return -EPERM;
		if (now_usec() > deadline)
			return -ETIMEDOUT;
		struct timespec ts = { 0, 2000000 };
		nanosleep(&ts, NULL);
	}
}
