/*
 * api_runs: /v1/agents/NAME/runs[/ID]. POST queues a run (by hand: trigger
 * "manual") and answers 202 once it is durable; GET lists runs or shows one
 * with the end of its log.
 */
#include <errno.h>
#include <event2/http.h>
#include <fcntl.h>
#include <inttypes.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/runs.h"
#include "api/handler.h"
#include "api/server.h"
#include "store/db.h"
#include "model/fleetd.h"
#include "core/runs.h"

#define RUN_LOG_TAIL (64 << 10)	/* what GET of one run shows of its log */

static json_t *time_or_null(int64_t t)
{
	char buf[32];

	return t > 0 ? json_string(format_utc(t, buf, sizeof(buf))) : json_null();
}

static json_t *run_to_json(const struct run *r)
{
	return json_pack("{s:I, s:s, s:s, s:s, s:o, s:o, s:o, s:o, s:s?, s:s?}",
		"id", (json_int_t)r->id,
		"agent", r->agent,
		"trigger", r->trigger,
		"state", run_state_to_string(r->state),
		"queued_at", time_or_null(r->queued_at),
		"started_at", time_or_null(r->started_at),
		"finished_at", time_or_null(r->finished_at),
		"exit_code", r->exit_code >= 0 ? json_integer(r->exit_code) : json_null(),
		"snapshot", r->snapshot,
		"error", r->error);
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

void api_run_trigger(struct api_call *c)
{
	_cleanup_free_ char *why = NULL;
	int64_t id;
	int r;

	if (!api_check_name_param(c))
		return;
	if ((r = runs_enqueue(c->fleetd, c->param, "manual", &id, &why)) < 0) {
		api_error_core(c, r, why);
		return;
	}
	api_reply(c, 202, json_pack("{s:I, s:s, s:s}", "id", (json_int_t)id, "agent", c->param, "state",
				    run_state_to_string(RUN_QUEUED)));
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
