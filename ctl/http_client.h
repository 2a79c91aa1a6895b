/*
 * http_client: the small blocking HTTP/1.1 client fleetctl uses to talk to
 * fleetd's Unix socket. One request per connection (Connection: close);
 * understands Content-Length, chunked and read-to-EOF bodies.
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
 * be reached, -EPROTO when the reply is not HTTP.
 */
int http_request(const char *socket_path, const char *method, const char *path,
		 const char *json_body, struct http_response *out);
/* The same with body_len bytes of any content type (a secret's raw value: no JSON around it). */
int http_request_body(const char *socket_path, const char *method, const char *path, const char *ctype,
		      const char *body, size_t body_len, struct http_response *out);

/*
 * Send a request whose answer streams as chunked lines (exec): on_line is
 * called for each '\n'-terminated line of the body as it arrives (a negative
 * return stops reading). Returns the HTTP status (200 after a complete
 * stream; for any other status the whole answer is parsed into *err_out),
 * or -errno: -ECONNRESET if the stream ended before its last chunk.
 */
int http_request_lines(const char *socket_path, const char *method, const char *path,
		       const char *json_body, size_t body_len,
		       int (*on_line)(void *ud, const char *line, size_t len), void *ud,
		       struct http_response *err_out);

/* Decode a response buffer (status line, headers, body); -EPROTO if malformed. Exposed for tests. */
int http_parse_response(const char *buf, size_t len, struct http_response *out);

#endif
