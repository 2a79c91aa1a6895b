#!/bin/bash
# --network nat for user agents (#12): an agent's own persistent network
# namespace with a veth pair, NAT to the outside through the host, and what
# no agent may reach (nftables, table inet fleet). Everything runs in
# namespaces this test makes: the whole test (fleetd, its agents, the
# host's listeners) in a fresh network and mount namespace, and "the
# outside" in one more network namespace behind a veth pair
# (tests/lib/outside.sh), with servers on 198.51.100.2, 198.51.100.3 and
# 169.254.169.254, and on 2001:db8:5::2, ::3 and fd00:ec2::254 for IPv6
# (TEST-NET-2, the documentation prefix and the metadata addresses: nothing
# leaves the test's namespaces). Every refusal
# has a positive control: the same target answers someone else, so the
# rule refuses it, not a missing route or server.
. "$FLEET_SRCDIR/tests/lib/own-netns.sh"
. "$FLEET_SRCDIR/tests/lib/common.sh"

[ "$(id -u)" = 0 ] || skip_all "needs root (user agents are Unix users)"
own_netns_ready
for t in nft ip nsenter socat jq; do command -v $t >/dev/null || skip_all "$t missing"; done

U=unet$(test_run_id) && A=$U-a B=$U-b N=$U-n	# agent names of this run (two checkouts at once never collide)
HUSER=unet-$$
HOOKS_PORT=18471
on_exit "userdel $HUSER; groupdel $HUSER"

# ---- the test's world: fleetd's namespace ("the host") and the outside (tests/lib/outside.sh) ----
. "$FLEET_SRCDIR/tests/lib/outside.sh"
OUTSIDE_EXTRA="198.51.100.3 169.254.169.254 2001:db8:5::3 fd00:ec2::254"
outside_setup || fail_all "cannot make the outside namespace"
HAVE6=; [ -d /proc/sys/net/ipv6 ] && HAVE6=1
# A name for .3 (and its IPv6 address), seen by fleetd only (this mount namespace is the test's): egress lists take names.
{ cat /etc/hosts; echo "198.51.100.3 outside-three.test"; echo "2001:db8:5::3 outside-three.test"; } > "$TEST_TMP/hosts"
mount --bind "$TEST_TMP/hosts" /etc/hosts || fail_all "cannot bind a hosts file in the test's mount namespace"

# serve ADDR PORT WORD: a TCP server on the host answering "WORD PEER" (ADDR with a colon: IPv6)
serve() {
	local listen="TCP-LISTEN:$2,bind=$1"
	case $1 in *:*) listen="TCP6-LISTEN:$2,bind=[$1]" ;; esac
	socat "$listen,fork,reuseaddr" SYSTEM:"echo $3 \$SOCAT_PEERADDR" 2>/dev/null &
	_pids+=($!)
}
# reach ADDR PORT [out]: what a server at ADDR:PORT answers the host (or the outside); empty: nothing
reach() {
	local to="TCP:$1:$2"; case $1 in *:*) to="TCP6:[$1]:$2" ;; esac
	${3:+nsenter --net="$OUTSIDE_NS"} socat -T3 - "$to",connect-timeout=3 </dev/null 2>/dev/null
}
outside_serve 198.51.100.2 8080 outside-two
outside_serve 198.51.100.3 8080 outside-three
outside_serve 169.254.169.254 80 metadata
serve 127.0.0.1 7001 host-loopback
serve 0.0.0.0 7002 host-any
if [ -n "$HAVE6" ]; then
	outside_serve 2001:db8:5::2 8080 outside-two6
	outside_serve 2001:db8:5::3 8080 outside-three6
	outside_serve fd00:ec2::254 80 metadata6
	serve ::1 7005 host-loopback6
	serve :: 7006 host-any6
