/*
 * test_listener: the real daemon/fleet-hooksd on its own. This test plays
 * fleetd: it makes the socketpair and the listening socket (127.0.0.1, a
 * free port), an empty root-owned 0555 directory, starts the listener as
 * root with them on fds 3 and 4, reads its hello, sends routes and answers
 * deliveries, while curl and raw sockets play the webhook senders, well
 * behaved and hostile. From /proc it checks the privileges the listener
 * kept. Needs root (skipped otherwise); the listener runs as "nobody".
 * Over 800 lines as one concern: the listener binary against one harness.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/base64.h"
#include "common/util.h"
#include "hooks/proto.h"
#include "tests/tap.h"

#define GUARD_MS 60000		/* a stuck listener fails the test instead of hanging it; no timing is asserted */
#define USER "nobody"
#define SECRET "it-is-a-webhook-secret-0123"
#define DD_SECRET "datadog-shared-secret-0123"

struct lst {
	pid_t pid;
	pid_t copier;		/* copies its stderr into log */
	int link;		/* our end of the socketpair */
	int port;
	char root[64];
	char log[64];
	int status;		/* exit status once reaped */
};

static const char *hooksd(void)
{
	static char path[4096];
	const char *b = getenv("FLEET_BUILDDIR");

	snprintf(path, sizeof(path), "%s/daemon/fleet-hooksd", b ? b : ".");
	return path;
}

static void show_log(const struct lst *L)
{
	char line[512];
	FILE *f = fopen(L->log, "r");

	while (f && fgets(line, sizeof(line), f))
		printf("# listener: %s", line);
	if (f)
		fclose(f);
}

/* ---- the socketpair, as fleetd ---- */

static bool read_full(int fd, void *buf, size_t n)
{
	size_t got = 0;

	while (got < n) {
		struct pollfd p = { fd, POLLIN, 0 };
		ssize_t r;

		if (poll(&p, 1, GUARD_MS) <= 0)
			return false;
		r = read(fd, (char *)buf + got, n - got);
		if (r <= 0)
			return false;
		got += (size_t)r;
	}
	return true;
}

static bool send_msg(int fd, json_t *msg)
{
	unsigned char *frame;
	size_t len;
	bool good;

	if (!msg || hook_frame_encode(msg, &frame, &len) < 0)
		return false;
	good = write_all(fd, frame, len) == 0;
	free(frame);
	json_decref(msg);
	return good;
}

/* fleetd's answer a down the link, as fleetd frames it. */
static bool send_answer(int fd, const struct hook_answer *a)
{
	unsigned char *frame;
	size_t len;
	bool good;

	if (hook_answer_encode(a, &frame, &len) < 0)
		return false;
	good = write_all(fd, frame, len) == 0;
	free(frame);
	return good;
}

/* The last delivery recv_any() read, decoded as fleetd decodes it; recv_any returns {"t":"delivery"} for it. */
static struct hook_delivery last_delivery;

/* The next message from the listener; NULL on EOF or a bad frame. */
static json_t *recv_any(int fd)
{
	unsigned char *frame;
	long need;
	json_t *msg = NULL;
	const char *why;
	int kind;

	frame = xmalloc(HOOK_FRAME_HEAD);
	if (!read_full(fd, frame, HOOK_FRAME_HEAD) || (need = hook_frame_need(frame, HOOK_FRAME_HEAD)) < 0) {
		free(frame);
		return NULL;
	}
	frame = xrealloc(frame, (size_t)need);
	if (!read_full(fd, frame + HOOK_FRAME_HEAD, (size_t)need - HOOK_FRAME_HEAD)) {
		free(frame);
		return NULL;
	}
	kind = hook_frame_kind(frame, (size_t)need, &why);
	if (kind == HOOK_KIND_DELIVERY) {
		hook_delivery_clear(&last_delivery);
		if (hook_delivery_decode(frame, (size_t)need, &last_delivery, &why) == 0)
			msg = json_pack("{s:s}", "t", "delivery");
	} else if (kind == HOOK_KIND_JSON && hook_frame_decode(frame, (size_t)need, &msg, &why) < 0) {
		msg = NULL;
	}
	free(frame);
	return msg;
}

/* The value of header name of a delivery, or NULL. */
static const char *header_of(const struct hook_delivery *d, const char *name)
{
	for (size_t i = 0; i < d->n_headers; i++)
		if (strcmp(d->headers[i].name, name) == 0)
			return d->headers[i].value;
	return NULL;
}

/* The next message from the listener that is not stats; NULL on EOF or a bad frame. */
static json_t *recv_msg(int fd)
{
	for (;;) {
		json_t *msg = recv_any(fd);

		if (!msg || strcmp(hook_msg_type(msg), "stats") != 0)
			return msg;
		json_decref(msg);
	}
}

static json_t *routes_msg(long max_connections, long max_per_source, long timeout, const char *extra)
{
	struct hook_route r[3] = {
		{ .name = "gh", .source = HOOK_GITHUB, .secrets = { (const unsigned char *)SECRET },
		  .secret_lens = { strlen(SECRET) }, .n_secrets = 1, .max_body = 4096 },
		{ .name = "dd", .source = HOOK_DATADOG, .secrets = { (const unsigned char *)DD_SECRET },
		  .secret_lens = { strlen(DD_SECRET) }, .n_secrets = 1, .header = "X-DD-Secret",
		  .datadog_auth = HOOK_DATADOG_HEADER, .delivery_field = "id", .max_body = 4096 },
		{ .name = extra, .source = HOOK_GITHUB, .secrets = { (const unsigned char *)SECRET },
		  .secret_lens = { strlen(SECRET) }, .n_secrets = 1, .max_body = 4096 },
	};
	struct hook_limits lim = { max_connections, max_per_source, timeout, 4096 };

	return hook_msg_routes(r, extra ? 3 : 2, &lim);
}

