#!/bin/bash
# --network nat for VM agents on another host (#15, vm/remote_nat.c): the
# second private libvirtd of tests/lib/host2.sh (h2, over qemu+tcp on the
# veth pair between the test's two namespaces). fleetd defines its NAT
# network fleet-rnat there (a /24 it chooses) and, per agent, a libvirt
# network filter (nwfilter) that the guest's interface names; nothing of it
# is in fleetd's own host's firewall. Two TCG guests on h2: one with an
# egress list, one without (the control). "The outside" is one more network
# namespace behind h2 (198.51.100.2 and .3, a server on :8080 each), and h2
# itself serves :8080 on all its addresses (its address on fleet-rnat, the one
# fleetd reaches it on, its end of the outside link). Checked: the list's
# guest reaches what the list allows and is refused what it does not, while
# the control reaches both; neither reaches h2's own addresses, not even
# listed ones, nor 169.254.169.254, while h2's side reaches them (and the
# guest without a list reaches h2's address on the outside link, which fleetd
# cannot know: the control, and the gap docs/multi-host.md states); `set
# --egress-allow` (a name resolved by fleetd) changes the running guest's
# rules at once; `move` takes the listed agent to fleetd's own host (its
# filter gone from h2, its rules in fleetd's firewall, its list still
# deciding), then back, first failing there (a decoy domain with its UUID
# on h2: the filter it defined there goes, its rules here stay), then for
# real (the reverse); rm takes the agent's filter away and
# leaves the network to the other agent, which still reaches the outside.
# Nothing leaves the namespaces this test made.
. "$FLEET_SRCDIR/tests/lib/common.sh"

. "$FLEET_SRCDIR/tests/lib/vmfleet.sh"
vmfleet_setup --tcg jq socat nft

. "$FLEET_SRCDIR/tests/lib/host2.sh"
host2_start

id=$(test_run_id)
A=rn${id}a B=rn${id}b
RUN2=(nsenter -t "${H2[0]}" -m -n --)	# inside h2's namespaces

# ---- the outside, behind h2: 198.51.100.2 and .3 (h2's end: .1) -----------------------------------
OUT=$TEST_TMP/outside.ns
touch "$OUT" && "${RUN2[@]}" unshare --net="$OUT" true || fail_all "cannot make the outside namespace"
on_exit "${RUN2[*]} umount '$OUT'"
"${RUN2[@]}" ip link add rnup0 type veth peer name o-eth0 netns "$OUT" || fail_all "cannot make the veth pair"
"${RUN2[@]}" ip addr add 198.51.100.1/24 dev rnup0 && "${RUN2[@]}" ip link set rnup0 up || fail_all "cannot set up rnup0"
"${RUN2[@]}" nsenter --net="$OUT" sh -c 'ip link set lo up && ip link set o-eth0 up &&
	ip addr add 198.51.100.2/24 dev o-eth0 && ip addr add 198.51.100.3/24 dev o-eth0 &&
	ip route add default via 198.51.100.1' || fail_all "cannot set up the outside"
for n in 2 3; do
	"${RUN2[@]}" nsenter --net="$OUT" socat TCP-LISTEN:8080,bind=198.51.100.$n,fork,reuseaddr \
		SYSTEM:"echo outside-$n" 2>/dev/null &
	_pids+=($!)
done
# h2 itself: a service on every address it has (what its agents must never reach).
"${RUN2[@]}" socat TCP-LISTEN:8080,fork,reuseaddr SYSTEM:"echo host-h2" 2>/dev/null &
_pids+=($!)
# A metadata server's address, in the outside (a guest must not reach it, even if it routes).
"${RUN2[@]}" nsenter --net="$OUT" sh -c 'ip addr add 169.254.169.254/32 dev o-eth0' || fail_all "cannot add the metadata address"
"${RUN2[@]}" ip route add 169.254.169.254/32 via 198.51.100.2 || fail_all "cannot route the metadata address"
"${RUN2[@]}" nsenter --net="$OUT" socat TCP-LISTEN:8080,bind=169.254.169.254,fork,reuseaddr SYSTEM:"echo metadata" 2>/dev/null &
_pids+=($!)
# A name for .3, seen by fleetd only (the first namespace's mount namespace): lists take names.
{ cat /etc/hosts; echo "198.51.100.3 outside-three.test"; } > "$TEST_TMP/hosts"
vmns_exec mount --bind "$TEST_TMP/hosts" /etc/hosts || fail_all "cannot bind a hosts file in fleetd's namespace"

h2_reach() { "${RUN2[@]}" socat -T3 - TCP:$1:8080,connect-timeout=3 </dev/null 2>/dev/null; }
for addr in 198.51.100.2 198.51.100.3 169.254.169.254 "$H2_ADDR"; do
	wait_for 10 h2_reach "$addr"
