/*
 * deliveries: what fleetd does with verified webhook deliveries the
 * listener sends up (core/listener.c reads them): record a group of them in
 * one transaction, each in a savepoint of its own (store/deliveries.c), and
 * make each one's answer, which the listener may send only after this
 * returned (the commit is behind it). Group commit is what makes a durable
 * acknowledgement cheap: one fsync for the whole group.
 */
#ifndef FLEET_CORE_DELIVERIES_H
#define FLEET_CORE_DELIVERIES_H

#include <stddef.h>

#include "hooks/proto.h"

struct fleetd;

/*
 * Record d[0..n) and fill answers[i] for d[i] (seq copied; caller clears
 * each): 202 accepted, 200 duplicate or no-run (the delivery's reply body,
 * Slack's challenge, if it has one), 404 its route is gone, 429 a matching
 * agent's queue is full, 503 it could not be stored. A store failure other
 * than those (or a failed commit) rolls the whole group back and answers
 * 503 to all of it: never 2xx for what is not committed. Kicks the run
 * queue once if runs were queued. Returns how many were answered 2xx.
 */
size_t deliveries_commit(struct fleetd *f, const struct hook_delivery *d, size_t n, struct hook_answer *answers);

#endif
