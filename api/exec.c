/*
 * api_exec: POST /v1/agents/NAME/exec runs one command in the agent's
 * environment and streams its output back as chunked JSON lines:
 *
 *   {"stream": "stdout", "data": "<base64>"}
 *   {"stream": "stderr", "data": "<base64>"}
 *   {"exit_code": 0}  |  {"signal": 9}  |  {"timed_out": true, ...}  |  {"error": "..."}
 *
 * The last line always says how it ended. When the client goes away the
 * exec is cancelled; the backend still calls done() once, and only then is
 * the stream's state freed.
 *
 * Flow control: a command can print faster than its client reads. Once
 * more than EXEC_HIGH_WATER bytes of the reply wait unsent in the
 * connection's output buffer, the backend stops reading the command's
 * output (exec_pause); the command then blocks on a full pipe or SSH
 * window. When the client has taken all but EXEC_LOW_WATER of it, reading
 * resumes. So a stream holds at most about EXEC_HIGH_WATER plus one chunk
 * in fleetd, plus what the backend buffers (a pipe, an SSH window).
 */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <string.h>

#include "api/exec.h"
#include "api/handler.h"
#include "api/server.h"
#include "backend/backend.h"
#include "core/backends.h"
#include "core/activity.h"
#include "core/run_exec.h"
#include "core/secret_files.h"
#include "core/secret_hold.h"
#include "common/base64.h"
#include "model/agent.h"
#include "model/fleetd.h"
#include "common/log.h"

#define EXEC_MAX_ARGS 4096
#define EXEC_MAX_TIMEOUT 86400
#define EXEC_HIGH_WATER (1024 * 1024)	/* unsent reply bytes that pause the command's output */
#define EXEC_LOW_WATER (256 * 1024)	/* ... and that resume it */

/*
 * libevent 2.1 and a client that hangs up mid-stream: the request is
 * detached from its dead connection but not freed (it "is still being used
 * for sending"); evhttp_send_reply_end() then frees it. So the stream keeps
 * its request until done() and always ends it. On some write errors libevent
 * instead calls the request callback again (without a URI); the server knows
 * the request as a stream (api_stream_begin) and calls on_conn_failed()
 * instead of routing it, so that call changes nothing else.
 */
struct exec_reply {
	struct evhttp_request *req;
	bool gone;			/* the client hung up: send nothing more */
	bool paused;			/* the backend was told to stop reading output */
	struct evhttp_connection *conn;
	const struct backend_ops *ops;
	struct exec_handle *handle;
	char *agent;
	struct fleetd *fleetd;
	bool holding;			/* it was given the agent's secrets: no snapshot until it ends */
	struct api_stream stream;	/* the server's note of this reply in flight */
};

/*
 * The connection failed under a stream: nothing drains it any more, so a
 * paused exec would wait forever. Treat it as the client going away, and
 * drop the close callback, which could otherwise run after done() freed s.
 */
static void on_conn_failed(void *userdata)
{
	struct exec_reply *s = userdata;

	if (s->gone)
		return;
	s->gone = true;
	api_conn_set_closecb(s->conn, NULL, NULL);
	log_info("agent '%s': exec client's connection failed; cancelling the command", s->agent);
	s->ops->exec_cancel(s->handle);
}

/*
 * Pause or resume the command's output by what the client left unsent.
 * While paused, the write low watermark makes libevent call on_drained()
 * when the buffer falls to EXEC_LOW_WATER rather than only when it is empty.
 */
static void stream_flow(struct exec_reply *s)
{
	struct bufferevent *bev;
	size_t unsent;

	if (s->gone)
		return;
	bev = evhttp_connection_get_bufferevent(s->conn);
	unsent = evbuffer_get_length(bufferevent_get_output(bev));
	if (!s->paused && unsent >= EXEC_HIGH_WATER) {
		s->paused = true;
		bufferevent_setwatermark(bev, EV_WRITE, EXEC_LOW_WATER, 0);
		s->ops->exec_pause(s->handle, true);
	} else if (s->paused && unsent <= EXEC_LOW_WATER) {
		s->paused = false;
		bufferevent_setwatermark(bev, EV_WRITE, 0, 0);
		s->ops->exec_pause(s->handle, false);
	}
}

