/* memory: see memory.h. */
#include "core/memory.h"
#include "core/activity.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "common/log.h"
#include "common/names.h"
#include "common/util.h"
#include "core/backends.h"
#include "core/snapshots.h"
#include "model/config.h"
#include "model/fleetd.h"
#include "store/db.h"

#ifndef FLEET_AGENTD_PATH
#define FLEET_AGENTD_PATH "/usr/local/bin/agentd"
#endif

/* A store operation is bounded: an export of the largest quota takes a while under TCG, not forever. */
#define MEMORY_EXEC_TIMEOUT_S 600
#define MEMORY_ERR_MAX 1024

/* agentd's exit statuses (agentd/memory.h, which fleetd does not link). */
enum { EXIT_USAGE = 2, EXIT_NOKEY = 3, EXIT_QUOTA = 4, EXIT_REFUSED = 5 };

static const char *const verb_words[] = {
	[MEMORY_LS] = "ls", [MEMORY_GET] = "get", [MEMORY_PUT] = "put",
	[MEMORY_RM] = "rm", [MEMORY_EXPORT] = "export", [MEMORY_IMPORT] = "import", [MEMORY_IMPORT_KEPT] = "import",
};

struct mcall {
	struct fleetd *f;
	char *agent;
	const struct backend_ops *ops;
	struct exec_handle *exec;
	memory_done_fn done;
	void *userdata;
	char *out;
	size_t out_len, out_cap;
	char err[MEMORY_ERR_MAX];
	size_t err_len;
	bool too_big;
};

/* fleetd's own agentd: next to fleetd (installed together), in a build tree's agentd/, else where make install puts it. */
char *memory_host_agentd(void)
{
	return find_own_program("agentd", "agentd", FLEET_AGENTD_PATH);
}

static void on_output(void *userdata, enum exec_stream stream, const char *data, size_t len)
{
	struct mcall *m = userdata;

	if (stream == EXEC_STDERR) {
		size_t room = sizeof(m->err) - 1 - m->err_len;

		memcpy(m->err + m->err_len, data, len < room ? len : room);
		m->err_len += len < room ? len : room;
		m->err[m->err_len] = '\0';
		return;
	}
	if (m->too_big)
		return;
	if (m->out_len + len > MEMORY_OUT_MAX) {
		/* More than any store may hold: stop it; done() still comes. */
		m->too_big = true;
		m->ops->exec_cancel(m->exec);
		return;
	}
	if (m->out_len + len > m->out_cap) {
		m->out_cap = (m->out_len + len) * 2 < MEMORY_OUT_MAX ? (m->out_len + len) * 2 : MEMORY_OUT_MAX;
		m->out = xrealloc(m->out, m->out_cap);
	}
	memcpy(m->out + m->out_len, data, len);
	m->out_len += len;
}

/* agentd's message: its first line, printable, without its "agentd: memory: " prefix. */
static const char *clean_message(char *s)
{
	static const char prefix[] = "agentd: memory: ";
	char *p;

	s[strcspn(s, "\n")] = '\0';
	for (p = s; *p; p++)
		if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f)
			*p = '_';
	return strncmp(s, prefix, sizeof(prefix) - 1) == 0 ? s + sizeof(prefix) - 1 : s;
}

