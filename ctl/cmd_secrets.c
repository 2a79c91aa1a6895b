/*
 * fleetctl secret set|ls|rm: an agent's credentials (core/secrets.h). A
 * value is read from standard input only, never from argv (which every
 * user on the host can read in /proc): from a terminal one line without
 * echo, its newline dropped; from a pipe or file every byte up to EOF,
 * exactly, unless --trim-newline drops one trailing newline ("echo x |").
 * 'ls' shows names, sizes and dates; no command ever prints a value.
 */
#include <errno.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

#include "ctl/commands.h"

#define VALUE_MAX (64u << 10)	/* fleetd's SECRET_VALUE_MAX */
#define KEY_MAX 128

/* The shape fleetd wants ([A-Za-z_][A-Za-z0-9_]*), checked here too so a key never changes the path. */
static bool key_ok(const struct command *cmd, const char *key)
{
	size_t n = strlen(key);
	bool ok = n > 0 && n <= KEY_MAX && !(key[0] >= '0' && key[0] <= '9');

	for (size_t i = 0; ok && i < n; i++)
		ok = key[i] == '_' || (key[i] >= 'A' && key[i] <= 'Z') || (key[i] >= 'a' && key[i] <= 'z') ||
		     (key[i] >= '0' && key[i] <= '9');
	if (!ok)
		usage_error(cmd, "a secret's KEY is an environment variable name ([A-Za-z_][A-Za-z0-9_]*, at most %d bytes)",
			    KEY_MAX);
	return ok;
}

/* Read the value from stdin into buf (VALUE_MAX + 2 bytes); *len, or -1 after printing why. */
static int read_value(const struct command *cmd, const char *key, bool trim, char *buf, size_t *len)
{
	struct termios old, quiet;
	bool tty = isatty(STDIN_FILENO), echo_off = false;
	size_t got = 0;
	int err = 0;

	if (tty) {
		fprintf(stderr, "value of %s (not shown; Enter ends it): ", key);
		if (tcgetattr(STDIN_FILENO, &old) == 0) {
			quiet = old;
			quiet.c_lflag &= ~(tcflag_t)ECHO;
			echo_off = tcsetattr(STDIN_FILENO, TCSAFLUSH, &quiet) == 0;
		}
	}
	for (;;) {
		ssize_t n = read(STDIN_FILENO, buf + got, VALUE_MAX + 1 - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			err = errno;
			break;
		}
		got += (size_t)n;
		/* A terminal gives one line per read: the value ends at its newline. */
		if (n == 0 || got > VALUE_MAX || (tty && got > 0 && buf[got - 1] == '\n'))
			break;
	}
	if (echo_off)
		(void)tcsetattr(STDIN_FILENO, TCSAFLUSH, &old);
	if (tty)
		fputc('\n', stderr);
	if (err) {
		fprintf(stderr, "fleetctl: cannot read the value from standard input: %s\n", strerror(err));
		return -1;
	}
	if ((tty || trim) && got > 0 && buf[got - 1] == '\n')
		got--;
	if (got > VALUE_MAX) {
		usage_error(cmd, "a secret's value is at most %u bytes", VALUE_MAX);
		return -1;
	}
	*len = got;
	return 0;
}

static int secret_set(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "trim-newline", no_argument, NULL, 't' }, { "help", no_argument, NULL, 'h' }, { 0 },
	};
	_cleanup_(json_decrefp) json_t *answer = NULL;
	_cleanup_free_ char *buf = xmalloc(VALUE_MAX + 2);
	_cleanup_free_ char *path = NULL;
	bool trim = false;
	size_t len = 0;
	int r;

	if ((r = parse_opts(cmd, argc, argv, opts, flag_opt, &trim)) != 0)
		return r < 0 ? EXIT_USAGE : 0;
	if (argc - optind != 2)
		return usage_error(cmd, "secret set needs an agent NAME and a KEY; the value comes from standard input");
	if (!name_ok(cmd, argv[optind]) || !key_ok(cmd, argv[optind + 1]))
		return EXIT_USAGE;
	if (read_value(cmd, argv[optind + 1], trim, buf, &len) < 0) {
		explicit_bzero(buf, VALUE_MAX + 2);
		return EXIT_USAGE;
	}
	path = xasprintf("/v1/agents/%s/secrets/%s", argv[optind], argv[optind + 1]);
	r = call_raw(ctl, "PUT", path, "application/octet-stream", buf, len, &answer);
	explicit_bzero(buf, VALUE_MAX + 2);
	if (r)
		return 1;
	if (ctl->json)
		print_json(answer);
	else
		printf("agent '%s': secret %s set (%lld bytes); runs see it from the next one\n", argv[optind],
		       argv[optind + 1], num(answer, "size"));
	if (json_is_string(json_object_get(answer, "warning")))
		fprintf(stderr, "fleetctl: warning: %s\n", json_string_value(json_object_get(answer, "warning")));
	return 0;
}

static int secret_ls(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	_cleanup_(json_decrefp) json_t *j = NULL;
	json_t *list, *s;
	size_t i;
	int r;

	if ((r = parse_opts(cmd, argc, argv, help_only, no_opts, NULL)) != 0)
		return r < 0 ? EXIT_USAGE : 0;
	if (argc - optind != 1)
		return usage_error(cmd, "secret ls needs an agent NAME");
	if (!name_ok(cmd, argv[optind]))
		return EXIT_USAGE;
	if (callf(ctl, "GET", NULL, &j, "/v1/agents/%s/secrets", argv[optind]))
		return 1;
	list = json_object_get(j, "secrets");
	if (ctl->json) {
		print_json(list);
		return 0;
	}
	if (json_array_size(list) == 0) {
		printf("agent '%s' has no secrets\n", argv[optind]);
		return 0;
	}
	printf("%-32s %8s  %-20s  %s\n", "KEY", "SIZE", "CREATED", "UPDATED");
	json_array_foreach(list, i, s)
		printf("%-32s %8lld  %-20s  %s\n", str(s, "key"), num(s, "size"), str(s, "created_at"), str(s, "updated_at"));
	return 0;
}

static int secret_rm(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	_cleanup_(json_decrefp) json_t *answer = NULL;
	int r;

	if ((r = parse_opts(cmd, argc, argv, help_only, no_opts, NULL)) != 0)
		return r < 0 ? EXIT_USAGE : 0;
	if (argc - optind != 2)
		return usage_error(cmd, "secret rm needs an agent NAME and a KEY");
	if (!name_ok(cmd, argv[optind]) || !key_ok(cmd, argv[optind + 1]))
		return EXIT_USAGE;
	if (callf(ctl, "DELETE", NULL, &answer, "/v1/agents/%s/secrets/%s", argv[optind], argv[optind + 1]))
		return 1;
	if (ctl->json)
		print_json(answer);
	else
		printf("agent '%s': secret %s removed\n", argv[optind], argv[optind + 1]);
	return 0;
}

int cmd_secret(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
		print_command_help(cmd, stdout);
		return 0;
	}
	if (argc < 2)
		return usage_error(cmd, "secret needs set, ls or rm");
	/* Each verb parses from its own name on, as a command does from its. */
	if (strcmp(argv[1], "set") == 0)
		return secret_set(ctl, cmd, argc - 1, argv + 1);
	if (strcmp(argv[1], "ls") == 0)
		return secret_ls(ctl, cmd, argc - 1, argv + 1);
	if (strcmp(argv[1], "rm") == 0)
		return secret_rm(ctl, cmd, argc - 1, argv + 1);
	return usage_error(cmd, "secret needs set, ls or rm, not '%s'", argv[1]);
}
