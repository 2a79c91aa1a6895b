/* resolvers: see resolvers.h. */
#include "model/resolvers.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "common/util.h"

/* addr (text) as one of the servers: a valid address that is not loopback (nor unspecified). */
static bool usable(const char *addr)
{
	struct in6_addr a6;
	struct in_addr a4;

	if (inet_pton(AF_INET, addr, &a4) == 1)
		return (ntohl(a4.s_addr) >> 24) != 127 && a4.s_addr != 0;
	if (inet_pton(AF_INET6, addr, &a6) == 1)
		return !IN6_IS_ADDR_LOOPBACK(&a6) && !IN6_IS_ADDR_UNSPECIFIED(&a6) &&
		       !(IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127);
	return false;
}

static void add(struct resolvers *r, const char *addr, size_t len)
{
	if (r->n >= RESOLVERS_MAX || len == 0 || len >= sizeof(r->addr[0]))
		return;
	memcpy(r->addr[r->n], addr, len);
	r->addr[r->n][len] = '\0';
	if (!usable(r->addr[r->n]))
		return;
	for (size_t i = 0; i < r->n; i++)
		if (strcmp(r->addr[i], r->addr[r->n]) == 0)
			return;
	r->n++;
}

int resolvers_parse(const char *list, struct resolvers *ret, const char **why)
{
	const char *p = list;

	memset(ret, 0, sizeof(*ret));
	for (;;) {
		size_t len = strcspn(p, ",");
		size_t before = ret->n;
		char one[INET6_ADDRSTRLEN];

		if (len == 0 || len >= sizeof(one)) {
			*why = "must be 'auto' or 1 to 3 IP addresses separated by commas";
			return -EINVAL;
		}
		memcpy(one, p, len);
		one[len] = '\0';
		if (ret->n == RESOLVERS_MAX) {
			*why = "names more than 3 servers (a resolv.conf holds 3)";
			return -EINVAL;
		}
		add(ret, one, len);
		if (ret->n == before) {
			*why = usable(one) ? "names a server twice"
					   : "must list IP addresses, none of them loopback (no agent reaches the host's)";
			return -EINVAL;
		}
		if (p[len] == '\0')
			return 0;
		p += len + 1;
	}
}

void resolvers_from_resolv_conf(const char *text, size_t len, struct resolvers *ret)
{
	const char *p = text, *end = text + len;

	memset(ret, 0, sizeof(*ret));
	while (p < end) {
		const char *eol = memchr(p, '\n', (size_t)(end - p)), *q;
		size_t n;

		if (!eol)
			eol = end;
		/* "nameserver" SPACE ADDR [anything]: the word, blanks, the address up to a blank or the end */
		if ((size_t)(eol - p) > 11 && strncmp(p, "nameserver", 10) == 0 && (p[10] == ' ' || p[10] == '\t')) {
			for (q = p + 10; q < eol && (*q == ' ' || *q == '\t'); q++)
				;
			for (n = 0; q + n < eol && q[n] != ' ' && q[n] != '\t' && q[n] != '\r' && q[n] != '#'; n++)
				;
			add(ret, q, n);
		}
		p = eol + 1;
	}
}

char *resolvers_render(const struct resolvers *r, const char *origin)
{
	char *text = xasprintf("# the DNS servers fleet gives this agent (%s)\n", origin), *next;

	for (size_t i = 0; i < r->n; i++) {
		next = xasprintf("%snameserver %s\n", text, r->addr[i]);
		free(text);
		text = next;
	}
	if (r->n == 0) {
		next = xasprintf("%s# none: the host's are all on its loopback, which no agent reaches; "
				 "set user_dns in fleetd.conf\n", text);
		free(text);
		text = next;
	}
	return text;
}
