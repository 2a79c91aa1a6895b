/*
 * exec-api-bench: issue #16's user-agent exec start latency without a
 * client program's start in the path, as a trigger or an API caller sees
 * it (tests/bench/user-bench.sh, row "user agent: exec start latency, API
 * call"). One process, one libcurl easy handle reused for every call:
 *
 *   api   t0 = CLOCK_REALTIME just before POST /v1/agents/AGENT/exec of
 *         `date +%s%N` on fleetd's socket; t1 = the number date printed
 *         (decoded from the exec stream's first stdout line)
 *   base  t0 just before posix_spawnp of the same `date +%s%N` with its
 *         stdout on a pipe; t1 = the number it printed
 *
 * interleaved, SAMPLES of each after one warm-up of each, each sample
 * after a quiet GAP_MS: what one sample left running (fleetd makes the
 * agent's next spare once a command ends, user/spare.c) is not timed in
 * the next one, fleet's or the baseline's. libcurl keeps
 * the connection when the server lets it; fleetd keeps HTTP/1.1
 * connections alive (api/server.c), so the calls share one connection
 * (before keep-alive each call connected anew): "connections" in the
 * output says how many connects the calls took (CURLINFO_NUM_CONNECTS).
 *
 * Prints the medians and p95 of both and a ratio line for
 * tests/bench/quick.sh: ratio|ROW|FLEET|BASELINE|RATIO|TARGET.
 * Usage: exec-api-bench SOCKET AGENT SAMPLES
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define BODY_MAX (64 * 1024)
/* Quiet time before each sample: longer than fleetd's spare setup after a command (a few ms). */
#define GAP_MS 50

static void gap(void)
{
	struct timespec ts = { 0, GAP_MS * 1000000L };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

struct body {
	char buf[BODY_MAX];
	size_t len;
	int overflow;
};

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static size_t on_data(char *p, size_t size, size_t n, void *ud)
{
	struct body *b = ud;
	size_t len = size * n;

	if (b->len + len >= sizeof(b->buf)) {
		b->overflow = 1;
		return 0;	/* aborts the transfer: this bench's replies are small */
	}
	memcpy(b->buf + b->len, p, len);
	b->len += len;
	b->buf[b->len] = '\0';
	return len;
}

static int b64_value(char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+')
		return 62;
	if (c == '/')
		return 63;
	return -1;
}

/* Decode base64 text up to the closing quote into out (NUL-terminated); its length or -1. */
static int b64_decode(const char *in, char *out, size_t cap)
{
	unsigned acc = 0;
	int bits = 0;
	size_t n = 0;

	for (; *in && *in != '"'; in++) {
		int v;

		if (*in == '=')
			continue;
		if ((v = b64_value(*in)) < 0 || n + 1 >= cap)
			return -1;
		acc = (acc << 6) | (unsigned)v;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			out[n++] = (char)((acc >> bits) & 0xff);
		}
	}
	out[n] = '\0';
	return (int)n;
}

/* The number date printed: the stdout line's data of the exec stream, which ended {"exit_code": 0}. */
static int stream_number(const char *body, int64_t *ret)
{
	const char *p = strstr(body, "\"stream\":\"stdout\"");
	const char *d = p ? strstr(p, "\"data\":\"") : NULL;
	char text[64], *end;
	long long v;

	if (!d || !strstr(body, "\"exit_code\":0") || b64_decode(d + 8, text, sizeof(text)) <= 0)
		return -1;
	errno = 0;
	v = strtoll(text, &end, 10);
	if (errno || end == text || (*end && *end != '\n'))
		return -1;
	*ret = v;
	return 0;
}

/* One exec through fleetd's API: t1 - t0 in ns, or -1 (why on stderr). */
static int64_t api_sample(CURL *c, struct body *b, long *connects)
{
	int64_t t0, t1;
	long status = 0, nc = 0;
	CURLcode rc;

	b->len = 0;
	b->overflow = 0;
	b->buf[0] = '\0';
	t0 = now_ns();
	rc = curl_easy_perform(c);
	if (rc != CURLE_OK) {
		fprintf(stderr, "exec-api-bench: exec call failed: %s\n", curl_easy_strerror(rc));
		return -1;
	}
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	curl_easy_getinfo(c, CURLINFO_NUM_CONNECTS, &nc);
	*connects += nc;
	if (status != 200 || stream_number(b->buf, &t1) < 0) {
		fprintf(stderr, "exec-api-bench: exec answered %ld: %.200s\n", status, b->buf);
		return -1;
	}
	return t1 - t0;
}