fi
wait_reach() { local i; for ((i = 0; i < 100; i++)); do [ -n "$(reach "$@")" ] && return 0; sleep 0.1; done; return 1; }
wait_reach 198.51.100.2 8080; ok $? "the host reaches the outside server (control)"
wait_reach 169.254.169.254 80; ok $? "the host reaches the planted metadata server (control: a route and a server exist)"
wait_reach 127.0.0.1 7001; ok $? "the host reaches its own loopback service (control)"
wait_reach 198.51.100.1 7002 out; ok $? "the outside reaches the host's service on 198.51.100.1 (control)"
if [ -n "$HAVE6" ]; then
	wait_reach 2001:db8:5::2 8080; ok $? "the host reaches the outside's IPv6 server (control)"
	wait_reach fd00:ec2::254 80; ok $? "the host reaches the planted IPv6 metadata server fd00:ec2::254 (control)"
	wait_reach ::1 7005; ok $? "the host reaches its own [::1] service (control)"
	wait_reach 2001:db8:5::1 7006 out; ok $? "the outside reaches the host's IPv6 service on 2001:db8:5::1 (control)"
fi

# Registered before the agents' removal (cleanups run last first): fleetd goes after its agents.
FLEETD_PID=
on_exit '[ -n "$FLEETD_PID" ] && kill -TERM $FLEETD_PID; for _w in $(seq 100); do kill -0 $FLEETD_PID || break; sleep 0.1; done'
user_fleetd_setup unet
user_fleetd_start --hooks-listen 0.0.0.0:$HOOKS_PORT --hooks-user "$HUSER" || { ok 1 "fleetd starts"; done_testing; }
status=$(api GET /v1/status)
printf '%s' "${status% *}" | jq -e '.. | objects | select(has("user")) | .user | test("^available")' >/dev/null 2>&1 ||
	skip_all "this fleetd has no user backend"
# the listener answers HTTP (404 for no route): wait for it, from the outside's side of the host
code=
for ((i = 0; i < 150; i++)); do
	code=$(nsenter --net="$OUTSIDE_NS" curl -s -m 2 -o /dev/null -w '%{http_code}' http://198.51.100.1:$HOOKS_PORT/hooks/none 2>/dev/null)
	[ "${code:-000}" != 000 ] && break; sleep 0.2
done
[ "${code:-000}" != 000 ]
ok $? "the host's webhook listener answers the outside on 198.51.100.1:$HOOKS_PORT (control; HTTP $code)"

"$FLEETCTL" create $A --backend user --network nat >/dev/null; ok $? "create $A --network nat"
"$FLEETCTL" create $B --backend user --network nat --egress-allow 198.51.100.2:8080 >/dev/null
ok $? "create $B --network nat --egress-allow 198.51.100.2:8080"
"$FLEETCTL" create $N --backend user >/dev/null; ok $? "create $N (network none)"
is "$("$FLEETCTL" --json show $A | jq -r .network)" nat "show: $A has network nat"
is "$("$FLEETCTL" --json show $B | jq -r .egress_allow)" 198.51.100.2:8080 "show: $B's egress list"
like "$("$FLEETCTL" list)" "$A +user .* nat" "list shows the network"

in_agent() { local a=$1; shift; "$FLEETCTL" exec $a -- sh -c "$*" </dev/null 2>&1; }
# from AGENT ADDR PORT: what the server answers the agent (empty: nothing); ADDR with a colon: IPv6
from() {
	local to="TCP:$2:$3"; case $2 in *:*) to="TCP6:[$2]:$3" ;; esac
	in_agent $1 "socat -T3 - $to,connect-timeout=3 </dev/null 2>/dev/null"
}

like "$(in_agent $A 'cat /proc/net/route')" 'eth0[[:space:]]+00000000' "$A has a default route through eth0"
like "$(from $A 198.51.100.2 8080)" '^outside-two 198\.51\.100\.1$' \
	"$A reaches the outside, NATed to the host's address"
