/*
 * user/keeper.c: the sandboxes of a user agent. sandbox_launch starts one
 * with the agent's identity, limits and environment (for the keeper and
 * for every command). The keeper is an idle sandbox that makes an agent
 * 'running'; it is watched through its pidfd, and a keeper that dies
 * without fleet asking is reported upward so the restart policy acts.
 * Keepers outlive fleetd (like VM domains): the next fleetd adopts a
 * running one and watches it the same way. It also kills everything of an
 * agent (keeper, commands, cgroup, uid).
 */
#include "user/internal.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/spawn.h"
#include "common/log.h"
#include "common/util.h"
#include "model/agent.h"
#include "model/fleetd.h"
#include "user/backend.h"
#include "user/cgroup.h"

/* The long-lived sandbox of a started agent. */
struct keeper {
	char *agent;
	pid_t pid;
	int pidfd;
	bool asked;		/* fleet told it to stop: its exit is no failure */
	bool adopted;		/* started by an earlier fleetd: not our child, its exit status is unknown */
	struct event *ev;
	struct keeper *next;
};

static struct keeper **keeper_find(const char *agent)
{
	struct keeper **k = &us->keepers;

	while (*k && strcmp((*k)->agent, agent) != 0)
		k = &(*k)->next;
	return k;
}

static void keeper_free(struct keeper *k)
{
	if (k->ev)
		event_free(k->ev);
	if (k->pidfd >= 0)
		close(k->pidfd);
	free(k->agent);
	free(k);
}

/*
 * Has k exited (0 and its wait status, or -1 when it is unknown: adopted),
 * -EAGAIN while it lives. Our own keeper is reaped here; an adopted one is
 * not our child, its pidfd only turns readable.
 */
static int keeper_wait(struct keeper *k, bool block, int *status)
{
	struct pollfd p = { .fd = k->pidfd, .events = POLLIN };
	int r;

	if (!k->adopted)
		return spawn_wait(k->pidfd, !block, status);
	/* Bounded even when blocking: the kill before it was SIGKILL. */
	while ((r = poll(&p, 1, block ? 2000 : 0)) < 0 && errno == EINTR)
		;
	if (r <= 0)
		return -EAGAIN;
	*status = -1;
	return 0;
}

bool keeper_alive(const char *agent)
{
	struct keeper **kp = keeper_find(agent), *k = *kp;
	int status;

	if (!k)
		return false;
	if (keeper_wait(k, false, &status) == -EAGAIN)
		return true;
	*kp = k->next;
	keeper_free(k);
	return false;
}

/*
 * A keeper's pidfd became readable: it exited. Unless fleet stopped it
 * (stop, remove and restore reap theirs before this runs), report the stop
 * upward, so the restart policy acts for user agents as for VMs.
 */
static void on_keeper_exit(evutil_socket_t fd, short what, void *arg)
{
	struct keeper *k = arg, **kp = keeper_find(k->agent);
	_cleanup_free_ char *agent = xstrdup(k->agent);
	bool asked = k->asked || us->stopping;
	int status = 0;

	(void)fd;
	(void)what;
	if (*kp != k || keeper_wait(k, false, &status) == -EAGAIN)
		return;
	*kp = k->next;
	keeper_free(k);
	log_debug("agent '%s': keeper exited", agent);
	if (!asked && us->on_event) {
		_cleanup_free_ char *detail = status == -1 ? xstrdup("its sandbox ended (started by an earlier fleetd: "
								     "exit status unknown)")
					      : WIFSIGNALED(status) ? xasprintf("its sandbox was killed by signal %d",
										WTERMSIG(status))
								    : xasprintf("its sandbox exited with status %d",
										WEXITSTATUS(status));
		struct backend_event ev = { .kind = BACKEND_EV_STOPPED, .backend = BACKEND_USER, .agent = agent,
					    .clean = false, .detail = detail };
		us->on_event(us->f, &ev);
	}
}

