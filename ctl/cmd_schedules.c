/*
 * fleetctl schedule add|ls|rm: an agent's cron triggers. The spec, zone and
 * catch-up word are checked here first (a usage error, exit 2), then again
 * by fleetd.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "common/cron.h"
#include "common/tz.h"
#include "ctl/commands.h"

#define PAYLOAD_MAX (1u << 20)	/* fleetd's CRON_PAYLOAD_MAX */

struct add_opts {
	const struct command *cmd;
	const char *tz;
	const char *catch_up;
	const char *payload_file;
};

static int add_opt(int c, const char *arg, void *data)
{
	struct add_opts *o = data;

	switch (c) {
	case 'z': o->tz = arg; return 0;
	case 'c': o->catch_up = arg; return 0;
	case 'p': o->payload_file = arg; return 0;
	}
	return -1;
}

/* Read the payload from path ("-": stdin) into *ret (caller frees); prints why not and returns -1. */
static int read_payload(const struct command *cmd, const char *path, char **ret, size_t *len)
{
	_cleanup_free_ char *buf = xmalloc(PAYLOAD_MAX + 1);
	size_t got = 0;
	int fd = strcmp(path, "-") == 0 ? STDIN_FILENO : open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0) {
		usage_error(cmd, "cannot read the payload '%s': %s", path, strerror(errno));
		return -1;
	}
	for (;;) {
		ssize_t n = read(fd, buf + got, PAYLOAD_MAX + 1 - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			usage_error(cmd, "cannot read the payload '%s': %s", path, strerror(errno));
			break;
		}
		got += (size_t)n;
		if (n == 0 || got > PAYLOAD_MAX)
			break;
	}
	if (fd != STDIN_FILENO)
		close(fd);
	if (got > PAYLOAD_MAX) {
		usage_error(cmd, "the payload '%s' is larger than %u bytes", path, PAYLOAD_MAX);
		return -1;
	}
	buf[got] = '\0';
	*ret = TAKE_PTR(buf);
	*len = got;
	return 0;
}

static int schedule_add(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "tz", required_argument, NULL, 'z' }, { "catch-up", required_argument, NULL, 'c' },
		{ "payload", required_argument, NULL, 'p' }, { "help", no_argument, NULL, 'h' }, { 0 },
	};
	_cleanup_(json_decrefp) json_t *body = json_object(), *answer = NULL;
	_cleanup_free_ char *why = NULL, *payload = NULL;
	struct add_opts o = { .cmd = cmd };
	struct cron_spec spec;
	const char *agent, *cron;
	size_t len = 0;
	json_t *p;
	int r;

	if ((r = parse_opts(cmd, argc, argv, opts, add_opt, &o)) != 0)
		return r < 0 ? EXIT_USAGE : 0;
	if (argc - optind != 2)
		return usage_error(cmd, "schedule add needs an agent NAME and a CRON spec (quoted: '0 9 * * *')");
	agent = argv[optind];
	cron = argv[optind + 1];
	if (!name_ok(cmd, agent))
		return EXIT_USAGE;
	if (cron_parse(cron, &spec, &why) < 0)
		return usage_error(cmd, "invalid cron spec '%s': %s", cron, why);
	json_object_set_new(body, "cron", json_string(cron));
	if (o.tz) {
		free(why);
		why = NULL;
		if (tz_check(o.tz, &why) < 0)
			return usage_error(cmd, "%s", why);
		json_object_set_new(body, "tz", json_string(o.tz));
	}
	if (o.catch_up) {
		if (cron_catch_up_from_string(o.catch_up) < 0)
			return usage_error(cmd, "--catch-up is once or skip, not '%s'", o.catch_up);
		json_object_set_new(body, "catch_up", json_string(o.catch_up));
	}
	if (o.payload_file) {
		if (read_payload(cmd, o.payload_file, &payload, &len) < 0)
			return EXIT_USAGE;
		if (!(p = json_stringn(payload, len)))
			return usage_error(cmd, "the payload '%s' is not UTF-8 text", o.payload_file);
		json_object_set_new(body, "payload", p);
	}
	if (callf(ctl, "POST", body, &answer, "/v1/agents/%s/schedules", agent))
		return 1;
	if (ctl->json)
		print_json(answer);
	else
		printf("agent '%s': schedule %lld added ('%s' in %s, catch-up %s); next run %s\n", agent,
		       num(answer, "id"), str(answer, "cron"),
		       json_is_string(json_object_get(answer, "tz")) ? str(answer, "tz") : "the host's time zone",
		       str(answer, "catch_up"), str(answer, "next_at"));
	return 0;
}

