/* fleetctl host: the hypervisor hosts VM agents are placed on (#15, docs/multi-host.md). */
#include <getopt.h>
#include <string.h>

#include "common/names.h"
#include "ctl/commands.h"

static bool host_name_ok(const struct command *cmd, const char *name)
{
	const char *why;

	if (agent_name_check(name, &why) < 0) {
		usage_error(cmd, "invalid host name '%s': %s", name, why);
		return false;
	}
	return true;
}

struct host_opts {
	const struct command *cmd;
	struct ctl *ctl;
	json_t *body;
	bool undo;
};

static int host_opt(int c, const char *arg, void *data)
{
	struct host_opts *o = data;
	long v;

	switch (c) {
	case 'j':	/* `host ls --json`, as the issue writes it: the global --json */
		o->ctl->json = true;
		return 0;
	case 'u':
		o->undo = true;
		return 0;
	case 'x':
	case 'r':
		/* Range checks are fleetd's; here only "is it a number". */
		if (parse_long(arg, 0, 1L << 30, &v) < 0) {
			usage_error(o->cmd, "--%s needs a whole number, not '%s'", c == 'x' ? "max-agents" : "reserve-memory",
				    arg);
			return -1;
		}
		json_object_set_new(o->body, c == 'x' ? "max_agents" : "reserve_memory_mib", json_integer(v));
		return 0;
	}
	return -1;
}

/*
 * A reachable host whose read of its facts has been under way this long has
 * stopped answering (a read takes milliseconds): what is shown may be old.
 * Old facts alone mean nothing: fleetd reads them only when asked.
 */
#define FACTS_STALE_S 10

static void print_hosts(json_t *hosts)
{
	json_t *h;
	size_t i;

	printf("%-16s %-11s %-9s %-9s %-4s %10s %8s  %s\n", "NAME", "STATE", "LIBVIRT", "QEMU", "VIRT", "FREE MEM",
	       "AGENTS", "URI");
	json_array_foreach(hosts, i, h) {
		bool up = json_is_true(json_object_get(h, "reachable"));
		bool stale = up && json_is_integer(json_object_get(h, "refreshing_s")) &&
			     num(h, "refreshing_s") >= FACTS_STALE_S;
		_cleanup_free_ char *agents = num(h, "max_agents") > 0
			? xasprintf("%lld/%lld", num(h, "agents"), num(h, "max_agents")) : xasprintf("%lld", num(h, "agents"));
		_cleanup_free_ char *mem = up && json_is_integer(json_object_get(h, "free_memory_mib"))
			? xasprintf("%lldMiB", num(h, "free_memory_mib")) : xstrdup("-");

		printf("%-16s %-11s %-9s %-9s %-4s %10s %8s  %s\n", str(h, "name"),
		       !up ? "unreachable" : stale ? "stale" : json_is_true(json_object_get(h, "draining")) ? "draining" : "ready",
		       up ? str(h, "libvirt_version") : "-", up ? str(h, "qemu_version") : "-", up ? str(h, "virt") : "-",
		       mem, agents, str(h, "uri"));
		if (!up)
			printf("  %s: %s%s\n", str(h, "name"), str(h, "error"),
			       json_is_true(json_object_get(h, "draining")) ? " (and draining)" : "");
		else if (stale)
			printf("  %s: facts from %lld s ago; asked again %lld s ago, no answer yet%s\n", str(h, "name"),
			       num(h, "facts_age_s"), num(h, "refreshing_s"),
			       json_is_true(json_object_get(h, "draining")) ? " (and draining)" : "");
	}
}

