/*
 * secrets: the secrets table (migration 1, size added for #12): per agent
 * and key name, the nonce and the sealed value (ciphertext with its tag),
 * never a plaintext; removed with the agent (ON DELETE CASCADE).
 */
#include "store/db.h"

#include <errno.h>
#include <sqlite3.h>
#include <string.h>

#include "common/util.h"
#include "store/db_internal.h"

void db_secrets_free(struct db_secret *s, size_t n)
{
	for (size_t i = 0; s && i < n; i++) {
		free(s[i].key);
		free(s[i].nonce);
		free(s[i].ct);
	}
	free(s);
}

/* 0 if agent exists, -ENOENT if not, else -errno. */
static int agent_exists(struct db *db, const char *agent)
{
	_cleanup_stmt_release_ sqlite3_stmt *st = NULL;
	int r;

	if ((r = db_prepare_cached(db, &st, "SELECT 1 FROM agents WHERE name = ?")) < 0)
		return r;
	sqlite3_bind_text(st, 1, agent, -1, SQLITE_STATIC);
	r = db_step(db, st);
	return r < 0 ? r : r == 0 ? -ENOENT : 0;
}

int db_secret_put(struct db *db, const char *agent, const char *key, const unsigned char *nonce, size_t nonce_len,
		  const unsigned char *ct, size_t ct_len, size_t size, int max_keys)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int64_t now = unix_now();
	int r;

	/* One statement: the count and the write cannot be split by another writer. */
	if ((r = db_prepare(db, &st,
			    "INSERT INTO secrets (agent_id, name, ciphertext, nonce, size, created_at, updated_at)"
			    " SELECT a.id, ?1, ?2, ?3, ?4, ?5, ?5 FROM agents a WHERE a.name = ?6 AND"
			    "  ((SELECT count(*) FROM secrets s WHERE s.agent_id = a.id) < ?7 OR"
			    "   EXISTS (SELECT 1 FROM secrets s WHERE s.agent_id = a.id AND s.name = ?1))"
			    " ON CONFLICT (agent_id, name) DO UPDATE SET ciphertext = excluded.ciphertext,"
			    "  nonce = excluded.nonce, size = excluded.size, updated_at = excluded.updated_at")) < 0)
		return r;
	sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
	sqlite3_bind_blob(st, 2, ct, (int)ct_len, SQLITE_STATIC);
	sqlite3_bind_blob(st, 3, nonce, (int)nonce_len, SQLITE_STATIC);
	sqlite3_bind_int64(st, 4, (sqlite3_int64)size);
	sqlite3_bind_int64(st, 5, now);
	sqlite3_bind_text(st, 6, agent, -1, SQLITE_STATIC);
	sqlite3_bind_int(st, 7, max_keys);
	if ((r = db_step(db, st)) < 0)
		return r;
	if (sqlite3_changes(db->h) > 0)
		return 0;
	r = agent_exists(db, agent);
	return r < 0 ? r : -E2BIG;
}

int db_secret_delete(struct db *db, const char *agent, const char *key, bool *no_agent)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r;

	*no_agent = false;
	if ((r = db_prepare(db, &st, "DELETE FROM secrets WHERE name = ? AND agent_id = (SELECT id FROM agents WHERE name = ?)")) < 0)
		return r;
	sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, agent, -1, SQLITE_STATIC);
	r = db_step_change(db, st);
	if (r == -ENOENT)
		*no_agent = agent_exists(db, agent) == -ENOENT;
	return r;
}

static unsigned char *col_blobdup(sqlite3_stmt *st, int col, size_t *len)
{
	const void *b = sqlite3_column_blob(st, col);
	unsigned char *out;

	*len = (size_t)sqlite3_column_bytes(st, col);
	out = xmalloc(*len ? *len : 1);
	if (*len)
		memcpy(out, b, *len);
	return out;
}

int db_secret_list(struct db *db, const char *agent, bool with_sealed, struct db_secret **ret, size_t *n)
{
	_cleanup_stmt_release_ sqlite3_stmt *st = NULL;
	struct db_secret *list = NULL;
	size_t count = 0;
	int r;

	if ((r = agent_exists(db, agent)) < 0)
		return r;
	if ((r = db_prepare_cached(db, &st, "SELECT s.name, s.nonce, s.ciphertext, s.size, s.created_at, s.updated_at"
				     " FROM secrets s JOIN agents a ON a.id = s.agent_id WHERE a.name = ? ORDER BY s.name")) < 0)
		return r;
	sqlite3_bind_text(st, 1, agent, -1, SQLITE_STATIC);
	while ((r = db_step(db, st)) > 0) {
		struct db_secret *s;

		list = xrealloc(list, (count + 1) * sizeof(*list));
		s = &list[count++];
		memset(s, 0, sizeof(*s));
		s->key = col_strdup(st, 0);
		if (with_sealed) {
			s->nonce = col_blobdup(st, 1, &s->nonce_len);
			s->ct = col_blobdup(st, 2, &s->ct_len);
		}
		s->size = (size_t)sqlite3_column_int64(st, 3);
		s->created_at = sqlite3_column_int64(st, 4);
		s->updated_at = sqlite3_column_int64(st, 5);
	}
	if (r < 0) {
		db_secrets_free(list, count);
		return r;
	}
	*ret = list;
	*n = count;
	return 0;
}
