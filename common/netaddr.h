/*
 * netaddr: the "ADDR:PORT" listen addresses of fleetd.conf (hooks_listen,
 * metrics_listen: "IPV4:PORT" or "[IPV6]:PORT", checked by model/config.c),
 * resolved numerically, and a bound socket's address written the same way.
 */
#ifndef FLEET_COMMON_NETADDR_H
#define FLEET_COMMON_NETADDR_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

struct addrinfo;

/* Resolve spec (no name lookups) for a passive TCP socket into *ai (freeaddrinfo it): 0 or -EINVAL. */
int netaddr_resolve(const char *spec, struct addrinfo **ai);
/* ss as "IPV4:PORT" or "[IPV6]:PORT" into buf ("?" parts when it cannot be said). */
void netaddr_format(const struct sockaddr_storage *ss, char *buf, size_t len);
/* Whether sa is a loopback address (127/8, ::1, or 127/8 mapped into IPv6). */
bool netaddr_is_loopback(const struct sockaddr *sa);

#endif
