/* firewall: see firewall.h. */
#include "backend/firewall.h"

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <netdb.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "backend/spawn.h"
#include "common/log.h"
#include "common/util.h"
#include "model/egress.h"

#define T "inet " FIREWALL_TABLE

static const char *const nft_env[] = { "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", NULL };
static const char *const nft_dirs[] = { "/usr/sbin", "/usr/bin", "/sbin", "/bin", NULL };

/* Run nft with one argument (a whole batch: one transaction); 0, or -errno with *why and *out. */
static int nft(const char *batch, bool json_list, char **out, char **why)
{
	const char *argv_apply[] = { "nft", batch, NULL };
	const char *argv_json[] = { "nft", "-j", batch, NULL };
	const struct spawn_opts o = { .envp = nft_env, .search = nft_dirs, .output_max = json_list ? 65536 : 4095,
				      .keep_tail = !json_list };
	_cleanup_free_ char *text = NULL;
	int r = spawn_tool(json_list ? argv_json : argv_apply, &o, &text);

	if (r < 0) {
		if (why)
			*why = xasprintf("cannot run nft: %s", strerror(-r));
		return r;
	}
	if (r != 0) {
		if (why)
			*why = xasprintf("nft failed (exit %d): %s", r, text && *text ? text : "no message");
		return -EIO;
	}
	if (out)
		*out = TAKE_PTR(text);
	return 0;
}

int firewall_base(const char *user_subnet, const char *user_subnet6, char **why)
{
	_cleanup_free_ char *masq6 = NULL, *batch = NULL;

	/* IPv6 for user agents (user/netns.c), unless it is off or the host has none. */
	if (user_subnet6 && *user_subnet6 && access("/proc/sys/net/ipv6", F_OK) == 0)
		masq6 = xasprintf("add rule " T " postrouting ip6 saddr %s oifname != \"" FIREWALL_USER_IFACE_PREFIX "*\" masquerade"
				  " comment \"user agents: NAT66 to the outside\"\n", user_subnet6);
	batch = xasprintf(
		"add table " T "\n"
		"add chain " T " input { type filter hook input priority filter - 10; policy accept; }\n"
		"add chain " T " forward { type filter hook forward priority filter - 10; policy accept; }\n"
		"add chain " T " postrouting { type nat hook postrouting priority srcnat + 10; policy accept; }\n"
		"add map " T " egress { type ifname : verdict; }\n"
		"flush chain " T " input\n"
		"flush chain " T " forward\n"
		"flush chain " T " postrouting\n"
		/*
		 * The host: none of its addresses, on any port, from any agent.
		 * Only replies to what the host itself opened, and ping (so
		 * a guest can tell its gateway is up), come in.
		 */
		"add rule " T " input iifname { \"" FIREWALL_VM_BRIDGE "\" } ct state established,related accept"
		" comment \"agents: replies to what the host opened\"\n"
		"add rule " T " input iifname \"" FIREWALL_USER_IFACE_PREFIX "*\" ct state established,related accept"
		" comment \"agents: replies to what the host opened\"\n"
		"add rule " T " input iifname { \"" FIREWALL_VM_BRIDGE "\" } icmp type echo-request accept"
		" comment \"agents: ping of the gateway\"\n"
		"add rule " T " input iifname \"" FIREWALL_USER_IFACE_PREFIX "*\" icmp type echo-request accept"
		" comment \"agents: ping of the gateway\"\n"
		/* IPv6 needs neighbour discovery on the link (hop limit 255: from the link itself) to have a gateway at all. */
		"add rule " T " input iifname \"" FIREWALL_USER_IFACE_PREFIX "*\" ip6 hoplimit 255"
		" icmpv6 type { nd-neighbor-solicit, nd-neighbor-advert } accept"
		" comment \"user agents: IPv6 neighbour discovery of the gateway\"\n"
		"add rule " T " input iifname \"" FIREWALL_USER_IFACE_PREFIX "*\" icmpv6 type echo-request accept"
		" comment \"user agents: IPv6 ping of the gateway\"\n"
		"add rule " T " input iifname \"" FIREWALL_VM_BRIDGE "\" udp dport { 53, 67 } accept"
		" comment \"vm agents: DHCP and DNS of libvirt's dnsmasq on the gateway\"\n"
		"add rule " T " input iifname \"" FIREWALL_VM_BRIDGE "\" tcp dport 53 accept"
		" comment \"vm agents: DNS of libvirt's dnsmasq\"\n"
		"add rule " T " input iifname \"" FIREWALL_VM_BRIDGE "\" counter drop"
		" comment \"vm agents: nothing else of the host\"\n"
		"add rule " T " input iifname \"" FIREWALL_USER_IFACE_PREFIX "*\" counter drop"
		" comment \"user agents: nothing of the host\"\n"
		/* Agents: not each other (VM guests among themselves: libvirt's isolated ports). */
		"add rule " T " forward iifname \"" FIREWALL_USER_IFACE_PREFIX "*\" oifname \"" FIREWALL_USER_IFACE_PREFIX "*\""
		" counter drop comment \"user agent to user agent\"\n"
		"add rule " T " forward iifname \"" FIREWALL_USER_IFACE_PREFIX "*\" oifname \"" FIREWALL_VM_BRIDGE "\""
		" counter drop comment \"user agent to vm agent\"\n"
		"add rule " T " forward iifname \"" FIREWALL_VM_BRIDGE "\" oifname \"" FIREWALL_USER_IFACE_PREFIX "*\""
		" counter drop comment \"vm agent to user agent\"\n"
		/* The cloud metadata service (and the rest of link-local, never a destination worth routing). */
		"add rule " T " forward iifname { \"" FIREWALL_VM_BRIDGE "\" } ip daddr 169.254.0.0/16 counter drop"
		" comment \"vm agents: no metadata service\"\n"
		"add rule " T " forward iifname \"" FIREWALL_USER_IFACE_PREFIX "*\" ip daddr 169.254.0.0/16 counter drop"
		" comment \"user agents: no metadata service\"\n"
		"add rule " T " forward iifname { \"" FIREWALL_VM_BRIDGE "\" } ip6 daddr { fd00:ec2::254, fe80::/10 } counter drop"
		" comment \"vm agents: no metadata service (IPv6)\"\n"
		"add rule " T " forward iifname \"" FIREWALL_USER_IFACE_PREFIX "*\" ip6 daddr { fd00:ec2::254, fe80::/10 }"
		" counter drop comment \"user agents: no metadata service (IPv6)\"\n"
		/* Then each user agent's own allow list. */
		"add rule " T " forward iifname vmap @egress\n"
		"add rule " T " postrouting ip saddr %s oifname != \"" FIREWALL_USER_IFACE_PREFIX "*\" masquerade"
		" comment \"user agents: NAT to the outside\"\n%s",
		user_subnet, masq6 ? masq6 : "");

	return nft(batch, false, NULL, why);
}

