/*
 * user/spare.c: a spare sandbox per agent, set up before its next command
 * (issue #16: an exec paid the whole sandbox entry, the namespaces' clone,
 * fleet-init's start, the mounts and the cgroup joins, whose first one
 * waits for an RCU grace period, 10-16 ms on the development host).
 *
 * After a command of an agent starts, fleetd starts one spare for it: a
 * sandbox like every other (user/launch.h), set up from the same spec but
 * with no payload yet, waiting (user_launch_hand). The agent's next command
 * is handed to it if it still matches (spare_take): same identity, home,
 * limits, network and mounts (user_launch_key), and no mount of fleetd's
 * namespace changed since its clone. The isolation is the same as a fresh
 * launch's, since a spare is single-use: nothing of any command reached it
 * before its own (no environment, no secret file, no fd: those come with
 * the command), and after that it is that command's sandbox and ends with
 * it. A spare runs no agent code, is in the agent's cgroup (so killing the
 * agent's cgroup kills it too), dies with fleetd (PR_SET_PDEATHSIG) and is
 * dropped, killed and reaped, whenever anything of the agent is stopped,
 * killed or changed (spare_drop), after SPARE_IDLE_S unused, and when
 * SPARES_MAX other agents' spares are newer. It is named fleet-spare until
 * it has its command: no keeper (is_keeper) and no agent process
 * (user_agent_busy) counts it.
 */
#include "user/internal.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/spawn.h"
#include "common/log.h"
#include "common/util.h"
#include "model/fleetd.h"
#include "user/cgroup.h"

/* Unused this long, a spare goes: an idle agent keeps no sandbox it does not use. */
#define SPARE_IDLE_S 60
/* At most this many spares (the most recently used agents'): each is a process and three fds of fleetd's. */
#define SPARES_MAX 32

struct spare {
	struct spare *next;
	char *agent;
	char *key;			/* user_launch_key of its spec */
	unsigned mounts_gen;		/* mounts_generation() at its clone */
	/* Until it is launched (made on the loop, after the command that asked for it): its spec. */
	struct user_launch_spec spec;
	char *home, *netns_path, *resolv_conf;
	int cg_fds[USER_LAUNCH_MAX_CGROUPS];
	bool launched;
	struct user_launch_proc proc;
	struct event *ev_make;		/* pending: launch it */
	struct event *ev_idle;		/* launched: drop it when unused for SPARE_IDLE_S */
	struct event *ev_dead;		/* launched: its pidfd, readable when it died unused */
};

static struct spare *spares;
static int mounts_fd = -1;
static unsigned mounts_gen;

/*
 * A number that changes whenever fleetd's mount table does: a spare's
 * mount namespace is a copy of it at the clone, and would not see a mount
 * made since (the memory store's, a NAT agent's namespace, the host's).
 * poll on /proc/self/mountinfo says POLLPRI once per change.
 */
static unsigned mounts_generation(void)
{
	struct pollfd p;

	if (mounts_fd < 0 && (mounts_fd = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC)) < 0)
		return ++mounts_gen;	/* cannot tell: every spare is stale */
	p = (struct pollfd){ .fd = mounts_fd, .events = POLLPRI };
	if (poll(&p, 1, 0) != 0)
		mounts_gen++;
	return mounts_gen;
}

static void spare_free(struct spare *s)
{
	int status;

	if (s->ev_make)
		event_free(s->ev_make);
	if (s->ev_idle)
		event_free(s->ev_idle);
	if (s->ev_dead)
		event_free(s->ev_dead);
	if (s->launched) {
		/* Unused: it runs nothing of the agent's, so SIGKILL loses nothing. */
		if (s->proc.ctl_fd >= 0)
			close(s->proc.ctl_fd);
		(void)spawn_signal(s->proc.pidfd, SIGKILL);
		(void)spawn_wait(s->proc.pidfd, false, &status);
		close(s->proc.pidfd);
		close(s->proc.report_fd);
	}
	for (size_t i = 0; i < s->spec.n_cgroup_fds; i++)
		close(s->cg_fds[i]);
	free(s->home);
	free(s->netns_path);
	free(s->resolv_conf);
	free(s->key);
	free(s->agent);
	free(s);
}

/* Unlink s from the list (it is in it). */
static void spare_unlink(struct spare *s)
{
	for (struct spare **p = &spares; *p; p = &(*p)->next)
		if (*p == s) {
			*p = s->next;
			return;
		}
}

static struct spare *spare_find(const char *agent)
{
	struct spare *s = spares;

	while (s && strcmp(s->agent, agent) != 0)
		s = s->next;
	return s;
}

void spare_drop(const char *agent)
{
	struct spare *s = spare_find(agent);

	if (!s)
		return;
	spare_unlink(s);
	spare_free(s);
}

void spares_shutdown(void)
{
	while (spares) {
		struct spare *s = spares;

		spares = s->next;
		spare_free(s);
	}
	if (mounts_fd >= 0)
		close(mounts_fd);
	mounts_fd = -1;
}

