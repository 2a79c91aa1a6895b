/*
 * autostart: after the host rebooted, start the agents marked --autostart
 * on, higher --boot-priority first (equal ones by name), at most
 * boot_concurrency at a time: twenty guests booting at once on two CPUs
 * would all miss their boot timeout.
 *
 * "The host rebooted" is the kernel's boot id differing from the one in
 * STATE/boot-id. That file is written only once every agent due has been
 * started (or has failed to start), so a fleetd killed halfway finishes the
 * job at its next start, and a fleetd restarted within one boot (an upgrade,
 * a crash) starts nothing: an agent the operator stopped stays stopped.
 */
#include "core/autostart.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "core/backends.h"
#include "core/lifecycle.h"
#include "model/config.h"
#include "model/fleetd.h"
#include "store/db.h"

#define BOOT_ID_PATH "/proc/sys/kernel/random/boot_id"
#define BOOT_ID_MAX 64

struct autostart {
	struct fleetd *f;	/* NULL once fleetd shut down with starts still going */
	char boot_id[BOOT_ID_MAX];
	char **names;		/* the agents to start, in order */
	size_t n, next;
	int going;		/* starts begun and not yet answered */
	bool in_loop;		/* start_next() is on the stack: an answer given at once leaves the rest to it */
	int started, failed;
};

/* The first line of path (at most BOOT_ID_MAX - 1 bytes) into buf: 0, or -errno. */
static int read_line(const char *path, char buf[BOOT_ID_MAX])
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -errno;
	if ((n = read(fd, buf, BOOT_ID_MAX - 1)) < 0)
		return -errno;
	buf[n] = '\0';
	buf[strcspn(buf, "\n")] = '\0';
	return 0;
}

static char *boot_id_file(struct fleetd *f)
{
	return xasprintf("%s/boot-id", config_get(&f->cfg, CFG_STATE_DIR));
}

/* Record that this boot's autostart is done: STATE/boot-id, replaced atomically. */
static void record_boot(struct fleetd *f, const char *boot_id)
{
	_cleanup_free_ char *path = boot_id_file(f);
	_cleanup_free_ char *tmp = xasprintf("%s.new", path);
	_cleanup_free_ char *line = xasprintf("%s\n", boot_id);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	int r = fd < 0 ? -errno : 0;

	if (r == 0 && (r = write_all(fd, line, strlen(line))) == 0 && fsync(fd) < 0)
		r = -errno;
	if (fd >= 0)
		close(fd);
	if (r == 0 && rename(tmp, path) < 0)
		r = -errno;
	if (r < 0)
		log_warning("autostart: cannot write %s: %s (the next start of fleetd in this boot will start "
			    "the autostart agents again)", path, strerror(-r));
}

static void autostart_free(struct autostart *q)
{
	for (size_t i = 0; q && i < q->n; i++)
		free(q->names[i]);
	if (q)
		free(q->names);
	free(q);
}

static void start_next(struct autostart *q);

struct one_start {
	struct autostart *q;
	char *agent;
};

static void one_done(void *userdata, int r, const char *why)
{
	struct one_start *s = userdata;
	struct autostart *q = s->q;

	q->going--;
	if (r < 0) {
		q->failed++;
		log_error("autostart: agent '%s' did not start: %s", s->agent, why ? why : strerror(-r));
	} else {
		q->started++;
		log_notice("autostart: agent '%s' started", s->agent);
	}
	free(s->agent);
	free(s);
	if (q->in_loop)
		return;
	if (!q->f) {	/* fleetd is going down: nothing more to start */
		if (q->going == 0)
			autostart_free(q);
		return;
	}
	start_next(q);
}