/* Start the listener with an empty root of our making; its hello checked. root_entry: put a file in the root (must fail). */
static bool start(struct lst *L, const char *user, bool root_entry)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t slen = sizeof(sa);
	int sv[2], lfd, logfd, errpipe[2];
	json_t *hello;
	long pid = 0;
	const char *why;

	memset(L, 0, sizeof(*L));
	snprintf(L->root, sizeof(L->root), "/tmp/test-hooksd-root.XXXXXX");
	snprintf(L->log, sizeof(L->log), "/tmp/test-hooksd-log.XXXXXX");
	if (!mkdtemp(L->root) || (logfd = mkstemp(L->log)) < 0)
		return false;
	if (root_entry)
		close(open(strcat(strcpy((char[128]){ 0 }, L->root), "/x"), O_CREAT | O_WRONLY, 0600));
	chmod(L->root, 0555);
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0 ||
	    (lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) < 0 ||
	    bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 128) < 0 ||
	    getsockname(lfd, (struct sockaddr *)&sa, &slen) < 0)
		return false;
	L->port = ntohs(sa.sin_port);
	/* Its stderr is a pipe, as fleetd gives it (it may write no file); a child of ours copies it to the log. */
	if (pipe(errpipe) < 0)
		return false;
	if ((L->copier = fork()) == 0) {
		char buf[4096];
		ssize_t n;

		close(errpipe[1]);
		close(sv[0]);
		close(sv[1]);
		close(lfd);
		while ((n = read(errpipe[0], buf, sizeof(buf))) > 0)
			(void)!write(logfd, buf, (size_t)n);
		_exit(0);
	}
	close(errpipe[0]);
	close(logfd);
	logfd = errpipe[1];
	L->pid = fork();
	if (L->pid == 0) {
		/* Out of the way of 0 to 4 first, as any of them may be one of these. */
		int null = fcntl(open("/dev/null", O_RDONLY), F_DUPFD, 10);
		int log_hi = fcntl(logfd, F_DUPFD, 10), link_hi = fcntl(sv[1], F_DUPFD, 10);
		int listen_hi = fcntl(lfd, F_DUPFD, 10);

		dup2(null, 0);
		dup2(log_hi, 1);
		dup2(log_hi, 2);
		dup2(link_hi, 3);
		dup2(listen_hi, 4);
		execl(hooksd(), "fleet-hooksd", "--user", user, "--root", L->root, (char *)NULL);
		_exit(127);
	}
	close(sv[1]);
	close(lfd);
	close(logfd);
	L->link = sv[0];
	hello = recv_msg(L->link);
	if (!hello || hook_msg_hello_parse(hello, &pid, &why) < 0 || pid != L->pid) {
		json_decref(hello);
		return false;
	}
	json_decref(hello);
	return true;
}

static int reap(struct lst *L)
{
	int st = 0;

	if (L->pid > 0 && waitpid(L->pid, &st, 0) == L->pid)
		L->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	L->pid = 0;
	if (L->copier > 0)
		waitpid(L->copier, NULL, 0);	/* the log is complete once the pipe's last writer is gone */
	L->copier = 0;
	return L->status;
}

static void cleanup(struct lst *L)
{
	if (L->pid > 0) {
		kill(L->pid, SIGKILL);
		reap(L);
	}
	if (L->link > 0)
		close(L->link);
	L->link = -1;
	chmod(L->root, 0700);
	rmdir(L->root);
	unlink(L->log);
}

/* ---- senders ---- */

/* A connection to the listener from 127.0.0.FROM (all loopback: one more source address). */
static int connect_from(int port, int from)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct sockaddr_in src = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000000 | (uint32_t)from) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0 || bind(fd, (struct sockaddr *)&src, sizeof(src)) < 0 ||
	    connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		abort();
	return fd;
}

static int connect_port(int port)
{
	return connect_from(port, 1);
}

/* Everything fd sends until it closes (bounded); the status of its HTTP answer, the body's first line in *body. */
/*
 * One answer from fd: its status, its body's first line in *body, and its
 * head in *head (both malloc'd, when given). It stops at the end of the body
 * its Content-Length announces (the connection may stay open: keep-alive),
 * or at EOF.
 */
static int read_answer_head(int fd, char **body, char **head)
{
	char buf[65536];
	size_t got = 0;
	int status = 0;
	char *sep = NULL;

	for (;;) {
		struct pollfd p = { fd, POLLIN, 0 };
		const char *cl;
		ssize_t r;

		buf[got] = '\0';
		if (!sep && (sep = strstr(buf, "\r\n\r\n")))
			*sep = '\0';	/* the head alone is searched, then put back */
		if (sep && (cl = strcasestr(buf, "\r\nContent-Length:")) &&
		    (size_t)(sep + 4 - buf) + strtoul(cl + 17, NULL, 10) <= got) {
			*sep = '\r';
			break;
		}
		if (sep)
			*sep = '\r';
		if (poll(&p, 1, GUARD_MS) <= 0 || got == sizeof(buf) - 1)
			break;
		r = read(fd, buf + got, sizeof(buf) - 1 - got);
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	buf[got] = '\0';
	sscanf(buf, "HTTP/1.%*d %d", &status);
	sep = strstr(buf, "\r\n\r\n");
	if (head)
		*head = sep ? xasprintf("%.*s", (int)(sep - buf), buf) : xstrdup(buf);
	if (body) {
		*body = xstrdup(sep ? sep + 4 : "");
		(*body)[strcspn(*body, "\n")] = '\0';	/* one line of JSON; its newline would break the TAP line */
	}
	return status;
}

static int read_answer(int fd, char **body)
{
	return read_answer_head(fd, body, NULL);
}

/* Does the peer close fd (EOF or a reset) with nothing more to read? Waits up to GUARD_MS. */
static bool closed_silently(int fd)
{
	struct pollfd p = { fd, POLLIN, 0 };
	char c;

	return poll(&p, 1, GUARD_MS) == 1 && read(fd, &c, 1) <= 0;
}

/* Send raw request bytes on fd and read one answer. */
static int raw_on(int fd, const char *req, char **body)
{
	if (write_all(fd, req, strlen(req)) < 0)
		abort();
	return read_answer(fd, body);
}

/* Send raw request bytes and read the whole answer. */
static int raw(int port, const char *req, char **body)
{
	int fd = connect_port(port), status;

	if (write_all(fd, req, strlen(req)) < 0)
		abort();
	status = read_answer(fd, body);
	close(fd);
	return status;
}

static char *github_sig(const char *body)
{
	unsigned char mac[32];
	size_t n = 0;
	char *hex = xmalloc(7 + 65);

	EVP_Q_mac(NULL, "HMAC", NULL, "SHA256", NULL, SECRET, strlen(SECRET), (const unsigned char *)body, strlen(body),
		  mac, sizeof(mac), &n);
	strcpy(hex, "sha256=");
	for (size_t i = 0; i < n; i++)
		sprintf(hex + 7 + 2 * i, "%02x", mac[i]);
	return hex;
}

static char *github_request(const char *id, const char *body, bool good_sig)
{
	_cleanup_free_ char *sig = github_sig(body);

	if (!good_sig)
		sig[10] = sig[10] == '0' ? '1' : '0';
	return xasprintf("POST /hooks/gh HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
			 "X-GitHub-Event: push\r\nX-GitHub-Delivery: %s\r\nX-Hub-Signature-256: %s\r\n"
			 "Content-Length: %zu\r\n\r\n%s", id, sig, strlen(body), body);
}

/* Is the next delivery on the link the one with id? Then answer it with status and body. */
static bool next_delivery_is(struct lst *L, const char *id, int status, const char *answer_body,
			     struct hook_delivery *out)
{
	json_t *msg = recv_msg(L->link);
	struct hook_delivery d = { 0 };
	struct hook_answer a = { .status = status, .body = (char *)answer_body, .content_type = (char *)"application/json" };
	bool match;

	if (!msg || strcmp(hook_msg_type(msg), "delivery") != 0) {
		json_decref(msg);
		return false;
	}
	json_decref(msg);
	d = last_delivery;	/* ours now */
	last_delivery = (struct hook_delivery){ 0 };
	match = strcmp(d.delivery_id, id) == 0;
	a.seq = d.seq;
	if (status && !send_answer(L->link, &a))
		match = false;
	if (out)
		*out = d;
	else
		hook_delivery_clear(&d);
	return match;
}

/* /proc/PID/status line key's value, e.g. "Uid". */
static char *proc_status(pid_t pid, const char *key)
{
	char path[64], line[512];
	FILE *f;
	char *out = NULL;

	snprintf(path, sizeof(path), "/proc/%ld/status", (long)pid);
	if (!(f = fopen(path, "r")))
		return NULL;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, key, strlen(key)) == 0 && line[strlen(key)] == ':') {
			char *v = line + strlen(key) + 1;

			v += strspn(v, " \t");
			v[strcspn(v, "\n")] = '\0';
			out = xstrdup(v);
			break;
		}
	fclose(f);
	return out;
}

