/*
 * ssh: see ssh.h. The only file that includes <libssh2.h>; its one concern
 * is the session machine (handshake, pinning, authentication, keepalive,
 * exec channels with their timeouts, kills and flow control), which is why
 * it is longer than most. The keys are ssh_keys.c's, the command lines
 * ssh_quote.c's.
 *
 * How a session is driven: every libssh2 call is non-blocking and every
 * event of a session (socket readable/writable, a kick, a timer) ends in
 * session_run(), which advances the handshake, the authentication or each
 * channel's small state machine until nothing moves, then waits: for input
 * (the only direction libssh2 can block on here, see below) and for room to
 * flush what it queued.
 *
 * libssh2 1.10 facts this file is built on (read in its source, checked by
 * tests/unit/test_ssh.c):
 * - When libssh2's own send would block, it keeps the half-sent packet and
 *   answers LIBSSH2_ERROR_BAD_USE to any call that sends something else
 *   (a window adjust inside another channel's read, say) until the same
 *   call is repeated; some packets (EOF, keepalive) even live on the stack.
 *   Many channels on one session cannot live with that, so session_send()
 *   replaces libssh2's send and never blocks: it queues instead.
 * - libssh2_channel_open_ex() keeps its progress in the session: one
 *   channel opens at a time (s->opening).
 * - ed25519 private keys load only from the OpenSSH format
 *   ("BEGIN OPENSSH PRIVATE KEY", unencrypted here), not from PKCS#8 PEM
 *   (so ssh_keys.c writes that format).
 * - There is no libssh2_channel_signal_ex() before 1.11, and dropbear keeps
 *   a session channel open until its process exits, so closing a channel
 *   kills nothing: a timeout or cancel runs `kill -9 -PID` on a second
 *   channel, where PID is the session leader the command line makes.
 */
#include "vm/ssh.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>

#include <event2/event.h>
#include <libssh2.h>

#include "common/log.h"
#include "common/util.h"

#define READ_CHUNK (32 * 1024)
#define WRITE_CHUNK (32 * 1024)
#define KILL_GRACE_S 5		/* after a kill, how long the channel may take to close */
/*
 * The liveness probe: a channel open of a type no server knows. RFC 4254
 * 5.1 makes the server answer it (dropbear and OpenSSH refuse it with
 * "unknown channel type"), nothing is allocated in the guest, and unlike
 * libssh2 1.10's keepalive@libssh2.org, whose reply only a channel call
 * would read, libssh2 reads the answer itself (see session_tick).
 */
#define PROBE_CHANNEL_TYPE "probe@fleet"
#define GUEST_LOOPBACK "127.0.0.1"	/* where the guest's health service listens (ssh_health) */

/* --- signals ---------------------------------------------------------------- */

static const struct {
	const char *name;
	int sig;
} signals[] = {
	{ "HUP", SIGHUP }, { "INT", SIGINT }, { "QUIT", SIGQUIT }, { "ILL", SIGILL },
	{ "TRAP", SIGTRAP }, { "ABRT", SIGABRT }, { "BUS", SIGBUS }, { "FPE", SIGFPE },
	{ "KILL", SIGKILL }, { "USR1", SIGUSR1 }, { "SEGV", SIGSEGV }, { "USR2", SIGUSR2 },
	{ "PIPE", SIGPIPE }, { "ALRM", SIGALRM }, { "TERM", SIGTERM }, { "CHLD", SIGCHLD },
	{ "CONT", SIGCONT }, { "STOP", SIGSTOP }, { "TSTP", SIGTSTP }, { "TTIN", SIGTTIN },
	{ "TTOU", SIGTTOU }, { "URG", SIGURG }, { "XCPU", SIGXCPU }, { "XFSZ", SIGXFSZ },
	{ "VTALRM", SIGVTALRM }, { "PROF", SIGPROF }, { "WINCH", SIGWINCH }, { "IO", SIGIO },
	{ "PWR", SIGPWR }, { "SYS", SIGSYS },
};

static int signal_from_name(const char *name)
{
	if (strncmp(name, "SIG", 3) == 0)
		name += 3;
	for (size_t i = 0; i < ARRAY_SIZE(signals); i++)
		if (strcmp(signals[i].name, name) == 0)
			return signals[i].sig;
	return 0;
}

/* --- sessions: types ------------------------------------------------------------ */

enum session_state { SESSION_HANDSHAKE, SESSION_AUTH, SESSION_READY, SESSION_FAILED };

enum exec_state {
	EXEC_QUEUED,		/* waiting for the session, or for its turn to open a channel */
	EXEC_OPENING,		/* libssh2_channel_open_ex() */
	EXEC_STARTING,		/* libssh2_channel_exec() */
	EXEC_RUNNING,		/* stdin out, stdout/stderr in */
	EXEC_CLOSING,		/* libssh2_channel_close(): sends ours */
	EXEC_CLOSE_WAIT,	/* libssh2_channel_wait_closed(): the server's close, after its exit status */
	EXEC_FREEING,		/* libssh2_channel_free() */
	EXEC_FINISHED,		/* no channel left; freed after this run */
};

struct ssh_exec {
	struct ssh_session *s;
	struct ssh_exec *next;
	enum exec_state state;
	LIBSSH2_CHANNEL *ch;
	char *cmdline;
	char *in;
	size_t in_len, in_off;
	bool eof_sent;

	/* the pid line the command line writes first on stderr */
	char hdr[24];
	size_t hdr_len;
	bool hdr_done;
	long pid;

	bool internal;		/* fleet's own kill command: no callbacks, no pid line */
	int health_port;	/* > 0: a health request to the guest's service on this port (ssh_health) */
	char answer[16];	/* its answer's first bytes, which decide the exit code */
	size_t answer_len;
	bool probe;		/* the liveness probe: an internal channel open the guest must refuse */
	bool kill_wanted, kill_sent, grace_over;
	bool timed_out, cancelled;
	bool paused;		/* ssh_exec_pause(): stdout and stderr are not read */
	bool reported;		/* done() was called; the channel may still be closing */
	struct event *ev_timer;	/* the timeout, then the grace after a kill */
	struct exec_callbacks cb;
	struct exec_result res;
	char *why;
};

