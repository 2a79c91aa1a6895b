/*
 * test_secrets: the AEAD of agents' secrets (core/secret_box.c) and
 * core/secrets.c over a real database file and host key: a value opens
 * only under its host key, for its agent and key, whole and unchanged;
 * the host key file is made 0400 once and refused when it is not ours.
 */
#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "core/secret_box.h"
#include "core/redact.h"
#include "core/redaction.h"
#include "core/secrets.h"
#include "model/config.h"
#include "model/fleetd.h"
#include "store/db.h"
#include "tests/tap.h"

static const unsigned char K1[SECRET_BOX_KEY_LEN] = "0123456789abcdef0123456789abcdef";
static const unsigned char K2[SECRET_BOX_KEY_LEN] = "0123456789abcdef0123456789abcdeF";

static int try_open(const unsigned char *key, const char *agent, const char *name, const unsigned char *nonce,
		    size_t nonce_len, const unsigned char *ct, size_t ct_len)
{
	unsigned char *plain = NULL;
	size_t len = 0;
	int r = secret_box_open(key, agent, name, nonce, nonce_len, ct, ct_len, &plain, &len);

	free(plain);
	return r;
}

static void test_box(void)
{
	static const char value[] = "ghp_s3cret-value";
	unsigned char nonce[SECRET_BOX_NONCE_LEN], nonce2[SECRET_BOX_NONCE_LEN];
	unsigned char *ct = NULL, *ct2 = NULL, *plain = NULL;
	size_t ct_len = 0, ct2_len = 0, len = 0;

	is_int(secret_box_seal(K1, "triage", "TOKEN", (const unsigned char *)value, strlen(value), nonce, &ct, &ct_len), 0,
	       "seal a value");
	is_int(ct_len, strlen(value) + SECRET_BOX_TAG_LEN, "the ciphertext is the value's size plus the tag");
	ok(!memmem(ct, ct_len, value, strlen(value)), "the ciphertext does not hold the value");
	is_int(secret_box_open(K1, "triage", "TOKEN", nonce, sizeof(nonce), ct, ct_len, &plain, &len), 0,
	       "it opens under its key, agent and name");
	ok(len == strlen(value) && memcmp(plain, value, len) == 0 && plain[len] == '\0',
	   "to the same bytes, NUL-terminated");
	free(plain);

	is_int(try_open(K2, "triage", "TOKEN", nonce, sizeof(nonce), ct, ct_len), -EBADMSG, "another host key: -EBADMSG");
	is_int(try_open(K1, "review", "TOKEN", nonce, sizeof(nonce), ct, ct_len), -EBADMSG,
	       "the row moved to another agent: -EBADMSG");
	is_int(try_open(K1, "triage", "OTHER", nonce, sizeof(nonce), ct, ct_len), -EBADMSG,
	       "the row moved to another key: -EBADMSG");
	is_int(try_open(K1, "triageT", "OKEN", nonce, sizeof(nonce), ct, ct_len), -EBADMSG,
	       "the same bytes split differently between agent and key: -EBADMSG");
	is_int(try_open(K1, "triage", "TOKEN", nonce, sizeof(nonce), ct, ct_len - 1), -EBADMSG,
	       "cut by one byte: -EBADMSG");
	is_int(try_open(K1, "triage", "TOKEN", nonce, sizeof(nonce), ct, SECRET_BOX_TAG_LEN - 1), -EBADMSG,
	       "shorter than a tag: -EBADMSG");
	is_int(try_open(K1, "triage", "TOKEN", nonce, sizeof(nonce) - 1, ct, ct_len), -EBADMSG,
	       "a shorter nonce: -EBADMSG");
	for (size_t i = 0; i < ct_len; i += 5) {
		ct[i] ^= 0x01;
		if (try_open(K1, "triage", "TOKEN", nonce, sizeof(nonce), ct, ct_len) != -EBADMSG)
			ok(0, "a bit flipped at byte %zu still opened", i);
		ct[i] ^= 0x01;
	}
	ok(1, "a bit flipped in the ciphertext or tag (every 5th byte): -EBADMSG");
	nonce[3] ^= 0x80;
	is_int(try_open(K1, "triage", "TOKEN", nonce, sizeof(nonce), ct, ct_len), -EBADMSG, "a flipped nonce: -EBADMSG");
	nonce[3] ^= 0x80;

	is_int(secret_box_seal(K1, "triage", "TOKEN", (const unsigned char *)value, strlen(value), nonce2, &ct2, &ct2_len),
	       0, "seal the same value again");
	ok(memcmp(nonce, nonce2, sizeof(nonce)) != 0 && memcmp(ct, ct2, ct_len) != 0,
	   "with a fresh nonce, so another ciphertext");
	free(ct);
	free(ct2);

	is_int(secret_box_seal(K1, "a", "E", (const unsigned char *)"", 0, nonce, &ct, &ct_len), 0, "seal an empty value");
	is_int(secret_box_open(K1, "a", "E", nonce, sizeof(nonce), ct, ct_len, &plain, &len), 0, "it opens");
	is_int(len, 0, "empty");
	free(plain);
	free(ct);
}

