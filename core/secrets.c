/*
 * secrets: see secrets.h. The host key lives in struct secrets (f->secrets)
 * for fleetd's life, wiped at the end; values are sealed and opened by
 * secret_box.c, stored by store/secrets.c.
 */
#include "core/secrets.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "core/secret_box.h"
#include "model/config.h"
#include "model/fleetd.h"
#include "store/db.h"

#define SECRET_KEY_NAME_MAX 128
#define HOST_KEY_FILE "secret.key"

struct secrets {
	unsigned char key[SECRET_BOX_KEY_LEN];
};

/* Names a run's environment sets itself (FLEET_*, run_exec.h) or the launchers fix (HOME, PATH...). */
static bool key_reserved(const char *key)
{
	static const char *const fixed[] = { "HOME", "USER", "LOGNAME", "SHELL", "PATH" };

	if (strncmp(key, "FLEET_", 6) == 0)
		return true;
	for (size_t i = 0; i < ARRAY_SIZE(fixed); i++)
		if (strcmp(key, fixed[i]) == 0)
			return true;
	return false;
}

int secret_key_check(const char *key)
{
	size_t n;

	if (!key || !*key || (n = strnlen(key, SECRET_KEY_NAME_MAX + 1)) > SECRET_KEY_NAME_MAX)
		return -EINVAL;
	if (!(key[0] == '_' || (key[0] >= 'A' && key[0] <= 'Z') || (key[0] >= 'a' && key[0] <= 'z')))
		return -EINVAL;
	for (size_t i = 1; i < n; i++)
		if (!(key[i] == '_' || (key[i] >= 'A' && key[i] <= 'Z') || (key[i] >= 'a' && key[i] <= 'z') ||
		      (key[i] >= '0' && key[i] <= '9')))
			return -EINVAL;
	return key_reserved(key) ? -EINVAL : 0;
}

/* Make path with 32 fresh random bytes, 0400, never over something that is there (a link included). */
static int host_key_create(const char *path, char **why)
{
	unsigned char key[SECRET_BOX_KEY_LEN];
	int fd, r;

	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0400);
	if (fd < 0) {
		r = -errno;
		*why = xasprintf("cannot create the host key %s: %s", path, strerror(errno));
		return r;
	}
	if ((r = secret_box_random(key, sizeof(key))) < 0 || (r = write_all(fd, key, sizeof(key))) < 0 ||
	    (fsync(fd) < 0 && (r = -errno) < 0)) {
		explicit_bzero(key, sizeof(key));
		close(fd);
		/* A key never written whole is no key: remove it, or the next start refuses it. */
		(void)unlink(path);
		*why = xasprintf("cannot write the host key %s: %s", path, strerror(-r));
		return r;
	}
	explicit_bzero(key, sizeof(key));
	close(fd);
	log_notice("created the secrets host key %s", path);
	return 0;
}

int secrets_init(struct fleetd *f, char **why)
{
	_cleanup_free_ char *path = xasprintf("%s/" HOST_KEY_FILE, config_get(&f->cfg, CFG_STATE_DIR));
	struct secrets *s;
	struct stat st;
	ssize_t n;
	int fd, r;

	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT) {
		if ((r = host_key_create(path, why)) < 0)
			return r;
		fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	}
	if (fd < 0) {
		r = -errno;
		*why = xasprintf("cannot open the host key %s: %s", path, strerror(errno));
		return r;
	}
	if (fstat(fd, &st) < 0) {
		r = -errno;
		close(fd);
		*why = xasprintf("cannot stat the host key %s: %s", path, strerror(-r));
		return r;
	}
	/* Anything but what we make is someone else's file, or damage: refuse rather than use or replace it. */
	if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 07777) != 0400 ||
	    st.st_size != SECRET_BOX_KEY_LEN) {
		close(fd);
		*why = xasprintf("the host key %s is not a %d-byte regular file of uid %ld with mode 0400 "
				 "(it has %lld bytes, uid %ld, mode %04o); fix or restore it (removing it makes "
				 "every stored secret unreadable)",
				 path, SECRET_BOX_KEY_LEN, (long)geteuid(), (long long)st.st_size, (long)st.st_uid,
				 (unsigned)(st.st_mode & 07777));
		return -EPERM;
	}
	s = xcalloc(1, sizeof(*s));
	(void)mlock(s, sizeof(*s));	/* best effort: keep the key out of swap */
	n = read(fd, s->key, sizeof(s->key));
	r = n < 0 ? -errno : 0;
	close(fd);
	if (n != (ssize_t)sizeof(s->key)) {
		explicit_bzero(s, sizeof(*s));
		free(s);
		*why = xasprintf("cannot read the host key %s: %s", path, r < 0 ? strerror(-r) : "short read");
		return r < 0 ? r : -EIO;
	}
	f->secrets = s;
	return 0;
}

