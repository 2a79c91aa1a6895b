/*
 * user/backend.c: the user backend's verbs and its ops table. Each agent is
 * a system user fleet-NAME with a 0700 home and a cgroup with its limits
 * (docs/user-backend.md); every process of an agent starts through
 * user_launch. This file checks the host at init (root, the tools, a test
 * sandbox, the cgroups, the world-writable directories each sandbox gets
 * its own copy of), provisions and destroys (the account, the cgroup),
 * starts, stops and answers state; the rest is in the files named in
 * user/internal.h.
 */
#include "user/backend.h"

#include <errno.h>
#include <event2/event.h>
#include <ftw.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "backend/firewall.h"
#include "backend/spawn.h"
#include "common/log.h"
#include "common/util.h"
#include "model/agent.h"
#include "model/config.h"
#include "model/fleetd.h"
#include "user/cgroup.h"
#include "user/internal.h"
#include "user/launch.h"

/*
 * A start or stop in progress: done() is always called from the loop,
 * never from inside start() or stop(). A stop polls every 20 ms until the
 * agent's processes are gone or its clean period is over, then forces.
 */
struct pending_op {
	struct pending_op *next;
	char *agent;
	uid_t uid;
	bool is_stop;
	long long deadline;	/* stop: end of the clean period (usec, monotonic) */
	backend_done_fn done;
	void *userdata;
	int r;
	char *why;
	struct event *ev;
};

struct user_state *us;

/* Can this host make a sandbox (namespaces, mounts)? An idle one as nobody, killed once READY. */
static int probe_sandbox(char **why)
{
	static const char *const env[] = { "PATH=" USER_LAUNCH_PATH, NULL };
	struct user_launch_spec spec = { .uid = 65534, .gid = 65534, .home = "/", .envp = env,
					 .stdin_fd = -1, .stdout_fd = -1, .stderr_fd = -1, .tmp_size_mib = 1 };
	struct user_launch_report rep = { 0 };
	struct user_launch_proc proc;
	int r, status;
	ssize_t n;

	if (!user_launch_init_path()) {
		*why = xstrdup("fleet-init is installed neither next to fleetd nor at " FLEET_INIT_PATH);
		return -ENOENT;
	}
	/* Found here, on the main thread, before any sandbox asks (the answer is cached without a lock). */
	if (!user_launch_agentd_path())
		log_warning("user backend: agentd is installed neither next to fleetd nor at " FLEET_AGENTD_PATH
			    "; user agents' memory stores will not work");
	if ((r = user_launch(&spec, &proc)) < 0) {
		*why = xasprintf("cannot create a sandbox (PID, mount, IPC and network namespaces): %s", strerror(-r));
		return r;
	}
	while ((n = read(proc.report_fd, &rep, sizeof(rep))) < 0 && errno == EINTR)
		;
	(void)spawn_signal(proc.pidfd, SIGKILL);
	(void)spawn_wait(proc.pidfd, false, &status);
	close(proc.pidfd);
	close(proc.report_fd);
	if (n != sizeof(rep) || rep.kind != LAUNCH_REPORT_READY) {
		*why = n == sizeof(rep) && rep.kind == LAUNCH_REPORT_FAILED ? sandbox_report_why(&rep, "in a test sandbox")
									 : xstrdup("a test sandbox died while starting");
		return -EOPNOTSUPP;
	}
	return 0;
}

/*
 * World-writable directories beyond those the launcher always replaces
 * (/tmp, /var/tmp, /dev/shm, /run): found once at init on the root file
 * system, so each sandbox gets its own empty one and no agent can leave a
 * file there for another. Only what an agent could reach is searched: a
 * directory others cannot traverse is not entered, nor is a world-writable
 * one (the whole of it is replaced), nor the state dir (homes are private).
 */
#define SHARED_DIRS_MAX 64
#define SHARED_DIRS_DEPTH 5
static const char *scan_state_dir;
static char **scan_found;
static size_t scan_n;

