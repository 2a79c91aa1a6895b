/*
 * firewall: the nftables rules fleet owns, for both backends: what no
 * agent with a network may reach, and each NAT agent's egress allow list.
 * Everything lives in one table, `inet fleet`, that nothing else touches:
 *
 *   chain input        (hook input):   every new connection from an agent interface
 *                                       to the host is dropped (its loopback
 *                                       services, the webhook listener, every
 *                                       address it has, IPv4 and IPv6; ping
 *                                       answers, IPv6 neighbour discovery
 *                                       passes); a VM bridge may still
 *                                       ask libvirt's dnsmasq for DHCP and DNS
 *   chain forward      (hook forward): agent to agent, and to the metadata
 *                                       address (169.254.0.0/16, fd00:ec2::254),
 *                                       dropped; then each user agent's
 *                                       interface jumps to its own chain
 *   chain postrouting  (nat):          masquerade of the user agents' subnets (IPv4, IPv6)
 *   map egress                          interface -> jump agent-NAME
 *   chain agent-NAME, counter refused-NAME   one agent's allow list, and
 *                                       what it refused
 *
 * Drops are final in nftables whatever other tables (libvirt's, iptables')
 * accept, so nothing another tool adds can undo them. Each call is one
 * `nft` transaction, flushing and refilling what it owns, so it can be
 * repeated (at every fleetd start, after `nft delete table inet fleet`).
 * nft runs through spawn.c with a fixed environment; rules are built from
 * validated names and addresses only.
 */
#ifndef FLEET_FIREWALL_H
#define FLEET_FIREWALL_H

#include <stdbool.h>

#define FIREWALL_TABLE "fleet"
/* Host ends of the user agents' veth pairs are USER_IFACE_PREFIX<slot> (user/netns.c). */
#define FIREWALL_USER_IFACE_PREFIX "flh"
/* libvirt's bridge of the VM agents' NAT network (vm/provision.c), and its address there. */
#define FIREWALL_VM_BRIDGE "fleetbr0"
#define FIREWALL_VM_GATEWAY "192.168.223.1"
/* A VM agent's tap device: this prefix and 12 hex digits of a hash of its name (firewall_vm_tap). */
#define FIREWALL_VM_TAP_PREFIX "flv"
#define FIREWALL_TAP_SIZE 16	/* IFNAMSIZ */

/*
 * The table, its base chains and the rules for every agent alike; user_subnet
 * (A.B.C.D/P) is masqueraded, and user_subnet6 (an IPv6 prefix; NULL or "":
 * none) too where the host has IPv6. 0, or -errno with *why (nft's own words).
 */
int firewall_base(const char *user_subnet, const char *user_subnet6, char **why);

/*
 * One agent's chain behind its interface: with egress_allow (model/egress.h)
 * NULL, anything outside; else only the listed addresses (names resolved
 * now, each to all its addresses; a name that does not resolve adds
 * nothing, and is logged), every other packet counted and dropped. 0 or
 * -errno with *why.
 */
int firewall_agent_apply(const char *agent, const char *iface, const char *egress_allow, char **why);
/* Remove the agent's chain, counter and map entry; nothing there is fine. */
int firewall_agent_remove(const char *agent, const char *iface, char **why);
/* Packets the agent's allow list refused so far: 0 and *packets, -ENOENT without a counter, or -errno. */
int firewall_agent_refused(const char *agent, long long *packets);
/* Is fleet's `inet fleet` table there with its base chains (for `fleetctl doctor`)? */
bool firewall_base_present(void);
/* Is the agent's chain there (for reconciling at start)? */
bool firewall_agent_present(const char *agent);

/*
 * VM agents' allow lists live in a second table, `bridge fleet`, because
 * their packets reach the host from one bridge (fleetbr0) where the inet
 * table cannot tell the guests apart; the bridge family sees the port each
 * frame came in on, the agent's tap, which fleet names in the domain XML
 * (firewall_vm_tap) and which nothing inside the guest can choose:
 *
 *   chain prerouting   (bridge prerouting): a port jumps through the map
 *                      vm-egress (tap -> jump agent-NAME)
 *   chain agent-NAME, counter refused-NAME: ARP, DHCP to the gateway, the
 *                      listed addresses; everything else counted and dropped
 *
 * The inet table's rules (the host, metadata, other agents) still apply
 * to what this lets through.
 */
/* The tap device of agent's guest, FIREWALL_VM_TAP_PREFIX + 12 hex digits. */
void firewall_vm_tap(const char *agent, char tap[FIREWALL_TAP_SIZE]);
/* The bridge table and its prerouting chain; 0 or -errno with *why. */
int firewall_vm_base(char **why);
/*
 * The nft batch that (re)makes agent's chain from egress_allow (names
 * resolved now, as firewall_agent_apply); the caller frees it. NULL with
 * *why when the list does not parse.
 */
char *firewall_vm_agent_batch(const char *agent, const char *egress_allow, char **why);
/* Apply it (egress_allow NULL: firewall_vm_agent_remove); 0 or -errno with *why. */
int firewall_vm_agent_apply(const char *agent, const char *egress_allow, char **why);
/* Remove agent's chain, counter and map entry; nothing there is fine. */
int firewall_vm_agent_remove(const char *agent, char **why);
/* As firewall_agent_refused, for a VM agent. */
int firewall_vm_agent_refused(const char *agent, long long *packets);

#endif
