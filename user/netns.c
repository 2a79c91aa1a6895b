/*
 * user/netns.c: the network of a user agent with --network nat. One
 * persistent network namespace per agent, held by a bind mount at
 * <state_dir>/netns/NAME (the directory 0700 root), made at provision and
 * again whenever it is found missing (a host reboot), removed with the
 * agent. In it, eth0: one end of a veth pair whose host end is flh<SLOT>,
 * a /30 of user_nat_subnet (SLOT = uid - user_uid_min: uids are never
 * handed out twice, so neither is an address), the host end .1, the agent
 * .2 with its default route through it; and the same for IPv6, a /126 of
 * user_nat_subnet6 (::4*SLOT+1 the host end, +2 the agent) unless that is
 * empty or the host has no IPv6. The host masquerades both subnets and
 * firewalls them (backend/firewall.c). Every sandbox of the agent (its
 * keeper and each exec) joins this namespace instead of making a new one.
 * <state_dir>/netns is a mount of its own (netns_dir_mount, at the backend's
 * init), which each sandbox detaches once it has joined its namespace
 * (init.c): no sandbox holds another agent's namespace, so a removed one
 * ends with fleetd's mount of it.
 */
#include "user/internal.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "backend/egress_refresh.h"
#include "backend/firewall.h"
#include "common/log.h"
#include "common/util.h"
#include "model/config.h"
#include "model/fleetd.h"

/* Bumped by every netns_ensure, so a refresh of egress rules can tell it may have been overtaken. */
static unsigned netns_gen;

#ifndef NSFS_MAGIC
#define NSFS_MAGIC 0x6e736673
#endif

char *netns_dir(struct fleetd *f)
{
	return xasprintf("%s/netns", config_get(&f->cfg, CFG_STATE_DIR));
}

char *netns_path(struct fleetd *f, const char *agent)
{
	return xasprintf("%s/netns/%s", config_get(&f->cfg, CFG_STATE_DIR), agent);
}

/* The IPv6 half of netns_addrs: user_nat_subnet6's /126 of slot, or nothing (empty key, no IPv6 on the host). */
static int addrs6(struct fleetd *f, long slot, struct netns_addrs *ret, char **why)
{
	const char *subnet = config_get(&f->cfg, CFG_USER_NAT_SUBNET6), *slash = strchr(subnet, '/');
	char base[INET6_ADDRSTRLEN] = "";
	unsigned char in[16], host[16], agent[16];
	long prefix = 64;
	uint64_t low = 0;

	ret->host6[0] = ret->agent6[0] = '\0';
	if (!*subnet || access("/proc/sys/net/ipv6", F_OK) < 0)
		return 0;
	if (slash && (size_t)(slash - subnet) < sizeof(base)) {
		memcpy(base, subnet, (size_t)(slash - subnet));
		(void)parse_long(slash + 1, 64, 120, &prefix);
	}
	if (inet_pton(AF_INET6, base, in) != 1) {
		*why = xasprintf("user_nat_subnet6 %s is not usable", subnet);
		return -EINVAL;
	}
	/* The prefix is at least /64 (config.c), so every agent's addresses differ in the low 64 bits only. */
	if (prefix > 64 && (uint64_t)slot >= (UINT64_C(1) << (126 - prefix))) {
		*why = xasprintf("uid slot %ld is past the end of user_nat_subnet6 %s (one /126 per uid): widen the prefix",
				 slot, subnet);
		return -ENOSPC;
	}
	for (int i = 8; i < 16; i++)
		low = low << 8 | in[i];
	memcpy(host, in, 16);
	memcpy(agent, in, 16);
	for (int i = 15; i >= 8; i--) {
		host[i] = (unsigned char)((low + (uint64_t)slot * 4 + 1) >> (8 * (15 - i)));
		agent[i] = (unsigned char)((low + (uint64_t)slot * 4 + 2) >> (8 * (15 - i)));
	}
	inet_ntop(AF_INET6, host, ret->host6, sizeof(ret->host6));
	inet_ntop(AF_INET6, agent, ret->agent6, sizeof(ret->agent6));
	return 0;
}

