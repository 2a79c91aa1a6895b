/*
 * cgroup: see cgroup.h. Plain file I/O on cgroupfs; no library, no
 * processes started. Paths are built once at detection; every later call
 * is a few open/read/write/rmdir on them.
 */
#include "user/cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "common/log.h"
#include "common/util.h"

/* The hierarchies we may use; the first usable of TRACKERS holds membership. */
enum hier { H_V2, H_MEMORY, H_PIDS, H_CPU, H_FREEZER, H__COUNT };

static const char *const hier_name[H__COUNT] = {
	[H_V2] = "v2", [H_MEMORY] = "memory", [H_PIDS] = "pids", [H_CPU] = "cpu", [H_FREEZER] = "freezer",
};

struct cgroup_host {
	char *own[H__COUNT];	/* <mount><fleetd's own group>, NULL when the hierarchy is absent */
	char *base[H__COUNT];	/* own + "/fleet" */
	bool v2_has[H__COUNT];	/* controller (memory, pids, cpu) usable in the v2 hierarchy */
};

static const enum hier trackers[] = { H_V2, H_FREEZER, H_PIDS, H_MEMORY, H_CPU };

static int write_file(const char *dir, const char *file, const char *value)
{
	_cleanup_free_ char *path = xasprintf("%s/%s", dir, file);
	_cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	if (write(fd, value, strlen(value)) < 0)
		return -errno;
	return 0;
}

static int read_file(const char *dir, const char *file, char *buf, size_t len)
{
	_cleanup_free_ char *path = xasprintf("%s/%s", dir, file);
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = read(fd, buf, len - 1);
	if (n < 0)
		return -errno;
	buf[n] = '\0';
	return (int)n;
}

static bool file_exists(const char *dir, const char *file)
{
	_cleanup_free_ char *path = xasprintf("%s/%s", dir, file);

	return access(path, F_OK) == 0;
}

/* The group of this process in a hierarchy, from /proc/self/cgroup; NULL if not listed. */
static char *own_path(bool v2, const char *controller)
{
	_cleanup_fclose_ FILE *f = fopen("/proc/self/cgroup", "re");
	char line[4096];

	if (!f)
		return NULL;
	while (fgets(line, sizeof(line), f)) {
		char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;

		if (!c2)
			continue;
		*c2 = '\0';
		c2[1 + strcspn(c2 + 1, "\n")] = '\0';
		if (v2) {
			if (strncmp(line, "0:", 2) == 0 && c1[1] == '\0')
				return xstrdup(c2 + 1);
			continue;
		}
		/* c1+1 is "cpu,cpuacct" or "name=systemd". */
		char *save = NULL;
		for (char *t = strtok_r(c1 + 1, ",", &save); t; t = strtok_r(NULL, ",", &save))
			if (strcmp(t, controller) == 0)
				return xstrdup(c2 + 1);
	}
	return NULL;
}

