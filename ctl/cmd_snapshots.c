/* fleetctl snapshot, snapshots and restore. */
#include <string.h>

#include "common/names.h"
#include "ctl/commands.h"

struct snap_opts {
	json_t *body;
	const struct command *cmd;
};

static int snapshot_opt(int c, const char *arg, void *data)
{
	struct snap_opts *o = data;

	if (c == 'p') {
		json_object_set_new(o->body, "pin", json_true());
		return 0;
	}
	if (c == 'N') {
		json_object_set_new(o->body, "note", json_string(arg));
		return 0;
	}
	return -1;
}

/* Check an agent NAME and a snapshot name SNAP (either may be NULL) before sending (prints why not). */
static bool names_ok(const struct command *cmd, const char *agent, const char *snap)
{
	const char *why;

	if (agent && !name_ok(cmd, agent))
		return false;
	if (snap && snapshot_name_check(snap, &why) < 0) {
		usage_error(cmd, "invalid snapshot name '%s': %s", snap, why);
		return false;
	}
	return true;
}

/* snapshot rm NAME SNAP */
static int snapshot_rm(struct ctl *ctl, const struct command *cmd, const char *agent, const char *snap)
{
	_cleanup_(json_decrefp) json_t *answer = NULL;

	if (!names_ok(cmd, agent, snap))
		return EXIT_USAGE;
	if (callf(ctl, "DELETE", NULL, &answer, "/v1/agents/%s/snapshots/%s", agent, snap))
		return 1;
	if (ctl->json)
		print_json(answer);
	else
		printf("agent '%s': snapshot '%s' removed\n", str(answer, "agent"), str(answer, "removed"));
	return 0;
}

/* snapshot pin|unpin NAME SNAP: keep it whatever retention says, or no longer. */
static int snapshot_pin(struct ctl *ctl, const struct command *cmd, const char *agent, const char *snap, bool pin)
{
	_cleanup_(json_decrefp) json_t *answer = NULL, *body = NULL;

	if (!names_ok(cmd, agent, snap))
		return EXIT_USAGE;
	body = json_pack("{s:b}", "pinned", pin);
	if (callf(ctl, "PATCH", body, &answer, "/v1/agents/%s/snapshots/%s", agent, snap))
		return 1;
	if (ctl->json)
		print_json(answer);
	else if (json_is_true(json_object_get(answer, "pruned")))
		printf("agent '%s': snapshot '%s' unpinned, and deleted by the retention policy\n", agent, snap);
	else
		printf("agent '%s': snapshot '%s' %s\n", agent, snap, pin ? "pinned" : "unpinned");
	return 0;
}

/* snapshot NAME [SNAP]: take one; body holds --note and --pin. */
static int snapshot_take(struct ctl *ctl, const struct command *cmd, const char *agent, const char *snap,
			 json_t *body)
{
	_cleanup_(json_decrefp) json_t *answer = NULL;

	if (!names_ok(cmd, agent, snap))
		return EXIT_USAGE;
	if (snap)
		json_object_set_new(body, "name", json_string(snap));
	if (callf(ctl, "POST", body, &answer, "/v1/agents/%s/snapshots", agent))
		return 1;
	if (ctl->json)
		print_json(answer);
	else
		printf("agent '%s': snapshot '%s' taken (%s)\n", agent, str(answer, "name"), str(answer, "kind"));
	return 0;
}

/* snapshot NAME [SNAP] [--note TEXT] [--pin]  |  snapshot rm|pin|unpin NAME SNAP */
int cmd_snapshot(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "note", required_argument, NULL, 'N' }, { "pin", no_argument, NULL, 'p' },
		{ "help", no_argument, NULL, 'h' }, { 0 },
	};
	_cleanup_(json_decrefp) json_t *body = json_object();
	struct snap_opts o = { body, cmd };
	int r, n;

	if ((r = parse_opts(cmd, argc, argv, opts, snapshot_opt, &o)) != 0)
		return r < 0 ? EXIT_USAGE : 0;
	n = argc - optind;
	/* "snapshot rm NAME SNAP" deletes; an agent named rm still works as "snapshot rm [SNAP]". */
	if (n == 3 && strcmp(argv[optind], "rm") == 0)
		return snapshot_rm(ctl, cmd, argv[optind + 1], argv[optind + 2]);
	if (n == 3 && (strcmp(argv[optind], "pin") == 0 || strcmp(argv[optind], "unpin") == 0))
		return snapshot_pin(ctl, cmd, argv[optind + 1], argv[optind + 2], strcmp(argv[optind], "pin") == 0);
	if (n < 1 || n > 2)
		return usage_error(cmd, "snapshot needs an agent NAME and optionally a snapshot name");
	return snapshot_take(ctl, cmd, argv[optind], n == 2 ? argv[optind + 1] : NULL, body);
}

