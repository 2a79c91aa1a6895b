#!/bin/bash
# VM agents' --egress-allow (backend/firewall.h, vm/egress.c): a guest with a
# list reaches what it allows and nothing else (refusals counted), a guest
# without one reaches both (control); `set --egress-allow` changes it at
# once, "" removes it, the rules go with the agent and come back at fleetd's
# start after `nft delete table bridge fleet`; a guest root that takes
# another guest's MAC and IP gets no further (the match is the tap, not an
# address). Everything runs under a private libvirtd in a network + mount
# namespace this test creates (tests/lib/vmns.sh), "the outside" one more
# namespace behind it: nothing leaves the test's namespaces.
. "$FLEET_SRCDIR/tests/lib/common.sh"

command -v jq >/dev/null || skip_all "jq not installed"
. "$FLEET_SRCDIR/tests/lib/vmfleet.sh"
vmfleet_setup --tcg dnsmasq busybox socat nft

A=egv-a B=egv-b
RUN=(nsenter -t "$VMNS_PID" -m -n --)

# ---- the outside: 198.51.100.2 and .3, each with a server on :8080 ----
OUT=$TEST_TMP/outside.ns
touch "$OUT" && "${RUN[@]}" unshare --net="$OUT" true || fail_all "cannot make the outside namespace"
on_exit "${RUN[*]} umount '$OUT'"
"${RUN[@]}" ip link add egup0 type veth peer name o-eth0 netns "$OUT" || fail_all "cannot make the veth pair"
"${RUN[@]}" ip addr add 198.51.100.1/24 dev egup0 && "${RUN[@]}" ip link set egup0 up || fail_all "cannot set up egup0"
"${RUN[@]}" nsenter --net="$OUT" sh -c 'ip link set lo up && ip link set o-eth0 up &&
	ip addr add 198.51.100.2/24 dev o-eth0 && ip addr add 198.51.100.3/24 dev o-eth0 &&
	ip route add default via 198.51.100.1' || fail_all "cannot set up the outside"
for n in 2 3; do
	"${RUN[@]}" nsenter --net="$OUT" socat TCP-LISTEN:8080,bind=198.51.100.$n,fork,reuseaddr \
		SYSTEM:"echo outside-$n" 2>/dev/null &
	_pids+=($!)
done
# A name for .2, seen by fleetd only (the namespace's mount namespace is the test's): lists take names.
{ cat /etc/hosts; echo "198.51.100.2 outside-two.test"; } > "$TEST_TMP/hosts"
"${RUN[@]}" mount --bind "$TEST_TMP/hosts" /etc/hosts || fail_all "cannot bind a hosts file in the namespace"

ns_reach() { "${RUN[@]}" socat -T3 - TCP:$1:8080,connect-timeout=3 </dev/null 2>/dev/null; }
for n in 2 3; do
	for ((i = 0; i < 100; i++)); do [ -n "$(ns_reach 198.51.100.$n)" ] && break; sleep 0.1; done
	is "$(ns_reach 198.51.100.$n)" outside-$n "the host side reaches the server on 198.51.100.$n (control)"
done

# from NAME ADDR: what ADDR:8080 answers to the guest's root (empty: nothing). One try: for refusals.
from() {
	"$FLEETCTL" exec "$1" --root --no-stdin --timeout 30 -- \
		sh -c 'busybox nc -w 3 "$1" 8080 </dev/null 2>/dev/null' sh "$2" 2>/dev/null
}
# from_retry NAME ADDR: up to 3 tries, for what must be reached only (a first packet may wait for ARP).
from_retry() { local i out; for i in 1 2 3; do out=$(from "$1" "$2"); [ -n "$out" ] && break; done; printf '%s' "$out"; }
refused() { "$FLEETCTL" --json show "$1" | jq -r '.egress_refused_packets // "none"'; }
chain() { vmns_exec nft list chain bridge fleet "agent-$1" 2>/dev/null; }

fleetd_ns_start; ok $? "fleetd starts inside the namespace"

# ---- create and boot ----
"$FLEETCTL" create $A --backend vm --network nat --egress-allow outside-two.test:8080 >/dev/null
ok $? "create $A --backend vm --network nat --egress-allow outside-two.test:8080 (no longer refused for VMs)"
"$FLEETCTL" create $B --backend vm --network nat >/dev/null; ok $? "create $B --network nat, no list (control)"
is "$("$FLEETCTL" --json show $A | jq -r .egress_allow)" outside-two.test:8080 "show: $A's list"
TAP=$(virsh_ns dumpxml fleet-$A | sed -n "s/.*<target dev='\(flv[0-9a-f]*\)'.*/\1/p" | head -1)
like "$TAP" '^flv[0-9a-f]{12}$' "$A's domain names its tap ($TAP)"
pids=()
for n in $A $B; do "$FLEETCTL" start $n >"$TEST_TMP/start.$n" 2>&1 & pids+=($!); done
i=0
for n in $A $B; do wait "${pids[$i]}"; ok $? "start $n"; i=$((i + 1)); done
check "$A's running guest has that tap on fleetbr0" -- vmns_exec test -n "$TAP" -a -e "/sys/class/net/fleetbr0/brif/$TAP"

