/*
 * fleetctl backup DIR [--with-disks]: POST /v1/backup. The passphrase that
 * seals the secrets host key is read from stdin only, never argv (every
 * user can read argv in /proc): from a terminal one line without echo,
 * from a pipe its first line. An empty one is refused.
 */
#include <errno.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

#include "ctl/commands.h"

#define PASS_MAX 1024	/* fleetd's BACKUP_PASSPHRASE_MAX */

/* The first line of stdin into buf (PASS_MAX + 2 bytes): its length, or -1 after printing why. */
static int read_passphrase(char *buf, size_t size)
{
	struct termios old, quiet;
	bool tty = isatty(STDIN_FILENO), echo_off = false;
	size_t n;
	char *got;

	if (tty) {
		fprintf(stderr, "passphrase for the backup's secrets key (not shown): ");
		if (tcgetattr(STDIN_FILENO, &old) == 0) {
			quiet = old;
			quiet.c_lflag &= ~(tcflag_t)ECHO;
			echo_off = tcsetattr(STDIN_FILENO, TCSAFLUSH, &quiet) == 0;
		}
	}
	got = fgets(buf, (int)size, stdin);
	if (echo_off)
		(void)tcsetattr(STDIN_FILENO, TCSAFLUSH, &old);
	if (tty)
		fputc('\n', stderr);
	n = got ? strlen(buf) : 0;
	if (n && buf[n - 1] == '\n')
		buf[--n] = '\0';
	else if (n > PASS_MAX) {
		fprintf(stderr, "fleetctl: the passphrase is longer than %d bytes\n", PASS_MAX);
		return -1;
	}
	if (!n) {
		fprintf(stderr, "fleetctl: no passphrase: backup reads it from stdin (one line, not empty)\n");
		return -1;
	}
	return (int)n;
}

int cmd_backup(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "with-disks", no_argument, NULL, 'd' }, { "help", no_argument, NULL, 'h' }, { 0 },
	};
	char pass[PASS_MAX + 2];
	bool with_disks = false;
	json_t *m = NULL, *body;
	int r, len;

	if ((r = parse_opts(cmd, argc, argv, opts, flag_opt, &with_disks)) != 0)
		return r < 0 ? EXIT_USAGE : 0;
	if (argc - optind != 1)
		return usage_error(cmd, "backup takes one DIR");
	if (argv[optind][0] != '/')
		return usage_error(cmd, "DIR must be an absolute path (fleetd, not fleetctl, creates it)");
	if ((len = read_passphrase(pass, sizeof(pass))) < 0)
		return EXIT_USAGE;
	body = json_pack("{s:s, s:s%, s:b}", "dir", argv[optind], "passphrase", pass, (size_t)len, "with_disks", with_disks);
	explicit_bzero(pass, sizeof(pass));
	r = call(ctl, "POST", "/v1/backup", body, &m);
	json_decref(body);
	if (r)
		return r;
	if (ctl->json) {
		print_json(m);
	} else {
		json_t *files = json_object_get(m, "files"), *e;
		long long bytes = 0;
		size_t i;

		json_array_foreach(files, i, e)
			bytes += json_integer_value(json_object_get(e, "size"));
		printf("backup of %zu agent(s) in %s: %zu file(s), %lld bytes\n",
		       json_array_size(json_object_get(m, "agents")), argv[optind], json_array_size(files), bytes);
	}
	json_decref(m);
	return 0;
}
