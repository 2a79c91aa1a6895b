/*
 * vm/remote_nat.c: the network filter of a NAT agent on another host, as
 * libvirt gets it. The host's own addresses, other agents, link-local and
 * multicast are dropped before any entry of the list is let through (so a
 * listed host address is still refused); a list ends in a drop of all IPv4,
 * no list in drops of the private ranges; DNS to the gateway only without a
 * list or when the list names it; IPv6 is dropped whole; the UUID is the
 * same at every definition; a bad list is refused with a reason. Addresses
 * only: nothing here resolves a name. tests/vm/hosts-nat.sh proves the
 * rules on a real libvirtd and real guests.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vm/vm_internal.h"
#include "../tap.h"

/* The priority of the first rule whose text contains match, or -10000 for none. */
static int prio_of(const char *xml, const char *match)
{
	const char *p = strstr(xml, match), *r;
	int prio;

	if (!p)
		return -10000;
	for (r = p; r > xml && strncmp(r, "<rule ", 6) != 0; r--)
		;
	if (!(r = strstr(r, "priority='")) || r > p || sscanf(r, "priority='%d'", &prio) != 1)
		return -10000;
	return prio;
}

static int count(const char *xml, const char *match)
{
	int n = 0;

	for (const char *p = xml; (p = strstr(p, match)); p++)
		n++;
	return n;
}

/* An existing network's gateway and prefix, read from libvirt's XML whatever its quoting, order or first <ip>. */
static void network_ip_read(void)
{
	char gw[16];
	int prefix = 0;

	ok(vm_remote_nat_network_ip("<network><name>fleet-rnat</name>\n"
				    "  <ip address='192.168.230.1' netmask='255.255.255.0'><dhcp/></ip>\n</network>", gw, &prefix) == 0 &&
	   strcmp(gw, "192.168.230.1") == 0 && prefix == 24, "libvirt's own form: address and netmask (%s/%d)", gw, prefix);
	ok(vm_remote_nat_network_ip("<network>\n<ip prefix=\"20\"\n    address=\"10.9.0.1\"/></network>", gw, &prefix) == 0 &&
	   strcmp(gw, "10.9.0.1") == 0 && prefix == 20, "double quotes, prefix first, a newline between attributes (%s/%d)", gw, prefix);
	ok(vm_remote_nat_network_ip("<network><ip family='ipv6' address='fd00::1' prefix='64'/>"
				    "<ip address='172.20.0.1' prefix='16'/></network>", gw, &prefix) == 0 &&
	   strcmp(gw, "172.20.0.1") == 0 && prefix == 16, "an IPv6 <ip> first: the IPv4 one is read (%s/%d)", gw, prefix);
	ok(vm_remote_nat_network_ip("<network><!-- <ip address='1.2.3.4' prefix='8'/> --><name>x</name></network>", gw, &prefix) < 0,
	   "an <ip> inside a comment is not the network's");
	ok(vm_remote_nat_network_ip("<network><ip family='ipv6' address='fd00::1' prefix='64'/></network>", gw, &prefix) < 0,
	   "IPv6 only: no gateway");
	ok(vm_remote_nat_network_ip("<network><ip address='192.168.1.1' prefix='31'/></network>", gw, &prefix) < 0,
	   "a prefix fleet cannot use is refused");
	ok(vm_remote_nat_network_ip("<network><ip address='192.168.1.1' prefix='24'>", gw, &prefix) < 0, "not XML: refused");
}

