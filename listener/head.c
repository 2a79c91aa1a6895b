/* head: see head.h. */
#include "listener/head.h"

#include <string.h>
#include <strings.h>

#include "hooks/route.h"

size_t lhead_end(const char *buf, size_t len)
{
	for (size_t i = 0; i + 1 < len; i++) {
		if (buf[i] != '\n')
			continue;
		if (buf[i + 1] == '\n')
			return i + 2;
		if (buf[i + 1] == '\r' && i + 2 < len && buf[i + 2] == '\n')
			return i + 3;
	}
	return 0;
}

static int refuse(struct lhead *h, int status, const char *code, const char *why)
{
	h->status = status;
	h->code = code;
	h->why = why;
	return -1;
}

static bool is_tchar(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* The next line of [*p, end): NUL-terminated in place, its CR dropped; NULL at the end. */
static char *next_line(char **p, char *end, bool *bad_cr)
{
	char *line = *p, *nl = memchr(line, '\n', (size_t)(end - line));
	size_t n;

	if (!nl)
		return NULL;
	*nl = '\0';
	*p = nl + 1;
	n = (size_t)(nl - line);
	if (n > 0 && line[n - 1] == '\r')
		line[--n] = '\0';
	/* A CR anywhere else, or a NUL, is no part of HTTP/1.1 framing. */
	*bad_cr = memchr(line, '\r', n) != NULL || strlen(line) != n;
	return line;
}

/* Content-Length: 1 to 15 digits and nothing else (no sign, no space inside, no list). */
static bool parse_length(const char *v, long long *out)
{
	size_t n = strlen(v);
	long long x = 0;

	if (n == 0 || n > 15 || strspn(v, "0123456789") != n)
		return false;
	for (size_t i = 0; i < n; i++)
		x = x * 10 + (v[i] - '0');
	*out = x;
	return true;
}

int lhead_parse(char *buf, size_t len, struct lhead *h)
{
	char *p = buf, *end = buf + len, *line, *sp1, *sp2, *value;
	bool bad_cr = false;
	int n_cl = 0, n_te = 0;

	*h = (struct lhead){ .content_length = -1 };
	line = next_line(&p, end, &bad_cr);
	if (!line || bad_cr || !(sp1 = strchr(line, ' ')) || !(sp2 = strchr(sp1 + 1, ' ')) || strchr(sp2 + 1, ' '))
		return refuse(h, 400, "bad_request", "the request line is not METHOD TARGET VERSION");
	*sp1 = *sp2 = '\0';
	h->method = line;
	h->target = sp1 + 1;
	if (!*h->method || strlen(h->method) > 16 || strspn(h->method, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") != strlen(h->method))
		return refuse(h, 400, "bad_request", "the method is not an upper-case word");
	if (h->target[0] != '/' || strlen(h->target) > LHEAD_TARGET_MAX)
		return refuse(h, 400, "bad_request", "the request target is not a path");
	for (const char *t = h->target; *t; t++)
		if ((unsigned char)*t <= 0x20 || (unsigned char)*t >= 0x7f)
			return refuse(h, 400, "bad_request", "the request target has a byte outside printable ASCII");
	if (strcmp(sp2 + 1, "HTTP/1.1") != 0 && strcmp(sp2 + 1, "HTTP/1.0") != 0)
		return refuse(h, 400, "bad_request", "the version is not HTTP/1.0 or HTTP/1.1");
	while ((line = next_line(&p, end, &bad_cr)) && *line) {
		char *colon = strchr(line, ':'), *ve;

		if (bad_cr)
			return refuse(h, 400, "bad_request", "a header line has a stray CR or NUL");
		if (line[0] == ' ' || line[0] == '\t')
			return refuse(h, 400, "bad_request", "folded header lines are not accepted");
		if (!colon || colon == line)
			return refuse(h, 400, "bad_request", "a header line has no name");
		for (char *c = line; c < colon; c++)
			if (!is_tchar((unsigned char)*c))
				return refuse(h, 400, "bad_request", "a header name is not a token");
		if (++h->n_headers > LHEAD_HEADERS_MAX)
			return refuse(h, 413, "headers_too_large", "more than 128 header lines");
		*colon = '\0';
		value = colon + 1;
		value += strspn(value, " \t");
		ve = value + strlen(value);
		while (ve > value && (ve[-1] == ' ' || ve[-1] == '\t'))
			*--ve = '\0';
		for (const char *c = value; *c; c++)
			if (((unsigned char)*c < 0x20 && *c != '\t') || *c == 0x7f)
				return refuse(h, 400, "bad_request", "a header value has a control byte");
		if (strcasecmp(line, "Content-Length") == 0) {
			if (++n_cl > 1)
				return refuse(h, 400, "bad_request", "Content-Length is given more than once");
			if (!parse_length(value, &h->content_length))
				return refuse(h, 400, "bad_request", "Content-Length is not a number");
		} else if (strcasecmp(line, "Transfer-Encoding") == 0) {
			if (++n_te > 1)
				return refuse(h, 400, "bad_request", "Transfer-Encoding is given more than once");
			if (strcasecmp(value, "chunked") != 0)
				return refuse(h, 400, "bad_request", "the only Transfer-Encoding accepted is chunked");
			h->chunked = true;
		}
	}
	if (!line)
		return refuse(h, 400, "bad_request", "the head does not end with an empty line");
	if (n_cl && n_te)
		return refuse(h, 400, "bad_request", "Transfer-Encoding and Content-Length together");
	return 0;
}

bool lhead_route_name(const char *target, char *name)
{
	static const char prefix[] = "/hooks/";
	const char *start, *q;
	size_t n;
	const char *why;

	if (strncmp(target, prefix, sizeof(prefix) - 1) != 0)
		return false;
	start = target + sizeof(prefix) - 1;
	q = strchr(start, '?');
	n = q ? (size_t)(q - start) : strlen(start);
	if (n == 0 || n > HOOK_ROUTE_NAME_MAX)
		return false;
	memcpy(name, start, n);
	name[n] = '\0';
	return hook_route_name_check(name, &why) == 0;
}
