/* worker: see worker.h. One thread and one pipe per job: jobs are rare and slow. */
#include "backend/worker.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include "common/util.h"

struct job {
	void (*work)(void *arg);
	void (*done)(void *arg);
	void *arg;
	int pipe[2];
	struct event *ev;
};

static void *job_thread(void *p)
{
	struct job *j = p;

	j->work(j->arg);
	(void)write_all(j->pipe[1], "x", 1);
	return NULL;
}

static void job_finished(evutil_socket_t fd, short what, void *p)
{
	struct job *j = p;
	char c;

	(void)read(fd, &c, 1);
	event_free(j->ev);
	close(j->pipe[0]);
	close(j->pipe[1]);
	j->done(j->arg);
	free(j);
}

int worker_run(struct event_base *base, void (*work)(void *arg), void (*done)(void *arg), void *arg)
{
	struct job *j = xcalloc(1, sizeof(*j));
	pthread_attr_t attr;
	pthread_t t;
	int r;

	j->work = work;
	j->done = done;
	j->arg = arg;
	if (pipe2(j->pipe, O_CLOEXEC) < 0) {
		r = -errno;
		free(j);
		return r;
	}
	j->ev = event_new(base, j->pipe[0], EV_READ, job_finished, j);
	event_add(j->ev, NULL);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	r = pthread_create(&t, &attr, job_thread, j);
	pthread_attr_destroy(&attr);
	if (r != 0) {
		event_free(j->ev);
		close(j->pipe[0]);
		close(j->pipe[1]);
		free(j);
		return -r;
	}
	return 0;
}