static int scan_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	static const char *const skip[] = { "/proc", "/sys", "/tmp", "/var/tmp", "/dev", "/run" };

	if (type != FTW_D)
		return FTW_CONTINUE;
	for (size_t i = 0; i < ARRAY_SIZE(skip); i++)
		if (strcmp(path, skip[i]) == 0)
			return FTW_SKIP_SUBTREE;
	if (strcmp(path, scan_state_dir) == 0 || !(st->st_mode & S_IXOTH))
		return FTW_SKIP_SUBTREE;
	if (st->st_mode & S_IWOTH) {
		if (scan_n == SHARED_DIRS_MAX) {
			log_warning("user backend: more than %d world-writable directories; %s and later ones stay shared",
				    SHARED_DIRS_MAX, path);
			return FTW_STOP;
		}
		scan_found[scan_n++] = xstrdup(path);
		return FTW_SKIP_SUBTREE;
	}
	return ftw->level >= SHARED_DIRS_DEPTH ? FTW_SKIP_SUBTREE : FTW_CONTINUE;
}

/* Fill us->shared_dirs; a failed walk only loses what it did not reach. fleetd's loop is not running yet. */
static void scan_shared_dirs(struct fleetd *f)
{
	scan_state_dir = config_get(&f->cfg, CFG_STATE_DIR);
	scan_found = xcalloc(SHARED_DIRS_MAX, sizeof(*scan_found));
	scan_n = 0;
	if (nftw("/", scan_one, 16, FTW_PHYS | FTW_MOUNT | FTW_ACTIONRETVAL) < 0)
		log_warning("user backend: looking for world-writable directories: %s", strerror(errno));
	us->shared_dirs = scan_found;
	us->n_shared_dirs = scan_n;
	scan_found = NULL;
	for (size_t i = 0; i < us->n_shared_dirs; i++)
		log_info("user backend: %s is world-writable: each sandbox gets its own", us->shared_dirs[i]);
}

int user_ensure_init(struct fleetd *f, char **why)
{
	static const char *const tools[] = { "useradd", "userdel", "groupadd", "groupdel", "rm" };
	int r;

	if (us) {
		us->f = f;
		return 0;
	}
	if (geteuid() != 0) {
		*why = xstrdup("user agents need fleetd to run as root (it creates users and drops to them)");
		return -EPERM;
	}
	for (size_t i = 0; i < ARRAY_SIZE(tools); i++) {
		_cleanup_free_ char *p = account_find_tool(tools[i]);
		if (!p) {
			*why = xasprintf("%s not found (Debian package 'passwd')", tools[i]);
			return -ENOENT;
		}
	}
	if (access("/usr/sbin/nologin", X_OK) < 0) {
		*why = xstrdup("/usr/sbin/nologin not found");
		return -ENOENT;
	}
	if ((r = probe_sandbox(why)) < 0)
		return r;
	us = xcalloc(1, sizeof(*us));
	us->f = f;
	cgroup_host_detect(&us->cg);
	cgroup_host_prepare(us->cg);
	scan_shared_dirs(f);
	{
		_cleanup_free_ char *uwhy = NULL;

		if (account_users_mount(f, &uwhy) == 0)
			us->users_mnt = account_users_dir(f);
		else
			log_warning("user backend: %s; every sandbox keeps a copy of every agent's memory store", uwhy);
	}
	{
		_cleanup_free_ char *nwhy = NULL;

		if (netns_dir_mount(f, &nwhy) == 0)
			us->netns_mnt = netns_dir(f);
		else
			log_warning("user backend: %s; every sandbox keeps a copy of every agent's network namespace", nwhy);
	}
	return 0;
}

/*
 * At fleetd's start, what a reboot or a hand may have undone, for each
 * provisioned agent: its memory store mounted again where it is not (built
 * first for an agent from before, memfs.c), and for every NAT agent its
 * network and firewall rules made again where they went missing (`nft
 * delete table inet fleet`). A failure is logged; the agent's next start
 * or exec tries again.
 */
static int reconcile_memory(struct fleetd *f, const struct agent *a, uid_t uid, char **why)
{
	if (a->state == AGENT_DEFINED || a->state == AGENT_PROVISIONING)
		return 0;
	return memfs_ensure(f, a->name, uid, memfs_quota(a), why);
}

/* An agent's cgroup limits, from its record. */
static struct cgroup_limits agent_limits(const struct agent *a)
{
	return (struct cgroup_limits){
		.memory_bytes = (uint64_t)a->memory_mib << 20,
		.pids_max = USER_AGENT_PIDS_MAX,
		.cpus = a->vcpus,
	};
}

/*
 * A reboot empties cgroupfs: a provisioned agent's group is made again, with
 * its limits, before anything starts it (autostart). One that is there (fleetd
 * restarted, its sandboxes kept) is left as it is.
 */
