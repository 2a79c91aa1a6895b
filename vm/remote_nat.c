/*
 * remote_nat: --network nat for an agent on another host (#15), with
 * libvirt's own means there and nothing of fleet's installed: a NAT network
 * fleetd defines on that host (REMOTE_NAT_NETWORK, a /24 it chooses there)
 * and, per agent, a network filter (nwfilter, libvirt's ebtables rules on
 * the guest's tap) that the guest's interface names with <filterref>. The
 * filter holds the policy a local NAT agent has from fleetd's nftables
 * (vm/egress.c): nothing of the host, of other agents, of link-local (the
 * metadata address) or multicast, whatever the list says; then the agent's
 * --egress-allow list, or without one anything but the private ranges
 * (fleetd cannot ask libvirt for that host's own addresses, which are
 * usually there). Names in the list are resolved by fleetd, and the filter
 * is defined again when they resolve anew or the list changes: libvirt
 * applies a redefined filter to the running guest at once. This file never
 * touches fleetd's own host's firewall.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "common/log.h"
#include "common/util.h"
#include "model/egress.h"
#include "vm/virt_xml.h"
#include "vm/vm_internal.h"

#define HOST_ADDRS_MAX 16
/* The /24s fleet tries for its network on a host, in order: the first libvirt can start there. */
#define SUBNET_FIRST 224
#define SUBNET_LAST 239

char *vm_remote_nat_filter(const char *agent)
{
	return xasprintf(REMOTE_NAT_FILTER_PREFIX "%s", agent);
}

/*
 * The filter's UUID, the same at every definition (libvirt refuses to
 * redefine a filter under another one): two FNV-1a hashes of its name,
 * formatted as a version 4 UUID.
 */
static void filter_uuid(const char *agent, char uuid[37])
{
	uint64_t h[2] = { 0xcbf29ce484222325ULL, 0x84222325cbf29ce4ULL };

	for (int k = 0; k < 2; k++)
		for (const unsigned char *p = (const unsigned char *)agent; *p; p++)
			h[k] = (h[k] ^ *p) * 0x100000001b3ULL;
	snprintf(uuid, 37, "%08x-%04x-4%03x-%04x-%012llx", (unsigned)(h[0] >> 32), (unsigned)(h[0] >> 16) & 0xffff,
		 (unsigned)h[0] & 0xfff, 0x8000 | ((unsigned)(h[1] >> 48) & 0x3fff),
		 (unsigned long long)(h[1] & 0xffffffffffffULL));
}

static char *network_xml(int third)
{
	/* As fleet-nat on fleetd's host: NAT out, guests never reach each other (isolated ports). */
	return xasprintf("<network>\n"
			 "  <name>" REMOTE_NAT_NETWORK "</name>\n"
			 "  <forward mode='nat'/>\n"
			 "  <bridge name='" REMOTE_NAT_BRIDGE "' stp='off'/>\n"
			 "  <port isolated='yes'/>\n"
			 "  <ip address='192.168.%d.1' netmask='255.255.255.0'>\n"
			 "    <dhcp><range start='192.168.%d.10' end='192.168.%d.250'/></dhcp>\n"
			 "  </ip>\n"
			 "</network>\n", third, third, third);
}

/* The network's first IPv4 <ip> element (an IPv6 one says family='ipv6'). */
#define NETWORK_IP4 "/network/ip[not(@family) or @family='ipv4'][1]"

int vm_remote_nat_network_ip(const char *xml, char gw[INET_ADDRSTRLEN], int *prefix)
{
	_cleanup_free_ char *addr = NULL, *pfx = NULL, *mask = NULL;
	_cleanup_(virt_xml_freep) struct virt_xml *doc = virt_xml_parse(xml);
	struct in_addr a, m;
	long p;

	if (virt_xml_doc_string(doc, "string(" NETWORK_IP4 "/@address)", &addr) < 0 || !addr ||
	    strlen(addr) >= INET_ADDRSTRLEN || inet_pton(AF_INET, addr, &a) != 1)
		return -EINVAL;
	snprintf(gw, INET_ADDRSTRLEN, "%s", addr);
	if (virt_xml_doc_string(doc, "string(" NETWORK_IP4 "/@prefix)", &pfx) == 0 && pfx && parse_long(pfx, 8, 30, &p) == 0) {
		*prefix = (int)p;
		return 0;
	}
	if (virt_xml_doc_string(doc, "string(" NETWORK_IP4 "/@netmask)", &mask) < 0 || !mask || inet_pton(AF_INET, mask, &m) != 1)
		return -EINVAL;
	*prefix = __builtin_popcount(m.s_addr);
	return *prefix >= 8 && *prefix <= 30 ? 0 : -EINVAL;
}

