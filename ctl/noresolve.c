/*
 * noresolve: what libcurl's getaddrinfo and freeaddrinfo are in fleetctl
 * (the linker's --wrap, configure.ac's FLEETCTL_LDFLAGS, when fleetctl is
 * static). fleetctl only talks to fleetd's Unix socket: libcurl connects
 * there through CURLOPT_UNIX_SOCKET_PATH, with an address it makes itself
 * (Curl_unix2addr), and never resolves the URL's host ("http://fleet/...").
 * Its resolver code still references getaddrinfo, which in a static glibc
 * pulls in NSS: nsswitch.conf read and its modules (libnss_*.so) dlopen'ed
 * into the static program, the crash common/users.h tells of. Here no name
 * is ever resolved: EAI_NONAME, and the lookup of a host fails as one that
 * does not exist would (libcurl: "Could not resolve host").
 */
#include <netdb.h>
#include <stddef.h>

/* The prototypes the linker's --wrap=getaddrinfo,--wrap=freeaddrinfo binds libcurl's calls to. */
int __wrap_getaddrinfo(const char *node, const char *service, const struct addrinfo *hints, struct addrinfo **res);
void __wrap_freeaddrinfo(struct addrinfo *ai);

int __wrap_getaddrinfo(const char *node, const char *service, const struct addrinfo *hints, struct addrinfo **res)
{
	if (res)
		*res = NULL;
	return EAI_NONAME;
}

/* Nothing was ever allocated by the getaddrinfo above. */
void __wrap_freeaddrinfo(struct addrinfo *ai)
{
}