static void test_privileges(const struct lst *L)
{
	struct passwd *pw = getpwnam(USER);
	char want[128], path[64], link[256];
	_cleanup_free_ char *uid = proc_status(L->pid, "Uid"), *gid = proc_status(L->pid, "Gid");
	_cleanup_free_ char *groups = proc_status(L->pid, "Groups"), *eff = proc_status(L->pid, "CapEff");
	_cleanup_free_ char *prm = proc_status(L->pid, "CapPrm"), *bnd = proc_status(L->pid, "CapBnd");
	_cleanup_free_ char *inh = proc_status(L->pid, "CapInh"), *amb = proc_status(L->pid, "CapAmb");
	_cleanup_free_ char *nnp = proc_status(L->pid, "NoNewPrivs");
	ssize_t n;

	snprintf(want, sizeof(want), "%u\t%u\t%u\t%u", pw->pw_uid, pw->pw_uid, pw->pw_uid, pw->pw_uid);
	is_str(uid, want, "privsep: real, effective, saved and fs uid are %s's", USER);
	snprintf(want, sizeof(want), "%u\t%u\t%u\t%u", pw->pw_gid, pw->pw_gid, pw->pw_gid, pw->pw_gid);
	is_str(gid, want, "privsep: every gid is %s's group", USER);
	is_str(groups, "", "privsep: no supplementary groups");
	is_str(eff, "0000000000000000", "privsep: CapEff is empty");
	is_str(prm, "0000000000000000", "privsep: CapPrm is empty");
	is_str(inh, "0000000000000000", "privsep: CapInh is empty");
	is_str(amb, "0000000000000000", "privsep: CapAmb is empty");
	is_str(bnd, "0000000000000000", "privsep: CapBnd is empty");
	is_str(nnp, "1", "privsep: NoNewPrivs is set");
	snprintf(path, sizeof(path), "/proc/%ld/root", (long)L->pid);
	n = readlink(path, link, sizeof(link) - 1);
	link[n > 0 ? n : 0] = '\0';
	is_str(link, L->root, "privsep: its root is the empty directory");
	snprintf(path, sizeof(path), "/proc/%ld/limits", (long)L->pid);
	{
		FILE *f = fopen(path, "r");
		char line[256];
		bool core = false, nproc = false, fsize = false;

		while (f && fgets(line, sizeof(line), f)) {
			core |= strncmp(line, "Max core file size", 18) == 0 && strstr(line, " 0 ") != NULL;
			nproc |= strncmp(line, "Max processes", 13) == 0 && strstr(line, " 0 ") != NULL;
			fsize |= strncmp(line, "Max file size", 13) == 0 && strstr(line, " 0 ") != NULL;
		}
		if (f)
			fclose(f);
		ok(core && nproc && fsize, "privsep: no core dumps, no new processes, no file writes (rlimits)");
	}
}

