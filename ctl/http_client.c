/* http_client: see http_client.h. */
#include "ctl/http_client.h"

#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "common/util.h"

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

/* Connect to socket_path and send one request; returns the fd or -errno. */
static int send_request(const char *socket_path, const char *method, const char *path, const char *ctype,
			const char *body, size_t body_len)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	_cleanup_close_ int fd = -1;
	_cleanup_free_ char *head = NULL;
	int r;

	if (strlen(socket_path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, socket_path, strlen(socket_path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return -errno;
	head = xasprintf("%s %s HTTP/1.1\r\nHost: fleet\r\nConnection: close\r\n%s%s%sContent-Length: %zu\r\n\r\n",
			 method, path, body ? "Content-Type: " : "", body ? ctype : "", body ? "\r\n" : "",
			 body ? body_len : 0);
	if ((r = write_all(fd, head, strlen(head))) < 0 || (body && (r = write_all(fd, body, body_len)) < 0))
		return r;
	return TAKE_FD(fd);
}

/* Append what fd has until EOF to *buf; -errno. */
static int read_to_eof(int fd, char **buf, size_t *len, size_t *cap)
{
	for (;;) {
		ssize_t n;

		if (*cap - *len < 4096) {
			*cap = *cap ? *cap * 2 : 16384;
			if (*cap > MAX_RESPONSE)
				return -EFBIG;
			*buf = xrealloc(*buf, *cap);
		}
		n = read(fd, *buf + *len, *cap - *len - 1);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			break;
		*len += (size_t)n;
	}
	(*buf)[*len] = '\0';
	return 0;
}

int http_request(const char *socket_path, const char *method, const char *path,
		 const char *json_body, struct http_response *out)
{
	return http_request_body(socket_path, method, path, "application/json", json_body,
				 json_body ? strlen(json_body) : 0, out);
}

int http_request_body(const char *socket_path, const char *method, const char *path, const char *ctype,
		      const char *body, size_t body_len, struct http_response *out)
{
	_cleanup_close_ int fd = -1;
	_cleanup_free_ char *buf = NULL;
	size_t len = 0, cap = 0;
	int r;

	fd = send_request(socket_path, method, path, ctype, body, body_len);
	if (fd < 0)
		return fd;
	if ((r = read_to_eof(fd, &buf, &len, &cap)) < 0)
		return r;
	return http_parse_response(buf, len, out);
}

/* Incremental chunked decoding: feed bytes, get body bytes out through lines. */
struct chunk_state {
	enum { CH_SIZE, CH_DATA, CH_DATA_END, CH_DONE } st;
	size_t left;		/* bytes of the current chunk still to come */
	char size_line[32];
	size_t size_len;
	char *line;		/* body bytes not yet ending in '\n' */
	size_t line_len, line_cap;
	int (*on_line)(void *ud, const char *line, size_t len);
	void *ud;
};

static int body_bytes(struct chunk_state *cs, const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (cs->line_len + 1 >= cs->line_cap) {
			cs->line_cap = cs->line_cap ? cs->line_cap * 2 : 4096;
			if (cs->line_cap > MAX_RESPONSE)
				return -EFBIG;
			cs->line = xrealloc(cs->line, cs->line_cap);
		}
		if (p[i] == '\n') {
			int r;
			cs->line[cs->line_len] = '\0';
			r = cs->on_line(cs->ud, cs->line, cs->line_len);
			cs->line_len = 0;
			if (r < 0)
				return r;
		} else {
			cs->line[cs->line_len++] = p[i];
		}
	}
	return 0;
}

static int chunk_feed(struct chunk_state *cs, const char *p, size_t n)
{
	while (n > 0 && cs->st != CH_DONE) {
		switch (cs->st) {
		case CH_SIZE:
			if (*p == '\n') {
				char *end;
				cs->size_line[cs->size_len] = '\0';
				cs->left = strtoul(cs->size_line, &end, 16);
				if (end == cs->size_line)
					return -EPROTO;
				cs->size_len = 0;
				cs->st = cs->left ? CH_DATA : CH_DONE;
			} else if (*p != '\r') {
				if (cs->size_len + 1 >= sizeof(cs->size_line))
					return -EPROTO;
				cs->size_line[cs->size_len++] = *p;
			}
			p++;
			n--;
			break;
		case CH_DATA: {
			size_t take = n < cs->left ? n : cs->left;
			int r = body_bytes(cs, p, take);
			if (r < 0)
				return r;
			p += take;
			n -= take;
			cs->left -= take;
			if (cs->left == 0)
				cs->st = CH_DATA_END;
			break;
		}
		case CH_DATA_END:
			if (*p == '\n')
				cs->st = CH_SIZE;
			else if (*p != '\r')
				return -EPROTO;
			p++;
			n--;
			break;
		case CH_DONE:
			break;
		}
	}
	return 0;
}

int http_request_lines(const char *socket_path, const char *method, const char *path,
		       const char *json_body, size_t body_len,
		       int (*on_line)(void *ud, const char *line, size_t len), void *ud,
		       struct http_response *err_out)
{
	struct chunk_state cs = { .on_line = on_line, .ud = ud };
	_cleanup_close_ int fd = -1;
	_cleanup_free_ char *buf = NULL;
	size_t len = 0, cap = 0;
	const char *hdr_end;
	char tmp[65536];
	int r = 0, status;

	fd = send_request(socket_path, method, path, "application/json", json_body, body_len);
	if (fd < 0)
		return fd;
	/* Read up to the end of the headers. */
	buf = xmalloc(cap = 16384);
	for (;;) {
		ssize_t n = read(fd, buf + len, cap - len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EPROTO;
		len += (size_t)n;
		buf[len] = '\0';
		if ((hdr_end = memmem(buf, len, "\r\n\r\n", 4)))
			break;
		if (len + 1 >= cap)
			return -EPROTO;	/* 16 KiB of headers: not fleetd */
	}
	if (len < 12 || strncmp(buf, "HTTP/1.", 7) != 0)
		return -EPROTO;
	status = atoi(buf + 9);
	if (status != 200) {
		/* An error answer is one small JSON document: read it whole. */
		if ((r = read_to_eof(fd, &buf, &len, &cap)) < 0)
			return r;
		return http_parse_response(buf, len, err_out) < 0 ? -EPROTO : status;
	}
	r = chunk_feed(&cs, hdr_end + 4, len - (size_t)(hdr_end + 4 - buf));
	while (r == 0 && cs.st != CH_DONE) {
		ssize_t n = read(fd, tmp, sizeof(tmp));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			r = -errno;
			break;
		}
		if (n == 0) {
			r = -ECONNRESET;	/* fleetd went away mid-stream */
			break;
		}
		r = chunk_feed(&cs, tmp, (size_t)n);
	}
	free(cs.line);
	return r < 0 ? r : 200;
}