int vm_remote_nat_network(struct virt *v, char gw[INET_ADDRSTRLEN], int *prefix, char **why)
{
	_cleanup_free_ char *xml = NULL;
	int r;

	if ((r = virt_network_xml(v, REMOTE_NAT_NETWORK, &xml, why)) == 0) {
		/* There already (fleet's from an earlier agent, or the operator's): used as it is, started if it is not. */
		if (vm_remote_nat_network_ip(xml, gw, prefix) < 0) {
			*why = xstrdup("network " REMOTE_NAT_NETWORK " there has no IPv4 address of its own");
			return -EINVAL;
		}
		return virt_network_ensure(v, REMOTE_NAT_NETWORK, xml, why);
	}
	if (r != -ENOENT)
		return r;
	free(*why);
	*why = NULL;
	for (int third = SUBNET_FIRST; third <= SUBNET_LAST; third++) {
		_cleanup_free_ char *net = network_xml(third), *swhy = NULL;

		/* libvirt refuses to start a network whose subnet a route there already uses: the next one. */
		if ((r = virt_network_ensure(v, REMOTE_NAT_NETWORK, net, &swhy)) == 0) {
			snprintf(gw, INET_ADDRSTRLEN, "192.168.%d.1", third);
			*prefix = 24;
			log_info("vm backend: network " REMOTE_NAT_NETWORK " on %s: 192.168.%d.0/24", virt_uri(v), third);
			return 0;
		}
		log_debug("vm backend: network " REMOTE_NAT_NETWORK " on %s: 192.168.%d.0/24: %s", virt_uri(v), third,
			  swhy ? swhy : "?");
		if (third == SUBNET_LAST || r == -ENOTCONN) {
			*why = xasprintf("cannot start network " REMOTE_NAT_NETWORK " there on any of 192.168.%d-%d.0/24: %s",
					 SUBNET_FIRST, SUBNET_LAST, swhy ? swhy : "?");
			return r;
		}
	}
	return -EIO;	/* not reached */
}

/*
 * The IPv4 addresses of the host in uri (libvirt's: transport://[user@]host[:port]/path?...),
 * resolved here: what fleetd reaches that host on is one of its own. None for a Unix socket.
 */
static size_t uri_host_addrs(const char *uri, char addrs[][INET_ADDRSTRLEN], size_t max)
{
	const char *p = uri ? strstr(uri, "://") : NULL, *at;
	char host[256];
	size_t len, n = 0;
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *res = NULL;

	if (!p)
		return 0;
	p += 3;
	len = strcspn(p, "/?");
	if ((at = memchr(p, '@', len))) {
		len -= (size_t)(at + 1 - p);
		p = at + 1;
	}
	if (len > 0 && p[0] == '[')
		return 0;	/* an IPv6 literal: the network is IPv4 only, and IPv6 is dropped whole */
	len = strcspn(p, ":/?") < len ? strcspn(p, ":/?") : len;
	if (len == 0 || len >= sizeof(host))
		return 0;
	memcpy(host, p, len);
	host[len] = '\0';
	if (getaddrinfo(host, NULL, &hints, &res) != 0)
		return 0;
	for (struct addrinfo *ai = res; ai && n < max; ai = ai->ai_next)
		if (inet_ntop(AF_INET, &((struct sockaddr_in *)ai->ai_addr)->sin_addr, addrs[n], INET_ADDRSTRLEN))
			n++;
	freeaddrinfo(res);
	return n;
}