done
is "$(h2_reach 198.51.100.2)" outside-2 "h2 reaches the outside's server on 198.51.100.2 (control)"
is "$(h2_reach 198.51.100.3)" outside-3 "and on 198.51.100.3 (control)"
is "$(h2_reach 169.254.169.254)" metadata "and the metadata address (control: it routes)"
is "$(h2_reach "$H2_ADDR")" host-h2 "h2's own service answers on $H2_ADDR (control)"

# from NAME ADDR: what ADDR:8080 answers to the guest's root (empty: nothing). One try: for refusals.
from() {
	"$FLEETCTL" exec "$1" --root --no-stdin --timeout 30 -- \
		sh -c 'busybox nc -w 3 "$1" 8080 </dev/null 2>/dev/null' sh "$2" 2>/dev/null
}
# from_retry NAME ADDR: up to 3 tries, for what must be reached only (a first packet may wait for ARP).
from_retry() { local i out; for i in 1 2 3; do out=$(from "$1" "$2"); [ -n "$out" ] && break; done; printf '%s' "$out"; }
guest_addr() {
	"$FLEETCTL" exec "$1" --root --no-stdin --timeout 20 -- ip -4 addr show eth0 2>/dev/null |
		sed -n 's/^ *inet \([0-9.]*\)\/.*/\1/p' | head -1
}
has_addr() { [ -n "$(guest_addr "$1")" ]; }
filters() { virsh_h2 nwfilter-list 2>/dev/null | awk '{ print $2 }' | grep '^fleet-agent-' | sort | tr '\n' ' '; }

fleetd_ns_start; ok $? "fleetd starts inside the first namespace"
"$FLEETCTL" host add h2 "$H2_URI" >/dev/null; ok $? "host add h2 ($H2_URI)"

# ---- the control: a NAT agent on h2 without a list ----------------------------------------------
out=$("$FLEETCTL" create $B --host h2 --network nat --health-interval 0 --restart never 2>&1)
ok $? "create $B --host h2 --network nat (no longer 501): $out"
is "$(virsh_h2 net-info fleet-rnat 2>/dev/null | awk '$1 == "Active:" { print $2 }')" yes \
	"fleet's network fleet-rnat is defined and active on h2"
GW=$(virsh_h2 net-dumpxml fleet-rnat | sed -n "s/.*<ip address='\([0-9.]*\)'.*/\1/p")
like "$GW" '^192\.168\.2(2[4-9]|3[0-9])\.1$' "with a subnet fleet chose there (gateway $GW)"
check "and not on fleetd's own libvirtd" -- sh -c "! nsenter -t $VMNS_PID -m -n -- virsh -q -c qemu:///system net-info fleet-rnat >/dev/null 2>&1"
is "$(filters)" "fleet-agent-$B " "$B's network filter is defined on h2"
xml=$(virsh_h2 dumpxml fleet-$B)
like "$xml" "<source network='fleet-rnat'" "$B's interface is on fleet-rnat"
like "$xml" "<filterref filter='fleet-agent-$B'" "and names its filter"

# ---- the agent with a list: one outside server, and h2's own addresses (which it must not get) ---------
allow="198.51.100.2:8080,$H2_ADDR:8080,$GW:8080,169.254.169.254"
out=$("$FLEETCTL" create $A --host h2 --network nat --egress-allow "$allow" --health-interval 0 --restart never 2>&1)
ok $? "create $A --host h2 --network nat --egress-allow $allow: $out"
is "$(filters)" "fleet-agent-$A fleet-agent-$B " "$A's filter is defined on h2 too"
filter_a=$(virsh_h2 nwfilter-dumpxml "fleet-agent-$A")
like "$filter_a" "dstipaddr='198.51.100.2'.*dstportstart='8080'" "it lets 198.51.100.2:8080 through"
check "nothing of them is in fleetd's own host's firewall" -- sh -c "! nsenter -t $VMNS_PID -m -n -- nft list chain bridge fleet agent-$A >/dev/null 2>&1"
like "$("$FLEETCTL" doctor 2>&1)" "OK +firewall +no agent has --network nat here" \
	"doctor wants no firewall rules here for NAT agents on another host"

pids=()
for n in $A $B; do "$FLEETCTL" start $n >"$TEST_TMP/start.$n" 2>&1 & pids+=($!); done
i=0
for n in $A $B; do wait "${pids[$i]}"; ok $? "start $n on h2"; i=$((i + 1)); done
for n in $A $B; do
	wait_for 120 has_addr $n; ok $? "$n gets an address on fleet-rnat by DHCP: $(guest_addr $n)"
done
like "$(virsh_h2 nwfilter-binding-list 2>/dev/null)" "fleet-agent-$A" "libvirt on h2 has $A's filter bound to its port"

