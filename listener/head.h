/*
 * head: the listener's own strict reading of a request's line and headers,
 * done on a copy of the bytes before evhttp acts on them, so framing that
 * evhttp would accept loosely (duplicate or conflicting Content-Length,
 * Transfer-Encoding beside Content-Length, folded or malformed header lines)
 * is refused before a body byte is read, and the route's body cap applies
 * from Content-Length. Pure: no I/O; libc only.
 */
#ifndef FLEET_LISTENER_HEAD_H
#define FLEET_LISTENER_HEAD_H

#include <stdbool.h>
#include <stddef.h>

#define LHEAD_HEADERS_MAX 128		/* header lines in one request */
#define LHEAD_TARGET_MAX 8192		/* the request target */

struct lhead {
	const char *method;		/* into the parsed buffer */
	const char *target;		/* as sent, e.g. "/hooks/gh?x=1" */
	long long content_length;	/* -1: none */
	bool chunked;			/* Transfer-Encoding: chunked */
	int n_headers;
	/* On a refusal: */
	int status;			/* 400 or 413 */
	const char *code;		/* "bad_request", "headers_too_large" */
	const char *why;		/* static, for the answer and the log */
};

/*
 * Where the head in buf[0..len) ends (just past its empty line, "\r\n\r\n"
 * or a bare "\n\n" as evhttp allows), or 0 if it does not yet.
 */
size_t lhead_end(const char *buf, size_t len);

/*
 * Parse the complete head buf[0..len) (len from lhead_end), writing NULs
 * into buf. 0 and *h filled, or -1 with h->status, h->code, h->why.
 */
int lhead_parse(char *buf, size_t len, struct lhead *h);

/*
 * The route a target names: "/hooks/NAME" with an optional "?query", NAME
 * copied into name (HOOK_ROUTE_NAME_MAX + 1 bytes) when it is a valid route
 * name. false for anything else (the answer is 404).
 */
bool lhead_route_name(const char *target, char *name);

#endif
