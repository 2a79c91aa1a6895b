/*
 * test_backup_key: the host key sealed with a passphrase in a backup
 * (core/backup_key.c): it opens with the passphrase and only with it; a
 * flipped byte of the ciphertext, tag, salt or nonce, or a changed
 * parameter, is refused (-EBADMSG), never an altered key; malformed or
 * hostile parameters are refused (-EINVAL) before any work.
 */
#include <errno.h>
#include <string.h>

#include "common/base64.h"
#include "common/util.h"
#include "core/backup_key.h"
#include "tests/tap.h"

static const unsigned char KEY[32] = "0123456789abcdef0123456789abcdef";

/* A copy of sealed with field's first decoded byte flipped. */
static json_t *flipped(const json_t *sealed, const char *field)
{
	json_t *c = json_deep_copy(sealed);
	const char *s = json_string_value(json_object_get(c, field));
	unsigned char *raw = NULL;
	size_t n = 0;
	char *enc;

	if (base64_decode(s, strlen(s), &raw, &n) < 0 || !n)
		return c;
	raw[0] ^= 1;
	enc = base64_encode(raw, n);
	json_object_set_new(c, field, json_string(enc));
	free(enc);
	free(raw);
	return c;
}

int main(void)
{
	unsigned char out[32];
	json_t *sealed = backup_key_seal(KEY, sizeof(KEY), "pass phrase", 11), *c;
	const char *fields[] = { "ciphertext", "tag", "salt", "nonce" };
	char *text;

	ok(sealed != NULL, "seal");
	text = json_dumps(sealed, 0);
	ok(text && !memmem(text, strlen(text), KEY, sizeof(KEY)), "the sealed form holds no plain key");
	free(text);
	is_int(backup_key_open(sealed, "pass phrase", 11, out, sizeof(out)), 0, "opens with the passphrase");
	ok(memcmp(out, KEY, sizeof(KEY)) == 0, "to the same key");
	is_int(backup_key_open(sealed, "pass phrasE", 11, out, sizeof(out)), -EBADMSG, "a wrong passphrase: -EBADMSG");
	is_int(backup_key_open(sealed, "pass phras", 10, out, sizeof(out)), -EBADMSG, "a prefix of it too");
	for (size_t i = 0; i < ARRAY_SIZE(fields); i++) {
		c = flipped(sealed, fields[i]);
		is_int(backup_key_open(c, "pass phrase", 11, out, sizeof(out)), -EBADMSG, "a flipped %s is refused", fields[i]);
		json_decref(c);
	}
	c = json_deep_copy(sealed);
	json_object_set_new(c, "n", json_integer(1 << 14));
	is_int(backup_key_open(c, "pass phrase", 11, out, sizeof(out)), -EBADMSG, "another scrypt N derives another key");
	json_object_set_new(c, "n", json_integer((json_int_t)1 << 40));
	is_int(backup_key_open(c, "pass phrase", 11, out, sizeof(out)), -EINVAL, "an N past the bound is refused unworked");
	json_object_set_new(c, "n", json_integer(1 << 15));
	json_object_set_new(c, "kdf", json_string("pbkdf1"));
	is_int(backup_key_open(c, "pass phrase", 11, out, sizeof(out)), -EINVAL, "an unknown kdf is refused");
	json_decref(c);
	c = json_deep_copy(sealed);
	json_object_set_new(c, "ciphertext", json_string("AAAA"));
	is_int(backup_key_open(c, "pass phrase", 11, out, sizeof(out)), -EINVAL, "a ciphertext of the wrong length is refused");
	json_decref(c);
	c = json_string("x");
	is_int(backup_key_open(c, "pass phrase", 11, out, sizeof(out)), -EINVAL, "not an object: refused");
	json_decref(c);
	json_decref(sealed);
	return tap_done();
}
