/* secret_box: see secret_box.h. */
#include "core/secret_box.h"

#include <errno.h>
#include <limits.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

/* What the tag authenticates besides the value: a version word, the agent, the key, NUL-separated
 * (neither name can hold a NUL, so no two pairs give the same bytes). */
static char *box_aad(const char *agent, const char *key, size_t *ret_len)
{
	static const char tag[] = "fleet-secret-v1";
	size_t la = strlen(agent), lk = strlen(key);
	size_t n = sizeof(tag) + la + 1 + lk + 1;
	char *aad = xmalloc(n);

	memcpy(aad, tag, sizeof(tag));
	memcpy(aad + sizeof(tag), agent, la + 1);
	memcpy(aad + sizeof(tag) + la + 1, key, lk + 1);
	*ret_len = n;
	return aad;
}

int secret_box_random(unsigned char *buf, size_t n)
{
	return n <= INT_MAX && RAND_bytes(buf, (int)n) == 1 ? 0 : -EIO;
}

int secret_box_seal(const unsigned char host_key[SECRET_BOX_KEY_LEN], const char *agent, const char *key,
		    const unsigned char *plain, size_t len, unsigned char nonce[SECRET_BOX_NONCE_LEN],
		    unsigned char **ret_ct, size_t *ret_len)
{
	size_t aad_len;
	_cleanup_free_ char *aad = box_aad(agent, key, &aad_len);
	EVP_CIPHER_CTX *ctx;
	unsigned char *ct;
	int n = 0, fin = 0, ok;

	if (len > INT_MAX - SECRET_BOX_TAG_LEN || secret_box_random(nonce, SECRET_BOX_NONCE_LEN) < 0)
		return -EIO;
	ctx = EVP_CIPHER_CTX_new();
	if (!ctx)
		return -EIO;
	ct = xmalloc(len + SECRET_BOX_TAG_LEN);
	ok = EVP_EncryptInit_ex(ctx, EVP_aes_256_gcm(), NULL, NULL, NULL) == 1 &&
	     EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_IVLEN, SECRET_BOX_NONCE_LEN, NULL) == 1 &&
	     EVP_EncryptInit_ex(ctx, NULL, NULL, host_key, nonce) == 1 &&
	     EVP_EncryptUpdate(ctx, NULL, &n, (const unsigned char *)aad, (int)aad_len) == 1 &&
	     EVP_EncryptUpdate(ctx, ct, &n, plain, (int)len) == 1 &&
	     EVP_EncryptFinal_ex(ctx, ct + n, &fin) == 1 &&
	     (size_t)(n + fin) == len &&
	     EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, SECRET_BOX_TAG_LEN, ct + len) == 1;
	EVP_CIPHER_CTX_free(ctx);
	if (!ok) {
		free(ct);
		return -EIO;
	}
	*ret_ct = ct;
	*ret_len = len + SECRET_BOX_TAG_LEN;
	return 0;
}

int secret_box_open(const unsigned char host_key[SECRET_BOX_KEY_LEN], const char *agent, const char *key,
		    const unsigned char *nonce, size_t nonce_len, const unsigned char *ct, size_t ct_len,
		    unsigned char **ret_plain, size_t *ret_len)
{
	size_t aad_len, len;
	_cleanup_free_ char *aad = NULL;
	unsigned char tag[SECRET_BOX_TAG_LEN];
	EVP_CIPHER_CTX *ctx;
	unsigned char *plain;
	int n = 0, fin = 0, ok;

	/* A nonce of another length would still "work" with GCM: refuse it, it is not ours. */
	if (nonce_len != SECRET_BOX_NONCE_LEN || ct_len < SECRET_BOX_TAG_LEN || ct_len > INT_MAX)
		return -EBADMSG;
	len = ct_len - SECRET_BOX_TAG_LEN;
	memcpy(tag, ct + len, SECRET_BOX_TAG_LEN);
	aad = box_aad(agent, key, &aad_len);
	ctx = EVP_CIPHER_CTX_new();
	if (!ctx)
		return -EIO;
	plain = xmalloc(len + 1);
	ok = EVP_DecryptInit_ex(ctx, EVP_aes_256_gcm(), NULL, NULL, NULL) == 1 &&
	     EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_IVLEN, SECRET_BOX_NONCE_LEN, NULL) == 1 &&
	     EVP_DecryptInit_ex(ctx, NULL, NULL, host_key, nonce) == 1 &&
	     EVP_DecryptUpdate(ctx, NULL, &n, (const unsigned char *)aad, (int)aad_len) == 1 &&
	     EVP_DecryptUpdate(ctx, plain, &n, ct, (int)len) == 1 &&
	     EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, SECRET_BOX_TAG_LEN, tag) == 1;
	/* Only Final checks the tag: nothing decrypted is handed out before it passes. */
	if (ok && EVP_DecryptFinal_ex(ctx, plain + n, &fin) != 1) {
		EVP_CIPHER_CTX_free(ctx);
		explicit_bzero(plain, len + 1);
		free(plain);
		return -EBADMSG;
	}
	EVP_CIPHER_CTX_free(ctx);
	if (!ok || (size_t)(n + fin) != len) {
		explicit_bzero(plain, len + 1);
		free(plain);
		return -EIO;
	}
	plain[len] = '\0';
	*ret_plain = plain;
	*ret_len = len;
	return 0;
}