struct ssh_session {
	struct event_base *base;
	int fd;
	LIBSSH2_SESSION *ssh;
	enum session_state state;
	char *user, *key_path, *fingerprint;
	char *agentd, *exec_user;	/* see struct ssh_session_config; NULL: no agentd */
	int connect_timeout_s, keepalive_s;
	struct ssh_session_callbacks cb;

	/* what libssh2 sent and the socket did not take yet (see session_send) */
	char *out;
	size_t out_off, out_len, out_cap;
	int send_errno;
	unsigned long long received;	/* bytes libssh2 took from the socket (see session_recv) */

	struct event *ev_read, *ev_write, *ev_kick, *ev_timer;
	bool readable;		/* this run was woken by the socket being readable */
	bool idle_unread;	/* no channel and unread bytes: stop watching until an exec starts */

	/* liveness (see session_tick): the byte count at the last tick, silent ticks since */
	unsigned long long rx_mark;
	int silent_ticks;
	bool probe_pending;	/* a probe is queued or waiting for the guest's refusal */
	bool no_health_service;	/* the guest refused a health request's connection (ssh_health) */

	struct ssh_exec *execs, **execs_tail;
	struct ssh_exec *opening;	/* the one exec inside libssh2_channel_open_ex() */

	int busy;		/* > 0 while inside one of our event callbacks */
	bool closing;		/* ssh_session_free() was called */
};

static void session_destroy(struct ssh_session *s);
static void session_fail(struct ssh_session *s, int error, char *why);

/* libssh2's own words, for the debug log only. */
static const char *ssh_last_error(struct ssh_session *s)
{
	char *msg = NULL;

	libssh2_session_last_error(s->ssh, &msg, NULL, 0);
	return msg && *msg ? msg : "no message";
}

static int errno_from_libssh2(int rc)
{
	switch (rc) {
	case LIBSSH2_ERROR_SOCKET_DISCONNECT:
	case LIBSSH2_ERROR_SOCKET_RECV:
	case LIBSSH2_ERROR_SOCKET_SEND:
		return -ECONNRESET;
	case LIBSSH2_ERROR_TIMEOUT:
	case LIBSSH2_ERROR_SOCKET_TIMEOUT:
		return -ETIMEDOUT;
	case LIBSSH2_ERROR_ALLOC:
		return -ENOMEM;
	case LIBSSH2_ERROR_AUTHENTICATION_FAILED:
	case LIBSSH2_ERROR_PUBLICKEY_UNVERIFIED:
		return -EACCES;
	case LIBSSH2_ERROR_FILE:
	case LIBSSH2_ERROR_KEYFILE_AUTH_FAILED:
		return -ENOKEY;
	case LIBSSH2_ERROR_CHANNEL_FAILURE:
	case LIBSSH2_ERROR_CHANNEL_REQUEST_DENIED:
		return -EPERM;
	default:
		return -EPROTO;
	}
}

/* Errors that end one channel; any other error means the session is gone. */
static bool channel_local_error(int rc)
{
	switch (rc) {
	case LIBSSH2_ERROR_CHANNEL_FAILURE:
	case LIBSSH2_ERROR_CHANNEL_REQUEST_DENIED:
	case LIBSSH2_ERROR_CHANNEL_UNKNOWN:
	case LIBSSH2_ERROR_CHANNEL_WINDOW_EXCEEDED:
	case LIBSSH2_ERROR_CHANNEL_PACKET_EXCEEDED:
	case LIBSSH2_ERROR_CHANNEL_CLOSED:
	case LIBSSH2_ERROR_CHANNEL_EOF_SENT:
		return true;
	default:
		return false;
	}
}

static void kick(struct ssh_session *s)
{
	event_active(s->ev_kick, EV_TIMEOUT, 1);
}

/* --- the socket ---------------------------------------------------------------- */

/* Send what is queued; -errno once the socket failed. */
static int session_flush(struct ssh_session *s)
{
	while (s->out_len > s->out_off) {
		ssize_t n = send(s->fd, s->out + s->out_off, s->out_len - s->out_off, MSG_NOSIGNAL);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return 0;
			s->send_errno = errno;
			return -errno;
		}
		s->out_off += (size_t)n;
	}
	s->out_off = s->out_len = 0;
	return 0;
}

/*
 * libssh2's send: never EAGAIN. What the socket does not take now is queued
 * and flushed when it is writable. So libssh2 never holds a half-sent
 * packet, which in 1.10 would forbid every other call that sends (window
 * adjusts included) until that very call is repeated; and the session can
 * always keep reading while its writes wait, which a peer that stops
 * reading when its own writes back up (dropbear does) needs. The queue is
 * bounded by the channel windows: libssh2 sends stdin only as far as the
 * guest's window allows.
 */
static LIBSSH2_SEND_FUNC(session_send)
{
	struct ssh_session *s = *abstract;
	size_t done = 0;

	if (s->send_errno)
		return -s->send_errno;
	if (s->out_len == s->out_off) {
		ssize_t n = send(socket, buffer, length, flags | MSG_NOSIGNAL);

		if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
			s->send_errno = errno;
			return -errno;
		}
		done = n > 0 ? (size_t)n : 0;
	}
	if (done < length) {
		size_t rest = length - done;

		if (s->out_off > 0 && s->out_off == s->out_len)
			s->out_off = s->out_len = 0;
		if (s->out_len + rest > s->out_cap) {
			if (s->out_off > 0) {
				memmove(s->out, s->out + s->out_off, s->out_len - s->out_off);
				s->out_len -= s->out_off;
				s->out_off = 0;
			}
			if (s->out_len + rest > s->out_cap) {
				s->out_cap = (s->out_len + rest) * 2;
				s->out = xrealloc(s->out, s->out_cap);
			}
		}
		memcpy(s->out + s->out_len, (const char *)buffer + done, rest);
		s->out_len += rest;
	}
	return (ssize_t)length;
}

