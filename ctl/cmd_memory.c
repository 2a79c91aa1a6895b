/*
 * cmd_memory: fleetctl memory NAME ls|get KEY|put KEY|rm KEY|export|import.
 * Values and archives go raw (stdin to the request body, the answer's body
 * to stdout), never through a terminal-unsafe print of JSON.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/names.h"
#include "common/termsafe.h"
#include "common/util.h"
#include "ctl/commands.h"
#include "ctl/http_client.h"
#include "model/agent.h"

/* The largest value or archive: the largest quota plus tar's headers (as fleetd's routes). */
#define MEMORY_MAX_BYTES (((size_t)MEMORY_QUOTA_MAX << 20) + ((size_t)16 << 20))

/* All of stdin, at most MEMORY_MAX_BYTES; -errno (-EFBIG over it). */
static int read_stdin(char **ret, size_t *ret_len)
{
	size_t len = 0, cap = 65536;
	char *buf = xmalloc(cap);

	for (;;) {
		ssize_t n;

		if (cap - len < 65536) {
			if (cap >= MEMORY_MAX_BYTES + 65536) {
				free(buf);
				return -EFBIG;
			}
			cap *= 2;
			buf = xrealloc(buf, cap);
		}
		n = read(STDIN_FILENO, buf + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int r = -errno;

			free(buf);
			return r;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	if (len > MEMORY_MAX_BYTES) {
		free(buf);
		return -EFBIG;
	}
	*ret = buf;
	*ret_len = len;
	return 0;
}

/* One request; on success *resp holds the answer (the caller frees it). Prints fleetd's error; exit status. */
static int memory_request(struct ctl *ctl, const char *method, const char *path, const char *ctype, const char *body,
			  size_t body_len, struct http_response *resp)
{
	json_t *answer;
	int r;

	r = http_request_raw(ctl->socket, method, path, ctype, body, body_len, MEMORY_MAX_BYTES + 65536, resp);
	if (r < 0) {
		if (!print_not_running(ctl, r))
			fprintf(stderr, "fleetctl: talking to fleetd at %s: %s\n", ctl->socket, strerror(-r));
		return 1;
	}
	if (resp->status < 300)
		return 0;
	answer = json_loadb(resp->body, resp->body_len, 0, NULL);
	fprintf(stderr, "fleetctl: %s\n", json_string_value(json_object_get(answer, "error"))
					 ? json_string_value(json_object_get(answer, "error"))
					 : "request failed");
	json_decref(answer);
	http_response_free(resp);
	return 1;
}

static int print_ls(struct ctl *ctl, const char *body, size_t len)
{
	json_t *answer = json_loadb(body, len, 0, NULL), *keys, *k;
	size_t i;

	if (!answer) {
		fprintf(stderr, "fleetctl: fleetd answered with a body that is not JSON\n");
		return 1;
	}
	if (ctl->json) {
		print_json(answer);
	} else {
		keys = json_object_get(answer, "keys");
		printf("%-40s %12s  %s\n", "KEY", "SIZE", "MODIFIED");
		json_array_foreach(keys, i, k)
			printf("%-40s %12lld  %s\n", str(k, "key"), num(k, "size"), str(k, "mtime"));
	}
	json_decref(answer);
	return 0;
}

int cmd_memory(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	struct http_response resp = { 0 };
	_cleanup_free_ char *path = NULL, *in = NULL;
	const char *name, *verb, *key = NULL, *method;
	size_t in_len = 0;
	int r;

	if ((r = parse_opts(cmd, argc, argv, help_only, no_opts, NULL)) != 0)
		return r < 0 ? EXIT_USAGE : 0;
	if (argc - optind < 2)
		return usage_error(cmd, "memory needs an agent NAME and ls, get KEY, put KEY, rm KEY, export or import");
	name = argv[optind];
	verb = argv[optind + 1];
	if (!name_ok(cmd, name))
		return EXIT_USAGE;
	if (strcmp(verb, "get") == 0 || strcmp(verb, "put") == 0 || strcmp(verb, "rm") == 0) {
		if (argc - optind != 3)
			return usage_error(cmd, "memory %s needs a KEY", verb);
		key = argv[optind + 2];
		if (!memory_key_valid(key))
			return usage_error(cmd, "invalid memory key '%s': 1 to %d of A-Z a-z 0-9 . _ -, not starting with a dot",
					   key, MEMORY_KEY_MAX);
		path = xasprintf("/v1/agents/%s/memory/%s", name, key);
	} else if (strcmp(verb, "ls") == 0) {
		path = xasprintf("/v1/agents/%s/memory", name);
	} else if (strcmp(verb, "export") == 0 || strcmp(verb, "import") == 0) {
		path = xasprintf("/v1/agents/%s/memory-archive", name);
	} else {
		return usage_error(cmd, "unknown memory command '%s': ls, get, put, rm, export or import", verb);
	}
	if (!key && argc - optind != 2)
		return usage_error(cmd, "memory %s takes no more arguments", verb);
	if (strcmp(verb, "export") == 0 && isatty(STDOUT_FILENO)) {
		fprintf(stderr, "fleetctl: memory export writes a tar archive; redirect it to a file (> FILE)\n");
		return EXIT_USAGE;
	}
	if (strcmp(verb, "put") == 0 || strcmp(verb, "import") == 0) {
		if ((r = read_stdin(&in, &in_len)) < 0) {
			fprintf(stderr, "fleetctl: reading stdin: %s\n",
				r == -EFBIG ? "larger than the largest memory quota" : strerror(-r));
			return 1;
		}
		method = "PUT";
	} else {
		method = strcmp(verb, "rm") == 0 ? "DELETE" : "GET";
	}
	if ((r = memory_request(ctl, method, path, in ? (key ? "application/octet-stream" : "application/x-tar") : NULL,
				in, in_len, &resp)) != 0)
		return r;
	if (strcmp(verb, "ls") == 0) {
		r = print_ls(ctl, resp.body, resp.body_len);
	} else if (strcmp(verb, "get") == 0 && isatty(STDOUT_FILENO)) {
		/* The agent wrote it: on a terminal, escape sequences are shown, not obeyed (termsafe.h). */
		size_t n;
		_cleanup_free_ char *safe = term_sanitize(resp.body, resp.body_len, &n);

		if (write_all(STDOUT_FILENO, safe, n) < 0)
			r = 1;
	} else if (strcmp(verb, "get") == 0 || strcmp(verb, "export") == 0) {
		if (write_all(STDOUT_FILENO, resp.body, resp.body_len) < 0) {
			fprintf(stderr, "fleetctl: writing stdout: %s\n", strerror(errno));
			r = 1;
		}
	} else if (ctl->json) {
		fwrite(resp.body, 1, resp.body_len, stdout);
	}
	http_response_free(&resp);
	return r;
}