static int reconcile_cgroup(struct fleetd *f, const struct agent *a, uid_t uid, char **why)
{
	struct cgroup_limits lim = agent_limits(a);

	(void)f;
	(void)uid;
	if (a->state == AGENT_DEFINED || a->state == AGENT_PROVISIONING || !cgroup_host_usable(us->cg) ||
	    cgroup_exists(us->cg, a->name))
		return 0;
	log_info("agent '%s': its cgroup is gone (the host rebooted): made again", a->name);
	return cgroup_create(us->cg, a->name, &lim, why);
}

static void reconcile_each(struct fleetd *f, const struct backend_host *host,
			   int (*fix)(struct fleetd *, const struct agent *, uid_t, char **), const char *what)
{
	struct agent **list = NULL;
	uid_t uid;

	if (!host || !host->list_agents || host->list_agents(f, BACKEND_USER, &list) < 0)
		return;
	for (struct agent **a = list; *a; a++) {
		_cleanup_free_ char *why = NULL;

		if (account_lookup(f, (*a)->name, &uid) < 0)
			continue;
		if (fix(f, *a, uid, &why) < 0)
			log_warning("agent '%s': cannot %s: %s", (*a)->name, what, why ? why : "?");
	}
	agent_list_free(list);
}

static int user_init(struct fleetd *f, const struct backend_host *host, char **why)
{
	_cleanup_free_ char *cg = NULL;
	int r;

	if ((r = user_ensure_init(f, why)) < 0)
		return r;
	us->on_event = host ? host->on_event : NULL;
	cg = cgroup_host_describe(us->cg);
	log_info("user backend: cgroups: %s", cg);
	if (!cgroup_host_has(us->cg, "memory") || !cgroup_host_has(us->cg, "pids"))
		log_warning("user backend: no memory or pids cgroup; limits rely on rlimits only");
	if (!cgroup_host_can_freeze(us->cg))
		log_warning("user backend: no cgroup freezer; a running user agent cannot be snapshotted");
	account_sweep(f);
	user_snapshots_sweep(f);
	memfs_sweep(f);	/* before any store is mounted or built */
	reconcile_each(f, host, reconcile_cgroup, "make its cgroup again");
	reconcile_each(f, host, reconcile_memory, "mount its memory store");
	reconcile_each(f, host, netns_ensure, "restore its network");	/* nothing for --network none */
	netns_refresh_start(f, host);
	return 0;
}

static void op_finish(struct pending_op *op);
static void stop_force(struct pending_op *op);

static void user_shutdown(struct fleetd *f)
{
	account_pwcache_free();	/* account_lookup may have made it without the rest */
	if (!us)
		return;
	/* Snapshot work is cancelled (its worker thaws and cleans up) and reported. */
	user_jobs_shutdown();
	/* Starts and stops in flight complete now; a stop ends forced. */
	while (us->ops) {
		if (us->ops->is_stop && us->ops->r == 0)
			stop_force(us->ops);
		op_finish(us->ops);
	}
	/* Execs die with fleetd (their clients are gone); keepers outlive it, like VM domains. */
	user_execs_shutdown();
	netns_refresh_stop();
	keepers_forget();
	cgroup_host_free(us->cg);
	for (size_t i = 0; i < us->n_shared_dirs; i++)
		free(us->shared_dirs[i]);
	free(us->shared_dirs);
	free(us->users_mnt);
	free(us->netns_mnt);
	free(us);
	us = NULL;
}

/* ---- provision / destroy ---- */

static int user_provision(struct fleetd *f, const struct agent *a, char **why)
{
	struct cgroup_limits lim = agent_limits(a);
	_cleanup_free_ char *user = NULL, *home = NULL;
	uid_t uid;
	int r;

	if ((r = user_ensure_init(f, why)) < 0)
		return r;
	if ((r = account_check_free(f, a, why)) < 0)
		return r;
	/* Snapshots of an earlier agent of this name (a destroy that did not finish) are not this one's. */
	user_snapshots_forget(f, a->name);
	if ((r = account_create(f, a, &uid, why)) < 0)
		return r;
	/* A cgroup of this name left behind is cgroup_create's to judge: taken over empty, refused with processes. */
	if (cgroup_host_usable(us->cg) && (r = cgroup_create(us->cg, a->name, &lim, why)) < 0) {
		account_undo(f, a);
		return r;
	}
	if ((r = netns_ensure(f, a, uid, why)) < 0 || (r = memfs_create(f, a->name, uid, memfs_quota(a), why)) < 0) {
		(void)memfs_remove(f, a->name, NULL);
		(void)netns_remove(f, a->name, uid, NULL);
		if (cgroup_host_usable(us->cg))
			(void)cgroup_remove(us->cg, a->name);
		account_undo(f, a);
		return r;
	}
	user = account_user_name(a->name);
	home = account_home_dir(f, a->name);
	log_debug("agent '%s': user %s uid %ld, home %s", a->name, user, (long)uid, home);
	return 0;
}