static void test_key_names(void)
{
	static const char *const good[] = { "TOKEN", "_x", "a1", "GITHUB_TOKEN", "Fleet_x", NULL };
	static const char *const bad[] = { "", "1A", "A-B", "A B", "A=B", "ä", "FLEET_RUN_ID", "FLEET_", "PATH", "HOME",
					   "USER", NULL };
	char longest[130];

	for (int i = 0; good[i]; i++)
		is_int(secret_key_check(good[i]), 0, "'%s' is a secret name", good[i]);
	for (int i = 0; bad[i]; i++)
		is_int(secret_key_check(bad[i]), -EINVAL, "'%s' is not", bad[i]);
	is_int(secret_key_check(NULL), -EINVAL, "NULL is not");
	memset(longest, 'A', 128);
	longest[128] = '\0';
	is_int(secret_key_check(longest), 0, "128 bytes is a name");
	longest[128] = 'A';
	longest[129] = '\0';
	is_int(secret_key_check(longest), -EINVAL, "129 is not");
}

static struct agent *make_agent(const char *name)
{
	struct agent *a = xcalloc(1, sizeof(*a));

	a->name = xstrdup(name);
	a->backend = BACKEND_USER;
	a->state = AGENT_DEFINED;
	a->memory_mib = 512;
	a->vcpus = 1;
	a->disk_gib = 1;
	return a;
}

static void open_fleetd(struct fleetd *f, const char *dir)
{
	_cleanup_free_ char *path = xasprintf("%s/fleet.db", dir);
	const char *why;

	memset(f, 0, sizeof(*f));
	config_init(&f->cfg);
	(void)config_set(&f->cfg, CFG_STATE_DIR, dir, CFG_FROM_CMDLINE, 0, &why);
	if (db_open(path, &f->db) < 0) {
		fprintf(stderr, "cannot open %s\n", path);
		exit(1);
	}
}

static void close_fleetd(struct fleetd *f)
{
	secrets_free(f);
	db_close(f->db);
	config_free(&f->cfg);
}