/* One rule, from the guest (direction out), at the next priority. */
static void rule(FILE *b, int *prio, const char *action, const char *match)
{
	fprintf(b, "  <rule action='%s' direction='out' priority='%d'>%s</rule>\n", action, (*prio)++, match);
}

/* An accept for one IPv4 destination (ADDR/PREFIX), every port or port on tcp and udp. */
static void accept_dst(FILE *b, int *prio, const char *cidr, int port)
{
	char addr[INET_ADDRSTRLEN];
	const char *slash = strchr(cidr, '/');
	size_t len = slash ? (size_t)(slash - cidr) : strlen(cidr);
	_cleanup_free_ char *m = NULL, *tcp = NULL, *udp = NULL;

	if (len >= sizeof(addr))
		return;
	memcpy(addr, cidr, len);
	addr[len] = '\0';
	if (!port) {
		m = xasprintf("<ip dstipaddr='%s' dstipmask='%s'/>", addr, slash ? slash + 1 : "32");
		rule(b, prio, "accept", m);
		return;
	}
	tcp = xasprintf("<ip protocol='tcp' dstipaddr='%s' dstipmask='%s' dstportstart='%d'/>", addr,
			slash ? slash + 1 : "32", port);
	udp = xasprintf("<ip protocol='udp' dstipaddr='%s' dstipmask='%s' dstportstart='%d'/>", addr,
			slash ? slash + 1 : "32", port);
	rule(b, prio, "accept", tcp);
	rule(b, prio, "accept", udp);
}