static const char *yes_no_unknown(json_t *v)
{
	return json_is_true(v) ? "good" : json_is_false(v) ? "bad" : "-";
}

int cmd_snapshots(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	_cleanup_(json_decrefp) json_t *j = NULL;
	json_t *list, *s;
	size_t i;
	const char *name;
	int status;

	if (!one_agent(cmd, argc, argv, help_only, no_opts, NULL, &name, &status))
		return status;
	if (callf(ctl, "GET", NULL, &j, "/v1/agents/%s/snapshots", name))
		return 1;
	list = json_object_get(j, "snapshots");
	if (ctl->json) {
		print_json(list);
		return 0;
	}
	if (json_array_size(list) == 0) {
		printf("agent '%s' has no snapshots\n", name);
		return 0;
	}
	printf("%-28s %-20s %10s %-5s %-5s %-6s %s\n", "NAME", "TIME", "SIZE", "KIND", "STATE", "PINNED", "NOTE");
	json_array_foreach(list, i, s) {
		char size[32] = "-";
		json_t *sz = json_object_get(s, "size_bytes");

		if (json_is_integer(sz))
			snprintf(size, sizeof(size), "%.1fMiB", (double)json_integer_value(sz) / (1 << 20));
		printf("%-28s %-20s %10s %-5s %-5s %-6s %s\n", str(s, "name"), str(s, "created_at"), size, str(s, "kind"),
		       yes_no_unknown(json_object_get(s, "good")), json_is_true(json_object_get(s, "pinned")) ? "yes" : "no",
		       json_object_get(s, "note") ? str(s, "note") : "");
	}
	return 0;
}

struct restore_opts {
	bool last_good, keep_memory;
};

static int restore_opt(int c, const char *arg, void *data)
{
	struct restore_opts *o = data;

	if (c == 'g')
		o->last_good = true;
	else if (c == 'k')
		o->keep_memory = true;
	else
		return -1;
	return 0;
}

int cmd_restore(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "last-good", no_argument, NULL, 'g' }, { "keep-memory", no_argument, NULL, 'k' },
		{ "help", no_argument, NULL, 'h' }, { 0 },
	};
	_cleanup_(json_decrefp) json_t *answer = NULL, *body = NULL;
	struct restore_opts o = { 0 };
	bool last_good;
	int r;

	if ((r = parse_opts(cmd, argc, argv, opts, restore_opt, &o)) != 0)
		return r < 0 ? EXIT_USAGE : 0;
	last_good = o.last_good;
	if (argc - optind != (last_good ? 1 : 2))
		return usage_error(cmd, "restore needs an agent NAME and either a snapshot name or --last-good");
	if (!names_ok(cmd, argv[optind], last_good ? NULL : argv[optind + 1]))
		return EXIT_USAGE;
	if (last_good)
		body = json_pack("{s:b}", "last_good", 1);
	else
		body = json_pack("{s:s}", "snapshot", argv[optind + 1]);
	if (o.keep_memory)
		json_object_set_new(body, "keep_memory", json_true());
	if (callf(ctl, "POST", body, &answer, "/v1/agents/%s/restore", argv[optind]))
		return 1;
	if (ctl->json)
		print_json(answer);
	else
		printf("agent '%s' restored to snapshot '%s' (state %s)\n", str(answer, "agent"), str(answer, "restored"),
		       str(answer, "state"));
	return 0;
}
