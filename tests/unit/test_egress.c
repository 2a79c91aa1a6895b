/*
 * model/egress.c, the one parser of --egress-allow lists: what it accepts
 * (names, addresses, CIDRs, ports, bracketed IPv6) comes out normalised
 * (every address with its prefix), and everything else is refused with a
 * reason, so nothing malformed reaches an nft rule.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "model/egress.h"
#include "../tap.h"

static void refused(const char *list, const char *why_part)
{
	struct egress_entry *e = NULL;
	const char *why = "";
	size_t n = 0;

	is_int(egress_parse(list, &e, &n, &why), -EINVAL, "refused: '%s'", list);
	ok(strstr(why, why_part) != NULL, "  because: %s", why);
	free(e);
}

int main(void)
{
	struct egress_entry *e = NULL;
	const char *why = NULL;
	size_t n = 0;
	char big[3000];

	is_int(egress_parse("api.github.com:443,10.9.0.0/24, 192.0.2.7,[2001:db8::/32]:8443,fd00::1,Example.org",
			    &e, &n, &why), 0, "a mixed list parses");
	is_int((int)n, 6, "six entries");
	is_str(e[0].host, "api.github.com", "a name");
	is_int(e[0].port, 443, "with its port");
	is_int(e[0].family, 0, "a name has no family");
	is_str(e[1].cidr, "10.9.0.0/24", "a CIDR");
	is_int(e[1].port, 0, "no port: every port");
	is_int(e[1].family, AF_INET, "IPv4");
	is_str(e[2].cidr, "192.0.2.7/32", "a bare address gets /32 (leading space skipped)");
	is_str(e[3].cidr, "2001:db8::/32", "bracketed IPv6 CIDR");
	is_int(e[3].port, 8443, "with its port");
	is_int(e[3].family, AF_INET6, "IPv6");
	is_str(e[4].cidr, "fd00::1/128", "a bare IPv6 address, its colons not taken for a port");
	is_str(e[5].host, "Example.org", "names keep their case");
	free(e);

	refused("", "1 to 2048");
	refused(",,", "lists nothing");
	refused("a b", "host name, an address or a CIDR");
	refused("evil\"; flush ruleset", "host name");
	refused("10.0.0.0/33", "host name, an address or a CIDR");
	refused("10.0.0.1:0", "port");
	refused("10.0.0.1:65536", "port");
	refused("host:http", "port");
	refused("[2001:db8::1", "[ADDR]:PORT");
	refused("-bad.example", "host name");
	refused("bad-.example", "host name");
	refused("a..b", "host name");
	refused("1.2.3", "host name");	/* all digits: an address gone wrong, never a name */
	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	refused(big, "1 to 2048");
	{
		char many[2048] = "";
		for (int i = 0; i < 65; i++)
			strcat(many, "a.b,");
		refused(many, "more than 64");
	}
	return tap_done();
}