static void test_store(const char *dir)
{
	_cleanup_free_ char *keypath = xasprintf("%s/secret.key", dir);
	_cleanup_free_ char *dbpath = xasprintf("%s/fleet.db", dir);
	struct fleetd f;
	struct secret_values *sv = NULL;
	struct secret_info *info = NULL;
	size_t n = 0;
	char *why = NULL;
	struct stat st;
	struct agent *a;
	unsigned char big[SECRET_VALUE_MAX + 1];
	sqlite3 *h;

	open_fleetd(&f, dir);
	is_int(secrets_init(&f, &why), 0, "the first start makes the host key");
	ok(stat(keypath, &st) == 0 && (st.st_mode & 07777) == 0400 && st.st_size == SECRET_BOX_KEY_LEN &&
	   st.st_uid == geteuid(), "0400, 32 bytes, ours");
	a = make_agent("triage");
	is_int(db_agent_insert(f.db, a), 0, "agent triage");
	agent_free(a);
	a = make_agent("review");
	is_int(db_agent_insert(f.db, a), 0, "agent review");
	agent_free(a);

	is_int(secrets_set(&f, "triage", "TOKEN", (const unsigned char *)"t-one", 5, &why), 0, "set triage's TOKEN");
	is_int(secrets_set(&f, "triage", "API_KEY", (const unsigned char *)"k-two", 5, &why), 0, "set triage's API_KEY");
	is_int(secrets_set(&f, "review", "TOKEN", (const unsigned char *)"r-three", 7, &why), 0, "set review's TOKEN");
	is_int(secrets_set(&f, "nobody", "TOKEN", (const unsigned char *)"x", 1, &why), -ENOENT, "no such agent: -ENOENT");
	free(why);
	why = NULL;
	is_int(secrets_set(&f, "triage", "BAD-NAME", (const unsigned char *)"x", 1, &why), -EINVAL, "a bad name: -EINVAL");
	free(why);
	why = NULL;
	is_int(secrets_set(&f, "triage", "NUL", (const unsigned char *)"a\0b", 3, &why), -EINVAL, "a NUL byte: -EINVAL");
	free(why);
	why = NULL;
	memset(big, 'x', sizeof(big));
	is_int(secrets_set(&f, "triage", "BIG", big, sizeof(big), &why), -EINVAL, "one byte over SECRET_VALUE_MAX: -EINVAL");
	free(why);
	why = NULL;
	is_int(secrets_set(&f, "triage", "BIG", big, SECRET_VALUE_MAX, &why), 0, "SECRET_VALUE_MAX bytes: stored");
	is_int(secrets_remove(&f, "triage", "BIG", &why), 0, "and removed");

	is_int(secrets_list(&f, "triage", &info, &n), 0, "list triage's secrets");
	ok(n == 2 && strcmp(info[0].key, "API_KEY") == 0 && strcmp(info[1].key, "TOKEN") == 0 && info[1].size == 5 &&
	   info[1].created_at > 0, "two, by name, with their sizes and dates");
	secret_info_list_free(info, n);
	is_int(secrets_list(&f, "nobody", &info, &n), -ENOENT, "list of no such agent: -ENOENT");

	is_int(secrets_load(&f, "triage", &sv), 0, "load triage's secrets");
	ok(sv && sv->n == 2 && strcmp(sv->v[1].key, "TOKEN") == 0 && sv->v[1].len == 5 &&
	   strcmp((char *)sv->v[1].value, "t-one") == 0, "decrypted");
	secret_values_free(sv);
	is_int(secrets_set(&f, "triage", "TOKEN", (const unsigned char *)"t-rotated", 9, &why), 0, "rotate TOKEN");
	is_int(secrets_load(&f, "triage", &sv), 0, "load again");
	ok(sv && sv->n == 2 && strcmp((char *)sv->v[1].value, "t-rotated") == 0, "the new value");
	secret_values_free(sv);
	{
		bool same = false;

		/* What fleetctl apply asks: is this the stored value? Nothing is written. */
		is_int(secrets_compare(&f, "triage", "TOKEN", (const unsigned char *)"t-rotated", 9, &same, &why), 0,
		       "compare TOKEN");
		ok(same, "the stored value is the same");
		is_int(secrets_compare(&f, "triage", "TOKEN", (const unsigned char *)"t-rotatex", 9, &same, &why), 0,
		       "compare another value of the same length");
		ok(!same, "is not the same");
		is_int(secrets_compare(&f, "triage", "TOKEN", (const unsigned char *)"t-rotated!", 10, &same, &why), 0,
		       "compare a longer value");
		ok(!same, "is not the same");
		is_int(secrets_compare(&f, "triage", "TOKEN", (const unsigned char *)"t-rot", 5, &same, &why), 0,
		       "compare a prefix");
		ok(!same, "is not the same");
		is_int(secrets_compare(&f, "triage", "NOPE", (const unsigned char *)"x", 1, &same, &why), -ENOENT,
		       "compare a key it does not have: -ENOENT");
		ok(why && strstr(why, "no secret 'NOPE'"), "saying so");
		free(why);
		why = NULL;
	}

	is_int(secrets_remove(&f, "triage", "API_KEY", &why), 0, "remove API_KEY");
	is_int(secrets_remove(&f, "triage", "API_KEY", &why), -ENOENT, "again: -ENOENT");
	free(why);
	why = NULL;
	is_int(secrets_remove(&f, "nobody", "API_KEY", &why), -ENOENT, "of no such agent: -ENOENT");
	ok(why && strstr(why, "no agent"), "saying there is no such agent");
	free(why);
	why = NULL;

	for (int i = 0; i < SECRET_KEYS_MAX; i++) {
		char name[16];

		snprintf(name, sizeof(name), "K%d", i);
		if (secrets_set(&f, "review", name, (const unsigned char *)"v", 1, &why) < 0)
			break;
	}
	free(why);	/* the refusal that ended the loop said why */
	why = NULL;
	is_int(secrets_set(&f, "review", "ONE_MORE", (const unsigned char *)"v", 1, &why), -E2BIG,
	       "beyond SECRET_KEYS_MAX keys: -E2BIG");
	free(why);
	why = NULL;
	is_int(secrets_set(&f, "review", "TOKEN", (const unsigned char *)"r-four", 6, &why), 0,
	       "replacing an existing key at the limit works");
	{
		/* A value too short to redact: fleetd's log says so once, not at every run and health check. */
		char logpath[] = "/tmp/test-secrets-log.XXXXXX", buf[4096] = "";
		int fd = mkstemp(logpath), warned = 0;
		struct redactor *r = NULL;
		size_t nv = 0;
		ssize_t got;

		is_int(secrets_set(&f, "triage", "PIN", (const unsigned char *)"abc", 3, &why), 0, "a 3-byte PIN");
		log_set_fd(fd);
		for (int i = 0; i < 3; i++) {
			if (redaction_load(&f, "triage", &r, &nv, &why) == 0)
				redactor_free(r);
		}
		log_set_fd(STDERR_FILENO);
		got = pread(fd, buf, sizeof(buf) - 1, 0);
		buf[got > 0 ? got : 0] = '\0';
		for (const char *p = buf; (p = strstr(p, "secret 'PIN' is shorter")); p++)
			warned++;
		is_int(warned, 1, "three loads of triage's secrets: the short PIN is warned about once");
		close(fd);
		unlink(logpath);
		is_int(secrets_remove(&f, "triage", "PIN", &why), 0, "remove the PIN");
	}

	/* A ciphertext copied into another agent's row (as sqlite3 on the file would). */
	ok(sqlite3_open(dbpath, &h) == SQLITE_OK &&
	   sqlite3_exec(h, "UPDATE secrets SET ciphertext = (SELECT ciphertext FROM secrets s JOIN agents a ON a.id = "
			   "s.agent_id WHERE a.name = 'triage' AND s.name = 'TOKEN'), nonce = (SELECT nonce FROM secrets s "
			   "JOIN agents a ON a.id = s.agent_id WHERE a.name = 'triage' AND s.name = 'TOKEN') WHERE name = "
			   "'TOKEN' AND agent_id = (SELECT id FROM agents WHERE name = 'review')", NULL, NULL, NULL) == SQLITE_OK,
	   "copy triage's TOKEN row into review's");
	sqlite3_close(h);
	sv = NULL;
	is_int(secrets_load(&f, "review", &sv), -EBADMSG, "review's secrets no longer load: -EBADMSG");
	ok(sv == NULL, "and nothing is handed out");
	is_int(secrets_load(&f, "triage", &sv), 0, "triage's still load");
	secret_values_free(sv);
	is_int(db_agent_delete(f.db, "review"), 0, "remove agent review");
	{
		sqlite3_stmt *q = NULL;
		int left = -1;

		if (sqlite3_open(dbpath, &h) == SQLITE_OK &&
		    sqlite3_prepare_v2(h, "SELECT count(*) FROM secrets", -1, &q, NULL) == SQLITE_OK &&
		    sqlite3_step(q) == SQLITE_ROW)
			left = sqlite3_column_int(q, 0);
		sqlite3_finalize(q);
		sqlite3_close(h);
		is_int(left, 1, "its secrets went with it (ON DELETE CASCADE): triage's TOKEN is left");
	}
	close_fleetd(&f);

	/* The same key at the next start; another key file refuses them. */
	open_fleetd(&f, dir);
	is_int(secrets_init(&f, &why), 0, "the next start reads the same key");
	is_int(secrets_load(&f, "triage", &sv), 0, "triage's secrets open");
	secret_values_free(sv);
	close_fleetd(&f);
	{
		int fd;

		ok(chmod(keypath, 0600) == 0 && (fd = open(keypath, O_WRONLY)) >= 0 && write(fd, K2, 32) == 32 &&
		   close(fd) == 0 && chmod(keypath, 0400) == 0, "replace the host key with another");
	}
	open_fleetd(&f, dir);
	is_int(secrets_init(&f, &why), 0, "a start with it");
	is_int(secrets_load(&f, "triage", &sv), -EBADMSG, "cannot open what the old key sealed: -EBADMSG");
	close_fleetd(&f);

	ok(chmod(keypath, 0440) == 0, "make the key 0440");
	open_fleetd(&f, dir);
	ok(secrets_init(&f, &why) == -EPERM && why && strstr(why, "mode 0400"), "refused: %s", why ? why : "");
	free(why);
	why = NULL;
	close_fleetd(&f);
	ok(chmod(keypath, 0600) == 0 && truncate(keypath, 31) == 0 && chmod(keypath, 0400) == 0, "cut the key to 31 bytes");
	open_fleetd(&f, dir);
	ok(secrets_init(&f, &why) == -EPERM && why && strstr(why, "31 bytes"), "refused: %s", why ? why : "");
	free(why);
	why = NULL;
	close_fleetd(&f);
	ok(unlink(keypath) == 0 && symlink("/etc/passwd", keypath) == 0, "a symlink in the key's place");
	open_fleetd(&f, dir);
	ok(secrets_init(&f, &why) < 0 && why, "refused: %s", why ? why : "");
	free(why);
	close_fleetd(&f);
	unlink(keypath);
}

int main(void)
{
	char dir[] = "/tmp/fleet-test-secrets-XXXXXX";
	_cleanup_free_ char *cmd = NULL;

	test_box();
	test_key_names();
	if (!mkdtemp(dir))
		return 1;
	test_store(dir);
	cmd = xasprintf("rm -rf '%s'", dir);
	if (system(cmd) != 0)
		ok(0, "remove %s", dir);
	return tap_done();
}