/*
 * libssh2's recv, counting what it takes. Any libssh2 call may drain the
 * socket into libssh2's own packet list, also for other channels and for the
 * other stream of the same channel: output read by a stderr read lands in the
 * stdout queue, one exec's read takes another exec's bytes, EOF and exit
 * status arrive during a write. Those bytes never wake the socket again, so
 * session_run steps every channel once more after any pass that received
 * something. EINTR is retried here rather than failing the session.
 */
static LIBSSH2_RECV_FUNC(session_recv)
{
	struct ssh_session *s = *abstract;
	ssize_t n;

	do
		n = recv(socket, buffer, length, flags);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	s->received += (unsigned long long)n;
	return n;
}

/* --- execs ------------------------------------------------------------------------ */

static void exec_set_error(struct ssh_exec *e, int error, char *why)
{
	if (e->res.error == 0) {
		e->res.error = error;
		free(e->why);
		e->why = why;
	} else {
		free(why);
	}
}

/* Call done() once; the exec itself lives on until its channel is gone. */
static void exec_report(struct ssh_exec *e)
{
	if (e->reported)
		return;
	e->reported = true;
	if (e->probe)
		e->s->probe_pending = false;
	if (e->ev_timer)
		event_del(e->ev_timer);
	if (e->cancelled && e->res.error == 0)
		exec_set_error(e, -ECANCELED, xstrdup("cancelled"));
	e->res.timed_out = e->timed_out;
	e->res.why = e->why;
	if (!e->internal && e->cb.done)
		e->cb.done(e->cb.userdata, &e->res);
}

static void exec_free(struct ssh_exec *e)
{
	if (!e)
		return;
	if (e->ev_timer)
		event_free(e->ev_timer);
	if (e->in) {
		explicit_bzero(e->in, e->in_len);
		free(e->in);
	}
	if (e->cmdline) {
		explicit_bzero(e->cmdline, strlen(e->cmdline));	/* env may hold secrets */
		free(e->cmdline);
	}
	free(e->why);
	free(e);
}

static void exec_output(struct ssh_exec *e, enum exec_stream stream, const char *buf, size_t n)
{
	if (stream == EXEC_STDERR && !e->hdr_done) {
		while (n > 0) {
			char c = *buf;

			if (c == '\n' && e->hdr_len > 0) {
				e->hdr[e->hdr_len] = '\0';
				e->pid = strtol(e->hdr, NULL, 10);
				e->hdr_done = true;
				buf++, n--;
				break;
			}
			if (!isdigit((unsigned char)c) || e->hdr_len + 1 >= sizeof(e->hdr)) {
				/* not our pid line: give what was held back as it was */
				e->hdr_done = true;
				exec_output(e, EXEC_STDERR, e->hdr, e->hdr_len);
				break;
			}
			e->hdr[e->hdr_len++] = c;
			buf++, n--;
		}
		if (n == 0)
			return;
	}
	if (e->health_port > 0 && stream == EXEC_STDOUT) {
		size_t room = sizeof(e->answer) - e->answer_len;

		memcpy(e->answer + e->answer_len, buf, n < room ? n : room);
		e->answer_len += n < room ? n : room;
	}
	if (e->internal || e->reported || !e->cb.output)
		return;
	e->cb.output(e->cb.userdata, stream, buf, n);
}

static struct ssh_exec *exec_new(struct ssh_session *s, char *cmdline)
{
	struct ssh_exec *e = xcalloc(1, sizeof(*e));

	e->s = s;
	e->cmdline = cmdline;
	e->res.exit_code = -1;
	*s->execs_tail = e;
	s->execs_tail = &e->next;
	s->idle_unread = false;
	return e;
}

/* Start fleet's own `kill -9 -PID` on another channel of the session. */
static void exec_kill(struct ssh_exec *e)
{
	struct ssh_exec *k;

	e->kill_sent = true;
	if (e->pid <= 1) {
		log_debug("ssh: no pid for the command to kill; closing its channel only");
		return;
	}
	k = exec_new(e->s, xasprintf("kill -9 -%ld", e->pid));
	k->internal = true;
	k->hdr_done = true;
}

/* Note the exit status and signal of a channel the server closed. */
static void exec_collect(struct ssh_exec *e)
{
	char *name = NULL;
	size_t name_len = 0;

	if (e->health_port > 0) {
		/* A forwarded connection has no exit status: the answer is the verdict. */
		static const char pass[] = "healthy\n";

		if (e->answer_len == 0 && e->res.error == 0 && !e->timed_out && !e->cancelled)
			exec_set_error(e, -EPROTO, xstrdup("the guest's health service closed without an answer"));
		e->res.exit_code = e->answer_len == sizeof(pass) - 1 && memcmp(e->answer, pass, sizeof(pass) - 1) == 0
			? 0 : 1;
		return;
	}
	if (libssh2_channel_get_exit_signal(e->ch, &name, &name_len, NULL, NULL, NULL, NULL) == 0 && name) {
		e->res.signal = signal_from_name(name);
		if (e->res.signal == 0)
			exec_set_error(e, -EPROTO, xasprintf("killed by unknown signal '%.16s'", name));
		free(name);		/* libssh2's default allocator is malloc */
		e->res.exit_code = -1;
	} else {
		e->res.exit_code = libssh2_channel_get_exit_status(e->ch);
	}
	/* Every command line starts with the shell's pid line: without it, no shell ran. */
	if (!e->internal && e->pid <= 0 && e->res.error == 0 && !e->timed_out && !e->cancelled)
		e->res.not_started = true;
}

