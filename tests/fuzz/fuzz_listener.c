/*
 * fuzz_listener: fleet-hooksd's HTTP side as it runs (listener/http.c,
 * conn.c, link.c on evhttp): a real lserver on a listening socket (abstract
 * Unix address, nothing on disk or the network), its link on a socketpair
 * whose other end is played here as fleetd (routes sent through the link,
 * every delivery read, checked and answered 202), and one client
 * connection per input. The input:
 *
 *   byte 0   flags: 1 sign (below)
 *   byte 1   how the bytes are split: 0 all in one write, else the seed of
 *            the chunk sizes (1..64 bytes), the loop run between chunks
 *   then     the raw bytes the client sends (one or more requests), then
 *            it shuts down its sending side and reads every answer.
 *
 * With flag 1 the harness signs what follows the first blank line as the
 * body, for both routes (headers inserted after the request line), so the
 * verified path and the link are reached. Routes: "gh" (GitHub) and "hm"
 * (generic HMAC, X-Fleet-Signature: sha256=HEX), max_body 4096.
 *
 * Checks beyond memory safety: every answer's status is one the listener
 * documents (202 from fleetd; 400, 401, 404, 405, 408, 413, 417, 501, 503);
 * every
 * delivery handed to the link is for a configured route, within its body
 * cap, and its body's HMAC under the route's secret is the signature it
 * carried (recomputed here); no 2xx without a delivery (2xx answers never
 * outnumber deliveries); a refusal hands nothing over (deliveries never
 * outnumber 2xx answers but for one whose answer the closed connection
 * lost, and none when the last answer is a refusal); once the client has
 * closed, the listener holds nothing of it (no connection, pending
 * delivery or body bytes counted).
 */
#include <errno.h>
#include <event2/event.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/log.h"
#include "hooks/proto.h"
#include "listener/link.h"
#include "listener/server.h"

#define FAIL(...) do { fprintf(stderr, "fuzz_listener: " __VA_ARGS__); fputc('\n', stderr); abort(); } while (0)
#define MAX_BODY 4096

static const unsigned char key_gh[] = "fuzz-key-github-route", key_hm[] = "fuzz-key-hmac-route";

static struct event_base *base;
static struct lserver *srv;
static struct link *lnk;
static int fleetd_fd = -1;		/* the fake fleetd's end of the link */
static struct sockaddr_un addr;
static socklen_t addr_len;
static unsigned char *fin;		/* bytes from the link not yet a whole frame */
static size_t fin_len;
static long delivered;			/* deliveries read from the link for this input */

static void link_answer(const struct hook_answer *a, void *arg)
{
	(void)arg;
	lserver_answer(srv, a);	/* -ENOENT: its request went away, as in main.c */
}

static void link_message(const json_t *msg, void *arg)
{
	const char *type = hook_msg_type(msg), *why = NULL;

	(void)arg;
	if (strcmp(type, "routes") == 0) {
		struct hook_route_set *set = NULL;

		if (hook_msg_routes_parse(msg, &set, &why) < 0)
			FAIL("our own routes do not parse: %s", why);
		lserver_set_routes(srv, set);
	}
}

static void link_down(bool error, void *arg)
{
	(void)arg;
	FAIL("the link went down (error %d)", error);
}

/* A frame down the link, written whole (the loop runs while the socket is full). */
static void fleetd_write(unsigned char *frame, size_t len)
{
	size_t off = 0;

	while (off < len) {
		ssize_t n = write(fleetd_fd, frame + off, len - off);

		if (n < 0 && errno != EINTR && errno != EAGAIN)
			FAIL("write to the link: %s", strerror(errno));
		if (n > 0)
			off += (size_t)n;
		else
			event_base_loop(base, EVLOOP_NONBLOCK);
	}
	free(frame);
}

static void fleetd_send(const json_t *msg)
{
	unsigned char *frame = NULL;
	size_t len = 0;

	if (!msg || hook_frame_encode(msg, &frame, &len) < 0)
		FAIL("cannot encode a frame");
	fleetd_write(frame, len);
}

static void hmac_hex(const unsigned char *key, size_t key_len, const unsigned char *p, size_t n, char out[65])
{
	unsigned char md[32];
	unsigned int md_len = 0;

	if (!HMAC(EVP_sha256(), key, (int)key_len, p, n, md, &md_len) || md_len != 32)
		FAIL("HMAC");
	for (int i = 0; i < 32; i++)
		sprintf(out + 2 * i, "%02x", md[i]);
}