static bool has_option(const char *opts, const char *want)
{
	size_t n = strlen(want);

	for (const char *p = opts; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
		if (strncmp(p, want, n) == 0 && (p[n] == ',' || p[n] == '\0' || p[n] == ' '))
			return true;
	return false;
}

/* Join a mount point, the mount's root inside the hierarchy, and our group in it. */
static char *join_own(const char *mnt, const char *root, const char *own)
{
	size_t rl = strlen(root);

	if (strcmp(root, "/") != 0 && strncmp(own, root, rl) == 0)
		own += rl;	/* the mount shows a subtree (cgroup namespace, bind mount) */
	if (strcmp(own, "/") == 0 || *own == '\0')
		return xstrdup(mnt);
	return xasprintf("%s%s", mnt, own);
}

void cgroup_host_detect(struct cgroup_host **ret)
{
	struct cgroup_host *h = xcalloc(1, sizeof(*h));
	_cleanup_fclose_ FILE *f = fopen("/proc/self/mountinfo", "re");
	char line[4096];

	while (f && fgets(line, sizeof(line), f)) {
		char root[1024], mnt[1024], fstype[64], superopts[1024];
		const char *dash = strstr(line, " - ");

		if (!dash || sscanf(line, "%*s %*s %*s %1023s %1023s", root, mnt) != 2 ||
		    sscanf(dash, " - %63s %*s %1023s", fstype, superopts) != 2)
			continue;
		if (strcmp(fstype, "cgroup2") == 0 && !h->own[H_V2]) {
			_cleanup_free_ char *own = own_path(true, NULL);
			if (own)
				h->own[H_V2] = join_own(mnt, root, own);
		} else if (strcmp(fstype, "cgroup") == 0) {
			for (int k = H_MEMORY; k < H__COUNT; k++) {
				if (h->own[k] || !has_option(superopts, hier_name[k]))
					continue;
				_cleanup_free_ char *own = own_path(false, hier_name[k]);
				if (own)
					h->own[k] = join_own(mnt, root, own);
			}
		}
	}
	if (h->own[H_V2]) {
		char ctl[512];

		if (read_file(h->own[H_V2], "cgroup.controllers", ctl, sizeof(ctl)) >= 0) {
			ctl[strcspn(ctl, "\n")] = '\0';
			for (int k = H_MEMORY; k <= H_CPU; k++) {
				char *save = NULL, *copy = xstrdup(ctl);
				for (char *t = strtok_r(copy, " ", &save); t; t = strtok_r(NULL, " ", &save))
					if (strcmp(t, hier_name[k]) == 0)
						h->v2_has[k] = true;
				free(copy);
			}
		}
	}
	for (int k = 0; k < H__COUNT; k++)
		if (h->own[k])
			h->base[k] = xasprintf("%s/fleet", h->own[k]);
	*ret = h;
}

void cgroup_host_free(struct cgroup_host *h)
{
	if (!h)
		return;
	for (int k = 0; k < H__COUNT; k++) {
		free(h->own[k]);
		free(h->base[k]);
	}
	free(h);
}

/* Where a limit is applied: H_V2, the v1 hierarchy, or -1 for nowhere. */
static int limit_hier(const struct cgroup_host *h, enum hier k)
{
	if (h->base[H_V2] && h->v2_has[k])
		return H_V2;
	return h->base[k] ? (int)k : -1;
}

static int tracker(const struct cgroup_host *h)
{
	for (size_t i = 0; i < ARRAY_SIZE(trackers); i++)
		if (h->base[trackers[i]])
			return trackers[i];
	return -1;
}

bool cgroup_host_usable(const struct cgroup_host *h)
{
	return h && tracker(h) >= 0;
}

bool cgroup_host_has(const struct cgroup_host *h, const char *controller)
{
	for (int k = H_MEMORY; k <= H_CPU; k++)
		if (strcmp(controller, hier_name[k]) == 0)
			return limit_hier(h, (enum hier)k) >= 0;
	return false;
}

char *cgroup_host_describe(const struct cgroup_host *h)
{
	char buf[256] = "";
	int t = tracker(h);

	for (int k = H_MEMORY; k <= H_CPU; k++) {
		int where = limit_hier(h, (enum hier)k);
		size_t len = strlen(buf);
		snprintf(buf + len, sizeof(buf) - len, "%s%s:%s", len ? " " : "", hier_name[k],
			 where < 0 ? "none" : where == H_V2 ? "v2" : "v1");
	}
	return xasprintf("%s; processes tracked by %s", buf,
			 t < 0 ? "nothing (no usable hierarchy)" : t == H_V2 ? "v2" : hier_name[t]);
}

/* The distinct group directories of name, one per hierarchy actually used. */
static size_t group_dirs(const struct cgroup_host *h, const char *name, char **dirs, size_t max)
{
	size_t n = 0;

	for (int k = 0; k < H__COUNT && n < max; k++) {
		bool used = k == tracker(h) || (k >= H_MEMORY && k <= H_CPU && limit_hier(h, (enum hier)k) == k) ||
			    (k == H_V2 && h->base[H_V2] && (h->v2_has[H_MEMORY] || h->v2_has[H_PIDS] || h->v2_has[H_CPU]));
		bool dup = false;

		if (!h->base[k] || !used)
			continue;
		char *d = xasprintf("%s/%s", h->base[k], name);
		for (size_t i = 0; i < n; i++)
			dup |= strcmp(dirs[i], d) == 0;	/* co-mounted controllers, e.g. cpu,cpuacct */
		if (dup)
			free(d);
		else
			dirs[n++] = d;
	}
	return n;
}

static void free_dirs(char **dirs, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(dirs[i]);
}

/* Moves every process of cgroup from into cgroup to; the number moved, or -errno. */
static int move_procs(const char *from, const char *to)
{
	_cleanup_free_ char *p = xasprintf("%s/cgroup.procs", from);
	_cleanup_fclose_ FILE *f = fopen(p, "re");
	char line[32];
	int n = 0, r;

	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = '\0';
		/* ESRCH: it exited meanwhile. Anything else: the caller sees subtree_control still busy. */
		if ((r = write_file(to, "cgroup.procs", line)) == 0)
			n++;
		else if (r != -ESRCH)
			log_warning("cgroup: cannot move process %s into %s: %s", line, to, strerror(-r));
	}
	return n;
}

