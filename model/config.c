/*
 * config: see config.h. Syntax of fleetd.conf: one "key = value" per line,
 * '#' starts a comment line, blank lines are ignored, a key may appear once.
 */
#include "model/config.h"

#include <errno.h>
#include <grp.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <stdarg.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "model/resolvers.h"

static int check_abs_path(const char *v, const char **why)
{
	if (v[0] != '/') {
		*why = "must be an absolute path";
		return -EINVAL;
	}
	if (strlen(v) > 100) {
		/* Unix socket paths are capped at 108 bytes; keep every path under that. */
		*why = "path is longer than 100 characters";
		return -EINVAL;
	}
	return 0;
}

static int check_level(const char *v, const char **why)
{
	if (log_level_from_string(v) < 0) {
		*why = "must be one of debug, info, notice, warning, err";
		return -EINVAL;
	}
	return 0;
}

static int check_group(const char *v, const char **why)
{
	if (*v == '\0')
		return 0;	/* empty: root only */
	for (const char *p = v; *p; p++)
		if (!(*p == '-' || *p == '_' || (*p >= 'a' && *p <= 'z') ||
		      (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9'))) {
			*why = "is not a valid group name";
			return -EINVAL;
		}
	return 0;
}

static int check_log_file(const char *v, const char **why)
{
	if (*v == '\0')
		return 0;	/* empty: <state_dir>/fleetd.log */
	return check_abs_path(v, why);
}

static int check_uri(const char *v, const char **why)
{
	if (!strstr(v, ":///") && !strstr(v, "://")) {
		*why = "must be a libvirt URI such as qemu:///system";
		return -EINVAL;
	}
	return 0;
}

/* An IPv4 network A.B.C.D/P (P 8..30, host bits zero) to cut into one /30 per user agent. */
static int check_nat_subnet(const char *v, const char **why)
{
	char addr[INET_ADDRSTRLEN];
	const char *slash = strchr(v, '/');
	struct in_addr in;
	long prefix;

	*why = "must be a private IPv4 network A.B.C.D/P with P from 8 to 30 and the host bits zero";
	if (!slash || (size_t)(slash - v) >= sizeof(addr))
		return -EINVAL;
	memcpy(addr, v, (size_t)(slash - v));
	addr[slash - v] = '\0';
	if (inet_pton(AF_INET, addr, &in) != 1 || parse_long(slash + 1, 8, 30, &prefix) < 0)
		return -EINVAL;
	if (ntohl(in.s_addr) & (0xffffffffu >> prefix))
		return -EINVAL;
	return 0;
}

/* A ULA prefix (fc00::/7) of length 64 to 120, host bits zero; "" turns IPv6 off for user agents. */
static int check_nat_subnet6(const char *v, const char **why)
{
	char addr[INET6_ADDRSTRLEN];
	const char *slash = strchr(v, '/');
	unsigned char in[16];
	long prefix;

	*why = "must be an IPv6 unique local prefix (fc00::/7) ADDR/P with P from 64 to 120 and the host bits zero, "
	       "or empty for no IPv6";
	if (*v == '\0')
		return 0;
	if (!slash || (size_t)(slash - v) >= sizeof(addr))
		return -EINVAL;
	memcpy(addr, v, (size_t)(slash - v));
	addr[slash - v] = '\0';
	if (inet_pton(AF_INET6, addr, in) != 1 || parse_long(slash + 1, 64, 120, &prefix) < 0 || (in[0] & 0xfe) != 0xfc)
		return -EINVAL;
	for (long bit = prefix; bit < 128; bit++)
		if (in[bit / 8] & (0x80 >> (bit % 8)))
			return -EINVAL;
	return 0;
}

static int check_dns(const char *v, const char **why)
{
	struct resolvers r;

	return strcmp(v, "auto") == 0 ? 0 : resolvers_parse(v, &r, why);
}

static int check_image_dir(const char *v, const char **why)
{
	if (*v == '\0')
		return 0;	/* empty: <state_dir>/images */
	return check_abs_path(v, why);
}

/* Empty, or http(s)://HOST[:PORT][/PATH] of printable characters, without a query or a trailing '/'. */
static int check_public_url(const char *v, const char **why)
{
	size_t n = strlen(v);

	if (n == 0)
		return 0;
	if ((strncmp(v, "http://", 7) != 0 && strncmp(v, "https://", 8) != 0) || n > 200 ||
	    v[n - 1] == '/' || strpbrk(v, "?#\"'<> ") || v[strlen(v) - 1] == ':') {
		*why = "must be http:// or https:// and a host (at most 200 characters, no query, no trailing '/')";
		return -EINVAL;
	}
	for (const char *p = v; *p; p++)
		if ((unsigned char)*p <= 0x20 || (unsigned char)*p >= 0x7f) {
			*why = "must be printable ASCII";
			return -EINVAL;
		}
	return 0;
}

static int check_yes_no(const char *v, const char **why)
{
	*why = "must be yes or no";
	return strcmp(v, "yes") == 0 || strcmp(v, "no") == 0 ? 0 : -EINVAL;
}

/* none, or IPv4:PORT or [IPv6]:PORT with numeric address and port (0: any free port). */
static int check_listen(const char *v, const char **why)
{
	char host[64];
	const char *colon;
	struct addrinfo hints = { .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV, .ai_socktype = SOCK_STREAM }, *ai;
	size_t hl;
	long port;

	if (strcmp(v, "none") == 0)
		return 0;
	*why = "must be none, IPV4:PORT or [IPV6]:PORT with a numeric address and a port from 0 to 65535";
	if (!(colon = strrchr(v, ':')) || parse_long(colon + 1, 0, 65535, &port) < 0)
		return -EINVAL;
	hl = (size_t)(colon - v);
	if (hl >= 2 && v[0] == '[' && v[hl - 1] == ']') {
		v++;
		hl -= 2;
	} else if (memchr(v, ':', hl)) {
		return -EINVAL;		/* an IPv6 address needs its brackets */
	}
	if (hl == 0 || hl >= sizeof(host))
		return -EINVAL;
	memcpy(host, v, hl);
	host[hl] = '\0';
	if (getaddrinfo(host, colon + 1, &hints, &ai) != 0)
		return -EINVAL;
	freeaddrinfo(ai);
	return 0;
}

/* A system user's name: what useradd accepts, kept to [a-z_][a-z0-9_-]{0,31}. */
static int check_user_name(const char *v, const char **why)
{
	size_t n = strlen(v);

	if (n == 0 || n > 32 || !((v[0] >= 'a' && v[0] <= 'z') || v[0] == '_') ||
	    strspn(v, "abcdefghijklmnopqrstuvwxyz0123456789_-") != n) {
		*why = "must be 1 to 32 of a-z, 0-9, '_' and '-', starting with a letter or '_'";
		return -EINVAL;
	}
	return 0;
}

/*
 * An integer key: a whole number within its row's range. The message is
 * built from the row into that key's own slot (always the same text), so
 * *why stays valid, as the other checks' static strings do.
 */
static int check_range(enum config_key key, const char *v, const char **why)
{
	static char msg[CFG__COUNT][96];
	const struct config_range *rg = &config_defs[key].range;
	long n;

	if (parse_long(v, rg->min, rg->max, &n) < 0) {
		snprintf(msg[key], sizeof(msg[key]), "must be %s from %ld to %ld", rg->what, rg->min, rg->max);
		*why = msg[key];
		return -EINVAL;
	}
	return 0;
}

/* Above the ranges Debian gives to regular and system users, below nobody (65534) is not required. */
#define UID_RANGE { 1000, 4000000000L, "a uid" }

const struct config_def config_defs[CFG__COUNT] = {
	[CFG_STATE_DIR] = { "state_dir", "state-dir", "DIR", "/var/lib/fleet", false,
		"directory for the database, keys, disks and snapshots", check_abs_path },
	[CFG_SOCKET] = { "socket", "socket", "PATH", "/run/fleet/fleetd.sock", false,
		"control socket (HTTP/JSON)", check_abs_path },
	[CFG_SOCKET_GROUP] = { "socket_group", "socket-group", "GROUP", "fleet", true,
		"group allowed to use the control socket (default 'fleet' if it exists, else root only; empty: root only)",
		check_group },
	[CFG_LOG_LEVEL] = { "log_level", "log-level", "LEVEL", "info", true,
		"debug, info, notice, warning or err", check_level },
	[CFG_LOG_FILE] = { "log_file", "log-file", "PATH", "", false,
		"log file when not in the foreground (default <state_dir>/fleetd.log)", check_log_file },
	[CFG_MAX_BODY] = { "max_body_bytes", "max-body-bytes", "N", "65536", true,
		"largest request body the control API accepts", .range = { 1024, 16L << 20, "a number of bytes" } },
	[CFG_USER_UID_MIN] = { "user_uid_min", "user-uid-min", "UID", "200000", false,
		"lowest uid (and gid) given to a user agent's account", .range = UID_RANGE },
	[CFG_USER_UID_MAX] = { "user_uid_max", "user-uid-max", "UID", "209999", false,
		"highest uid (and gid) given to a user agent's account", .range = UID_RANGE },
	[CFG_LIBVIRT_URI] = { "libvirt_uri", "libvirt-uri", "URI", "qemu:///system", false,
		"libvirt connection for VM agents", check_uri },
	[CFG_IMAGE_DIR] = { "image_dir", "image-dir", "DIR", "", false,
		"guest image (vmlinuz, initramfs.img, base.qcow2) for VM agents (default <state_dir>/images)",
		check_image_dir },
	/* Hosts (#15): where the fleet storage pool of a host other than local lives, on that host. */
	[CFG_HOST_POOL_DIR] = { "host_pool_dir", "host-pool-dir", "DIR", "/var/lib/libvirt/fleet", false,
		"directory, on each host other than local, of the libvirt dir pool 'fleet' that fleetd defines "
		"there (if the host has none) for VM agents' disks and the images they boot", check_abs_path },
	[CFG_VM_BOOT_TIMEOUT] = { "vm_boot_timeout", "vm-boot-timeout", "S", "180", false,
		"seconds a VM guest has from start to answer on its control channel; past that it does not "
		"boot (the agent turns bad, or is rolled back)", .range = { 10, 3600, "a number of seconds" } },
	[CFG_MAX_CONNECTIONS] = { "max_connections", "max-connections", "N", "64", true,
		"most control API connections open at once; one more is answered 503 and closed",
		.range = { 1, 4096, "a number of connections" } },
	[CFG_REQUEST_TIMEOUT] = { "request_timeout", "request-timeout", "S", "30", true,
		"seconds a client has from connecting to sending its whole request (headers and body); "
		"a slower one is disconnected (a long answer, such as exec output, is not limited)",
		.range = { 1, 3600, "a number of seconds" } },
	[CFG_VM_CONSOLE_MAX] = { "vm_console_max_bytes", "vm-console-max-bytes", "N", "8388608", true,
		"most bytes a VM agent's console log files (console.log*) take together; fleetd trims beyond",
		.range = { 65536, 1L << 30, "a number of bytes" } },
	/* Restart backoff, in milliseconds (so core/'s unit tests can use a few): up to an hour. */
	[CFG_RESTART_BACKOFF] = { "restart_backoff_ms", "restart-backoff-ms", "MS", "1000", true,
		"delay before the first automatic restart of an agent whose environment stopped unasked; "
		"each further restart within the restart window waits twice as long as the one before",
		.range = { 1, 3600000, "a number of milliseconds" } },
	[CFG_RESTART_BACKOFF_MAX] = { "restart_backoff_max_ms", "restart-backoff-max-ms", "MS", "60000", true,
		"longest delay before an automatic restart", .range = { 1, 3600000, "a number of milliseconds" } },
	/* Webhooks (#11): the base URL printed for senders (and Twilio signs); how long events are kept. */
	[CFG_HOOKS_PUBLIC_URL] = { "hooks_public_url", "hooks-public-url", "URL", "", true,
		"base URL webhook senders use, e.g. https://hooks.example.com behind a TLS proxy "
		"(default empty: http:// + the address the listener bound)", check_public_url },
	[CFG_EVENTS_KEEP_DAYS] = { "events_keep_days", "events-keep-days", "DAYS", "30", true,
		"days fleet keeps the record of received events ('fleetctl events'); older ones are pruned daily",
		.range = { 1, 3650, "a number of days" } },
	[CFG_MAX_CONCURRENT_RUNS] = { "max_concurrent_runs", "max-concurrent-runs", "N", "0", true,
		"most runs going at once over all agents; more wait in their queues (0: the number of CPUs)",
		.range = { 0, 4096, "a number of runs" } },
	/* The webhook listener (#11): where it listens, as whom, and its limits against hostile clients. */
	[CFG_HOOKS_LISTEN] = { "hooks_listen", "hooks-listen", "ADDR", "127.0.0.1:8470", false,
		"address:port the webhook listener serves (IPv6 as [ADDR]:PORT; port 0: any free one); "
		"none: no listener", check_listen },
	[CFG_HOOKS_USER] = { "hooks_user", "hooks-user", "USER", "_fleet-hooks", false,
		"unprivileged system user the webhook listener runs as (fleetd creates it if it is missing)",
		check_user_name },
	[CFG_HOOKS_MAX_CONNECTIONS] = { "hooks_max_connections", "hooks-max-connections", "N", "512", true,
		"most webhook connections open at once; more are closed at accept",
		.range = { 1, 65536, "a number of connections" } },
	[CFG_HOOKS_MAX_PER_SOURCE] = { "hooks_max_per_source", "hooks-max-per-source", "N", "64", true,
		"most webhook connections open at once from one address", .range = { 1, 65536, "a number of connections" } },
	[CFG_HOOKS_REQUEST_TIMEOUT] = { "hooks_request_timeout", "hooks-request-timeout", "S", "10", true,
		"seconds a webhook sender has from connecting to sending its whole request; slower ones are cut off",
		.range = { 1, 600, "a number of seconds" } },
	[CFG_HOOKS_HEADER_MAX] = { "hooks_header_max_bytes", "hooks-header-max-bytes", "N", "32768", true,
		"most bytes of a webhook request's line and headers together", .range = { 4096, 1L << 20, "a number of bytes" } },
	/* User agents' NAT network (#12): one /30 per agent, by its uid (user/netns.c). */
	[CFG_USER_NAT_SUBNET] = { "user_nat_subnet", "user-nat-subnet", "CIDR", "10.199.0.0/16", false,
		"IPv4 network cut into one /30 per user agent with --network nat (by uid: user_uid_min gets the "
		"first); agents whose uid is past its end cannot have a network", check_nat_subnet },
	[CFG_USER_DNS] = { "user_dns", "user-dns", "LIST", "auto", true,
		"DNS servers (up to 3 addresses, comma-separated) in the /etc/resolv.conf of user agents with "
		"--network nat; auto: the host's own servers that are not on its loopback, else systemd-resolved's "
		"upstream ones", check_dns },
	/* Their IPv6: one /126 per agent of a ULA prefix fleet owns (user/netns.c); empty: IPv4 only. */
	[CFG_USER_NAT_SUBNET6] = { "user_nat_subnet6", "user-nat-subnet6", "PREFIX", "fd8c:7a1e:f1ee::/64", false,
		"IPv6 unique local prefix cut into one /126 per user agent with --network nat (by uid, as "
		"user_nat_subnet), NATed out through the host; empty: no IPv6 in agents' networks", check_nat_subnet6 },
	/* After a host reboot (#14, core/autostart.c): how many autostart agents boot at once. */
	[CFG_BOOT_CONCURRENCY] = { "boot_concurrency", "boot-concurrency", "N", "2", true,
		"most agents started at once when fleetd first starts after the host booted (--autostart on); "
		"the others wait, by --boot-priority", .range = { 1, 64, "a number of agents" } },
	[CFG_WATCH_BUFFER] = { "watch_buffer_bytes", "watch-buffer-bytes", "N", "262144", true,
		"most event bytes GET /v1/watch holds for one watcher that reads too slowly (and the size of its "
		"socket's send buffer); past that the watcher gets a last overflow line and is cut off",
		.range = { 4096, 16L << 20, "a number of bytes" } },
	/* GET /metrics over TCP for Prometheus (docs/metrics.md): off unless set; loopback unless allowed. */
	[CFG_METRICS_LISTEN] = { "metrics_listen", "metrics-listen", "ADDR", "none", false,
		"address:port serving GET /metrics (Prometheus's text format) and nothing else, e.g. 127.0.0.1:9470 "
		"(IPv6 as [ADDR]:PORT; port 0: any free one); none: only on the control socket. A non-loopback "
		"address is refused unless metrics_allow_remote is yes", check_listen },
	[CFG_METRICS_ALLOW_REMOTE] = { "metrics_allow_remote", "metrics-allow-remote", "yes|no", "no", false,
		"yes lets metrics_listen be an address other hosts can reach (the metrics name agents, routes "
		"and their counts, and need no credentials: put a firewall in front)", check_yes_no },
};

void config_init(struct config *c)
{
	memset(c, 0, sizeof(*c));
	for (int i = 0; i < CFG__COUNT; i++)
		c->value[i] = xstrdup(config_defs[i].def);
}

void config_free(struct config *c)
{
	for (int i = 0; i < CFG__COUNT; i++)
		free(c->value[i]);
	free(c->path);
	memset(c, 0, sizeof(*c));
}

void config_copy(struct config *dst, const struct config *src)
{
	*dst = *src;
	for (int i = 0; i < CFG__COUNT; i++)
		dst->value[i] = src->value[i] ? xstrdup(src->value[i]) : NULL;
	dst->path = src->path ? xstrdup(src->path) : NULL;
}

int config_set(struct config *c, enum config_key key, const char *value,
	       enum config_source source, int line, const char **why)
{
	int r;

	if (key < 0 || key >= CFG__COUNT)
		return -ENOENT;
	r = config_defs[key].range.what ? check_range(key, value, why) : config_defs[key].check(value, why);
	if (r < 0)
		return r;
	free(c->value[key]);
	c->value[key] = xstrdup(value);
	c->source[key] = source;
	c->line[key] = line;
	return 0;
}

static void add_error(char **errors, const char *path, int line, const char *fmt, ...) _printf_(4, 5);
static void add_error(char **errors, const char *path, int line, const char *fmt, ...)
{
	_cleanup_free_ char *msg = NULL;
	char *joined;
	va_list ap;

	va_start(ap, fmt);
	if (vasprintf(&msg, fmt, ap) < 0)
		abort();
	va_end(ap);
	if (line > 0)
		joined = xasprintf("%s%s:%d: %s\n", *errors ? *errors : "", path, line, msg);
	else
		joined = xasprintf("%s%s: %s\n", *errors ? *errors : "", path, msg);
	free(*errors);
	*errors = joined;
}

static char *trim(char *s)
{
	char *end;

	while (*s == ' ' || *s == '\t')
		s++;
	end = s + strlen(s);
	while (end > s && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r' || end[-1] == '\n'))
		*--end = '\0';
	return s;
}

static int find_key(const char *key)
{
	for (int i = 0; i < CFG__COUNT; i++)
		if (strcmp(config_defs[i].key, key) == 0)
			return i;
	return -1;
}

int config_read_file(struct config *c, const char *path, bool must_exist, char **errors)
{
	_cleanup_fclose_ FILE *f = NULL;
	_cleanup_free_ char *buf = NULL;
	bool seen[CFG__COUNT] = { false };
	size_t cap = 0;
	int lineno = 0, nerr = 0;

	f = fopen(path, "re");
	if (!f) {
		if (errno == ENOENT && !must_exist)
			return 0;
		add_error(errors, path, 0, "cannot open: %s", strerror(errno));
		return 1;
	}
	free(c->path);
	c->path = xstrdup(path);
	while (getline(&buf, &cap, f) >= 0) {
		char *line, *eq, *key, *value;
		const char *why = NULL;
		int k;

		lineno++;
		if (strlen(buf) > 4096) {
			add_error(errors, path, lineno, "line is longer than 4096 characters");
			nerr++;
			continue;
		}
		line = trim(buf);
		if (*line == '\0' || *line == '#')
			continue;
		eq = strchr(line, '=');
		if (!eq) {
			add_error(errors, path, lineno, "expected 'key = value'");
			nerr++;
			continue;
		}
		*eq = '\0';
		key = trim(line);
		value = trim(eq + 1);
		if ((k = find_key(key)) < 0) {
			add_error(errors, path, lineno, "unknown key '%s'", key);
			nerr++;
			continue;
		}
		if (seen[k]) {
			add_error(errors, path, lineno, "'%s' is set twice (first on line %d)", key, c->line[k]);
			nerr++;
			continue;
		}
		seen[k] = true;
		if (config_set(c, (enum config_key)k, value, CFG_FROM_FILE, lineno, &why) < 0) {
			add_error(errors, path, lineno, "%s '%s' %s", key, value, why);
			nerr++;
		}
	}
	if (ferror(f)) {
		add_error(errors, path, 0, "read error: %s", strerror(errno));
		nerr++;
	}
	return nerr;
}

int config_load(struct config *out, const char *path, bool must_exist,
		const struct config *cmdline, char **errors)
{
	int nerr;

	config_init(out);
	nerr = config_read_file(out, path, must_exist, errors);
	if (cmdline)
		for (int i = 0; i < CFG__COUNT; i++)
			if (cmdline->source[i] == CFG_FROM_CMDLINE) {
				free(out->value[i]);
				out->value[i] = xstrdup(cmdline->value[i]);
				out->source[i] = CFG_FROM_CMDLINE;
			}
	/* A group named explicitly must exist; the default 'fleet' is optional. */
	if (*out->value[CFG_SOCKET_GROUP] && out->source[CFG_SOCKET_GROUP] != CFG_FROM_DEFAULT &&
	    !getgrnam(out->value[CFG_SOCKET_GROUP])) {
		if (out->source[CFG_SOCKET_GROUP] == CFG_FROM_FILE)
			add_error(errors, path, out->line[CFG_SOCKET_GROUP], "socket_group '%s': no such group",
				  out->value[CFG_SOCKET_GROUP]);
		else
			add_error(errors, "--socket-group", 0, "no such group '%s'", out->value[CFG_SOCKET_GROUP]);
		nerr++;
	}
	if (config_get_long(out, CFG_USER_UID_MIN) > config_get_long(out, CFG_USER_UID_MAX)) {
		add_error(errors, out->path ? out->path : "command line", 0,
			  "user_uid_min (%s) is above user_uid_max (%s)", out->value[CFG_USER_UID_MIN],
			  out->value[CFG_USER_UID_MAX]);
		nerr++;
	}
	return nerr;
}

const char *config_get(const struct config *c, enum config_key key)
{
	return c->value[key];
}

long config_get_long(const struct config *c, enum config_key key)
{
	long v = 0;

	(void)parse_long(c->value[key], 0, 1L << 40, &v);	/* validated when set */
	return v;
}

void config_print(const struct config *c, FILE *out)
{
	static const char *const from[] = { "default", "file", "command line" };

	fprintf(out, "# effective fleetd configuration%s%s\n", c->path ? " from " : "", c->path ? c->path : "");
	for (int i = 0; i < CFG__COUNT; i++)
		fprintf(out, "%s = %s\t# %s\n", config_defs[i].key, c->value[i], from[c->source[i]]);
}
