/*
 * secret_box: the AEAD that seals an agent's secrets (core/secrets.c), the
 * one file of core/ that uses libcrypto. AES-256-GCM with a fresh random
 * 96-bit nonce per seal and a 128-bit tag appended to the ciphertext; the
 * associated data binds the agent's name and the key name in, so a sealed
 * value moved to another agent's or key's row does not open.
 */
#ifndef FLEET_CORE_SECRET_BOX_H
#define FLEET_CORE_SECRET_BOX_H

#include <stddef.h>

#define SECRET_BOX_KEY_LEN 32
#define SECRET_BOX_NONCE_LEN 12
#define SECRET_BOX_TAG_LEN 16

/* n bytes from the system's CSPRNG (libcrypto's RAND_bytes): 0 or -EIO. */
int secret_box_random(unsigned char *buf, size_t n);

/*
 * Seal len bytes of plain for (agent, key) under host_key: a fresh nonce
 * into nonce, *ret_ct (len + SECRET_BOX_TAG_LEN bytes, caller frees) and
 * *ret_len. 0, or -EIO (libcrypto failed).
 */
int secret_box_seal(const unsigned char host_key[SECRET_BOX_KEY_LEN], const char *agent, const char *key,
		    const unsigned char *plain, size_t len, unsigned char nonce[SECRET_BOX_NONCE_LEN],
		    unsigned char **ret_ct, size_t *ret_len);

/*
 * Open what secret_box_seal made: *ret_plain (NUL-terminated, *ret_len
 * bytes without it; caller wipes and frees). -EBADMSG if it does not
 * authenticate (another host key, agent or key name, a changed, cut or
 * extended ciphertext or nonce), -EIO if libcrypto failed.
 */
int secret_box_open(const unsigned char host_key[SECRET_BOX_KEY_LEN], const char *agent, const char *key,
		    const unsigned char *nonce, size_t nonce_len, const unsigned char *ct, size_t ct_len,
		    unsigned char **ret_plain, size_t *ret_len);

#endif