static int user_destroy(struct fleetd *f, const struct agent *a, bool force, char **why)
{
	_cleanup_free_ char *user = account_user_name(a->name);
	uid_t uid = 0;
	int r, ret = 0;

	if ((r = user_ensure_init(f, why)) < 0)
		return r;
	spare_drop(a->name);
	r = account_lookup(f, a->name, &uid);
	if (r == -EPERM) {
		/* A fleet-NAME fleet did not make (provision refused it): not ours to remove. */
		log_debug("agent '%s': user %s is not fleet's; leaving it", a->name, user);
		if (cgroup_host_usable(us->cg) && cgroup_count(us->cg, a->name) == 0)
			(void)cgroup_remove(us->cg, a->name);
		return 0;
	}
	if (r < 0 && r != -ENOENT) {
		*why = xasprintf("cannot look up user %s: %s", user, strerror(-r));
		return r;
	}
	if (user_job_busy(a->name, why))
		return -EBUSY;
	if (r == 0 && user_agent_busy(a->name, uid) && !force) {
		*why = xstrdup("is running; stop it first or use --force");
		return -EBUSY;
	}
	if (r == 0 && (r = user_kill_everything(a->name, uid)) < 0) {
		*why = xasprintf("cannot kill every process of %s: %s", user, strerror(-r));
		return r;
	}
	if (cgroup_host_usable(us->cg) && (r = cgroup_remove(us->cg, a->name)) < 0 && ret == 0) {
		*why = xasprintf("cannot remove the cgroup: %s", strerror(-r));
		ret = r;
	}
	if (a->network == NETWORK_NAT && (r = netns_remove(f, a->name, uid, ret ? NULL : why)) < 0 && ret == 0)
		ret = r;
	if ((r = memfs_remove(f, a->name, ret ? NULL : why)) < 0 && ret == 0)
		ret = r;
	if ((r = account_remove(f, a, uid, ret ? NULL : why)) < 0 && ret == 0)
		ret = r;
	user_snapshots_forget(f, a->name);	/* its snapshots and a half-made restore; removed in the background */
	return ret;
}

/* ---- start / stop / state ---- */

static void op_finish(struct pending_op *op)
{
	for (struct pending_op **p = &us->ops; *p; p = &(*p)->next)
		if (*p == op) {
			*p = op->next;
			break;
		}
	op->done(op->userdata, op->r, op->why);
	event_free(op->ev);
	free(op->why);
	free(op->agent);
	free(op);
}

/* Forced end of a stop: whatever is left, double forks and strays included. */
static void stop_force(struct pending_op *op)
{
	int r = user_kill_everything(op->agent, op->uid);

	if (r < 0) {
		op->r = r;
		op->why = xasprintf("cannot kill every process: %s", strerror(-r));
	}
}

static void on_op_tick(evutil_socket_t fd, short what, void *arg)
{
	struct pending_op *op = arg;

	if (op->is_stop && op->r == 0) {
		if (user_agent_procs_left(op->agent, op->uid) && now_usec() < op->deadline) {
			struct timeval tv = { 0, 20000 };
			evtimer_add(op->ev, &tv);
			return;
		}
		stop_force(op);
	}
	op_finish(op);
}

static void op_schedule(struct fleetd *f, const char *agent, uid_t uid, bool is_stop, int timeout_s,
			backend_done_fn done, void *userdata)
{
	struct pending_op *op = xcalloc(1, sizeof(*op));

	op->agent = xstrdup(agent);
	op->uid = uid;
	op->is_stop = is_stop;
	op->deadline = now_usec() + (long long)(timeout_s > 0 ? timeout_s : 0) * 1000000;
	op->done = done;
	op->userdata = userdata;
	op->ev = evtimer_new(f->base, on_op_tick, op);
	event_active(op->ev, EV_TIMEOUT, 0);
	op->next = us->ops;
	us->ops = op;
}