/*
 * libevent: the connection's output fell to its write low watermark. Set
 * with each chunk; evhttp_send_reply_end() replaces it, so it never runs
 * after done().
 */
static void on_drained(struct evhttp_connection *conn, void *userdata)
{
	stream_flow(userdata);
}

static void stream_line(struct exec_reply *s, json_t *line)
{
	struct evbuffer *buf;
	char *text;

	if (!s->gone) {
		text = json_dumps(line, JSON_COMPACT);
		buf = evbuffer_new();
		if (!text || !buf)
			abort();
		evbuffer_add_printf(buf, "%s\n", text);
		evhttp_send_reply_chunk_with_cb(s->req, buf, on_drained, s);
		evbuffer_free(buf);
		free(text);
	}
	json_decref(line);
}

static void on_output(void *userdata, enum exec_stream stream, const char *data, size_t len)
{
	struct exec_reply *s = userdata;
	char *b64;

	if (s->gone)
		return;
	b64 = base64_encode(data, len);
	stream_line(s, json_pack("{s:s, s:s}", "stream", stream == EXEC_STDERR ? "stderr" : "stdout", "data", b64));
	free(b64);
	stream_flow(s);
}

static void on_done(void *userdata, const struct exec_result *res)
{
	struct exec_reply *s = userdata;

	if (res->error < 0)
		stream_line(s, json_pack("{s:s}", "error", res->why ? res->why : strerror(-res->error)));
	else if (res->timed_out)
		stream_line(s, json_pack("{s:b, s:s}", "timed_out", 1, "error", "the command timed out and was killed"));
	else if (res->signal > 0)
		stream_line(s, json_pack("{s:i}", "signal", res->signal));
	else
		stream_line(s, json_pack("{s:i}", "exit_code", res->exit_code));
	if (!s->gone) {
		api_conn_set_closecb(s->conn, NULL, NULL);
		/* libevent ends the reply when its output is empty, not at a watermark */
		bufferevent_setwatermark(evhttp_connection_get_bufferevent(s->conn), EV_WRITE, 0, 0);
	} else
		log_info("agent '%s': exec finished after its client went away", s->agent);
	/* Ends the stream, or frees the request libevent detached from its dead connection. */
	evhttp_send_reply_end(s->req);
	api_stream_end(&s->stream);
	if (s->holding)
		secret_hold_leave(s->fleetd, s->agent);
	activity_end(s->fleetd, s->agent);
	free(s->agent);
	free(s);
}

static void on_client_gone(struct evhttp_connection *conn, void *userdata)
{
	struct exec_reply *s = userdata;

	log_info("agent '%s': exec client went away; cancelling the command", s->agent);
	s->gone = true;
	s->ops->exec_cancel(s->handle);
}

/* Build a NULL-terminated string vector from a JSON array of strings; replies 400 on error. */
static char **argv_from_json(struct api_call *c, json_t *arr)
{
	size_t n = json_array_size(arr), i;
	char **argv;
	json_t *v;

	if (n == 0 || n > EXEC_MAX_ARGS) {
		api_error(c, 400, "invalid", "argv must hold 1 to %d strings", EXEC_MAX_ARGS);
		return NULL;
	}
	argv = xcalloc(n + 1, sizeof(*argv));
	json_array_foreach(arr, i, v) {
		if (!json_is_string(v) || (i == 0 && json_string_length(v) == 0)) {
			api_error(c, 400, "invalid", "argv[%zu] must be a%s string", i, i == 0 ? " non-empty" : "");
			for (size_t k = 0; k < i; k++)
				free(argv[k]);
			free(argv);
			return NULL;
		}
		argv[i] = xstrdup(json_string_value(v));
	}
	return argv;
}

