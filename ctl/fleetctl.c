/*
 * fleetctl: the operator's CLI. A thin client: one table row per command,
 * each handler packs what the user typed into an API call and prints the
 * answer; fleetd validates everything again. Exit codes: 0 success, 1 an
 * error from fleetd (or fleetd unreachable), 2 a usage error.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "ctl/commands.h"

#define DEFAULT_SOCKET "/run/fleet/fleetd.sock"

static CMD_HANDLER(cmd_help);

#define SNAPSHOT_OPTIONS_HELP \
	"  --snapshot-policy P when fleet snapshots the agent by itself: none (default),\n" \
	"                      before-run (before every run), or cron (on a schedule)\n" \
	"  --snapshot-schedule CRON  5-field cron spec in the host's time zone, e.g.\n" \
	"                      '0 * * * *' or '@daily'; implies --snapshot-policy cron\n" \
	"  --snapshot-keep N   keep the newest N snapshots plus pinned ones and the newest\n" \
	"                      good one, delete the rest (default 0: keep all)\n"

#define RUN_OPTIONS_HELP \
	"  --run-timeout S     a run still going after S seconds is killed: timed-out\n" \
	"                      (default 3600)\n" \
	"  --max-queued N      refuse to queue a run while N of its runs wait (default 100)\n" \
	"  --retry-interrupted N  queue a run cut off by fleetd stopping again, up to N\n" \
	"                      times (default 0: it is marked interrupted)\n" \
	"  --memory-quota MIB  what its memory store (~/memory) may hold (default 64)\n" \
	"  --egress-allow LIST with --network nat: reach only these (list the resolvers), e.g.\n" \
	"                      api.github.com:443,10.9.0.0/24; names are resolved by fleetd\n" \
	"                      at each start and every 5 minutes; everything else is refused\n" \
	"                      and counted ('show'); \"\" (set) removes the limit\n" \
	"  --secret-files on|off  runs get the agent's secrets as files on a tmpfs that\n" \
	"                      lasts the run ($FLEET_SECRETS_DIR), not as variables\n" \
	"                      (user agents; default off)\n" \
	"  --autostart on|off  start it when fleetd first starts after the host booted\n" \
	"                      (default off; docs/operations.md)\n" \
	"  --boot-priority N   the order of those starts: higher first, -1000 to 1000\n" \
	"                      (default 0; at most boot_concurrency at a time)\n"

static const struct command commands[] = {
	{ "status", "", "Show whether fleetd runs, its version, uptime and agent count.", NULL, cmd_status },
	{ "create", "NAME [--backend vm|user] [--memory MIB] [--vcpus N] [--disk GIB] [--network none|nat]\n"
	  "                [--restart on-failure|always|never] [--health-cmd CMD] [--health-interval S]\n"
	  "                [--auto-rollback] [--command CMD] [--snapshot-policy none|before-run|cron]\n"
	  "                [--snapshot-schedule CRON] [--snapshot-keep N] [--run-timeout S]\n"
	  "                [--max-queued N] [--retry-interrupted N] [--memory-quota MIB]\n"
	  "                [--egress-allow LIST] [--secret-files on|off] [--autostart on|off]\n"
	  "                [--boot-priority N] [--host HOST]",
	  "Create an agent and its isolated environment.",
	  "NAME is 1 to 32 characters: a lower-case letter, then lower-case letters, digits or '-'.\n"
	  "  --backend vm|user   a libvirt VM (default) or a Unix user on the host\n"
	  "  --memory MIB        64 to 65536 (default 256): a VM's memory, a user agent's\n"
	  "                      cgroup memory limit (and its /tmp's size)\n"
	  "  --vcpus N           1 to 64 (default 1): a VM's CPUs, a user agent's CPU quota\n"
	  "  --disk GIB          guest disk size, 1 to 1024 (default 2; vm only)\n"
	  "  --network none|nat  no network (default) or a NAT network of its own: never the\n"
	  "                      host, other agents or the metadata address (docs/security.md)\n"
	  "  --restart POLICY    when the environment stops without being asked: restart it\n"
	  "                      on-failure (default: crashed or killed), always, or never\n"
	  "  --health-cmd CMD    its health check, run as the agent (default: agentd health;\n"
	  "                      user agents: a write to the home)\n"
	  "  --health-interval S seconds between checks while it runs (default 60; 0: none)\n"
	  "  --auto-rollback     when a check fails, restore the newest good snapshot\n"
	  "  --command CMD       what the agent runs when triggered\n"
	  "  --host HOST         the hypervisor host of a VM agent (fleetctl host ls); default:\n"
	  "                      the reachable, non-draining host with room and most free memory\n"
	  SNAPSHOT_OPTIONS_HELP RUN_OPTIONS_HELP,
	  cmd_create },
	{ "list", "", "List agents with their backend and state.", NULL, cmd_list },
	{ "show", "NAME", "Show one agent in detail.", NULL, cmd_show },
	{ "rm", "NAME [--force]", "Remove an agent, its environment and everything it owns.",
	  "  --force   remove even while the agent is running\n", cmd_rm },
	{ "start", "NAME", "Start an agent's environment (boot its VM).", NULL, cmd_lifecycle },
	{ "stop", "NAME [--timeout S]", "Stop an agent's environment: clean shutdown, forced after S seconds.",
	  "  --timeout S   seconds to wait for a clean shutdown (default 30)\n", cmd_lifecycle },
	{ "restart", "NAME [--timeout S]", "Stop, then start an agent's environment.",
	  "  --timeout S   seconds to wait for a clean shutdown (default 30)\n", cmd_lifecycle },
	{ "exec", "NAME [--root] [--timeout S] [--env NAME=VALUE]... [--secrets] [--secret-files] [--no-stdin] -- CMD [ARG]...",
	  "Run a command in an agent's environment; exit with its exit code.",
	  "Output streams back as it comes; stdin is forwarded when it is not a terminal\n"
	  "(at most 12 MiB). Exit status: the command's, 128+N if it was killed by signal N,\n"
	  "124 if it timed out, 1 if fleetd could not run it.\n"
	  "  --root          run as the environment's root (vm agents)\n"
	  "  --timeout S     kill the command after S seconds\n"
	  "  --env N=V       set an environment variable (repeatable)\n"
	  "  --secrets       give the command the agent's secrets as environment\n"
	  "                  variables, as its runs get them ('fleetctl secret')\n"
	  "  --secret-files  give them as files, one per key, on a tmpfs that exists\n"
	  "                  for this command only; $FLEET_SECRETS_DIR names it\n"
	  "                  (user agents; never on a disk)\n"
	  "  --no-stdin      do not read stdin\n",
	  cmd_exec },
	{ "console", "NAME [--bytes N]", "Show the end of a VM agent's console log.",
	  "  --bytes N   how much of the end to show (default 65536)\n", cmd_console },
	{ "snapshot", "NAME [SNAP] [--note TEXT] [--pin]  |  snapshot rm|pin|unpin NAME SNAP",
	  "Take a snapshot of an agent's environment, or delete one.",
	  "A running VM gets a full checkpoint (memory and disk: processes come back on\n"
	  "restore); a stopped VM a disk snapshot; a user agent a copy of its home. SNAP\n"
	  "defaults to snap-YYYYmmdd-HHMMSS.\n"
	  "  --note TEXT   a note shown by 'fleetctl snapshots'\n"
	  "  --pin         keep it whatever the retention policy says\n"
	  "'snapshot pin NAME SNAP' and 'snapshot unpin NAME SNAP' change that later; an\n"
	  "unpinned snapshot past the agent's --snapshot-keep is deleted at once.\n",
	  cmd_snapshot },
	{ "snapshots", "NAME", "List an agent's snapshots.", NULL, cmd_snapshots },
	{ "restore", "NAME SNAP | NAME --last-good  [--keep-memory]", "Roll an agent back to a snapshot.",
	  "The memory store (~/memory) is part of the snapshot and rolls back with it.\n"
	  "  --last-good     the newest snapshot marked good by a health check\n"
	  "  --keep-memory   roll the machine back but keep the memory store as it is now\n"
	  "                  (exported before, imported after the restore)\n", cmd_restore },
	{ "memory", "NAME ls | get KEY | put KEY | rm KEY | export | import",
	  "Read and write an agent's memory store (~/memory in its environment).",
	  "KEY is 1 to 128 of A-Z a-z 0-9 . _ -, not starting with a dot.\n"
	  "  ls         the keys with their sizes and modification times\n"
	  "  get KEY    write the value to stdout, byte for byte (on a terminal, control\n"
	  "             characters are made visible)\n"
	  "  put KEY    store stdin as the value (atomic: the old value or the new one)\n"
	  "  rm KEY     remove the key\n"
	  "  export     write the whole store as a tar archive to stdout\n"
	  "  import     replace the whole store with the tar archive on stdin; refused\n"
	  "             (nothing changed) if it holds links, devices, setuid bits, paths\n"
	  "             out of the store, or more than the agent's --memory-quota\n",
	  cmd_memory },
	{ "set", "NAME [--command CMD] [--health-cmd CMD | --default-health] [--health-interval S]\n"
	  "             [--auto-rollback on|off] [--snapshot-policy none|before-run|cron]\n"
	  "             [--snapshot-schedule CRON] [--snapshot-keep N] [--run-timeout S]\n"
	  "             [--max-queued N] [--retry-interrupted N] [--memory-quota MIB]\n"
	  "             [--egress-allow LIST] [--secret-files on|off] [--network none|nat]\n"
	  "             [--autostart on|off] [--boot-priority N]",
	  "Change an agent's command, health check, automatic rollback, snapshot policy, run limits,\n"
	  "memory quota, egress, secret files, network and autostart.",
	  "  --command CMD       what the agent runs when triggered (from the next run on)\n"
	  "  --network none|nat  user agents, stopped: make or remove its network now (none: also\n"
	  "                      --egress-allow '' if it has a list); not for vm agents\n"
	  SNAPSHOT_OPTIONS_HELP RUN_OPTIONS_HELP, cmd_set },
	{ "health", "NAME", "Run an agent's health check now (exit 0 healthy, 3 unhealthy).", NULL, cmd_health },
	{ "trigger", "NAME [--wait] [--payload FILE|-]", "Queue a run of the agent's command (as a webhook or schedule would).",
	  "Runs of one agent go one at a time, oldest first; at most max_concurrent_runs\n"
	  "(fleetd.conf) over all agents. A stopped environment is started first; with\n"
	  "--snapshot-policy before-run a snapshot is taken first; the health check runs\n"
	  "after. The command runs as the agent; its stdin is the event as JSON (source\n"
	  "\"manual\", the payload as body), its environment has FLEET_RUN_ID, FLEET_TRIGGER,\n"
	  "FLEET_AGENT, FLEET_EVENT_SOURCE, FLEET_EVENT_TYPE and FLEET_DELIVERY_ID; its\n"
	  "output goes to the run's log. Refused while the agent's --max-queued runs wait.\n"
	  "  --wait           wait for the run, print its log, exit with its exit code\n"
	  "                   (124 if it timed out, 1 if it ended without one)\n"
	  "  --payload FILE   the event's body: FILE's bytes, or stdin's for '-' (at most 1 MiB)\n",
	  cmd_trigger },
	{ "runs", "NAME [ID] [--limit N]", "List an agent's runs, or show one with the end of its log.",
	  "States: queued, running, succeeded, failed, timed-out, cancelled, interrupted.\n"
	  "  --limit N   show the newest N runs (default 20)\n", cmd_runs },
	{ "logs", "NAME ID [-f]", "Print a run's output; with -f, follow it until the run ends.",
	  "  -f, --follow   keep printing what the run writes until it ends\n", cmd_logs },
	{ "cancel", "NAME ID", "Cancel a run: a queued one never runs; a running one is killed.",
	  "A running run's whole process tree in the environment is killed; it ends as\n"
	  "'cancelled'. A run that is over already is an error.\n", cmd_cancel },
	{ "hook", "add NAME --source SOURCE [--route ROUTE] [--events LIST] [--header H] [--public-url URL]\n"
	  "              [--generate]  |  hook ls [NAME]  |  hook rm NAME ROUTE\n"
	  "              |  hook rotate ROUTE [--grace D] [--generate]",
	  "Subscribe an agent to a signed webhook route; list, remove, or rotate a route's secret.",
	  "'hook add' creates the route (its URL is /hooks/ROUTE; ROUTE defaults to NAME-SOURCE)\n"
	  "with the secret read from standard input, never from the command line, or\n"
	  "subscribes NAME to the existing route of that name. It prints the URL to give\n"
	  "the sender. A route goes with its last subscriber; removing an agent removes\n"
	  "its subscriptions.\n"
	  "  --source S        github, slack, twilio, datadog, standard (Standard Webhooks;\n"
	  "                    its secret is whsec_BASE64) or hmac (HMAC-SHA256 of the body)\n"
	  "  --events LIST     only these event types, comma-separated (github: push,\n"
	  "                    pull_request.opened; slack: event.type)\n"
	  "  --generate        make a random secret and print it once\n"
	  "  --header H        hmac: the signature's header (default X-Signature);\n"
	  "                    datadog: the secret's header (default X-Fleet-Secret)\n"
	  "  --encoding E      hmac: hex (default) or base64    --prefix P  hmac: e.g. sha256=\n"
	  "  --auth header|basic  datadog: the secret in a header (default), or basic auth\n"
	  "                    (the secret is USER:PASSWORD)\n"
	  "  --delivery-field F  datadog: the payload field that holds the delivery id (id)\n"
	  "  --public-url URL  this route's base URL instead of fleetd's hooks_public_url\n"
	  "  --max-body N      largest delivery in bytes (default 1048576)\n"
	  "'hook ls' never shows a secret. 'hook rotate ROUTE' reads the new secret from\n"
	  "standard input (--generate: makes one and prints it once); the old one keeps\n"
	  "working for --grace (default 24h; 90m, 7d...).\n",
	  cmd_hook },
	{ "events", "[--route ROUTE] [--limit N]", "Show the webhook deliveries that arrived and what they caused.",
	  "  --route ROUTE   only this route's\n"
	  "  --limit N       the newest N (default 50, at most 10000)\n", cmd_events },
	{ "schedule", "add NAME 'CRON' [--tz ZONE] [--catch-up once|skip] [--payload FILE|-]\n"
	  "                  |  schedule ls [NAME]  |  schedule rm NAME ID",
	  "Queue runs of an agent on a cron schedule (cron triggers); list or remove them.",
	  "CRON is five fields (minute hour day-of-month month day-of-week, e.g.\n"
	  "'30 9 * * 1-5') or @hourly, @daily, @weekly, @monthly. Each slot queues one\n"
	  "run with trigger 'cron' (as 'fleetctl trigger' does).\n"
	  "  --tz ZONE           the time zone of CRON, from the system's tz database\n"
	  "                      (e.g. Europe/Berlin, UTC; default: the host's zone)\n"
	  "  --catch-up once|skip  slots missed while fleetd was down run once (default)\n"
	  "                      or not at all; never once per missed slot\n"
	  "  --payload FILE|-    text (at most 1 MiB) kept with the schedule for its runs\n"
	  "'schedule ls' lists all schedules (or one agent's) with their next slot; the\n"
	  "schedules of an agent go with it when it is removed.\n",
	  cmd_schedule },
	{ "secret", "set NAME KEY [--trim-newline] < VALUE  |  secret ls NAME  |  secret rm NAME KEY",
	  "Set, list or remove an agent's secrets (credentials its runs get as environment variables).",
	  "KEY is an environment variable name ([A-Za-z_][A-Za-z0-9_]*; not FLEET_*,\n"
	  "HOME, USER, LOGNAME, SHELL or PATH). The value (at most 64 KiB, no NUL byte)\n"
	  "is read from standard input, never from the command line: from a terminal\n"
	  "one line, not echoed; from a pipe or file every byte up to its end, exactly.\n"
	  "  --trim-newline   drop one trailing newline (as 'echo VALUE |' adds)\n"
	  "fleetd stores it encrypted; every run of the agent that starts after 'set'\n"
	  "gets it in its environment ('exec --secrets' too). 'secret ls' shows names,\n"
	  "sizes and dates, never values. Secrets go with their agent when it is removed.\n",
	  cmd_secret },
	{ "backup", "DIR [--with-disks]", "Back up the fleet into a new directory (fleetd --restore-from brings it back).",
	  "  --with-disks   also each user agent's snapshots, and each VM agent's disks\n"
	  "                 (its overlay with its snapshots, memory disk, seed, keys; a\n"
	  "                 running guest is paused while they are copied)\n"
	  "DIR is an absolute path on fleetd's host that does not exist yet (or is an empty\n"
	  "directory of root's); fleetd makes it 0700. It gets a consistent copy of the\n"
	  "database, the secrets host key sealed with a passphrase read from stdin (one\n"
	  "line, never an argument; keep it: a restore asks for it), each user agent's home\n"
	  "with its memory store, and last manifest.json: every file's size and SHA-256.\n"
	  "A directory without manifest.json is an incomplete backup.\n", cmd_backup },
	{ "audit", "[--limit N]", "Show the audit log: who changed what, when, and the outcome.",
	  "  --limit N   show the newest N records (default 50, at most 10000)\n", cmd_audit },
	{ "watch", "[NAME]", "Follow what happens (to one agent, or to all) as it happens, until Ctrl-C.",
	  "One line per event: agent state changes, creates and removes, runs queued,\n"
	  "started and finished, snapshots, restores, rollbacks, health results and\n"
	  "webhook deliveries (those only without NAME). With --json each line is\n"
	  "fleetd's JSON event (docs/api.md). A watcher that reads too slowly is cut\n"
	  "off by fleetd (exit 1), never buffered without bound.\n", cmd_watch },
	{ "image", "ls  |  image rm ID", "List the stored guest images and who uses each, or remove an unused one.",
	  "Every VM agent keeps the image it was created from (its disk's base) in the\n"
	  "image store, whatever is rebuilt in image_dir later. 'image ls' shows each\n"
	  "stored image, whether it is the one now in image_dir (CURRENT), and which\n"
	  "agents use it: as the base of their disk, as the kernel and initramfs they\n"
	  "boot, or through snapshots taken before an upgrade. 'image rm ID' (a unique\n"
	  "prefix will do) removes an image no agent uses, and refuses otherwise.\n",
	  cmd_image },
	{ "host", "ls [--json]  |  host add NAME URI [--max-agents N] [--reserve-memory MIB]  |  host drain NAME [--undo]\n"
	  "                |  host undrain NAME  |  host rm NAME",
	  "List, add, drain or remove the hypervisor hosts VM agents are placed on.",
	  "A host is a libvirt URI (qemu+ssh://root@host/system, qemu+tls://host/system);\n"
	  "nothing of fleet's is installed there (docs/multi-host.md). 'local' is fleetd's\n"
	  "own libvirt_uri, there without 'host add'. NAME is checked as an agent's name.\n"
	  "  add        connect to URI now (refused with libvirt's error if it does not answer)\n"
	  "  --max-agents N        place at most N agents there (default 0: no limit)\n"
	  "  --reserve-memory MIB  keep MIB of its free memory for the host (default 0)\n"
	  "  ls         reachable or not (and why), libvirt and QEMU versions, KVM or TCG,\n"
	  "             free memory, agents placed (of at most)\n"
	  "  drain      place no new agents there (--undo, or 'host undrain': again)\n"
	  "  rm         forget the host and close its connection; refused while agents are\n"
	  "             placed on it\n",
	  cmd_host },
	{ "move", "NAME HOST [--stop]", "Move a VM agent to another host, offline (its disks, snapshots and domain).",
	  "Copies the stopped agent's disks (with their snapshots), its memory disk and\n"
	  "its snapshots' definitions to HOST through libvirt's storage API, defines it\n"
	  "there, records the new host, then removes it from the old one. It keeps its\n"
	  "name, secrets, memory, hooks, schedules and history. HOST's limits apply as\n"
	  "for a new agent there (draining, --max-agents, --reserve-memory). A failed or\n"
	  "interrupted move leaves the agent whole where it was (docs/multi-host.md).\n"
	  "  --stop   stop a running agent first (without it a running agent is refused)\n",
	  cmd_move },
	{ "upgrade", "NAME", "Make a VM agent boot the image now in image_dir (new agentd, kernel).",
	  "The agent keeps its disk (still on the base it was made on); from its next\n"
	  "start it boots the current image's kernel and initramfs, which install that\n"
	  "image's agentd and dropbear on its disk. A running agent: 'fleetctl restart'.\n",
	  cmd_upgrade },
	{ "apply", "FILE [--dry-run] [--prune]", "Make the fleet match a fleet file (agents, secrets, schedules, hooks).",
	  "FILE is YAML (docs/apply.md): agents with their settings, secrets by reference\n"
	  "(from_file, from_env; never a value), schedules, webhook routes and their\n"
	  "subscribers. apply reads the fleet, prints each change and makes it; a second\n"
	  "apply prints 'no changes'. A file with an error (FILE:LINE:COLUMN) or a change\n"
	  "that cannot be made (a vm's disk, a route's settings...) changes nothing.\n"
	  "A setting the file leaves out goes back to its default (the plan says so).\n"
	  "  --dry-run   print the plan, field by field, and change nothing\n"
	  "  --prune     also remove agents, secrets, schedules and subscriptions the\n"
	  "              file does not name (never without it)\n", cmd_apply },
	{ "export", "", "Write the fleet as a fleet file (YAML) to standard output.",
	  "Secrets are written as references to fill: from_env FLEET_SECRET_AGENT_KEY and\n"
	  "FLEET_HOOK_SECRET_ROUTE (docs/apply.md); schedules' payloads inline; 'apply'\n"
	  "of the file on an empty fleet makes the same fleet.\n", cmd_export },
	{ "doctor", "", "Check the host fleet runs on; say what to fix (exit 1 on any FAIL).",
	  "Each line is OK, WARN or FAIL, what was found and, unless OK, the fix: fleetd\n"
	  "reachable and who may use its socket; libvirtd and its version; KVM or the\n"
	  "TCG fallback; the guest image and its agentd; fleet's firewall table (with NAT\n"
	  "agents); free space and inodes of the state dir; cgroup controllers for user\n"
	  "agents; the clock synchronised; the webhook listener. Without fleetd it says\n"
	  "so (FAIL) and checks what it can from here. --json: the same as JSON.\n",
	  cmd_doctor },
	{ "help", "[COMMAND]", "Show help for fleetctl or one command.", NULL, cmd_help },
};

static const struct command *find_command(const char *name)
{
	for (size_t i = 0; i < ARRAY_SIZE(commands); i++)
		if (strcmp(commands[i].name, name) == 0)
			return &commands[i];
	return NULL;
}

/*
 * --commands (not in the help: for tools): every command, one a line, from
 * this table. The bash completion and the man page check read it.
 */
