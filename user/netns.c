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
#include <event2/event.h>
#include <fcntl.h>
#include <net/if.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "backend/firewall.h"
#include "backend/worker.h"
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
 * seconds, on a worker thread (getaddrinfo blocks; the loop must not), each
 * agent's chain replaced in one nft transaction. An address a name had
 * between two refreshes is refused until the next one (the TTL caveat in
 * docs/user-backend.md).
 */
#define NETNS_REFRESH_S 300

struct refresh_item {
	char *agent;
	char *iface;
	char *egress;
};

struct netns_refresh {
	struct fleetd *f;
	const struct backend_host *host;
	struct event *timer;
	struct worker_job *job;		/* a refresh running, or NULL */
	unsigned gen_at_start;
	struct refresh_item *items;	/* the job's, owned by it */
	size_t n;
};
static struct netns_refresh *refresh;

static bool has_name(const char *list)
{
	for (const char *p = list; *p; p++)
		if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z'))
			return true;	/* an address has no letter but IPv6 hex digits: harmless, resolved as itself */
	return false;
}

static void refresh_work(void *arg)
{
	struct netns_refresh *r = arg;

	for (size_t i = 0; i < r->n; i++) {
		_cleanup_free_ char *why = NULL;

		if (firewall_agent_apply(r->items[i].agent, r->items[i].iface, r->items[i].egress, &why) < 0)
			log_warning("agent '%s': cannot refresh its egress rules: %s", r->items[i].agent, why ? why : "?");
	}
}

static void refresh_arm(int seconds)
{
	struct timeval tv = { seconds, 0 };

	evtimer_add(refresh->timer, &tv);
}

static void refresh_done(void *arg)
{
	struct netns_refresh *r = arg;

	for (size_t i = 0; i < r->n; i++) {
		free(r->items[i].agent);
		free(r->items[i].iface);
		free(r->items[i].egress);
	}
	free(r->items);
	r->items = NULL;
	r->n = 0;
	r->job = NULL;
	/* A list applied meanwhile on the loop may have been overwritten by this older one: again, now. */
	refresh_arm(r->gen_at_start != netns_gen ? 0 : NETNS_REFRESH_S);
}

static void on_refresh(evutil_socket_t fd, short what, void *arg)
{
	struct netns_refresh *r = arg;
	struct agent **list = NULL;
	size_t cap = 0;

	(void)fd, (void)what;
	if (r->job)
		return;	/* its done() arms the timer again */
	if (r->host->list_agents(r->f, BACKEND_USER, &list) == 0) {
		for (struct agent **a = list; *a; a++) {
			struct netns_addrs ad;
			_cleanup_free_ char *ignored = NULL;
			uid_t uid;

			if ((*a)->network != NETWORK_NAT || !(*a)->egress_allow || !has_name((*a)->egress_allow) ||
			    account_lookup(r->f, (*a)->name, &uid) < 0 || netns_addrs(r->f, uid, &ad, &ignored) < 0)
				continue;
			if (r->n == cap) {
				cap = cap ? cap * 2 : 8;
				r->items = xrealloc(r->items, cap * sizeof(*r->items));
			}
			r->items[r->n++] = (struct refresh_item){ xstrdup((*a)->name), xstrdup(ad.iface),
								  xstrdup((*a)->egress_allow) };
		}
		agent_list_free(list);
	}
	r->gen_at_start = netns_gen;
	if (r->n == 0 || worker_start(r->f->base, refresh_work, refresh_done, r, &r->job) < 0)
		refresh_done(r);
}

void netns_refresh_start(struct fleetd *f, const struct backend_host *host)
{
	if (refresh || !host || !host->list_agents || !f->base)
		return;
	refresh = xcalloc(1, sizeof(*refresh));
	refresh->f = f;
	refresh->host = host;
	refresh->timer = evtimer_new(f->base, on_refresh, refresh);
	refresh_arm(NETNS_REFRESH_S);
}

void netns_refresh_stop(void)
{
	if (!refresh)
		return;
	if (refresh->job)
		worker_finish(refresh->job);	/* calls refresh_done, which arms the timer: freed next */
	event_free(refresh->timer);
	free(refresh);
	refresh = NULL;
}
