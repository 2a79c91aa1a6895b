/*
 * user/exec.c: a command of a user agent, streamed on fleetd's loop. Each
 * runs in its own sandbox (sandbox_launch_command: the agent's spare, set
 * up ahead, when it has one) that dies with fleetd; its
 * stdout and stderr are read as they come and handed to the caller, its
 * stdin is written from the request, the sandbox's report pipe says why a
 * command could not start, and a timeout or a cancel kills the sandbox.
 * Backpressure: a paused exec stops reading its pipes, so a command that
 * prints faster than its client reads blocks on a full pipe.
 */
#include "user/internal.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/spawn.h"
#include "common/util.h"
#include "model/agent.h"
#include "model/fleetd.h"

struct exec_handle {
	struct exec_handle *next;
	char *agent;
	struct exec_callbacks cb;
	struct user_launch_proc proc;
	int out_fd, err_fd, in_fd;
	struct event *ev_out, *ev_err, *ev_in, *ev_report, *ev_pid, *ev_timer, *ev_done;
	char *stdin_data;
	size_t stdin_len, stdin_off;
	char report_buf[sizeof(struct user_launch_report)];
	size_t report_len;
	struct user_launch_report report;	/* the last FAILED or EXITED record */
	bool have_report, reaped, timed_out, killed;
	bool paused;		/* the reader is slow: out and err are not read (ev_out, ev_err not added) */
	int init_status;
};

static void exec_watch_output(struct exec_handle *h);

bool user_exec_active(const char *agent)
{
	for (struct exec_handle *h = us->execs; h; h = h->next)
		if (!h->reaped && strcmp(h->agent, agent) == 0)
			return true;
	return false;
}

static void exec_free(struct exec_handle *h)
{
	struct event *evs[] = { h->ev_out, h->ev_err, h->ev_in, h->ev_report, h->ev_pid, h->ev_timer, h->ev_done };
	int fds[] = { h->out_fd, h->err_fd, h->in_fd, h->proc.report_fd, h->proc.pidfd };

	for (size_t i = 0; i < ARRAY_SIZE(evs); i++)
		if (evs[i])
			event_free(evs[i]);
	for (size_t i = 0; i < ARRAY_SIZE(fds); i++)
		if (fds[i] >= 0)
			close(fds[i]);
	free(h->stdin_data);
	free(h->agent);
	free(h);
}

/* Deliver done() once and free h. */
static void exec_finish(struct exec_handle *h)
{
	struct exec_result res = { .exit_code = -1, .timed_out = h->timed_out };
	_cleanup_free_ char *why = NULL;

	for (struct exec_handle **p = &us->execs; *p; p = &(*p)->next)
		if (*p == h) {
			*p = h->next;
			break;
		}
	if (h->have_report && h->report.kind == LAUNCH_REPORT_FAILED) {
		res.error = -h->report.value;
		res.why = why = sandbox_report_why(&h->report, h->report.stage == LAUNCH_STAGE_EXEC ? "the command" : NULL);
	} else if (h->have_report && h->report.kind == LAUNCH_REPORT_EXITED) {
		int st = h->report.value;
		if (WIFEXITED(st))
			res.exit_code = WEXITSTATUS(st);
		else
			res.signal = WTERMSIG(st);
	} else if (h->reaped && WIFSIGNALED(h->init_status)) {
		res.signal = WTERMSIG(h->init_status);	/* the sandbox was killed: timeout, cancel, stop */
	} else {
		res.error = -EIO;
		res.why = "the sandbox ended without a status";
	}
	h->cb.done(h->cb.userdata, &res);
	exec_free(h);
}

static void on_done_event(evutil_socket_t fd, short what, void *arg)
{
	exec_finish(arg);
}

static void exec_maybe_done(struct exec_handle *h)
{
	if (!h->reaped || h->out_fd >= 0 || h->err_fd >= 0 || h->proc.report_fd >= 0 || h->ev_done)
		return;
	/* Finish from the loop, never from inside exec() or exec_cancel(). */
	h->ev_done = evtimer_new(us->f->base, on_done_event, h);
	event_active(h->ev_done, EV_TIMEOUT, 0);
}

static void close_stream(struct exec_handle *h, int *fd, struct event **ev)
{
	if (*ev) {
		event_free(*ev);
		*ev = NULL;
	}
	if (*fd >= 0) {
		close(*fd);
		*fd = -1;
	}
}