static void list_commands(void)
{
	for (size_t i = 0; i < ARRAY_SIZE(commands); i++)
		puts(commands[i].name);
}

static void usage(FILE *out)
{
	fprintf(out,
		"Usage: fleetctl [-s SOCKET] [--json] COMMAND [ARG]...\n"
		"Control fleetd, the keeper of isolated per-agent environments.\n"
		"\n"
		"  -s, --socket SOCKET  fleetd's control socket (default $FLEET_SOCKET, else " DEFAULT_SOCKET ")\n"
		"      --json           print fleetd's JSON answers instead of tables\n"
		"  -h, --help           show this help\n"
		"      --version        show the version\n"
		"\nCommands:\n");
	for (size_t i = 0; i < ARRAY_SIZE(commands); i++)
		fprintf(out, "  %-8s %s\n", commands[i].name, commands[i].summary);
	fprintf(out, "\nExit status: 0 on success, 1 when fleetd reports an error, 2 on a usage error.\n"
		     "'fleetctl help COMMAND' shows a command's arguments.\n");
}

static int cmd_help(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	const struct command *c;

	if (argc < 2) {
		usage(stdout);
		return 0;
	}
	if (!(c = find_command(argv[1])))
		return usage_error(NULL, "unknown command '%s'", argv[1]);
	print_command_help(c, stdout);
	return 0;
}