static void test_refusals(const struct lst *L)
{
	_cleanup_free_ char *body = NULL;
	char big[6000];
	int s;

	s = raw(L->port, "GET /hooks/gh HTTP/1.1\r\nHost: x\r\n\r\n", &body);
	is_int(s, 405, "GET is answered 405");
	ok(strstr(body, "\"code\":\"method_not_allowed\"") != NULL, "...with the JSON error shape: %s", body);
	free(body);
	s = raw(L->port, "POST /hooks/nope HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", &body);
	is_int(s, 404, "an unknown route is answered 404");
	free(body);
	s = raw(L->port, "POST /v1/status HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", &body);
	is_int(s, 404, "a path outside /hooks/ is answered 404");
	free(body);
	/*
	 * 413 from Content-Length alone: the body is never sent, so it cannot
	 * have been read. evhttp answers it itself (its own page, not our JSON),
	 * from the cap the request line's route set.
	 */
	s = raw(L->port, "POST /hooks/gh HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n", &body);
	is_int(s, 413, "a Content-Length over the route's cap is answered 413 before the body");
	free(body);
	s = raw(L->port, "POST /hooks/nope HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n", &body);
	is_int(s, 413, "...and one to an unknown route over the small cap such a line gets");
	free(body);
	s = raw(L->port, "POST /hooks/gh HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}", &body);
	is_int(s, 400, "a duplicate Content-Length is answered 400");
	free(body);
	s = raw(L->port, "POST /hooks/gh HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}x", &body);
	is_int(s, 400, "conflicting Content-Lengths are answered 400");
	free(body);
	s = raw(L->port, "POST /hooks/gh HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n"
			 "2\r\n{}\r\n0\r\n\r\n", &body);
	is_int(s, 400, "Transfer-Encoding with Content-Length is answered 400");
	free(body);
	s = raw(L->port, "POST /hooks/gh HTTP/1.1\r\nHost: x\r\nContent-Length: +2\r\n\r\n{}", &body);
	is_int(s, 400, "a signed Content-Length is answered 400");
	free(body);
	s = raw(L->port, "POST /hooks/gh HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", &body);
	is_int(s, 400, "a Transfer-Encoding other than chunked is answered 400");
	ok(strstr(body, "\"code\":\"bad_request\"") != NULL, "...in the JSON error shape: %s", body);
	free(body);
	/* evhttp joins a folded line to the header before it (obs-fold, as RFC 7230 lets a server do). */
	s = raw(L->port, "POST /hooks/gh HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n 5\r\n\r\n{}", &body);
	is_int(s, 400, "a Content-Length folded onto two lines is answered 400");
	free(body);
	s = raw(L->port, "POST /hooks/gh HTTP/1.1\r\nHost: x\r\n Folded: y\r\nContent-Length: 2\r\n\r\n{}", &body);
	is_int(s, 401, "a folded header line is joined to the one before, and the request goes on to its check (401)");
	free(body);
	{
		char *req = xstrdup("POST /hooks/gh HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n");

		for (int i = 0; i < 128; i++) {
			char *more = xasprintf("%sA: b\r\n", req);

			free(req);
			req = more;
		}
		body = xasprintf("%s\r\n{}", req);
		free(req);
		req = body;
		s = raw(L->port, req, &body);
		free(req);
		is_int(s, 413, "more than 128 header lines are answered 413");
		ok(strstr(body, "\"code\":\"headers_too_large\"") != NULL, "...code headers_too_large: %s", body);
		free(body);
	}
	memset(big, 'a', sizeof(big));
	memcpy(big, "POST /hooks/gh HTTP/1.1\r\nX-Big: ", 32);
	big[sizeof(big) - 1] = '\0';
	s = raw(L->port, big, &body);
	/* evhttp answers it itself, 400 (its own page), as it does any head it will not parse. */
	is_int(s, 400, "a head over hooks_header_max_bytes is answered 400");
	free(body);
	{
		_cleanup_free_ char *req = github_request("bad-1", "{\"zen\":\"bad\"}", false);

		s = raw(L->port, req, &body);
		is_int(s, 401, "a bad signature is answered 401");
		free(body);
		body = NULL;
	}
	s = raw(L->port, "POST /hooks/gh HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", &body);
	is_int(s, 401, "no signature is answered 401");
	free(body);
	body = NULL;
}

/* A verified GitHub delivery through curl: the delivery as fleetd gets it, and fleetd's answer as curl gets it. */
static void test_github_curl(struct lst *L)
{
	const char *payload = "{\"ref\":\"refs/heads/main\",\"zen\":\"Keep it logically awesome.\"}";
	_cleanup_free_ char *sig = github_sig(payload);
	char out_path[] = "/tmp/test-hooksd-curl.XXXXXX", url[128], got[512] = "";
	const char *answer = "{\"status\":\"accepted\",\"delivery\":7,\"runs\":1}";
	struct hook_delivery d = { 0 };
	int out_fd = mkstemp(out_path), st = 0;
	pid_t curl;
	FILE *f;

	snprintf(url, sizeof(url), "http://127.0.0.1:%d/hooks/gh?from=test", L->port);
	curl = fork();
	if (curl == 0) {
		_cleanup_free_ char *sig_h = xasprintf("X-Hub-Signature-256: %s", sig);

		dup2(out_fd, 1);
		execlp("curl", "curl", "-sS", "--max-time", "120", "-w", "\n%{http_code}", "-H",
		       "Content-Type: application/json", "-H", "X-GitHub-Event: push", "-H",
		       "X-GitHub-Delivery: 72d3162e-cc78-11e3-81ab-4c9367dc0958", "-H", sig_h, "-H",
		       "Authorization: Bearer should-not-pass", "-H", "Cookie: session=should-not-pass", "-H",
		       "X-Custom: passed on", "--data-binary", payload, url, (char *)NULL);
		_exit(127);
	}
	ok(next_delivery_is(L, "72d3162e-cc78-11e3-81ab-4c9367dc0958", 202, answer, &d),
	   "a verified GitHub delivery reaches fleetd as a delivery with its id");
	is_str(d.route, "gh", "...its route");
	is_str(d.event_type, "push", "...its event type");
	ok(d.body_len == strlen(payload) && memcmp(d.body, payload, d.body_len) == 0, "...its body, byte for byte");
	ok(!d.no_run && d.received_at > 1700000000, "...queues runs, and has its time of arrival");
	is_str(header_of(&d, "X-Custom"), "passed on", "...headers are passed on");
	is_str(header_of(&d, "X-GitHub-Event"), "push", "...the sender's own too");
	ok(!header_of(&d, "Authorization") && !header_of(&d, "Cookie"),
	   "...but never Authorization or Cookie");
	hook_delivery_clear(&d);
	waitpid(curl, &st, 0);
	ok(WIFEXITED(st) && WEXITSTATUS(st) == 0, "curl succeeded");
	f = fdopen(out_fd, "r");
	rewind(f);
	(void)!fread(got, 1, sizeof(got) - 1, f);
	fclose(f);
	unlink(out_path);
	{
		_cleanup_free_ char *want = xasprintf("%s\n202", answer);

		is_str(got, want, "curl gets exactly fleetd's answer: its status and body");
	}
}

