/*
 * secrets: each agent's credentials (issue #12). Values are sealed with an
 * AEAD under the host key (STATE/secret.key, 0400, made at first start),
 * the agent and key name bound in as associated data; the store holds only
 * ciphertext. A value leaves this module only for its own agent's run or
 * exec (as environment variables or files on a tmpfs) and for redaction.
 *
 * Interface shared by the helpers of this session: S implements it (with
 * the store, the API and fleetctl secret set|ls|rm), R uses
 * secrets_load() for redaction and secret files.
 */
#ifndef FLEET_CORE_SECRETS_H
#define FLEET_CORE_SECRETS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct fleetd;

#define SECRET_VALUE_MAX (64u << 10)	/* bytes of one value */
#define SECRET_KEYS_MAX 128		/* keys of one agent */

/* One decrypted secret. value is NUL-terminated for convenience (len excludes it). */
struct secret_value {
	char *key;			/* an environment-variable name: [A-Za-z_][A-Za-z0-9_]*, at most 128 bytes */
	unsigned char *value;
	size_t len;
};

/* An agent's decrypted secrets; secret_values_free wipes every value before freeing. */
struct secret_values {
	struct secret_value *v;
	size_t n;
};

/* What `secret ls` shows: never a value. */
struct secret_info {
	char *key;
	size_t size;			/* plaintext bytes */
	int64_t created_at, updated_at;	/* unix seconds */
};

/* 0 if key is a valid secret name, else -EINVAL. */
int secret_key_check(const char *key);

/* Open or create the host key (called by fleetd at start): 0, or -errno with *why. */
int secrets_init(struct fleetd *f, char **why);
void secrets_free(struct fleetd *f);
/* A copy of the host key (32 bytes) for a backup (core/backup.c); -ENOKEY without one. */
int secrets_host_key_copy(struct fleetd *f, unsigned char *out, size_t len);
/* Write key as STATE/secret.key (0400, O_EXCL: never over anything) for a restore; 0 or -errno with *why. */
int secrets_host_key_install(const char *state_dir, const unsigned char *key, size_t len, char **why);

/* Seal and store (replacing) agent's key: 0, -ENOENT no such agent, -EINVAL bad key or value, -E2BIG too many keys; *why set on failure. */
int secrets_set(struct fleetd *f, const char *agent, const char *key, const unsigned char *value, size_t len,
		char **why);
/* 0, -ENOENT (no such agent or key, *why says which). */
int secrets_remove(struct fleetd *f, const char *agent, const char *key, char **why);
/* The agent's keys, sorted by name; free with secret_info_list_free. 0 or -errno. */
int secrets_list(struct fleetd *f, const char *agent, struct secret_info **ret, size_t *n);
void secret_info_list_free(struct secret_info *list, size_t n);
/*
 * Whether agent's key holds exactly these len bytes (*same), without
 * writing anything (fleetctl apply: set only what differs). 0, -ENOENT (no
 * such key, *why says so) or -errno with *why.
 */
int secrets_compare(struct fleetd *f, const char *agent, const char *key, const unsigned char *value, size_t len,
		    bool *same, char **why);

/*
 * Every secret of agent, decrypted (an agent with none: *ret with n = 0).
 * 0, or -errno: -EBADMSG when a value does not authenticate (wrong host
 * key, a row copied from another agent or key, a truncated ciphertext).
 */
int secrets_load(struct fleetd *f, const char *agent, struct secret_values **ret);
void secret_values_free(struct secret_values *s);
static inline void secret_values_freep(struct secret_values **s) { secret_values_free(*s); }

#endif
