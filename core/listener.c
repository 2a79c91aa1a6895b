/*
 * listener: see listener.h. One concern: the listener process as fleetd
 * sees it (its user, root directory and socket; spawning, restarting and
 * stopping it; its log; the link's framing and messages). What a delivery
 * does is core/deliveries.c's.
 */
#include "core/listener.h"

#include <dirent.h>
#include <errno.h>
#include <event2/bufferevent.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/spawn.h"
#include "common/log.h"
#include "common/netaddr.h"
#include "common/termsafe.h"
#include "common/util.h"
#include "core/deliveries.h"
#include "core/hooks.h"
#include "core/metrics.h"
#include "hooks/proto.h"
#include "model/config.h"
#include "model/fleetd.h"
#include "store/db.h"

#ifndef FLEET_HOOKSD_PATH
#define FLEET_HOOKSD_PATH "/usr/local/libexec/fleet/fleet-hooksd"
#endif

#define BACKOFF_MIN_S 1
#define BACKOFF_MAX_S 60
#define STABLE_S 60			/* up this long: the next failure starts the backoff afresh */
#define HELLO_TIMEOUT_S 30		/* a child that never says hello is killed */
#define STOP_WAIT_MS 2000		/* after SIGTERM, before SIGKILL */
#define READ_CAP (HOOK_FRAME_MAX + HOOK_FRAME_HEAD + (1u << 20))	/* buffered from the link at most */
/* One read() of the link, at most: with evbuffer's chain header, a 64 KiB block (under malloc's mmap threshold). */
#define LINK_READ_CHUNK ((64u << 10) - 256)
#define WRITE_CAP (64u << 20)		/* queued to a child that does not read: it is hung */
#define LOG_LINE_MAX 512
#define LOG_BURST 100			/* lines relayed per LOG_WINDOW_S; the rest counted */
#define LOG_WINDOW_S 10

struct listener {
	struct fleetd *f;
	int listen_fd;
	char addr[80];			/* what listen_fd is bound to */
	char *root;			/* STATE/listener-root */
	char *pid_path;			/* STATE/listener.pid: an orphan a kill -9 left, for the next fleetd */
	enum listener_state state;
	long restarts;
	int backoff_s;
	time_t up_since;	/* monotonic s (+1, never 0): a wall clock step must not fake stability */
	int64_t accepted, refused_by_fleetd;
	int64_t refused_base;		/* refusals counted by children that are gone */
	int64_t refused_base_by[6];	/* the same by status, as hook_stats.refused */
	int64_t dropped_base;		/* connections they closed by a limit */
	int64_t sig_failed_base[HOOK_SOURCE__COUNT];	/* their signature failures, by source */
	struct hook_stats stats;	/* the current child's last */
	/* The source of each route in the table last sent: a delivery's label in the metrics. */
	struct route_source { char *name; const char *source; } *sources;
	size_t n_sources;

	/* The current child; pid 0 when none. */
	pid_t pid;
	int pidfd;
	struct event *ev_exit;
	struct event *ev_read;		/* the link, read by hand: a whole loop pass is one group */
	struct bufferevent *out;	/* the link, written */
	struct evbuffer *in;
	bool hello;
	int log_fd;
	struct event *ev_log;
	char log_line[LOG_LINE_MAX + 1];
	size_t log_len;
	bool log_cut;
	time_t log_window;
	int log_count, log_dropped;

	struct event *ev_restart;	/* backoff timer */
	struct event *ev_hello;		/* hello deadline */
	struct event *ev_grace;		/* the earliest rotation grace ends: send the routes again */
	struct event *ev_fail;		/* child_fail: child_gone from the loop, never inside a callback using it */
	const char *fail_why;
};

static const char *const state_names[] = {
	[LISTENER_OFF] = "off", [LISTENER_STARTING] = "starting", [LISTENER_UP] = "up", [LISTENER_DOWN] = "down",
};

const char *listener_state_to_string(enum listener_state s)
{
	return (unsigned)s < ARRAY_SIZE(state_names) ? state_names[s] : "unknown";
}

static void child_gone(struct listener *l, const char *why);

/* child_gone soon, from the loop: the caller may be in the middle of using the child's buffers. */
static void child_fail(struct listener *l, const char *why)
{
	if (!l->fail_why)
		l->fail_why = why;
	event_active(l->ev_fail, 0, 0);
}

/* ---- set-up: the user, the root directory, the socket ---- */

