/* base64 round trips and malformed input. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/base64.h"
#include "../tap.h"

int main(void)
{
	static const char *const vec[][2] = {
		{ "", "" }, { "f", "Zg==" }, { "fo", "Zm8=" }, { "foo", "Zm9v" },
		{ "foob", "Zm9vYg==" }, { "fooba", "Zm9vYmE=" }, { "foobar", "Zm9vYmFy" },
	};
	unsigned char bin[256], *dec;
	size_t n;
	char *enc;

	for (size_t i = 0; i < sizeof(vec) / sizeof(*vec); i++) {
		enc = base64_encode(vec[i][0], strlen(vec[i][0]));
		is_str(enc, vec[i][1], "encode '%s'", vec[i][0]);
		free(enc);
		ok(base64_decode(vec[i][1], strlen(vec[i][1]), &dec, &n) == 0 && n == strlen(vec[i][0]) &&
		   memcmp(dec, vec[i][0], n) == 0, "decode '%s'", vec[i][1]);
		free(dec);
	}
	for (int i = 0; i < 256; i++)
		bin[i] = (unsigned char)i;
	enc = base64_encode(bin, sizeof(bin));
	ok(base64_decode(enc, strlen(enc), &dec, &n) == 0 && n == 256 && memcmp(dec, bin, 256) == 0,
	   "all 256 byte values round-trip");
	free(enc);
	free(dec);
	is_int(base64_decode("abc", 3, &dec, &n), -EINVAL, "length not a multiple of 4 refused");
	is_int(base64_decode("ab!d", 4, &dec, &n), -EINVAL, "bad character refused");
	is_int(base64_decode("a=bc", 4, &dec, &n), -EINVAL, "padding in the middle refused");
	is_int(base64_decode("Zg==Zg==", 8, &dec, &n), -EINVAL, "padding before the end refused");
	return tap_done();
}