/*
 * A libssh2 call of e returned rc < 0. True when the caller should stop
 * (EAGAIN: wait for the socket; or the session failed); false when only
 * this channel is done for.
 */
static bool exec_call_failed(struct ssh_exec *e, int rc, const char *what)
{
	struct ssh_session *s = e->s;

	if (rc == LIBSSH2_ERROR_EAGAIN)
		return true;
	log_debug("ssh: %s: libssh2: %s", what, ssh_last_error(s));
	if (!channel_local_error(rc)) {
		session_fail(s, errno_from_libssh2(rc), xasprintf("SSH connection lost (%s)", what));
		return true;
	}
	return false;
}

/*
 * Not reading output for a slow reader. A kill (timeout, cancel) overrides
 * the pause: it needs the pid line, and what is left is read to the end.
 */
static bool exec_quiet(const struct ssh_exec *e)
{
	return e->paused && !e->kill_wanted && !e->reported;
}

/* One read call: > 0 bytes delivered, 0 end of stream, -1 nothing now. */
static ssize_t exec_read(struct ssh_exec *e, int stream_id)
{
	char buf[READ_CHUNK];
	ssize_t n;

	n = libssh2_channel_read_ex(e->ch, stream_id, buf, sizeof(buf));
	if (n > 0) {
		exec_output(e, stream_id ? EXEC_STDERR : EXEC_STDOUT, buf, (size_t)n);
		return n;
	}
	if (n == 0)
		return 0;
	if (exec_call_failed(e, (int)n, "reading output"))
		return -1;
	return 0;	/* the channel is gone: nothing more to read */
}

static bool exec_step_running(struct ssh_exec *e)
{
	struct ssh_session *s = e->s;
	bool progress = false, out_end = false, err_end = false;
	ssize_t n;

	/* stdin: as much as the guest's window takes, then EOF */
	while (e->in_off < e->in_len && !libssh2_channel_eof(e->ch)) {
		size_t chunk = e->in_len - e->in_off;

		n = libssh2_channel_write_ex(e->ch, 0, e->in + e->in_off, chunk > WRITE_CHUNK ? WRITE_CHUNK : chunk);
		if (n > 0) {
			e->in_off += (size_t)n;
			progress = true;
			continue;
		}
		if (n == 0 || n == LIBSSH2_ERROR_EAGAIN)
			break;		/* window full: the reads below bring the adjust */
		if (exec_call_failed(e, (int)n, "writing stdin"))
			return true;
		e->in_off = e->in_len;	/* the command stopped reading: drop the rest */
	}
	if ((e->in_off == e->in_len || libssh2_channel_eof(e->ch)) && !e->eof_sent) {
		int rc = libssh2_channel_send_eof(e->ch);

		if (rc == 0 || !exec_call_failed(e, rc, "sending EOF")) {
			e->eof_sent = true;
			e->in_off = e->in_len;
			progress = true;
		} else if (s->state != SESSION_READY) {
			return true;
		}
	}

	if (e->kill_wanted && !e->kill_sent && (e->hdr_done || e->pid > 0)) {
		exec_kill(e);
		if (e->pid <= 1) {
			/* nothing to kill by pid: close; the grace timer reports if that hangs */
			e->state = EXEC_CLOSING;
			return true;
		}
		progress = true;
	}

	/*
	 * stdout and stderr until both are drained and the server sent EOF,
	 * or until paused: then the window fills and the guest's sender waits.
	 */
	if (exec_quiet(e))
		return progress;
	while ((n = exec_read(e, 0)) > 0) {
		progress = true;
		if (s->state != SESSION_READY || s->closing || exec_quiet(e))
			return true;
	}
	out_end = n == 0;
	if (s->state != SESSION_READY || s->closing)
		return true;
	while ((n = exec_read(e, SSH_EXTENDED_DATA_STDERR)) > 0) {
		progress = true;
		if (s->state != SESSION_READY || s->closing || exec_quiet(e))
			return true;
	}
	err_end = n == 0;
	if (s->state != SESSION_READY || s->closing)
		return true;

	if (out_end && err_end && libssh2_channel_eof(e->ch)) {
		if (!e->hdr_done && e->hdr_len > 0) {
			e->hdr_done = true;
			exec_output(e, EXEC_STDERR, e->hdr, e->hdr_len);
		}
		e->state = EXEC_CLOSING;
		progress = true;
	}
	return progress;
}

/*
 * A timeout or cancel after the output ended: the command closed its
 * output but runs on, and the close waits for it, so kill it. True if the
 * kill was started.
 */
static bool exec_kill_late(struct ssh_exec *e)
{
	if (!e->kill_wanted || e->kill_sent || e->pid <= 1)
		return false;
	exec_kill(e);
	return true;
}