# ---- what each guest reaches ------------------------------------------------------------------------
is "$(from_retry $B 198.51.100.3)" outside-3 "$B (no list) reaches 198.51.100.3 through h2's NAT (control: the route works)"
is "$(from_retry $B 198.51.100.2)" outside-2 "$B reaches 198.51.100.2 (control)"
is "$(from_retry $A 198.51.100.2)" outside-2 "$A reaches what its list allows (198.51.100.2:8080)"
is "$(from $A 198.51.100.3)" "" "$A is refused 198.51.100.3, which its list does not name (and $B reaches)"
for n in $A $B; do
	is "$(from $n "$GW")" "" "$n is refused h2's service on its gateway address $GW$([ $n = $A ] && echo ', though listed')"
	is "$(from $n "$H2_ADDR")" "" "$n is refused h2's service on $H2_ADDR, the address fleetd reaches h2 on$([ $n = $A ] && echo ', though listed')"
	is "$(from $n 169.254.169.254)" "" "$n is refused the metadata address$([ $n = $A ] && echo ', though listed')"
done
is "$("${RUN2[@]}" socat -T3 - TCP:$GW:8080,connect-timeout=3 </dev/null 2>/dev/null)" host-h2 \
	"h2's service answers on $GW from h2 itself (control)"
# h2's address on the outside link is in no range fleet refuses, and fleetd cannot learn it
# through libvirt (docs/multi-host.md, "NAT on a host"): a list refuses it unless listed;
# without one it is reachable. That is also the control that h2's service answers a guest
# at all, so the refusals above are the filter's.
is "$(from $A 198.51.100.1)" "" "$A is refused h2's address on the outside link (198.51.100.1, not listed)"
is "$(from_retry $B 198.51.100.1)" host-h2 \
	"$B (no list) reaches h2's service on 198.51.100.1, an address fleetd cannot know (control; the documented gap)"
b_addr=$(guest_addr $B)
is "$("$FLEETCTL" exec $A --root --no-stdin --timeout 30 -- sh -c 'busybox nc -w 3 "$1" 22 </dev/null >/dev/null 2>&1; echo $?' sh "$b_addr")" 1 \
	"$A cannot reach $B ($b_addr) on the same network"

# ---- the list changes on the running guest ------------------------------------------------------------
"$FLEETCTL" set $A --egress-allow outside-three.test:8080 >/dev/null; ok $? "set $A --egress-allow outside-three.test:8080 (a name fleetd resolves)"
like "$(virsh_h2 nwfilter-dumpxml "fleet-agent-$A")" "dstipaddr='198.51.100.3'" "its filter on h2 now names 198.51.100.3"
is "$(from_retry $A 198.51.100.3)" outside-3 "$A reaches 198.51.100.3 at once"
is "$(from $A 198.51.100.2)" "" "and is refused 198.51.100.2 now"
is "$("$FLEETCTL" --json show $A | jq -r .egress_allow)" outside-three.test:8080 "show: its list"
"$FLEETCTL" set $A --egress-allow "" >/dev/null; ok $? "set $A --egress-allow \"\" (no list)"
is "$(from_retry $A 198.51.100.2)" outside-2 "$A reaches 198.51.100.2 again"
is "$(from $A "$H2_ADDR")" "" "and still not h2 ($H2_ADDR)"

# ---- fleetd restarted: the filters are libvirt's on h2 and stay ---------------------------------------
stop_fleetd; ok $? "fleetd stops"
fleetd_ns_start; ok $? "fleetd starts again"
is "$(filters)" "fleet-agent-$A fleet-agent-$B " "both filters are still on h2"
is "$(from_retry $B 198.51.100.3)" outside-3 "$B still reaches the outside"

