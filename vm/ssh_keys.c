/*
 * ssh_keys: see ssh_keys.h. libcrypto only; base64 is common/base64's.
 *
 * Key material (seeds, the private key text and its base64) lives only in
 * buffers that are wiped before they are freed.
 */
#include "vm/ssh_keys.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include "common/base64.h"
#include "common/util.h"

#define ED25519_LEN 32
/* A public key line's base64 longer than this is not one of ours. */
#define PUBKEY_B64_MAX 65536

/* --- byte buffers ------------------------------------------------------------ */

struct bytes {
	unsigned char *p;
	size_t len, cap;
};

static void bytes_put(struct bytes *b, const void *d, size_t n)
{
	if (b->len + n > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		unsigned char *p;

		while (cap < b->len + n)
			cap *= 2;
		/* no realloc: the old block may hold key material to wipe */
		p = xmalloc(cap);
		if (b->p) {
			memcpy(p, b->p, b->len);
			OPENSSL_cleanse(b->p, b->cap);
			free(b->p);
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, d, n);
	b->len += n;
}

static void bytes_u32(struct bytes *b, uint32_t v)
{
	unsigned char d[4] = { v >> 24, v >> 16, v >> 8, v };
	bytes_put(b, d, 4);
}

static void bytes_str(struct bytes *b, const void *d, size_t n)
{
	bytes_u32(b, (uint32_t)n);
	bytes_put(b, d, n);
}

static void bytes_wipe(struct bytes *b)
{
	if (b->p) {
		OPENSSL_cleanse(b->p, b->cap);
		free(b->p);
	}
	*b = (struct bytes){ 0 };
}

/* --- fingerprints ------------------------------------------------------------ */

char *ssh_fingerprint_blob(const void *blob, size_t len)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int md_len = 0;
	_cleanup_free_ char *b64 = NULL;
	char *eq;

	if (!EVP_Digest(blob, len, md, &md_len, EVP_sha256(), NULL))
		abort();	/* SHA-256 of memory cannot fail short of OOM */
	b64 = base64_encode(md, md_len);
	if ((eq = strchr(b64, '=')))
		*eq = '\0';	/* OpenSSH prints it without padding */
	return xasprintf("SHA256:%s", b64);
}

int ssh_fingerprint_pubkey(const char *line, char **ret)
{
	_cleanup_free_ unsigned char *blob = NULL;
	const char *type_end, *b64, *b64_end;
	size_t blob_len, tlen;
	uint32_t n;
	int r;

	type_end = strchr(line, ' ');
	if (!type_end)
		return -EINVAL;
	tlen = (size_t)(type_end - line);
	b64 = type_end + strspn(type_end, " ");
	b64_end = b64 + strcspn(b64, " \t\r\n");
	/* strict: padding only at the end, so one line has one reading */
	if (b64_end - b64 > PUBKEY_B64_MAX)
		return -EINVAL;
	if ((r = base64_decode(b64, (size_t)(b64_end - b64), &blob, &blob_len)) < 0)
		return r;
	/* the blob starts with its own type, which must be the one named */
	if (blob_len < 4)
		return -EINVAL;
	n = (uint32_t)blob[0] << 24 | (uint32_t)blob[1] << 16 | (uint32_t)blob[2] << 8 | blob[3];
	if (n != tlen || blob_len < 4 + n || memcmp(blob + 4, line, tlen) != 0)
		return -EINVAL;
	*ret = ssh_fingerprint_blob(blob, blob_len);
	return 0;
}

/* --- key files --------------------------------------------------------------- */

/* Write data to path through a temp file and rename, so path is whole or absent. */
static int write_file_atomic(const char *path, const void *data, size_t len, mode_t mode)
{
	_cleanup_free_ char *tmp = xasprintf("%s.tmpXXXXXX", path);
	_cleanup_close_ int fd = -1;
	int r;

	fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fchmod(fd, mode) < 0 || (r = write_all(fd, data, len)) < 0 || fsync(fd) < 0) {
		r = -errno;
		goto fail;
	}
	if (close(TAKE_FD(fd)) < 0 || rename(tmp, path) < 0) {
		r = -errno;
		goto fail;
	}
	return 0;
fail:
	unlink(tmp);
	return r ? r : -EIO;
}

static void key_blob(struct bytes *b, const unsigned char pub[ED25519_LEN])
{
	bytes_str(b, SSH_KEY_TYPE, strlen(SSH_KEY_TYPE));
	bytes_str(b, pub, ED25519_LEN);
}

/*
 * The "openssh-key-v1" container (OpenSSH's PROTOCOL.key), unencrypted:
 * magic, cipher "none", kdf "none", no kdf options, one public key, then
 * the private section: two equal check words, type, public key, the 64
 * bytes seed||public, comment, and padding 1, 2, 3... to 8 bytes.
 */
