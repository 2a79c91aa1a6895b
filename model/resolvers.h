/*
 * resolvers: the DNS servers a user agent with a network is given in its
 * sandbox's /etc/resolv.conf. The host's own resolver is often on its
 * loopback (systemd-resolved's 127.0.0.53, a local dnsmasq), which no
 * agent may reach; so fleet writes the agent a resolv.conf of its own,
 * from fleetd.conf's user_dns list or, with "auto", from the host's
 * non-loopback servers. Plain data; no I/O.
 */
#ifndef FLEET_RESOLVERS_H
#define FLEET_RESOLVERS_H

#include <netinet/in.h>
#include <stddef.h>

#define RESOLVERS_MAX 3		/* what the C library reads of a resolv.conf (MAXNS) */

struct resolvers {
	char addr[RESOLVERS_MAX][INET6_ADDRSTRLEN];
	size_t n;
};

/*
 * A user_dns value: up to RESOLVERS_MAX IPv4 or IPv6 addresses, separated
 * by commas. Loopback addresses are refused (no agent reaches them). 0, or
 * -EINVAL with *why (a static message).
 */
int resolvers_parse(const char *list, struct resolvers *ret, const char **why);

/*
 * The servers a resolv.conf text names ("nameserver ADDR" lines), loopback
 * and invalid ones skipped, at most RESOLVERS_MAX. Never fails.
 */
void resolvers_from_resolv_conf(const char *text, size_t len, struct resolvers *ret);

/* The resolv.conf an agent gets (malloc'd); with no server, a comment saying why DNS will fail. */
char *resolvers_render(const struct resolvers *r, const char *origin);

#endif
