/*
 * egress: the one parser of an agent's --egress-allow list: what a NAT
 * agent may reach when the list is set. A comma-separated list of
 * entries, each HOST, HOST:PORT, CIDR, CIDR:PORT, ADDR or ADDR:PORT; IPv6
 * with a port is bracketed ([2001:db8::/32]:443). HOST is a DNS name
 * (letters, digits, '-' and '.'), resolved by fleetd (backend/firewall.c).
 * Plain data; no I/O.
 */
#ifndef FLEET_EGRESS_H
#define FLEET_EGRESS_H

#include <stddef.h>

#define EGRESS_LIST_MAX 2048	/* characters of the whole list */
#define EGRESS_ENTRIES_MAX 64

struct egress_entry {
	char host[254];		/* a DNS name, or "" for an address */
	char cidr[72];		/* an address with its prefix (10.9.0.0/24, 2001:db8::1/128), or "" for a name */
	int family;		/* AF_INET or AF_INET6 for an address; 0 for a name */
	int port;		/* 1..65535 (tcp and udp), 0: every port */
};

/*
 * Parse list into *ret (n entries; the caller frees *ret). -EINVAL with
 * *why (a static message naming what is wrong) when an entry is not
 * valid; an empty list is -EINVAL too (no list means no limit).
 */
int egress_parse(const char *list, struct egress_entry **ret, size_t *n, const char **why);

#endif