pid_t spare_pid(const char *agent)
{
	struct spare *s = spare_find(agent);

	return s && s->launched ? s->proc.pid : 0;
}

static void on_spare_gone(evutil_socket_t fd, short what, void *arg)
{
	struct spare *s = arg;

	(void)fd;
	(void)what;
	log_debug("agent '%s': spare sandbox %s", s->agent, s->ev_dead && what == EV_READ ? "ended" : "idle: dropped");
	spare_unlink(s);
	spare_free(s);
}

static void on_spare_make(evutil_socket_t fd, short what, void *arg)
{
	struct spare *s = arg;
	struct timeval idle = { SPARE_IDLE_S, 0 };
	int r;

	(void)fd;
	(void)what;
	event_free(s->ev_make);
	s->ev_make = NULL;
	s->mounts_gen = mounts_generation();
	if ((r = user_launch(&s->spec, &s->proc)) < 0) {
		log_debug("agent '%s': no spare sandbox: %s", s->agent, strerror(-r));
		spare_unlink(s);
		spare_free(s);
		return;
	}
	s->launched = true;
	for (size_t i = 0; i < s->spec.n_cgroup_fds; i++)
		close(s->cg_fds[i]);
	s->spec.n_cgroup_fds = 0;
	s->ev_dead = event_new(us->f->base, s->proc.pidfd, EV_READ, on_spare_gone, s);
	s->ev_idle = evtimer_new(us->f->base, on_spare_gone, s);
	event_add(s->ev_dead, NULL);
	evtimer_add(s->ev_idle, &idle);
}

void spare_want(struct fleetd *f, const char *agent, const struct user_launch_spec *spec)
{
	struct spare *s;
	size_t n = 0;

	if (spare_find(agent))
		return;
	s = xcalloc(1, sizeof(*s));
	if (!(s->key = user_launch_key(spec))) {
		free(s);
		return;
	}
	s->agent = xstrdup(agent);
	s->spec = (struct user_launch_spec){
		.uid = spec->uid, .gid = spec->gid, .rlimit_nproc = spec->rlimit_nproc,
		.rlimit_nofile = spec->rlimit_nofile, .tmp_size_mib = spec->tmp_size_mib,
		.shared_dirs = spec->shared_dirs, .n_shared_dirs = spec->n_shared_dirs,	/* us->shared_dirs: fleetd's */
		.stdin_fd = -1, .stdout_fd = -1, .stderr_fd = -1,
		.die_with_parent = true, .init_path = spec->init_path, .spare = true,
	};
	s->spec.home = s->home = xstrdup(spec->home);
	s->spec.netns_path = s->netns_path = spec->netns_path ? xstrdup(spec->netns_path) : NULL;
	s->spec.resolv_conf = s->resolv_conf = spec->resolv_conf ? xstrdup(spec->resolv_conf) : NULL;
	for (size_t i = 0; i < spec->n_cgroup_fds; i++) {
		if ((s->cg_fds[i] = fcntl(spec->cgroup_fds[i], F_DUPFD_CLOEXEC, 3)) < 0) {
			spare_free(s);
			return;
		}
		s->spec.n_cgroup_fds = i + 1;
	}
	s->spec.cgroup_fds = s->cg_fds;
	/* Made on the loop, once what asked for it is done: the clone holds fleetd for a moment. */
	s->ev_make = evtimer_new(f->base, on_spare_make, s);
	event_active(s->ev_make, EV_TIMEOUT, 0);
	s->next = spares;
	spares = s;
	/* The oldest go beyond SPARES_MAX. */
	for (struct spare **p = &spares; *p;) {
		if (++n > SPARES_MAX) {
			struct spare *old = *p;

			*p = old->next;
			spare_free(old);
		} else {
			p = &(*p)->next;
		}
	}
}

int spare_take(const char *agent, const struct user_launch_spec *spec, struct user_launch_proc *proc)
{
	struct spare *s = spare_find(agent);
	_cleanup_free_ char *key = NULL;
	struct pollfd p;
	int r;

	if (!s || !s->launched)
		return -ENOENT;	/* none, or not made yet: a fresh launch is as fast */
	spare_unlink(s);
	key = user_launch_key(spec);
	p = (struct pollfd){ .fd = s->proc.pidfd, .events = POLLIN };
	if (!key || strcmp(key, s->key) != 0 || s->mounts_gen != mounts_generation() || poll(&p, 1, 0) != 0) {
		log_debug("agent '%s': spare sandbox stale or gone: dropped", agent);
		spare_free(s);
		return -ENOENT;
	}
	if ((r = user_launch_hand(s->proc.ctl_fd, spec)) < 0) {
		log_debug("agent '%s': spare sandbox refused its command: %s", agent, strerror(-r));
		spare_free(s);
		return -ENOENT;	/* a fresh launch says why, if it fails too */
	}
	close(s->proc.ctl_fd);
	*proc = s->proc;
	proc->ctl_fd = -1;
	s->launched = false;	/* its process is the command's now */
	spare_free(s);
	return 0;
}