static bool env_name_ok(const char *k)
{
	if (!*k || (*k >= '0' && *k <= '9'))
		return false;
	for (; *k; k++)
		if (!((*k >= 'A' && *k <= 'Z') || (*k >= '0' && *k <= '9') || *k == '_'))
			return false;
	return true;
}

void api_agent_exec(struct api_call *c)
{
	static const char *const spec[] = { "argv:a", "stdin:s", "root:b", "timeout_s:i", "env:o", "secrets:b", "secret_files:b", NULL };
	_cleanup_(agent_freep) struct agent *a = NULL;
	_cleanup_free_ unsigned char *stdin_data = NULL;
	_cleanup_free_ char *why_owned = NULL, *detail = NULL;
	struct exec_request req = { 0 };
	struct exec_callbacks cb = { on_output, on_done, NULL };
	const struct backend_ops *ops;
	struct exec_reply *s;
	char **argv = NULL, **env = NULL;
	size_t stdin_len = 0, n = 0;
	_cleanup_(secret_files_freep) struct secret_files *files = NULL;
	bool secrets = false;
	const char *why, *key;
	json_t *body, *v;
	int r;

	if (!(body = api_body_object(c, spec)))
		return;
	if (!(a = api_agent_param(c)))
		goto out;
	if (!(v = json_object_get(body, "argv"))) {
		api_error(c, 400, "missing_field", "field 'argv' is required");
		goto out;
	}
	if (!(argv = argv_from_json(c, v)))
		goto out;
	if ((v = json_object_get(body, "stdin")) &&
	    base64_decode(json_string_value(v), json_string_length(v), &stdin_data, &stdin_len) < 0) {
		api_error(c, 400, "invalid", "stdin must be base64");
		goto out;
	}
	if ((v = json_object_get(body, "timeout_s"))) {
		if (json_integer_value(v) < 0 || json_integer_value(v) > EXEC_MAX_TIMEOUT) {
			api_error(c, 400, "out_of_range", "timeout_s must be from 0 to %d", EXEC_MAX_TIMEOUT);
			goto out;
		}
		req.timeout_s = (int)json_integer_value(v);
	}
	req.root = json_is_true(json_object_get(body, "root"));
	if ((v = json_object_get(body, "env"))) {
		json_t *val;

		env = xcalloc(json_object_size(v) + 1, sizeof(*env));
		json_object_foreach(v, key, val) {
			if (!env_name_ok(key) || !json_is_string(val)) {
				api_error(c, 400, "invalid", "env: '%.64s' must be an upper-case NAME with a string value", key);
				goto out;
			}
			env[n++] = xasprintf("%s=%s", key, json_string_value(val));
		}
	}
	if (a->state == AGENT_DEFINED) {
		api_error(c, 409, "not_provisioned", "agent '%s': its environment is not provisioned", a->name);
		goto out;
	}
	/* After the caller's env: a secret wins over an --env of the same name. */
	if (json_is_true(json_object_get(body, "secrets"))) {
		if (!env)
			env = xcalloc(1, sizeof(*env));
		if ((r = run_env_add_secrets(c->fleetd, a->name, &env, &why_owned)) < 0) {
			api_error(c, r == -EBADMSG ? 409 : 500, r == -EBADMSG ? "secret_unreadable" : "internal", "%s",
				  why_owned);
			goto out;
		}
		secrets = true;
	}
	/* Or as files on a tmpfs in the environment for this exec only (FLEET_SECRETS_DIR). */
	if (json_is_true(json_object_get(body, "secret_files"))) {
		if ((r = secret_files_load(c->fleetd, a->name, &files, &why_owned)) < 0) {
			api_error(c, r == -EBADMSG ? 409 : 500, r == -EBADMSG ? "secret_unreadable" : "internal", "%s",
				  why_owned);
			goto out;
		}
		req.files = files->files;
		req.n_files = files->n;
		secrets = true;
	}
	if (!(ops = backend_get(c->fleetd, a->backend, &why))) {
		api_error(c, 503, "unavailable", "agent '%s': the %s backend is unavailable: %s", a->name,
			  backend_kind_to_string(a->backend), why);
		goto out;
	}

	req.argv = (const char *const *)argv;
	req.env = (const char *const *)env;
	req.stdin_data = (const char *)stdin_data;
	req.stdin_len = stdin_len;
	s = xcalloc(1, sizeof(*s));
	s->req = c->req;
	s->conn = evhttp_request_get_connection(c->req);
	s->ops = ops;
	s->agent = xstrdup(a->name);
	s->fleetd = c->fleetd;
	cb.userdata = s;
	if (secrets) {
		secret_hold_enter(c->fleetd, a->name, "an exec given them");	/* before they go in */
		s->holding = true;
	}
	activity_begin(c->fleetd, a->name);	/* a recent health check no longer stands for a snapshot */
	r = ops->exec(c->fleetd, a, &req, &cb, &s->handle, &why_owned);
	if (r < 0) {
		activity_end(c->fleetd, a->name);
		if (s->holding)
			secret_hold_leave(c->fleetd, a->name);
		free(s->agent);
		free(s);
		api_error(c, r == -EINVAL ? 400 : r == -EOPNOTSUPP ? 501 : 409,
			  r == -EINVAL ? "invalid" : r == -EOPNOTSUPP ? "unsupported" : "exec_failed", "agent '%s': exec failed: %s",
			  a->name, why_owned ? why_owned : strerror(-r));
		goto out;
	}
	/* The backend holds what it needs now; from here the answer streams. */
	detail = xasprintf("%s%s%s", req.root ? "(root) " : "", secrets ? "(secrets) " : "", argv[0]);
	api_audit_unsynced(c, "ok", detail);	/* survives kill -9; its fsync slowed the command's start (store/audit.c) */
	c->replied = true;
	evhttp_add_header(evhttp_request_get_output_headers(c->req), "Content-Type", "application/x-ndjson");
	evhttp_send_reply_start(c->req, 200, "OK");
	api_conn_set_closecb(s->conn, on_client_gone, s);
	api_stream_begin(c, &s->stream, on_conn_failed, s);
	log_info("agent '%s': exec %s%s by uid %ld", a->name, req.root ? "(root) " : "", argv[0], (long)c->uid);
out:
	strv_free(argv);
	run_env_free(env);
	json_decref(body);
}