void secrets_free(struct fleetd *f)
{
	if (!f->secrets)
		return;
	explicit_bzero(f->secrets, sizeof(*f->secrets));
	munlock(f->secrets, sizeof(*f->secrets));
	free(f->secrets);
	f->secrets = NULL;
}

int secrets_host_key_copy(struct fleetd *f, unsigned char *out, size_t len)
{
	if (!f->secrets || len != sizeof(f->secrets->key))
		return -ENOKEY;
	memcpy(out, f->secrets->key, len);
	return 0;
}

int secrets_host_key_install(const char *state_dir, const unsigned char *key, size_t len, char **why)
{
	_cleanup_free_ char *path = xasprintf("%s/" HOST_KEY_FILE, state_dir);
	int fd, r = 0;

	if (len != SECRET_BOX_KEY_LEN) {
		*why = xstrdup("the host key has the wrong length");
		return -EINVAL;
	}
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0400);
	if (fd < 0) {
		r = -errno;
		*why = xasprintf("cannot create the host key %s: %s", path, strerror(errno));
		return r;
	}
	if ((r = write_all(fd, key, len)) < 0 || (fsync(fd) < 0 && (r = -errno) < 0)) {
		close(fd);
		(void)unlink(path);
		*why = xasprintf("cannot write the host key %s: %s", path, strerror(-r));
		return r;
	}
	close(fd);
	return 0;
}

int secrets_set(struct fleetd *f, const char *agent, const char *key, const unsigned char *value, size_t len,
		char **why)
{
	unsigned char nonce[SECRET_BOX_NONCE_LEN];
	_cleanup_free_ unsigned char *ct = NULL;
	size_t ct_len;
	int r;

	if (secret_key_check(key) < 0) {
		*why = xstrdup("a secret's name is an environment variable name: [A-Za-z_][A-Za-z0-9_]*, at most 128 "
			       "bytes, not FLEET_* nor HOME, USER, LOGNAME, SHELL or PATH");
		return -EINVAL;
	}
	if (len > SECRET_VALUE_MAX) {
		*why = xasprintf("a secret's value is at most %u bytes", SECRET_VALUE_MAX);
		return -EINVAL;
	}
	/* It becomes an environment variable, which cannot hold a NUL. */
	if (memchr(value, '\0', len)) {
		*why = xstrdup("a secret's value cannot contain a NUL byte (it becomes an environment variable)");
		return -EINVAL;
	}
	if (!f->secrets) {
		*why = xstrdup("secrets are not available (no host key)");
		return -ENOKEY;
	}
	if ((r = secret_box_seal(f->secrets->key, agent, key, value, len, nonce, &ct, &ct_len)) < 0) {
		*why = xstrdup("cannot seal the value");
		return r;
	}
	r = db_secret_put(f->db, agent, key, nonce, sizeof(nonce), ct, ct_len, len, SECRET_KEYS_MAX);
	if (r == -ENOENT)
		*why = xasprintf("no agent '%s'", agent);
	else if (r == -E2BIG)
		*why = xasprintf("agent '%s' has %d secrets already, the most it may have", agent, SECRET_KEYS_MAX);
	else if (r < 0)
		*why = xasprintf("cannot store the secret: %s", strerror(-r));
	return r;
}