static int schedule_ls(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	_cleanup_(json_decrefp) json_t *j = NULL;
	json_t *list, *s;
	size_t i;
	int r;

	if ((r = parse_opts(cmd, argc, argv, help_only, no_opts, NULL)) != 0)
		return r < 0 ? EXIT_USAGE : 0;
	if (argc - optind > 1)
		return usage_error(cmd, "schedule ls takes at most an agent NAME");
	if (argc - optind == 1) {
		if (!name_ok(cmd, argv[optind]))
			return EXIT_USAGE;
		if (callf(ctl, "GET", NULL, &j, "/v1/agents/%s/schedules", argv[optind]))
			return 1;
	} else if (call(ctl, "GET", "/v1/schedules", NULL, &j)) {
		return 1;
	}
	list = json_object_get(j, "schedules");
	if (ctl->json) {
		print_json(list);
		return 0;
	}
	if (json_array_size(list) == 0) {
		printf("no schedules\n");
		return 0;
	}
	printf("%-5s %-16s %-20s %-20s %-8s %-20s %s\n", "ID", "AGENT", "CRON", "TZ", "CATCH-UP", "NEXT", "PAYLOAD");
	json_array_foreach(list, i, s) {
		printf("%-5lld %-16s %-20s %-20s %-8s %-20s %lld B\n", num(s, "id"), str(s, "agent"), str(s, "cron"),
		       json_is_string(json_object_get(s, "tz")) ? str(s, "tz") : "(host)", str(s, "catch_up"),
		       str(s, "next_at"), num(s, "payload_bytes"));
	}
	return 0;
}

static int schedule_rm(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	_cleanup_(json_decrefp) json_t *answer = NULL;
	long id;
	int r;

	if ((r = parse_opts(cmd, argc, argv, help_only, no_opts, NULL)) != 0)
		return r < 0 ? EXIT_USAGE : 0;
	if (argc - optind != 2)
		return usage_error(cmd, "schedule rm needs an agent NAME and a schedule ID");
	if (!name_ok(cmd, argv[optind]))
		return EXIT_USAGE;
	if (parse_long(argv[optind + 1], 1, INT64_MAX, &id) < 0)
		return usage_error(cmd, "a schedule ID is a positive number, not '%s'", argv[optind + 1]);
	if (callf(ctl, "DELETE", NULL, &answer, "/v1/agents/%s/schedules/%ld", argv[optind], id))
		return 1;
	if (ctl->json)
		print_json(answer);
	else
		printf("agent '%s': schedule %lld removed\n", argv[optind], num(answer, "removed"));
	return 0;
}

int cmd_schedule(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
		print_command_help(cmd, stdout);
		return 0;
	}
	if (argc < 2)
		return usage_error(cmd, "schedule needs add, ls or rm");
	/* Each verb parses from its own name on, as a command does from its. */
	if (strcmp(argv[1], "add") == 0)
		return schedule_add(ctl, cmd, argc - 1, argv + 1);
	if (strcmp(argv[1], "ls") == 0)
		return schedule_ls(ctl, cmd, argc - 1, argv + 1);
	if (strcmp(argv[1], "rm") == 0)
		return schedule_rm(ctl, cmd, argc - 1, argv + 1);
	return usage_error(cmd, "unknown schedule command '%s' (add, ls or rm)", argv[1]);
}