like "$(from $A 198.51.100.3 8080)" '^outside-three ' "$A (no egress list) reaches a second outside address"
is "$(from $N 198.51.100.2 8080)" "" "$N (network none) does not reach the outside"
is "$(from $A 127.0.0.1 7001)" "" "$A does not reach the host's loopback service"
is "$(from $A 10.199.0.1 7002)" "" "$A does not reach the host's service on its gateway address"
is "$(from $A 198.51.100.1 7002)" "" "$A does not reach the host's service on the host's outside address"
is "$(from $A 198.51.100.1 $HOOKS_PORT)" "" "$A does not reach fleetd's webhook listener"
is "$(from $A 169.254.169.254 80)" "" "$A does not reach the metadata address"

# IPv6 (user_nat_subnet6): the same network and the same refusals.
if [ -n "$HAVE6" ]; then
	A6=$(in_agent $A 'ip -6 -o addr show dev eth0 scope global' | sed -n 's/.* inet6 \([0-9a-f:]*\)\/126 .*/\1/p')
	GW6=$(in_agent $A 'ip -6 route show default' | sed -n 's/^default via \([0-9a-f:]*\) .*/\1/p')
	like "$A6 via $GW6" '^fd8c:7a1e:f1ee::[0-9a-f]+ via fd8c:7a1e:f1ee::[0-9a-f]+$' \
		"$A has an IPv6 address of user_nat_subnet6 on eth0 and a default route ($A6 via $GW6)"
	like "$(from $A 2001:db8:5::2 8080)" '^outside-two6 \[2001:0?db8:0*5:(0+:)*0*1\]' \
		"$A reaches the outside over IPv6, NATed to the host's IPv6 address"
	is "$(from $N 2001:db8:5::2 8080)" "" "$N (network none) does not reach the outside over IPv6"
	is "$(from $A ::1 7005)" "" "$A does not reach the host's [::1] service"
	is "$(from $A "$GW6" 7006)" "" "$A does not reach the host's IPv6 service on its gateway address"
	is "$(from $A 2001:db8:5::1 7006)" "" "$A does not reach the host's IPv6 service on the host's outside address"
	is "$(from $A fd00:ec2::254 80)" "" "$A does not reach the IPv6 metadata address fd00:ec2::254"
else
	diag "no IPv6 on this host: the IPv6 checks are left out"
fi

# Another agent: B listens in its own namespace; B's second exec (same namespace) reaches it, A does not.
"$FLEETCTL" exec $B -- timeout 60 socat TCP6-LISTEN:9000,ipv6only=0,fork,reuseaddr SYSTEM:'echo agent-b' </dev/null >/dev/null 2>&1 &
_pids+=($!)
for ((i = 0; i < 100; i++)); do [ -n "$(from $B 10.199.0.6 9000)" ] && break; sleep 0.1; done
is "$(from $B 10.199.0.6 9000)" agent-b "$B's second exec reaches B's listener at 10.199.0.6 (control: one namespace per agent)"
is "$(from $A 10.199.0.6 9000)" "" "$A does not reach $B"
if [ -n "$HAVE6" ]; then
	B6=$(in_agent $B 'ip -6 -o addr show dev eth0 scope global' | sed -n 's/.* inet6 \([0-9a-f:]*\)\/126 .*/\1/p')
	is "$(from $B "$B6" 9000)" agent-b "$B's second exec reaches B's listener at [$B6] (control)"
	is "$(from $A "$B6" 9000)" "" "$A does not reach $B over IPv6"
fi

