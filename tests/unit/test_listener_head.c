/*
 * test_listener_head: the listener's strict reading of a request's head
 * (listener/head.c), which decides 400/413 before evhttp reads a body byte,
 * and its mapping of a target to a route name (404 for anything else).
 */
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "listener/head.h"
#include "tests/tap.h"

/* Parse text as a whole head; the status of a refusal, or 0. */
static int parse(const char *text, struct lhead *h)
{
	char *buf = xstrdup(text);
	size_t end = lhead_end(buf, strlen(buf));
	int r;

	if (!end) {
		free(buf);
		return -1;
	}
	r = lhead_parse(buf, end, h) < 0 ? h->status : 0;
	/* h points into buf: keep what the checks below read. */
	if (r == 0) {
		static char method[32], target[256];

		snprintf(method, sizeof(method), "%s", h->method);
		snprintf(target, sizeof(target), "%s", h->target);
		h->method = method;
		h->target = target;
	}
	free(buf);
	return r;
}

#define REFUSED(text, status, what) do { \
	struct lhead _h; \
	is_int(parse(text, &_h), status, what); \
	ok(_h.why && _h.code, "...says why: %s", _h.why ? _h.why : "(none)"); \
} while (0)

int main(void)
{
	struct lhead h;
	char name[64];

	is_int(lhead_end("POST / HTTP/1.1\r\nA: b\r\n\r\nbody", 29), 25, "end: after CRLF CRLF");
	is_int(lhead_end("POST / HTTP/1.1\nA: b\n\nbody", 26), 22, "end: after bare LF LF, as evhttp allows");
	is_int(lhead_end("POST / HTTP/1.1\r\nA: b\r\n\r", 25), 0, "end: not yet with CRLF CR");
	is_int(lhead_end("POST / HTTP/1.1\r\n", 17), 0, "end: not yet after the request line");

	is_int(parse("POST /hooks/gh?x=1 HTTP/1.1\r\nHost: a\r\nContent-Length:  12 \r\n\r\n", &h), 0, "a plain POST");
	is_str(h.method, "POST", "...its method");
	is_str(h.target, "/hooks/gh?x=1", "...its target as sent");
	is_int(h.content_length, 12, "...its Content-Length, spaces around it dropped");
	ok(!h.chunked && h.n_headers == 2, "...not chunked, two headers");
	is_int(parse("POST /hooks/gh HTTP/1.0\r\nTransfer-Encoding: Chunked\r\n\r\n", &h), 0, "a chunked POST, HTTP/1.0");
	ok(h.chunked && h.content_length == -1, "...chunked, no Content-Length");
	is_int(parse("GET /x HTTP/1.1\n\n", &h), 0, "bare LF line ends");

	REFUSED("POST /h HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n", 400, "Content-Length twice, equal");
	REFUSED("POST /h HTTP/1.1\r\nContent-Length: 2\r\ncontent-length: 3\r\n\r\n", 400, "Content-Length twice, conflicting");
	REFUSED("POST /h HTTP/1.1\r\nContent-Length: 2, 2\r\n\r\n", 400, "a Content-Length list");
	REFUSED("POST /h HTTP/1.1\r\nContent-Length: +2\r\n\r\n", 400, "a signed Content-Length");
	REFUSED("POST /h HTTP/1.1\r\nContent-Length: 0x10\r\n\r\n", 400, "a hex Content-Length");
	REFUSED("POST /h HTTP/1.1\r\nContent-Length: 1234567890123456\r\n\r\n", 400, "a 16-digit Content-Length");
	REFUSED("POST /h HTTP/1.1\r\nContent-Length:\r\n\r\n", 400, "an empty Content-Length");
	REFUSED("POST /h HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n", 400,
		"Transfer-Encoding and Content-Length");
	REFUSED("POST /h HTTP/1.1\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n", 400,
		"Content-Length and Transfer-Encoding, the other way round");
	REFUSED("POST /h HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 400, "a Transfer-Encoding other than chunked");
	REFUSED("POST /h HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 400,
		"Transfer-Encoding twice");
	REFUSED("POST /h HTTP/1.1\r\nA: b\r\n  folded\r\n\r\n", 400, "a folded line");
	REFUSED("POST /h HTTP/1.1\r\nno colon here\r\n\r\n", 400, "a header line without a colon");
	REFUSED("POST /h HTTP/1.1\r\n: empty name\r\n\r\n", 400, "a header without a name");
	REFUSED("POST /h HTTP/1.1\r\nBad Name: x\r\n\r\n", 400, "a header name with a space");
	REFUSED("POST /h HTTP/1.1\r\nContent-Length : 2\r\n\r\n", 400, "a space before the colon");
	REFUSED("POST /h HTTP/1.1\r\nA: b\x01\r\n\r\n", 400, "a control byte in a value");
	REFUSED("POST /h HTTP/1.1\r\nA: b\rc\r\n\r\n", 400, "a stray CR in a value");
	REFUSED("POST /h HTTP/2.0\r\n\r\n", 400, "version HTTP/2.0");
	REFUSED("POST /h\r\n\r\n", 400, "no version (HTTP/0.9)");
	REFUSED("post /h HTTP/1.1\r\n\r\n", 400, "a lower-case method");
	REFUSED("POST h HTTP/1.1\r\n\r\n", 400, "a target that is no path");
	REFUSED("POST http://x/h HTTP/1.1\r\n\r\n", 400, "an absolute-form target");
	REFUSED("POST /a b HTTP/1.1\r\n\r\n", 400, "a target with a space");
	REFUSED("POST /\x80 HTTP/1.1\r\n\r\n", 400, "a target with a byte past ASCII");
	REFUSED("\r\nPOST /h HTTP/1.1\r\n\r\n", 400, "an empty line before the request line");
	{
		size_t n = 0;
		char *many = xmalloc(40 + (LHEAD_HEADERS_MAX + 1) * 8);

		n += (size_t)sprintf(many, "POST /h HTTP/1.1\r\n");
		for (int i = 0; i < LHEAD_HEADERS_MAX; i++)
			n += (size_t)sprintf(many + n, "H%d: v\r\n", i % 10);
		strcpy(many + n, "\r\n");
		is_int(parse(many, &h), 0, "128 header lines accepted");
		strcpy(many + n, "Hx: v\r\n\r\n");
		REFUSED(many, 413, "129 header lines refused");
		free(many);
	}

	ok(lhead_route_name("/hooks/gh", name) && strcmp(name, "gh") == 0, "route: /hooks/gh");
	ok(lhead_route_name("/hooks/my-route_2?x=1&y", name) && strcmp(name, "my-route_2") == 0, "route: with a query");
	ok(!lhead_route_name("/hooks/", name), "route: none");
	ok(!lhead_route_name("/hooks/GH", name), "route: upper case is no route name");
	ok(!lhead_route_name("/hooks/a/b", name), "route: a deeper path");
	ok(!lhead_route_name("/hooks/%61", name), "route: percent-encoded");
	ok(!lhead_route_name("/hooks/..", name), "route: dot-dot");
	ok(!lhead_route_name("/hooksx/a", name), "route: another prefix");
	ok(!lhead_route_name("/v1/hooks/a", name), "route: the API's path");
	ok(lhead_route_name("/hooks/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", name), "route: 48 characters");
	ok(!lhead_route_name("/hooks/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", name), "route: 49 characters");
	return tap_done();
}
