/* netaddr: see netaddr.h. */
#include "common/netaddr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

int netaddr_resolve(const char *spec, struct addrinfo **ai)
{
	struct addrinfo hints = { .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE, .ai_socktype = SOCK_STREAM };
	const char *colon = strrchr(spec, ':');
	char host[64];
	size_t hl;

	if (!colon)
		return -EINVAL;
	hl = (size_t)(colon - spec);
	if (hl >= 2 && spec[0] == '[') {
		spec++;
		hl -= 2;
	}
	if (hl == 0 || hl >= sizeof(host))
		return -EINVAL;
	memcpy(host, spec, hl);
	host[hl] = '\0';
	return getaddrinfo(host, colon + 1, &hints, ai) == 0 ? 0 : -EINVAL;
}

void netaddr_format(const struct sockaddr_storage *ss, char *buf, size_t len)
{
	char host[INET6_ADDRSTRLEN] = "?", port[8] = "?";

	(void)getnameinfo((const struct sockaddr *)ss, sizeof(*ss), host, sizeof(host), port, sizeof(port),
			  NI_NUMERICHOST | NI_NUMERICSERV);
	snprintf(buf, len, ss->ss_family == AF_INET6 ? "[%s]:%s" : "%s:%s", host, port);
}

bool netaddr_is_loopback(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
	if (sa->sa_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;

		return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
	}
	return false;
}
