/*
 * user/spare.c: a spare sandbox per agent, set up before its next command
 * (issue #16: an exec paid the whole sandbox entry, the namespaces' clone,
 * fleet-init's start, the mounts and the cgroup joins, whose first one
 * waits for an RCU grace period, 10-16 ms on the development host).
 *
 * After a command of an agent starts, fleetd starts one spare for it: a
 * sandbox like every other (user/launch.h), set up from the same spec but
 * with no payload yet, waiting (user_launch_hand). Not at once: when that
 * command ends, or SPARE_DEFER_MS after it started if it runs longer
 * (spare_now, on_defer). A spare's setup (new namespaces, mounts, cgroup
 * joins) slowed the start of the command beside it by about 1 ms of its
 * 2 ms from execve to its first write on the development host (2 CPUs),
 * and no less with the maker at nice 19: it is the kernel's work, not a
 * share of CPU. The agent's next command
 * is handed to it if it still matches (spare_take): same identity, home,
 * limits, network and mounts (user_launch_key), and no mount of fleetd's
 * namespace changed since its clone. The isolation is the same as a fresh
 * launch's, since a spare is single-use: nothing of any command reached it
 * before its own (no environment, no secret file, no fd: those come with
 * the command), and after that it is that command's sandbox and ends with
 * it. A spare runs no agent code, is in the agent's cgroup (so killing the
 * agent's cgroup kills it too), dies with fleetd (PR_SET_PDEATHSIG) and is
 * dropped, killed and reaped, whenever anything of the agent is stopped,
 * killed or changed (spare_drop), and whenever its memory store is
 * unmounted (memfs_umount; all of them when the users dir is no mount point
 * and every spare has a copy of every agent's store: spares_drop_all),
 * after SPARE_IDLE_S unused, and when
 * SPARES_MAX other agents' spares are newer. It is named fleet-spare until
 * it has its command: no keeper (is_keeper) and no agent process
 * (user_agent_busy) counts it.
 *
 * Spares are cloned on a thread of their own (the maker), not on the loop:
 * the clone into new namespaces held fleetd 1.5-12 ms, while the command
 * that asked for the spare was starting and its output waiting. The maker
 * lives until the backend shuts down; a spare's PR_SET_PDEATHSIG is tied
 * to it (the thread that cloned it), so spares and the commands they took
 * still die with fleetd.
 */
#include "user/internal.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
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
/* A spare is made this long after the command that asked for it started, or when it ends if sooner. */
#define SPARE_DEFER_MS 50

struct spare {
	struct spare *next;
	char *agent;
	char *key;			/* user_launch_key of its spec */
	unsigned mounts_gen;		/* mounts_generation() at its clone */
	/* Until it is launched (made on the loop, after the command that asked for it): its spec. */
	struct user_launch_spec spec;
	char *home, *netns_path, *resolv_conf, *users_dir, *netns_dir;
	/* The agent's cgroup.procs files, opened by the maker (off the loop): n_cg of them, on cg. */
	const struct cgroup_host *cg;
	size_t n_cg;
	int cg_fds[USER_LAUNCH_MAX_CGROUPS];
	struct event *ev_defer;		/* until the maker gets it (SPARE_DEFER_MS, or spare_now) */
	bool making;			/* the maker has it: only the maker touches spec and proc */
	bool dropped;			/* dropped while making: freed once made */
	bool launched;
	struct user_launch_proc proc;
	struct event *ev_idle;		/* launched: drop it when unused for SPARE_IDLE_S */
	struct event *ev_dead;		/* launched: its pidfd, readable when it died unused */
};

static struct spare *spares;
static int mounts_fd = -1;
static unsigned mounts_gen;

/* The maker thread: struct spare pointers in on req, struct made out on rep (read on the loop). */
static pthread_t maker;
static bool maker_up;
static int maker_req[2] = { -1, -1 }, maker_rep[2] = { -1, -1 };
static struct event *ev_made;

struct made {
	struct spare *s;
	int r;	/* user_launch's */
};

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

static void on_spare_gone(evutil_socket_t fd, short what, void *arg);