guest_addr() {
	"$FLEETCTL" exec "$1" --root --no-stdin --timeout 20 -- ip -4 addr show eth0 2>/dev/null |
		sed -n 's/^ *inet \([0-9.]*\)\/.*/\1/p' | head -1
}
has_addr() { [ -n "$(guest_addr "$1")" ]; }
wait_for 120 has_addr $A; ok $? "$A gets an address by DHCP (allowed whatever the list)"
wait_for 120 has_addr $B; ok $? "$B gets an address by DHCP"

# ---- the list holds ----
is "$(from_retry $B 198.51.100.3)" outside-3 "$B (no list) reaches 198.51.100.3 (control: the route works from a guest)"
is "$(from_retry $A 198.51.100.2)" outside-2 "$A reaches what its list allows (outside-two.test:8080)"
before=$(refused $A)
is "$(from $A 198.51.100.3)" "" "$A does not reach 198.51.100.3 (not in its list)"
after=$(refused $A)
diag "$A's egress_refused_packets: $before -> $after"
check "the refusal was counted (egress_refused_packets went up)" -- test "$after" != none -a "$after" -gt "${before/none/0}"
like "$(chain $A)" 'egress-allow outside-two.test' "its chain agent-$A says where each rule comes from"
like "$(vmns_exec nft list map bridge fleet vm-egress)" "\"$TAP\" : jump agent-$A" "the map sends its tap to it"
is "$("$FLEETCTL" --json show $B | jq -r '.egress_refused_packets // "none"')" none "$B has no counter"

# ---- set: live ----
"$FLEETCTL" set $A --egress-allow 198.51.100.3:8080 >/dev/null; ok $? "set $A --egress-allow 198.51.100.3:8080"
is "$(from_retry $A 198.51.100.3)" outside-3 "$A now reaches 198.51.100.3, without a restart"
is "$(from $A 198.51.100.2)" "" "and no longer 198.51.100.2"
"$FLEETCTL" set $A --egress-allow "" >/dev/null; ok $? "set $A --egress-allow \"\" (no limit)"
is "$(chain $A)" "" "its chain is gone"
is "$(from_retry $A 198.51.100.2)" outside-2 "$A reaches 198.51.100.2"
is "$(from_retry $A 198.51.100.3)" outside-3 "and 198.51.100.3"
"$FLEETCTL" set $A --egress-allow outside-two.test:8080 >/dev/null; ok $? "set $A --egress-allow outside-two.test:8080 again"
is "$(from $A 198.51.100.3)" "" "$A is refused 198.51.100.3 again"

# ---- restored at start ----
vmns_exec nft delete table bridge fleet; ok $? "delete fleet's bridge table"
is "$(from_retry $A 198.51.100.3)" outside-3 "without it $A reaches 198.51.100.3 (control: the table refused it)"
stop_fleetd; ok $? "stop fleetd (the guests keep running)"
fleetd_ns_start; ok $? "fleetd starts again"
like "$(chain $A)" 'egress-allow outside-two.test' "its chain is back"
is "$(from $A 198.51.100.3)" "" "$A is refused 198.51.100.3 again"
is "$(from_retry $A 198.51.100.2)" outside-2 "and still reaches 198.51.100.2"

# ---- a guest root takes the unlimited guest's MAC and IP ----
BMAC=$("$FLEETCTL" exec $B --root --no-stdin --timeout 20 -- cat /sys/class/net/eth0/address 2>/dev/null)
BIP=$(guest_addr $B)
like "$BMAC" '^([0-9a-f]{2}:){5}[0-9a-f]{2}$' "$B's MAC ($BMAC)"
"$FLEETCTL" stop $B >/dev/null; ok $? "stop $B, so its MAC and IP ($BIP) are free to take"
"$FLEETCTL" exec $A --root --no-stdin --timeout 30 -- sh -c '
	ip link set eth0 down && ip link set eth0 address "$1" && ip link set eth0 up &&
	ip addr flush dev eth0 && ip addr add "$2"/24 dev eth0 && ip route replace default via 192.168.223.1' sh "$BMAC" "$BIP"
ok $? "$A's root gives its eth0 $B's MAC and IP"
is "$("$FLEETCTL" exec $A --root --no-stdin --timeout 20 -- cat /sys/class/net/eth0/address 2>/dev/null)" "$BMAC" \
	"$A's eth0 has $B's MAC"
is "$(from_retry $A 198.51.100.2)" outside-2 "so disguised, $A still reaches 198.51.100.2 (control: its network works)"
is "$(from $A 198.51.100.3)" "" "but not 198.51.100.3, as $B could"

# ---- removed with the agent ----
for n in $A $B; do "$FLEETCTL" rm --force $n >/dev/null; ok $? "rm --force $n"; done
is "$(chain $A)" "" "$A's chain is gone"
is "$(vmns_exec nft list table bridge fleet 2>/dev/null | grep -c -e "$TAP" -e "refused-$A")" 0 "no map entry or counter of $A is left"

done_testing
