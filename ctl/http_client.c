/* http_client: see http_client.h. */
#include "ctl/http_client.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include "common/util.h"

#define MAX_RESPONSE (64u << 20)
#define MAX_LINE (64u << 20)
#define CONNECT_TIMEOUT_S 30

void http_response_free(struct http_response *r)
{
	free(r->body);
	r->body = NULL;
	r->body_len = 0;
}

/* What a transfer collects; owned by the calling function's stack. */
struct transfer {
	CURL *curl;
	size_t max;		/* bytes of body kept at most */
	struct http_response *resp;	/* the body, when not streamed as lines */
	size_t cap;
	int err;		/* why a callback stopped the transfer (-errno), or 0 */
	/* line mode: */
	int (*on_line)(void *ud, const char *line, size_t len);
	void *ud;
	char *line;
	size_t line_len, line_cap;
};

static int append(struct transfer *t, const char *p, size_t n)
{
	struct http_response *r = t->resp;

	if (r->body_len + n > t->max)
		return -EFBIG;
	if (r->body_len + n + 1 > t->cap) {
		t->cap = t->cap ? t->cap : 16384;
		while (r->body_len + n + 1 > t->cap)
			t->cap *= 2;
		r->body = xrealloc(r->body, t->cap);
	}
	memcpy(r->body + r->body_len, p, n);
	r->body_len += n;
	r->body[r->body_len] = '\0';
	return 0;
}

static size_t on_body(char *p, size_t size, size_t n, void *ud)
{
	struct transfer *t = ud;

	if ((t->err = append(t, p, n)) < 0)
		return 0;	/* libcurl then stops with CURLE_WRITE_ERROR */
	return n;
}

/* Lines of a 200 answer go to on_line; any other answer is one small document kept whole. */
static size_t on_stream(char *p, size_t size, size_t n, void *ud)
{
	struct transfer *t = ud;
	long status = 0;

	curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &status);
	if (status != 200)
		return on_body(p, size, n, ud);
	for (size_t i = 0; i < n; i++) {
		if (p[i] != '\n') {
			if (t->line_len + 1 >= t->line_cap) {
				if (t->line_cap >= MAX_LINE) {
					t->err = -EFBIG;
					return 0;
				}
				t->line_cap = t->line_cap ? t->line_cap * 2 : 4096;
				t->line = xrealloc(t->line, t->line_cap);
			}
			t->line[t->line_len++] = p[i];
			continue;
		}
		if (!t->line)
			t->line = xmalloc(t->line_cap = 4096);
		t->line[t->line_len] = '\0';
		t->err = t->on_line(t->ud, t->line, t->line_len);
		t->line_len = 0;
		if (t->err < 0)
			return 0;
	}
	return n;
}

/* libcurl's verdict as -errno; connect(2)'s own errno when connecting failed. */
static int curl_errno(struct transfer *t, CURLcode c)
{
	long os_errno = 0;

	if (t->err < 0)
		return t->err;
	switch (c) {
	case CURLE_OK:
		return 0;
	case CURLE_COULDNT_CONNECT:
		curl_easy_getinfo(t->curl, CURLINFO_OS_ERRNO, &os_errno);
		return os_errno > 0 ? -(int)os_errno : -ECONNREFUSED;
	case CURLE_OPERATION_TIMEDOUT:
		return -ETIMEDOUT;
	case CURLE_OUT_OF_MEMORY:
		return -ENOMEM;
	case CURLE_PARTIAL_FILE:
	case CURLE_RECV_ERROR:
	case CURLE_GOT_NOTHING:
	case CURLE_SEND_ERROR:
		return -ECONNRESET;
	default:
		return -EPROTO;	/* not HTTP, or HTTP libcurl could not make sense of */
	}
}

/*
 * One easy handle for the whole process, so its connection to fleetd is
 * kept (fleetd's API keeps HTTP/1.1 connections alive) and reused by the
 * next request: `fleetctl apply` makes its lists and changes on one
 * connection. Reset before each request (curl_easy_reset keeps live
 * connections), freed at exit. libcurl connects again by itself when
 * fleetd has closed the kept connection (request_timeout, an error).
 */
static CURL *shared;

static void shared_free(void)
{
	curl_easy_cleanup(shared);
	shared = NULL;
	curl_global_cleanup();
}