int netns_addrs(struct fleetd *f, uid_t uid, struct netns_addrs *ret, char **why)
{
	const char *subnet = config_get(&f->cfg, CFG_USER_NAT_SUBNET), *slash = strchr(subnet, '/');
	long min = config_get_long(&f->cfg, CFG_USER_UID_MIN), prefix = 16, slot = (long)uid - min;
	char base[INET_ADDRSTRLEN] = "";
	struct in_addr in, host, agent;

	if (slash && (size_t)(slash - subnet) < sizeof(base)) {
		memcpy(base, subnet, (size_t)(slash - subnet));
		(void)parse_long(slash + 1, 8, 30, &prefix);
	}
	if (inet_pton(AF_INET, base, &in) != 1 || slot < 0) {
		*why = xasprintf("user_nat_subnet %s is not usable", subnet);
		return -EINVAL;
	}
	if (slot >= (1L << (32 - prefix)) / 4) {
		*why = xasprintf("uid %ld is past the end of user_nat_subnet %s (one /30 per uid from user_uid_min %ld): "
				 "widen the subnet", (long)uid, subnet, min);
		return -ENOSPC;
	}
	host.s_addr = htonl(ntohl(in.s_addr) + (uint32_t)slot * 4 + 1);
	agent.s_addr = htonl(ntohl(in.s_addr) + (uint32_t)slot * 4 + 2);
	inet_ntop(AF_INET, &host, ret->host, sizeof(ret->host));
	inet_ntop(AF_INET, &agent, ret->agent, sizeof(ret->agent));
	snprintf(ret->iface, sizeof(ret->iface), FIREWALL_USER_IFACE_PREFIX "%d", (int)slot);
	return addrs6(f, slot, ret, why);
}

/* Is path a mounted network namespace (not merely the empty file a reboot leaves)? */
static bool ns_mounted(const char *path)
{
	struct statfs sfs;
	struct stat st;

	return lstat(path, &st) == 0 && S_ISREG(st.st_mode) && statfs(path, &sfs) == 0 &&
	       (unsigned long)sfs.f_type == (unsigned long)NSFS_MAGIC;
}

bool netns_present(struct fleetd *f, const char *agent)
{
	_cleanup_free_ char *path = netns_path(f, agent);

	return ns_mounted(path);
}

/* Run a tool; 0, or -EIO with *why naming it and what it said. */
static int run(char **why, const char *const *argv)
{
	_cleanup_free_ char *out = NULL;
	int r = account_run_tool(argv, &out);

	if (r == 0)
		return 0;
	if (why && !*why)
		*why = r < 0 ? xasprintf("cannot run %s: %s", argv[0], strerror(-r))
			     : xasprintf("%s %s failed (exit %d): %s", argv[0], argv[1], r, out && *out ? out : "no message");
	return r < 0 ? r : -EIO;
}

/* The root-only directory of the namespace files: a real directory, root's, 0700. */
static int dir_ensure(struct fleetd *f, char **why)
{
	_cleanup_free_ char *dir = netns_dir(f);
	struct stat st;

	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		int e = errno;

		*why = xasprintf("cannot make %s: %s", dir, strerror(e));
		return -e;
	}
	if (lstat(dir, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != 0) {
		*why = xasprintf("%s is not a directory of root's", dir);
		return -EPERM;
	}
	if ((st.st_mode & 07777) != 0700 && chmod(dir, 0700) < 0) {
		int e = errno;

		*why = xasprintf("cannot make %s 0700: %s", dir, strerror(e));
		return -e;
	}
	return 0;
}

int netns_dir_mount(struct fleetd *f, char **why)
{
	_cleanup_free_ char *dir = netns_dir(f);
	int r;

	if ((r = dir_ensure(f, why)) < 0)
		return r;
	return account_own_mount(dir, NULL, "network namespace", why);
}

/* The namespace file and its mount: made when missing (new agent, host rebooted). */
static int ns_make(struct fleetd *f, const char *agent, char **why)
{
	_cleanup_free_ char *path = netns_path(f, agent), *arg = NULL;
	int fd, r;

	if (ns_mounted(path))
		return 0;
	if ((r = dir_ensure(f, why)) < 0)
		return r;
	/* A leftover file (after a reboot) is reused; a link or anything else there is refused by O_NOFOLLOW. */
	if ((fd = open(path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600)) < 0) {
		int e = errno;

		*why = xasprintf("cannot make %s: %s", path, strerror(e));
		return -e;
	}
	close(fd);
	arg = xasprintf("--net=%s", path);
	return run(why, (const char *const[]){ "unshare", arg, "true", NULL });
}

