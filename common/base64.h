/*
 * base64: standard alphabet with padding, for carrying bytes (exec output,
 * stdin) inside JSON strings, which must be valid UTF-8.
 */
#ifndef FLEET_BASE64_H
#define FLEET_BASE64_H

#include <stddef.h>

/* Encode len bytes; returns a NUL-terminated malloc'd string. */
char *base64_encode(const void *data, size_t len);
/* Decode s (whitespace not allowed); -EINVAL if malformed. *ret is malloc'd (NUL-terminated too). */
int base64_decode(const char *s, size_t slen, unsigned char **ret, size_t *ret_len);

#endif