/* Track a keeper whose pidfd we hold and watch it on the loop. */
static void keeper_watch(struct fleetd *f, const char *agent, pid_t pid, int pidfd, bool adopted)
{
	struct keeper *k = xcalloc(1, sizeof(*k));

	k->agent = xstrdup(agent);
	k->pid = pid;
	k->pidfd = pidfd;
	k->adopted = adopted;
	k->ev = event_new(f->base, pidfd, EV_READ, on_keeper_exit, k);
	event_add(k->ev, NULL);
	k->next = us->keepers;
	us->keepers = k;
}

/* Is a process in the agent's cgroup? Its spare, waiting, is none of the agent's (spare.c). */
static bool cgroup_has_procs(const char *agent)
{
	pid_t spare = spare_pid(agent), pids[64];
	int n;

	if (spare <= 0)
		return cgroup_count(us->cg, agent) > 0;
	n = cgroup_pids(us->cg, agent, pids, ARRAY_SIZE(pids));
	if (n < 0 || n > (int)ARRAY_SIZE(pids))
		return n > 0 || cgroup_count(us->cg, agent) > 0;
	for (int i = 0; i < n; i++)
		if (pids[i] != spare)
			return true;
	return false;
}

bool user_agent_busy(const char *agent, uid_t uid)
{
	if (keeper_alive(agent) || user_exec_active(agent))
		return true;
	if (cgroup_host_usable(us->cg))
		return cgroup_has_procs(agent);
	return user_launch_uid_alive(uid);
}

bool user_agent_procs_left(const char *agent, uid_t uid)
{
	return keeper_alive(agent) || (cgroup_host_usable(us->cg) ? cgroup_has_procs(agent) : user_launch_uid_alive(uid));
}

int user_kill_everything(const char *agent, uid_t uid)
{
	struct keeper *k = *keeper_find(agent);
	int r = 0, q;

	spare_drop(agent);
	if (k)
		(void)spawn_signal(k->pidfd, SIGKILL);
	user_exec_kill_agent(agent);
	if (cgroup_host_usable(us->cg) && (q = cgroup_kill(us->cg, agent, 2000)) < 0)
		r = q;
	/* Belt and braces: nothing may keep running under a uid that is about to be freed or reused. */
	if ((q = user_launch_kill_uid(uid, 2000)) < 0 && r == 0)
		r = q;
	if (k) {
		int status;
		(void)keeper_wait(k, true, &status);
		(void)keeper_alive(agent);
	}
	return r;
}

char *sandbox_report_why(const struct user_launch_report *rep, const char *what)
{
	return xasprintf("cannot %s%s%s: %s", user_launch_stage_to_string((enum user_launch_stage)rep->stage),
			 what ? " " : "", what ? what : "", strerror(rep->value));
}

/* The parts of a sandbox's spec that sandbox_spec allocates or opens. */
struct sandbox_parts {
	char *user, *home, *netns, *resolv;
	char **env;
	int cg_fds[8];
	int n_cg;
};

static void sandbox_parts_free(struct sandbox_parts *p)
{
	for (int i = 0; i < p->n_cg; i++)
		close(p->cg_fds[i]);
	user_launch_env_free(p->env);
	free(p->user);
	free(p->home);
	free(p->netns);
	free(p->resolv);
}

/* The agent's cgroup.procs files opened into parts and spec, for a sandbox to join; 0 or -errno with *why. */
static int sandbox_join_fds(const struct agent *a, struct user_launch_spec *spec, struct sandbox_parts *parts,
			    char **why)
{
	int r;

	spec->cgroup_fds = NULL;
	spec->n_cgroup_fds = 0;
	if (!cgroup_host_usable(us->cg))
		return 0;
	if ((r = cgroup_open_join_fds(us->cg, a->name, parts->cg_fds, ARRAY_SIZE(parts->cg_fds))) < 0) {
		*why = xasprintf("cannot open the agent's cgroup: %s", strerror(-r));
		return r;
	}
	parts->n_cg = r;
	spec->cgroup_fds = parts->cg_fds;
	spec->n_cgroup_fds = (size_t)r;
	return 0;
}

/*
 * tmpl completed with a's identity, limits, environment, cgroups and network into *spec; parts owns what it points to.
 * Without join_fds, the cgroups are only counted (what a spare's key holds of them), no file is opened.
 */
