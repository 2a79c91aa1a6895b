/* termsafe: see termsafe.h. */
#include "common/termsafe.h"

#include <stdint.h>
#include <stdio.h>

#include "common/util.h"

/* Length of the valid UTF-8 sequence at s (at most n bytes), 0 if there is none. */
static size_t utf8_len(const unsigned char *s, size_t n, uint32_t *cp)
{
	size_t len;
	uint32_t c, min;

	if (s[0] < 0x80) {
		*cp = s[0];
		return 1;
	}
	if (s[0] >= 0xc2 && s[0] <= 0xdf) {
		len = 2; c = s[0] & 0x1f; min = 0x80;
	} else if (s[0] >= 0xe0 && s[0] <= 0xef) {
		len = 3; c = s[0] & 0x0f; min = 0x800;
	} else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
		len = 4; c = s[0] & 0x07; min = 0x10000;
	} else {
		return 0;
	}
	if (len > n)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		c = (c << 6) | (s[i] & 0x3f);
	}
	/* Overlong forms, UTF-16 surrogates and code points past U+10FFFF are not text. */
	if (c < min || (c >= 0xd800 && c <= 0xdfff) || c > 0x10ffff)
		return 0;
	*cp = c;
	return len;
}

char *term_sanitize(const void *in, size_t len, size_t *out_len)
{
	const unsigned char *s = in;
	/* The widest form is "\xNN" (4 bytes) for one byte in. */
	char *out = xmalloc(len * 4 + 1), *o = out;
	size_t i = 0;

	while (i < len) {
		uint32_t cp = 0;
		size_t n = utf8_len(s + i, len - i, &cp);

		if (n == 0) {
			o += sprintf(o, "\\x%02x", s[i]);
			i++;
		} else if (cp == '\n' || cp == '\t' || (cp == '\r' && i + 1 < len && s[i + 1] == '\n')) {
			*o++ = (char)cp;
			i++;
		} else if (cp < 0x20 || cp == 0x7f) {
			*o++ = '^';
			*o++ = cp == 0x7f ? '?' : (char)(cp + 0x40);
			i++;
		} else if (cp >= 0x80 && cp <= 0x9f) {
			o += sprintf(o, "\\u%04x", (unsigned)cp);	/* 6 bytes for 2 in */
			i += n;
		} else {
			for (size_t k = 0; k < n; k++)
				*o++ = (char)s[i + k];
			i += n;
		}
	}
	*o = '\0';
	if (out_len)
		*out_len = (size_t)(o - out);
	return out;
}
