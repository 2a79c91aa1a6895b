/*
 * backup_key: the secrets host key in a backup, sealed with a passphrase:
 * scrypt (N 2^15, r 8, p 1, a random 16-byte salt) derives a key that
 * seals the host key with AES-256-GCM (libcrypto), all stored with its
 * parameters as one JSON object (secret.key.enc). A wrong passphrase fails
 * the tag: -EBADMSG, nothing returned.
 */
#ifndef FLEET_CORE_BACKUP_KEY_H
#define FLEET_CORE_BACKUP_KEY_H

#include <jansson.h>
#include <stddef.h>

#define BACKUP_PASSPHRASE_MAX 1024

/* The sealed host key as a JSON object (caller owns it), or NULL when sealing failed. */
json_t *backup_key_seal(const unsigned char *key, size_t key_len, const char *pass, size_t pass_len);
/* Open it into key (key_len bytes): 0, -EBADMSG a wrong passphrase or damaged file, -EINVAL malformed. */
int backup_key_open(const json_t *sealed, const char *pass, size_t pass_len, unsigned char *key, size_t key_len);

#endif