/*
 * What every verb on a provisioned agent checks first: it has its user (uid
 * in *uid) and no snapshot or restore of it is under way.
 */
int user_agent_usable(struct fleetd *f, const struct agent *a, uid_t *uid, char **why)
{
	int r;

	if ((r = account_lookup(f, a->name, uid)) < 0) {
		*why = xstrdup("has no user environment (not provisioned?)");
		return r == -EPERM ? -ENOENT : r;
	}
	if (user_job_busy(a->name, why))
		return -EBUSY;
	return 0;
}

/* user_agent_usable, and nothing of the agent left frozen by a fleetd that was killed mid-snapshot. */
int user_agent_ready(struct fleetd *f, const struct agent *a, uid_t *uid, char **why)
{
	int r;

	if ((r = user_agent_usable(f, a, uid, why)) < 0)
		return r;
	user_thaw_leftover(a->name);
	return 0;
}

/*
 * What the verbs on an agent's processes (stop, a network change) do first:
 * the backend set up, the agent ready (user_agent_ready: its uid in *uid),
 * and a keeper that outlived a fleetd restart watched as this agent's. 0 or
 * -errno with *why.
 */
static int agent_running_prepare(struct fleetd *f, const struct agent *a, uid_t *uid, char **why)
{
	int r;

	if ((r = user_ensure_init(f, why)) < 0 || (r = user_agent_ready(f, a, uid, why)) < 0)
		return r;
	keeper_adopt(f, a->name);
	spare_drop(a->name);	/* set up for the agent as it was */
	return 0;
}

static int user_start(struct fleetd *f, const struct agent *a, backend_done_fn done, void *userdata, char **why)
{
	uid_t uid;
	int r;

	if ((r = user_ensure_init(f, why)) < 0)
		return r;
	if ((r = user_agent_ready(f, a, &uid, why)) < 0)
		return r;
	/* The network and its rules as they should be, before anything of the agent runs in it. */
	if ((r = netns_ensure(f, a, uid, why)) < 0)
		return r;
	keeper_adopt(f, a->name);	/* one that outlived a fleetd restart is this agent's keeper: no second one */
	if (keeper_alive(a->name)) {
		op_schedule(f, a->name, uid, false, 0, done, userdata);
		return 0;
	}
	if ((r = keeper_launch(f, a, uid, why)) < 0)
		return r;
	op_schedule(f, a->name, uid, false, 0, done, userdata);
	return 0;
}

static int user_stop(struct fleetd *f, const struct agent *a, int timeout_s, backend_done_fn done, void *userdata,
		     char **why)
{
	uid_t uid;
	int r;

	/* agent_ready thaws: a frozen process would not see its SIGTERM. */
	if ((r = agent_running_prepare(f, a, &uid, why)) < 0)
		return r;
	/* Clean: SIGTERM to every sandbox init, which passes it to everything in its namespace. */
	keeper_term(a->name);
	user_exec_term_agent(a->name);
	op_schedule(f, a->name, uid, true, timeout_s, done, userdata);
	return 0;
}

