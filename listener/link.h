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
struct hook_answer;
struct link;

#define LINK_OUT_MAX (64u << 20)	/* bytes waiting to be written to fleetd; more is refused */

struct link_ops {
	/* One JSON message from fleetd (borrowed: valid during the call). */
	void (*message)(const json_t *msg, void *arg);
	/* One answer from fleetd (borrowed: valid during the call). */
	void (*answer)(const struct hook_answer *a, void *arg);
	/* The link is down: error is false when fleetd closed it, true on a protocol or socket error. */
	void (*down)(bool error, void *arg);
};

/* Serve fd (taken: closed by link_free) on base. -errno. */
int link_start(struct event_base *base, int fd, const struct link_ops *ops, void *arg, struct link **ret);
void link_free(struct link *l);
/*
 * Queue a JSON msg (link_send) or an encoded frame of len bytes (a
 * delivery's, copied) to fleetd. -ENOTCONN when the link is down, -ENOBUFS
 * when LINK_OUT_MAX would be passed, -EMSGSIZE, -ENOMEM.
 */
int link_send(struct link *l, const json_t *msg);
int link_send_frame(struct link *l, const unsigned char *frame, size_t len);
bool link_up(const struct link *l);
/* Bytes not yet written to fleetd. */
size_t link_pending_out(const struct link *l);

#endif
