/*
 * http_client: fleetctl's HTTP to fleetd's Unix socket, through libcurl
 * (CURLOPT_UNIX_SOCKET_PATH): one blocking request per call, all of a
 * process's on one connection kept alive while fleetd keeps it. libcurl does
 * the protocol (lengths, chunked bodies, partial reads); this file only
 * bounds what it keeps and turns libcurl's errors into -errno.
 */
#ifndef FLEET_HTTP_CLIENT_H
#define FLEET_HTTP_CLIENT_H

#include <stddef.h>

struct http_response {
	int status;
	char *body;		/* NUL-terminated; body_len excludes the NUL */
	size_t body_len;
};

void http_response_free(struct http_response *r);

/*
 * Send method path with an optional JSON body to the Unix socket at
 * socket_path and read the whole response. -errno when the socket cannot
 * be reached (-ENOENT, -ECONNREFUSED, -EACCES as connect(2) said), -EPROTO
 * when the reply is not HTTP, -ECONNRESET when it broke off.
 */
int http_request(const char *socket_path, const char *method, const char *path,
		 const char *json_body, struct http_response *out);
/* The same with body_len bytes of any content type (a secret's raw value: no JSON around it). */
int http_request_body(const char *socket_path, const char *method, const char *path, const char *ctype,
		      const char *body, size_t body_len, struct http_response *out);

/*
 * As http_request, with a body of any type and length (body NULL: an empty
 * one), and an answer of at most max_response bytes (-EFBIG beyond).
 */
int http_request_raw(const char *socket_path, const char *method, const char *path, const char *ctype,
		     const void *body, size_t body_len, size_t max_response, struct http_response *out);

/*
 * Send a request whose answer streams as lines (exec, watch): on_line is
 * called for each '\n'-terminated line of the body as it arrives (a negative
 * return stops reading and is returned). json_body NULL: no body. Returns
 * the HTTP status (200 after a complete stream; for any other status the
 * whole answer is kept in *err_out), or -errno: -ECONNRESET if the stream
 * ended before its end.
 */
int http_request_lines(const char *socket_path, const char *method, const char *path,
		       const char *json_body, size_t body_len,
		       int (*on_line)(void *ud, const char *line, size_t len), void *ud,
		       struct http_response *err_out);

#endif
