/*
 * link: see link.h. A bufferevent on the socketpair; its input is bounded
 * by the read high watermark (one frame at most, plus one read), and every
 * frame's bytes are wiped once decoded, as a routes frame carries secrets.
 */
#include "listener/link.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "hooks/proto.h"

struct link {
	struct bufferevent *bev;
	const struct link_ops *ops;
	void *arg;
	bool down;
};

static void link_down(struct link *l, bool error)
{
	if (l->down)
		return;
	l->down = true;
	bufferevent_disable(l->bev, EV_READ | EV_WRITE);
	l->ops->down(error, l->arg);
}

static void link_read(struct bufferevent *bev, void *arg)
{
	struct link *l = arg;
	struct evbuffer *in = bufferevent_get_input(bev);

	while (!l->down) {
		size_t avail = evbuffer_get_length(in);
		unsigned char *p;
		long need;
		json_t *msg = NULL;
		struct hook_answer a = { 0 };
		const char *why = NULL;
		int kind, r;

		if (avail < HOOK_FRAME_HEAD)
			return;
		need = hook_frame_need(evbuffer_pullup(in, HOOK_FRAME_HEAD), avail);
		if (need < 0) {
			log_error("link: fleetd sent a frame of a length out of bounds; closing the link");
			link_down(l, true);
			return;
		}
		if (avail < (size_t)need)
			return;
		p = evbuffer_pullup(in, need);
		if (!p)
			abort();	/* out of memory: the rlimit says we are done */
		/* fleetd sends answers (binary) and route tables (JSON); nothing else. */
		kind = hook_frame_kind(p, (size_t)need, &why);
		if (kind == HOOK_KIND_ANSWER)
			r = hook_answer_decode(p, (size_t)need, &a, &why);
		else if (kind == HOOK_KIND_JSON)
			r = hook_frame_decode(p, (size_t)need, &msg, &why);
		else if (kind < 0)
			r = kind;
		else {
			r = -EBADMSG;
			why = "a delivery from fleetd";
		}
		if (kind != HOOK_KIND_ANSWER)
			explicit_bzero(p, (size_t)need);	/* a routes frame carries secrets */
		evbuffer_drain(in, (size_t)need);
		if (r < 0) {
			log_error("link: fleetd sent a malformed frame (%s); closing the link", why);
			link_down(l, true);
			return;
		}
		if (kind == HOOK_KIND_ANSWER) {
			l->ops->answer(&a, l->arg);
			hook_answer_clear(&a);
		} else {
			l->ops->message(msg, l->arg);
			json_decref(msg);
		}
	}
}

static void link_event(struct bufferevent *bev, short what, void *arg)
{
	struct link *l = arg;

	(void)bev;
	if (what & BEV_EVENT_EOF) {
		log_info("link: fleetd closed the link");
		link_down(l, false);
	} else if (what & BEV_EVENT_ERROR) {
		log_error("link: the link to fleetd failed: %s", strerror(errno));
		link_down(l, true);
	}
}

int link_start(struct event_base *base, int fd, const struct link_ops *ops, void *arg, struct link **ret)
{
	struct link *l;

	if (evutil_make_socket_nonblocking(fd) < 0)
		return -errno;
	l = xcalloc(1, sizeof(*l));
	l->ops = ops;
	l->arg = arg;
	l->bev = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE);
	if (!l->bev) {
		free(l);
		return -ENOMEM;
	}
	/* The deliveries queued in one loop pass go out in one write (16 KiB by default: ten of 1 KiB). */
	bufferevent_set_max_single_write(l->bev, 1 << 20);
	/* Stop reading once a whole frame of the largest size is in; link_read consumes whole frames. */
	bufferevent_setwatermark(l->bev, EV_READ, 0, HOOK_FRAME_HEAD + HOOK_FRAME_MAX);
	bufferevent_setcb(l->bev, link_read, NULL, link_event, l);
	if (bufferevent_enable(l->bev, EV_READ | EV_WRITE) < 0) {
		bufferevent_free(l->bev);
		free(l);
		return -EIO;
	}
	*ret = l;
	return 0;
}

void link_free(struct link *l)
{
	if (!l)
		return;
	bufferevent_free(l->bev);
	free(l);
}

int link_send_frame(struct link *l, const unsigned char *frame, size_t len)
{
	if (l->down)
		return -ENOTCONN;
	if (evbuffer_get_length(bufferevent_get_output(l->bev)) + len > LINK_OUT_MAX)
		return -ENOBUFS;
	return bufferevent_write(l->bev, frame, len) < 0 ? -ENOMEM : 0;
}

int link_send(struct link *l, const json_t *msg)
{
	unsigned char *frame;
	size_t len;
	int r;

	if (l->down)
		return -ENOTCONN;
	if ((r = hook_frame_encode(msg, &frame, &len)) < 0)
		return r;
	r = link_send_frame(l, frame, len);
	free(frame);
	return r;
}

bool link_up(const struct link *l)
{
	return l && !l->down;
}

size_t link_pending_out(const struct link *l)
{
	return evbuffer_get_length(bufferevent_get_output(l->bev));
}
