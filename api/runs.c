/*
 * api_runs: /v1/agents/NAME/runs[/ID[/cancel|/log]]. POST queues a run (by
 * hand: trigger "manual", with an optional payload) and answers 202 once it
 * is durable; GET lists runs or shows one with the end of its log; cancel
 * stops one; log reads its log from an offset (fleetctl logs -f).
 */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/http.h>
#include <fcntl.h>
#include <inttypes.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "api/runs.h"
#include "api/handler.h"
#include "api/server.h"
#include "store/db.h"
#include "model/fleetd.h"
#include "core/runs.h"
#include "common/base64.h"

#define RUN_LOG_TAIL (64 << 10)	/* what GET of one run shows of its log */
#define RUN_LOG_CHUNK (64 << 10)	/* what one GET of .../log gives */

static json_t *time_or_null(int64_t t)
{
	char buf[32];

	return t > 0 ? json_string(format_utc(t, buf, sizeof(buf))) : json_null();
}

static json_t *run_to_json(const struct run *r)
{
	return json_pack("{s:I, s:s, s:s, s:s, s:o, s:o, s:o, s:o, s:s?, s:s?, s:i}",
		"id", (json_int_t)r->id,
		"agent", r->agent,
		"trigger", r->trigger,
		"state", run_state_to_string(r->state),
		"queued_at", time_or_null(r->queued_at),
		"started_at", time_or_null(r->started_at),
		"finished_at", time_or_null(r->finished_at),
		"exit_code", r->exit_code >= 0 ? json_integer(r->exit_code) : json_null(),
		"snapshot", r->snapshot,
		"error", r->error,
		"retries", r->retries);
}

/* Bytes that are not UTF-8 become '?': JSON strings must be valid UTF-8, a command's output need not be. */
static void utf8_sanitize(char *s, size_t len)
{
	for (size_t i = 0; i < len;) {
		unsigned char c = (unsigned char)s[i];
		size_t n = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 && c >= 0xc2 ? 2 : (c & 0xf0) == 0xe0 ? 3
			 : (c & 0xf8) == 0xf0 && c <= 0xf4 ? 4 : 0;
		size_t k;

		for (k = 1; n > 1 && k < n && i + k < len && ((unsigned char)s[i + k] & 0xc0) == 0x80; k++)
			;
		if (n == 0 || k < n || c == 0) {
			s[i++] = '?';
			continue;
		}
		i += n;
	}
}

/* The last RUN_LOG_TAIL bytes of the log (NULL if it cannot be read), and whether earlier ones were left out. */
static json_t *log_tail(const char *path, bool *cut)
{
	_cleanup_free_ char *buf = NULL;
	struct stat st;
	ssize_t got;
	off_t from;
	int fd;

	*cut = false;
	if (!path || (fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) < 0)
		return json_null();
	if (fstat(fd, &st) < 0) {
		close(fd);
		return json_null();
	}
	from = st.st_size > RUN_LOG_TAIL ? st.st_size - RUN_LOG_TAIL : 0;
	*cut = from > 0;
	buf = xmalloc(RUN_LOG_TAIL + 1);
	got = pread(fd, buf, RUN_LOG_TAIL, from);
	close(fd);
	if (got < 0)
		return json_null();
	utf8_sanitize(buf, (size_t)got);
	return json_stringn(buf, (size_t)got);
}

/*
 * POST /v1/agents/NAME/runs [{"payload": BASE64}]: queue a manual run; the
 * payload (at most RUN_PAYLOAD_MAX bytes) is stored with it, as the body of
 * its event (source "manual"), in the same transaction.
 */
void api_run_trigger(struct api_call *c)
{
	static const char *const spec[] = { "payload:s", NULL };
	_cleanup_free_ char *why = NULL;
	_cleanup_(run_event_freep) struct run_event *ev = xcalloc(1, sizeof(*ev));
	json_t *body = NULL, *v;
	int64_t id;
	int r;

	if (!api_check_name_param(c))
		return;
	if (evbuffer_get_length(evhttp_request_get_input_buffer(c->req)) > 0 && !(body = api_body_object(c, spec)))
		return;
	ev->source = xstrdup("manual");
	ev->received_at = (int64_t)time(NULL);
	if (body && (v = json_object_get(body, "payload"))) {
		r = base64_decode(json_string_value(v), json_string_length(v), &ev->body, &ev->body_len);
		json_decref(body);
		if (r < 0) {
			api_error(c, 400, "invalid", "payload must be base64");
			return;
		}
		if (ev->body_len > RUN_PAYLOAD_MAX) {
			api_error(c, 413, "too_large", "the payload is %zu bytes; the limit is %d (1 MiB)", ev->body_len,
				  RUN_PAYLOAD_MAX);
			return;
		}
	} else {
		json_decref(body);
	}
	if ((r = runs_enqueue_event(c->fleetd, c->param, "manual", ev, &id, &why)) < 0) {
		if (r == -EDQUOT)
			api_error(c, 429, "queue_full", "%s", why);
		else
			api_error_core(c, r, why);
		return;
	}
	api_reply(c, 202, json_pack("{s:I, s:s, s:s}", "id", (json_int_t)id, "agent", c->param, "state",
				    run_state_to_string(RUN_QUEUED)));
}