/* Advance e as far as it goes without waiting; true if anything moved. */
static bool exec_step(struct ssh_exec *e)
{
	struct ssh_session *s = e->s;
	int rc;

	switch (e->state) {
	case EXEC_QUEUED:
		if (e->kill_wanted) {
			e->state = EXEC_FINISHED;
			exec_report(e);
			return true;
		}
		if (s->opening)
			return false;	/* libssh2 keeps one channel-open in progress per session */
		s->opening = e;
		e->state = EXEC_OPENING;
		return true;

	case EXEC_OPENING:
		/* a window smaller than libssh2's default: it bounds what a paused exec leaves buffered */
		if (e->health_port > 0)
			e->ch = libssh2_channel_direct_tcpip_ex(s->ssh, GUEST_LOOPBACK, e->health_port, GUEST_LOOPBACK, 22);
		else if (e->probe)
			e->ch = libssh2_channel_open_ex(s->ssh, PROBE_CHANNEL_TYPE, sizeof(PROBE_CHANNEL_TYPE) - 1,
							SSH_EXEC_WINDOW, LIBSSH2_CHANNEL_PACKET_DEFAULT, NULL, 0);
		else
			e->ch = libssh2_channel_open_ex(s->ssh, "session", sizeof("session") - 1, SSH_EXEC_WINDOW,
							LIBSSH2_CHANNEL_PACKET_DEFAULT, NULL, 0);
		if (!e->ch) {
			rc = libssh2_session_last_errno(s->ssh);
			if (exec_call_failed(e, rc, e->probe ? "probing the guest" : "opening a channel"))
				return false;
			s->opening = NULL;
			if (e->probe) {
				/* the refusal we asked for: the guest is alive */
				e->state = EXEC_FINISHED;
				exec_report(e);
				return true;
			}
			if (e->health_port > 0) {
				/* nothing listens there: an older guest; its caller runs the check as an exec */
				s->no_health_service = true;
				if (!e->kill_wanted)	/* else cancelled or timed out: no fallback */
					exec_set_error(e, -EOPNOTSUPP, xstrdup("the guest has no health service"));
				e->state = EXEC_FINISHED;
				exec_report(e);
				return true;
			}
			exec_set_error(e, errno_from_libssh2(rc), xstrdup("the guest refused to open an SSH channel"));
			e->state = EXEC_FINISHED;
			exec_report(e);
			return true;
		}
		s->opening = NULL;
		/* cancelled while opening, or a probe the guest accepted after all: close it unused */
		e->state = e->kill_wanted || e->probe ? EXEC_CLOSING : e->health_port > 0 ? EXEC_RUNNING : EXEC_STARTING;
		return true;

	case EXEC_STARTING:
		rc = libssh2_channel_exec(e->ch, e->cmdline);
		if (rc < 0) {
			if (exec_call_failed(e, rc, "starting a command"))
				return false;
			exec_set_error(e, errno_from_libssh2(rc), xstrdup("the guest refused to run the command"));
			e->state = EXEC_CLOSING;
			return true;
		}
		e->state = EXEC_RUNNING;
		return true;

	case EXEC_RUNNING:
		return exec_step_running(e);

	case EXEC_CLOSING:
		if (exec_kill_late(e))
			return true;
		rc = libssh2_channel_close(e->ch);
		if (rc < 0 && exec_call_failed(e, rc, "closing a channel"))
			return false;
		e->eof_sent = true;
		e->state = EXEC_CLOSE_WAIT;
		return true;

	case EXEC_CLOSE_WAIT:
		/*
		 * libssh2 1.10's close returns once it read any one packet, of
		 * any channel, not the server's close: the exit status, which
		 * the server sends before its close (RFC 4254 6.10; dropbear
		 * when the command was reaped), may not be there yet, and an
		 * unset status reads 0. So wait for the server's close (after
		 * its EOF; a channel closed without one, killed or refused,
		 * has no status to wait for: its error or kill tells).
		 */
		if (exec_kill_late(e))
			return true;
		if (libssh2_channel_eof(e->ch)) {
			rc = libssh2_channel_wait_closed(e->ch);
			if (rc < 0 && exec_call_failed(e, rc, "waiting for the command's exit status"))
				return false;
		}
		exec_collect(e);
		e->state = EXEC_FREEING;
		return true;

	case EXEC_FREEING:
		rc = libssh2_channel_free(e->ch);
		if (rc < 0 && exec_call_failed(e, rc, "freeing a channel"))
			return false;
		e->ch = NULL;
		e->state = EXEC_FINISHED;
		exec_report(e);
		return true;

	case EXEC_FINISHED:
		return false;
	}
	return false;
}

static void exec_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct ssh_exec *e = arg;
	struct timeval grace = { KILL_GRACE_S, 0 };

	if (!e->kill_wanted) {
		e->timed_out = true;
		e->kill_wanted = true;
		evtimer_add(e->ev_timer, &grace);
	} else {
		e->grace_over = true;
	}
	kick(e->s);
}

/* --- sessions ------------------------------------------------------------------------ */

/* The session is gone; each exec in flight gets why, prefixed unless verbatim. */
static void session_fail_as(struct ssh_session *s, int error, char *why, bool verbatim)
{
	if (s->state == SESSION_FAILED) {
		free(why);
		return;
	}
	s->state = SESSION_FAILED;
	log_debug("ssh: session failed: %s", why);
	event_del(s->ev_read);
	event_del(s->ev_write);
	event_del(s->ev_timer);
	s->opening = NULL;
	for (struct ssh_exec *e = s->execs; e && !s->closing; e = e->next) {
		if (!e->reported) {
			exec_set_error(e, error, verbatim ? xstrdup(why) : xasprintf("SSH session failed: %s", why));
			exec_report(e);
		}
	}
	if (!s->closing && s->cb.failed)
		s->cb.failed(s->cb.userdata, error, why);
	free(why);
}

static void session_fail(struct ssh_session *s, int error, char *why)
{
	session_fail_as(s, error, why, false);
}

static bool session_handshake(struct ssh_session *s)
{
	_cleanup_free_ char *got = NULL;
	const char *key;
	size_t len = 0;
	int type = 0, rc;

	rc = libssh2_session_handshake(s->ssh, s->fd);
	if (rc == LIBSSH2_ERROR_EAGAIN)
		return false;
	if (rc < 0) {
		log_debug("ssh: handshake: libssh2: %s", ssh_last_error(s));
		session_fail(s, errno_from_libssh2(rc), xstrdup("SSH handshake with the guest failed"));
		return true;
	}
	/* pinned: the key fleetd made for this guest, or nothing; checked before we authenticate */
	key = libssh2_session_hostkey(s->ssh, &len, &type);
	if (!key || len == 0) {
		session_fail(s, -EPROTO, xstrdup("the guest sent no host key"));
		return true;
	}
	got = ssh_fingerprint_blob(key, len);
	if (strcmp(got, s->fingerprint) != 0) {
		session_fail(s, -EKEYREJECTED,
			     xasprintf("host key mismatch: expected %s, got %s", s->fingerprint, got));
		return true;
	}
	s->state = SESSION_AUTH;
	return true;
}

