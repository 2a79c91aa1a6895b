/* backup: see backup.h. */
#include "core/backup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "backend/worker.h"
#include "common/log.h"
#include "common/util.h"
#include "core/backup_files.h"
#include "core/backends.h"
#include "core/backup_key.h"
#include "core/secret_box.h"
#include "core/secrets.h"
#include "model/fleetd.h"
#include "store/db.h"
#include "user/home_archive.h"
#include "vm/disk_backup.h"

/* A tree to archive as its agent: the home, or (--with-disks) a snapshot's copy of it. */
struct home_item {
	char *agent;
	char *snap;		/* NULL: the home itself */
	uid_t uid;
	char *home;		/* the directory */
	char *file;		/* its name in the backup */
	json_t *entry;		/* its object in the manifest's agents (borrowed from the manifest) */
};

/* --with-disks: a VM agent's disks, copied on the worker. */
struct vm_item {
	struct vm_disk_copy *copy;
	char *agent;
	json_t *entry;		/* borrowed from the manifest */
};

struct backup_job {
	struct fleetd *f;
	int dir;
	char *path;
	json_t *manifest;	/* owned; "files" and "agents" filled as the job goes */
	struct home_item *homes;
	size_t n_homes;
	struct vm_item *vms;
	size_t n_vms;
	int r;
	char *why;
	backup_done_fn done;
	void *userdata;
};

static bool busy;	/* one backup at a time */

/* dir, made 0700 root, or an empty directory of root's made so; an O_DIRECTORY fd or -errno with *why. */
static int open_target(const char *path, char **why)
{
	struct stat st;
	DIR *d;
	struct dirent *e;
	int fd, r;

	if (path[0] != '/' || strlen(path) >= PATH_MAX || strstr(path, "/../") || strstr(path, "/./")) {
		*why = xstrdup("the backup directory must be an absolute path without . or .. components");
		return -EINVAL;
	}
	if (mkdir(path, 0700) < 0 && errno != EEXIST) {
		r = -errno;
		*why = xasprintf("cannot create %s: %s", path, strerror(errno));
		return r;
	}
	fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		r = -errno;
		*why = xasprintf("cannot open %s: %s", path, errno == ELOOP || errno == ENOTDIR ? "not a directory (a link?)" : strerror(errno));
		return r;
	}
	if (fstat(fd, &st) < 0 || st.st_uid != 0) {
		close(fd);
		*why = xasprintf("%s exists and is not root's", path);
		return -EPERM;
	}
	if (!(d = fdopendir(dup(fd)))) {
		r = -errno;
		close(fd);
		*why = xasprintf("cannot read %s: %s", path, strerror(-r));
		return r;
	}
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
			closedir(d);
			close(fd);
			*why = xasprintf("%s exists and is not empty: a backup goes into a new directory", path);
			return -EEXIST;
		}
	closedir(d);
	if (fchmod(fd, 0700) < 0) {
		r = -errno;
		close(fd);
		*why = xasprintf("cannot chmod %s: %s", path, strerror(-r));
		return r;
	}
	return fd;
}

static void job_free(struct backup_job *j)
{
	for (size_t i = 0; i < j->n_homes; i++) {
		free(j->homes[i].agent);
		free(j->homes[i].snap);
		free(j->homes[i].home);
		free(j->homes[i].file);
	}
	free(j->homes);
	for (size_t i = 0; i < j->n_vms; i++) {
		vm_disk_copy_end(j->vms[i].copy);	/* on the loop: the agent free again */
		free(j->vms[i].agent);
	}
	free(j->vms);
	json_decref(j->manifest);
	if (j->dir >= 0)
		close(j->dir);
	free(j->path);
	free(j->why);
	free(j);
}

/* Add name to the manifest's files, with its size and SHA-256 (after it was fsynced). */
static int add_file(struct backup_job *j, const char *name)
{
	char hex[65];
	long long size;
	int r = backup_file_hash(j->dir, name, hex, &size);

	if (r < 0) {
		j->why = xasprintf("cannot read back %s: %s", name, strerror(-r));
		return r;
	}
	json_array_append_new(json_object_get(j->manifest, "files"),
			      json_pack("{s:s, s:I, s:s}", "name", name, "size", (json_int_t)size, "sha256", hex));
	return 0;
}

