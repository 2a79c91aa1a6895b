/*
 * user/netns.c: the network of a user agent with --network nat. One
 * persistent network namespace per agent, held by a bind mount at
 * <state_dir>/netns/NAME (the directory 0700 root), made at provision and
 * again whenever it is found missing (a host reboot), removed with the
 * agent. In it, eth0: one end of a veth pair whose host end is flh<SLOT>,
 * a /30 of user_nat_subnet (SLOT = uid - user_uid_min: uids are never
 * handed out twice, so neither is an address), the host end .1, the agent
 * .2 with its default route through it. The host masquerades the subnet
 * and firewalls it (backend/firewall.c). Every sandbox of the agent (its
 * keeper and each exec) joins this namespace instead of making a new one.
 */
#include "user/internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
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
	return 0;
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

int netns_ensure(struct fleetd *f, const struct agent *a, uid_t uid, char **why)
{
	_cleanup_free_ char *path = NULL, *nsarg = NULL, *pidarg = NULL, *hostcidr = NULL, *agentcidr = NULL;
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
	/* Routing for the NAT: the host forwards (as libvirt's NAT networks need too). */
	{
		_cleanup_close_ int fd = open("/proc/sys/net/ipv4/ip_forward", O_WRONLY | O_CLOEXEC);

		if (fd < 0 || write(fd, "1", 1) != 1) {
			int e = errno ? errno : EIO;	/* read before xasprintf may change it */

			*why = xasprintf("cannot enable IPv4 forwarding: %s", strerror(e));
			return -e;
		}
	}
	netns_gen++;
	if ((r = firewall_base(config_get(&f->cfg, CFG_USER_NAT_SUBNET), why)) < 0 ||
	    (r = firewall_agent_apply(a->name, ad.iface, a->egress_allow, why)) < 0)
		return r;
	log_debug("agent '%s': network %s on %s (host %s)", a->name, agentcidr, ad.iface, ad.host);
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
	/* Detached: sandboxes started meanwhile hold copies of this mount; the namespace goes with the last. */
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
