/*
 * resolvers: the user_dns list and the servers a host's resolv.conf names
 * (model/resolvers.c): loopback ones are never given to an agent.
 */
#include <stdlib.h>
#include <string.h>

#include "model/resolvers.h"
#include "tests/tap.h"

static void test_parse(void)
{
	struct resolvers r;
	const char *why = NULL;

	is_int(resolvers_parse("198.51.100.53", &r, &why), 0, "one IPv4 server");
	is_int((int)r.n, 1, "one");
	is_str(r.addr[0], "198.51.100.53", "as given");
	is_int(resolvers_parse("192.0.2.1,2001:db8::53,192.0.2.2", &r, &why), 0, "three, IPv4 and IPv6");
	is_str(r.addr[1], "2001:db8::53", "in order");
	ok(resolvers_parse("192.0.2.1,192.0.2.2,192.0.2.3,192.0.2.4", &r, &why) < 0 && strstr(why, "3"),
	   "four refused: a resolv.conf holds 3 (%s)", why);
	ok(resolvers_parse("127.0.0.53", &r, &why) < 0 && strstr(why, "loopback"), "loopback refused (%s)", why);
	ok(resolvers_parse("::1", &r, &why) < 0, "IPv6 loopback refused");
	ok(resolvers_parse("::ffff:127.0.0.1", &r, &why) < 0, "v4-mapped loopback refused");
	ok(resolvers_parse("0.0.0.0", &r, &why) < 0, "the unspecified address refused");
	ok(resolvers_parse("192.0.2.1,192.0.2.1", &r, &why) < 0 && strstr(why, "twice"), "a server twice refused");
	ok(resolvers_parse("", &r, &why) < 0, "empty refused");
	ok(resolvers_parse("192.0.2.1,", &r, &why) < 0, "a trailing comma refused");
	ok(resolvers_parse("dns.example.com", &r, &why) < 0, "a host name refused (it would need DNS)");
	ok(resolvers_parse("192.0.2.1 ", &r, &why) < 0, "trailing blank refused");
}

static void test_from_file(void)
{
	const char *text = "# generated\nsearch example.test\nnameserver 127.0.0.53\nnameserver\t192.0.2.1 # main\n"
			   "nameserver ::1\nnameservers 192.0.2.9\n nameserver 192.0.2.8\nnameserver 192.0.2.1\n"
			   "nameserver 2001:db8::1\r\nnameserver 192.0.2.3\nnameserver 192.0.2.4\noptions edns0\n";
	struct resolvers r;

	resolvers_from_resolv_conf(text, strlen(text), &r);
	is_int((int)r.n, 3, "three servers kept (loopback, duplicates and malformed lines left out)");
	is_str(r.addr[0], "192.0.2.1", "the first non-loopback one (a comment after it ignored)");
	is_str(r.addr[1], "2001:db8::1", "IPv6, a CRLF line end ignored");
	is_str(r.addr[2], "192.0.2.3", "then the next, up to 3");
	resolvers_from_resolv_conf("nameserver 127.0.0.53\noptions edns0 trust-ad\n", 44, &r);
	is_int((int)r.n, 0, "systemd-resolved's stub only: none");
	resolvers_from_resolv_conf("nameserver 192.0.2.7", 20, &r);
	is_int((int)r.n, 1, "a last line without a newline");
	resolvers_from_resolv_conf("nameserver 192.0.2.77", 18, &r);
	is_int((int)r.n, 0, "a line cut by the length is not read past it (192.0.2 is no address)");
}

static void test_render(void)
{
	struct resolvers r = { .n = 0 };
	char *t = resolvers_render(&r, "user_dns auto");

	ok(strstr(t, "user_dns") && !strstr(t, "nameserver "), "no server: only comments, naming user_dns");
	free(t);
	r.n = 1;
	strcpy(r.addr[0], "192.0.2.1");
	t = resolvers_render(&r, "test");
	ok(strstr(t, "\nnameserver 192.0.2.1\n") != NULL, "a server: its nameserver line");
	free(t);
}

int main(void)
{
	test_parse();
	test_from_file();
	test_render();
	return tap_done();
}