# ---- move: $A with a list from h2 to fleetd's host and back (its policy is the target's kind) ----------
local_chain() { vmns_exec nft list chain bridge fleet "agent-$A" >/dev/null 2>&1; }
# fleetd's namespace reaches the outside through h2 (routes inside the test's namespaces only).
vmns_exec ip route add 198.51.100.0/24 via "$H2_ADDR" || fail_all "cannot route the outside from fleetd's namespace"
"${RUN2[@]}" sysctl -qw net.ipv4.ip_forward=1 || fail_all "cannot let h2 forward"
ns_reach() { vmns_exec socat -T3 - TCP:$1:8080,connect-timeout=3 </dev/null 2>/dev/null; }
wait_for 10 ns_reach 198.51.100.3
is "$(ns_reach 198.51.100.3)" outside-3 "fleetd's host reaches 198.51.100.3 through h2 (control: the route works)"
"$FLEETCTL" set $A --egress-allow 198.51.100.2:8080 >/dev/null; ok $? "set $A --egress-allow 198.51.100.2:8080"
"$FLEETCTL" stop $A >/dev/null; ok $? "stop $A"
out=$("$FLEETCTL" move $A local 2>&1); ok $? "move $A local, a NAT agent (no longer 501): $out"
is "$("$FLEETCTL" --json show $A | jq -r '"\(.host) \(.egress_allow)"')" "local 198.51.100.2:8080" "show: on local, its list kept"
is "$(filters)" "fleet-agent-$B " "$A's filter is gone from h2, $B's stays"
virsh_h2 dominfo fleet-$A >/dev/null 2>&1; [ $? != 0 ]; ok $? "and its domain"
local_chain; ok $? "its egress rules are in fleetd's host's firewall (bridge fleet agent-$A)"
like "$(virsh_ns dumpxml fleet-$A)" "<source network='fleet-nat'" "its interface here is on fleet-nat"
"$FLEETCTL" start $A >/dev/null; ok $? "start $A on local"
wait_for 120 has_addr $A; ok $? "$A gets an address on fleet-nat here: $(guest_addr $A)"
is "$(from_retry $A 198.51.100.2)" outside-2 "on local, $A reaches what its list allows (198.51.100.2:8080)"
is "$(from $A 198.51.100.3)" "" "and is refused 198.51.100.3 (which fleetd's host reaches)"
"$FLEETCTL" stop $A >/dev/null; ok $? "stop $A"
# A move that fails after its filter reached h2: a decoy domain there holds $A's UUID, so the define fails.
uuid=$(virsh_ns domuuid fleet-$A)
printf "<domain type='qemu'><name>decoy-%s</name><uuid>%s</uuid><memory unit='MiB'>64</memory><os><type>hvm</type></os></domain>\n" \
	"$A" "$uuid" >"$TEST_TMP/decoy.xml"
"${RUN2[@]}" virsh -q -c qemu:///system define "$TEST_TMP/decoy.xml" >/dev/null; ok $? "a decoy domain on h2 with $A's UUID"
on_exit "${RUN2[*]} virsh -q -c qemu:///system undefine decoy-$A >/dev/null 2>&1"
out=$("$FLEETCTL" move $A h2 2>&1); [ $? != 0 ]; ok $? "move $A h2 fails at the define there: $out"
like "$out" "cannot define domain: .*already (defined|exists)" "saying libvirt's reason"
is "$("$FLEETCTL" --json show $A | jq -r .host)" local "$A stays on local"
virsh_h2 dominfo fleet-$A >/dev/null 2>&1; [ $? != 0 ]; ok $? "no fleet-$A domain is left on h2"
is "$(filters)" "fleet-agent-$B " "the filter the failed move defined on h2 is gone again"
local_chain; ok $? "and its rules here stay"
"${RUN2[@]}" virsh -q -c qemu:///system undefine "decoy-$A" >/dev/null; ok $? "the decoy goes"
out=$("$FLEETCTL" move $A h2 2>&1); ok $? "move $A h2 (back): $out"
local_chain; [ $? != 0 ]; ok $? "its egress rules are gone from fleetd's host's firewall"
virsh_ns dominfo fleet-$A >/dev/null 2>&1; [ $? != 0 ]; ok $? "and its domain from fleetd's libvirtd"
is "$(filters)" "fleet-agent-$A fleet-agent-$B " "its filter is on h2 again"
like "$(virsh_h2 nwfilter-dumpxml "fleet-agent-$A")" "dstipaddr='198.51.100.2'.*dstportstart='8080'" "made from its kept list"
like "$(virsh_h2 dumpxml fleet-$A)" "<filterref filter='fleet-agent-$A'" "its domain on h2 names it"
"$FLEETCTL" start $A >/dev/null; ok $? "start $A on h2"
wait_for 120 has_addr $A; ok $? "$A gets an address on fleet-rnat: $(guest_addr $A)"
is "$(from_retry $A 198.51.100.2)" outside-2 "on h2, $A reaches what its list allows"
is "$(from $A 198.51.100.3)" "" "and is refused 198.51.100.3"
is "$(from $A "$H2_ADDR")" "" "and h2 ($H2_ADDR)"

# ---- rm: the rules go with the agent, the network stays for the other ----------------------------------
"$FLEETCTL" rm $A --force >/dev/null; ok $? "rm $A"
is "$(filters)" "fleet-agent-$B " "$A's filter is gone from h2, $B's stays"
is "$(virsh_h2 net-info fleet-rnat 2>/dev/null | awk '$1 == "Active:" { print $2 }')" yes "fleet-rnat stays active on h2"
is "$(from_retry $B 198.51.100.3)" outside-3 "$B still reaches the outside through it"
is "$(from $B "$GW")" "" "and still not h2"
"$FLEETCTL" rm $B --force >/dev/null; ok $? "rm $B"
is "$(filters)" "" "no fleet filter is left on h2"

done_testing
