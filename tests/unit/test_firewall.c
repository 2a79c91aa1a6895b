/*
 * backend/firewall.c, the VM agents' half: the tap name fleet gives a
 * guest (short enough for the kernel, stable, one per agent), the nft batch
 * of an egress list (matched on that tap, never on an address or MAC the
 * guest chooses; every listed entry accepted, the rest counted and
 * dropped), and, as root, the same rules loaded by the real nft into a
 * network namespace of this test's own: applied, counted, replaced,
 * removed.
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/firewall.h"
#include "backend/spawn.h"
#include "../tap.h"

static int count(const char *hay, const char *needle)
{
	int n = 0;

	for (const char *p = hay; (p = strstr(p, needle)); p++)
		n++;
	return n;
}

/* nft's own listing of what is there, or NULL. */
static char *nft_list(const char *what)
{
	static const char *const env[] = { "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", NULL };
	static const char *const dirs[] = { "/usr/sbin", "/usr/bin", "/sbin", "/bin", NULL };
	const struct spawn_opts o = { .envp = env, .search = dirs, .output_max = 65536 };
	const char *argv[] = { "nft", "list", "table", what, NULL };
	char *out = NULL;

	if (spawn_tool(argv, &o, &out) != 0) {
		free(out);
		return NULL;
	}
	return out;
}

static void real_nft(void)
{
	char tap[FIREWALL_TAP_SIZE], want[64];
	char *why = NULL, *list;
	long long packets = -1;

	firewall_vm_tap("fwt-a", tap);
	is_int(firewall_vm_base(&why), 0, "the bridge table loads (%s)", why ? why : "ok");
	free(why), why = NULL;
	is_int(firewall_vm_agent_apply("fwt-a", "198.51.100.2:8080,10.9.0.0/24", &why), 0, "an agent's list loads (%s)",
	       why ? why : "ok");
	free(why), why = NULL;
	list = nft_list("bridge fleet");
	ok(list != NULL, "nft lists the bridge table");
	snprintf(want, sizeof(want), "\"%s\" : jump agent-fwt-a", tap);
	ok(list && strstr(list, want), "the map sends its tap to its chain");
	ok(list && strstr(list, "ip daddr 198.51.100.2 meta l4proto { tcp, udp } th dport 8080 accept"),
	   "the listed address and port are accepted");
	ok(list && strstr(list, "ip daddr 10.9.0.0/24 accept"), "the listed CIDR is accepted");
	ok(list && strstr(list, "counter name \"refused-fwt-a\" drop"), "the rest is counted and dropped");
	free(list);
	is_int(firewall_vm_agent_refused("fwt-a", &packets), 0, "its counter is there");
	is_int((int)packets, 0, "and has refused nothing yet");

	/* A changed list replaces the old one whole. */
	is_int(firewall_vm_agent_apply("fwt-a", "192.0.2.9", &why), 0, "a new list replaces it");
	free(why), why = NULL;
	list = nft_list("bridge fleet");
	ok(list && strstr(list, "ip daddr 192.0.2.9 accept") && !strstr(list, "198.51.100.2"),
	   "only the new list's address is there");
	is_int(count(list ? list : "", "jump agent-fwt-a"), 1, "and the map has one entry for the tap");
	free(list);

	/* No list: nothing of the agent's is left. */
	is_int(firewall_vm_agent_apply("fwt-a", NULL, &why), 0, "no list removes its rules");
	free(why), why = NULL;
	list = nft_list("bridge fleet");
	ok(list && !strstr(list, "fwt-a") && !strstr(list, tap), "no chain, counter or map entry of it is left");
	free(list);
	is_int(firewall_vm_agent_refused("fwt-a", &packets), -ENOENT, "and no counter");
	is_int(firewall_vm_agent_remove("fwt-a", &why), 0, "removing what is gone is fine");
	free(why);
}

int main(void)
{
	char a[FIREWALL_TAP_SIZE], b[FIREWALL_TAP_SIZE], a2[FIREWALL_TAP_SIZE];
	char *why = NULL, *batch;
	const char *long_name = "an-agent-name-of-32-characters-x";

	firewall_vm_tap(long_name, a);
	is_int((int)strlen(a), 15, "a tap name fits IFNAMSIZ even for a 32-character agent name (%s)", a);
	ok(strncmp(a, FIREWALL_VM_TAP_PREFIX, strlen(FIREWALL_VM_TAP_PREFIX)) == 0, "it has fleet's prefix");
	ok(strncmp(a, "vnet", 4) != 0 && strncmp(a, "macvtap", 7) != 0, "and none libvirt keeps for itself");
	firewall_vm_tap(long_name, a2);
	is_str(a2, a, "the same agent gets the same tap every time");
	firewall_vm_tap("an-agent-name-of-32-characters-y", b);
	ok(strcmp(a, b) != 0, "another agent another (%s)", b);

	batch = firewall_vm_agent_batch("fwt-b", "198.51.100.2:8080,10.9.0.0/24,[2001:db8::/32]:443,localhost:53", &why);
	ok(batch != NULL, "a list's batch is built (%s)", why ? why : "ok");
	batch = batch ? batch : strdup("");
	firewall_vm_tap("fwt-b", b);
	{
		char want[96];

		snprintf(want, sizeof(want), "add element bridge fleet vm-egress { \"%s\" : jump agent-fwt-b }", b);
		ok(strstr(batch, want) != NULL, "its tap jumps to its chain");
	}
	ok(strstr(batch, "agent-fwt-b ip daddr 198.51.100.2/32 meta l4proto { tcp, udp } th dport 8080 accept"),
	   "an address with a port");
	ok(strstr(batch, "agent-fwt-b ip daddr 10.9.0.0/24 accept"), "a CIDR, every port");
	ok(strstr(batch, "agent-fwt-b ip6 daddr 2001:db8::/32 meta l4proto { tcp, udp } th dport 443 accept"),
	   "an IPv6 prefix with a port");
	ok(strstr(batch, "agent-fwt-b ip daddr 127.0.0.1 meta l4proto { tcp, udp } th dport 53 accept"),
	   "a name, resolved to its address");
	ok(strstr(batch, "udp sport 68 udp dport 67 accept"), "DHCP to the gateway stays (the guest's address)");
	ok(!strstr(batch, "dport 53 accept comment \"agent"), "DNS is not let through unless listed (as for user agents)");
	ok(!strstr(batch, "saddr"), "nothing matches a source address or MAC the guest could choose");
	{
		const char *drop = strstr(batch, "counter name \"refused-fwt-b\" drop");
		const char *last_accept = NULL;

		for (const char *p = batch; (p = strstr(p, " accept")); p++)
			last_accept = p;
		ok(drop && last_accept && drop > last_accept, "the counted drop comes after every accept");
	}
	free(batch);
	free(why), why = NULL;

	ok(firewall_vm_agent_batch("fwt-c", "not a list!", &why) == NULL && why && strstr(why, "egress_allow"),
	   "a bad list is refused with its reason (%s)", why ? why : "none");
	free(why);

	if (geteuid() != 0 || unshare(CLONE_NEWNET) < 0)
		printf("# skipping the real nft part: needs root (a network namespace of its own)\n");
	else
		real_nft();
	return tap_done();
}