# The egress list: one address in, another out, and the refusal counted.
like "$(from $B 198.51.100.2 8080)" '^outside-two ' "$B reaches what its egress list allows"
before=$("$FLEETCTL" --json show $B | jq -r '.egress_refused_packets')
is "$(from $B 198.51.100.3 8080)" "" "$B does not reach an address outside its egress list"
after=$("$FLEETCTL" --json show $B | jq -r '.egress_refused_packets')
ok $([ "$after" -gt "$before" ] 2>/dev/null; echo $?) "the refusal is counted ($before -> $after packets)"
like "$("$FLEETCTL" show $B)" 'refused: +[1-9][0-9]* packet' "fleetctl show prints the count"
if [ -n "$HAVE6" ]; then
	before=$after
	is "$(from $B 2001:db8:5::2 8080)" "" "$B's IPv4-only list refuses the outside's IPv6 address"
	after=$("$FLEETCTL" --json show $B | jq -r '.egress_refused_packets')
	ok $([ "$after" -gt "$before" ] 2>/dev/null; echo $?) "the IPv6 refusal is counted ($before -> $after packets)"
	"$FLEETCTL" set $B --egress-allow '[2001:db8:5::2]:8080' >/dev/null; ok $? "set $B --egress-allow [2001:db8:5::2]:8080"
	like "$(from $B 2001:db8:5::2 8080)" '^outside-two6 ' "$B reaches the IPv6 address its list allows"
	is "$(from $B 2001:db8:5::3 8080)" "" "and not another IPv6 address"
	is "$(from $B 198.51.100.2 8080)" "" "nor the IPv4 one it no longer lists"
fi
"$FLEETCTL" set $B --egress-allow outside-three.test:8080 >/dev/null; ok $? "set $B --egress-allow outside-three.test:8080"
check "the name was resolved into $B's chain" -- sh -c "nft list chain inet fleet agent-$B | grep -q 'ip daddr 198.51.100.3 .*dport 8080 accept'"
like "$(from $B 198.51.100.3 8080)" '^outside-three ' "the new list applies at once: $B reaches .3"
is "$(from $B 198.51.100.2 8080)" "" "and no longer .2"
if [ -n "$HAVE6" ]; then
	check "the name's AAAA address went into $B's chain too" -- \
		sh -c "nft list chain inet fleet agent-$B | grep -q 'ip6 daddr 2001:db8:5::3 .*dport 8080 accept'"
	like "$(from $B 2001:db8:5::3 8080)" '^outside-three6 ' "$B reaches the name's IPv6 address"
	is "$(from $B 2001:db8:5::2 8080)" "" "and no other IPv6 address"
fi
out=$("$FLEETCTL" set $N --egress-allow 10.0.0.0/8 2>&1); ok $([ $? -ne 0 ]; echo $?) "an egress list without nat is refused"
out=$("$FLEETCTL" create $U-bad --backend user --network nat --egress-allow 'a b' 2>&1)
ok $([ $? -ne 0 ]; echo $?) "a malformed egress list is refused: $out"

# set --network after create: made or removed at once, only while the agent is stopped.
"$FLEETCTL" set $N --network nat >/dev/null; ok $? "set $N --network nat (stopped)"
is "$("$FLEETCTL" --json show $N | jq -r .network)" nat "show: $N has network nat"
like "$("$FLEETCTL" show $N)" 'network: +nat' "fleetctl show prints it"
check "$N's namespace file is there" -- test -e "$STATE/netns/$N"
check "$N's chain is there" -- nft list chain inet fleet agent-$N
like "$(from $N 198.51.100.2 8080)" '^outside-two 198\.51\.100\.1$' "$N now reaches the outside, NATed"
[ -z "$HAVE6" ] || like "$(from $N 2001:db8:5::2 8080)" '^outside-two6 ' "and over IPv6"
is "$(from $N 198.51.100.1 7002)" "" "and not the host"
"$FLEETCTL" set $N --egress-allow 198.51.100.2:8080 >/dev/null; ok $? "set $N --egress-allow 198.51.100.2:8080"
"$FLEETCTL" start $N >/dev/null; ok $? "start $N"
out=$("$FLEETCTL" set $N --network none 2>&1); ok $([ $? -ne 0 ]; echo $?) "set --network none on a running agent is refused"
like "$out" 'stop it first' "and says to stop it first: $out"
is "$("$FLEETCTL" --json show $N | jq -r .network)" nat "$N keeps network nat"
like "$(from $N 198.51.100.2 8080)" '^outside-two ' "and its network"
"$FLEETCTL" stop $N >/dev/null; ok $? "stop $N"
out=$("$FLEETCTL" set $N --network none 2>&1); ok $([ $? -ne 0 ]; echo $?) "set --network none while an egress list is set is refused"
like "$out" "egress_allow needs network 'nat'" "and says why: $out"
"$FLEETCTL" set $N --network none --egress-allow '' >/dev/null; ok $? "set $N --network none --egress-allow ''"
is "$("$FLEETCTL" --json show $N | jq -r '.network + " " + (.egress_allow // "no-list")')" "none no-list" "show: $N has network none and no list"
check "$N's namespace file is gone" -- test ! -e "$STATE/netns/$N"
check "$N's chain is gone" -- sh -c "! nft list chain inet fleet agent-$N"
like "$(in_agent $N 'cat /proc/net/dev')" 'lo:' "$N's sandbox has only lo again"
ok $(in_agent $N 'cat /proc/net/dev' | grep -q eth0 && echo 1 || echo 0) "and no eth0"
is "$(from $N 198.51.100.2 8080)" "" "$N no longer reaches the outside"
out=$("$FLEETCTL" set $N --network bogus 2>&1); ok $([ $? -ne 0 ]; echo $?) "set --network bogus is refused: $out"