static int sandbox_spec(struct fleetd *f, const struct agent *a, uid_t uid, const struct user_launch_spec *tmpl,
			const char *const *extra_env, bool join_fds, struct user_launch_spec *spec,
			struct sandbox_parts *parts, char **why)
{
	int r;

	*parts = (struct sandbox_parts){ .user = account_user_name(a->name), .home = account_home_dir(f, a->name) };
	*spec = *tmpl;
	/* A NAT agent's sandboxes all join its network; one that is gone (a reboot) is made again first. */
	if (a->network == NETWORK_NAT) {
		if (!netns_present(f, a->name) && (r = netns_ensure(f, a, uid, why)) < 0)
			return r;
		spec->netns_path = parts->netns = netns_path(f, a->name);
		spec->resolv_conf = parts->resolv = user_resolv_conf(f);
	}

	if (user_launch_env(a->name, parts->user, parts->home, extra_env, &parts->env) < 0) {
		*why = xstrdup("invalid environment entry (want NAME=VALUE)");
		return -EINVAL;
	}
	if (join_fds) {
		if ((r = sandbox_join_fds(a, spec, parts, why)) < 0)
			return r;
	} else {
		spec->cgroup_fds = NULL;
		spec->n_cgroup_fds = cgroup_host_usable(us->cg) ? (size_t)cgroup_join_count(us->cg, a->name) : 0;
	}
	spec->uid = uid;
	spec->gid = uid;
	spec->home = parts->home;
	spec->envp = (const char *const *)parts->env;
	spec->rlimit_nproc = USER_AGENT_PIDS_MAX;
	spec->rlimit_nofile = USER_AGENT_NOFILE_MAX;
	spec->tmp_size_mib = a->memory_mib;
	spec->shared_dirs = (const char *const *)us->shared_dirs;
	spec->n_shared_dirs = us->n_shared_dirs;
	spec->users_dir = us->users_mnt;
	spec->netns_dir = us->netns_mnt;	/* any agent's: every sandbox has a copy of every NAT agent's namespace */
	return 0;
}

int sandbox_launch(struct fleetd *f, const struct agent *a, uid_t uid, const struct user_launch_spec *tmpl,
		   const char *const *extra_env, struct user_launch_proc *proc, char **why)
{
	struct sandbox_parts parts;
	struct user_launch_spec spec;
	int r;

	if ((r = sandbox_spec(f, a, uid, tmpl, extra_env, true, &spec, &parts, why)) == 0 &&
	    (r = user_launch(&spec, proc)) < 0)
		*why = xasprintf("cannot create the sandbox: %s", strerror(-r));
	sandbox_parts_free(&parts);
	return r;
}

int sandbox_launch_command(struct fleetd *f, const struct agent *a, uid_t uid, const struct user_launch_spec *tmpl,
			   const char *const *extra_env, struct user_launch_proc *proc, char **why)
{
	struct sandbox_parts parts;
	struct user_launch_spec spec;
	int r;

	if ((r = sandbox_spec(f, a, uid, tmpl, extra_env, false, &spec, &parts, why)) < 0) {
		sandbox_parts_free(&parts);
		return r;
	}
	/*
	 * The agent's spare, set up already (spare.c): it is in the agent's cgroups, and nothing froze
	 * them since the check before the command that asked for it (a snapshot job drops it). Else a
	 * sandbox of its own, as fast as before, after that check, joining the cgroups opened here.
	 */
	if (spare_take(a->name, &spec, proc) < 0) {
		user_thaw_leftover(a->name);
		if ((r = sandbox_join_fds(a, &spec, &parts, why)) == 0 && (r = user_launch(&spec, proc)) < 0)
			*why = xasprintf("cannot create the sandbox: %s", strerror(-r));
	}
	if (r == 0)
		spare_want(f, a->name, &spec);	/* for the next command: its maker opens the cgroup files */
	sandbox_parts_free(&parts);
	return r;
}