/*
 * jansson's hash seed from getrandom, before the first object: left to
 * itself it opens /dev/urandom (three more system calls, an fd without
 * O_CLOEXEC). Where getrandom cannot answer at once, jansson does as before.
 */
static void seed_json(void)
{
	size_t seed = 0;

	if (getrandom(&seed, sizeof(seed), GRND_NONBLOCK) == (ssize_t)sizeof(seed) && seed != 0)
		json_object_seed(seed);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, 's' }, { "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' }, { "version", no_argument, NULL, 'V' },
		{ "commands", no_argument, NULL, 'C' }, { 0 },
	};
	struct ctl ctl = { .socket = getenv("FLEET_SOCKET") };
	const struct command *cmd;
	int c;

	if (!ctl.socket || !*ctl.socket)
		ctl.socket = DEFAULT_SOCKET;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+s:h", opts, NULL)) != -1) {
		switch (c) {
		case 's': ctl.socket = optarg; break;
		case 'j': ctl.json = true; break;
		case 'h': usage(stdout); return 0;
		case 'V': printf("fleetctl %s\n", PACKAGE_VERSION); return 0;
		case 'C': list_commands(); return 0;
		default:
			return usage_error(NULL, "unknown option '%s' or missing value", argv[optind - 1]);
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return EXIT_USAGE;
	}
	if (!(cmd = find_command(argv[optind])))
		return usage_error(NULL, "unknown command '%s'", argv[optind]);
	seed_json();
	return cmd->run(&ctl, cmd, argc - optind, argv + optind);
}
