/* fleetctl exec (the exec stream client) and console. */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "common/base64.h"
#include "common/termsafe.h"
#include "ctl/commands.h"
#include "ctl/http_client.h"

#define EXEC_STDIN_MAX (12 << 20)	/* base64 of it fits fleetd's 16 MiB exec body cap */

struct exec_opts {
	bool root, no_stdin, secrets, secret_files;
	long timeout;
	json_t *env;
	const struct command *cmd;
};

static int exec_opt(int c, const char *arg, void *data)
{
	struct exec_opts *o = data;
	const char *eq;

	switch (c) {
	case 'r': o->root = true; return 0;
	case 'n': o->no_stdin = true; return 0;
	case 'S': o->secrets = true; return 0;
	case 'F': o->secret_files = true; return 0;
	case 't': return timeout_opt(c, arg, &o->timeout);
	case 'e':
		eq = strchr(arg, '=');
		if (!eq || eq == arg) {
			usage_error(o->cmd, "--env needs NAME=VALUE, not '%s'", arg);
			return -1;
		}
		{
			_cleanup_free_ char *k = xstrndup(arg, (size_t)(eq - arg));
			json_object_set_new(o->env, k, json_string(eq + 1));
		}
		return 0;
	}
	return -1;
}

struct exec_out {
	int exit_code;
	bool finished;
};

/* One JSON line of the exec stream: output to pass through, or how it ended. */
static int exec_line(void *ud, const char *line, size_t len)
{
	struct exec_out *o = ud;
	_cleanup_(json_decrefp) json_t *j = json_loadb(line, len, 0, NULL);
	json_t *v;

	if (!j)
		return -EPROTO;
	if ((v = json_object_get(j, "data"))) {
		unsigned char *bytes;
		size_t n;
		int fd = strcmp(str(j, "stream"), "stderr") == 0 ? STDERR_FILENO : STDOUT_FILENO;

		if (base64_decode(json_string_value(v), json_string_length(v), &bytes, &n) < 0)
			return -EPROTO;
		(void)write_all(fd, bytes, n);
		free(bytes);
		return 0;
	}
	o->finished = true;
	if ((v = json_object_get(j, "exit_code"))) {
		o->exit_code = (int)json_integer_value(v);
	} else if ((v = json_object_get(j, "signal"))) {
		fprintf(stderr, "fleetctl: the command was killed by signal %d\n", (int)json_integer_value(v));
		o->exit_code = 128 + (int)json_integer_value(v);
	} else if (json_is_true(json_object_get(j, "timed_out"))) {
		fprintf(stderr, "fleetctl: %s\n", str(j, "error"));
		o->exit_code = 124;
	} else {
		fprintf(stderr, "fleetctl: %s\n", str(j, "error"));
		o->exit_code = 1;
	}
	return 0;
}

/* Read all of stdin (bounded); NULL with *len 0 when there is none. */
static int read_stdin(char **ret, size_t *len)
{
	size_t cap = 0, n = 0;
	char *buf = NULL;

	for (;;) {
		ssize_t k;

		if (cap - n < 65536) {
			cap = cap ? cap * 2 : 65536;
			if (cap > EXEC_STDIN_MAX * 2) {
				free(buf);
				return -EFBIG;
			}
			buf = xrealloc(buf, cap);
		}
		k = read(STDIN_FILENO, buf + n, cap - n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0) {
			free(buf);
			return -errno;
		}
		if (k == 0)
			break;
		n += (size_t)k;
		if (n > EXEC_STDIN_MAX) {
			free(buf);
			return -EFBIG;
		}
	}
	*ret = buf;
	*len = n;
	return 0;
}

