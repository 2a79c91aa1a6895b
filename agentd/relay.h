/*
 * relay: bridge a virtio-serial port to a TCP service inside the guest
 * (fleetd's SSH control channel: host Unix socket <-> port <-> sshd).
 */
#ifndef FLEET_AGENTD_RELAY_H
#define FLEET_AGENTD_RELAY_H

#include <sys/socket.h>

#define RELAY_DEFAULT_PORT_NAME "org.fleet.ctl"
#define RELAY_DEFAULT_HOST "127.0.0.1"
#define RELAY_DEFAULT_TCP_PORT 22

/*
 * Find the virtio-serial port named port_name, open it once and serve host
 * connections forever: each host connection becomes one TCP connection to
 * host:port, opened only when the host has sent its first bytes.
 * Returns only on a fatal error, as a negative errno.
 */
int relay_run(const char *port_name, const char *host, int port);

/*
 * host (a numeric IPv4 or IPv6 address) and port as a socket address: 0,
 * or -EINVAL. No names: agentd is linked statically, and a static glibc's
 * getaddrinfo would load NSS modules into it (common/users.h).
 */
int relay_address(const char *host, int port, struct sockaddr_storage *ss, socklen_t *len);

#endif