static void on_done(void *userdata, const struct exec_result *res)
{
	struct mcall *m = userdata;
	struct memory_result mr = { .out = m->out, .out_len = m->out_len };
	char why[MEMORY_ERR_MAX + 64];
	const char *msg = clean_message(m->err);

	if (res->error == -ENOENT) {
		/* a sandbox without agentd: fleetd found none to show it (its log said so at start) */
		mr.error = -ENOEXEC;
		snprintf(why, sizeof(why), "agentd is not in the environment at %s (%s): is agentd installed beside "
			 "fleetd?", m->ops->agentd, res->why ? res->why : strerror(ENOENT));
	} else if (res->error < 0) {
		mr.error = res->error;
		snprintf(why, sizeof(why), "%s", res->why ? res->why : strerror(-res->error));
	} else if (m->too_big) {
		mr.error = -EFBIG;
		snprintf(why, sizeof(why), "the store's answer is larger than %zu MiB", MEMORY_OUT_MAX >> 20);
	} else if (res->timed_out) {
		mr.error = -ETIMEDOUT;
		snprintf(why, sizeof(why), "agentd memory took longer than %d s", MEMORY_EXEC_TIMEOUT_S);
	} else if (res->not_started || res->signal > 0 || res->exit_code != 0) {
		switch (res->not_started || res->signal > 0 ? -1 : res->exit_code) {
		case EXIT_USAGE: mr.error = -EINVAL; break;
		case EXIT_NOKEY: mr.error = -ENOENT; break;
		case EXIT_QUOTA: mr.error = -EDQUOT; break;
		case EXIT_REFUSED: mr.error = -EPERM; break;
		case 127: mr.error = -ENOEXEC; msg = "agentd is not in the environment (an image older than memory stores?)"; break;
		default: mr.error = -EIO; break;
		}
		if (*msg)
			snprintf(why, sizeof(why), "%s", msg);
		else if (res->signal > 0)
			snprintf(why, sizeof(why), "agentd memory was killed by signal %d", res->signal);
		else
			snprintf(why, sizeof(why), "agentd memory failed (exit status %d)", res->exit_code);
	}
	if (mr.error)
		mr.why = why;
	activity_end(m->f, m->agent);
	m->done(m->userdata, &mr);
	free(m->agent);
	free(m->out);
	free(m);
}

int memory_call(struct fleetd *f, const char *agent, enum memory_verb verb, const char *key, const void *in,
		size_t in_len, memory_done_fn done, void *userdata, char **why)
{
	_cleanup_(agent_freep) struct agent *a = NULL;
	const struct backend_ops *ops;
	const char *argv[8], *reason;
	char quota[32];
	struct mcall *m;
	int r, n = 0;

	if ((r = db_agent_get(f->db, agent, &a)) < 0) {
		*why = xasprintf("no agent '%s'", agent);
		return r == -ENOENT ? -ENOENT : r;
	}
	if ((verb == MEMORY_GET || verb == MEMORY_PUT || verb == MEMORY_RM) && !memory_key_valid(key)) {
		*why = xstrdup("a memory key is 1 to 128 of A-Z a-z 0-9 . _ -, not starting with a dot");
		return -EINVAL;
	}
	if (a->state == AGENT_DEFINED || a->state == AGENT_PROVISIONING) {
		*why = xstrdup("its environment is not provisioned");
		return -EAGAIN;
	}
	if (!(ops = backend_get(f, a->backend, &reason))) {
		*why = xasprintf("the %s backend is unavailable: %s", backend_kind_to_string(a->backend), reason);
		return -EAGAIN;
	}
	argv[n++] = ops->agentd;
	argv[n++] = "memory";
	if (verb == MEMORY_PUT || verb == MEMORY_IMPORT) {
		snprintf(quota, sizeof(quota), "%lld", (long long)a->memory_quota_mib << 20);
		argv[n++] = "--quota";
		argv[n++] = quota;
	}
	argv[n++] = verb_words[verb];
	if (verb == MEMORY_GET || verb == MEMORY_PUT || verb == MEMORY_RM)
		argv[n++] = key;
	argv[n] = NULL;

	m = xcalloc(1, sizeof(*m));
	m->f = f;
	m->agent = xstrdup(a->name);
	m->ops = ops;
	m->done = done;
	m->userdata = userdata;
	activity_begin(f, a->name);
	r = ops->exec(f, a, &(struct exec_request){ .argv = argv, .stdin_data = in, .stdin_len = in ? in_len : 0,
						     .timeout_s = MEMORY_EXEC_TIMEOUT_S },
		      &(struct exec_callbacks){ on_output, on_done, m }, &m->exec, why);
	if (r < 0) {
		activity_end(f, a->name);
		free(m->agent);
		free(m);
		return r;
	}
	return 0;
}

/* --- restore --keep-memory --- */

