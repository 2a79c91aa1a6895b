/* base64: see base64.h. */
#include "common/base64.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/util.h"

static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *base64_encode(const void *data, size_t len)
{
	const unsigned char *in = data;
	char *out = xmalloc((len + 2) / 3 * 4 + 1), *p = out;
	size_t i;

	for (i = 0; i + 2 < len; i += 3) {
		uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
		*p++ = alphabet[v >> 18];
		*p++ = alphabet[(v >> 12) & 63];
		*p++ = alphabet[(v >> 6) & 63];
		*p++ = alphabet[v & 63];
	}
	if (i < len) {
		uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < len ? (uint32_t)in[i + 1] << 8 : 0);
		*p++ = alphabet[v >> 18];
		*p++ = alphabet[(v >> 12) & 63];
		*p++ = i + 1 < len ? alphabet[(v >> 6) & 63] : '=';
		*p++ = '=';
	}
	*p = '\0';
	return out;
}

static int value_of(char c)
{
	if (c >= 'A' && c <= 'Z') return c - 'A';
	if (c >= 'a' && c <= 'z') return c - 'a' + 26;
	if (c >= '0' && c <= '9') return c - '0' + 52;
	if (c == '+') return 62;
	if (c == '/') return 63;
	return -1;
}

int base64_decode(const char *s, size_t slen, unsigned char **ret, size_t *ret_len)
{
	unsigned char *out, *p;
	size_t pad = 0;

	if (slen % 4 != 0)
		return -EINVAL;
	if (slen >= 1 && s[slen - 1] == '=')
		pad++;
	if (slen >= 2 && s[slen - 2] == '=')
		pad++;
	out = p = xmalloc(slen / 4 * 3 + 1);
	for (size_t i = 0; i < slen; i += 4) {
		int v[4];
		bool last = i + 4 == slen;

		for (int k = 0; k < 4; k++) {
			v[k] = value_of(s[i + k]);
			if (v[k] < 0 && !(last && s[i + k] == '=' && k >= 4 - (int)pad)) {
				free(out);
				return -EINVAL;
			}
			if (v[k] < 0)
				v[k] = 0;
		}
		uint32_t x = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
		*p++ = (unsigned char)(x >> 16);
		if (!last || pad < 2)
			*p++ = (unsigned char)(x >> 8);
		if (!last || pad < 1)
			*p++ = (unsigned char)x;
	}
	*p = '\0';
	*ret = out;
	*ret_len = (size_t)(p - out);
	return 0;
}