/* The database (online backup API: one moment of it) and the sealed key, on the loop. */
static int copy_db_and_key(struct backup_job *j, const char *pass, size_t pass_len)
{
	unsigned char key[SECRET_BOX_KEY_LEN];
	_cleanup_free_ char *db_path = xasprintf("%s/" BACKUP_DB, j->path);
	json_t *sealed;
	char *text;
	int fd, r;

	if ((fd = backup_file_create(j->dir, BACKUP_DB)) < 0) {
		j->why = xasprintf("cannot create %s: %s", db_path, strerror(-fd));
		return fd;
	}
	close(fd);
	if ((r = db_backup_to(j->f->db, db_path)) < 0 || (r = backup_file_sync(j->dir, BACKUP_DB)) < 0) {
		j->why = xasprintf("cannot copy the database: %s", strerror(-r));
		return r;
	}
	if ((r = add_file(j, BACKUP_DB)) < 0)
		return r;
	if ((r = secrets_host_key_copy(j->f, key, sizeof(key))) < 0) {
		j->why = xstrdup("there is no secrets host key to back up");
		return r;
	}
	sealed = backup_key_seal(key, sizeof(key), pass, pass_len);
	explicit_bzero(key, sizeof(key));
	if (!sealed) {
		j->why = xstrdup("cannot seal the host key");
		return -EIO;
	}
	text = json_dumps(sealed, JSON_INDENT(2));
	json_decref(sealed);
	r = backup_file_write(j->dir, BACKUP_KEY, text, strlen(text));
	free(text);
	if (r < 0) {
		j->why = xasprintf("cannot write %s: %s", BACKUP_KEY, strerror(-r));
		return r;
	}
	return add_file(j, BACKUP_KEY);
}

/* Worker: each home as its agent, then the manifest. Touches only the job. */
static void work(void *arg)
{
	struct backup_job *j = arg;
	char *text;

	for (size_t i = 0; i < j->n_homes && !j->r; i++) {
		struct home_item *h = &j->homes[i];
		const char *name = h->file;
		_cleanup_free_ char *why = NULL;
		int fd = backup_file_create(j->dir, name), r;

		if (fd < 0) {
			j->r = fd;
			j->why = xasprintf("cannot create %s: %s", name, strerror(-fd));
			break;
		}
		r = user_home_archive(h->uid, h->home, fd, &why);
		if (!r && fsync(fd) < 0)
			r = -errno;
		close(fd);
		if (r < 0) {
			j->r = r;
			j->why = xasprintf("agent '%s'%s%s: %s", h->agent, h->snap ? ", snapshot " : "", h->snap ? h->snap : "",
					   why ? why : strerror(-r));
			break;
		}
		if ((j->r = add_file(j, name)) < 0)
			break;
		if (h->snap) {
			json_array_append_new(json_object_get(h->entry, "snapshots"),
					      json_pack("{s:s, s:s}", "name", h->snap, "file", name));
			continue;
		}
		json_object_set_new(h->entry, "home", json_string(name));
		json_array_append_new(json_object_get(h->entry, "copied"), json_string("home"));
		json_array_append_new(json_object_get(h->entry, "copied"), json_string("memory"));
	}
	for (size_t i = 0; i < j->n_vms && !j->r; i++) {
		struct vm_item *v = &j->vms[i];
		_cleanup_free_ char *why = NULL;
		json_t *names = json_array(), *e;
		size_t k;

		if ((j->r = vm_disk_copy_run(v->copy, j->dir, v->entry, names, &why)) < 0)
			j->why = xasprintf("agent '%s': %s", v->agent, why ? why : strerror(-j->r));
		json_array_foreach(names, k, e)
			if (!j->r && (j->r = add_file(j, json_string_value(e))) < 0)
				break;
		json_decref(names);
		if (!j->r)
			json_array_append_new(json_object_get(v->entry, "copied"), json_string("disks"));
	}
	if (j->r)
		return;
	/* Everything is on disk before the manifest says so. */
	if (fsync(j->dir) < 0) {
		j->r = -errno;
		j->why = xasprintf("cannot sync %s: %s", j->path, strerror(errno));
		return;
	}
	text = json_dumps(j->manifest, JSON_INDENT(2) | JSON_SORT_KEYS);
	j->r = text ? backup_file_write(j->dir, BACKUP_MANIFEST, text, strlen(text)) : -ENOMEM;
	free(text);
	if (!j->r && fsync(j->dir) < 0)
		j->r = -errno;
	if (j->r)
		j->why = xasprintf("cannot write the manifest: %s", strerror(-j->r));
}