char *vm_remote_nat_filter_xml(const char *agent, const char *gw, int prefix, const char *const *host_addrs,
			       const char *egress_allow, char **why)
{
	static const char *const never[] = { "0.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16", "224.0.0.0/4", "240.0.0.0/4" };
	static const char *const private[] = { "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10" };
	_cleanup_free_ struct egress_entry *entries = NULL;
	_cleanup_free_ char *name = vm_remote_nat_filter(agent), *gw32 = xasprintf("%s/32", gw);
	char *xml = NULL, net[INET_ADDRSTRLEN], uuid[37];
	struct in_addr a;
	size_t n = 0, len = 0;
	bool dns = !egress_allow;
	const char *perr;
	int prio = -900;
	FILE *b;

	if (egress_allow && egress_parse(egress_allow, &entries, &n, &perr) < 0) {
		*why = xasprintf("egress_allow: %s", perr);
		return NULL;
	}
	if (inet_pton(AF_INET, gw, &a) != 1 || prefix < 8 || prefix > 30) {
		*why = xasprintf("the network's address %s/%d is not an IPv4 subnet", gw, prefix);
		return NULL;
	}
	a.s_addr &= htonl(~0u << (32 - prefix));
	inet_ntop(AF_INET, &a, net, sizeof(net));
	/* As for a local agent, a list lets DNS through only when it names the resolver on the gateway. */
	for (size_t i = 0; i < n; i++)
		if (!entries[i].host[0] && strcmp(entries[i].cidr, gw32) == 0 && (!entries[i].port || entries[i].port == 53))
			dns = true;
	if (!(b = open_memstream(&xml, &len))) {
		*why = xasprintf("cannot build the filter: %s", strerror(errno));
		return NULL;
	}
	/* Agent names are [a-z][a-z0-9-]*, addresses come from inet_ntop or egress_parse: nothing to escape. */
	filter_uuid(agent, uuid);
	fprintf(b, "<filter name='%s' chain='root'>\n  <uuid>%s</uuid>\n", name, uuid);
	rule(b, &prio, "accept", "<arp/>");
	rule(b, &prio, "accept", "<ip protocol='udp' srcportstart='68' dstportstart='67'/>");	/* DHCP of libvirt's dnsmasq */
	if (dns) {
		_cleanup_free_ char *u = xasprintf("<ip protocol='udp' dstipaddr='%s' dstportstart='53'/>", gw);
		_cleanup_free_ char *t = xasprintf("<ip protocol='tcp' dstipaddr='%s' dstportstart='53'/>", gw);

		rule(b, &prio, "accept", u);
		rule(b, &prio, "accept", t);
	}
	/* Whatever the list says: the host (its address on the network, the one fleetd reaches it on), other agents. */
	prio = -500;
	{
		_cleanup_free_ char *m = xasprintf("<ip dstipaddr='%s' dstipmask='%d'/>", net, prefix);
		rule(b, &prio, "drop", m);
	}
	for (size_t i = 0; host_addrs && host_addrs[i]; i++) {
		_cleanup_free_ char *m = xasprintf("<ip dstipaddr='%s'/>", host_addrs[i]);
		rule(b, &prio, "drop", m);
	}
	for (size_t i = 0; i < ARRAY_SIZE(never); i++) {
		_cleanup_free_ char *m = xasprintf("<ip dstipaddr='%.*s' dstipmask='%s'/>", (int)(strchr(never[i], '/') - never[i]),
						   never[i], strchr(never[i], '/') + 1);
		rule(b, &prio, "drop", m);
	}
	/* The network is IPv4 only: no IPv6 at all (the host's link-local addresses are the host too). */
	rule(b, &prio, "drop", "<ipv6/>");
	prio = 0;
	for (size_t i = 0; i < n; i++) {
		struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *res = NULL;
		int g;

		if (!entries[i].host[0]) {
			if (entries[i].family == AF_INET)
				accept_dst(b, &prio, entries[i].cidr, entries[i].port);
			continue;	/* an IPv6 entry: nothing of it is reachable on this network */
		}
		if ((g = getaddrinfo(entries[i].host, NULL, &hints, &res)) != 0) {
			log_warning("agent '%s': egress-allow %s does not resolve (%s): nothing of it is allowed", agent,
				    entries[i].host, gai_strerror(g));
			continue;
		}
		for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
			char addr[INET_ADDRSTRLEN];

			if (inet_ntop(AF_INET, &((struct sockaddr_in *)ai->ai_addr)->sin_addr, addr, sizeof(addr)))
				accept_dst(b, &prio, addr, entries[i].port);
		}
		freeaddrinfo(res);
	}
	prio = 500;
	if (egress_allow) {
		rule(b, &prio, "drop", "<ip/>");
	} else {
		for (size_t i = 0; i < ARRAY_SIZE(private); i++) {
			_cleanup_free_ char *m = xasprintf("<ip dstipaddr='%.*s' dstipmask='%s'/>",
							   (int)(strchr(private[i], '/') - private[i]), private[i],
							   strchr(private[i], '/') + 1);
			rule(b, &prio, "drop", m);
		}
	}
	fprintf(b, "</filter>\n");
	if (fclose(b) != 0) {
		free(xml);
		*why = xstrdup("cannot build the filter: out of memory");
		return NULL;
	}
	return xml;
}

int vm_remote_nat_apply(struct virt *v, const char *agent, const char *egress_allow, char **why)
{
	char gw[INET_ADDRSTRLEN], addrs[HOST_ADDRS_MAX][INET_ADDRSTRLEN];
	const char *host_addrs[HOST_ADDRS_MAX + 1] = { 0 };
	_cleanup_free_ char *xml = NULL;
	size_t n;
	int prefix, r;

	if ((r = vm_remote_nat_network(v, gw, &prefix, why)) < 0)
		return r;
	n = uri_host_addrs(virt_uri(v), addrs, HOST_ADDRS_MAX);
	for (size_t i = 0; i < n; i++)
		host_addrs[i] = addrs[i];
	if (!(xml = vm_remote_nat_filter_xml(agent, gw, prefix, host_addrs, egress_allow, why)))
		return -EINVAL;
	return virt_nwfilter_define(v, xml, why);
}

void vm_remote_nat_remove(struct virt *v, const char *agent)
{
	_cleanup_free_ char *name = vm_remote_nat_filter(agent), *why = NULL;
	int r = virt_nwfilter_undefine(v, name, &why);

	if (r < 0 && r != -ENOENT)
		log_warning("agent '%s': cannot remove its network filter %s there: %s", agent, name, why ? why : "?");
}
