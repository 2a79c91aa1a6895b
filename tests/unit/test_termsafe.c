/* term_sanitize: what a guest's console may and may not put on the operator's terminal. */
#include <stdlib.h>
#include <string.h>

#include "common/termsafe.h"
#include "common/util.h"
#include "../tap.h"

static void check(const char *in, size_t len, const char *want, const char *what)
{
	size_t n = 0;
	char *got = term_sanitize(in, len, &n);

	is_str(got, want, "%s", what);
	is_int((int)n, (int)strlen(want), "%s: length", what);
	free(got);
}

/* The input is a string literal, NULs included: its length is its size less the terminator. */
#define CHECK(lit, want, what) check(lit, sizeof(lit) - 1, want, what)

int main(void)
{
	CHECK("hello, world\n", "hello, world\n", "plain text passes");
	CHECK("a\tb\r\nc\n", "a\tb\r\nc\n", "tab, CRLF and LF pass");
	CHECK("\x1b[2J\x1b]0;pwned\x07", "^[[2J^[]0;pwned^G", "ESC and BEL become ^[ and ^G: no clear, no title");
	CHECK("ok\rfake prompt", "ok^Mfake prompt", "a lone CR cannot overwrite the line");
	CHECK("\x1bP$q\x1b\\", "^[P$q^[\\", "a DCS query cannot make the terminal answer");
	CHECK("x\0y\x7f", "x^@y^?", "NUL and DEL are visible");
	CHECK("\x9b" "31m", "\\x9b31m", "a raw 8-bit CSI byte is shown as \\x9b");
	CHECK("\xc2\x9b" "31m", "\\u009b31m", "C1 CSI encoded as UTF-8 is shown as \\u009b");
	CHECK("gr\xc3\xbc\xc3\x9f \xe2\x82\xac \xf0\x9f\x9a\x80", "gr\xc3\xbc\xc3\x9f \xe2\x82\xac \xf0\x9f\x9a\x80",
	      "valid UTF-8 text (2, 3 and 4 bytes) is kept");
	CHECK("\xc0\xaf", "\\xc0\\xaf", "an overlong '/' is not text");
	CHECK("\xed\xa0\x80", "\\xed\\xa0\\x80", "a UTF-16 surrogate is not text");
	CHECK("\xe2\x82", "\\xe2\\x82", "a sequence cut off at the end is shown byte by byte");
	CHECK("\xff\xfe", "\\xff\\xfe", "bytes that never start UTF-8");
	CHECK("\r", "^M", "a CR at the very end");
	CHECK("", "", "nothing in, nothing out");
	return tap_done();
}