static void on_output(evutil_socket_t fd, short what, void *arg)
{
	struct exec_handle *h = arg;
	bool is_out = fd == h->out_fd;
	char buf[65536];
	ssize_t n = read(fd, buf, sizeof(buf));

	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		if (is_out)
			close_stream(h, &h->out_fd, &h->ev_out);
		else
			close_stream(h, &h->err_fd, &h->ev_err);
		exec_maybe_done(h);
		return;
	}
	h->cb.output(h->cb.userdata, is_out ? EXEC_STDOUT : EXEC_STDERR, buf, (size_t)n);
}

static void on_stdin(evutil_socket_t fd, short what, void *arg)
{
	struct exec_handle *h = arg;
	ssize_t n = write(fd, h->stdin_data + h->stdin_off, h->stdin_len - h->stdin_off);

	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n > 0)
		h->stdin_off += (size_t)n;
	if (n < 0 || h->stdin_off >= h->stdin_len)	/* done, or the command closed its stdin (EPIPE) */
		close_stream(h, &h->in_fd, &h->ev_in);
}

static void on_report(evutil_socket_t fd, short what, void *arg)
{
	struct exec_handle *h = arg;
	ssize_t n = read(fd, h->report_buf + h->report_len, sizeof(h->report_buf) - h->report_len);

	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		close_stream(h, &h->proc.report_fd, &h->ev_report);
		exec_maybe_done(h);
		return;
	}
	h->report_len += (size_t)n;
	if (h->report_len == sizeof(h->report_buf)) {
		struct user_launch_report r;

		memcpy(&r, h->report_buf, sizeof(r));
		/* A FAILED from the payload is followed by EXITED 127 from the init: keep the reason. */
		if (r.kind == LAUNCH_REPORT_FAILED ||
		    (r.kind == LAUNCH_REPORT_EXITED && !(h->have_report && h->report.kind == LAUNCH_REPORT_FAILED))) {
			h->report = r;
			h->have_report = true;
		}
		h->report_len = 0;
	}
}

static void on_init_exit(evutil_socket_t fd, short what, void *arg)
{
	struct exec_handle *h = arg;
	int status;

	if (spawn_wait(h->proc.pidfd, true, &status) < 0)
		return;
	h->reaped = true;
	h->init_status = status;
	spare_now(h->agent);	/* the command is over: the spare it deferred has the host now (spare.c) */
	event_free(h->ev_pid);
	h->ev_pid = NULL;
	if (h->ev_timer) {
		event_free(h->ev_timer);
		h->ev_timer = NULL;
	}
	close_stream(h, &h->in_fd, &h->ev_in);
	exec_maybe_done(h);
}

/* Watch the output pipes, or stop: a pause holds unless the exec is being killed. */
static void exec_watch_output(struct exec_handle *h)
{
	bool read = !h->paused || h->killed;

	if (h->ev_out)
		read ? event_add(h->ev_out, NULL) : event_del(h->ev_out);
	if (h->ev_err)
		read ? event_add(h->ev_err, NULL) : event_del(h->ev_err);
}

static void on_timeout(evutil_socket_t fd, short what, void *arg)
{
	struct exec_handle *h = arg;

	h->timed_out = true;
	h->killed = true;
	(void)spawn_signal(h->proc.pidfd, SIGKILL);
	exec_watch_output(h);	/* what is left in the pipes is read to the end */
}

