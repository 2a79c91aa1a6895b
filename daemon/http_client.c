/* http_client: see http_client.h. */
#include "http_client.h"

#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "util.h"

#define MAX_RESPONSE (64u << 20)

void http_response_free(struct http_response *r)
{
	free(r->body);
	r->body = NULL;
	r->body_len = 0;
}

/* Find header name in [hdr, end); returns a pointer to its value or NULL. */
static const char *find_header(const char *hdr, const char *end, const char *name, size_t *vlen)
{
	size_t nlen = strlen(name);

	for (const char *line = hdr; line < end;) {
		const char *eol = memchr(line, '\n', (size_t)(end - line));
		if (!eol)
			eol = end;
		if ((size_t)(eol - line) > nlen && strncasecmp(line, name, nlen) == 0 && line[nlen] == ':') {
			const char *v = line + nlen + 1;
			while (v < eol && (*v == ' ' || *v == '\t'))
				v++;
			*vlen = (size_t)(eol - v);
			while (*vlen > 0 && (v[*vlen - 1] == '\r' || v[*vlen - 1] == ' '))
				(*vlen)--;
			return v;
		}
		line = eol + 1;
	}
	return NULL;
}

static int decode_chunked(const char *p, const char *end, struct http_response *out)
{
	char *body = xmalloc((size_t)(end - p) + 1);
	size_t len = 0;

	for (;;) {
		char *next;
		unsigned long n = strtoul(p, &next, 16);

		if (next == p || next >= end)
			goto bad;
		p = memchr(next, '\n', (size_t)(end - next));
		if (!p)
			goto bad;
		p++;
		if (n == 0)
			break;
		if (n > (size_t)(end - p))
			goto bad;
		memcpy(body + len, p, n);
		len += n;
		p += n;
		if (p < end && *p == '\r')
			p++;
		if (p < end && *p == '\n')
			p++;
	}
	body[len] = '\0';
	out->body = body;
	out->body_len = len;
	return 0;
bad:
	free(body);
	return -EPROTO;
}

int http_parse_response(const char *buf, size_t len, struct http_response *out)
{
	const char *end = buf + len, *hdr_end, *body, *v;
	size_t vlen;
	int status;

	if (len < 12 || strncmp(buf, "HTTP/1.", 7) != 0 || buf[8] != ' ')
		return -EPROTO;
	status = atoi(buf + 9);
	if (status < 100 || status > 599)
		return -EPROTO;
	hdr_end = memmem(buf, len, "\r\n\r\n", 4);
	if (!hdr_end)
		return -EPROTO;
	body = hdr_end + 4;
	out->status = status;
	v = find_header(buf, hdr_end, "Transfer-Encoding", &vlen);
	if (v && vlen == 7 && strncasecmp(v, "chunked", 7) == 0)
		return decode_chunked(body, end, out);
	v = find_header(buf, hdr_end, "Content-Length", &vlen);
	if (v) {
		unsigned long n = strtoul(v, NULL, 10);
		if (n > (size_t)(end - body))
			return -EPROTO;	/* connection closed early */
		end = body + n;
	}
	out->body_len = (size_t)(end - body);
	out->body = xstrndup(body, out->body_len);
	return 0;
}

int http_request(const char *socket_path, const char *method, const char *path,
		 const char *json_body, struct http_response *out)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	_cleanup_close_ int fd = -1;
	_cleanup_free_ char *req = NULL, *buf = NULL;
	size_t len = 0, cap = 0;
	int r;

	if (strlen(socket_path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, socket_path, strlen(socket_path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return -errno;
	req = xasprintf("%s %s HTTP/1.1\r\nHost: fleet\r\nConnection: close\r\n"
			"%s%s%s%zu\r\n\r\n%s",
			method, path,
			json_body ? "Content-Type: application/json\r\n" : "",
			"Content-Length: ", "", json_body ? strlen(json_body) : 0,
			json_body ? json_body : "");
	if ((r = write_all(fd, req, strlen(req))) < 0)
		return r;
	for (;;) {
		ssize_t n;

		if (cap - len < 4096) {
			cap = cap ? cap * 2 : 16384;
			if (cap > MAX_RESPONSE)
				return -EFBIG;
			buf = xrealloc(buf, cap);
		}
		n = read(fd, buf + len, cap - len - 1);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	buf[len] = '\0';
	return http_parse_response(buf, len, out);
}
