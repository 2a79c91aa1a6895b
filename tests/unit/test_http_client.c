/* fleetctl's HTTP response parser: lengths, chunks and garbage. */
#include <errno.h>
#include <string.h>

#include "ctl/http_client.h"
#include "../tap.h"

static int parse(const char *text, struct http_response *r)
{
	memset(r, 0, sizeof(*r));
	return http_parse_response(text, strlen(text), r);
}

int main(void)
{
	struct http_response r;

	is_int(parse("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}", &r), 0, "content-length body");
	is_int(r.status, 200, "status");
	is_str(r.body, "{}", "body");
	http_response_free(&r);

	is_int(parse("HTTP/1.1 404 Not Found\r\ncontent-length: 3\r\n\r\nabcdef", &r), 0, "header names are case-insensitive");
	is_str(r.body, "abc", "body cut at content-length");
	http_response_free(&r);

	is_int(parse("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n", &r), 0,
	       "chunked body");
	is_str(r.body, "abcde", "chunks joined");
	http_response_free(&r);

	is_int(parse("HTTP/1.0 200 OK\r\n\r\nto the end", &r), 0, "body read to EOF");
	is_str(r.body, "to the end", "whole rest is the body");
	http_response_free(&r);

	is_int(parse("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", &r), -EPROTO, "truncated body refused");
	is_int(parse("SSH-2.0-dropbear\r\n\r\n", &r), -EPROTO, "not HTTP refused");
	is_int(parse("HTTP/1.1 999 What\r\n\r\n", &r), -EPROTO, "impossible status refused");
	is_int(parse("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n", &r), -EPROTO, "no end of headers refused");
	is_int(parse("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", &r), -EPROTO, "bad chunk size refused");
	is_int(parse("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nff\r\nab", &r), -EPROTO, "short chunk refused");
	return tap_done();
}