int cmd_exec(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "root", no_argument, NULL, 'r' }, { "timeout", required_argument, NULL, 't' },
		{ "env", required_argument, NULL, 'e' }, { "no-stdin", no_argument, NULL, 'n' },
		{ "secrets", no_argument, NULL, 'S' }, { "secret-files", no_argument, NULL, 'F' },
		{ "help", no_argument, NULL, 'h' }, { 0 },
	};
	struct exec_opts o = { .timeout = -1, .env = json_object(), .cmd = cmd };
	struct exec_out out = { 0 };
	struct http_response err = { 0 };
	_cleanup_(json_decrefp) json_t *body = NULL;
	_cleanup_free_ char *path = NULL, *text = NULL, *in = NULL;
	json_t *args;
	size_t in_len = 0;
	int dashdash = -1, r;

	/* Everything after "--" is the command, untouched by option parsing. */
	for (int i = 1; i < argc; i++)
		if (strcmp(argv[i], "--") == 0) {
			dashdash = i;
			break;
		}
	if (dashdash < 0) {
		json_decref(o.env);
		if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
			print_command_help(cmd, stdout);
			return 0;
		}
		return usage_error(cmd, "exec needs '--' before the command");
	}
	r = parse_opts(cmd, dashdash, argv, opts, exec_opt, &o);
	if (r != 0) {
		json_decref(o.env);
		return r < 0 ? EXIT_USAGE : 0;
	}
	if (dashdash - optind != 1 || dashdash + 1 >= argc) {
		json_decref(o.env);
		return usage_error(cmd, "exec needs an agent NAME, then '--' and a command");
	}
	if (!name_ok(cmd, argv[optind])) {
		json_decref(o.env);
		return EXIT_USAGE;
	}
	args = json_array();
	for (int i = dashdash + 1; i < argc; i++)
		json_array_append_new(args, json_string(argv[i]));
	body = json_pack("{s:o, s:b, s:o}", "argv", args, "root", o.root, "env", o.env);
	if (o.secrets)
		json_object_set_new(body, "secrets", json_true());
	if (o.secret_files)
		json_object_set_new(body, "secret_files", json_true());
	if (o.timeout >= 0)
		json_object_set_new(body, "timeout_s", json_integer(o.timeout));
	if (!o.no_stdin && !isatty(STDIN_FILENO)) {
		if ((r = read_stdin(&in, &in_len)) < 0) {
			fprintf(stderr, "fleetctl: reading stdin: %s (at most %d MiB)\n", strerror(-r), EXEC_STDIN_MAX >> 20);
			return 1;
		}
		if (in_len > 0) {
			_cleanup_free_ char *b64 = base64_encode(in, in_len);
			json_object_set_new(body, "stdin", json_string(b64));
		}
	}
	text = json_dumps(body, JSON_COMPACT);
	path = xasprintf("/v1/agents/%s/exec", argv[optind]);
	r = http_request_lines(ctl->socket, "POST", path, text, strlen(text), exec_line, &out, &err);
	if (r < 0) {
		if (!print_not_running(ctl, r))
			fprintf(stderr, "fleetctl: exec stream from fleetd broke off: %s\n", strerror(-r));
		return 1;
	}
	if (r != 200) {
		_cleanup_(json_decrefp) json_t *e = json_loadb(err.body ? err.body : "", err.body_len, 0, NULL);
		fprintf(stderr, "fleetctl: %s\n", e ? str(e, "error") : "exec failed");
		http_response_free(&err);
		return 1;
	}
	if (!out.finished) {
		fprintf(stderr, "fleetctl: exec stream ended without an exit status\n");
		return 1;
	}
	return out.exit_code;
}

static int bytes_opt(int c, const char *arg, void *data)
{
	long v;

	if (parse_long(arg, 1, 16L << 20, &v) < 0) {
		fprintf(stderr, "fleetctl: --bytes must be a number from 1 to 16777216\n");
		return -1;
	}
	*(long *)data = v;
	return 0;
}

int cmd_console(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "bytes", required_argument, NULL, 'b' }, { "help", no_argument, NULL, 'h' }, { 0 },
	};
	_cleanup_(json_decrefp) json_t *j = NULL;
	unsigned char *text;
	long bytes = 65536;
	size_t n;
	const char *name;
	int status;

	if (!one_agent(cmd, argc, argv, opts, bytes_opt, &bytes, &name, &status))
		return status;
	if (callf(ctl, "GET", NULL, &j, "/v1/agents/%s/console?bytes=%ld", name, bytes))
		return 1;
	if (ctl->json) {
		print_json(j);
		return 0;
	}
	if (base64_decode(str(j, "data"), strlen(str(j, "data")), &text, &n) < 0) {
		fprintf(stderr, "fleetctl: fleetd sent a console that is not base64\n");
		return 1;
	}
	/* Guest bytes on a terminal could drive it (escape sequences); piped, they stay raw. */
	if (isatty(STDOUT_FILENO)) {
		size_t clean_len;
		char *clean = term_sanitize(text, n, &clean_len);

		(void)write_all(STDOUT_FILENO, clean, clean_len);
		free(clean);
	} else {
		(void)write_all(STDOUT_FILENO, text, n);
	}
	free(text);
	return 0;
}