static bool session_auth(struct ssh_session *s)
{
	struct timeval tv = { s->keepalive_s, 0 };
	int rc;

	rc = libssh2_userauth_publickey_fromfile_ex(s->ssh, s->user, (unsigned)strlen(s->user), NULL,
						    s->key_path, NULL);
	if (rc == LIBSSH2_ERROR_EAGAIN)
		return false;
	if (rc < 0) {
		int err = errno_from_libssh2(rc);

		log_debug("ssh: authentication: libssh2: %s", ssh_last_error(s));
		if (err == -ENOKEY)
			session_fail(s, err, xasprintf("cannot load the client key '%s'", s->key_path));
		else if (err == -EACCES)
			session_fail(s, err, xasprintf("the guest refused public key login as '%s'", s->user));
		else
			session_fail(s, err, xstrdup("SSH authentication with the guest failed"));
		return true;
	}
	s->state = SESSION_READY;
	event_del(s->ev_timer);
	if (s->keepalive_s > 0) {
		s->rx_mark = s->received;
		evtimer_add(s->ev_timer, &tv);
	}
	if (s->cb.ready)
		s->cb.ready(s->cb.userdata);
	return true;
}

static bool session_has_channels(const struct ssh_session *s)
{
	for (const struct ssh_exec *e = s->execs; e; e = e->next)
		if (e->state != EXEC_FINISHED)
			return true;
	return false;
}

/*
 * Does any channel make libssh2 read the socket? A paused exec with its
 * stdin sent makes no call at all: if only such channels are open, a
 * readable socket would wake the loop again and again for nothing. Its
 * bytes wait (the window bounds them) until a resume or another channel
 * reads them.
 */
static bool session_wants_input(const struct ssh_session *s)
{
	for (const struct ssh_exec *e = s->execs; e; e = e->next)
		if (e->state != EXEC_FINISHED && !(e->state == EXEC_RUNNING && exec_quiet(e) && e->eof_sent))
			return true;
	return false;
}

static bool session_step_ready(struct ssh_session *s)
{
	bool progress = false;

	for (struct ssh_exec *e = s->execs; e; e = e->next) {
		if (e->grace_over && !e->reported) {
			/* killed but not closed in time: report now, let the channel finish alone */
			exec_report(e);
			progress = true;
		}
		if (s->state != SESSION_READY || s->closing)
			return true;
		if (exec_step(e))
			progress = true;
		if (s->state != SESSION_READY || s->closing)
			return true;
	}

	if (!session_has_channels(s)) {
		/*
		 * Idle: only a channel call makes libssh2 read, so peek for a
		 * closed connection; bytes that came (a late answer, say)
		 * wait for the next exec or probe, and the socket is not watched meanwhile.
		 */
		if (s->readable) {
			char c;
			ssize_t n = recv(s->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);

			if (n == 0) {
				session_fail(s, -ECONNRESET, xstrdup("the guest closed the SSH connection"));
				return true;
			}
			if (n > 0)
				s->idle_unread = true;
		}
	}
	s->readable = false;
	return progress;
}

/* Watch the socket for what the session waits on. */
static void session_watch(struct ssh_session *s)
{
	bool want_r;

	if (s->state == SESSION_FAILED || s->closing) {
		event_del(s->ev_read);
		event_del(s->ev_write);
		return;
	}
	/*
	 * Sends never block (session_send), so libssh2 only ever waits for
	 * input: libssh2_session_block_directions() is INBOUND whenever a
	 * call returned EAGAIN. Channels at work are read whenever bytes come.
	 */
	if (s->state == SESSION_READY)
		want_r = session_has_channels(s) ? session_wants_input(s) : !s->idle_unread;
	else
		want_r = true;
	if (want_r)
		event_add(s->ev_read, NULL);
	else
		event_del(s->ev_read);
	if (s->out_len > s->out_off)
		event_add(s->ev_write, NULL);
	else
		event_del(s->ev_write);
}

/* Drop execs whose channel is gone and whose done() was called. */
static void session_sweep(struct ssh_session *s)
{
	struct ssh_exec **pp = &s->execs;

	while (*pp) {
		struct ssh_exec *e = *pp;

		if (e->state == EXEC_FINISHED && e->reported) {
			*pp = e->next;
			exec_free(e);
		} else {
			pp = &e->next;
		}
	}
	s->execs_tail = pp;
}

static void session_run(struct ssh_session *s)
{
	bool progress;

	do {
		unsigned long long received = s->received;

		if (s->closing)
			return;
		if (session_flush(s) < 0) {
			session_fail(s, -ECONNRESET, xstrdup("SSH connection lost (the guest side closed)"));
			return;
		}
		switch (s->state) {
		case SESSION_HANDSHAKE:
			progress = session_handshake(s);
			break;
		case SESSION_AUTH:
			progress = session_auth(s);
			break;
		case SESSION_READY:
			progress = session_step_ready(s);
			break;
		default:
			progress = false;
		}
		/* bytes taken during this pass may be for a channel already stepped (see session_recv) */
		if (s->received != received)
			progress = true;
	} while (progress && s->state != SESSION_FAILED);
	if (s->closing)
		return;
	if (s->state != SESSION_FAILED && session_flush(s) < 0)
		session_fail(s, -ECONNRESET, xstrdup("SSH connection lost (the guest side closed)"));
	session_sweep(s);
	session_watch(s);
}

/* Every event of a session ends here. */
static void session_cb(evutil_socket_t fd, short what, void *arg)
{
	struct ssh_session *s = arg;

	s->busy++;
	if (what & EV_READ)
		s->readable = true;
	session_run(s);
	if (--s->busy == 0 && s->closing)
		session_destroy(s);
}