int secrets_remove(struct fleetd *f, const char *agent, const char *key, char **why)
{
	bool no_agent;
	int r;

	if (secret_key_check(key) < 0) {
		*why = xasprintf("agent '%s' has no secret '%s'", agent, key);
		return -ENOENT;
	}
	r = db_secret_delete(f->db, agent, key, &no_agent);
	if (r == -ENOENT)
		*why = no_agent ? xasprintf("no agent '%s'", agent) : xasprintf("agent '%s' has no secret '%s'", agent, key);
	else if (r < 0)
		*why = xasprintf("cannot remove the secret: %s", strerror(-r));
	return r;
}

int secrets_list(struct fleetd *f, const char *agent, struct secret_info **ret, size_t *n)
{
	struct db_secret *rows = NULL;
	struct secret_info *list;
	size_t count = 0;
	int r;

	if ((r = db_secret_list(f->db, agent, false, &rows, &count)) < 0)
		return r;
	list = xcalloc(count ? count : 1, sizeof(*list));
	for (size_t i = 0; i < count; i++) {
		list[i].key = TAKE_PTR(rows[i].key);
		list[i].size = rows[i].size;
		list[i].created_at = rows[i].created_at;
		list[i].updated_at = rows[i].updated_at;
	}
	db_secrets_free(rows, count);
	*ret = list;
	*n = count;
	return 0;
}

void secret_info_list_free(struct secret_info *list, size_t n)
{
	for (size_t i = 0; list && i < n; i++)
		free(list[i].key);
	free(list);
}

int secrets_load(struct fleetd *f, const char *agent, struct secret_values **ret)
{
	struct db_secret *rows = NULL;
	struct secret_values *out;
	size_t count = 0;
	int r;

	if ((r = db_secret_list(f->db, agent, true, &rows, &count)) < 0)
		return r;
	if (count > 0 && !f->secrets) {
		db_secrets_free(rows, count);
		return -ENOKEY;
	}
	out = xcalloc(1, sizeof(*out));
	out->v = xcalloc(count ? count : 1, sizeof(*out->v));
	for (size_t i = 0; i < count; i++) {
		struct secret_value *v = &out->v[out->n];

		r = secret_box_open(f->secrets->key, agent, rows[i].key, rows[i].nonce, rows[i].nonce_len, rows[i].ct,
				    rows[i].ct_len, &v->value, &v->len);
		if (r < 0) {
			/* The key name is no secret; which one failed helps the operator. */
			log_error("agent '%s': secret '%s' does not %s", agent, rows[i].key,
				  r == -EBADMSG ? "authenticate under this host's key (another key, or a row "
						  "moved from another agent or key, or damage)" : "open");
			break;
		}
		v->key = TAKE_PTR(rows[i].key);
		out->n++;
	}
	db_secrets_free(rows, count);
	if (r < 0) {
		secret_values_free(out);
		return r;
	}
	*ret = out;
	return 0;
}

int secrets_compare(struct fleetd *f, const char *agent, const char *key, const unsigned char *value, size_t len,
		    bool *same, char **why)
{
	_cleanup_(secret_values_freep) struct secret_values *all = NULL;
	int r;

	if ((r = secrets_load(f, agent, &all)) < 0) {
		*why = xasprintf("cannot read the secrets of '%s': %s", agent, strerror(-r));
		return r;
	}
	for (size_t i = 0; i < all->n; i++) {
		unsigned char diff = all->v[i].len != len;

		if (strcmp(all->v[i].key, key) != 0)
			continue;
		/* Every byte looked at whatever differs: the time says nothing about where. */
		for (size_t j = 0; j < len && j < all->v[i].len; j++)
			diff |= all->v[i].value[j] ^ value[j];
		*same = diff == 0;
		return 0;
	}
	*why = xasprintf("agent '%s' has no secret '%s'", agent, key);
	return -ENOENT;
}

void secret_values_free(struct secret_values *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->n; i++) {
		if (s->v[i].value) {
			explicit_bzero(s->v[i].value, s->v[i].len);
			free(s->v[i].value);
		}
		free(s->v[i].key);
	}
	free(s->v);
	free(s);
}
