/*
 * worker: run one blocking job (a libvirt snapshot, a revert, a copy of a
 * user agent's home, emptying a trash) on its own thread and get its
 * completion back on the event loop. work() must touch nothing the loop
 * thread uses; done() runs on the loop thread, after worker_run/start
 * returned. The thread blocks every signal (they are the loop's).
 */
#ifndef FLEET_WORKER_H
#define FLEET_WORKER_H

#include <stdatomic.h>

struct event_base;
struct worker_job;

/* Start work(arg) on a new thread; done(arg) follows on base. -errno if it cannot start. */
int worker_run(struct event_base *base, void (*work)(void *arg), void (*done)(void *arg), void *arg);

/*
 * The same, with a handle in *ret for worker_cancel and worker_finish; it
 * is valid until done() has been called (the job is freed just before).
 */
int worker_start(struct event_base *base, void (*work)(void *arg), void (*done)(void *arg), void *arg,
		 struct worker_job **ret);

/* Ask the job to stop early: its work() sees worker_cancelled() turn true. Any thread. */
void worker_cancel(struct worker_job *j);

/* In work(): the calling job's cancel flag, for code that polls one (never NULL on a worker thread). */
const atomic_bool *worker_cancel_flag(void);

/*
 * On the loop thread, when it cannot wait for the loop (shutdown): wait for
 * work() to end and call done() now, instead of from the loop.
 */
void worker_finish(struct worker_job *j);

#endif