/* hooks_user exists (made if missing) and is nobody fleet gives to an agent or root; 0 or -errno (logged). */
static int ensure_user(struct fleetd *f, const char *user, uid_t *uid)
{
	long min = config_get_long(&f->cfg, CFG_USER_UID_MIN), max = config_get_long(&f->cfg, CFG_USER_UID_MAX);
	struct agent *a = NULL;
	struct passwd *pw;

	if (!getpwnam(user)) {
		const char *const argv[] = { "useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent",
					     "--shell", "/usr/sbin/nologin", user, NULL };
		_cleanup_free_ char *out = NULL;
		int r = spawn_run(argv, &out);

		/* Another fleetd may have made it meanwhile: what counts is that it exists now. */
		if (r != 0 && !getpwnam(user)) {
			log_error("webhooks: cannot create the listener's user '%s' (useradd: %d): %s", user, r,
				  out ? out : "");
			return -EIO;
		}
		if (r == 0)
			log_notice("webhooks: created the system user '%s' for the listener", user);
	}
	if (!(pw = getpwnam(user))) {
		log_error("webhooks: the listener's user '%s' does not exist", user);
		return -ENOENT;
	}
	if (pw->pw_uid == 0 || pw->pw_gid == 0) {
		log_error("webhooks: the listener's user '%s' is root (uid or gid 0); refusing to run it so", user);
		return -EPERM;
	}
	/* An agent's user would be able to trace the listener and read every route's secret. */
	if (((long)pw->pw_uid >= min && (long)pw->pw_uid <= max) ||
	    (strncmp(user, "fleet-", 6) == 0 && db_agent_get(f->db, user + 6, &a) == 0)) {
		agent_free(a);
		log_error("webhooks: the listener's user '%s' (uid %ld) is (or may become) a user agent's; "
			  "choose another hooks_user", user, (long)pw->pw_uid);
		return -EPERM;
	}
	*uid = pw->pw_uid;
	return 0;
}