/* Begin starts until boot_concurrency are going; when the last has answered, record the boot. */
static void start_next(struct autostart *q)
{
	struct fleetd *f = q->f;
	long max = config_get_long(&f->cfg, CFG_BOOT_CONCURRENCY);

	q->in_loop = true;
	while (q->next < q->n && q->going < max) {
		const char *name = q->names[q->next++];
		_cleanup_(agent_freep) struct agent *a = NULL;
		_cleanup_free_ char *why = NULL;
		const struct backend_ops *ops;
		const char *unavailable;
		struct one_start *s;
		int r;

		/* Looked up again: it may have been removed, started or stopped since the list was made. */
		if (db_agent_get(f->db, name, &a) < 0 || a->state != AGENT_STOPPED || !a->autostart)
			continue;
		if (!(ops = backend_get(f, a->backend, &unavailable))) {
			q->failed++;
			log_error("autostart: agent '%s' not started: the %s backend is unavailable (%s)", name,
				  backend_kind_to_string(a->backend), unavailable);
			continue;
		}
		log_notice("autostart: starting agent '%s' (boot priority %d)", name, a->boot_priority);
		s = xcalloc(1, sizeof(*s));
		s->q = q;
		s->agent = xstrdup(name);
		q->going++;
		if ((r = lifecycle_start(f, ops, a, one_done, s, &why)) < 0) {
			q->going--;
			q->failed++;
			log_error("autostart: agent '%s' did not start: %s", name, why ? why : strerror(-r));
			free(s->agent);
			free(s);
		}
	}
	q->in_loop = false;
	if (q->going > 0 || q->next < q->n)
		return;
	log_notice("autostart: done after the host booted: %d started, %d failed", q->started, q->failed);
	record_boot(f, q->boot_id);
	f->autostart = NULL;
	autostart_free(q);
}

/* Higher boot priority first, then by name (the order the operator reads in the docs). */
static int by_priority(const void *x, const void *y)
{
	const struct agent *a = *(struct agent *const *)x, *b = *(struct agent *const *)y;

	if (a->boot_priority != b->boot_priority)
		return a->boot_priority > b->boot_priority ? -1 : 1;
	return strcmp(a->name, b->name);
}

int autostart_init(struct fleetd *f)
{
	_cleanup_free_ char *path = boot_id_file(f);
	char now[BOOT_ID_MAX], last[BOOT_ID_MAX] = "";
	struct agent **list = NULL;
	struct autostart *q;
	size_t n = 0;
	int r;

	if ((r = read_line(BOOT_ID_PATH, now)) < 0 || !*now) {
		log_warning("autostart: cannot read the host's boot id (%s): %s; no agent is started", BOOT_ID_PATH,
			    r < 0 ? strerror(-r) : "empty");
		return r < 0 ? r : -EIO;
	}
	if (read_line(path, last) == 0 && strcmp(now, last) == 0)
		return 0;	/* this boot's autostart is done: a restart of fleetd, not of the host */
	if ((r = db_agent_list(f->db, &list, &n)) < 0) {
		log_error("autostart: cannot list agents: %s", strerror(-r));
		return r;
	}
	qsort(list, n, sizeof(*list), by_priority);
	q = xcalloc(1, sizeof(*q));
	q->f = f;
	memcpy(q->boot_id, now, sizeof(now));
	q->names = xcalloc(n ? n : 1, sizeof(*q->names));
	for (size_t i = 0; i < n; i++)
		if (list[i]->autostart && list[i]->state == AGENT_STOPPED)
			q->names[q->n++] = xstrdup(list[i]->name);
	agent_list_free(list);
	log_notice("autostart: the host booted since fleetd last ran; %zu agent(s) to start, at most %ld at a time",
		   q->n, config_get_long(&f->cfg, CFG_BOOT_CONCURRENCY));
	f->autostart = q;
	start_next(q);
	return 0;
}

void autostart_shutdown(struct fleetd *f)
{
	struct autostart *q = f->autostart;

	if (!q)
		return;
	f->autostart = NULL;
	q->f = NULL;
	if (q->going == 0)
		autostart_free(q);
	/* else the last answer frees it (one_done); the boot is not recorded, so the next fleetd goes on */
}