/*
 * v2: let the groups below fleetd's own group use the controllers. A group
 * with processes cannot delegate (no internal processes), so every process
 * of fleetd's group moves into a leaf "fleetd" beside "fleet": fleetd, the
 * children it started before (the webhook listener), and under systemd's
 * Delegate=yes nothing else (the unit's group is fleetd's alone; without
 * systemd, whatever started fleetd in its group moves with it, staying in the
 * same subtree and under the same limits). A few rounds: a process may fork
 * while they are moved. Called at the user backend's start and before each
 * agent's group is made.
 */
static void v2_enable(const struct cgroup_host *h)
{
	char want[64] = "";

	for (int k = H_MEMORY; k <= H_CPU; k++)
		if (h->v2_has[k])
			snprintf(want + strlen(want), sizeof(want) - strlen(want), "%s+%s",
				 *want ? " " : "", hier_name[k]);
	if (!*want)
		return;
	for (int round = 0; round < 3 && write_file(h->own[H_V2], "cgroup.subtree_control", want) == -EBUSY; round++) {
		_cleanup_free_ char *leaf = xasprintf("%s/fleetd", h->own[H_V2]);
		int n;

		if (mkdir(leaf, 0755) < 0 && errno != EEXIST) {
			log_warning("cgroup: cannot create %s to delegate controllers: %s", leaf, strerror(errno));
			return;
		}
		if ((n = move_procs(h->own[H_V2], leaf)) > 0)
			log_info("cgroup: moved %d process%s of fleetd's group into %s to delegate controllers", n,
				 n == 1 ? "" : "es", leaf);
	}
	(void)write_file(h->base[H_V2], "cgroup.subtree_control", want);
}

void cgroup_host_prepare(const struct cgroup_host *h)
{
	if (h && h->base[H_V2]) {
		(void)mkdir(h->base[H_V2], 0755);
		v2_enable(h);
	}
}

static int apply_limits(const struct cgroup_host *h, const char *name, const struct cgroup_limits *l, char **why)
{
	char v[64];
	int k, r;

	if (l->memory_bytes && (k = limit_hier(h, H_MEMORY)) >= 0) {
		_cleanup_free_ char *d = xasprintf("%s/%s", h->base[k], name);
		snprintf(v, sizeof(v), "%llu", (unsigned long long)l->memory_bytes);
		if (k == H_V2) {
			if ((r = write_file(d, "memory.max", v)) < 0)
				goto fail_memory;
			(void)write_file(d, "memory.swap.max", "0");	/* absent without swap accounting */
		} else {
			if ((r = write_file(d, "memory.limit_in_bytes", v)) < 0)
				goto fail_memory;
			/* memory+swap no higher than memory: the limit cannot be dodged by swapping. */
			if (file_exists(d, "memory.memsw.limit_in_bytes") &&
			    (r = write_file(d, "memory.memsw.limit_in_bytes", v)) < 0)
				goto fail_memory;
		}
	}
	if (l->pids_max && (k = limit_hier(h, H_PIDS)) >= 0) {
		_cleanup_free_ char *d = xasprintf("%s/%s", h->base[k], name);
		snprintf(v, sizeof(v), "%ld", l->pids_max);
		if ((r = write_file(d, "pids.max", v)) < 0) {
			*why = xasprintf("cannot set pids.max in %s: %s", d, strerror(-r));
			return r;
		}
	}
	if (l->cpus && (k = limit_hier(h, H_CPU)) >= 0) {
		_cleanup_free_ char *d = xasprintf("%s/%s", h->base[k], name);
		if (k == H_V2) {
			snprintf(v, sizeof(v), "%ld 100000", (long)l->cpus * 100000);
			r = write_file(d, "cpu.max", v);
		} else if (file_exists(d, "cpu.cfs_quota_us")) {	/* needs CONFIG_CFS_BANDWIDTH */
			snprintf(v, sizeof(v), "%ld", (long)l->cpus * 100000);
			if ((r = write_file(d, "cpu.cfs_period_us", "100000")) == 0)
				r = write_file(d, "cpu.cfs_quota_us", v);
		} else {
			r = 0;
		}
		if (r < 0) {
			*why = xasprintf("cannot set the CPU quota in %s: %s", d, strerror(-r));
			return r;
		}
	}
	return 0;
fail_memory:
	*why = xasprintf("cannot set the memory limit of cgroup '%s': %s", name, strerror(-r));
	return r;
}

