/*
 * verify-bench: the CPU one GitHub check costs in the listener, measured
 * apart from everything else (not part of make check). hook_verify() of the
 * hooks bench's 1 KiB push body (tests/bench/hooks-bench.sh builds the same
 * one), and the body's JSON check and the HMAC alone, each as the best of
 * ROUNDS rounds of CALLS calls on CLOCK_PROCESS_CPUTIME_ID, in µs per call.
 * Built by `make tests/bench/verify-bench` (mk/hooks.am); run it from the
 * build directory: tests/bench/verify-bench [ROUNDS [CALLS]].
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hooks/verify.h"
#include "hooks/verify_common.h"

#define ROUNDS 20
#define CALLS 5000

static const char secret[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
static char body[1025];
static char sig[8 + 2 * HV_SHA256_LEN];
static struct hook_route route = { .name = "bench", .source = HOOK_GITHUB, .n_secrets = 1, .max_body = 1 << 20 };
static struct hook_header headers[] = {
	{ "Content-Type", "application/json" }, { "User-Agent", "GitHub-Hookshot/bench" },
	{ "X-GitHub-Event", "push" }, { "X-GitHub-Delivery", "bench-1-1" }, { "X-Hub-Signature-256", sig },
};
static struct hook_request req = { .method = "POST", .path_query = "/hooks/bench", .headers = headers,
				   .n_headers = sizeof(headers) / sizeof(headers[0]) };

static double cpu_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int one_verify(void)
{
	struct hook_result res;
	int ok;

	hook_verify(&route, &req, &res);
	ok = res.verdict == HOOK_OK;
	hook_result_clear(&res);
	return ok;
}

static int one_json(void)
{
	json_t *j = hv_json_object(req.body, req.body_len);
	int ok = j != NULL;

	json_decref(j);
	return ok;
}

static int one_hmac(void)
{
	unsigned char want[HV_SHA256_LEN];
	struct hv_part part = { req.body, req.body_len };

	hv_unhex(sig + 7, 2 * HV_SHA256_LEN, want, sizeof(want));
	return hv_mac_matches(&route, "SHA256", &part, 1, want, sizeof(want));
}

/* The best of rounds rounds of calls calls of fn, µs per call; exits if fn ever fails. */
static double best(int (*fn)(void), int rounds, int calls, const char *what)
{
	double min = 0;

	for (int r = 0; r < rounds; r++) {
		double t0 = cpu_now(), t;

		for (int i = 0; i < calls; i++)
			if (!fn()) {
				fprintf(stderr, "verify-bench: %s failed\n", what);
				exit(1);
			}
		t = (cpu_now() - t0) / calls;
		if (r == 0 || t < min)
			min = t;
	}
	return min;
}

int main(int argc, char **argv)
{
	static const char head[] = "{\"ref\":\"refs/heads/main\",\"before\":\"6113728f27ae82c7b1a177c8d03f9e96e0adf246\","
		"\"after\":\"59b20b8d5c6ff8d09518454d4dd8b7b30f095ab5\",\"repository\":{\"id\":17273051,"
		"\"full_name\":\"octo-org/octo-repo\",\"private\":true},\"pusher\":{\"name\":\"octocat\"},"
		"\"commits\":[{\"id\":\"59b20b8d5c6ff8d09518454d4dd8b7b30f095ab5\",\"message\":\"";
	static const char tail[] = "\"}]}";
	int rounds = argc > 1 ? atoi(argv[1]) : ROUNDS, calls = argc > 2 ? atoi(argv[2]) : CALLS;
	unsigned char mac[HV_MAC_MAX];
	struct hv_part part;
	size_t pad = 1024 - strlen(head) - strlen(tail);
	char *hex;

	if (rounds < 1 || calls < 1) {
		fprintf(stderr, "usage: verify-bench [ROUNDS [CALLS]]\n");
		return 2;
	}
	/* The hooks bench's body: a push event padded to exactly 1 KiB. */
	strcpy(body, head);
	memset(body + strlen(head), 'x', pad);
	strcpy(body + strlen(head) + pad, tail);
	req.body = (const unsigned char *)body;
	req.body_len = strlen(body);
	route.secrets[0] = (const unsigned char *)secret;
	route.secret_lens[0] = strlen(secret);
	route.macs = hook_mac_cache_new();
	part = (struct hv_part){ req.body, req.body_len };
	if (hv_hmac("SHA256", route.secrets[0], route.secret_lens[0], &part, 1, mac) != HV_SHA256_LEN)
		return 1;
	hex = hv_hex(mac, HV_SHA256_LEN);
	snprintf(sig, sizeof(sig), "sha256=%s", hex);
	free(hex);

	printf("hook_verify (github, 1 KiB)  %.2f us\n", best(one_verify, rounds, calls, "hook_verify"));
	printf("  the body's JSON check       %.2f us\n", best(one_json, rounds, calls, "the JSON check"));
	printf("  the HMAC-SHA256              %.2f us\n", best(one_hmac, rounds, calls, "the HMAC"));
	printf("(best of %d rounds of %d calls, CLOCK_PROCESS_CPUTIME_ID)\n", rounds, calls);
	hook_mac_cache_free(route.macs);
	return 0;
}
