/* backup_key: see backup_key.h. */
#include "core/backup_key.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdbool.h>
#include <stdint.h>
#include <openssl/rand.h>
#include <stdlib.h>
#include <string.h>

#include "common/base64.h"
#include "common/util.h"

#define KDF_N (1u << 15)
#define KDF_R 8u
#define KDF_P 1u
#define KDF_MAXMEM (256ull << 20)
#define SALT_LEN 16
#define NONCE_LEN 12
#define TAG_LEN 16
#define DERIVED_LEN 32
/* Bound in as associated data: the file says what it is. */
static const char aad[] = "fleet-backup-host-key-v1";

static int derive(const char *pass, size_t pass_len, const unsigned char *salt, size_t salt_len, uint64_t n,
		  uint64_t r, uint64_t p, unsigned char *out)
{
	return EVP_PBE_scrypt(pass, pass_len, salt, salt_len, n, r, p, KDF_MAXMEM, out, DERIVED_LEN) == 1 ? 0 : -EINVAL;
}

/* AES-256-GCM one shot: encrypt (enc) or decrypt len bytes of in into out, the tag written or checked. */
static int gcm(bool enc, const unsigned char *k, const unsigned char *nonce, const unsigned char *in, size_t len,
	       unsigned char *out, unsigned char *tag)
{
	EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
	int n = 0, fin = 0, ok;

	if (!ctx)
		return -ENOMEM;
	ok = (enc ? EVP_EncryptInit_ex(ctx, EVP_aes_256_gcm(), NULL, k, nonce)
		  : EVP_DecryptInit_ex(ctx, EVP_aes_256_gcm(), NULL, k, nonce)) == 1;
	ok = ok && (enc ? EVP_EncryptUpdate(ctx, NULL, &n, (const unsigned char *)aad, sizeof(aad) - 1)
			: EVP_DecryptUpdate(ctx, NULL, &n, (const unsigned char *)aad, sizeof(aad) - 1)) == 1;
	ok = ok && (enc ? EVP_EncryptUpdate(ctx, out, &n, in, (int)len) : EVP_DecryptUpdate(ctx, out, &n, in, (int)len)) == 1;
	if (ok && !enc)
		ok = EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, TAG_LEN, tag) == 1;
	ok = ok && (enc ? EVP_EncryptFinal_ex(ctx, out + n, &fin) : EVP_DecryptFinal_ex(ctx, out + n, &fin)) == 1;
	if (ok && enc)
		ok = EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, TAG_LEN, tag) == 1;
	EVP_CIPHER_CTX_free(ctx);
	return ok ? 0 : -EBADMSG;
}

json_t *backup_key_seal(const unsigned char *key, size_t key_len, const char *pass, size_t pass_len)
{
	unsigned char salt[SALT_LEN], nonce[NONCE_LEN], tag[TAG_LEN], k[DERIVED_LEN];
	_cleanup_free_ unsigned char *ct = xmalloc(key_len + 16);
	_cleanup_free_ char *s64 = NULL, *n64 = NULL, *c64 = NULL, *t64 = NULL;
	int r;

	if (RAND_bytes(salt, sizeof(salt)) != 1 || RAND_bytes(nonce, sizeof(nonce)) != 1)
		return NULL;
	if (derive(pass, pass_len, salt, sizeof(salt), KDF_N, KDF_R, KDF_P, k) < 0)
		return NULL;
	r = gcm(true, k, nonce, key, key_len, ct, tag);
	explicit_bzero(k, sizeof(k));
	if (r < 0)
		return NULL;
	s64 = base64_encode(salt, sizeof(salt));
	n64 = base64_encode(nonce, sizeof(nonce));
	c64 = base64_encode(ct, key_len);
	t64 = base64_encode(tag, sizeof(tag));
	return json_pack("{s:s, s:s, s:I, s:I, s:I, s:s, s:s, s:s, s:s, s:s}", "what", "fleet secrets host key",
			 "kdf", "scrypt", "n", (json_int_t)KDF_N, "r", (json_int_t)KDF_R, "p", (json_int_t)KDF_P,
			 "salt", s64, "cipher", "aes-256-gcm", "nonce", n64, "ciphertext", c64, "tag", t64);
}

static int b64_field(const json_t *o, const char *name, size_t want, unsigned char **ret, size_t *ret_len)
{
	const char *s = json_string_value(json_object_get(o, name));
	size_t n;

	if (!s || base64_decode(s, strlen(s), ret, &n) < 0)
		return -EINVAL;
	if (want && n != want) {
		free(*ret);
		*ret = NULL;
		return -EINVAL;
	}
	*ret_len = n;
	return 0;
}

int backup_key_open(const json_t *sealed, const char *pass, size_t pass_len, unsigned char *key, size_t key_len)
{
	_cleanup_free_ unsigned char *salt = NULL, *nonce = NULL, *ct = NULL, *tag = NULL;
	unsigned char k[DERIVED_LEN];
	size_t salt_len = 0, len;
	json_int_t n, r, p;
	int rc;

	if (!json_is_object(sealed) ||
	    json_unpack((json_t *)sealed, "{s:I, s:I, s:I}", "n", &n, "r", &r, "p", &p) < 0 ||
	    strcmp(json_string_value(json_object_get(sealed, "kdf")) ?: "", "scrypt") != 0 ||
	    strcmp(json_string_value(json_object_get(sealed, "cipher")) ?: "", "aes-256-gcm") != 0)
		return -EINVAL;
	/* Bounded: a hostile file must not make us spend gigabytes (EVP_PBE_scrypt checks maxmem too). */
	if (n < 2 || n > (1 << 20) || r < 1 || r > 32 || p < 1 || p > 16)
		return -EINVAL;
	if (b64_field(sealed, "salt", 0, &salt, &salt_len) < 0 || b64_field(sealed, "nonce", NONCE_LEN, &nonce, &len) < 0 ||
	    b64_field(sealed, "ciphertext", key_len, &ct, &len) < 0 || b64_field(sealed, "tag", TAG_LEN, &tag, &len) < 0)
		return -EINVAL;
	if (derive(pass, pass_len, salt, salt_len, (uint64_t)n, (uint64_t)r, (uint64_t)p, k) < 0)
		return -EINVAL;
	rc = gcm(false, k, nonce, ct, key_len, key, tag);
	explicit_bzero(k, sizeof(k));
	if (rc < 0)
		explicit_bzero(key, key_len);
	return rc;
}