/* GET /v1/agents/NAME/console[?bytes=N]: the tail of the console log, base64 (it need not be UTF-8). */
void api_agent_console(struct api_call *c)
{
	_cleanup_(agent_freep) struct agent *a = NULL;
	_cleanup_free_ char *text = NULL, *b64 = NULL;
	const struct backend_ops *ops;
	char arg[32];
	long max = 65536;
	size_t len = 0;
	const char *why;
	int r;

	if (!api_check_name_param(c))
		return;
	if (api_query(c, "bytes", arg, sizeof(arg)) && parse_long(arg, 1, 16L << 20, &max) < 0) {
		api_error(c, 400, "invalid", "bytes must be a number from 1 to 16777216");
		return;
	}
	if (!(a = api_agent_param(c)))
		return;
	if (a->state == AGENT_DEFINED || !(ops = backend_get(c->fleetd, a->backend, &why)) || !ops->console) {
		api_error(c, 409, "no_console", "agent '%s': has no console (only provisioned vm agents do)", a->name);
		return;
	}
	if ((r = ops->console(c->fleetd, a, (size_t)max, &text, &len)) < 0) {
		api_error_errno(c, r, "agent '%s': cannot read its console: %s", a->name, strerror(-r));
		return;
	}
	b64 = base64_encode(text, len);
	api_reply(c, 200, json_pack("{s:s, s:I}", "data", b64, "bytes", (json_int_t)len));
}