static void job_done(void *arg)
{
	struct backup_job *j = arg;

	busy = false;
	if (j->r)
		log_error("backup into %s failed: %s (the directory has no manifest: it is no backup)", j->path, j->why);
	else
		log_notice("backup into %s done: %zu file(s)", j->path, json_array_size(json_object_get(j->manifest, "files")));
	j->done(j->userdata, j->r, j->why, j->manifest);
	job_free(j);
}

static void add_item(struct backup_job *j, const char *agent, const char *snap, uid_t uid, char *dir, json_t *e)
{
	j->homes = xrealloc(j->homes, (j->n_homes + 1) * sizeof(*j->homes));
	j->homes[j->n_homes++] = (struct home_item){
		.agent = xstrdup(agent), .snap = snap ? xstrdup(snap) : NULL, .uid = uid, .home = dir, .entry = e,
		.file = snap ? xasprintf(BACKUP_SNAP_FMT, agent, snap) : xasprintf(BACKUP_HOME_FMT, agent),
	};
}

/* --with-disks: each finished snapshot of a user agent, its copy of the home archived as the agent. */
static int add_snapshots(struct backup_job *j, const char *agent, uid_t uid, json_t *e, char **why)
{
	struct snapshot **list = NULL;
	size_t n = 0;
	int r;

	if ((r = db_snapshot_list(j->f->db, agent, SNAPSHOT_READY, &list, &n)) < 0) {
		*why = xasprintf("agent '%s': cannot list its snapshots: %s", agent, strerror(-r));
		return r;
	}
	json_object_set_new(e, "snapshots", json_array());
	if (n)	/* the manifest, written only once all are copied, lists each */
		json_array_append_new(json_object_get(e, "copied"), json_string("snapshots"));
	for (size_t i = 0; i < n; i++)
		add_item(j, agent, list[i]->name, uid, user_snapshot_home_path(j->f, agent, list[i]->name), e);
	snapshot_list_free(list);
	return 0;
}

/* --with-disks: a VM agent's disks and its snapshots' definitions, for the worker. */
static int add_vm(struct backup_job *j, const struct agent *a, json_t *e, char **why)
{
	const char *agent = a->name;
	struct snapshot **list = NULL;
	struct vm_disk_copy *c = NULL;
	const char *off = NULL;
	char **names;
	size_t n = 0;
	int r;

	/* A backend that failed to start has no guests to pause nor disks it answers for. */
	if (!backend_get(j->f, BACKEND_VM, &off)) {
		*why = xasprintf("agent '%s': the vm backend is unavailable (%s): its disks cannot be copied; back up "
				 "without --with-disks, or fix the backend first (fleetctl doctor)", agent, off ? off : "?");
		return -ENODEV;
	}
	if ((r = db_snapshot_list(j->f->db, agent, SNAPSHOT_READY, &list, &n)) < 0) {
		*why = xasprintf("agent '%s': cannot list its snapshots: %s", agent, strerror(-r));
		return r;
	}
	names = xcalloc(n + 1, sizeof(*names));
	for (size_t i = 0; i < n; i++)
		names[i] = list[i]->name;
	r = vm_disk_copy_begin(j->f, a, names, n, &c, why);
	free(names);
	snapshot_list_free(list);
	if (r < 0)
		return r;
	j->vms = xrealloc(j->vms, (j->n_vms + 1) * sizeof(*j->vms));
	j->vms[j->n_vms++] = (struct vm_item){ .copy = c, .agent = xstrdup(agent), .entry = e };
	return 0;
}

