#!/bin/bash
# VM agents and their network: `--network nat` guests get a DHCP address on
# fleet's NAT network (fleet-nat, 192.168.223.0/24), reach its gateway, and do
# not reach each other (every port is isolated), in both directions, nor a
# TCP service of the host (fleet's nftables rules; controls: the host side
# reaches it, and so does the guest once the table is deleted); a
# `--network none` guest has no NIC at all. Everything runs under a private
# libvirtd in a network + mount namespace this test creates
# (tests/lib/vmns.sh): guest traffic never leaves that namespace.
. "$FLEET_SRCDIR/tests/lib/common.sh"

. "$FLEET_SRCDIR/tests/lib/vmfleet.sh"
vmfleet_setup --tcg dnsmasq busybox

# guest_addr NAME: the guest's IPv4 address on eth0, empty if none yet.
guest_addr() {
	"$FLEETCTL" exec "$1" --root --no-stdin --timeout 20 -- ip -4 addr show eth0 2>/dev/null |
		sed -n 's/^ *inet \([0-9.]*\)\/.*/\1/p' | head -1
}
has_addr() { [ -n "$(guest_addr "$1")" ]; }
# guest_ping NAME ADDR: one ping from the guest, as root (busybox ping needs a raw socket).
guest_ping() { "$FLEETCTL" exec "$1" --root --no-stdin --timeout 30 -- ping -c1 -W2 "$2" >/dev/null 2>&1; }
# guest_ping_retry NAME ADDR: up to 3 tries, for the positive checks only (a
# first packet may wait for ARP); a negative check never retries to success.
guest_ping_retry() { local i; for i in 1 2 3; do guest_ping "$1" "$2" && return 0; done; return 1; }
# ping_status NAME ADDR: "rc=N", ping's exit status as the guest saw it (3 pings, 2 s each).
ping_status() {
	"$FLEETCTL" exec "$1" --root --no-stdin --timeout 30 -- sh -c 'ping -c3 -W2 "$1" >/dev/null 2>&1; echo rc=$?' sh "$2" 2>/dev/null
}
# ns_ping ADDR: one ping from the host side of fleet-nat (inside this test's namespace).
if command -v ping >/dev/null; then NS_PING=(ping); else NS_PING=(busybox ping); fi
ns_ping() { vmns_exec "${NS_PING[@]}" -c1 -W2 "$1" >/dev/null 2>&1; }

fleetd_ns_start; ok $? "fleetd starts inside the namespace"
like "$("$FLEETCTL" --json status | jq -r .backends.vm)" "^available" "the vm backend is available"

# --- provisioning ------------------------------------------------------------------------
"$FLEETCTL" create na --backend vm --network nat >/dev/null; ok $? "create agent na with --network nat"
"$FLEETCTL" create nb --backend vm --network nat >/dev/null; ok $? "create agent nb with --network nat"
"$FLEETCTL" create nn --backend vm --network none >/dev/null; ok $? "create agent nn with --network none"
is "$("$FLEETCTL" --json show na | jq -r .network)" nat "fleetd records na's network as nat"
is "$("$FLEETCTL" --json show nn | jq -r .network)" none "and nn's as none"

like "$(virsh_ns net-list --name)" "^fleet-nat\$" "the fleet-nat network is defined and active"
netxml=$(virsh_ns net-dumpxml fleet-nat)
like "$netxml" "<forward mode='nat'" "fleet-nat forwards with NAT"
like "$netxml" "<ip address='192.168.223.1' netmask='255.255.255.0'>" "its gateway is 192.168.223.1/24"
like "$netxml" "<port isolated='yes'/>" "its ports are isolated by default"
for a in na nb; do
	xml=$(virsh_ns dumpxml "fleet-$a")
	like "$xml" "<source network='fleet-nat'" "fleet-$a has an interface on fleet-nat"
	like "$xml" "<port isolated='yes'/>" "fleet-$a's interface is an isolated port"
done
xml=$(virsh_ns dumpxml fleet-nn)
like "$xml" "<name>fleet-nn</name>" "fleet-nn is defined"
ok "$(printf '%s' "$xml" | grep -q '<interface' && echo 1 || echo 0)" "fleet-nn has no interface"

# --- boot all three at once (fleetctl start returns once the control channel is up) ------
t0=$SECONDS
pids=()
for a in na nb nn; do
	"$FLEETCTL" start "$a" >"$TEST_TMP/start.$a" 2>&1 &
	pids+=($!)
done
i=0
for a in na nb nn; do
	wait "${pids[$i]}"; ok $? "start $a"
	i=$((i + 1))
done
diag "three guests reached their control channel in $((SECONDS - t0)) s"