/* The run id in :id of agent :name, or 0 (answered: 400 or 404). */
static int64_t run_param(struct api_call *c, struct run **ret)
{
	long id;
	int r;

	if (!api_check_name_param(c))
		return 0;
	if (parse_long(c->param2, 1, INT64_MAX, &id) < 0) {
		api_error(c, 400, "invalid", "a run id is a positive number");
		return 0;
	}
	if ((r = db_run_get(c->fleetd->db, id, ret)) < 0 || strcmp((*ret)->agent, c->param) != 0) {
		api_error(c, 404, "not_found", "agent '%s': no run %ld", c->param, id);
		return 0;
	}
	return id;
}

/* POST /v1/agents/NAME/runs/ID/cancel: a queued run is cancelled; a running one is killed (answered once asked). */
void api_run_cancel(struct api_call *c)
{
	_cleanup_(run_freep) struct run *run = NULL;
	_cleanup_free_ char *why = NULL;
	int64_t id;
	int r;

	if (!(id = run_param(c, &run)))
		return;
	if ((r = runs_cancel(c->fleetd, c->param, id, &why)) < 0) {
		if (r == -EALREADY)
			api_error(c, 409, "finished", "%s", why);
		else
			api_error_core(c, r, why);
		return;
	}
	run_free(run);
	run = NULL;
	if (db_run_get(c->fleetd->db, id, &run) < 0) {
		api_error(c, 404, "not_found", "agent '%s': no run %" PRId64, c->param, id);
		return;
	}
	/* A running run is 'running' until its processes are gone: the answer says it was asked. */
	api_reply(c, 202, json_pack("{s:I, s:s, s:s, s:b}", "id", (json_int_t)id, "agent", c->param, "state",
				    run_state_to_string(run->state), "cancelling", run->state == RUN_RUNNING));
}

/*
 * GET /v1/agents/NAME/runs/ID/log?offset=N: up to RUN_LOG_CHUNK bytes of the
 * log from offset N (not UTF-8: '?', one for one, so offsets hold), where to
 * ask next, and the run's state: a follower asks again while "more" is true.
 */
void api_run_log(struct api_call *c)
{
	_cleanup_(run_freep) struct run *run = NULL;
	_cleanup_free_ char *buf = NULL;
	char arg[32];
	long offset = 0;
	ssize_t got = 0;
	int fd;

	if (!run_param(c, &run))
		return;
	if (api_query(c, "offset", arg, sizeof(arg)) && parse_long(arg, 0, INT64_MAX, &offset) < 0) {
		api_error(c, 400, "invalid", "offset must be a number of bytes");
		return;
	}
	buf = xmalloc(RUN_LOG_CHUNK + 1);
	if (run->log_path && (fd = open(run->log_path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) >= 0) {
		got = pread(fd, buf, RUN_LOG_CHUNK, (off_t)offset);
		close(fd);
		if (got < 0)
			got = 0;
	}
	utf8_sanitize(buf, (size_t)got);
	/* More to come while the run goes, or while this answer was full. */
	api_reply(c, 200, json_pack("{s:I, s:s, s:I, s:I, s:s%, s:b}", "id", (json_int_t)run->id,
				    "state", run_state_to_string(run->state),
				    "offset", (json_int_t)offset, "next_offset", (json_int_t)(offset + got),
				    "data", buf, (size_t)got,
				    "more", !run_state_final(run->state) || got == RUN_LOG_CHUNK));
}

void api_runs_list(struct api_call *c)
{
	struct agent *a = NULL;
	struct run **list = NULL;
	char buf[16];
	long limit = 50;
	size_t n = 0;
	json_t *arr;
	int r;

	if (!api_check_name_param(c))
		return;
	if (api_query(c, "limit", buf, sizeof(buf)) && parse_long(buf, 1, 10000, &limit) < 0) {
		api_error(c, 400, "invalid", "limit must be a number from 1 to 10000");
		return;
	}
	if (!(a = api_agent_param(c)))
		return;
	agent_free(a);
	if ((r = db_run_list(c->fleetd->db, c->param, DB_ANY_STATE, (int)limit, &list, &n)) < 0) {
		api_error_errno(c, r, "agent '%s': cannot list runs: %s", c->param, strerror(-r));
		return;
	}
	arr = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(arr, run_to_json(list[i]));
	run_list_free(list);
	api_reply(c, 200, json_pack("{s:s, s:o}", "agent", c->param, "runs", arr));
}

void api_run_get(struct api_call *c)
{
	_cleanup_(run_freep) struct run *run = NULL;
	json_t *j;
	bool cut;
	long id;
	int r;

	if (!api_check_name_param(c))
		return;
	if (parse_long(c->param2, 1, INT64_MAX, &id) < 0) {
		api_error(c, 400, "invalid", "a run id is a positive number");
		return;
	}
	if ((r = db_run_get(c->fleetd->db, id, &run)) < 0 || strcmp(run->agent, c->param) != 0) {
		api_error(c, 404, "not_found", "agent '%s': no run %ld", c->param, id);
		return;
	}
	j = run_to_json(run);
	json_object_set_new(j, "log", log_tail(run->log_path, &cut));
	json_object_set_new(j, "log_truncated", json_boolean(cut));
	api_reply(c, 200, j);
}