/* fleetd's side: check a delivery independently, then answer it 202. */
static void fleetd_delivery(const unsigned char *frame, size_t len)
{
	struct hook_delivery d = { 0 };
	struct hook_answer a = { 0 };
	const char *why = NULL, *hname, *sig = NULL;
	const unsigned char *key;
	size_t key_len;
	char want[7 + 65] = "sha256=";
	unsigned char *out;
	size_t out_len;

	if (hook_delivery_decode(frame, len, &d, &why) < 0)
		FAIL("the listener sent a delivery fleetd refuses: %s", why);
	if (strcmp(d.route, "gh") == 0) {
		hname = "X-Hub-Signature-256", key = key_gh, key_len = sizeof(key_gh) - 1;
	} else if (strcmp(d.route, "hm") == 0) {
		hname = "X-Fleet-Signature", key = key_hm, key_len = sizeof(key_hm) - 1;
	} else {
		FAIL("a delivery for a route that does not exist: %s", d.route);
	}
	if (d.body_len > MAX_BODY)
		FAIL("a delivery of %zu bytes passed the route's cap", d.body_len);
	for (size_t i = 0; i < d.n_headers; i++)
		if (strcasecmp(d.headers[i].name, hname) == 0)
			sig = d.headers[i].value;
	hmac_hex(key, key_len, d.body, d.body_len, want + 7);
	if (!sig || strcmp(sig, want) != 0)
		FAIL("a delivery on %s whose body is not what was signed (%s)", d.route, sig ? sig : "no signature");
	delivered++;
	a.seq = d.seq;
	a.status = 202;
	a.body = (char *)"{\"ok\":true}\n";
	a.content_type = (char *)"application/json";
	if (hook_answer_encode(&a, &out, &out_len) < 0)
		FAIL("cannot encode an answer");
	fleetd_write(out, out_len);
	hook_delivery_clear(&d);
}

static void fleetd_read(evutil_socket_t fd, short what, void *arg)
{
	unsigned char buf[65536];
	ssize_t n;
	long need;

	(void)what;
	(void)arg;
	while ((n = read(fd, buf, sizeof(buf))) > 0) {
		fin = realloc(fin, fin_len + (size_t)n);
		if (!fin)
			abort();
		memcpy(fin + fin_len, buf, (size_t)n);
		fin_len += (size_t)n;
	}
	while (fin_len >= HOOK_FRAME_HEAD && (need = hook_frame_need(fin, fin_len)) > 0 && (size_t)need <= fin_len) {
		json_t *msg = NULL;
		const char *why = NULL;
		int kind = hook_frame_kind(fin, (size_t)need, &why);

		if (kind == HOOK_KIND_DELIVERY) {
			fleetd_delivery(fin, (size_t)need);
		} else if (kind != HOOK_KIND_JSON || hook_frame_decode(fin, (size_t)need, &msg, &why) < 0) {
			FAIL("the listener sent a frame that does not decode: %s", why ? why : "an answer");
		}
		json_decref(msg);
		memmove(fin, fin + need, fin_len - (size_t)need);
		fin_len -= (size_t)need;
	}
	if (fin_len >= HOOK_FRAME_HEAD && hook_frame_need(fin, fin_len) < 0)
		FAIL("the listener sent an oversized frame");
}

static void setup(void)
{
	int lfd, sv[2];
	struct hook_route routes[2] = {
		{ .name = "gh", .source = HOOK_GITHUB, .secrets = { key_gh }, .secret_lens = { sizeof(key_gh) - 1 },
		  .n_secrets = 1, .max_body = MAX_BODY },
		{ .name = "hm", .source = HOOK_HMAC, .secrets = { key_hm }, .secret_lens = { sizeof(key_hm) - 1 },
		  .n_secrets = 1, .header = "X-Fleet-Signature", .encoding = HOOK_HEX, .prefix = "sha256=",
		  .max_body = MAX_BODY },
	};
	struct hook_limits limits = { .max_connections = 64, .max_per_source = 64, .request_timeout_s = 5,
				      .header_max = 8192 };
	static const struct link_ops ops = { .message = link_message, .answer = link_answer, .down = link_down };
	struct event *ev;
	json_t *msg;

	log_setup("fuzz_listener", 2 /* LOG_CRIT: the refusals' notices are noise here */);
	base = event_base_new();
	addr.sun_family = AF_UNIX;
	/* abstract: nothing on disk; the pid keeps parallel fuzzers apart */
	addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 +
			       (size_t)snprintf(addr.sun_path + 1, sizeof(addr.sun_path) - 1, "fleet-fuzz-listener-%d",
						(int)getpid()));
	lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (!base || lfd < 0 || bind(lfd, (struct sockaddr *)&addr, addr_len) < 0 || listen(lfd, 64) < 0)
		FAIL("cannot listen: %s", strerror(errno));
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) < 0)
		FAIL("socketpair");
	fleetd_fd = sv[1];
	if (link_start(base, sv[0], &ops, NULL, &lnk) < 0 || lserver_start(base, lfd, lnk, &srv) < 0)
		FAIL("cannot start the listener");
	ev = event_new(base, fleetd_fd, EV_READ | EV_PERSIST, fleetd_read, NULL);
	if (!ev || event_add(ev, NULL) < 0)
		FAIL("event");
	msg = hook_msg_routes(routes, 2, &limits);
	fleetd_send(msg);
	json_decref(msg);
	while (!srv->routes)
		event_base_loop(base, EVLOOP_ONCE);
}

