/* fleetd.conf parsing: good files, every kind of bad line, precedence. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/config.h"
#include "common/util.h"
#include "../tap.h"

static char dir[] = "/tmp/fleet-test-config-XXXXXX";

static char *write_conf(const char *name, const char *text)
{
	char *path = xasprintf("%s/%s", dir, name);
	FILE *f = fopen(path, "w");

	fputs(text, f);
	fclose(f);
	return path;
}

/*
 * The integer keys with the bounds and messages fleetd has always had:
 * min - 1 and max + 1 are refused with the message, min and max accepted.
 * Written out here, not read from config_defs, so a changed table fails.
 */
static const struct int_key {
	enum config_key key;
	long min, max;
	const char *why;
} int_keys[] = {
	{ CFG_MAX_BODY, 1024, 16777216, "must be a number of bytes from 1024 to 16777216" },
	{ CFG_USER_UID_MIN, 1000, 4000000000L, "must be a uid from 1000 to 4000000000" },
	{ CFG_USER_UID_MAX, 1000, 4000000000L, "must be a uid from 1000 to 4000000000" },
	{ CFG_VM_BOOT_TIMEOUT, 10, 3600, "must be a number of seconds from 10 to 3600" },
	{ CFG_MAX_CONNECTIONS, 1, 4096, "must be a number of connections from 1 to 4096" },
	{ CFG_REQUEST_TIMEOUT, 1, 3600, "must be a number of seconds from 1 to 3600" },
	{ CFG_VM_CONSOLE_MAX, 65536, 1073741824, "must be a number of bytes from 65536 to 1073741824" },
	{ CFG_RESTART_BACKOFF, 1, 3600000, "must be a number of milliseconds from 1 to 3600000" },
	{ CFG_RESTART_BACKOFF_MAX, 1, 3600000, "must be a number of milliseconds from 1 to 3600000" },
	{ CFG_EVENTS_KEEP_DAYS, 1, 3650, "must be a number of days from 1 to 3650" },
	{ CFG_MAX_CONCURRENT_RUNS, 0, 4096, "must be a number of runs from 0 to 4096" },
	{ CFG_BOOT_CONCURRENCY, 1, 64, "must be a number of agents from 1 to 64" },
	{ CFG_HOOKS_MAX_CONNECTIONS, 1, 65536, "must be a number of connections from 1 to 65536" },
	{ CFG_HOOKS_MAX_PER_SOURCE, 1, 65536, "must be a number of connections from 1 to 65536" },
	{ CFG_HOOKS_REQUEST_TIMEOUT, 1, 600, "must be a number of seconds from 1 to 600" },
	{ CFG_HOOKS_HEADER_MAX, 4096, 1048576, "must be a number of bytes from 4096 to 1048576" },
	{ CFG_WATCH_BUFFER, 4096, 16777216, "must be a number of bytes from 4096 to 16777216" },
};