/*
 * Liveness, every keepalive_s once ready: a guest that sent nothing since
 * the last tick gets a probe (one at a time), which it must answer; after
 * SSH_KEEPALIVE_MISSES silent ticks in a row the session fails, and so
 * does every exec on it, whatever its own timeout. A frozen sshd (or
 * relay, or guest) is noticed SSH_KEEPALIVE_MISSES to SSH_KEEPALIVE_MISSES
 * + 1 intervals after its last byte. Any byte counts (output, window
 * adjusts, a probe's answer): busy channels need no probe. Sends never
 * block (session_send), so the loop never waits for the guest.
 */
static void session_tick(struct ssh_session *s)
{
	struct timeval tv = { s->keepalive_s, 0 };

	if (s->received != s->rx_mark) {
		s->rx_mark = s->received;
		s->silent_ticks = 0;
	} else if (++s->silent_ticks >= SSH_KEEPALIVE_MISSES) {
		session_fail_as(s, -ETIMEDOUT,
				xasprintf("SSH session to the guest stopped answering (nothing from it for %d s)",
					  SSH_KEEPALIVE_MISSES * s->keepalive_s), true);
		return;
	}
	if (s->silent_ticks > 0 && !s->probe_pending) {
		struct ssh_exec *p = exec_new(s, NULL);

		p->internal = p->probe = p->hdr_done = true;
		s->probe_pending = true;
	}
	evtimer_add(s->ev_timer, &tv);
	kick(s);
}

static void session_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct ssh_session *s = arg;

	s->busy++;
	if (s->state == SESSION_READY)
		session_tick(s);
	else
		session_fail(s, -ETIMEDOUT, xasprintf("no SSH login within %d s", s->connect_timeout_s));
	if (--s->busy == 0 && s->closing)
		session_destroy(s);
}

int ssh_session_new(struct event_base *base, int fd, const struct ssh_session_config *cfg,
		    const struct ssh_session_callbacks *cb, struct ssh_session **ret, char **why)
{
	static bool initialized;
	struct ssh_session *s;
	struct timeval tv;
	int flags;

	if (!cfg->user || !*cfg->user || !cfg->key_path || !cfg->host_fingerprint ||
	    strncmp(cfg->host_fingerprint, "SHA256:", 7) != 0 ||
	    (cfg->agentd && (!cfg->exec_user || !*cfg->exec_user))) {
		close(fd);
		*why = xstrdup("a user, a client key and a pinned SHA256 host key fingerprint are required "
			       "(and with agentd, the user execs run as)");
		return -EINVAL;
	}
	if (!initialized) {
		if (libssh2_init(0) != 0) {
			close(fd);
			*why = xstrdup("libssh2 failed to initialize");
			return -EIO;
		}
		initialized = true;
	}
	flags = fcntl(fd, F_GETFL);
	if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
		int r = -errno;

		close(fd);
		*why = xstrdup("bad socket");
		return r;
	}

	s = xcalloc(1, sizeof(*s));
	s->base = base;
	s->fd = fd;
	s->user = xstrdup(cfg->user);
	s->key_path = xstrdup(cfg->key_path);
	s->fingerprint = xstrdup(cfg->host_fingerprint);
	s->agentd = cfg->agentd ? xstrdup(cfg->agentd) : NULL;
	s->exec_user = cfg->agentd ? xstrdup(cfg->exec_user) : NULL;
	s->connect_timeout_s = cfg->connect_timeout_s > 0 ? cfg->connect_timeout_s : 30;
	s->keepalive_s = cfg->keepalive_s;
	s->cb = *cb;
	s->execs_tail = &s->execs;
	s->ssh = libssh2_session_init_ex(NULL, NULL, NULL, s);
	if (!s->ssh) {
		*why = xstrdup("libssh2 failed to create a session");
		ssh_session_free(s);
		return -ENOMEM;
	}
	libssh2_session_callback_set(s->ssh, LIBSSH2_CALLBACK_SEND, (void *)session_send);
	libssh2_session_callback_set(s->ssh, LIBSSH2_CALLBACK_RECV, (void *)session_recv);
	libssh2_session_set_blocking(s->ssh, 0);
	/* only the key type fleetd pins; a guest offering another one fails the handshake */
	libssh2_session_method_pref(s->ssh, LIBSSH2_METHOD_HOSTKEY, SSH_KEY_TYPE);

	s->ev_read = event_new(base, fd, EV_READ | EV_PERSIST, session_cb, s);
	s->ev_write = event_new(base, fd, EV_WRITE | EV_PERSIST, session_cb, s);
	s->ev_kick = event_new(base, -1, 0, session_cb, s);
	s->ev_timer = evtimer_new(base, session_timer_cb, s);
	if (!s->ev_read || !s->ev_write || !s->ev_kick || !s->ev_timer)
		abort();
	tv = (struct timeval){ s->connect_timeout_s, 0 };
	evtimer_add(s->ev_timer, &tv);
	/* libssh2 speaks first (its banner), which is what wakes the guest's relay */
	kick(s);
	*ret = s;
	return 0;
}

static void session_destroy(struct ssh_session *s)
{
	struct ssh_exec *e;

	if (s->ssh) {
		/* a polite goodbye, best effort: queued, one flush, never waited for */
		if (s->state == SESSION_READY) {
			libssh2_session_disconnect(s->ssh, "fleetd closed the session");
			session_flush(s);
		}
		/* after shutdown every send fails at once, so freeing never waits */
		shutdown(s->fd, SHUT_RDWR);
		s->send_errno = EPIPE;
		libssh2_session_free(s->ssh);	/* frees the channels too */
	}
	while ((e = s->execs)) {
		s->execs = e->next;
		exec_free(e);
	}
	if (s->ev_read)
		event_free(s->ev_read);
	if (s->ev_write)
		event_free(s->ev_write);
	if (s->ev_kick)
		event_free(s->ev_kick);
	if (s->ev_timer)
		event_free(s->ev_timer);
	if (s->fd >= 0)
		close(s->fd);
	free(s->out);
	free(s->user);
	free(s->key_path);
	free(s->fingerprint);
	free(s->agentd);
	free(s->exec_user);
	free(s);
}