static int for_each_pid(const char *dir, void (*fn)(pid_t));

int cgroup_create(const struct cgroup_host *h, const char *name, const struct cgroup_limits *l, char **why)
{
	char *dirs[H__COUNT];
	size_t n = group_dirs(h, name, dirs, H__COUNT);
	bool made[H__COUNT] = { false };
	int r = 0;

	if (h->base[H_V2])
		v2_enable(h);
	for (size_t i = 0; i < n; i++) {
		_cleanup_free_ char *parent = xstrdup(dirs[i]);
		*strrchr(parent, '/') = '\0';
		if (mkdir(parent, 0755) < 0 && errno != EEXIST) {
			r = -errno;
			*why = xasprintf("cannot create cgroup %s: %s", parent, strerror(-r));
			break;
		}
		if (mkdir(dirs[i], 0700) < 0) {
			r = -errno;
			/*
			 * Left by a fleetd that crashed between making it and recording
			 * the agent, or by an agent removed while fleetd was down: with
			 * no process in it, it is taken over (its limits are set anew
			 * below). One with processes belongs to someone: refused.
			 */
			if (r == -EEXIST && for_each_pid(dirs[i], NULL) == 0) {
				log_notice("cgroup %s was left behind, empty: taking it over", dirs[i]);
				r = 0;
				continue;
			}
			if (r == -EEXIST) {
				*why = xasprintf("cgroup %s already exists, with processes in it", dirs[i]);
				r = -EBUSY;	/* the name is in use by processes, not by an agent */
			} else {
				*why = xasprintf("cannot create cgroup %s: %s", dirs[i], strerror(-r));
			}
			break;
		}
		made[i] = true;
	}
	if (r == 0 && h->base[H_V2])
		v2_enable(h);
	if (r == 0)
		r = apply_limits(h, name, l, why);
	if (r < 0)
		for (size_t i = n; i > 0; i--)
			if (made[i - 1])
				(void)rmdir(dirs[i - 1]);
	free_dirs(dirs, n);
	return r;
}

int cgroup_remove(const struct cgroup_host *h, const char *name)
{
	char *dirs[H__COUNT];
	size_t n = group_dirs(h, name, dirs, H__COUNT);
	int r = 0;

	for (size_t i = 0; i < n; i++) {
		if (rmdir(dirs[i]) < 0 && errno != ENOENT && r == 0)
			r = -errno;
		*strrchr(dirs[i], '/') = '\0';
		(void)rmdir(dirs[i]);	/* the shared "fleet" dir, once no agent is left */
	}
	free_dirs(dirs, n);
	return r;
}

bool cgroup_exists(const struct cgroup_host *h, const char *name)
{
	int t = tracker(h);
	struct stat st;

	if (t < 0)
		return false;
	_cleanup_free_ char *d = xasprintf("%s/%s", h->base[t], name);
	return stat(d, &st) == 0;
}