int keeper_launch(struct fleetd *f, const struct agent *a, uid_t uid, char **why)
{
	struct user_launch_spec spec = { .stdin_fd = -1, .stdout_fd = -1, .stderr_fd = -1 };
	struct user_launch_proc proc;
	struct user_launch_report rep = { 0 };
	ssize_t n;
	int r;

	if ((r = sandbox_launch(f, a, uid, &spec, NULL, &proc, why)) < 0)
		return r;
	/* The keeper reports once its sandbox is set up (READY) or why it failed: a few ms. */
	while ((n = read(proc.report_fd, &rep, sizeof(rep))) < 0 && errno == EINTR)
		;
	close(proc.report_fd);
	if (n != sizeof(rep) || rep.kind != LAUNCH_REPORT_READY) {
		int status;
		*why = n == sizeof(rep) && rep.kind == LAUNCH_REPORT_FAILED ? sandbox_report_why(&rep, NULL)
									 : xstrdup("the sandbox died while starting");
		(void)spawn_signal(proc.pidfd, SIGKILL);
		(void)spawn_wait(proc.pidfd, false, &status);
		close(proc.pidfd);
		return -EIO;
	}
	keeper_watch(f, a->name, proc.pid, proc.pidfd, false);
	return 0;
}

/* Read a small /proc file of pid into buf (NUL-terminated); its length or -1. */
static ssize_t proc_read(pid_t pid, const char *what, char *buf, size_t size)
{
	char path[64];
	_cleanup_close_ int fd = -1;
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/%ld/%s", (long)pid, what);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return -1;
	while ((n = read(fd, buf, size - 1)) < 0 && errno == EINTR)
		;
	if (n < 0)
		return -1;
	buf[n] = '\0';
	return n;
}

/*
 * Is pid a keeper: a sandbox init (named fleet-init, root: no agent
 * process can be either), alive, without a payload (a command's sandbox
 * has one; those die with the fleetd that started them)?
 */
static bool is_keeper(pid_t pid)
{
	char buf[4096], *uid, *state;

	if (proc_read(pid, "comm", buf, sizeof(buf)) < 0 || strcmp(buf, "fleet-init\n") != 0)
		return false;
	if (proc_read(pid, "status", buf, sizeof(buf)) < 0 || !(state = strstr(buf, "\nState:\t")) ||
	    !(uid = strstr(buf, "\nUid:\t")))
		return false;
	if (state[8] == 'Z' || state[8] == 'X' || strncmp(uid, "\nUid:\t0\t0\t0\t0\n", 14) != 0)
		return false;
	snprintf(buf, sizeof(buf), "task/%ld/children", (long)pid);
	{
		char children[64];
		/* where the kernel has no children file, the other checks have to do */
		if (proc_read(pid, buf, children, sizeof(children)) > 0)
			return false;
	}
	return true;
}

void keeper_adopt(struct fleetd *f, const char *agent)
{
	pid_t pids[64];
	int n;

	if (*keeper_find(agent) || !cgroup_host_usable(us->cg))
		return;	/* watched already; without a cgroup a keeper cannot be told from another agent's */
	if ((n = cgroup_pids(us->cg, agent, pids, ARRAY_SIZE(pids))) <= 0)
		return;
	for (int i = 0; i < n && i < (int)ARRAY_SIZE(pids); i++) {
		int pidfd;

		if (!is_keeper(pids[i]) || (pidfd = (int)syscall(SYS_pidfd_open, pids[i], 0)) < 0)
			continue;
		/* Still a keeper in this agent's group now that the pidfd pins it (the pid was not reused)? */
		pid_t again[64];
		int m = cgroup_pids(us->cg, agent, again, ARRAY_SIZE(again));
		bool member = false;
		for (int j = 0; j < m && j < (int)ARRAY_SIZE(again); j++)
			member |= again[j] == pids[i];
		if (!member || !is_keeper(pids[i])) {
			close(pidfd);
			continue;
		}
		log_info("agent '%s': adopted its running sandbox (pid %ld, started by an earlier fleetd)", agent,
			 (long)pids[i]);
		keeper_watch(f, agent, pids[i], pidfd, true);
		return;
	}
}

void keeper_term(const char *agent)
{
	struct keeper *k = *keeper_find(agent);

	if (!k)
		return;
	k->asked = true;
	(void)spawn_signal(k->pidfd, SIGTERM);
}

void keepers_forget(void)
{
	while (us->keepers) {
		struct keeper *k = us->keepers;
		us->keepers = k->next;
		keeper_free(k);
	}
}
