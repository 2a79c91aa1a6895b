/*
 * ssh: fleetd's SSH client and the only file that includes <libssh2.h>.
 *
 * It drives one non-blocking libssh2 session per guest on the event loop over
 * a socket fd it is handed (fleetd connects the guest's virtio-serial Unix
 * socket), pins the guest's host key, and runs commands on channels of
 * that session with the exec contract of backend.h.
 *
 * The keys of the control channel (the client key fleetd logs in with, in
 * OpenSSH format, and a guest's host key, in dropbear's format) are
 * ssh_keys.h's, the command lines sent ssh_quote.h's; this header includes
 * both, so its callers need only it.
 *
 * It knows nothing of libvirt or agents, never blocks the loop, and never
 * logs above debug: callers get -errno plus a message and decide.
 */
#ifndef FLEET_SSH_H
#define FLEET_SSH_H

#include <stdbool.h>
#include <stddef.h>

#include "backend/backend.h"
#include "vm/ssh_keys.h"	/* ssh_keygen, fingerprints: callers of this header use them */
#include "vm/ssh_quote.h"	/* ssh_command_line, SSH_COMMAND_MAX */

struct event_base;
struct ssh_session;
struct ssh_exec;

/*
 * The receive window each exec channel offers (libssh2's default is 2 MiB):
 * the most output of one exec libssh2 buffers while it is not read.
 */
#define SSH_EXEC_WINDOW (512 * 1024)

/* --- sessions ---------------------------------------------------------------- */

/*
 * With keepalive_s > 0, a ready session that hears nothing from the guest
 * for this many intervals in a row (while probing it every interval) fails
 * with -ETIMEDOUT, "SSH session to the guest stopped answering": between
 * SSH_KEEPALIVE_MISSES and SSH_KEEPALIVE_MISSES + 1 intervals after the
 * guest's last byte, and every exec on it gets done() with that error.
 */
#define SSH_KEEPALIVE_MISSES 3

struct ssh_session_config {
	const char *user;		/* who to log in as */
	const char *key_path;		/* client private key, OpenSSH format (ssh_keygen SSH_KEY_OPENSSH) */
	const char *host_fingerprint;	/* pinned "SHA256:..." of the guest's host key; required */
	int connect_timeout_s;		/* handshake + authentication; 0: 30 */
	int keepalive_s;		/* liveness probe interval once ready (see below); 0: none */
	/*
	 * agentd's path in the guest: every exec runs through `agentd run-as`
	 * as exec_user (as root with req->root), its env set only after the
	 * privilege drop. NULL: the login user runs execs itself.
	 */
	const char *agentd;
	const char *exec_user;
};

struct ssh_session_callbacks {
	/* Handshake, host key check and authentication done; execs run now. */
	void (*ready)(void *userdata);
	/*
	 * The session failed (before or after ready) and stays unusable:
	 * host key mismatch, authentication refused, connection lost, ...
	 * Called at most once, after every exec in flight got its done().
	 * The session may be freed from inside this callback.
	 */
	void (*failed)(void *userdata, int error, const char *why);
	void *userdata;
};

/*
 * Start a session on fd, an already connected stream socket whose
 * ownership passes to the session (it is closed by ssh_session_free, or
 * here on failure). Progress and results come through cb on base. -errno
 * and *why (malloc'd) when it cannot even start.
 */
int ssh_session_new(struct event_base *base, int fd, const struct ssh_session_config *cfg,
		    const struct ssh_session_callbacks *cb, struct ssh_session **ret, char **why);

/*
 * Close the session and its socket. Every exec still in flight gets its
 * done() with -ECONNABORTED before this returns; no callback of the
 * session runs afterwards. Commands still running in the guest are not
 * killed (cancel them and wait for done() first). NULL is fine; safe
 * inside any callback of the session.
 */
void ssh_session_free(struct ssh_session *s);

/* Authenticated and not failed. */
bool ssh_session_is_ready(const struct ssh_session *s);

/*
 * Run req on a new channel of s (execs sent before ready wait for it, and
 * fail with the session if it fails). Output and the single done() arrive
 * through cb on the loop, never from inside this call. req->timeout_s
 * counts from this call; on expiry the command's whole process group is
 * killed and done() reports timed_out (and signal SIGKILL when the guest
 * reports it). Who runs the command: with the session's agentd, root if
 * req->root, else its exec_user; without, the session's user (req->root
 * is not looked at). req and what it points to may be freed after the call.
 * -EINVAL/-E2BIG for a bad request, -ENOTCONN for a failed session, with
 * *why.
 */
int ssh_exec(struct ssh_session *s, const struct exec_request *req, const struct exec_callbacks *cb,
	     struct ssh_exec **ret, char **why);

/*
 * The default health check through the guest's health service
 * (agentd/health_server.h): a forwarded connection (direct-tcpip) to
 * 127.0.0.1:port in the guest, which dropbear opens itself, carrying
 * "health USER\n" (USER: the session's exec_user). It reports through cb
 * like an exec of `agentd health`: output() with the service's answer,
 * then done() with exit code 0 when the answer is exactly "healthy\n", 1
 * for any other answer, an error when there was none. -EOPNOTSUPP now
 * (session without agentd) or in done() (the guest refused the
 * connection: no service there; the session does not try it again): run
 * the check as an exec. timeout_s as for an exec; a timeout or cancel
 * closes the connection (the service bounds its checks itself).
 */
int ssh_health(struct ssh_session *s, int port, int timeout_s, const struct exec_callbacks *cb,
	       struct ssh_exec **ret, char **why);

/*
 * Kill every process the exec started (its process group) and close its
 * channel; done() still comes once, later, with error -ECANCELED (exit
 * code or signal filled in when the guest reported one). Must not be
 * called after done().
 */
void ssh_exec_cancel(struct ssh_exec *e);

/*
 * Stop (paused) or resume reading the exec's stdout and stderr, for a
 * reader that is slower than the command. Paused, the channel is not read:
 * the guest can send no more than the channel's receive window
 * (SSH_EXEC_WINDOW), which libssh2 holds, and then its sender blocks;
 * output() is not called (bar the rest of one read), nor done(), which
 * follows the last output. The session goes on serving its other channels.
 * Ignored once the exec is being killed (timeout, cancel): its remaining
 * output is read to the end. Must not be called after done().
 */
void ssh_exec_pause(struct ssh_exec *e, bool paused);

#endif