int cgroup_open_join_fds(const struct cgroup_host *h, const char *name, int *fds, size_t max)
{
	char *dirs[H__COUNT];
	size_t n = group_dirs(h, name, dirs, H__COUNT);
	int count = 0;

	for (size_t i = 0; i < n && (size_t)count < max; i++) {
		_cleanup_free_ char *p = xasprintf("%s/cgroup.procs", dirs[i]);
		int fd = open(p, O_WRONLY | O_CLOEXEC);

		if (fd < 0) {
			int r = -errno;
			while (count > 0)
				close(fds[--count]);
			free_dirs(dirs, n);
			return r;
		}
		fds[count++] = fd;
	}
	free_dirs(dirs, n);
	return count;
}

int cgroup_join_count(const struct cgroup_host *h, const char *name)
{
	char *dirs[H__COUNT];
	size_t n = group_dirs(h, name, dirs, H__COUNT);

	free_dirs(dirs, n);
	return (int)n;
}

/* Call fn for each pid in the tracking group; returns the number of pids, or -errno. */
static int for_each_pid(const char *dir, void (*fn)(pid_t))
{
	_cleanup_free_ char *p = xasprintf("%s/cgroup.procs", dir);
	_cleanup_fclose_ FILE *f = fopen(p, "re");
	long pid;
	int n = 0;

	if (!f)
		return errno == ENOENT ? 0 : -errno;
	while (fscanf(f, "%ld", &pid) == 1) {
		if (fn)
			fn((pid_t)pid);
		n++;
	}
	return n;
}

static void kill_pid(pid_t pid)
{
	(void)kill(pid, SIGKILL);
}

int cgroup_usage(const struct cgroup_host *h, const char *name, long long *memory_bytes, double *cpu_seconds)
{
	int m = limit_hier(h, H_MEMORY), t = tracker(h);
	char buf[4096];
	long long v;

	*memory_bytes = -1;
	*cpu_seconds = -1;
	if (t < 0 || !cgroup_exists(h, name))
		return -ENOENT;
	if (m >= 0) {
		_cleanup_free_ char *d = xasprintf("%s/%s", h->base[m], name);

		if (read_file(d, m == H_V2 ? "memory.current" : "memory.usage_in_bytes", buf, sizeof(buf)) > 0 &&
		    sscanf(buf, "%lld", &v) == 1)
			*memory_bytes = v;
	}
	if (h->base[H_V2]) {
		_cleanup_free_ char *d = xasprintf("%s/%s", h->base[H_V2], name);
		const char *p;

		/* cpu.stat's usage_usec is there even without the cpu controller. */
		if (read_file(d, "cpu.stat", buf, sizeof(buf)) > 0 && (p = strstr(buf, "usage_usec ")) &&
		    sscanf(p + 11, "%lld", &v) == 1)
			*cpu_seconds = v / 1e6;
	} else if (h->base[H_CPU]) {
		_cleanup_free_ char *d = xasprintf("%s/%s", h->base[H_CPU], name);

		if (read_file(d, "cpuacct.usage", buf, sizeof(buf)) > 0 && sscanf(buf, "%lld", &v) == 1)
			*cpu_seconds = v / 1e9;	/* nanoseconds */
	}
	return 0;
}

int cgroup_count(const struct cgroup_host *h, const char *name)
{
	int t = tracker(h);

	if (t < 0)
		return 0;
	_cleanup_free_ char *d = xasprintf("%s/%s", h->base[t], name);
	return for_each_pid(d, NULL);
}

int cgroup_pids(const struct cgroup_host *h, const char *name, pid_t *pids, size_t max)
{
	int t = tracker(h), n = 0;
	long pid;

	if (t < 0)
		return 0;
	_cleanup_free_ char *p = xasprintf("%s/%s/cgroup.procs", h->base[t], name);
	_cleanup_fclose_ FILE *f = fopen(p, "re");
	if (!f)
		return errno == ENOENT ? 0 : -errno;
	while (fscanf(f, "%ld", &pid) == 1) {
		if ((size_t)n < max)
			pids[n] = (pid_t)pid;
		n++;
	}
	return n;
}