int user_exec(struct fleetd *f, const struct agent *a, const struct exec_request *req,
	      const struct exec_callbacks *cb, struct exec_handle **ret, char **why)
{
	struct user_launch_spec spec = { .argv = req->argv, .stdin_fd = -1, .die_with_parent = true };
	int out[2] = { -1, -1 }, err[2] = { -1, -1 }, in[2] = { -1, -1 };
	struct exec_handle *h;
	uid_t uid;
	int r;

	if ((r = user_ensure_init(f, why)) < 0)
		return r;
	if (!req->argv || !req->argv[0] || !*req->argv[0]) {
		*why = xstrdup("no command given");
		return -EINVAL;
	}
	if (req->root) {
		*why = xstrdup("a user agent has no root; commands run as the agent's user");
		return -EPERM;
	}
	/*
	 * A command must not change the home while it is copied, nor run in a home about to be swapped.
	 * The leftover-freeze check is sandbox_launch_command's: a spare does not need it.
	 */
	if ((r = user_agent_usable(f, a, &uid, why)) < 0)
		return r;
	if (pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0 ||
	    (req->stdin_len > 0 && pipe2(in, O_CLOEXEC) < 0)) {
		r = -errno;
		*why = xasprintf("cannot create pipes: %s", strerror(-r));
		goto fail;
	}
	spec.stdout_fd = out[1];
	spec.stderr_fd = err[1];
	spec.stdin_fd = in[0];
	spec.files = req->files;
	spec.n_files = req->n_files;
	h = xcalloc(1, sizeof(*h));
	if (req->n_files > 0) {
		/* The command learns where its secret files are; the sandbox writes them (launch.c). */
		_cleanup_free_ const char **env = NULL;
		size_t n = 0;

		while (req->env && req->env[n])
			n++;
		env = xcalloc(n + 2, sizeof(*env));
		memcpy(env, req->env, n * sizeof(*env));
		env[n] = "FLEET_SECRETS_DIR=" USER_SECRETS_DIR;
		r = sandbox_launch_command(f, a, uid, &spec, env, &h->proc, why);
	} else {
		r = sandbox_launch_command(f, a, uid, &spec, req->env, &h->proc, why);
	}
	if (r < 0) {
		free(h);
		goto fail;
	}
	close(out[1]);
	close(err[1]);
	if (in[0] >= 0)
		close(in[0]);
	h->agent = xstrdup(a->name);
	h->cb = *cb;
	h->out_fd = out[0];
	h->err_fd = err[0];
	h->in_fd = in[1];
	fcntl(h->out_fd, F_SETFL, O_NONBLOCK);
	fcntl(h->err_fd, F_SETFL, O_NONBLOCK);
	fcntl(h->proc.report_fd, F_SETFL, O_NONBLOCK);
	h->ev_out = event_new(f->base, h->out_fd, EV_READ | EV_PERSIST, on_output, h);
	h->ev_err = event_new(f->base, h->err_fd, EV_READ | EV_PERSIST, on_output, h);
	h->ev_report = event_new(f->base, h->proc.report_fd, EV_READ | EV_PERSIST, on_report, h);
	h->ev_pid = event_new(f->base, h->proc.pidfd, EV_READ, on_init_exit, h);
	event_add(h->ev_out, NULL);
	event_add(h->ev_err, NULL);
	event_add(h->ev_report, NULL);
	event_add(h->ev_pid, NULL);
	if (h->in_fd >= 0) {
		fcntl(h->in_fd, F_SETFL, O_NONBLOCK);
		h->stdin_data = xmalloc(req->stdin_len);
		memcpy(h->stdin_data, req->stdin_data, req->stdin_len);
		h->stdin_len = req->stdin_len;
		h->ev_in = event_new(f->base, h->in_fd, EV_WRITE | EV_PERSIST, on_stdin, h);
		event_add(h->ev_in, NULL);
	}
	if (req->timeout_s > 0) {
		struct timeval tv = { req->timeout_s, 0 };
		h->ev_timer = evtimer_new(f->base, on_timeout, h);
		evtimer_add(h->ev_timer, &tv);
	}
	h->next = us->execs;
	us->execs = h;
	*ret = h;
	return 0;
fail:
	for (int i = 0; i < 2; i++) {
		if (out[i] >= 0)
			close(out[i]);
		if (err[i] >= 0)
			close(err[i]);
		if (in[i] >= 0)
			close(in[i]);
	}
	return r;
}

void user_exec_cancel(struct exec_handle *h)
{
	if (!h)
		return;
	h->killed = true;
	if (!h->reaped)
		(void)spawn_signal(h->proc.pidfd, SIGKILL);
	exec_watch_output(h);	/* also when it ended but paused output still waits in the pipes */
}

/*
 * Unread output waits in the pipes (64 KiB each by default), and the
 * command blocks writing once they are full: that is the whole bound.
 */
void user_exec_pause(struct exec_handle *h, bool paused)
{
	h->paused = paused;
	exec_watch_output(h);
}

void user_exec_kill_agent(const char *agent)
{
	spare_drop(agent);
	for (struct exec_handle *h = us->execs; h; h = h->next)
		if (!h->reaped && strcmp(h->agent, agent) == 0) {
			h->killed = true;
			(void)spawn_signal(h->proc.pidfd, SIGKILL);
			exec_watch_output(h);
		}
}

void user_exec_term_agent(const char *agent)
{
	spare_drop(agent);	/* a stop: the next command (if any) gets a new one */
	for (struct exec_handle *h = us->execs; h; h = h->next)
		if (!h->reaped && strcmp(h->agent, agent) == 0)
			(void)spawn_signal(h->proc.pidfd, SIGTERM);
}

/* Execs die with fleetd (their clients are gone). */
void user_execs_shutdown(void)
{
	spares_shutdown();
	while (us->execs) {
		struct exec_handle *h = us->execs;
		int status;

		(void)spawn_signal(h->proc.pidfd, SIGKILL);
		h->killed = true;
		if (!h->reaped && spawn_wait(h->proc.pidfd, false, &status) == 0) {
			h->reaped = true;
			h->init_status = status;
		}
		exec_finish(h);
	}
}