/* The request bytes, signed for both routes when asked (see the top). */
static unsigned char *prepare(const uint8_t *p, size_t n, bool sign, size_t *out_len)
{
	unsigned char *out;
	const unsigned char *eol, *blank;
	char gh[65], hm[65], hdr[200];
	size_t line, hlen;

	if (!sign || !(eol = memchr(p, '\n', n)) || !(blank = memmem(p, n, "\r\n\r\n", 4))) {
		out = malloc(n ? n : 1);
		if (!out)
			abort();
		memcpy(out, p, n);
		*out_len = n;
		return out;
	}
	hmac_hex(key_gh, sizeof(key_gh) - 1, blank + 4, n - (size_t)(blank + 4 - p), gh);
	hmac_hex(key_hm, sizeof(key_hm) - 1, blank + 4, n - (size_t)(blank + 4 - p), hm);
	hlen = (size_t)snprintf(hdr, sizeof(hdr), "X-Hub-Signature-256: sha256=%s\r\nX-Fleet-Signature: sha256=%s\r\n",
				gh, hm);
	line = (size_t)(eol + 1 - p);
	out = malloc(n + hlen);
	if (!out)
		abort();
	memcpy(out, p, line);
	memcpy(out + line, hdr, hlen);
	memcpy(out + line + hlen, p + line, n - line);
	*out_len = n + hlen;
	return out;
}

static bool status_documented(int s)
{
	static const int ok[] = { 202, 400, 401, 404, 405, 408, 413, 417, 501, 503 };

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
		if (ok[i] == s)
			return true;
	return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	unsigned char *req, *got = NULL;
	size_t req_len, off = 0, got_len = 0;
	uint32_t rng;
	int c, n_2xx = 0, n_answers = 0, last = 0;
	bool eof = false;

	if (size < 2)
		return 0;
	if (!base)
		setup();
	req = prepare(data + 2, size - 2, data[0] & 1, &req_len);
	rng = data[1];
	delivered = 0;
	c = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (c < 0 || connect(c, (struct sockaddr *)&addr, addr_len) < 0)
		FAIL("connect: %s", strerror(errno));
	/* send, in the chunks asked for, letting the listener read between them; read answers meanwhile */
	while (!eof) {
		unsigned char buf[16384];
		ssize_t r;

		if (off < req_len) {
			size_t chunk = req_len - off;

			if (data[1]) {
				rng = rng * 1103515245u + 12345u;
				chunk = 1 + (rng >> 16) % 64;
				if (chunk > req_len - off)
					chunk = req_len - off;
			}
			r = send(c, req + off, chunk, MSG_NOSIGNAL);
			if (r > 0)
				off += (size_t)r;
			else if (r < 0 && errno != EAGAIN)
				off = req_len;	/* the listener closed: it answered already */
			if (off == req_len)
				shutdown(c, SHUT_WR);
		}
		event_base_loop(base, off < req_len ? EVLOOP_NONBLOCK : EVLOOP_ONCE);
		while ((r = recv(c, buf, sizeof(buf), 0)) > 0) {
			got = realloc(got, got_len + (size_t)r + 1);
			if (!got)
				abort();
			memcpy(got + got_len, buf, (size_t)r);
			got_len += (size_t)r;
			got[got_len] = '\0';
		}
		if (r == 0 || (r < 0 && errno != EAGAIN))
			eof = true;
	}
	close(c);
	/* let the listener see the close and forget the connection */
	for (int i = 0; i < 100 && (i < 4 || srv->n_conns > 0); i++)
		event_base_loop(base, EVLOOP_NONBLOCK);
	if (srv->n_conns || srv->n_admitted || srv->n_pending || srv->body_inflight || srv->n_lingering)
		FAIL("the client is gone, yet the listener holds %ld connections (%ld admitted, %ld lingering), "
		     "%ld pending deliveries, %zu body bytes in flight", srv->n_conns, srv->n_admitted, srv->n_lingering,
		     srv->n_pending, srv->body_inflight);

	/*
	 * Status lines: our bodies are one-line JSON, so an answer starts
	 * wherever a line starts "HTTP/1." (evhttp echoes the request's minor
	 * version, whatever its digits: the status follows the first space).
	 */
	for (const unsigned char *p = got; p && p < got + got_len;) {
		const unsigned char *nl = memchr(p, '\n', got_len - (size_t)(p - got));
		const char *sp = NULL;
		int status;

		if (got_len - (size_t)(p - got) >= 12 && memcmp(p, "HTTP/1.", 7) == 0)
			sp = memchr(p, ' ', nl ? (size_t)(nl - p) : got_len - (size_t)(p - got));
		if (sp && sscanf(sp + 1, "%3d", &status) == 1 && status != 100 /* interim, for Expect */) {
			if (!status_documented(status))
				FAIL("an answer with status %d, which the listener does not document", status);
			n_answers++;
			n_2xx += status >= 200 && status < 300;
			last = status;
		}
		p = nl ? nl + 1 : NULL;
	}
	if (n_2xx > delivered)
		FAIL("%d 2xx answers for %ld deliveries", n_2xx, delivered);
	if (delivered > n_2xx + 1 || (n_answers && (last < 200 || last >= 300) && delivered != n_2xx))
		FAIL("%ld deliveries for %d 2xx answers (last answer %d): a refused request was handed over",
		     delivered, n_2xx, last);
	free(got);
	free(req);
	return 0;
}