static void sleep_ms(int ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

int cgroup_kill(const struct cgroup_host *h, const char *name, int timeout_ms)
{
	int t = tracker(h);
	long long deadline = now_usec() + (long long)timeout_ms * 1000;
	int n;

	if (t < 0)
		return 0;
	_cleanup_free_ char *d = xasprintf("%s/%s", h->base[t], name);
	for (;;) {
		if (t == H_V2 && write_file(d, "cgroup.kill", "1") == 0) {
			/* one write kills every process, forks in flight included (Linux >= 5.14) */
		} else if (t == H_FREEZER) {
			char state[32] = "";

			/* Frozen processes cannot fork, so one pass over cgroup.procs gets them all. */
			(void)write_file(d, "freezer.state", "FROZEN");
			for (int i = 0; i < 200; i++) {
				if (read_file(d, "freezer.state", state, sizeof(state)) < 0 || strncmp(state, "FROZEN", 6) == 0)
					break;
				sleep_ms(1);
			}
			(void)for_each_pid(d, kill_pid);
			(void)write_file(d, "freezer.state", "THAWED");
		} else {
			(void)for_each_pid(d, kill_pid);
		}
		if ((n = for_each_pid(d, NULL)) <= 0)
			return n;
		if (now_usec() > deadline)
			return -ETIMEDOUT;
		sleep_ms(2);
	}
}

bool cgroup_host_can_freeze(const struct cgroup_host *h)
{
	int t = h ? tracker(h) : -1;

	return t == H_V2 || t == H_FREEZER;
}

/* The group directory of the freezer in use (the tracker), or NULL with *r set. */
static char *freezer_dir(const struct cgroup_host *h, const char *name, int *t, int *r)
{
	struct stat st;
	char *d;

	*t = h ? tracker(h) : -1;
	if (*t != H_V2 && *t != H_FREEZER) {
		*r = -EOPNOTSUPP;
		return NULL;
	}
	d = xasprintf("%s/%s", h->base[*t], name);
	if (stat(d, &st) < 0) {
		*r = -errno;
		free(d);
		return NULL;
	}
	*r = 0;
	return d;
}

/* v2: the "frozen" key of cgroup.events; v1: freezer.state reads FROZEN. */
static int frozen_now(const char *dir, int t)
{
	char buf[512];
	int r;

	if (t == H_V2) {
		if ((r = read_file(dir, "cgroup.events", buf, sizeof(buf))) < 0)
			return r;
		const char *p = strstr(buf, "frozen ");
		return p && (p == buf || p[-1] == '\n') && p[7] == '1';
	}
	if ((r = read_file(dir, "freezer.state", buf, sizeof(buf))) < 0)
		return r;
	return strncmp(buf, "FROZEN", 6) == 0;
}

int cgroup_freeze(const struct cgroup_host *h, const char *name, int timeout_ms)
{
	long long deadline = now_usec() + (long long)timeout_ms * 1000;
	int t, r;
	_cleanup_free_ char *d = freezer_dir(h, name, &t, &r);

	if (!d)
		return r;
	if ((r = write_file(d, t == H_V2 ? "cgroup.freeze" : "freezer.state", t == H_V2 ? "1" : "FROZEN")) < 0)
		return r;
	/* Stopping every task takes a moment (each must reach a safe point); a task in D state may never. */
	while ((r = frozen_now(d, t)) == 0) {
		if (now_usec() > deadline) {
			(void)cgroup_thaw(h, name);
			return -ETIMEDOUT;
		}
		sleep_ms(1);
	}
	if (r < 0) {
		(void)cgroup_thaw(h, name);
		return r;
	}
	return 0;
}

int cgroup_thaw(const struct cgroup_host *h, const char *name)
{
	int t, r;
	_cleanup_free_ char *d = freezer_dir(h, name, &t, &r);

	if (!d)
		return r == -ENOENT || r == -EOPNOTSUPP ? 0 : r;
	return write_file(d, t == H_V2 ? "cgroup.freeze" : "freezer.state", t == H_V2 ? "0" : "THAWED");
}

int cgroup_frozen(const struct cgroup_host *h, const char *name)
{
	int t, r;
	_cleanup_free_ char *d = freezer_dir(h, name, &t, &r);

	if (!d)
		return r == -ENOENT ? 0 : r;
	return frozen_now(d, t);
}