static int user_state(struct fleetd *f, const struct agent *a, enum agent_state *ret, char **gone)
{
	_cleanup_free_ char *why = NULL, *home = NULL;
	struct stat st;
	uid_t uid;
	int r;

	if ((r = user_ensure_init(f, &why)) < 0)
		return r;
	if ((r = account_lookup(f, a->name, &uid)) < 0) {
		if (gone && r == -ENOENT)
			*gone = xasprintf("its Unix user " USER_PREFIX "%s is gone", a->name);
		else if (gone && r == -EPERM)
			*gone = xasprintf("its Unix user " USER_PREFIX "%s is no longer fleet's", a->name);
		return r == -EPERM ? -ENOENT : r;
	}
	/* The home is the environment too: without it nothing of the agent is left to start. */
	home = account_home_dir(f, a->name);
	if (lstat(home, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != uid) {
		if (gone)
			*gone = xasprintf("its home %s is gone", home);
		return -ENOENT;
	}
	/* At fleetd's start (reconcile): a keeper that outlived the last fleetd is watched from now on. */
	keeper_adopt(f, a->name);
	*ret = user_agent_busy(a->name, uid) ? AGENT_RUNNING : AGENT_STOPPED;
	return 0;
}

static int user_network_apply(struct fleetd *f, const struct agent *a, char **why)
{
	uid_t uid;
	int r;

	if ((r = user_ensure_init(f, why)) < 0)
		return r;
	if ((r = account_lookup(f, a->name, &uid)) < 0) {
		*why = xstrdup("has no user environment (not provisioned?)");
		return r == -EPERM ? -ENOENT : r;
	}
	return netns_ensure(f, a, uid, why);
}

/* set --network: only while nothing of the agent runs (its sandboxes joined the namespace that would go). */
static int user_network_change(struct fleetd *f, const struct agent *a, char **why)
{
	uid_t uid;
	int r;

	if ((r = agent_running_prepare(f, a, &uid, why)) < 0)
		return r;
	if (user_agent_busy(a->name, uid) || user_exec_active(a->name)) {
		*why = xstrdup("is running or runs a command: stop it first to change its network");
		return -EBUSY;
	}
	if (a->network == NETWORK_NAT)
		return netns_ensure(f, a, uid, why);
	return netns_remove(f, a->name, uid, why);
}

/* set --memory-quota: the store's file system is resized now (memfs.c), or the change refused. */
static int user_memory_quota_apply(struct fleetd *f, const struct agent *a, int old_mib, char **why)
{
	uid_t uid;
	int r;

	if ((r = user_agent_ready(f, a, &uid, why)) < 0)
		return r;
	spare_drop(a->name);	/* its mount of the store is the old one */
	return memfs_resize(f, a->name, uid, (long long)(old_mib > 0 ? old_mib : MEMORY_QUOTA_DEFAULT) << 20,
			    memfs_quota(a), user_agent_busy(a->name, uid) || user_exec_active(a->name), why);
}

static int user_network_refused(struct fleetd *f, const struct agent *a, long long *packets)
{
	(void)f;
	if (a->network != NETWORK_NAT || !a->egress_allow)
		return -ENOENT;
	return firewall_agent_refused(a->name, packets);
}

/* Each running sandbox's memory and CPU, from its cgroup. */
static int user_usage(struct fleetd *f, struct agent *const *agents, size_t n, struct agent_usage *ret)
{
	(void)f;
	if (!us || !us->cg || !cgroup_host_usable(us->cg))
		return -EOPNOTSUPP;
	for (size_t i = 0; i < n; i++) {
		ret[i] = (struct agent_usage){ .memory_bytes = -1, .cpu_seconds = -1 };
		if (agents[i]->state == AGENT_RUNNING &&
		    cgroup_usage(us->cg, agents[i]->name, &ret[i].memory_bytes, &ret[i].cpu_seconds) == 0)
			ret[i].known = true;
	}
	return 0;
}

/* agentd's checks, in the shell (a sandbox may have no agentd: user_launch_agentd_path): the home takes a write, a shell runs. */
static const char *const user_health_default[] = {
	"/bin/sh", "-c",
	"f=\"$HOME/.fleet-health.$$\" && echo ok > \"$f\" && rm -f \"$f\" && echo healthy || "
	"{ echo \"unhealthy: cannot write to $HOME\"; exit 1; }",
	NULL,
};

const struct backend_ops backend_user_ops = {
	.name = "user",
	.env_word = "sandbox",
	.health_default = user_health_default,
	.has_network = true,	/* --network nat: user/netns.c */
	.agentd = USER_AGENTD_PATH,	/* fleetd's, bound in by fleet-init */
	.init = user_init,
	.shutdown = user_shutdown,
	.provision = user_provision,
	.destroy = user_destroy,
	.start = user_start,
	.stop = user_stop,
	.state = user_state,
	.exec = user_exec,
	.snapshot_create = user_snapshot_create,
	.snapshot_restore = user_snapshot_restore,
	.snapshot_delete = user_snapshot_delete,
	.snapshot_exists = user_snapshot_exists,
	.exec_cancel = user_exec_cancel,
	.exec_pause = user_exec_pause,
	.network_apply = user_network_apply,
	.network_refused = user_network_refused,
	.network_change = user_network_change,
	.memory_quota_apply = user_memory_quota_apply,
	.usage = user_usage,
	.doctor = user_doctor,
};