int cmd_host(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "max-agents", required_argument, NULL, 'x' }, { "reserve-memory", required_argument, NULL, 'r' },
		{ "undo", no_argument, NULL, 'u' }, { "json", no_argument, NULL, 'j' }, { "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	struct host_opts o = { cmd, ctl, json_object(), false };
	json_t *j = NULL;
	const char *sub;
	int r, status = 1;

	if ((r = parse_opts(cmd, argc, argv, opts, host_opt, &o)) != 0) {
		json_decref(o.body);
		return r < 0 ? EXIT_USAGE : 0;
	}
	if (argc - optind < 1) {
		json_decref(o.body);
		return usage_error(cmd, "host needs add, ls, drain, undrain or rm");
	}
	sub = argv[optind++];
	/* Options belong to one subcommand each. */
	if ((json_object_size(o.body) && strcmp(sub, "add") != 0) || (o.undo && strcmp(sub, "drain") != 0)) {
		json_decref(o.body);
		return usage_error(cmd, "--max-agents and --reserve-memory go with 'host add', --undo with 'host drain'");
	}
	if (strcmp(sub, "ls") == 0) {
		json_decref(o.body);
		if (argc != optind)
			return usage_error(cmd, "host ls takes no argument");
		if (call(ctl, "GET", "/v1/hosts", NULL, &j))
			return 1;
		if (ctl->json)
			print_json(json_object_get(j, "hosts"));
		else
			print_hosts(json_object_get(j, "hosts"));
		json_decref(j);
		return 0;
	}
	if (strcmp(sub, "add") == 0) {
		if (argc - optind != 2 || !host_name_ok(cmd, argv[optind])) {
			json_decref(o.body);
			return argc - optind != 2 ? usage_error(cmd, "host add needs NAME and URI") : EXIT_USAGE;
		}
		json_object_set_new(o.body, "name", json_string(argv[optind]));
		json_object_set_new(o.body, "uri", json_string(argv[optind + 1]));
		r = call(ctl, "POST", "/v1/hosts", o.body, &j);
		json_decref(o.body);
		if (r)
			return 1;
		if (ctl->json)
			print_json(j);
		else
			printf("host '%s' added (libvirt %s, QEMU %s, %s)\n", str(j, "name"), str(j, "libvirt_version"),
			       str(j, "qemu_version"), json_is_string(json_object_get(j, "virt")) ? str(j, "virt") : "-");
		json_decref(j);
		return 0;
	}
	json_decref(o.body);
	if (argc - optind != 1)
		return usage_error(cmd, "host %s needs exactly one host NAME", sub);
	if (!host_name_ok(cmd, argv[optind]))
		return EXIT_USAGE;
	if (strcmp(sub, "drain") == 0 || strcmp(sub, "undrain") == 0) {
		bool draining = strcmp(sub, "drain") == 0 && !o.undo;
		json_t *body = json_pack("{s:b}", "draining", draining);

		r = callf(ctl, "PATCH", body, &j, "/v1/hosts/%s", argv[optind]);
		json_decref(body);
		if (r)
			return 1;
		if (ctl->json)
			print_json(j);
		else
			printf("host '%s' %s\n", argv[optind], draining ? "drains: no new agents are placed on it"
									 : "takes new agents again");
		status = 0;
	} else if (strcmp(sub, "rm") == 0) {
		if (callf(ctl, "DELETE", NULL, &j, "/v1/hosts/%s", argv[optind]))
			return 1;
		if (ctl->json)
			print_json(j);
		else
			printf("host '%s' removed\n", argv[optind]);
		status = 0;
	} else {
		return usage_error(cmd, "unknown host command '%s'", sub);
	}
	json_decref(j);
	return status;
}

/* fleetctl move AGENT HOST [--stop]: an agent to another host, offline (docs/multi-host.md "Moving an agent"). */
int cmd_move(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "stop", no_argument, NULL, 's' }, { "help", no_argument, NULL, 'h' }, { 0 },
	};
	json_t *body, *a = NULL;
	bool stop = false;
	int r;

	if ((r = parse_opts(cmd, argc, argv, opts, flag_opt, &stop)) != 0)
		return r < 0 ? EXIT_USAGE : 0;
	if (argc - optind != 2)
		return usage_error(cmd, "move needs an agent NAME and a HOST");
	if (!name_ok(cmd, argv[optind]) || !host_name_ok(cmd, argv[optind + 1]))
		return EXIT_USAGE;
	body = json_pack("{s:s, s:b}", "host", argv[optind + 1], "stop", stop);
	r = callf(ctl, "POST", body, &a, "/v1/agents/%s/move", argv[optind]);
	json_decref(body);
	if (r)
		return 1;
	if (ctl->json)
		print_json(a);
	else
		printf("agent '%s' moved to host %s (state %s)\n", str(a, "name"), str(a, "host"), str(a, "state"));
	json_decref(a);
	return 0;
}
