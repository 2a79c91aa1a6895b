/*
 * virt_channel: a guest's virtio-serial channel (virDomainOpenChannel) or its
 * serial console (virDomainOpenConsole) over a libvirt connection, joined to
 * a Unix socketpair: the SSH session (ssh.c) runs over the channel exactly as
 * over a local guest's ctl.sock, and remote_console.c reads the console into
 * the agent's console log. libvirt's
 * event thread (virt.c) pumps the bytes both ways: non-blocking stream and
 * socket, one bounded buffer per direction, each side read only while the
 * buffer toward the other is empty, so what waits is at most two buffers.
 * The pump ends, closing both, when either side ends or fails.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "vm/virt.h"
#include "vm/virt_conn.h"

#define PUMP_BUF (64 << 10)

struct pump {
	virStreamPtr st;
	int fd;			/* our end of the socketpair */
	int watch;		/* the fd's handle in libvirt's event loop */
	int refs;		/* the stream callback and the fd handle each hold one */
	bool closed;
	char *name;		/* "DOMAIN channel NAME", "DOMAIN console": for the log */
	char to_fd[PUMP_BUF];	/* from the guest, not yet written to fd */
	size_t to_fd_len, to_fd_off;
	char to_st[PUMP_BUF];	/* from fd, not yet sent to the guest */
	size_t to_st_len, to_st_off;
};

static void pump_unref(void *opaque)
{
	struct pump *p = opaque;

	if (--p->refs > 0)
		return;
	virStreamFree(p->st);
	free(p->name);
	free(p);
}

/* End the pump; p may be freed when this returns (the last reference goes with the stream's callback). */
static void pump_close(struct pump *p, const char *why)
{
	virStreamPtr st = p->st;

	if (p->closed)
		return;
	p->closed = true;
	log_debug("libvirt: %s closed (%s)", p->name, why);
	close(p->fd);
	(void)virStreamAbort(st);
	virStreamRef(st);	/* held across the removal that may free p, and the stream with it */
	virEventRemoveHandle(p->watch);
	virStreamEventRemoveCallback(st);
	virStreamFree(st);
}

/* What each side is watched for, from what the buffers hold. */
static void pump_arm(struct pump *p)
{
	int st_ev = 0, fd_ev = 0;

	if (p->closed)
		return;
	if (p->to_fd_len == 0)
		st_ev |= VIR_STREAM_EVENT_READABLE;
	else
		fd_ev |= VIR_EVENT_HANDLE_WRITABLE;
	if (p->to_st_len == 0)
		fd_ev |= VIR_EVENT_HANDLE_READABLE;
	else
		st_ev |= VIR_STREAM_EVENT_WRITABLE;
	virStreamEventUpdateCallback(p->st, st_ev);
	virEventUpdateHandle(p->watch, fd_ev);
}

/* Move what can move now, in both directions; false once the pump has ended. */
static bool pump_step(struct pump *p)
{
	ssize_t n;
	int m;

	/* guest -> fd */
	if (p->to_fd_len == 0) {
		m = virStreamRecv(p->st, p->to_fd, sizeof(p->to_fd));
		if (m == 0 || m == -1) {
			pump_close(p, m == 0 ? "the guest's side ended" : virGetLastErrorMessage());
			return false;
		}
		if (m > 0) {
			p->to_fd_len = (size_t)m;
			p->to_fd_off = 0;
		}
	}
	while (p->to_fd_len > 0) {
		n = write(p->fd, p->to_fd + p->to_fd_off, p->to_fd_len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			break;
		if (n <= 0) {
			pump_close(p, "fleetd's side closed");
			return false;
		}
		p->to_fd_off += (size_t)n;
		p->to_fd_len -= (size_t)n;
	}
	/* fd -> guest */
	if (p->to_st_len == 0) {
		n = read(p->fd, p->to_st, sizeof(p->to_st));
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
			pump_close(p, "fleetd's side ended");
			return false;
		}
		if (n > 0) {
			p->to_st_len = (size_t)n;
			p->to_st_off = 0;
		}
	}
	while (p->to_st_len > 0) {
		m = virStreamSend(p->st, p->to_st + p->to_st_off, p->to_st_len);
		if (m == -2)
			break;
		if (m < 0) {
			pump_close(p, virGetLastErrorMessage());
			return false;
		}
		p->to_st_off += (size_t)m;
		p->to_st_len -= (size_t)m;
	}
	return true;
}