/* The agents part of the manifest; user agents' homes (and snapshots) queued for the worker. */
static int list_agents(struct backup_job *j, bool with_disks, char **why)
{
	struct agent **list = NULL;
	size_t n = 0;
	json_t *agents = json_object_get(j->manifest, "agents");
	int r;

	if ((r = db_agent_list(j->f->db, &list, &n)) < 0) {
		*why = xasprintf("cannot list agents: %s", strerror(-r));
		return r;
	}
	for (size_t i = 0; i < n && !r; i++) {
		struct agent *a = list[i];
		json_t *e = json_pack("{s:s, s:s, s:s, s:[]}", "name", a->name, "backend", backend_kind_to_string(a->backend),
				      "state", agent_state_to_string(a->state), "copied");
		uid_t uid;
		char *home;

		json_array_append_new(agents, e);
		if (with_disks && a->backend == BACKEND_VM && a->state != AGENT_DEFINED && a->state != AGENT_MISSING &&
		    a->state != AGENT_PROVISIONING && a->state != AGENT_REMOVING) {
			r = add_vm(j, a, e, why);
			continue;
		}
		/* What has no home (never made, gone, being made or removed): its record is all there is. */
		if (a->backend != BACKEND_USER || a->state == AGENT_DEFINED || a->state == AGENT_MISSING ||
		    a->state == AGENT_PROVISIONING || a->state == AGENT_REMOVING)
			continue;
		if ((r = user_home_of(j->f, a->name, &uid, &home)) < 0) {
			*why = xasprintf("agent '%s': cannot find its user: %s", a->name, strerror(-r));
			break;
		}
		add_item(j, a->name, NULL, uid, home, e);
		if (with_disks)
			r = add_snapshots(j, a->name, uid, e, why);
	}
	agent_list_free(list);
	return r;
}

int backup_start(struct fleetd *f, const char *dir, const char *pass, size_t pass_len, bool with_disks,
		 backup_done_fn done, void *userdata, char **why)
{
	struct backup_job *j;
	char when[32];
	int r;

	if (!pass_len || pass_len > BACKUP_PASSPHRASE_MAX) {
		*why = xasprintf("the passphrase must be 1 to %d bytes", BACKUP_PASSPHRASE_MAX);
		return -EINVAL;
	}
	if (busy) {
		*why = xstrdup("a backup is under way");
		return -EBUSY;
	}
	j = xcalloc(1, sizeof(*j));
	j->f = f;
	j->dir = -1;
	j->done = done;
	j->userdata = userdata;
	j->manifest = json_pack("{s:i, s:s, s:i, s:s, s:b, s:[], s:[]}", "format", BACKUP_FORMAT,
				"fleetd_version", PACKAGE_VERSION, "schema_version", db_schema_version(),
				"created_at", format_utc(time(NULL), when, sizeof(when)), "with_disks", with_disks,
				"files", "agents");
	/* Refusals that need no directory come first: a refused backup leaves nothing behind. */
	if ((r = list_agents(j, with_disks, why)) < 0) {
		job_free(j);
		return r;
	}
	if ((j->dir = open_target(dir, why)) < 0) {
		r = j->dir;
		job_free(j);
		return r;
	}
	j->path = xstrdup(dir);
	if ((r = copy_db_and_key(j, pass, pass_len)) < 0) {
		*why = TAKE_PTR(j->why);
		log_error("backup into %s failed: %s", dir, *why);
		job_free(j);
		return r;
	}
	if ((r = worker_run(f->base, work, job_done, j)) < 0) {
		*why = xasprintf("cannot start the copy: %s", strerror(-r));
		job_free(j);
		return r;
	}
	busy = true;
	return 0;
}