int main(void)
{
	const char *const host[] = { "198.18.15.2", NULL };
	char *why = NULL, *x, *y, *none, *dns;
	int last_drop;

	x = vm_remote_nat_filter_xml("rna", "192.168.224.1", 24, host, "198.51.100.2:8080,198.18.15.2:8080,10.1.0.0/16,2001:db8::1", &why);
	ok(x != NULL, "a list of addresses gives a filter (%s)", why ? why : "");
	if (!x)
		return tap_done();
	ok(strstr(x, "<filter name='fleet-agent-rna' chain='root'>") != NULL, "named after the agent, on the root chain");
	ok(count(x, "direction='out'") == count(x, "<rule "), "every rule is on what the guest sends");
	ok(prio_of(x, "<arp/>") < prio_of(x, "dstipaddr='192.168.224.0' dstipmask='24'"), "ARP passes first");
	ok(prio_of(x, "srcportstart='68' dstportstart='67'") < prio_of(x, "dstipaddr='192.168.224.0'"),
	   "DHCP passes before the gateway's subnet is dropped");
	ok(strstr(x, "dstportstart='53'") == NULL, "a list that does not name the gateway lets no DNS through");
	last_drop = prio_of(x, "<ipv6/>");
	ok(prio_of(x, "dstipaddr='192.168.224.0' dstipmask='24'") < last_drop, "the network (the host's gateway, other agents) dropped");
	ok(strstr(x, "<rule action='drop' direction='out' priority=") && prio_of(x, "<ip dstipaddr='198.18.15.2'/>") < last_drop,
	   "the address fleetd reaches the host on dropped");
	ok(prio_of(x, "dstipaddr='169.254.0.0' dstipmask='16'") < last_drop, "link-local (metadata) dropped");
	ok(prio_of(x, "dstipaddr='224.0.0.0' dstipmask='4'") < last_drop, "multicast dropped");
	ok(prio_of(x, "protocol='tcp' dstipaddr='198.18.15.2'") > last_drop,
	   "a listed host address comes after the drops (so it stays refused)");
	ok(prio_of(x, "protocol='tcp' dstipaddr='198.51.100.2' dstipmask='32' dstportstart='8080'") > last_drop &&
	   prio_of(x, "protocol='udp' dstipaddr='198.51.100.2' dstipmask='32' dstportstart='8080'") > last_drop,
	   "ADDR:PORT lets tcp and udp to that port through");
	ok(strstr(x, "<ip dstipaddr='10.1.0.0' dstipmask='16'/>") != NULL, "a CIDR lets the range through, every port");
	ok(strstr(x, "2001:db8") == NULL, "an IPv6 entry adds nothing (the network is IPv4 only)");
	ok(prio_of(x, "<ip/>") > prio_of(x, "dstipaddr='10.1.0.0'") && strstr(x, "action='drop' direction='out' priority='500'><ip/>"),
	   "the list ends in a drop of all IPv4");
	ok(strstr(x, "dstipaddr='172.16.0.0'") == NULL, "no private-range rules with a list (it refuses all else)");
	y = vm_remote_nat_filter_xml("rna", "192.168.224.1", 24, host, "198.51.100.3", &why);
	ok(y && strstr(x, "<uuid>") && strncmp(strstr(x, "<uuid>"), strstr(y, "<uuid>"), 43) == 0,
	   "the same UUID at every definition (libvirt redefines a filter only under its own)");

	none = vm_remote_nat_filter_xml("rnb", "192.168.225.1", 24, NULL, NULL, &why);
	ok(none != NULL, "no list gives a filter too");
	ok(none && strstr(none, "protocol='udp' dstipaddr='192.168.225.1' dstportstart='53'") &&
	   strstr(none, "protocol='tcp' dstipaddr='192.168.225.1' dstportstart='53'"), "without a list DNS to the gateway passes");
	ok(none && prio_of(none, "dstipaddr='10.0.0.0' dstipmask='8'") > 0 && prio_of(none, "dstipaddr='172.16.0.0' dstipmask='12'") > 0 &&
	   prio_of(none, "dstipaddr='192.168.0.0' dstipmask='16'") > 0 && prio_of(none, "dstipaddr='100.64.0.0' dstipmask='10'") > 0,
	   "without a list the private ranges are dropped");
	ok(none && strstr(none, "<ip/>") == NULL, "and the rest passes (no final drop)");
	ok(none && strstr(none, "dstipaddr='192.168.225.0' dstipmask='24'"), "the network's own subnet from its gateway");

	dns = vm_remote_nat_filter_xml("rnc", "192.168.224.1", 24, NULL, "192.168.224.1:53", &why);
	ok(dns && strstr(dns, "protocol='udp' dstipaddr='192.168.224.1' dstportstart='53'"),
	   "a list naming the gateway's port 53 lets DNS through, as for a local agent");

	free(why);
	why = NULL;
	ok(vm_remote_nat_filter_xml("rnd", "192.168.224.1", 24, NULL, "not a list;", &why) == NULL && why &&
	   strstr(why, "egress_allow:"), "a bad list is refused: %s", why ? why : "");
	free(why);
	why = NULL;
	ok(vm_remote_nat_filter_xml("rnd", "fe80::1", 64, NULL, NULL, &why) == NULL && why, "a gateway that is not IPv4 is refused");
	free(why);
	free(x);
	free(y);
	free(none);
	free(dns);
	network_ip_read();
	return tap_done();
}