/* STATE/listener-root: an empty directory, root's, 0555, not a symlink; 0 or -errno (logged). */
static int ensure_root(const char *path)
{
	_cleanup_close_ int fd = -1;
	struct stat st;
	bool empty = true;

	if (mkdir(path, 0555) < 0 && errno != EEXIST) {
		log_error("webhooks: cannot create %s: %s", path, strerror(errno));
		return -errno;
	}
	if ((fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0 || fstat(fd, &st) < 0) {
		log_error("webhooks: %s is not a directory fleetd can use (%s)", path, strerror(errno));
		return -errno;
	}
	if (st.st_uid != 0 && st.st_uid != geteuid()) {
		log_error("webhooks: %s is not root's; refusing it as the listener's root", path);
		return -EPERM;
	}
	if ((st.st_mode & 07777) != 0555 && fchmod(fd, 0555) < 0)
		return -errno;
	/* Empty: the listener, chrooted there, must find nothing to open. */
	{
		int dfd = dup(fd);
		DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
		struct dirent *e;

		if (!d) {
			if (dfd >= 0)
				close(dfd);
			return -errno;
		}
		while ((e = readdir(d)))
			if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
				empty = false;
		closedir(d);
	}
	if (!empty) {
		log_error("webhooks: %s is not empty; the listener's root must be (remove what is in it)", path);
		return -ENOTEMPTY;
	}
	return 0;
}

/*
 * The listener a kill -9 of the previous fleetd left behind still holds the
 * port until it notices its link is gone. If it is still there (stopped,
 * or slow), end it: it is ours (its pid file is in our state dir, and its
 * name and user match), it holds nothing durable, and a sender whose
 * request it dropped retries. A pidfd makes the check and the kill one
 * process, whatever reuses the pid.
 */
static bool end_orphan(const struct listener *l, uid_t uid)
{
	_cleanup_close_ int pfd = -1, fd = open(l->pid_path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	char buf[32] = "", comm[32] = "", path[64];
	long pid;
	ssize_t n;

	if (fd < 0 || (n = read(fd, buf, sizeof(buf) - 1)) <= 0)
		return false;
	buf[n] = '\0';
	buf[strcspn(buf, "\n")] = '\0';
	if (parse_long(buf, 2, 1L << 22, &pid) < 0 || (pfd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0)) < 0)
		return false;
	/* /proc/PID/status, not the owner of its files: those are root's once it changed its uid. */
	snprintf(path, sizeof(path), "/proc/%ld/status", pid);
	_cleanup_close_ int sfd = open(path, O_RDONLY | O_CLOEXEC);
	char status[1024];
	const char *name, *uids;
	if (sfd < 0 || (n = read(sfd, status, sizeof(status) - 1)) <= 0)
		return false;
	status[n] = '\0';
	name = strstr(status, "Name:\t");
	uids = strstr(status, "\nUid:\t");
	if (!name || !uids || sscanf(name, "Name:\t%31s", comm) != 1 || strcmp(comm, "fleet-hooksd") != 0 ||
	    strtol(uids + 6, NULL, 10) != (long)uid)
		return false;
	log_warning("webhooks: the listener of a previous fleetd (pid %ld) still holds the port; ending it", pid);
	if (spawn_signal(pfd, SIGKILL) < 0)
		return false;
	struct pollfd p = { .fd = pfd, .events = POLLIN };
	(void)poll(&p, 1, 5000);
	return true;
}

/* Bind and listen on hooks_listen: 0, or -errno (logged: fleetd does not start). */
static int bind_listen(struct listener *l, const char *spec, uid_t uid)
{
	struct addrinfo *ai = NULL;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	int one = 1, fd, r;

	if (netaddr_resolve(spec, &ai) < 0) {
		log_error("webhooks: hooks_listen '%s' is not an address and port", spec);
		return -EINVAL;
	}
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		goto fail;
	/* TIME_WAIT connections of the previous fleetd's listener must not keep a restart from binding. */
	(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (ai->ai_family == AF_INET6)
		(void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	r = bind(fd, ai->ai_addr, ai->ai_addrlen);
	/* The orphan may also be exiting by itself just now: end it if it is there, then give the port 2 s to free. */
	for (int i = 0; r < 0 && errno == EADDRINUSE && i < 20; i++) {
		if (i == 0)
			(void)end_orphan(l, uid);
		else
			(void)poll(NULL, 0, 100);
		r = bind(fd, ai->ai_addr, ai->ai_addrlen);
	}
	if (r < 0 || listen(fd, 1024) < 0 || getsockname(fd, (struct sockaddr *)&ss, &sl) < 0)
		goto fail;
	freeaddrinfo(ai);
	netaddr_format(&ss, l->addr, sizeof(l->addr));
	snprintf(l->f->hooks_bound, sizeof(l->f->hooks_bound), "%s", l->addr);	/* the URLs given to senders (hooks.c) */
	l->listen_fd = fd;
	return 0;
fail:
	r = -errno;
	log_error("webhooks: cannot listen on %s (hooks_listen): %s", spec, strerror(errno));
	if (fd >= 0)
		close(fd);
	freeaddrinfo(ai);
	return r;
}

/* fleet-hooksd next to our own executable (a build tree, or installed together), else where make install puts it. */
static char *find_binary(void)
{
	return find_own_program("fleet-hooksd", NULL, FLEET_HOOKSD_PATH);
}

/* ---- the child's log: its stderr, line by line into ours ---- */

static void log_flush_line(struct listener *l)
{
	_cleanup_free_ char *safe = NULL;
	time_t now = time(NULL);

	if (now - l->log_window >= LOG_WINDOW_S) {
		if (l->log_dropped)
			log_warning("fleet-hooksd: %d more line(s) not logged", l->log_dropped);
		l->log_window = now;
		l->log_count = 0;
		l->log_dropped = 0;
	}
	if (++l->log_count > LOG_BURST) {
		l->log_dropped++;
	} else {
		const char *text = l->log_line;
		size_t len = l->log_len;
		int prio = LOG_INFO;

		/* Its lines are common/log's: "<PRIORITY>fleet-hooksd: TEXT". Nothing it says is worse than an error. */
		if (len >= 3 && text[0] == '<' && text[1] >= '0' && text[1] <= '7' && text[2] == '>') {
			prio = text[1] - '0' < LOG_ERR ? LOG_ERR : text[1] - '0';
			text += 3;
			len -= 3;
		}
		if (len >= 14 && memcmp(text, "fleet-hooksd: ", 14) == 0) {
			text += 14;
			len -= 14;
		}
		safe = term_sanitize(text, len, NULL);
		log_msg(prio, "fleet-hooksd[%ld]: %s%s", (long)l->pid, safe, l->log_cut ? " [cut]" : "");
	}
	l->log_len = 0;
	l->log_cut = false;
}

static void log_stop(struct listener *l)
{
	if (l->log_len)
		log_flush_line(l);
	if (l->ev_log)
		event_free(l->ev_log);
	l->ev_log = NULL;
	if (l->log_fd >= 0)
		close(l->log_fd);
	l->log_fd = -1;
}

/* One read of the child's log pipe, relayed; false when there is nothing more now (or ever: then it is closed). */
static bool log_read(struct listener *l)
{
	char buf[4096];
	ssize_t n = read(l->log_fd, buf, sizeof(buf));

	if (n < 0 && errno == EINTR)
		return true;
	if (n < 0 && errno == EAGAIN)
		return false;
	if (n <= 0) {
		log_stop(l);
		return false;
	}
	for (ssize_t i = 0; i < n; i++) {
		if (buf[i] == '\n') {
			log_flush_line(l);
		} else if (l->log_len < LOG_LINE_MAX) {
			l->log_line[l->log_len++] = buf[i];
		} else {
			l->log_cut = true;	/* the rest of an over-long line is dropped */
		}
	}
	return true;
}

static void on_log(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)log_read(arg);
}

/* ---- the link ---- */

static void send_msg(struct listener *l, json_t *msg)
{
	unsigned char *frame = NULL;
	size_t len = 0;
	int r;

	if (!msg)
		abort();	/* out of memory */
	r = hook_frame_encode(msg, &frame, &len);
	json_decref(msg);
	if (r < 0) {
		log_error("webhooks: cannot encode a message for the listener: %s", strerror(-r));
		return;
	}
	if (l->out && bufferevent_write(l->out, frame, len) < 0)
		log_error("webhooks: cannot queue a message for the listener");
	explicit_bzero(frame, len);	/* a routes message holds every secret */
	free(frame);
	if (l->out && evbuffer_get_length(bufferevent_get_output(l->out)) > WRITE_CAP)
		child_fail(l, "it stopped reading its link");
}

static void on_grace(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	listener_routes_changed(((struct listener *)arg)->f);
}

static void routes_sources_free(struct listener *l)
{
	for (size_t i = 0; i < l->n_sources; i++)
		free(l->sources[i].name);
	free(l->sources);
	l->sources = NULL;
	l->n_sources = 0;
}

/*
 * Count each answered delivery by route, the route's source and the answer's
 * status. A route the table does not have (the listener is not trusted to
 * name only real ones) counts as "unknown": labels stay within the table.
 */
static void count_answers(struct listener *l, const struct hook_delivery *d, const struct hook_answer *a, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		const char *route = "unknown", *source = "unknown";
		char status[8];

		for (size_t k = 0; k < l->n_sources; k++)
			if (strcmp(l->sources[k].name, d[i].route) == 0) {
				route = l->sources[k].name;
				source = l->sources[k].source;
			}
		snprintf(status, sizeof(status), "%d", a[i].status);
		metrics_inc(l->f, M_DELIVERIES, (const char *[]){ route, source, status });
	}
}

/* The route table and limits down the link; the grace timer set to the earliest rotation that ends. */
static void send_routes(struct listener *l)
{
	struct fleetd *f = l->f;
	struct hooks_route_table *t = NULL;
	struct hook_limits lim = {
		.max_connections = config_get_long(&f->cfg, CFG_HOOKS_MAX_CONNECTIONS),
		.max_per_source = config_get_long(&f->cfg, CFG_HOOKS_MAX_PER_SOURCE),
		.request_timeout_s = config_get_long(&f->cfg, CFG_HOOKS_REQUEST_TIMEOUT),
		.header_max = config_get_long(&f->cfg, CFG_HOOKS_HEADER_MAX),
	};
	time_t now = time(NULL);
	int64_t next = 0;
	int r;

	if ((r = hooks_route_table(f, now, &t)) < 0) {
		/* The listener keeps the table it has; the next change or restart sends it again. */
		log_error("webhooks: cannot read the routes for the listener: %s", strerror(-r));
		return;
	}
	routes_sources_free(l);
	l->sources = xcalloc(t->n ? t->n : 1, sizeof(*l->sources));
	for (size_t i = 0; i < t->n; i++)
		l->sources[l->n_sources++] = (struct route_source){ xstrdup(t->routes[i].name),
								    hook_source_to_string(t->routes[i].source) };
	for (size_t i = 0; i < t->n; i++)
		if (t->routes[i].n_secrets > 1) {
			int64_t until = 0;

			for (size_t k = 0; t->rows[k]; k++)
				if (strcmp(t->rows[k]->name, t->routes[i].name) == 0)
					until = t->rows[k]->prev_until;
			if (until > (int64_t)now && (!next || until < next))
				next = until;
		}
	send_msg(l, hook_msg_routes(t->routes, t->n, &lim));
	log_info("webhooks: sent the listener its table of %zu route(s)", t->n);
	hooks_route_table_free(t);
	evtimer_del(l->ev_grace);
	if (next) {
		struct timeval tv = { .tv_sec = (time_t)(next - (int64_t)now) + 1 };
		evtimer_add(l->ev_grace, &tv);
	}
}

/*
 * The answers down the link, written to the socket now rather than on the
 * loop's next pass: deliveries_commit() kicked the run queue (an active
 * event, run once this callback returns, before the loop polls again), and
 * a run's launch (a user agent's is done in this loop) must not sit
 * between a commit and the senders' answers. The bufferevent's output
 * cannot be written by hand (libevent freezes its start: only the
 * bufferevent drains it), so the frames are written here when nothing is
 * queued before them, and what the socket does not take is queued after.
 */
static void send_answers(struct listener *l, struct hook_answer *a, size_t n)
{
	struct evbuffer *frames = evbuffer_new();

	if (!frames)
		abort();	/* out of memory */
	for (size_t i = 0; i < n; i++) {
		unsigned char *frame = NULL;
		size_t len = 0;
		int r;

		if (a[i].status >= 200 && a[i].status < 300)
			l->accepted++;
		else
			l->refused_by_fleetd++;
		r = hook_answer_encode(&a[i], &frame, &len);
		hook_answer_clear(&a[i]);
		if (r < 0) {
			log_error("webhooks: cannot encode an answer for the listener: %s", strerror(-r));
			continue;
		}
		if (evbuffer_add(frames, frame, len) < 0)
			abort();
		free(frame);
	}
	if (l->out && evbuffer_get_length(bufferevent_get_output(l->out)) == 0) {
		while (evbuffer_get_length(frames) > 0) {
			int w = evbuffer_write(frames, bufferevent_getfd(l->out));

			if (w < 0 && errno == EINTR)
				continue;
			/* EAGAIN: the rest when the socket has room; an error: the bufferevent's write reports it. */
			if (w <= 0)
				break;
		}
	}
	if (l->out && evbuffer_get_length(frames) > 0 && bufferevent_write_buffer(l->out, frames) < 0)
		log_error("webhooks: cannot queue answers for the listener");
	evbuffer_free(frames);
	if (l->out && evbuffer_get_length(bufferevent_get_output(l->out)) > WRITE_CAP)
		child_fail(l, "it stopped reading its link");
}

/* One JSON message; false when it is malformed or out of place (the child is killed). */
static bool handle(struct listener *l, json_t *msg, const char **why)
{
	const char *t = hook_msg_type(msg);
	long pid;

	if (t && strcmp(t, "hello") == 0) {
		if (l->hello || hook_msg_hello_parse(msg, &pid, why) < 0) {
			if (l->hello)
				*why = "a second hello";
			return false;
		}
		l->hello = true;
		l->state = LISTENER_UP;
		l->up_since = (time_t)(now_usec() / 1000000) + 1;
		evtimer_del(l->ev_hello);
		log_notice("webhooks: listener up on %s (pid %ld)", l->addr, (long)l->pid);
		send_routes(l);
		return true;
	}
	if (!l->hello) {
		*why = "a message before its hello";
		return false;
	}
	if (t && strcmp(t, "stats") == 0)
		return hook_msg_stats_parse(msg, &l->stats, why) == 0;
	*why = "a message of an unknown type";
	return false;
}

/* One whole frame: a delivery joins the group; false when it is malformed or out of place. */
static bool handle_frame(struct listener *l, const unsigned char *frame, size_t len, struct hook_delivery **group,
			 size_t *n, const char **why)
{
	int kind = hook_frame_kind(frame, len, why);
	json_t *msg = NULL;
	bool ok;

	if (kind == HOOK_KIND_DELIVERY) {
		struct hook_delivery d;

		if (!l->hello) {
			*why = "a message before its hello";
			return false;
		}
		if (hook_delivery_decode(frame, len, &d, why) < 0)
			return false;
		*group = xrealloc(*group, (*n + 1) * sizeof(**group));
		(*group)[(*n)++] = d;
		return true;
	}
	if (kind != HOOK_KIND_JSON) {
		if (kind >= 0)
			*why = "an answer from the listener";
		return false;
	}
	if (hook_frame_decode(frame, len, &msg, why) < 0)
		return false;
	ok = handle(l, msg, why);
	json_decref(msg);
	return ok;
}

static void on_link(evutil_socket_t fd, short what, void *arg)
{
	struct listener *l = arg;
	struct hook_delivery *group = NULL;
	struct hook_answer *answers;
	const char *why = NULL;
	size_t n = 0;
	bool eof = false, bad = false;

	(void)what;
	/*
	 * Everything there is now (up to a cap): the deliveries in it are one
	 * group, one commit. Read by hand in large pieces: evbuffer_read takes
	 * at most 4 KiB a call, a syscall per two or three deliveries.
	 */
	while (evbuffer_get_length(l->in) < READ_CAP) {
		size_t room = READ_CAP - evbuffer_get_length(l->in);
		struct evbuffer_iovec v;
		ssize_t got;

		if (room > LINK_READ_CHUNK)
			room = LINK_READ_CHUNK;
		if (evbuffer_reserve_space(l->in, (ev_ssize_t)room, &v, 1) != 1)
			abort();	/* out of memory */
		got = read(fd, v.iov_base, room);
		v.iov_len = got > 0 ? (size_t)got : 0;
		if (evbuffer_commit_space(l->in, &v, 1) < 0)
			abort();
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		if (got <= 0) {
			eof = true;
			why = got < 0 ? strerror(errno) : "it closed its link";
			break;
		}
	}
	while (!bad) {
		size_t avail = evbuffer_get_length(l->in);
		unsigned char *head = evbuffer_pullup(l->in, avail < HOOK_FRAME_HEAD ? (ev_ssize_t)-1 : (ev_ssize_t)HOOK_FRAME_HEAD);
		long need = hook_frame_need(head, avail);

		if (need < 0) {
			why = "a frame of a size out of bounds";
			bad = true;
			break;
		}
		if (need == 0 || (size_t)need > avail)
			break;
		unsigned char *frame = evbuffer_pullup(l->in, need);
		if (!frame || !handle_frame(l, frame, (size_t)need, &group, &n, &why))
			bad = true;
		evbuffer_drain(l->in, (size_t)need);
	}
	/* What came before a bad frame was verified by the child when it was still sane: answer it. */
	answers = xcalloc(n ? n : 1, sizeof(*answers));
	(void)deliveries_commit(l->f, group, n, answers);
	count_answers(l, group, answers, n);
	send_answers(l, answers, n);
	free(answers);
	for (size_t i = 0; i < n; i++)
		hook_delivery_clear(&group[i]);
	free(group);
	if (bad) {
		_cleanup_free_ char *msg = xasprintf("it sent a malformed message (%s)", why ? why : "?");
		child_gone(l, msg);
	} else if (eof) {
		child_gone(l, why);
	}
}

static void on_out_event(struct bufferevent *bev, short what, void *arg)
{
	(void)bev;
	if (what & (BEV_EVENT_ERROR | BEV_EVENT_EOF))
		child_fail(arg, "its link broke");
}

/* ---- the child ---- */

static void write_pid_file(struct listener *l)
{
	_cleanup_free_ char *tmp = xasprintf("%s.new", l->pid_path);
	_cleanup_close_ int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	char buf[32];
	int n = snprintf(buf, sizeof(buf), "%ld\n", (long)l->pid);

	if (fd < 0 || write_all(fd, buf, (size_t)n) < 0 || rename(tmp, l->pid_path) < 0)
		log_warning("webhooks: cannot write %s: %s", l->pid_path, strerror(errno));
}

static void schedule_restart(struct listener *l)
{
	struct timeval tv = { .tv_sec = l->backoff_s };

	log_notice("webhooks: restarting the listener in %d s", l->backoff_s);
	evtimer_add(l->ev_restart, &tv);
	l->backoff_s = l->backoff_s * 2 > BACKOFF_MAX_S ? BACKOFF_MAX_S : l->backoff_s * 2;
}

/* Free everything of the current child; it must be reaped already (or never started). */
static void child_release(struct listener *l)
{
	if (l->ev_read)
		event_free(l->ev_read);
	l->ev_read = NULL;
	if (l->out)
		bufferevent_free(l->out);	/* closes the link */
	l->out = NULL;
	if (l->in)
		evbuffer_free(l->in);
	l->in = NULL;
	/* Its last words (why it exited) are in the pipe still: relay them before closing it. */
	while (l->log_fd >= 0 && log_read(l))
		;
	log_stop(l);
	if (l->ev_exit)
		event_free(l->ev_exit);
	l->ev_exit = NULL;
	if (l->pidfd >= 0)
		close(l->pidfd);
	l->pidfd = -1;
	evtimer_del(l->ev_hello);
	l->refused_base += l->stats.refused[0] + l->stats.refused[1] + l->stats.refused[2] + l->stats.refused[3] +
			   l->stats.refused[4] + l->stats.refused[5];
	for (size_t i = 0; i < ARRAY_SIZE(l->refused_base_by); i++)
		l->refused_base_by[i] += l->stats.refused[i];
	l->dropped_base += l->stats.dropped;
	for (int i = 0; i < HOOK_SOURCE__COUNT; i++)
		l->sig_failed_base[i] += l->stats.sig_failed[i];
	memset(&l->stats, 0, sizeof(l->stats));
	l->pid = 0;
	l->hello = false;
	l->fail_why = NULL;
}

/* Wait up to ms for the child to exit; its wait status, or -1 if it has not. */
static int child_wait(struct listener *l, int ms)
{
	struct pollfd p = { .fd = l->pidfd, .events = POLLIN };
	int status;

	if (ms > 0)
		(void)poll(&p, 1, ms);
	return spawn_wait(l->pidfd, true, &status) == 0 ? status : -1;
}

static void describe_status(int status, char *buf, size_t len)
{
	if (status < 0)
		snprintf(buf, len, "still running");
	else if (WIFEXITED(status))
		snprintf(buf, len, "exit status %d", WEXITSTATUS(status));
	else
		snprintf(buf, len, "killed by signal %d", WTERMSIG(status));
}

/* The child died or misbehaved: make sure it is gone, log why, restart after the backoff. */
static void child_gone(struct listener *l, const char *why)
{
	char how[64];
	int status;

	if (!l->pid)
		return;
	if ((status = child_wait(l, 0)) < 0) {
		(void)spawn_signal(l->pidfd, SIGKILL);
		status = child_wait(l, 5000);
	}
	describe_status(status, how, sizeof(how));
	log_error("webhooks: listener (pid %ld) stopped: %s (%s)", (long)l->pid, why, how);
	if (l->up_since && (time_t)(now_usec() / 1000000) + 1 - l->up_since >= STABLE_S)
		l->backoff_s = BACKOFF_MIN_S;
	l->up_since = 0;
	child_release(l);
	l->state = LISTENER_DOWN;
	schedule_restart(l);
}

static void on_exit_ev(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	child_gone(arg, "it exited");
}

static void on_fail(evutil_socket_t fd, short what, void *arg)
{
	struct listener *l = arg;
	const char *why = l->fail_why;

	(void)fd;
	(void)what;
	l->fail_why = NULL;
	if (why)
		child_gone(l, why);
}

static void on_hello_timeout(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	child_gone(arg, "it did not say hello in time");
}

/* Start a child on the bound socket: 0, or -errno (logged). */
static int child_start(struct listener *l)
{
	const char *user = config_get(&l->f->cfg, CFG_HOOKS_USER);
	static const char *const envp[] = { "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", NULL };
	_cleanup_free_ char *bin = find_binary();
	int sp[2] = { -1, -1 }, lp[2] = { -1, -1 }, null = -1, r;
	struct timeval hello = { .tv_sec = HELLO_TIMEOUT_S };

	if (!bin) {
		log_error("webhooks: fleet-hooksd not found next to fleetd nor at " FLEET_HOOKSD_PATH);
		return -ENOENT;
	}
	const char *const argv[] = { bin, "--user", user, "--root", l->root, NULL };
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0 || pipe2(lp, O_CLOEXEC) < 0 ||
	    (null = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0) {
		r = -errno;
		goto fail;
	}
	const int fds[] = { null, lp[1], lp[1], sp[1], l->listen_fd };
	if ((r = spawn_start(argv, envp, fds, ARRAY_SIZE(fds), &l->pid, &l->pidfd)) < 0)
		goto fail;
	close(sp[1]);
	close(lp[1]);
	close(null);
	(void)fcntl(sp[0], F_SETFL, O_NONBLOCK);
	(void)fcntl(lp[0], F_SETFL, O_NONBLOCK);
	l->log_fd = lp[0];
	l->in = evbuffer_new();
	l->out = bufferevent_socket_new(l->f->base, sp[0], BEV_OPT_CLOSE_ON_FREE);
	l->ev_read = event_new(l->f->base, sp[0], EV_READ | EV_PERSIST, on_link, l);
	l->ev_log = event_new(l->f->base, lp[0], EV_READ | EV_PERSIST, on_log, l);
	l->ev_exit = event_new(l->f->base, l->pidfd, EV_READ, on_exit_ev, l);
	if (!l->in || !l->out || !l->ev_read || !l->ev_log || !l->ev_exit || event_add(l->ev_read, NULL) < 0 ||
	    event_add(l->ev_log, NULL) < 0 || event_add(l->ev_exit, NULL) < 0) {
		if (!l->out)
			close(sp[0]);
		(void)spawn_signal(l->pidfd, SIGKILL);
		(void)child_wait(l, 5000);
		child_release(l);
		return -ENOMEM;
	}
	bufferevent_setcb(l->out, NULL, NULL, on_out_event, l);
	bufferevent_enable(l->out, EV_WRITE);
	evtimer_add(l->ev_hello, &hello);
	l->state = LISTENER_STARTING;
	write_pid_file(l);
	log_info("webhooks: started the listener (pid %ld) as '%s' on %s", (long)l->pid, user, l->addr);
	return 0;
fail:
	log_error("webhooks: cannot start the listener: %s", strerror(-r));
	for (int i = 0; i < 2; i++) {
		if (sp[i] >= 0)
			close(sp[i]);
		if (lp[i] >= 0)
			close(lp[i]);
	}
	if (null >= 0)
		close(null);
	return r;
}

static void on_restart(evutil_socket_t fd, short what, void *arg)
{
	struct listener *l = arg;

	(void)fd;
	(void)what;
	l->restarts++;
	if (child_start(l) < 0) {
		l->state = LISTENER_DOWN;
		schedule_restart(l);
	}
}

/* ---- the interface ---- */

int listener_start(struct fleetd *f)
{
	const char *spec = config_get(&f->cfg, CFG_HOOKS_LISTEN);
	const char *state = config_get(&f->cfg, CFG_STATE_DIR);
	struct listener *l;
	uid_t uid;
	int r;

	if (strcmp(spec, "none") == 0) {
		log_info("webhooks: no listener (hooks_listen none)");
		return 0;
	}
	l = xcalloc(1, sizeof(*l));
	*l = (struct listener){ .f = f, .listen_fd = -1, .pidfd = -1, .log_fd = -1, .backoff_s = BACKOFF_MIN_S,
				.root = xasprintf("%s/listener-root", state),
				.pid_path = xasprintf("%s/listener.pid", state) };
	f->listener = l;
	l->ev_restart = evtimer_new(f->base, on_restart, l);
	l->ev_hello = evtimer_new(f->base, on_hello_timeout, l);
	l->ev_grace = evtimer_new(f->base, on_grace, l);
	l->ev_fail = event_new(f->base, -1, 0, on_fail, l);
	if (!l->ev_restart || !l->ev_hello || !l->ev_grace || !l->ev_fail) {
		r = -ENOMEM;
		goto fail;
	}
	if ((r = ensure_user(f, config_get(&f->cfg, CFG_HOOKS_USER), &uid)) < 0 || (r = ensure_root(l->root)) < 0 ||
	    (r = bind_listen(l, spec, uid)) < 0 || (r = child_start(l)) < 0)
		goto fail;
	hooks_on_change(f, listener_routes_changed);
	return 0;
fail:
	listener_shutdown(f);
	return r;
}

void listener_routes_changed(struct fleetd *f)
{
	struct listener *l = f->listener;

	if (l && l->pid && l->hello)
		send_routes(l);
}

void listener_status(struct fleetd *f, struct listener_status *st)
{
	struct listener *l = f->listener;
	const struct hook_stats *s;

	memset(st, 0, sizeof(*st));
	if (!l)
		return;
	s = &l->stats;
	st->state = l->state;
	st->listen = l->addr;
	st->pid = l->pid;
	st->restarts = l->restarts;
	st->accepted = l->accepted;
	/* fleetd's own refusals (429, 503) reach the child's counters too ("other"): count those once, there. */
	st->refused = l->refused_base + s->refused[0] + s->refused[1] + s->refused[2] + s->refused[3] + s->refused[4] +
		      s->refused[5];
	for (size_t i = 0; i < ARRAY_SIZE(st->refused_by); i++)
		st->refused_by[i] = l->refused_base_by[i] + s->refused[i];
	st->dropped = l->dropped_base + s->dropped;
	for (int i = 0; i < HOOK_SOURCE__COUNT; i++)
		st->sig_failed[i] = l->sig_failed_base[i] + s->sig_failed[i];
	st->connections = s->connections;
}

void listener_shutdown(struct fleetd *f)
{
	struct listener *l = f->listener;

	if (!l)
		return;
	hooks_on_change(f, NULL);
	if (l->pid) {
		int status;

		(void)spawn_signal(l->pidfd, SIGTERM);
		if ((status = child_wait(l, STOP_WAIT_MS)) < 0) {
			log_warning("webhooks: listener (pid %ld) still runs %d ms after SIGTERM; killing it",
				    (long)l->pid, STOP_WAIT_MS);
			(void)spawn_signal(l->pidfd, SIGKILL);
			(void)child_wait(l, 5000);
		}
		child_release(l);
		(void)unlink(l->pid_path);
	}
	if (l->ev_restart)
		event_free(l->ev_restart);
	if (l->ev_hello)
		event_free(l->ev_hello);
	if (l->ev_grace)
		event_free(l->ev_grace);
	if (l->ev_fail)
		event_free(l->ev_fail);
	if (l->listen_fd >= 0)
		close(l->listen_fd);
	routes_sources_free(l);
	free(l->root);
	free(l->pid_path);
	free(l);
	f->listener = NULL;
}