static void check_int_keys(void)
{
	struct config c;
	char v[32];
	const char *why;

	config_init(&c);
	for (size_t i = 0; i < sizeof(int_keys) / sizeof(int_keys[0]); i++) {
		const struct int_key *k = &int_keys[i];
		const char *name = config_defs[k->key].key;

		snprintf(v, sizeof(v), "%ld", k->min - 1);
		why = NULL;
		is_int(config_set(&c, k->key, v, CFG_FROM_CMDLINE, 0, &why), -EINVAL, "%s %s (min - 1) refused", name, v);
		is_str(why, k->why, "%s %s: the message names the range", name, v);
		snprintf(v, sizeof(v), "%ld", k->min);
		is_int(config_set(&c, k->key, v, CFG_FROM_CMDLINE, 0, &why), 0, "%s %s (min) accepted", name, v);
		is_int(config_get_long(&c, k->key), k->min, "%s reads back as %ld", name, k->min);
		snprintf(v, sizeof(v), "%ld", k->max);
		is_int(config_set(&c, k->key, v, CFG_FROM_CMDLINE, 0, &why), 0, "%s %s (max) accepted", name, v);
		is_int(config_get_long(&c, k->key), k->max, "%s reads back as %ld", name, k->max);
		snprintf(v, sizeof(v), "%ld", k->max + 1);
		why = NULL;
		is_int(config_set(&c, k->key, v, CFG_FROM_CMDLINE, 0, &why), -EINVAL, "%s %s (max + 1) refused", name, v);
		is_str(why, k->why, "%s %s: the message names the range", name, v);
		why = NULL;
		is_int(config_set(&c, k->key, "12abc", CFG_FROM_CMDLINE, 0, &why), -EINVAL, "%s '12abc' refused", name);
		is_str(why, k->why, "%s '12abc': the same message", name);
		is_int(config_get_long(&c, k->key), k->max, "%s keeps its value after a refusal", name);
	}
	config_free(&c);
	/* Every key with a range is listed above, so a new one gets its bounds checked too. */
	for (int key = 0; key < CFG__COUNT; key++) {
		bool listed = false;

		for (size_t i = 0; i < sizeof(int_keys) / sizeof(int_keys[0]); i++)
			listed |= int_keys[i].key == (enum config_key)key;
		ok(listed == (config_defs[key].range.what != NULL), "%s: %s", config_defs[key].key,
		   listed ? "an integer key with a range" : "not an integer key");
	}
}