static CURL *shared_handle(void)
{
	if (shared) {
		curl_easy_reset(shared);
		return shared;
	}
	if (curl_global_init(CURL_GLOBAL_NOTHING) != CURLE_OK || !(shared = curl_easy_init()))
		return NULL;
	if (atexit(shared_free) != 0) {
		curl_easy_cleanup(shared);
		shared = NULL;
		return NULL;
	}
	return shared;
}

/*
 * Set up and run one request on the shared handle (t->curl). Returns the
 * HTTP status or -errno.
 */
static int perform(struct transfer *t, const char *socket_path, const char *method, const char *path,
		   const char *ctype, const void *body, size_t body_len, curl_write_callback write_cb)
{
	struct curl_slist *headers = NULL;
	_cleanup_free_ char *url = NULL, *ctype_hdr = NULL;
	bool has_body = body || (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0);
	long status = 0;
	CURLcode c;
	int r;

	if (strlen(socket_path) >= sizeof(((struct sockaddr_un *)0)->sun_path))
		return -ENAMETOOLONG;
	if (!(t->curl = shared_handle()))
		return -ENOMEM;
	url = xasprintf("http://fleet%s", path);
	/* No "Expect: 100-continue" round trip; a Content-Type only with a body. */
	headers = curl_slist_append(headers, "Expect:");
	ctype_hdr = xasprintf("Content-Type:%s%s", body ? " " : "", body ? ctype : "");
	headers = curl_slist_append(headers, ctype_hdr);
	if (!headers)
		return -ENOMEM;
	curl_easy_setopt(t->curl, CURLOPT_UNIX_SOCKET_PATH, socket_path);
	curl_easy_setopt(t->curl, CURLOPT_URL, url);
	curl_easy_setopt(t->curl, CURLOPT_PROTOCOLS_STR, "http");
	curl_easy_setopt(t->curl, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(t->curl, CURLOPT_HTTPHEADER, headers);
	curl_easy_setopt(t->curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(t->curl, CURLOPT_CONNECTTIMEOUT, (long)CONNECT_TIMEOUT_S);
	if (has_body) {
		/* Content-Length: 0 for a bodiless POST/DELETE, as fleetd wants a length. */
		curl_easy_setopt(t->curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(body ? body_len : 0));
		curl_easy_setopt(t->curl, CURLOPT_POSTFIELDS, body ? body : "");
	}
	curl_easy_setopt(t->curl, CURLOPT_WRITEFUNCTION, write_cb);
	curl_easy_setopt(t->curl, CURLOPT_WRITEDATA, t);
	c = curl_easy_perform(t->curl);
	curl_slist_free_all(headers);
	if ((r = curl_errno(t, c)) < 0)
		return r;
	curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &status);
	return status >= 100 && status <= 599 ? (int)status : -EPROTO;
}

int http_request_raw(const char *socket_path, const char *method, const char *path, const char *ctype,
		     const void *body, size_t body_len, size_t max_response, struct http_response *out)
{
	struct transfer t = { .max = max_response, .resp = out };
	int r;

	out->body = NULL;
	out->body_len = 0;
	r = perform(&t, socket_path, method, path, ctype, body, body_len, on_body);
	if (r < 0) {
		http_response_free(out);
		return r;
	}
	out->status = r;
	if (!out->body)
		out->body = xstrdup("");
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
	return http_request_raw(socket_path, method, path, ctype, body, body_len, MAX_RESPONSE, out);
}

int http_request_lines(const char *socket_path, const char *method, const char *path,
		       const char *json_body, size_t body_len,
		       int (*on_line)(void *ud, const char *line, size_t len), void *ud,
		       struct http_response *err_out)
{
	struct transfer t = { .max = MAX_RESPONSE, .resp = err_out, .on_line = on_line, .ud = ud };
	int r;

	err_out->body = NULL;
	err_out->body_len = 0;
	r = perform(&t, socket_path, method, path, "application/json", json_body, body_len, on_stream);
	free(t.line);
	if (r < 0 || r == 200) {
		http_response_free(err_out);
		return r;
	}
	err_out->status = r;
	if (!err_out->body)
		err_out->body = xstrdup("");
	return r;
}