static void on_stream(virStreamPtr st, int events, void *opaque)
{
	struct pump *p = opaque;

	if (p->closed)
		return;
	if (events & (VIR_STREAM_EVENT_ERROR | VIR_STREAM_EVENT_HANGUP)) {
		/* Bytes may still wait before the hangup: pass them, then end. */
		if (pump_step(p))
			pump_close(p, "the stream hung up");
		return;
	}
	if (pump_step(p))
		pump_arm(p);
}

static void on_fd(int watch, int fd, int events, void *opaque)
{
	struct pump *p = opaque;

	if (p->closed)
		return;
	if (pump_step(p))
		pump_arm(p);
}

/* How a stream reaches the guest: one of the two openers below; -1 with libvirt's error. */
typedef int (*stream_opener)(virDomainPtr d, const char *name, virStreamPtr st);

static int open_channel(virDomainPtr d, const char *channel, virStreamPtr st)
{
	/* FORCE: a stream an earlier fleetd (or session) left open is closed, not in our way. */
	return virDomainOpenChannel(d, channel, st, VIR_DOMAIN_CHANNEL_FORCE);
}

static int open_console(virDomainPtr d, const char *unused, virStreamPtr st)
{
	/* No FORCE: a person's `virsh console` keeps the port; fleetd tries again later. */
	return virDomainOpenConsole(d, NULL, st, 0);
}

/* label names the stream in messages ("channel NAME", "console"). */
static int stream_open(struct virt *v, const char *domain, const char *channel, const char *label,
		       stream_opener opener, int *ret_fd, char **why)
{
	_cleanup_conn_ virConnectPtr c = NULL;
	virDomainPtr d = NULL;
	struct pump *p;
	int sv[2], r;

	if ((r = virt_conn(v, &c, why)) < 0)
		return r;
	if (!(d = virDomainLookupByName(c, domain))) {
		_cleanup_free_ char *what = xasprintf("domain %s", domain);
		return virt_last_error(what, why);
	}
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) < 0) {
		r = -errno;
		*why = xasprintf("socketpair: %s", strerror(-r));
		virDomainFree(d);
		return r;
	}
	p = xcalloc(1, sizeof(*p));
	p->fd = sv[1];
	p->watch = -1;
	p->name = xasprintf("%s %s", domain, label);
	if (!(p->st = virStreamNew(c, VIR_STREAM_NONBLOCK))) {
		r = virt_last_error("cannot open a stream", why);
		goto fail;
	}
	if (opener(d, channel, p->st) < 0) {
		_cleanup_free_ char *what = xasprintf("cannot open %s of domain %s", label, domain);
		r = virt_last_error(what, why);
		goto fail;
	}
	/*
	 * The socket's handle first, its reference and watch set before any
	 * callback can run (nothing is written on the other end before we
	 * return); the stream's callback last: from then on the event thread
	 * owns p, and this thread does not touch it again.
	 */
	p->refs = 1;
	if ((p->watch = virEventAddHandle(p->fd, VIR_EVENT_HANDLE_READABLE, on_fd, p, pump_unref)) < 0) {
		*why = xasprintf("cannot watch the %s's socket", label);
		r = -EIO;
		(void)virStreamAbort(p->st);
		goto fail;
	}
	p->refs = 2;
	if (virStreamEventAddCallback(p->st, VIR_STREAM_EVENT_READABLE, on_stream, p, pump_unref) < 0) {
		_cleanup_free_ char *what = xasprintf("cannot watch the %s's stream", label);

		r = virt_last_error(what, why);
		/* Only the socket's handle holds p: its removal frees p, the stream and the socket. */
		p->refs = 1;
		p->closed = true;
		(void)virStreamAbort(p->st);
		close(p->fd);
		virEventRemoveHandle(p->watch);
		virDomainFree(d);
		close(sv[0]);
		return r;
	}
	virDomainFree(d);
	*ret_fd = sv[0];
	return 0;
fail:
	if (p->st)
		virStreamFree(p->st);
	free(p->name);
	free(p);
	virDomainFree(d);
	close(sv[0]);
	close(sv[1]);
	return r;
}

int virt_channel_open(struct virt *v, const char *domain, const char *channel, int *ret_fd, char **why)
{
	_cleanup_free_ char *what = xasprintf("channel %s", channel);

	return stream_open(v, domain, channel, what, open_channel, ret_fd, why);
}

int virt_console_open(struct virt *v, const char *domain, int *ret_fd, char **why)
{
	return stream_open(v, domain, NULL, "console", open_console, ret_fd, why);
}