static void spare_free(struct spare *s)
{
	int status;

	if (s->ev_defer)
		event_free(s->ev_defer);
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
	free(s->users_dir);
	free(s->netns_dir);
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

/* Out of the list and gone: now, or once the maker is done with it. */
static void spare_discard(struct spare *s)
{
	spare_unlink(s);
	if (s->making)
		s->dropped = true;	/* on_made frees it */
	else
		spare_free(s);
}

void spare_drop(const char *agent)
{
	struct spare *s = spare_find(agent);

	if (s)
		spare_discard(s);
}

/* One being made is in the list too: spare_discard has on_made free it once made. */
void spares_drop_all(void)
{
	while (spares)
		spare_discard(spares);
}

/* SPARE_IDLE_S, or FLEET_TEST_SPARE_IDLE_S seconds (1-600) for a test of the idle drop. */
static int spare_idle_s(void)
{
	const char *e = getenv("FLEET_TEST_SPARE_IDLE_S");
	int n = e ? atoi(e) : 0;

	return n >= 1 && n <= 600 ? n : SPARE_IDLE_S;
}

/* A spare the maker launched (or could not), on the loop. */
static void spare_made(const struct made *m)
{
	struct spare *s = m->s;
	struct timeval idle = { spare_idle_s(), 0 };

	s->making = false;
	s->launched = m->r == 0;
	for (size_t i = 0; i < s->spec.n_cgroup_fds; i++)
		close(s->cg_fds[i]);
	s->spec.n_cgroup_fds = 0;
	if (s->dropped) {
		spare_free(s);	/* not in the list any more */
		return;
	}
	if (m->r < 0) {
		log_debug("agent '%s': no spare sandbox: %s", s->agent, strerror(-m->r));
		spare_unlink(s);
		spare_free(s);
		return;
	}
	s->ev_dead = event_new(us->f->base, s->proc.pidfd, EV_READ, on_spare_gone, s);
	s->ev_idle = evtimer_new(us->f->base, on_spare_gone, s);
	event_add(s->ev_dead, NULL);
	evtimer_add(s->ev_idle, &idle);
}

static void on_made(evutil_socket_t fd, short what, void *arg)
{
	struct made m;

	(void)what;
	(void)arg;
	/* Whole records: a pipe write of this size is atomic. */
	while (read(fd, &m, sizeof(m)) == (ssize_t)sizeof(m))
		spare_made(&m);
}

/*
 * On the maker: the cgroup files s joins, as many as its key counted (a
 * group made or removed since is a stale spare). Here, not on the loop:
 * the command whose spec s copies is running already, and the command that
 * takes s needs none of them (s is in the cgroups by then).
 */
static int spare_join_fds(struct spare *s)
{
	int n;

	if (s->n_cg == 0)
		return 0;
	if ((n = cgroup_open_join_fds(s->cg, s->agent, s->cg_fds, ARRAY_SIZE(s->cg_fds))) < 0)
		return n;
	s->spec.n_cgroup_fds = (size_t)n;
	return (size_t)n == s->n_cg ? 0 : -ESTALE;
}

static void *maker_main(void *arg)
{
	sigset_t all;

	(void)arg;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, NULL);	/* signals are the loop's */
	for (;;) {
		struct spare *s;
		struct made m;
		ssize_t n = read(maker_req[0], &s, sizeof(s));

		if (n < 0 && errno == EINTR)
			continue;
		if (n != (ssize_t)sizeof(s) || !s)
			return NULL;	/* shutdown */
		memset(&m, 0, sizeof(m));	/* written whole to the pipe: its padding too */
		m.s = s;
		m.r = spare_join_fds(s);
		if (m.r == 0)
			m.r = user_launch(&s->spec, &s->proc);
		while (write(maker_rep[1], &m, sizeof(m)) < 0 && errno == EINTR)
			;
	}
}

/* Start the maker once; false if it cannot run (no spares then). */
static bool maker_start(struct fleetd *f)
{
	if (maker_up)
		return true;
	if (pipe2(maker_req, O_CLOEXEC) < 0)
		return false;
	if (pipe2(maker_rep, O_CLOEXEC | O_NONBLOCK) < 0) {
		close(maker_req[0]);
		close(maker_req[1]);
		return false;
	}
	if (pthread_create(&maker, NULL, maker_main, NULL) != 0) {
		for (int i = 0; i < 2; i++) {
			close(maker_req[i]);
			close(maker_rep[i]);
		}
		return false;
	}
	ev_made = event_new(f->base, maker_rep[0], EV_READ | EV_PERSIST, on_made, NULL);
	event_add(ev_made, NULL);
	maker_up = true;
	return true;
}

