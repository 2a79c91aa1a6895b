/*
 * ssh_keys: the keys of fleetd's SSH control channel, made with libcrypto
 * alone (no libssh2): an ed25519 key pair written as fleetd's client key
 * (OpenSSH format) or as a guest's host key (dropbear's format), its public
 * key line "ssh-ed25519 AAAA... comment" (for authorized_keys), and the
 * SHA256 fingerprints fleetd pins a guest's host key by.
 */
#ifndef FLEET_SSH_KEYS_H
#define FLEET_SSH_KEYS_H

#include <stddef.h>

enum ssh_key_format {
	SSH_KEY_OPENSSH,	/* "BEGIN OPENSSH PRIVATE KEY": what libssh2 1.10 loads for ed25519 */
	SSH_KEY_DROPBEAR,	/* dropbear's binary host key format (dropbear -r FILE) */
};

/* The one key type fleetd makes, offers and pins. */
#define SSH_KEY_TYPE "ssh-ed25519"

/*
 * Generate a new ed25519 key pair with OpenSSL: the private key goes to path
 * (mode 0600, in fmt; an existing file is replaced atomically), the public
 * key line "ssh-ed25519 AAAA... comment" to path.pub. Optionally returns
 * that line (without newline) and its fingerprint "SHA256:...". -errno.
 */
int ssh_keygen(const char *path, enum ssh_key_format fmt, const char *comment,
	       char **pubkey_ret, char **fingerprint_ret);

/* Fingerprint "SHA256:<base64, no padding>" of a raw public key blob. */
char *ssh_fingerprint_blob(const void *blob, size_t len);

/* Fingerprint of a public key line "TYPE BASE64 [comment]"; -EINVAL if malformed. */
int ssh_fingerprint_pubkey(const char *line, char **ret);

#endif
