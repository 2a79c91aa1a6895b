/* restore: see restore.h. */
#include "core/restore.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include "backend/backend.h"
#include "common/log.h"
#include "common/names.h"
#include "common/util.h"
#include "core/backends.h"
#include "core/backup_files.h"
#include "core/backup_key.h"
#include "core/lifecycle.h"
#include "core/secret_box.h"
#include "core/secrets.h"
#include "model/fleetd.h"
#include "store/db.h"
#include "user/home_archive.h"
#include "vm/disk_backup.h"

struct restore {
	int dir;
	char *path;
	json_t *manifest;
	unsigned char key[SECRET_BOX_KEY_LEN];
};

void restore_free(struct restore *rs)
{
	if (!rs)
		return;
	explicit_bzero(rs->key, sizeof(rs->key));
	if (rs->dir >= 0)
		close(rs->dir);
	json_decref(rs->manifest);
	free(rs->path);
	free(rs);
}

/* A file of the state dir that must not be there yet: 0, or -EEXIST with *why. */
static int state_has(const char *state_dir, const char *name, char **why)
{
	_cleanup_free_ char *p = xasprintf("%s/%s", state_dir, name);
	struct stat st;

	if (lstat(p, &st) == 0) {
		*why = xasprintf("%s exists: --restore-from needs a state directory without a database or host key", p);
		return -EEXIST;
	}
	return 0;
}