void ssh_session_free(struct ssh_session *s)
{
	if (!s || s->closing)
		return;
	s->closing = true;
	for (struct ssh_exec *e = s->execs; e; e = e->next) {
		if (!e->reported) {
			exec_set_error(e, -ECONNABORTED, xstrdup("the SSH session was closed"));
			exec_report(e);
		}
	}
	if (s->busy == 0)
		session_destroy(s);
}

bool ssh_session_is_ready(const struct ssh_session *s)
{
	return s && s->state == SESSION_READY && !s->closing;
}

int ssh_exec(struct ssh_session *s, const struct exec_request *req, const struct exec_callbacks *cb,
	     struct ssh_exec **ret, char **why)
{
	struct ssh_exec *e;
	char *cmdline = NULL, *frame = NULL, *files = NULL;
	size_t frame_len = 0, files_len = 0, in_len;
	int r;

	if (s->state == SESSION_FAILED || s->closing) {
		*why = xstrdup("the SSH session to the guest has failed");
		return -ENOTCONN;
	}
	if (req->n_files > 0 && !s->agentd) {
		*why = xstrdup("files for an exec need agentd in the guest");
		return -EOPNOTSUPP;
	}
	r = ssh_command_line(s->agentd, req->root ? "root" : s->exec_user, req->argv, req->env, req->n_files > 0,
			     &cmdline);
	if (r == -E2BIG) {
		*why = xasprintf("command line too long (at most %d bytes with its environment; "
				 "pass big data on stdin)", SSH_COMMAND_MAX);
		return r;
	}
	if (r < 0) {
		*why = xstrdup("bad command: empty argv, '=' in argv[0], or an env entry that is not NAME=VALUE");
		return r;
	}
	/* With agentd the environment (secrets among it) goes first on stdin, never on the command line. */
	if (s->agentd && req->env && req->env[0]) {
		if (ssh_env_frame(req->env, &frame, &frame_len) < 0) {
			explicit_bzero(cmdline, strlen(cmdline));
			free(cmdline);
			*why = xstrdup("bad command: an env entry that is not NAME=VALUE");
			return -EINVAL;
		}
	}
	/* Then the files (secrets too): agentd puts them on a tmpfs of the command's own. */
	if (req->n_files > 0 && ssh_files_frame(req->files, req->n_files, &files, &files_len) < 0) {
		explicit_bzero(cmdline, strlen(cmdline));
		free(cmdline);
		if (frame) {
			explicit_bzero(frame, frame_len);
			free(frame);
		}
		*why = xstrdup("bad command: a file name that is not an environment variable name");
		return -EINVAL;
	}
	e = exec_new(s, cmdline);
	e->cb = *cb;
	in_len = frame_len + files_len + (req->stdin_data ? req->stdin_len : 0);
	if (in_len > 0) {
		e->in_len = in_len;
		e->in = xmalloc(e->in_len);
		if (frame_len)
			memcpy(e->in, frame, frame_len);
		if (files_len)
			memcpy(e->in + frame_len, files, files_len);
		if (req->stdin_data && req->stdin_len > 0)
			memcpy(e->in + frame_len + files_len, req->stdin_data, req->stdin_len);
	}
	if (frame) {
		explicit_bzero(frame, frame_len);
		free(frame);
	}
	if (files) {
		explicit_bzero(files, files_len);
		free(files);
	}
	e->ev_timer = evtimer_new(s->base, exec_timer_cb, e);
	if (!e->ev_timer)
		abort();
	if (req->timeout_s > 0) {
		struct timeval tv = { req->timeout_s, 0 };

		evtimer_add(e->ev_timer, &tv);
	}
	kick(s);
	*ret = e;
	return 0;
}

int ssh_health(struct ssh_session *s, int port, int timeout_s, const struct exec_callbacks *cb,
	       struct ssh_exec **ret, char **why)
{
	struct ssh_exec *e;

	if (s->state == SESSION_FAILED || s->closing) {
		*why = xstrdup("the SSH session to the guest has failed");
		return -ENOTCONN;
	}
	if (!s->agentd || s->no_health_service || port <= 0 || port > 65535) {
		*why = xstrdup("no health service in the guest");
		return -EOPNOTSUPP;
	}
	e = exec_new(s, NULL);
	e->health_port = port;
	e->hdr_done = true;	/* no shell: no pid line, nothing to kill by pid (a timeout closes) */
	e->cb = *cb;
	e->in = xasprintf("health %s\n", s->exec_user);
	e->in_len = strlen(e->in);
	e->ev_timer = evtimer_new(s->base, exec_timer_cb, e);
	if (!e->ev_timer)
		abort();
	if (timeout_s > 0) {
		struct timeval tv = { timeout_s, 0 };

		evtimer_add(e->ev_timer, &tv);
	}
	log_debug("ssh: health request to the guest's service on port %d", port);
	kick(s);
	*ret = e;
	return 0;
}

void ssh_exec_pause(struct ssh_exec *e, bool paused)
{
	if (!e || e->reported || e->paused == paused)
		return;
	e->paused = paused;
	kick(e->s);	/* resume reading, or stop watching the socket for it */
}

void ssh_exec_cancel(struct ssh_exec *e)
{
	struct timeval grace = { KILL_GRACE_S, 0 };

	if (!e || e->reported || e->kill_wanted)
		return;
	e->cancelled = true;
	e->kill_wanted = true;
	evtimer_add(e->ev_timer, &grace);
	kick(e->s);
}