/* Write value to a sysctl file under /proc/sys; 0 or -errno. */
static int sysctl_write(const char *path, const char *value)
{
	_cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC);
	size_t len = strlen(value);

	if (fd < 0)
		return -errno;
	return write(fd, value, len) == (ssize_t)len ? 0 : -(errno ? errno : EIO);
}

/* The first byte of a sysctl file, or 0 when it cannot be read. */
static char sysctl_first(const char *path)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	char c = 0;

	return fd >= 0 && read(fd, &c, 1) == 1 ? c : 0;
}

/*
 * IPv6 forwarding for the NAT, as libvirt's IPv6 networks need it too. A
 * host that forwards stops taking router advertisements on interfaces with
 * accept_ra 1, and would lose its own IPv6 default route when the learned
 * one expires; those are set to 2 (take them while forwarding) first.
 */
static int forwarding6_ensure(char **why)
{
	static const char all[] = "/proc/sys/net/ipv6/conf/all/forwarding";
	struct dirent *e;
	DIR *d;
	int r;

	if (sysctl_first(all) == '1')
		return 0;
	if ((d = opendir("/proc/sys/net/ipv6/conf")))
		while ((e = readdir(d))) {
			_cleanup_free_ char *p = NULL;

			if (e->d_name[0] == '.' || strcmp(e->d_name, "all") == 0 || strcmp(e->d_name, "default") == 0)
				continue;
			p = xasprintf("/proc/sys/net/ipv6/conf/%s/accept_ra", e->d_name);
			if (sysctl_first(p) == '1' && sysctl_write(p, "2") == 0)
				log_info("IPv6 forwarding for user agents: %s now takes router advertisements while forwarding "
					 "(accept_ra 2)", e->d_name);
		}
	if (d)
		closedir(d);
	if ((r = sysctl_write(all, "1")) < 0) {
		*why = xasprintf("cannot enable IPv6 forwarding: %s", strerror(-r));
		return r;
	}
	return 0;
}

int netns_ensure(struct fleetd *f, const struct agent *a, uid_t uid, char **why)
{
	_cleanup_free_ char *path = NULL, *nsarg = NULL, *pidarg = NULL, *hostcidr = NULL, *agentcidr = NULL;
	_cleanup_free_ char *host6 = NULL, *agent6 = NULL;
	struct netns_addrs ad;
	int r;

	if (a->network != NETWORK_NAT)
		return 0;
	if ((r = netns_addrs(f, uid, &ad, why)) < 0)
		return r;
	if ((r = ns_make(f, a->name, why)) < 0)
		return r;
	path = netns_path(f, a->name);
	nsarg = xasprintf("--net=%s", path);
	pidarg = xasprintf("%ld", (long)getpid());
	hostcidr = xasprintf("%s/30", ad.host);
	agentcidr = xasprintf("%s/30", ad.agent);
	/* The pair is made inside the agent's namespace, its host end moved into fleetd's. */
	if (if_nametoindex(ad.iface) == 0 &&
	    (r = run(why, (const char *const[]){ "nsenter", nsarg, "ip", "link", "add", "eth0", "type", "veth", "peer",
						  "name", ad.iface, "netns", pidarg, NULL })) < 0)
		return r;
	/* Each step is idempotent (replace, set), so a half-made network is completed. */
	if ((r = run(why, (const char *const[]){ "nsenter", nsarg, "ip", "addr", "replace", agentcidr, "dev", "eth0", NULL })) < 0 ||
	    (r = run(why, (const char *const[]){ "nsenter", nsarg, "ip", "link", "set", "lo", "up", NULL })) < 0 ||
	    (r = run(why, (const char *const[]){ "nsenter", nsarg, "ip", "link", "set", "eth0", "up", NULL })) < 0 ||
	    (r = run(why, (const char *const[]){ "ip", "addr", "replace", hostcidr, "dev", ad.iface, NULL })) < 0 ||
	    (r = run(why, (const char *const[]){ "ip", "link", "set", ad.iface, "up", NULL })) < 0 ||
	    (r = run(why, (const char *const[]){ "nsenter", nsarg, "ip", "route", "replace", "default", "via", ad.host, NULL })) < 0)
		return r;
	/* IPv6: the same shape; nodad, so the addresses work at once (no other node shares the link). */
	if (ad.host6[0]) {
		host6 = xasprintf("%s/126", ad.host6);
		agent6 = xasprintf("%s/126", ad.agent6);
		if ((r = run(why, (const char *const[]){ "nsenter", nsarg, "ip", "-6", "addr", "replace", agent6, "dev", "eth0",
							  "nodad", NULL })) < 0 ||
		    (r = run(why, (const char *const[]){ "ip", "-6", "addr", "replace", host6, "dev", ad.iface, "nodad", NULL })) < 0 ||
		    (r = run(why, (const char *const[]){ "nsenter", nsarg, "ip", "-6", "route", "replace", "default", "via",
							  ad.host6, NULL })) < 0 ||
		    (r = forwarding6_ensure(why)) < 0)
			return r;
	}
	/* Routing for the NAT: the host forwards (as libvirt's NAT networks need too). */
	if ((r = sysctl_write("/proc/sys/net/ipv4/ip_forward", "1")) < 0) {
		*why = xasprintf("cannot enable IPv4 forwarding: %s", strerror(-r));
		return r;
	}
	netns_gen++;
	if ((r = firewall_base(config_get(&f->cfg, CFG_USER_NAT_SUBNET), config_get(&f->cfg, CFG_USER_NAT_SUBNET6), why)) < 0 ||
	    (r = firewall_agent_apply(a->name, ad.iface, a->egress_allow, why)) < 0)
		return r;
	log_debug("agent '%s': network %s%s%s on %s (host %s)", a->name, agentcidr, agent6 ? " and " : "", agent6 ? agent6 : "",
		  ad.iface, ad.host);
	return 0;
}