void spares_shutdown(void)
{
	while (spares)
		spare_discard(spares);
	if (maker_up) {
		/* The maker finishes what it has, then stops: what it made is dropped here. */
		struct spare *none = NULL;
		int fl;

		(void)!write(maker_req[1], &none, sizeof(none));
		pthread_join(maker, NULL);
		if ((fl = fcntl(maker_rep[0], F_GETFL)) >= 0)
			(void)fcntl(maker_rep[0], F_SETFL, fl | O_NONBLOCK);
		on_made(maker_rep[0], EV_READ, NULL);
		event_free(ev_made);
		ev_made = NULL;
		for (int i = 0; i < 2; i++) {
			close(maker_req[i]);
			close(maker_rep[i]);
			maker_req[i] = maker_rep[i] = -1;
		}
		maker_up = false;
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

/* Hand s (in the list, not yet made) to the maker; dropped if the maker cannot take it. */
static void spare_make(struct spare *s)
{
	ssize_t w;

	if (s->ev_defer) {
		event_free(s->ev_defer);
		s->ev_defer = NULL;
	}
	s->mounts_gen = mounts_generation();	/* before the clone: a mount made between is a stale spare */
	s->making = true;
	while ((w = write(maker_req[1], &s, sizeof(s))) < 0 && errno == EINTR)
		;
	if (w != (ssize_t)sizeof(s)) {
		s->making = false;
		spare_discard(s);
	}
}

static void on_defer(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	spare_make(arg);
}

/* SPARE_DEFER_MS, or FLEET_TEST_SPARE_DEFER_MS (0-600000) for a test of the deferral. */
static struct timeval spare_defer(void)
{
	const char *e = getenv("FLEET_TEST_SPARE_DEFER_MS");
	int ms = e && *e ? atoi(e) : -1;

	if (ms < 0 || ms > 600000)
		ms = SPARE_DEFER_MS;
	return (struct timeval){ ms / 1000, (ms % 1000) * 1000 };
}

void spare_want(struct fleetd *f, const char *agent, const struct user_launch_spec *spec)
{
	struct spare *s;
	struct timeval defer = spare_defer();
	size_t n = 0;

	if (spare_find(agent) || getenv("FLEET_TEST_NO_SPARES") || !maker_start(f))
		return;	/* FLEET_TEST_NO_SPARES: a benchmark's switch, for the figures without spares */
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
		.die_with_parent = true, .spare = true,
		/* found here, not on the maker: user_launch_init_path caches without a lock */
		.init_path = spec->init_path ? spec->init_path : user_launch_init_path(),
		.agentd_path = spec->agentd_path ? spec->agentd_path : user_launch_agentd_path(),
	};
	s->spec.home = s->home = xstrdup(spec->home);
	s->spec.netns_path = s->netns_path = spec->netns_path ? xstrdup(spec->netns_path) : NULL;
	s->spec.resolv_conf = s->resolv_conf = spec->resolv_conf ? xstrdup(spec->resolv_conf) : NULL;
	s->spec.users_dir = s->users_dir = spec->users_dir ? xstrdup(spec->users_dir) : NULL;
	s->spec.netns_dir = s->netns_dir = spec->netns_dir ? xstrdup(spec->netns_dir) : NULL;
	/* The cgroup files: the maker opens them (spare_join_fds); the key counted them already. */
	s->cg = us->cg;
	s->n_cg = spec->n_cgroup_fds;
	s->spec.cgroup_fds = s->cg_fds;
	/* The oldest go beyond SPARES_MAX. */
	for (struct spare *o = spares, *next; o; o = next) {
		next = o->next;
		if (++n >= SPARES_MAX)
			spare_discard(o);
	}
	s->next = spares;
	spares = s;
	if (!(s->ev_defer = evtimer_new(f->base, on_defer, s)) || evtimer_add(s->ev_defer, &defer) < 0)
		spare_make(s);
}

void spare_now(const char *agent)
{
	struct spare *s = spare_find(agent);

	if (s && s->ev_defer)
		spare_make(s);
}

int spare_take(const char *agent, const struct user_launch_spec *spec, struct user_launch_proc *proc)
{
	struct spare *s = spare_find(agent);
	_cleanup_free_ char *key = NULL;
	int r;

	if (!s || !s->launched)
		return -ENOENT;	/* none, not made yet, or the maker is at it: a fresh launch is as fast */
	spare_unlink(s);
	key = user_launch_key(spec);
	/* A spare that died is no poll away: the hand-over below finds its socket closed (-EPIPE). */
	if (!key || strcmp(key, s->key) != 0 || s->mounts_gen != mounts_generation()) {
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