# The rules: named per agent, gone with the agent, restored at start.
check "the table has $A's chain" -- nft list chain inet fleet agent-$A
"$FLEETCTL" rm --force $A >/dev/null; ok $? "rm $A"
check "$A's chain is gone" -- sh -c "! nft list chain inet fleet agent-$A"
check "$A's counter is gone" -- sh -c "! nft list counter inet fleet refused-$A"
check "$A's host interface is gone" -- sh -c "! ip link show flh0"
check "$A's namespace file is gone" -- test ! -e "$STATE/netns/$A"
nft delete table inet fleet; ok $? "delete the whole table by hand"
like "$(from $B 169.254.169.254 80)" '^metadata' "without the table $B reaches the metadata server (control: the rules did it)"
[ -z "$HAVE6" ] || like "$(from $B fd00:ec2::254 80)" '^metadata6' \
	"without the table $B reaches the IPv6 metadata server (control: the rules did it)"
[ -z "$HAVE6" ] || like "$(from $B 2001:db8:5::1 7006)" '^host-any6' \
	"without the table $B reaches the host's IPv6 service (control: the rules did it)"
stop_fleetd; ok $? "fleetd stops"
# This time the webhook listener is on IPv6 (fleetd's listener is one address, IPV6_V6ONLY).
HOOKS_BIND=0.0.0.0:$HOOKS_PORT; [ -z "$HAVE6" ] || HOOKS_BIND="[::]:$HOOKS_PORT"
user_fleetd_start --hooks-listen "$HOOKS_BIND" --hooks-user "$HUSER"; ok $? "fleetd starts again (webhooks on $HOOKS_BIND)"
check "$B's chain is back" -- nft list chain inet fleet agent-$B
is "$(from $B 169.254.169.254 80)" "" "$B no longer reaches the metadata address"
if [ -n "$HAVE6" ]; then
	is "$(from $B fd00:ec2::254 80)" "" "$B no longer reaches the IPv6 metadata address"
	is "$(from $B 2001:db8:5::1 7006)" "" "$B no longer reaches the host's IPv6 service"
	for ((i = 0; i < 150; i++)); do
		code=$(nsenter --net="$OUTSIDE_NS" curl -s -m 2 -o /dev/null -w '%{http_code}' "http://[2001:db8:5::1]:$HOOKS_PORT/hooks/none" 2>/dev/null)
		[ "${code:-000}" != 000 ] && break; sleep 0.2
	done
	[ "${code:-000}" != 000 ]; ok $? "the webhook listener answers the outside on [2001:db8:5::1]:$HOOKS_PORT (control; HTTP $code)"
	is "$(from $B 2001:db8:5::1 $HOOKS_PORT)" "" "$B does not reach fleetd's webhook listener over IPv6"
fi
like "$(from $B 198.51.100.3 8080)" '^outside-three ' "$B still reaches what its list allows"
"$FLEETCTL" rm --force $B >/dev/null; "$FLEETCTL" rm --force $N >/dev/null
done_testing
