/*
 * worker: run one blocking job (a libvirt snapshot, a revert) on its own
 * thread and get its completion back on the event loop. work() must touch
 * nothing the loop thread uses; done() runs on the loop thread.
 */
#ifndef FLEET_WORKER_H
#define FLEET_WORKER_H

struct event_base;

/* Start work(arg) on a new thread; done(arg) follows on base. -errno if it cannot start. */
int worker_run(struct event_base *base, void (*work)(void *arg), void (*done)(void *arg), void *arg);

#endif