struct keep {
	struct fleetd *f;
	char *agent, *snap, *path;
	memory_restored_fn done;
	void *userdata;
	char *archive;
	size_t len;
};

static void keep_free(struct keep *k)
{
	free(k->agent);
	free(k->snap);
	free(k->path);
	free(k->archive);
	free(k);
}

static void keep_imported(void *userdata, const struct memory_result *res)
{
	struct keep *k = userdata;
	_cleanup_free_ char *msg = NULL;

	if (res->error < 0) {
		msg = xasprintf("restored '%s', but the memory kept in %s could not be put back: %s "
				"(fleetctl memory %s import < %s)", k->snap, k->path, res->why, k->agent, k->path);
		log_error("agent '%s': %s", k->agent, msg);
		k->done(k->userdata, res->error, msg);
	} else {
		unlink(k->path);
		log_info("agent '%s': restored '%s' and kept its memory", k->agent, k->snap);
		k->done(k->userdata, 0, NULL);
	}
	keep_free(k);
}

static void keep_restored(void *userdata, int r, const char *why)
{
	struct keep *k = userdata;
	_cleanup_free_ char *err = NULL;

	if (r < 0) {
		/* Nothing was rolled back: the store is as it was; the kept copy is not needed. */
		unlink(k->path);
		k->done(k->userdata, r, why);
		keep_free(k);
		return;
	}
	/* The agent's own store as it was: not held to the quota again (its command may have gone over it). */
	r = memory_call(k->f, k->agent, MEMORY_IMPORT_KEPT, NULL, k->archive, k->len, keep_imported, k, &err);
	if (r < 0) {
		struct memory_result res = { .error = r, .why = err ? err : strerror(-r) };

		keep_imported(k, &res);
	}
}

/* The archive to a root-only file first, so a fleetd killed during the restore loses no memory. */
static int keep_write(struct keep *k, char **why)
{
	_cleanup_free_ char *dir = xasprintf("%s/memory-keep", config_get(&k->f->cfg, CFG_STATE_DIR));
	int fd, r;

	if (mkdir_p(dir, 0700) < 0) {
		r = -errno;
		*why = xasprintf("cannot create %s: %s", dir, strerror(-r));
		return r;
	}
	k->path = xasprintf("%s/%s.tar", dir, k->agent);
	fd = open(k->path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0 || write_all(fd, k->archive, k->len) < 0 || fsync(fd) < 0) {
		r = -errno;
		*why = xasprintf("cannot write %s: %s", k->path, strerror(-r));
		if (fd >= 0)
			close(fd);
		return r;
	}
	close(fd);
	return 0;
}

static void keep_exported(void *userdata, const struct memory_result *res)
{
	struct keep *k = userdata;
	_cleanup_free_ char *why = NULL, *msg = NULL;
	int r;

	if (res->error < 0) {
		msg = xasprintf("cannot export its memory before the restore: %s", res->why);
		k->done(k->userdata, res->error, msg);
		keep_free(k);
		return;
	}
	k->archive = xmalloc(res->out_len ? res->out_len : 1);
	memcpy(k->archive, res->out, res->out_len);
	k->len = res->out_len;
	if ((r = keep_write(k, &why)) < 0 ||
	    (r = snapshots_restore(k->f, k->agent, k->snap, SNAPSHOTS_WAIT_ANY, keep_restored, k, &why)) < 0) {
		if (k->path)
			unlink(k->path);
		k->done(k->userdata, r, why);
		keep_free(k);
	}
}

int memory_restore_keep(struct fleetd *f, const char *agent, const char *snap, memory_restored_fn done,
			void *userdata, char **why)
{
	struct keep *k = xcalloc(1, sizeof(*k));
	int r;

	k->f = f;
	k->agent = xstrdup(agent);
	k->snap = xstrdup(snap);
	k->done = done;
	k->userdata = userdata;
	if ((r = memory_call(f, agent, MEMORY_EXPORT, NULL, NULL, 0, keep_exported, k, why)) < 0)
		keep_free(k);
	return r;
}
