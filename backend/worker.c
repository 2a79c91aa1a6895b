/*
 * worker: see worker.h. One thread and one pipe per job: jobs are rare and
 * slow. The thread is joined on the loop once its byte arrived (or by
 * worker_finish), so nothing of a job outlives its done().
 */
#include "backend/worker.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <unistd.h>

#include "common/util.h"

struct worker_job {
	void (*work)(void *arg);
	void (*done)(void *arg);
	void *arg;
	int pipe[2];
	struct event *ev;
	pthread_t thread;
	atomic_bool cancel;
};

/* The job the current thread works for: what worker_cancel_flag() answers. */
static _Thread_local struct worker_job *current;

static void *job_thread(void *p)
{
	struct worker_job *j = p;

	current = j;
	j->work(j->arg);
	(void)write_all(j->pipe[1], "x", 1);
	return NULL;
}

/* On the loop: join the finished thread, free the job, then report. */
static void job_end(struct worker_job *j)
{
	void (*done)(void *) = j->done;
	void *arg = j->arg;

	pthread_join(j->thread, NULL);
	event_free(j->ev);
	close(j->pipe[0]);
	close(j->pipe[1]);
	free(j);
	done(arg);
}

static void job_finished(evutil_socket_t fd, short what, void *p)
{
	char c;

	(void)what;
	(void)!read(fd, &c, 1);
	job_end(p);
}

int worker_start(struct event_base *base, void (*work)(void *arg), void (*done)(void *arg), void *arg,
		 struct worker_job **ret)
{
	struct worker_job *j = xcalloc(1, sizeof(*j));
	sigset_t all, old;
	int r;

	j->work = work;
	j->done = done;
	j->arg = arg;
	atomic_init(&j->cancel, false);
	if (pipe2(j->pipe, O_CLOEXEC) < 0) {
		r = -errno;
		free(j);
		return r;
	}
	j->ev = event_new(base, j->pipe[0], EV_READ, job_finished, j);
	event_add(j->ev, NULL);
	if (ret)
		*ret = j;
	/* Signals are for the loop's thread: the worker blocks them all (it inherits the mask). */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	r = pthread_create(&j->thread, NULL, job_thread, j);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r != 0) {
		if (ret)
			*ret = NULL;
		event_free(j->ev);
		close(j->pipe[0]);
		close(j->pipe[1]);
		free(j);
		return -r;
	}
	return 0;
}

int worker_run(struct event_base *base, void (*work)(void *arg), void (*done)(void *arg), void *arg)
{
	return worker_start(base, work, done, arg, NULL);
}

void worker_cancel(struct worker_job *j)
{
	atomic_store(&j->cancel, true);
}

const atomic_bool *worker_cancel_flag(void)
{
	return current ? &current->cancel : NULL;
}

void worker_finish(struct worker_job *j)
{
	job_end(j);	/* pthread_join waits for work(); its byte stays unread in the pipe closed here */
}