int main(void)
{
	struct config c, cmd;
	char *errors = NULL, *path;
	const char *why;
	int n;

	if (!mkdtemp(dir))
		return 1;

	/* Defaults when the default file is missing. */
	n = config_load(&c, "/nonexistent/fleetd.conf", false, NULL, &errors);
	is_int(n, 0, "a missing default config file is fine");
	is_str(config_get(&c, CFG_STATE_DIR), "/var/lib/fleet", "default state_dir");
	is_str(config_get(&c, CFG_SOCKET), "/run/fleet/fleetd.sock", "default socket");
	config_free(&c);

	/* hooks_public_url (#11): empty (the default) or an http(s) base URL without a query or trailing '/'. */
	config_init(&c);
	is_str(config_get(&c, CFG_HOOKS_PUBLIC_URL), "", "hooks_public_url defaults to empty");
	is_int(config_get_long(&c, CFG_EVENTS_KEEP_DAYS), 30, "events_keep_days defaults to 30");
	is_int(config_set(&c, CFG_HOOKS_PUBLIC_URL, "https://hooks.example.com/fleet", CFG_FROM_CMDLINE, 0, &why), 0,
	       "hooks_public_url https://hooks.example.com/fleet is taken");
	is_int(config_set(&c, CFG_HOOKS_PUBLIC_URL, "http://127.0.0.1:9000", CFG_FROM_CMDLINE, 0, &why), 0,
	       "hooks_public_url http://127.0.0.1:9000 is taken");
	for (const char *const *bad = (const char *const[]){ "ftp://x", "hooks.example.com", "https://x/",
							      "https://x/?a=1", "https://a b", NULL }; *bad; bad++)
		is_int(config_set(&c, CFG_HOOKS_PUBLIC_URL, *bad, CFG_FROM_CMDLINE, 0, &why), -EINVAL,
		       "hooks_public_url '%s' is refused", *bad);
	/* hooks_listen: none, or a numeric address and port. */
	is_str(config_get(&c, CFG_HOOKS_LISTEN), "127.0.0.1:8470", "hooks_listen defaults to 127.0.0.1:8470");
	is_str(config_get(&c, CFG_HOOKS_USER), "_fleet-hooks", "hooks_user defaults to _fleet-hooks");
	for (const char *const *good = (const char *const[]){ "none", "127.0.0.1:0", "0.0.0.0:8470", "[::1]:9000",
							       "[::]:65535", NULL }; *good; good++)
		is_int(config_set(&c, CFG_HOOKS_LISTEN, *good, CFG_FROM_CMDLINE, 0, &why), 0,
		       "hooks_listen %s is taken", *good);
	for (const char *const *bad = (const char *const[]){ "", "8470", "127.0.0.1", "localhost:8470", "::1:80",
							      "127.0.0.1:65536", "127.0.0.1:-1", "[::1]", "1.2.3.4:80x", NULL };
	     *bad; bad++)
		is_int(config_set(&c, CFG_HOOKS_LISTEN, *bad, CFG_FROM_CMDLINE, 0, &why), -EINVAL,
		       "hooks_listen '%s' is refused", *bad);
	for (const char *const *bad = (const char *const[]){ "", "Root", "9x", "a b", "abcdefghijklmnopqrstuvwxyz0123456", NULL };
	     *bad; bad++)
		is_int(config_set(&c, CFG_HOOKS_USER, *bad, CFG_FROM_CMDLINE, 0, &why), -EINVAL,
		       "hooks_user '%s' is refused", *bad);
	config_free(&c);

	/* user_nat_subnet6: a ULA prefix of length 64 to 120 with its host bits zero, or empty (no IPv6). */
	config_init(&c);
	is_str(config_get(&c, CFG_USER_NAT_SUBNET6), "fd8c:7a1e:f1ee::/64", "user_nat_subnet6 defaults to fd8c:7a1e:f1ee::/64");
	for (const char *const *good = (const char *const[]){ "", "fd00::/64", "fc12:3456:789a:1::/64", "fd8c::ff00/120",
							       NULL }; *good; good++)
		is_int(config_set(&c, CFG_USER_NAT_SUBNET6, *good, CFG_FROM_CMDLINE, 0, &why), 0,
		       "user_nat_subnet6 '%s' is taken", *good);
	for (const char *const *bad = (const char *const[]){ "fd00::", "fd00::/48", "fd00::/121", "2001:db8::/64",
							      "fd00::1/64", "10.0.0.0/8", "fd00::/6x", NULL }; *bad; bad++)
		is_int(config_set(&c, CFG_USER_NAT_SUBNET6, *bad, CFG_FROM_CMDLINE, 0, &why), -EINVAL,
		       "user_nat_subnet6 '%s' is refused", *bad);
	config_free(&c);

	/* metrics_listen: off by default, the same syntax as hooks_listen (loopback is fleetd's check, at start). */
	config_init(&c);
	is_str(config_get(&c, CFG_METRICS_LISTEN), "none", "metrics_listen defaults to none");
	is_str(config_get(&c, CFG_METRICS_ALLOW_REMOTE), "no", "metrics_allow_remote defaults to no");
	is_int(config_set(&c, CFG_METRICS_LISTEN, "[::1]:9470", CFG_FROM_CMDLINE, 0, &why), 0, "metrics_listen [::1]:9470 is taken");
	is_int(config_set(&c, CFG_METRICS_LISTEN, "localhost:9470", CFG_FROM_CMDLINE, 0, &why), -EINVAL,
	       "metrics_listen localhost:9470 is refused (numeric only)");
	is_int(config_set(&c, CFG_METRICS_ALLOW_REMOTE, "yes", CFG_FROM_CMDLINE, 0, &why), 0, "metrics_allow_remote yes");
	is_int(config_set(&c, CFG_METRICS_ALLOW_REMOTE, "true", CFG_FROM_CMDLINE, 0, &why), -EINVAL,
	       "metrics_allow_remote true is refused: %s", why);
	config_free(&c);

	n = config_load(&c, "/nonexistent/fleetd.conf", true, NULL, &errors);
	is_int(n, 1, "a missing --config file is an error");
	ok(errors && strstr(errors, "/nonexistent/fleetd.conf: cannot open"), "error names the file: %s", errors);
	config_free(&c);
	free(errors);
	errors = NULL;

	/* A good file with comments and blank lines. */
	path = write_conf("good.conf", "# fleet\n\nstate_dir = /srv/fleet\n  log_level=debug  \nsocket = /tmp/f.sock\n");
	n = config_load(&c, path, true, NULL, &errors);
	is_int(n, 0, "good file parses");
	is_str(config_get(&c, CFG_STATE_DIR), "/srv/fleet", "state_dir from file");
	is_str(config_get(&c, CFG_LOG_LEVEL), "debug", "whitespace around key and value is trimmed");
	is_int(c.source[CFG_STATE_DIR], CFG_FROM_FILE, "source recorded as file");
	is_int(c.line[CFG_LOG_LEVEL], 4, "line recorded");

	/* The command line wins over the file. */
	config_init(&cmd);
	ok(config_set(&cmd, CFG_STATE_DIR, "/opt/fleet", CFG_FROM_CMDLINE, 0, &why) == 0, "cmdline set");
	config_free(&c);
	n = config_load(&c, path, true, &cmd, &errors);
	is_str(config_get(&c, CFG_STATE_DIR), "/opt/fleet", "command line overrides the file");
	is_str(config_get(&c, CFG_SOCKET), "/tmp/f.sock", "file still applies to other keys");
	config_free(&c);
	ok(config_set(&cmd, CFG_STATE_DIR, "relative/dir", CFG_FROM_CMDLINE, 0, &why) == -EINVAL,
	   "relative state dir refused: %s", why);
	ok(config_set(&cmd, CFG_LOG_LEVEL, "loud", CFG_FROM_CMDLINE, 0, &why) == -EINVAL,
	   "bad log level refused: %s", why);
	config_free(&cmd);
	free(path);

	/* Every error is reported with FILE:LINE, and all of them at once. */
	path = write_conf("bad.conf",
			  "sokcet = /x\n"		/* 1: unknown key */
			  "just words\n"		/* 2: no '=' */
			  "log_level = loud\n"		/* 3: bad value */
			  "state_dir = rel\n"		/* 4: relative */
			  "max_body_bytes = 12\n"	/* 5: too small */
			  "socket = /a\n"
			  "socket = /b\n");		/* 7: duplicate */
	n = config_load(&c, path, true, NULL, &errors);
	is_int(n, 6, "six errors found");
	{
		char *l1 = xasprintf("%s:1: unknown key 'sokcet'", path);
		char *l2 = xasprintf("%s:2: expected 'key = value'", path);
		char *l3 = xasprintf("%s:3: log_level 'loud'", path);
		char *l4 = xasprintf("%s:4: state_dir 'rel' must be an absolute path", path);
		char *l5 = xasprintf("%s:5: max_body_bytes '12'", path);
		char *l7 = xasprintf("%s:7: 'socket' is set twice (first on line 6)", path);
		ok(errors && strstr(errors, l1), "unknown key reported as FILE:LINE");
		ok(errors && strstr(errors, l2), "line without '=' reported");
		ok(errors && strstr(errors, l3), "bad log level reported");
		ok(errors && strstr(errors, l4), "relative path reported");
		ok(errors && strstr(errors, l5), "bad number reported");
		ok(errors && strstr(errors, l7), "duplicate key reported");
		free(l1); free(l2); free(l3); free(l4); free(l5); free(l7);
	}
	printf("# errors were:\n# %s", errors);
	is_str(config_get(&c, CFG_LOG_LEVEL), "info", "a bad value leaves the default in place");
	config_free(&c);
	free(errors);
	errors = NULL;
	free(path);

	path = write_conf("group.conf", "socket_group = no-such-group-fleet\n");
	n = config_load(&c, path, true, NULL, &errors);
	is_int(n, 1, "an explicit socket group that does not exist is an error");
	ok(errors && strstr(errors, ":1: socket_group 'no-such-group-fleet': no such group"), "and says so");
	config_free(&c);
	free(errors);
	free(path);

	check_int_keys();

	path = xasprintf("rm -rf %s", dir);
	if (system(path) != 0)
		return 1;
	free(path);
	return tap_done();
}