# --- addresses -------------------------------------------------------------------------------
wait_for 120 has_addr na; ok $? "na gets an address on eth0 by DHCP"
wait_for 120 has_addr nb; ok $? "nb gets an address on eth0 by DHCP"
A=$(guest_addr na)
B=$(guest_addr nb)
diag "na: ${A:-none}, nb: ${B:-none}"
like "$A" '^192\.168\.223\.([1-9][0-9]|1[0-9][0-9]|2[0-4][0-9]|250)$' "na's address is in fleet-nat's DHCP range"
like "$B" '^192\.168\.223\.([1-9][0-9]|1[0-9][0-9]|2[0-4][0-9]|250)$' "nb's address is in fleet-nat's DHCP range"
check "the two addresses differ" -- test -n "$A" -a "$A" != "$B"
like "$("$FLEETCTL" exec na --root --no-stdin -- ip -4 route show default 2>/dev/null)" \
	"default via 192\.168\.223\.1 dev eth0" "na's default route goes through the gateway"

# --- reachability ------------------------------------------------------------------------------
guest_ping_retry na 192.168.223.1; ok $? "na reaches the gateway 192.168.223.1"
guest_ping_retry nb 192.168.223.1; ok $? "nb reaches the gateway 192.168.223.1"
# The addresses answer (from the gateway's side, inside this test's namespace),
# so a guest that cannot reach the other is stopped by the isolation, not by a dead address.
wait_for 10 ns_ping "$A"; ok $? "na's address answers from the host side of fleet-nat"
wait_for 10 ns_ping "$B"; ok $? "nb's address answers from the host side of fleet-nat"
# The guest prints ping's status itself, so a failure of fleetctl cannot pass for a failed ping.
is "$(ping_status na "$B")" "rc=1" "na cannot reach nb (isolated ports): its ping fails"
is "$(ping_status nb "$A")" "rc=1" "nb cannot reach na (isolated ports): its ping fails"
# And the gateway still answers afterwards: the failure above was not a broken guest network.
guest_ping_retry na 192.168.223.1; ok $? "na still reaches the gateway after that"
guest_ping_retry nb 192.168.223.1; ok $? "nb still reaches the gateway after that"

# --- fleet's firewall (table inet fleet, backend/firewall.c): the host is not a service to guests --
# A service on every address of the host side; the namespace's own end reaches it on the gateway
# address (control), a guest does not (ping still answers, above).
nsenter -t "$VMNS_PID" -m -n -- socat TCP-LISTEN:7002,fork,reuseaddr SYSTEM:'echo host-any' 2>/dev/null &
_pids+=($!)
for ((i = 0; i < 100; i++)); do
	[ "$(vmns_exec socat -T3 - TCP:192.168.223.1:7002 </dev/null 2>/dev/null)" = host-any ] && break; sleep 0.1
done
is "$(vmns_exec socat -T3 - TCP:192.168.223.1:7002 </dev/null 2>/dev/null)" host-any \
	"the host side reaches its service on the gateway address (control)"
is "$("$FLEETCTL" exec na --root --no-stdin --timeout 30 -- sh -c 'nc -w 3 192.168.223.1 7002 </dev/null 2>/dev/null')" "" \
	"na does not reach the host's service on the gateway address"
like "$(vmns_exec nft list chain inet fleet input 2>&1)" 'iifname "fleetbr0" counter packets [1-9][0-9]* bytes [0-9]+ drop' \
	"fleet's input rule for fleetbr0 counted the refusal"
vmns_exec nft delete table inet fleet
like "$("$FLEETCTL" exec na --root --no-stdin --timeout 30 -- sh -c 'nc -w 3 192.168.223.1 7002 </dev/null 2>/dev/null')" \
	'^host-any' "without fleet's table na reaches it (control: the rule refused it)"
"$FLEETCTL" restart na >/dev/null 2>&1; ok $? "restart na (its start applies the rules again)"
check "the table is back" -- vmns_exec nft list chain inet fleet input
is "$("$FLEETCTL" exec na --root --no-stdin --timeout 30 -- sh -c 'nc -w 3 192.168.223.1 7002 </dev/null 2>/dev/null')" "" \
	"na is refused again"

# --- no network ----------------------------------------------------------------------------------
is "$("$FLEETCTL" exec nn --root --no-stdin -- sh -c 'ls /sys/class/net | sort | tr "\n" " "')" "lo " \
	"a --network none guest has only lo"
is "$("$FLEETCTL" exec nn --root --no-stdin -- sh -c 'ip -4 addr show eth0 >/dev/null 2>&1; echo rc=$?')" "rc=1" \
	"and no eth0"
like "$(ping_status nn 192.168.223.1)" "^rc=[1-9]" "and it cannot reach fleet-nat's gateway"

# --- remove ----------------------------------------------------------------------------------------
for a in na nb nn; do
	"$FLEETCTL" rm --force "$a" >/dev/null; ok $? "rm --force $a"
done
is "$(virsh_ns list --all --name | tr -d '\n')" "" "no domain is left"

done_testing