/* DataDog with header auth: the secret header is never passed on. */
static void test_datadog_header(struct lst *L)
{
	const char *payload = "{\"id\":\"dd-alert-1\",\"title\":\"cpu\"}";
	_cleanup_free_ char *req = xasprintf("POST /hooks/dd HTTP/1.1\r\nHost: x\r\nX-DD-Secret: %s\r\nX-Other: 1\r\n"
					     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
					     DD_SECRET, strlen(payload), payload);
	_cleanup_free_ char *body = NULL;
	struct hook_delivery d = { 0 };
	int fd = connect_port(L->port);

	if (write_all(fd, req, strlen(req)) < 0)
		abort();
	ok(next_delivery_is(L, "dd-alert-1", 200, "{\"status\":\"duplicate\"}", &d), "a DataDog delivery arrives");
	ok(header_of(&d, "X-Other") && !header_of(&d, "X-DD-Secret"),
	   "...without its secret header");
	hook_delivery_clear(&d);
	is_int(read_answer(fd, &body), 200, "...and its sender gets fleetd's 200");
	is_str(body, "{\"status\":\"duplicate\"}", "...with fleetd's body");
	close(fd);
}

/* A GitHub delivery in chunks, and one announced with Expect: 100-continue; then chunks over the cap. */
static void test_chunked_and_continue(struct lst *L)
{
	const char *payload = "{\"ref\":\"refs/heads/chunked\"}";
	_cleanup_free_ char *sig = github_sig(payload);
	_cleanup_free_ char *head = xasprintf("POST /hooks/gh HTTP/1.1\r\nHost: x\r\nX-GitHub-Event: push\r\n"
					      "X-GitHub-Delivery: chunked-1\r\nX-Hub-Signature-256: %s\r\n"
					      "Transfer-Encoding: chunked\r\n\r\n", sig);
	_cleanup_free_ char *chunks = xasprintf("5\r\n%.5s\r\n%zx\r\n%s\r\n0\r\n\r\n", payload, strlen(payload) - 5,
						payload + 5);
	_cleanup_free_ char *body = NULL;
	struct hook_delivery d = { 0 };
	char cont[64] = "";
	int fd = connect_port(L->port);

	if (write_all(fd, head, strlen(head)) < 0 || write_all(fd, chunks, strlen(chunks)) < 0)
		abort();
	ok(next_delivery_is(L, "chunked-1", 202, "{}", &d), "a chunked delivery arrives");
	ok(d.body_len == strlen(payload) && memcmp(d.body, payload, d.body_len) == 0, "...its body joined from the chunks");
	hook_delivery_clear(&d);
	is_int(read_answer(fd, &body), 202, "...and is answered 202");
	close(fd);

	free(head);
	head = xasprintf("POST /hooks/gh HTTP/1.1\r\nHost: x\r\nX-GitHub-Event: push\r\nX-GitHub-Delivery: continue-1\r\n"
			 "X-Hub-Signature-256: %s\r\nExpect: 100-continue\r\nContent-Length: %zu\r\n\r\n",
			 sig, strlen(payload));
	fd = connect_port(L->port);
	if (write_all(fd, head, strlen(head)) < 0)
		abort();
	{
		struct pollfd p = { fd, POLLIN, 0 };
		ssize_t n = poll(&p, 1, GUARD_MS) == 1 ? read(fd, cont, sizeof(cont) - 1) : -1;

		cont[n > 0 ? n : 0] = '\0';
	}
	ok(strncmp(cont, "HTTP/1.1 100 Continue", 21) == 0, "Expect: 100-continue within the cap is told to continue");
	if (write_all(fd, payload, strlen(payload)) < 0)
		abort();
	ok(next_delivery_is(L, "continue-1", 202, "{}", NULL), "...and its delivery arrives");
	free(body);
	is_int(read_answer(fd, &body), 202, "...and is answered 202");
	close(fd);

	/* Chunks past the route's 4096 bytes: evhttp stops at the cap the request line set (and answers 413 itself). */
	fd = connect_port(L->port);
	free(head);
	head = xasprintf("POST /hooks/gh HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n", 5000);
	if (write_all(fd, head, strlen(head)) < 0)
		abort();
	{
		char filler[5000];

		memset(filler, 'x', sizeof(filler));
		(void)write_all(fd, filler, sizeof(filler));	/* the listener may close before all of it is sent */
	}
	free(body);
	is_int(read_answer(fd, &body), 413, "chunks past the route's cap are answered 413");
	close(fd);

	/*
	 * A chunk-size line that never ends: evhttp caps the body, not its
	 * framing, and would buffer it until the deadline (408); the listener
	 * stops it at the head, twice the route's cap and 64 KiB.
	 */
	fd = connect_port(L->port);
	free(head);
	head = xasprintf("POST /hooks/gh HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
	if (write_all(fd, head, strlen(head)) < 0)
		abort();
	{
		static char digits[100000];

		memset(digits, '1', sizeof(digits));
		(void)write_all(fd, digits, sizeof(digits));	/* the listener may close before all of it is sent */
	}
	free(body);
	is_int(read_answer(fd, &body), 413, "a chunk-size line longer than the route's framing allows is answered 413");
	ok(strstr(body, "\"code\":\"too_large\"") != NULL, "...code too_large: %s", body);
	close(fd);
}

/* A body over the small cap of a connection whose route is not yet known, within its route's: the request line raised it. */
static void test_route_cap(struct lst *L)
{
	char payload[3001];
	_cleanup_free_ char *req = NULL, *body = NULL;
	int fd = connect_port(L->port);

	memset(payload, 'x', sizeof(payload) - 1);
	memcpy(payload, "{\"pad\":\"", 8);
	strcpy(payload + sizeof(payload) - 3, "\"}");
	req = github_request("large-1", payload, true);
	if (write_all(fd, req, strlen(req)) < 0)
		abort();
	ok(next_delivery_is(L, "large-1", 202, "{}", NULL), "a 3000-byte delivery to a route that takes 4096 arrives");
	is_int(read_answer(fd, &body), 202, "...and is answered 202");
	close(fd);
}

/* The counters reach fleetd: wait for stats that match (sent every second while they change). */
static void test_stats(struct lst *L, const struct hook_stats *want)
{
	struct hook_stats got = { 0 };
	json_t *msg;
	const char *why;
	bool match = false;

	while (!match && (msg = recv_any(L->link))) {
		if (strcmp(hook_msg_type(msg), "stats") == 0 && hook_msg_stats_parse(msg, &got, &why) == 0)
			match = memcmp(&got, want, sizeof(got)) == 0;
		json_decref(msg);
	}
	ok(match, "stats reach fleetd: accepted %lld, refused 400:%lld 401:%lld 404:%lld 405:%lld 413:%lld other:%lld, "
	   "github signature failures %lld", (long long)got.accepted, (long long)got.refused[0],
	   (long long)got.refused[1], (long long)got.refused[2], (long long)got.refused[3], (long long)got.refused[4],
	   (long long)got.refused[5], (long long)got.sig_failed[HOOK_GITHUB]);
}

/* hooks_max_per_source: one more connection from the address is refused at accept, before it sends. */
static void test_per_source(struct lst *L)
{
	int held[3], extra, s = 0;
	_cleanup_free_ char *body = NULL;

	for (int i = 0; i < 3; i++)
		held[i] = connect_port(L->port);
	extra = connect_port(L->port);
	s = read_answer(extra, &body);
	is_int(s, 503, "a 4th connection from one address (hooks_max_per_source 3) is refused 503");
	ok(strstr(body, "hooks_max_per_source") != NULL, "...saying why: %s", body);
	close(extra);
	for (int i = 0; i < 3; i++)
		close(held[i]);
	/* Once the listener has seen those close, the address may connect again (polled: no timing asserted). */
	for (int tries = 0; tries < 600; tries++) {
		free(body);
		body = NULL;
		s = raw(L->port, "GET /hooks/gh HTTP/1.1\r\nHost: x\r\n\r\n", &body);
		if (s != 503)
			break;
		usleep(100 * 1000);
	}
	is_int(s, 405, "after they close, the address is served again");
}

/* hooks_request_timeout from accept: a client that never finishes its head gets 408 and is closed. */
static void test_slowloris(struct lst *L)
{
	int fd = connect_port(L->port);
	_cleanup_free_ char *body = NULL;

	const char *slow_head = "POST /hooks/gh HTTP/1.1\r\nHost: x\r\nX-Slow: ";
	const char *slow_body = "POST /hooks/gh HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"partial\":";

	if (write_all(fd, slow_head, strlen(slow_head)) < 0)
		abort();
	is_int(read_answer(fd, &body), 408, "a request not complete by the deadline is answered 408 and closed");
	close(fd);
	free(body);	/* read_answer allocates it anew */
	body = NULL;
	fd = connect_port(L->port);
	if (write_all(fd, slow_body, strlen(slow_body)) < 0)
		abort();
	is_int(read_answer(fd, &body), 408, "...and so is one whose body stalls");
	close(fd);
}

/* Until the listener serves route name (405 to a GET): new routes are in force, and closed connections forgotten. */
static bool wait_route(struct lst *L, const char *name)
{
	_cleanup_free_ char *req = xasprintf("GET /hooks/%s HTTP/1.1\r\nHost: x\r\n\r\n", name);

	for (int tries = 0; tries < 600; tries++) {
		if (raw(L->port, req, NULL) == 405)
			return true;
		usleep(100 * 1000);
	}
	return false;
}

/* hooks_max_connections over all addresses; hooks_max_per_source counted per address. */
static void test_total_cap(struct lst *L)
{
	_cleanup_free_ char *body = NULL;
	int held[3], extra;

	ok(send_msg(L->link, routes_msg(2, 3, 3, "cap-total")) && wait_route(L, "cap-total"),
	   "a new route table with hooks_max_connections 2 is in force");
	held[0] = connect_from(L->port, 1);
	held[1] = connect_from(L->port, 1);
	extra = connect_from(L->port, 2);
	is_int(read_answer(extra, &body), 503, "a 3rd connection, from another address, is refused 503");
	ok(strstr(body, "hooks_max_connections") != NULL, "...saying why: %s", body);
	close(extra);
	close(held[0]);
	close(held[1]);

	ok(send_msg(L->link, routes_msg(32, 1, 3, "cap-source")) && wait_route(L, "cap-source"),
	   "a new route table with hooks_max_per_source 1 is in force");
	held[0] = connect_from(L->port, 1);
	held[1] = connect_from(L->port, 2);
	held[2] = connect_from(L->port, 1);
	free(body);
	is_int(read_answer(held[2], &body), 503, "a 2nd connection from 127.0.0.1 is refused");
	if (write_all(held[1], "GET /hooks/gh HTTP/1.1\r\nHost: x\r\n\r\n", 35) < 0)
		abort();
	free(body);
	is_int(read_answer(held[1], &body), 405, "...while one from 127.0.0.2 beside it is served");
	for (int i = 0; i < 3; i++)
		close(held[i]);
	ok(send_msg(L->link, routes_msg(32, 3, 3, "cap-done")) && wait_route(L, "cap-done"), "the limits restored");
}

/*
 * Keep-alive: several deliveries on one connection, each answered with
 * fleetd's answer and the connection left open; a refusal closes it, and
 * a request pipelined after a refused one is never served; the deadline
 * restarts for the second request (a slowloris there gets 408); an idle
 * connection is closed; HTTP/1.0 keeps it only when asked.
 */
static void test_keepalive(struct lst *L)
{
	_cleanup_free_ char *r1 = github_request("ka-1", "{\"n\":1}", true), *r2 = github_request("ka-2", "{\"n\":2}", true);
	_cleanup_free_ char *r3 = github_request("ka-3", "{\"n\":3}", true);
	_cleanup_free_ char *bad = github_request("ka-bad", "{\"n\":4}", false);
	_cleanup_free_ char *after_bad = github_request("ka-after-bad", "{\"n\":5}", true);
	_cleanup_free_ char *r6 = github_request("ka-6", "{\"n\":6}", true), *r7 = github_request("ka-7", "{\"n\":7}", true);
	char *body = NULL, *head = NULL;
	int fd = connect_port(L->port);

	/* Two deliveries, one after the other, then a third pipelined with them: all on one connection. */
	if (write_all(fd, r1, strlen(r1)) < 0)
		abort();
	ok(next_delivery_is(L, "ka-1", 202, "{\"n\":1}", NULL), "keep-alive: the first delivery arrives");
	is_int(read_answer_head(fd, &body, &head), 202, "...is answered 202");
	ok(!strcasestr(head, "Connection: close"), "...without Connection: close");
	free(body);
	free(head);
	if (write_all(fd, r2, strlen(r2)) < 0)
		abort();
	ok(next_delivery_is(L, "ka-2", 202, "{\"n\":2}", NULL), "a second delivery on the same connection arrives");
	is_int(read_answer(fd, &body), 202, "...and is answered 202 on it");
	is_str(body, "{\"n\":2}", "...with its own answer");
	free(body);
	{
		_cleanup_free_ char *two = xasprintf("%s%s", r1, r3);	/* a redelivery of ka-1, then ka-3, in one write */

		if (write_all(fd, two, strlen(two)) < 0)
			abort();
	}
	ok(next_delivery_is(L, "ka-1", 200, "{\"dup\":1}", NULL) && next_delivery_is(L, "ka-3", 202, "{\"n\":3}", NULL),
	   "two pipelined deliveries arrive, in order");
	is_int(read_answer(fd, &body), 200, "...the first answered");
	free(body);
	is_int(read_answer(fd, &body), 202, "...then the second");
	is_str(body, "{\"n\":3}", "...each with its own answer");
	free(body);

	/* A refused request after good ones: 401 with Connection: close, and what was pipelined after it is not served. */
	{
		_cleanup_free_ char *two = xasprintf("%s%s", bad, after_bad);

		if (write_all(fd, two, strlen(two)) < 0)
			abort();
	}
	is_int(read_answer_head(fd, &body, &head), 401, "keep-alive: a bad signature on a kept connection is refused 401");
	ok(strcasestr(head, "Connection: close") != NULL, "...with Connection: close");
	ok(closed_silently(fd), "...and the connection is closed: the request pipelined after it gets no answer");
	free(body);
	free(head);
	close(fd);
	/* The next delivery on the link must be ka-6 (sent below), not ka-after-bad. */
	fd = connect_port(L->port);
	if (write_all(fd, r6, strlen(r6)) < 0)
		abort();
	ok(next_delivery_is(L, "ka-6", 202, "{}", NULL), "...never reached fleetd (the next delivery up is a later one)");
	is_int(read_answer(fd, &body), 202, "a new connection is served");
	free(body);

	/* Slowloris on the kept connection's second request: the deadline restarted, and still covers it (408). */
	if (write_all(fd, "POST /hooks/gh HTTP/1.1\r\nHost: x\r\nX-Slow: ", 43) < 0)
		abort();
	is_int(read_answer_head(fd, &body, &head), 408, "keep-alive: a second request not complete by its deadline: 408");
	ok(strcasestr(head, "Connection: close") != NULL, "...with Connection: close");
	free(body);
	free(head);
	close(fd);

	/* A kept connection with no next request is closed after hooks_request_timeout, without an answer. */
	fd = connect_port(L->port);
	if (write_all(fd, r7, strlen(r7)) < 0)
		abort();
	ok(next_delivery_is(L, "ka-7", 202, "{}", NULL), "keep-alive: a delivery arrives");
	is_int(read_answer(fd, &body), 202, "...is answered");
	free(body);
	ok(closed_silently(fd), "...and the idle connection is closed later, with no answer");
	close(fd);

	/* HTTP/1.0: closed after the answer unless the client asks to keep it. */
	{
		_cleanup_free_ char *v10 = github_request("ka-10", "{\"n\":10}", true);
		_cleanup_free_ char *v10ka = github_request("ka-11", "{\"n\":11}", true);
		_cleanup_free_ char *kept = NULL;

		memcpy(strstr(v10, "HTTP/1.1"), "HTTP/1.0", 8);
		memcpy(strstr(v10ka, "HTTP/1.1"), "HTTP/1.0", 8);
		kept = xasprintf("%.*sConnection: keep-alive\r\n%s", (int)(strstr(v10ka, "\r\n") + 2 - v10ka), v10ka,
				 strstr(v10ka, "\r\n") + 2);
		fd = connect_port(L->port);
		if (write_all(fd, v10, strlen(v10)) < 0)
			abort();
		ok(next_delivery_is(L, "ka-10", 202, "{}", NULL), "HTTP/1.0: a delivery arrives");
		is_int(read_answer(fd, &body), 202, "...is answered");
		ok(closed_silently(fd), "...and, without Connection: keep-alive, the connection is closed");
		free(body);
		close(fd);
		fd = connect_port(L->port);
		if (write_all(fd, kept, strlen(kept)) < 0)
			abort();
		ok(next_delivery_is(L, "ka-11", 202, "{}", NULL), "HTTP/1.0 with keep-alive: a delivery arrives");
		is_int(read_answer(fd, &body), 202, "...is answered");
		free(body);
		is_int(raw_on(fd, "GET /hooks/gh HTTP/1.0\r\n\r\n", &body), 405, "...and the connection serves another request");
		free(body);
		close(fd);
	}
}

/* At hooks_max_connections, an idle kept-alive connection is closed to admit a new one (it is not refused). */
static void test_keepalive_cap(struct lst *L)
{
	_cleanup_free_ char *r = github_request("kc-1", "{\"n\":1}", true);
	char *body = NULL;
	int idle, busy, fresh;

	ok(send_msg(L->link, routes_msg(2, 3, 3, "cap-idle")) && wait_route(L, "cap-idle"),
	   "a new route table with hooks_max_connections 2 is in force");
	idle = connect_from(L->port, 1);
	if (write_all(idle, r, strlen(r)) < 0)
		abort();
	ok(next_delivery_is(L, "kc-1", 202, "{}", NULL), "a delivery arrives");
	is_int(read_answer(idle, &body), 202, "...is answered, and its connection kept, idle");
	free(body);
	busy = connect_from(L->port, 1);
	if (write_all(busy, "POST /hooks/gh HTTP/1.1\r\nHost: x\r\n", 34) < 0)	/* a request under way */
		abort();
	fresh = connect_from(L->port, 2);
	if (write_all(fresh, "GET /hooks/gh HTTP/1.1\r\nHost: x\r\n\r\n", 35) < 0)
		abort();
	is_int(read_answer(fresh, &body), 405, "a 3rd connection at the cap of 2 is served, not refused 503");
	free(body);
	ok(closed_silently(idle), "...the idle one was closed to make room");
	close(idle);
	close(busy);
	close(fresh);
	ok(send_msg(L->link, routes_msg(32, 3, 3, "cap-idle-done")) && wait_route(L, "cap-idle-done"), "the limits restored");
}

/*
 * Senders that went away while their deliveries wait for fleetd do not
 * hold their address's share: a new connection from it is served, not
 * refused 503 (as wrk reconnecting at hooks_max_per_source was).
 */
static void test_gone_uncounted(struct lst *L)
{
	_cleanup_free_ char *r1 = github_request("gone-1", "{\"n\":1}", true);
	_cleanup_free_ char *r2 = github_request("gone-2", "{\"n\":2}", true);
	struct hook_delivery d1 = { 0 }, d2 = { 0 };
	struct hook_answer a = { .status = 202, .body = "{}", .content_type = "application/json" };
	char *body = NULL;
	int c1, c2, c3;

	ok(send_msg(L->link, routes_msg(32, 2, 3, "cap-gone")) && wait_route(L, "cap-gone"),
	   "a new route table with hooks_max_per_source 2 is in force");
	c1 = connect_from(L->port, 1);
	c2 = connect_from(L->port, 1);
	if (write_all(c1, r1, strlen(r1)) < 0 || write_all(c2, r2, strlen(r2)) < 0)
		abort();
	ok(next_delivery_is(L, "gone-1", 0, NULL, &d1) && next_delivery_is(L, "gone-2", 0, NULL, &d2),
	   "two deliveries from one address wait for fleetd, unanswered");
	close(c1);
	close(c2);
	c3 = connect_from(L->port, 1);
	is_int(raw_on(c3, "GET /hooks/gh HTTP/1.1\r\nHost: x\r\n\r\n", &body), 405,
	       "their senders closed: a new connection from the address is served, not refused 503");
	free(body);
	close(c3);
	a.seq = d1.seq;
	ok(send_answer(L->link, &a), "the first answer goes down (to a sender that has gone)");
	a.seq = d2.seq;
	ok(send_answer(L->link, &a), "...and the second");
	hook_delivery_clear(&d1);
	hook_delivery_clear(&d2);
	ok(send_msg(L->link, routes_msg(32, 3, 3, "cap-gone-done")) && wait_route(L, "cap-gone-done"),
	   "the limits restored, the listener serving");
}

/* fleetd's end closes while a delivery waits: its sender gets 503, and the listener exits. */
static void test_link_down(struct lst *L)
{
	_cleanup_free_ char *req = github_request("pending-1", "{\"n\":1}", true);
	_cleanup_free_ char *body = NULL;
	int fd = connect_port(L->port);

	if (write_all(fd, req, strlen(req)) < 0)
		abort();
	ok(next_delivery_is(L, "pending-1", 0, NULL, NULL), "a delivery is pending, unanswered");
	close(L->link);
	L->link = -1;
	is_int(read_answer(fd, &body), 503, "when the link goes down, the pending delivery is answered 503");
	ok(strstr(body, "\"code\":\"unavailable\"") != NULL, "...code unavailable: %s", body);
	close(fd);
	is_int(reap(L), 0, "...and the listener exits (0: fleetd closed the link)");
}

/* SIGTERM (fleetd stopping it): it exits 0. */
static void test_sigterm(void)
{
	struct lst L;

	ok(start(&L, USER, false) && send_msg(L.link, routes_msg(32, 3, 3, NULL)), "another listener starts");
	kill(L.pid, SIGTERM);
	is_int(reap(&L), 0, "...and exits 0 on SIGTERM");
	cleanup(&L);
}

static void test_start_failures(void)
{
	struct lst L;
	char line[512] = "";
	FILE *f;

	ok(!start(&L, USER, true), "a root directory that is not empty: no hello");
	is_int(reap(&L), 1, "...the listener exits 1");
	f = fopen(L.log, "r");
	while (f && fgets(line, sizeof(line), f) && !strstr(line, "not empty"))
		;
	if (f)
		fclose(f);
	line[strcspn(line, "\n")] = '\0';
	ok(strstr(line, "is not empty") != NULL, "...saying why on stderr: %s", line);
	cleanup(&L);
	ok(!start(&L, "no-such-user-hooksd", false), "a user that does not exist: no hello");
	is_int(reap(&L), 1, "...the listener exits 1");
	cleanup(&L);
}

int main(void)
{
	struct lst L;

	if (geteuid() != 0) {
		printf("1..0 # SKIP fleet-hooksd must start as root to drop its privileges\n");
		return 0;
	}
	signal(SIGPIPE, SIG_IGN);
	setvbuf(stdout, NULL, _IOLBF, 0);
	test_start_failures();
	test_sigterm();
	if (!start(&L, USER, false)) {
		ok(0, "the listener starts and says hello");
		show_log(&L);
		cleanup(&L);
		return tap_done();
	}
	ok(1, "the listener starts, drops its privileges and says hello with its pid");
	test_privileges(&L);
	{
		/* Sent before the routes: not even accepted until they come (a connection set up then would get 503). */
		int early = connect_port(L.port);
		_cleanup_free_ char *body = NULL;

		if (write_all(early, "GET /hooks/gh HTTP/1.1\r\nHost: x\r\n\r\n", 35) < 0)
			abort();
		ok(send_msg(L.link, routes_msg(32, 3, 3, NULL)), "routes sent");
		is_int(read_answer(early, &body), 405, "a request sent before the first routes is served once they came");
		close(early);
	}
	test_refusals(&L);
	test_github_curl(&L);
	test_datadog_header(&L);
	test_chunked_and_continue(&L);
	test_route_cap(&L);
	{
		/* evhttp's own answers (400, 413) counted too: it answered 2 of the 7 400s and 3 of the 5 413s. */
		/* The three 401s were to route gh: github signatures that did not verify. */
		struct hook_stats want = { .accepted = 5, .refused = { 7, 3, 2, 2, 5, 0 }, .sig_failed = { [HOOK_GITHUB] = 3 } };

		test_stats(&L, &want);
	}
	test_per_source(&L);
	test_slowloris(&L);
	test_total_cap(&L);
	test_keepalive(&L);
	test_keepalive_cap(&L);
	test_gone_uncounted(&L);
	test_link_down(&L);
	if (tap_failed)
		show_log(&L);
	cleanup(&L);
	return tap_done();
}
