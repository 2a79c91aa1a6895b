/*
 * link: the listener's end of the socketpair to fleetd (fd 3): whole frames
 * in (hooks/proto.h), handed to a callback one decoded message at a time,
 * and frames out, both through bounded buffers. When fleetd closes its end,
 * or breaks the protocol, the link goes down once and says so.
 */
#ifndef FLEET_LISTENER_LINK_H
#define FLEET_LISTENER_LINK_H

#include <jansson.h>
#include <stdbool.h>

struct event_base;
struct link;

#define LINK_OUT_MAX (64u << 20)	/* bytes waiting to be written to fleetd; more is refused */

struct link_ops {
	/* One message from fleetd (borrowed: valid during the call). */
	void (*message)(const json_t *msg, void *arg);
	/* The link is down: error is false when fleetd closed it, true on a protocol or socket error. */
	void (*down)(bool error, void *arg);
};

/* Serve fd (taken: closed by link_free) on base. -errno. */
int link_start(struct event_base *base, int fd, const struct link_ops *ops, void *arg, struct link **ret);
void link_free(struct link *l);
/*
 * Queue msg and tail_len bytes of tail (a delivery's body; NULL when 0) as
 * one frame to fleetd. -ENOTCONN when the link is down, -ENOBUFS when
 * LINK_OUT_MAX would be passed, -EMSGSIZE, -ENOMEM.
 */
int link_send(struct link *l, const json_t *msg, const void *tail, size_t tail_len);
bool link_up(const struct link *l);
/* Bytes not yet written to fleetd. */
size_t link_pending_out(const struct link *l);

#endif