static char *openssh_private_text(const unsigned char seed[ED25519_LEN], const unsigned char pub[ED25519_LEN],
				  const char *comment)
{
	struct bytes k = { 0 }, priv = { 0 }, blob = { 0 };
	unsigned char both[2 * ED25519_LEN], pad;
	uint32_t check;
	char *b64, *text;
	size_t b64_len, i;
	struct bytes out = { 0 };

	if (RAND_bytes((unsigned char *)&check, sizeof(check)) != 1)
		abort();
	key_blob(&blob, pub);
	bytes_put(&k, "openssh-key-v1", sizeof("openssh-key-v1"));	/* with its NUL */
	bytes_str(&k, "none", 4);
	bytes_str(&k, "none", 4);
	bytes_str(&k, "", 0);
	bytes_u32(&k, 1);
	bytes_str(&k, blob.p, blob.len);

	memcpy(both, seed, ED25519_LEN);
	memcpy(both + ED25519_LEN, pub, ED25519_LEN);
	bytes_u32(&priv, check);
	bytes_u32(&priv, check);
	bytes_str(&priv, SSH_KEY_TYPE, strlen(SSH_KEY_TYPE));
	bytes_str(&priv, pub, ED25519_LEN);
	bytes_str(&priv, both, sizeof(both));
	bytes_str(&priv, comment, strlen(comment));
	for (pad = 1; priv.len % 8 != 0; pad++)
		bytes_put(&priv, &pad, 1);
	bytes_str(&k, priv.p, priv.len);

	b64 = base64_encode(k.p, k.len);
	b64_len = strlen(b64);
	bytes_put(&out, "-----BEGIN OPENSSH PRIVATE KEY-----\n", 36);
	for (i = 0; i < b64_len; i += 70) {
		bytes_put(&out, b64 + i, b64_len - i < 70 ? b64_len - i : 70);
		bytes_put(&out, "\n", 1);
	}
	bytes_put(&out, "-----END OPENSSH PRIVATE KEY-----\n", 35);	/* with the NUL */
	text = xstrdup((char *)out.p);

	OPENSSL_cleanse(both, sizeof(both));
	OPENSSL_cleanse(b64, b64_len);
	free(b64);
	bytes_wipe(&out);
	bytes_wipe(&priv);
	bytes_wipe(&k);
	bytes_wipe(&blob);
	return text;
}

int ssh_keygen(const char *path, enum ssh_key_format fmt, const char *comment,
	       char **pubkey_ret, char **fingerprint_ret)
{
	unsigned char seed[ED25519_LEN], pub[ED25519_LEN];
	size_t seed_len = sizeof(seed), pub_len = sizeof(pub);
	struct bytes blob = { 0 }, priv = { 0 };
	_cleanup_free_ char *b64 = NULL, *line = NULL, *pub_path = NULL, *pub_text = NULL, *fp = NULL;
	char *text = NULL;
	EVP_PKEY *pk;
	int r;

	if (!comment)
		comment = "";
	if (strpbrk(comment, "\r\n"))
		return -EINVAL;
	pk = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
	if (!pk)
		return -EIO;
	r = EVP_PKEY_get_raw_private_key(pk, seed, &seed_len) == 1 &&
	    EVP_PKEY_get_raw_public_key(pk, pub, &pub_len) == 1 &&
	    seed_len == ED25519_LEN && pub_len == ED25519_LEN;
	EVP_PKEY_free(pk);
	if (!r) {
		OPENSSL_cleanse(seed, sizeof(seed));
		return -EIO;
	}

	if (fmt == SSH_KEY_OPENSSH) {
		text = openssh_private_text(seed, pub, comment);
		r = write_file_atomic(path, text, strlen(text), 0600);
		OPENSSL_cleanse(text, strlen(text));
		free(text);
	} else {
		/* dropbear: string "ssh-ed25519", string(seed || public) */
		bytes_str(&priv, SSH_KEY_TYPE, strlen(SSH_KEY_TYPE));
		bytes_u32(&priv, 2 * ED25519_LEN);
		bytes_put(&priv, seed, ED25519_LEN);
		bytes_put(&priv, pub, ED25519_LEN);
		r = write_file_atomic(path, priv.p, priv.len, 0600);
		bytes_wipe(&priv);
	}
	OPENSSL_cleanse(seed, sizeof(seed));
	if (r < 0)
		return r;

	key_blob(&blob, pub);
	b64 = base64_encode(blob.p, blob.len);
	fp = ssh_fingerprint_blob(blob.p, blob.len);
	bytes_wipe(&blob);
	line = *comment ? xasprintf(SSH_KEY_TYPE " %s %s", b64, comment) : xasprintf(SSH_KEY_TYPE " %s", b64);
	pub_path = xasprintf("%s.pub", path);
	pub_text = xasprintf("%s\n", line);
	if ((r = write_file_atomic(pub_path, pub_text, strlen(pub_text), 0644)) < 0) {
		unlink(path);
		return r;
	}
	if (pubkey_ret)
		*pubkey_ret = TAKE_PTR(line);
	if (fingerprint_ret)
		*fingerprint_ret = TAKE_PTR(fp);
	return 0;
}