int netns_remove(struct fleetd *f, const char *agent, uid_t uid, char **why)
{
	_cleanup_free_ char *path = netns_path(f, agent), *ignored = NULL;
	struct netns_addrs ad;
	int r, ret = 0;

	if (uid != 0 && netns_addrs(f, uid, &ad, &ignored) == 0) {
		if (if_nametoindex(ad.iface) != 0 &&
		    (r = run(why, (const char *const[]){ "ip", "link", "del", ad.iface, NULL })) < 0)
			ret = r;
		if ((r = firewall_agent_remove(agent, ad.iface, ret ? NULL : why)) < 0 && ret == 0)
			ret = r;
	}
	/*
	 * Detached: the namespace goes with its last user (a process still in it,
	 * an fd). No sandbox holds a copy of this mount (init.c drops the netns
	 * mount) unless the netns dir is no mount point (logged at start).
	 */
	if (umount2(path, MNT_DETACH | UMOUNT_NOFOLLOW) < 0 && errno != EINVAL && errno != ENOENT && ret == 0) {
		*why = xasprintf("cannot unmount %s: %s", path, strerror(errno));
		ret = -errno;
	}
	if (unlink(path) < 0 && errno != ENOENT && ret == 0) {
		*why = xasprintf("cannot remove %s: %s", path, strerror(errno));
		ret = -errno;
	}
	return ret;
}

/*
 * Host names in egress lists are resolved again every NETNS_REFRESH_S
 * seconds (backend/egress_refresh.c), each agent's chain replaced in one nft
 * transaction (the TTL caveat in docs/user-backend.md).
 */
#define NETNS_REFRESH_S 300

static struct egress_refresh *refresh;
static struct {
	struct fleetd *f;
	const struct backend_host *host;
} refresh_ctx;

static void refresh_collect(struct egress_refresh *r, void *ctx)
{
	struct agent **list = NULL;

	(void)ctx;
	if (refresh_ctx.host->list_agents(refresh_ctx.f, BACKEND_USER, &list) < 0)
		return;
	for (struct agent **a = list; *a; a++) {
		struct netns_addrs ad;
		_cleanup_free_ char *ignored = NULL;
		uid_t uid;

		if ((*a)->network != NETWORK_NAT || !egress_refresh_wants((*a)->egress_allow) ||
		    account_lookup(refresh_ctx.f, (*a)->name, &uid) < 0 || netns_addrs(refresh_ctx.f, uid, &ad, &ignored) < 0)
			continue;
		egress_refresh_add(r, (*a)->name, ad.iface, (*a)->egress_allow);
	}
	agent_list_free(list);
}

void netns_refresh_start(struct fleetd *f, const struct backend_host *host)
{
	if (refresh || !host || !host->list_agents)
		return;
	refresh_ctx.f = f;
	refresh_ctx.host = host;
	refresh = egress_refresh_new(f->base, NETNS_REFRESH_S, &netns_gen, refresh_collect, firewall_agent_apply, NULL);
}

void netns_refresh_stop(void)
{
	egress_refresh_free(refresh);
	refresh = NULL;
}