/* The baseline: posix_spawnp of the same date, its stdout on a pipe; t1 - t0 in ns, or -1. */
static int64_t base_sample(void)
{
	char *argv[] = { "date", "+%s%N", NULL };
	posix_spawn_file_actions_t fa;
	char text[64], *end;
	size_t n = 0;
	int p[2], status, r;
	int64_t t0;
	long long v;
	pid_t pid;

	if (pipe2(p, O_CLOEXEC) < 0)
		return -1;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, p[1], STDOUT_FILENO);
	t0 = now_ns();
	r = posix_spawnp(&pid, "date", &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(p[1]);
	if (r != 0) {
		close(p[0]);
		fprintf(stderr, "exec-api-bench: cannot spawn date: %s\n", strerror(r));
		return -1;
	}
	for (;;) {
		ssize_t k = read(p[0], text + n, sizeof(text) - 1 - n);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0 || (n += (size_t)k) == sizeof(text) - 1)
			break;
	}
	close(p[0]);
	text[n] = '\0';
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	errno = 0;
	v = strtoll(text, &end, 10);
	if (errno || end == text || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
		return -1;
	return v - t0;
}

static int cmp64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return x < y ? -1 : x > y;
}

/* Sorts v; its median (the mean of the middle two for an even count). */
static double median(int64_t *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp64);
	return n % 2 ? (double)v[n / 2] : ((double)v[n / 2 - 1] + (double)v[n / 2]) / 2;
}

/* v sorted: its 95th percentile, as user-bench.sh's p95 picks it. */
static double p95(const int64_t *v, int n)
{
	int i = (int)(n * 0.95);

	return (double)v[(i < 1 ? 1 : i) - 1];
}

int main(int argc, char **argv)
{
	static struct body b;
	struct curl_slist *hdr = NULL;
	char url[512];
	const char *post = "{\"argv\":[\"date\",\"+%s%N\"],\"root\":false,\"env\":{}}";
	int64_t *api, *base;
	double api_med, base_med;
	long connects = 0;
	int n;
	CURL *c;

	if (argc != 4 || (n = atoi(argv[3])) < 1 || n > 100000) {
		fprintf(stderr, "usage: exec-api-bench SOCKET AGENT SAMPLES\n");
		return 2;
	}
	if (curl_global_init(CURL_GLOBAL_NOTHING) != CURLE_OK || !(c = curl_easy_init()))
		return 1;
	snprintf(url, sizeof(url), "http://fleet/v1/agents/%s/exec", argv[2]);
	hdr = curl_slist_append(hdr, "Expect:");
	hdr = curl_slist_append(hdr, "Content-Type: application/json");
	curl_easy_setopt(c, CURLOPT_UNIX_SOCKET_PATH, argv[1]);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, post);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
	api = calloc((size_t)n, sizeof(*api));
	base = calloc((size_t)n, sizeof(*base));
	if (!api || !base)
		return 1;
	/* warm up: the first call also makes the agent's spare, the first spawn faults date in */
	if (api_sample(c, &b, &connects) < 0 || base_sample() < 0)
		return 1;
	connects = 0;
	for (int i = 0; i < n; i++) {
		gap();
		if ((api[i] = api_sample(c, &b, &connects)) < 0)
			return 1;
		gap();
		if ((base[i] = base_sample()) < 0)
			return 1;
	}
	curl_easy_cleanup(c);
	curl_slist_free_all(hdr);
	api_med = median(api, n);
	base_med = median(base, n);
	printf("start latency, API call (median): exec %.2f ms, plain posix_spawn %.2f ms, ratio %.2f\n",
	       api_med / 1e6, base_med / 1e6, api_med / base_med);
	printf("start latency, API call (p95):    exec %.2f ms, plain posix_spawn %.2f ms, ratio %.2f\n",
	       p95(api, n) / 1e6, p95(base, n) / 1e6, p95(api, n) / p95(base, n));
	printf("API calls: %d on one easy handle, %ld connections made (%s)\n", n, connects,
	       connects <= 1 ? "one kept connection" : "fleetd closes each: one per call, no program start");
	printf("ratio|user agent: exec start latency, API call|%.2f ms|%.2f ms plain posix_spawn|%.2fx|<= 1.5x\n",
	       api_med / 1e6, base_med / 1e6, api_med / base_med);
	free(api);
	free(base);
	return 0;
}