/*
 * Append to *b the accept rule(s) of one entry for chain agent-AGENT of
 * table (family and name); names resolve to all their addresses.
 */
static void entry_rules(FILE *b, const char *table, const char *agent, const struct egress_entry *e)
{
	char port[64] = "";

	if (e->port)
		snprintf(port, sizeof(port), " meta l4proto { tcp, udp } th dport %d", e->port);
	if (!e->host[0]) {
		fprintf(b, "add rule %s agent-%s %s daddr %s%s accept comment \"egress-allow %s\"\n", table, agent,
			e->family == AF_INET6 ? "ip6" : "ip", e->cidr, port, e->cidr);
		return;
	}
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *res = NULL;
	int n = 0, r = getaddrinfo(e->host, NULL, &hints, &res);

	if (r != 0) {
		log_warning("agent '%s': egress-allow %s does not resolve (%s): nothing of it is allowed", agent, e->host,
			    gai_strerror(r));
		return;
	}
	for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
		char addr[INET6_ADDRSTRLEN];
		const void *p = ai->ai_family == AF_INET ? (const void *)&((struct sockaddr_in *)ai->ai_addr)->sin_addr
							 : (const void *)&((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr;

		if ((ai->ai_family != AF_INET && ai->ai_family != AF_INET6) ||
		    !inet_ntop(ai->ai_family, p, addr, sizeof(addr)))
			continue;
		fprintf(b, "add rule %s agent-%s %s daddr %s%s accept comment \"egress-allow %s\"\n", table, agent,
			ai->ai_family == AF_INET6 ? "ip6" : "ip", addr, port, e->host);
		n++;
	}
	freeaddrinfo(res);
	log_debug("agent '%s': egress-allow %s resolved to %d address(es)", agent, e->host, n);
}

/*
 * An agent's chain in table behind map (key: its interface or tap), as one
 * batch: the chain made and emptied, its counter, and its map element added
 * and deleted so the element the caller adds last replaces any old verdict.
 * The rules follow; *batch is the caller's once the stream is closed. NULL
 * (errno) if the stream cannot be opened.
 */
static FILE *chain_batch_open(char **batch, size_t *len, const char *table, const char *map, const char *agent,
			      const char *key)
{
	FILE *b = open_memstream(batch, len);

	if (b)
		fprintf(b, "add chain %s agent-%s\n"
			   "flush chain %s agent-%s\n"
			   "add counter %s refused-%s\n"
			   "add element %s %s { \"%s\" : jump agent-%s }\n"
			   "delete element %s %s { \"%s\" }\n",
			table, agent, table, agent, table, agent, table, map, key, agent, table, map, key);
	return b;
}

/* Remove an agent's chain, counter and map element; everything is added first, so nothing already gone fails. */
static int chain_remove(const char *table, const char *map, const char *agent, const char *key, char **why)
{
	/* nft 1.0.6 has no "destroy". */
	_cleanup_free_ char *batch = xasprintf(
		"add table %s\n"
		"add map %s %s { type ifname : verdict; }\n"
		"add chain %s agent-%s\n"
		"add counter %s refused-%s\n"
		"add element %s %s { \"%s\" : jump agent-%s }\n"
		"delete element %s %s { \"%s\" }\n"
		"flush chain %s agent-%s\n"
		"delete chain %s agent-%s\n"
		"delete counter %s refused-%s\n",
		table, table, map, table, agent, table, agent, table, map, key, agent, table, map, key, table, agent, table,
		agent, table, agent);

	return nft(batch, false, NULL, why);
}

int firewall_agent_apply(const char *agent, const char *iface, const char *egress_allow, char **why)
{
	_cleanup_free_ struct egress_entry *entries = NULL;
	_cleanup_free_ char *batch = NULL;
	size_t n = 0, len = 0;
	const char *perr;
	FILE *b;
	int r;

	if (egress_allow && egress_parse(egress_allow, &entries, &n, &perr) < 0) {
		*why = xasprintf("egress_allow: %s", perr);
		return -EINVAL;
	}
	if (!(b = chain_batch_open(&batch, &len, T, "egress", agent, iface)))
		return -errno;
	for (size_t i = 0; i < n; i++)
		entry_rules(b, T, agent, &entries[i]);
	if (egress_allow)
		fprintf(b, "add rule " T " agent-%s counter name \"refused-%s\" drop comment \"agent %s: not in egress-allow\"\n",
			agent, agent, agent);
	fprintf(b, "add element " T " egress { \"%s\" : jump agent-%s }\n", iface, agent);
	if (fclose(b) != 0)
		return -ENOMEM;
	if ((r = nft(batch, false, NULL, why)) < 0)
		return r;
	return 0;
}

int firewall_agent_remove(const char *agent, const char *iface, char **why)
{
	return chain_remove(T, "egress", agent, iface, why);
}

/* The packets of counter refused-AGENT in table: 0, -ENOENT without one, or -errno. */
static int counter_packets(const char *table, const char *agent, long long *packets)
{
	_cleanup_free_ char *cmd = xasprintf("list counter %s refused-%s", table, agent), *out = NULL;
	json_t *root, *items, *it, *ctr;
	json_error_t err;
	size_t i;
	int r;

	if ((r = nft(cmd, true, &out, NULL)) < 0)
		return r == -EIO ? -ENOENT : r;
	if (!(root = json_loads(out ? out : "", 0, &err)))
		return -EBADMSG;
	r = -ENOENT;
	items = json_object_get(root, "nftables");
	json_array_foreach(items, i, it) {
		if ((ctr = json_object_get(it, "counter")) && json_is_integer(json_object_get(ctr, "packets"))) {
			*packets = json_integer_value(json_object_get(ctr, "packets"));
			r = 0;
		}
	}
	json_decref(root);
	return r;
}

int firewall_agent_refused(const char *agent, long long *packets)
{
	return counter_packets(T, agent, packets);
}

bool firewall_base_present(void)
{
	return nft("list chain " T " input", false, NULL, NULL) == 0 && nft("list chain " T " forward", false, NULL, NULL) == 0;
}

bool firewall_agent_present(const char *agent)
{
	_cleanup_free_ char *cmd = xasprintf("list chain " T " agent-%s", agent);

	return nft(cmd, false, NULL, NULL) == 0;
}

/* --- VM agents: the bridge table ------------------------------------------------------ */

#define B "bridge " FIREWALL_TABLE

void firewall_vm_tap(const char *agent, char tap[FIREWALL_TAP_SIZE])
{
	uint64_t h = 0xcbf29ce484222325ULL;	/* FNV-1a: stable across fleetd versions and hosts */

	for (const unsigned char *p = (const unsigned char *)agent; *p; p++)
		h = (h ^ *p) * 0x100000001b3ULL;
	snprintf(tap, FIREWALL_TAP_SIZE, FIREWALL_VM_TAP_PREFIX "%012llx", (unsigned long long)(h & 0xffffffffffffULL));
}

int firewall_vm_base(char **why)
{
	static const char batch[] =
		"add table " B "\n"
		"add chain " B " prerouting { type filter hook prerouting priority filter; policy accept; }\n"
		"add map " B " vm-egress { type ifname : verdict; }\n"
		"flush chain " B " prerouting\n"
		/*
		 * The port a frame came in on is the tap QEMU holds: nothing in
		 * the guest chooses it. Only fleet's taps are in the map, so
		 * other bridges' ports are never touched.
		 */
		"add rule " B " prerouting iifname vmap @vm-egress\n";

	return nft(batch, false, NULL, why);
}

char *firewall_vm_agent_batch(const char *agent, const char *egress_allow, char **why)
{
	_cleanup_free_ struct egress_entry *entries = NULL;
	char tap[FIREWALL_TAP_SIZE], *batch = NULL;
	size_t n = 0, len = 0;
	const char *perr;
	FILE *b;

	if (egress_parse(egress_allow, &entries, &n, &perr) < 0) {
		*why = xasprintf("egress_allow: %s", perr);
		return NULL;
	}
	firewall_vm_tap(agent, tap);
	if (!(b = chain_batch_open(&batch, &len, B, "vm-egress", agent, tap))) {
		*why = xasprintf("cannot build the rules: %s", strerror(errno));
		return NULL;
	}
	fprintf(b, "add rule " B " agent-%s ether type arp accept comment \"agent %s: address resolution on the bridge\"\n"
		   "add rule " B " agent-%s ip daddr { 255.255.255.255, " FIREWALL_VM_GATEWAY " } udp sport 68 udp dport 67 accept"
		   " comment \"agent %s: DHCP of libvirt's dnsmasq\"\n",
		agent, agent, agent, agent);
	for (size_t i = 0; i < n; i++)
		entry_rules(b, B, agent, &entries[i]);
	fprintf(b, "add rule " B " agent-%s counter name \"refused-%s\" drop comment \"agent %s: not in egress-allow\"\n"
		   "add element " B " vm-egress { \"%s\" : jump agent-%s }\n",
		agent, agent, agent, tap, agent);
	if (fclose(b) != 0) {
		free(batch);
		*why = xstrdup("cannot build the rules: out of memory");
		return NULL;
	}
	return batch;
}

int firewall_vm_agent_apply(const char *agent, const char *egress_allow, char **why)
{
	_cleanup_free_ char *batch = NULL;

	if (!egress_allow)
		return firewall_vm_agent_remove(agent, why);
	if (!(batch = firewall_vm_agent_batch(agent, egress_allow, why)))
		return -EINVAL;
	return nft(batch, false, NULL, why);
}

int firewall_vm_agent_remove(const char *agent, char **why)
{
	char tap[FIREWALL_TAP_SIZE];

	firewall_vm_tap(agent, tap);
	return chain_remove(B, "vm-egress", agent, tap, why);
}

int firewall_vm_agent_refused(const char *agent, long long *packets)
{
	return counter_packets(B, agent, packets);
}