static json_t *read_json(int dir, const char *name, char **why)
{
	_cleanup_close_ int fd = openat(dir, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	json_error_t err;
	struct stat st;
	json_t *j;

	if (fd < 0) {
		*why = errno == ENOENT && strcmp(name, BACKUP_MANIFEST) == 0
			? xstrdup("the backup has no manifest.json: it is incomplete (a backup that failed or is still "
				  "being written); refusing it")
			: xasprintf("cannot open %s: %s", name, strerror(errno));
		return NULL;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > BACKUP_MANIFEST_MAX) {
		*why = xasprintf("%s is not a regular file of at most %u bytes", name, BACKUP_MANIFEST_MAX);
		return NULL;
	}
	if (!(j = json_loadfd(fd, JSON_REJECT_DUPLICATES, &err)) || !json_is_object(j)) {
		*why = xasprintf("%s is not a JSON object: %s", name, j ? "another type" : err.text);
		json_decref(j);
		return NULL;
	}
	return j;
}

/* Every file the manifest names, with its size and hash; the database and key among them. */
static int verify_files(struct restore *rs, char **why)
{
	json_t *files = json_object_get(rs->manifest, "files"), *e;
	bool have_db = false, have_key = false;
	size_t i;

	if (!json_is_array(files)) {
		*why = xstrdup("the manifest has no list of files");
		return -EINVAL;
	}
	json_array_foreach(files, i, e) {
		const char *name = json_string_value(json_object_get(e, "name"));
		const char *want = json_string_value(json_object_get(e, "sha256"));
		json_t *size = json_object_get(e, "size");
		char hex[65];
		long long got;
		int r;

		if (!name || !want || !json_is_integer(size) || strchr(name, '/') || name[0] == '.') {
			*why = xstrdup("the manifest has a malformed file entry");
			return -EINVAL;
		}
		if ((r = backup_file_hash(rs->dir, name, hex, &got)) < 0) {
			*why = xasprintf("cannot read %s of the backup: %s", name, strerror(-r));
			return r;
		}
		if (got != json_integer_value(size) || strcmp(hex, want) != 0) {
			*why = xasprintf("%s of the backup does not match its manifest (%s: size %lld, SHA-256 %s): "
					 "damaged or changed; refusing the backup",
					 name, got != json_integer_value(size) ? "size" : "content", got, hex);
			return -EBADMSG;
		}
		have_db |= strcmp(name, BACKUP_DB) == 0;
		have_key |= strcmp(name, BACKUP_KEY) == 0;
	}
	if (!have_db || !have_key) {
		*why = xasprintf("the manifest names no %s", have_db ? BACKUP_KEY : BACKUP_DB);
		return -EINVAL;
	}
	return 0;
}

/* The first line of in (from a terminal: asked for, not echoed), without its newline: 0, or -EINVAL (empty, too long, none). */
static int read_passphrase(FILE *in, char *buf, size_t len, size_t *ret_len)
{
	struct termios old, quiet;
	bool tty = isatty(fileno(in)), echo_off = false;
	char *got;
	size_t n;

	if (tty) {
		fprintf(stderr, "passphrase of the backup's secrets key (not shown): ");
		if (tcgetattr(fileno(in), &old) == 0) {
			quiet = old;
			quiet.c_lflag &= ~(tcflag_t)ECHO;
			echo_off = tcsetattr(fileno(in), TCSAFLUSH, &quiet) == 0;
		}
	}
	got = fgets(buf, (int)len, in);
	if (echo_off)
		(void)tcsetattr(fileno(in), TCSAFLUSH, &old);
	if (tty)
		fputc('\n', stderr);
	if (!got)
		return -EINVAL;
	n = strlen(buf);
	if (n && buf[n - 1] == '\n')
		buf[--n] = '\0';
	else if (n == len - 1)
		return -EINVAL;	/* longer than the most a backup takes */
	*ret_len = n;
	return n ? 0 : -EINVAL;
}

struct restore *restore_prepare(const char *dir, const char *state_dir, FILE *pass_in, char **why)
{
	struct restore *rs = xcalloc(1, sizeof(*rs));
	char pass[BACKUP_PASSPHRASE_MAX + 2];
	json_t *sealed = NULL;
	size_t pass_len = 0;
	json_int_t format, schema;
	int r;

	rs->dir = -1;
	rs->path = xstrdup(dir);
	if (state_has(state_dir, "fleet.db", why) < 0 || state_has(state_dir, "secret.key", why) < 0)
		goto fail;
	if ((rs->dir = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
		*why = xasprintf("cannot open the backup %s: %s", dir, strerror(errno));
		goto fail;
	}
	if (!(rs->manifest = read_json(rs->dir, BACKUP_MANIFEST, why)))
		goto fail;
	if (json_unpack(rs->manifest, "{s:I, s:I}", "format", &format, "schema_version", &schema) < 0 ||
	    format != BACKUP_FORMAT) {
		*why = xasprintf("the manifest is not of backup format %d", BACKUP_FORMAT);
		goto fail;
	}
	if (schema > db_schema_version()) {
		*why = xasprintf("the backup's database is of schema version %lld, newer than this fleetd's %d: restore "
				 "it with a fleetd at least as new as the one that made it", (long long)schema,
				 db_schema_version());
		goto fail;
	}
	if (verify_files(rs, why) < 0)
		goto fail;
	if (!(sealed = read_json(rs->dir, BACKUP_KEY, why)))
		goto fail;
	if (read_passphrase(pass_in, pass, sizeof(pass), &pass_len) < 0) {
		*why = xasprintf("no passphrase: --restore-from reads it, 1 to %d bytes, as the first line of stdin",
				 BACKUP_PASSPHRASE_MAX);
		goto fail;
	}
	r = backup_key_open(sealed, pass, pass_len, rs->key, sizeof(rs->key));
	explicit_bzero(pass, sizeof(pass));
	json_decref(sealed);
	sealed = NULL;
	if (r == -EBADMSG) {
		*why = xstrdup("wrong passphrase (or a damaged secret.key.enc): the host key does not open; nothing "
			       "was changed");
		goto fail;
	}
	if (r < 0) {
		*why = xstrdup("secret.key.enc is malformed");
		goto fail;
	}
	return rs;
fail:
	explicit_bzero(pass, sizeof(pass));
	json_decref(sealed);
	restore_free(rs);
	return NULL;
}

/* The backup's database to state_dir/fleet.db: a copy beside, fsynced, renamed in, never over anything. */
static int install_db(struct restore *rs, const char *state_dir, char **why)
{
	_cleanup_free_ char *tmp = xasprintf("%s/fleet.db.restore", state_dir);
	_cleanup_free_ char *dst = xasprintf("%s/fleet.db", state_dir);
	_cleanup_close_ int in = openat(rs->dir, BACKUP_DB, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	int out, r = 0;
	char buf[65536];
	ssize_t n;

	if (in < 0) {
		r = -errno;
		*why = xasprintf("cannot open the backup's database: %s", strerror(errno));
		return r;
	}
	(void)unlink(tmp);	/* what an interrupted restore left: ours, in our locked state dir */
	if ((out = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600)) < 0) {
		r = -errno;
		*why = xasprintf("cannot create %s: %s", tmp, strerror(errno));
		return r;
	}
	while (!r && (n = read(in, buf, sizeof(buf))) != 0)
		r = n < 0 ? (errno == EINTR ? 0 : -errno) : write_all(out, buf, (size_t)n);
	if (!r && fsync(out) < 0)
		r = -errno;
	close(out);
	/* link(2) then unlink: never over a fleet.db that appeared meanwhile. */
	if (!r && link(tmp, dst) < 0)
		r = -errno;
	(void)unlink(tmp);
	if (r < 0) {
		*why = xasprintf("cannot install the database %s: %s", dst, strerror(-r));
		return r;
	}
	return 0;
}

int restore_install(struct restore *rs, const char *state_dir, char **why)
{
	_cleanup_free_ char *key_path = xasprintf("%s/secret.key", state_dir);
	int r;

	/* Again, now that the state dir is ours. */
	if ((r = state_has(state_dir, "fleet.db", why)) < 0 || (r = state_has(state_dir, "secret.key", why)) < 0)
		return r;
	if ((r = secrets_host_key_install(state_dir, rs->key, sizeof(rs->key), why)) < 0)
		return r;
	if ((r = install_db(rs, state_dir, why)) < 0) {
		(void)unlink(key_path);
		return r;
	}
	log_notice("restore: installed the database and the host key from %s", rs->path);
	return 0;
}

/* A user agent's home from its tar, extracted as its (new) user. */
static int unpack_home(struct fleetd *f, struct restore *rs, const char *agent, const char *file, char **why)
{
	_cleanup_free_ char *home = NULL;
	_cleanup_close_ int fd = -1;
	uid_t uid;
	int r;

	if ((r = user_home_of(f, agent, &uid, &home)) < 0) {
		*why = xasprintf("its new user is not there: %s", strerror(-r));
		return r;
	}
	if (strchr(file, '/') || (fd = openat(rs->dir, file, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
		*why = xasprintf("cannot open %s of the backup", file);
		return -ENOENT;
	}
	return user_home_unpack(uid, home, fd, why);
}

/* Whether the manifest's snapshots of an agent (NULL: none) list snap. */
static bool snap_kept(const json_t *snaps, const char *snap)
{
	const json_t *e;
	size_t i;

	json_array_foreach(snaps, i, e)
		if (strcmp(json_string_value(json_object_get(e, "name")) ?: "", snap) == 0)
			return true;
	return false;
}

/*
 * Records of snapshots whose data stayed on the old host (all of them,
 * unless the backup was --with-disks): gone, so nothing offers a restore to them.
 */
static void drop_snapshots(struct fleetd *f, const char *agent, const json_t *kept)
{
	struct snapshot **list = NULL;
	size_t n = 0, dropped = 0;

	if (db_snapshot_list(f->db, agent, DB_ANY_STATE, &list, &n) < 0)
		return;
	for (size_t i = 0; i < n; i++)
		if (!snap_kept(kept, list[i]->name) && db_snapshot_delete(f->db, agent, list[i]->name) == 0)
			dropped++;
	if (dropped)
		log_notice("restore: agent '%s': %zu snapshot record(s) dropped (not in the backup)", agent, dropped);
	snapshot_list_free(list);
}

/* --with-disks: each snapshot's copy of the home, extracted as the new user; a failure drops its record. */
static void unpack_snapshots(struct fleetd *f, struct restore *rs, const char *agent, const json_t *snaps)
{
	const json_t *e;
	size_t i;

	json_array_foreach(snaps, i, e) {
		const char *snap = json_string_value(json_object_get(e, "name"));
		const char *file = json_string_value(json_object_get(e, "file"));
		_cleanup_free_ char *why = NULL;
		_cleanup_close_ int fd = -1;
		int r = -EINVAL;

		const char *bad;

		if (!snap || !file || strchr(file, '/') || snapshot_name_check(snap, &bad) < 0)
			why = xstrdup("a malformed snapshot entry in the manifest");
		else if ((fd = openat(rs->dir, file, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) < 0)
			why = xasprintf("cannot open %s of the backup", file);
		else
			r = user_snapshot_unpack(f, agent, snap, fd, &why);
		if (r < 0) {
			log_error("restore: agent '%s': snapshot '%s' not restored: %s", agent, snap ? snap : "?", why);
			if (snap)
				(void)db_snapshot_delete(f->db, agent, snap);
		}
	}
}

/* --with-disks: a VM agent on its own disks, its domain and snapshots defined again. */
static void restore_vm(struct fleetd *f, struct restore *rs, const struct agent *a, const json_t *e, const json_t *snaps)
{
	_cleanup_free_ char *why = NULL;
	const json_t *s;
	size_t i, kept = 0;
	int r;

	if ((r = vm_disk_restore(f, a, rs->dir, e, &why)) < 0) {
		char *w = xasprintf("not restored: its disks could not be put back: %s", why ? why : strerror(-r));

		log_error("restore: agent '%s': %s", a->name, w);
		(void)lifecycle_set_state(f, a->name, AGENT_MISSING, w);
		free(w);
		return;
	}
	json_array_foreach(snaps, i, s) {
		const char *snap = json_string_value(json_object_get(s, "name"));
		const char *xml = json_string_value(json_object_get(s, "libvirt_xml"));
		_cleanup_free_ char *swhy = NULL;

		if (!snap)
			continue;
		if (!xml || (r = vm_disk_restore_snapshot(f, a, xml, &swhy)) < 0) {
			log_error("restore: agent '%s': snapshot '%s' not restored: %s", a->name, snap,
				  swhy ? swhy : "no definition in the manifest");
			(void)db_snapshot_delete(f->db, a->name, snap);
			continue;
		}
		kept++;
	}
	(void)lifecycle_set_state(f, a->name, AGENT_STOPPED, NULL);
	log_notice("restore: agent '%s' (vm) restored on its disks (memory store included), %zu snapshot(s)", a->name, kept);
}

static void restore_one(struct fleetd *f, struct restore *rs, json_t *e)
{
	const char *name = json_string_value(json_object_get(e, "name"));
	const char *home = json_string_value(json_object_get(e, "home"));
	const json_t *snaps;
	_cleanup_(agent_freep) struct agent *a = NULL;
	_cleanup_free_ char *why = NULL;
	const struct backend_ops *ops;
	const char *bwhy;
	bool vm_disks;
	int r;

	if (!name || db_agent_get(f->db, name, &a) < 0) {
		log_error("restore: the manifest names agent '%s', which the database does not have", name ? name : "?");
		return;
	}
	if (a->state == AGENT_PROVISIONING || a->state == AGENT_REMOVING) {
		/* A create never acknowledged, or a remove asked for: what the reconcile would finish. */
		log_notice("restore: agent '%s' was being %s at backup time; not restored", name,
			   a->state == AGENT_PROVISIONING ? "created" : "removed");
		(void)db_agent_delete(f->db, name);
		return;
	}
	vm_disks = a->backend == BACKEND_VM && json_array_size(json_object_get(e, "vm_files"));
	snaps = a->backend == BACKEND_USER || vm_disks ? json_object_get(e, "snapshots") : NULL;
	drop_snapshots(f, name, snaps);
	if (a->state == AGENT_DEFINED)
		return;	/* never provisioned: nothing to make */
	if (!(ops = backend_get(f, a->backend, &bwhy))) {
		why = xasprintf("not restored: the %s backend is unavailable (%s)", backend_kind_to_string(a->backend), bwhy);
		goto fail;
	}
	if (vm_disks) {
		restore_vm(f, rs, a, e, snaps);
		return;
	}
	if ((r = ops->provision(f, a, &why)) < 0) {
		char *w = xasprintf("not restored: provision failed: %s", why ? why : strerror(-r));
		free(why);
		why = w;
		goto fail;
	}
	if (a->backend == BACKEND_USER && home && (r = unpack_home(f, rs, name, home, &why)) < 0) {
		char *w = xasprintf("restored without its home: %s", why ? why : strerror(-r));
		free(why);
		why = w;
		unpack_snapshots(f, rs, name, snaps);
		(void)lifecycle_set_state(f, name, AGENT_STOPPED, why);
		log_error("restore: agent '%s': %s", name, why);
		return;
	}
	unpack_snapshots(f, rs, name, snaps);
	(void)lifecycle_set_state(f, name, AGENT_STOPPED, NULL);
	log_notice("restore: agent '%s' (%s) restored%s%s", name, backend_kind_to_string(a->backend),
		   a->backend == BACKEND_USER && home ? " with its home and memory store" : "",
		   json_array_size(snaps) ? " and its snapshots"
		   : a->backend == BACKEND_VM ? " from its base image (its disk and memory store were not in the backup)" : "");
	return;
fail:
	log_error("restore: agent '%s': %s", name, why);
	(void)lifecycle_set_state(f, name, AGENT_MISSING, why);
}

void restore_agents(struct fleetd *f, struct restore *rs)
{
	json_t *agents = json_object_get(rs->manifest, "agents"), *e;
	size_t i;

	json_array_foreach(agents, i, e)
		restore_one(f, rs, e);
	log_notice("restore from %s done: %zu agent(s); start fleetd normally from now on", rs->path,
		   json_array_size(agents));
}
