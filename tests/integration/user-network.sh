#!/bin/bash
# --network nat for user agents (#12): an agent's own persistent network
# namespace with a veth pair, NAT to the outside through the host, and what
# no agent may reach (nftables, table inet fleet). Everything runs in
# namespaces this test makes: the whole test (fleetd, its agents, the
# host's listeners) in a fresh network and mount namespace, and "the
# outside" in one more network namespace behind a veth pair, with servers
# on 198.51.100.2, 198.51.100.3 and 169.254.169.254 (TEST-NET-2 and the
# metadata address: nothing leaves the test's namespaces). Every refusal
# has a positive control: the same target answers someone else, so the
# rule refuses it, not a missing route or server.
if [ -z "${UNET_INNER:-}" ]; then
	if [ "$(id -u)" = 0 ] && command -v unshare >/dev/null; then
		exec unshare --net --mount -- env UNET_INNER=1 bash "$0" "$@"
	fi
fi
. "$FLEET_SRCDIR/tests/lib/common.sh"

[ "$(id -u)" = 0 ] || skip_all "needs root (user agents are Unix users)"
[ -n "${UNET_INNER:-}" ] || skip_all "unshare missing"
for t in nft ip nsenter socat jq; do command -v $t >/dev/null || skip_all "$t missing"; done

A=unet-a B=unet-b N=unet-n
HUSER=unet-$$
HOOKS_PORT=18471
on_exit "userdel $HUSER; groupdel $HUSER"

# ---- the test's world: fleetd's namespace ("the host") and the outside ----
ip link set lo up
OUT=$TEST_TMP/outside.ns
touch "$OUT"; unshare --net="$OUT" true || fail_all "cannot make the outside namespace"
on_exit "umount '$OUT'"
out() { nsenter --net="$OUT" "$@"; }
ip link add uplink0 type veth peer name o-eth0 netns "$OUT" || fail_all "cannot make the veth pair to the outside"
ip addr add 198.51.100.1/24 dev uplink0; ip link set uplink0 up
out ip link set lo up
out ip link set o-eth0 up
out ip addr add 198.51.100.2/24 dev o-eth0
out ip addr add 198.51.100.3/24 dev o-eth0
out ip addr add 169.254.169.254/32 dev o-eth0
out ip route add default via 198.51.100.1
ip route add 169.254.169.254/32 via 198.51.100.2
# A name for .3, seen by fleetd only (this mount namespace is the test's): egress lists take names.
{ cat /etc/hosts; echo "198.51.100.3 outside-three.test"; } > "$TEST_TMP/hosts"
mount --bind "$TEST_TMP/hosts" /etc/hosts || fail_all "cannot bind a hosts file in the test's mount namespace"

# serve ADDR PORT WORD [ns]: a TCP server answering "WORD PEER"
serve() {
	local run=(); [ "${4:-}" = out ] && run=(nsenter --net="$OUT")
	"${run[@]}" socat TCP-LISTEN:$2,bind=$1,fork,reuseaddr SYSTEM:"echo $3 \$SOCAT_PEERADDR" 2>/dev/null &
	_pids+=($!)
}
# reach ADDR PORT [ns]: what a server at ADDR:PORT answers (empty: nothing)
reach() { ${3:+nsenter --net="$OUT"} socat -T3 - TCP:$1:$2,connect-timeout=3 </dev/null 2>/dev/null; }
serve 198.51.100.2 8080 outside-two out
serve 198.51.100.3 8080 outside-three out
serve 169.254.169.254 80 metadata out
serve 127.0.0.1 7001 host-loopback
serve 0.0.0.0 7002 host-any
wait_reach() { local i; for ((i = 0; i < 100; i++)); do [ -n "$(reach "$@")" ] && return 0; sleep 0.1; done; return 1; }
wait_reach 198.51.100.2 8080; ok $? "the host reaches the outside server (control)"
wait_reach 169.254.169.254 80; ok $? "the host reaches the planted metadata server (control: a route and a server exist)"
wait_reach 127.0.0.1 7001; ok $? "the host reaches its own loopback service (control)"
wait_reach 198.51.100.1 7002 out; ok $? "the outside reaches the host's service on 198.51.100.1 (control)"

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
	code=$(out curl -s -m 2 -o /dev/null -w '%{http_code}' http://198.51.100.1:$HOOKS_PORT/hooks/none 2>/dev/null)
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
# from AGENT ADDR PORT: what the server answers the agent (empty: nothing)
from() { in_agent $1 "socat -T3 - TCP:$2:$3,connect-timeout=3 </dev/null 2>/dev/null"; }

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

# Another agent: B listens in its own namespace; B's second exec (same namespace) reaches it, A does not.
"$FLEETCTL" exec $B -- timeout 60 socat TCP-LISTEN:9000,fork,reuseaddr SYSTEM:'echo agent-b' </dev/null >/dev/null 2>&1 &
_pids+=($!)
for ((i = 0; i < 100; i++)); do [ -n "$(from $B 10.199.0.6 9000)" ] && break; sleep 0.1; done
is "$(from $B 10.199.0.6 9000)" agent-b "$B's second exec reaches B's listener at 10.199.0.6 (control: one namespace per agent)"
is "$(from $A 10.199.0.6 9000)" "" "$A does not reach $B"

# The egress list: one address in, another out, and the refusal counted.
like "$(from $B 198.51.100.2 8080)" '^outside-two ' "$B reaches what its egress list allows"
before=$("$FLEETCTL" --json show $B | jq -r '.egress_refused_packets')
is "$(from $B 198.51.100.3 8080)" "" "$B does not reach an address outside its egress list"
after=$("$FLEETCTL" --json show $B | jq -r '.egress_refused_packets')
ok $([ "$after" -gt "$before" ] 2>/dev/null; echo $?) "the refusal is counted ($before -> $after packets)"
like "$("$FLEETCTL" show $B)" 'refused: +[1-9][0-9]* packet' "fleetctl show prints the count"
"$FLEETCTL" set $B --egress-allow outside-three.test:8080 >/dev/null; ok $? "set $B --egress-allow outside-three.test:8080"
check "the name was resolved into $B's chain" -- sh -c "nft list chain inet fleet agent-$B | grep -q 'ip daddr 198.51.100.3 .*dport 8080 accept'"
like "$(from $B 198.51.100.3 8080)" '^outside-three ' "the new list applies at once: $B reaches .3"
is "$(from $B 198.51.100.2 8080)" "" "and no longer .2"
out=$("$FLEETCTL" set $N --egress-allow 10.0.0.0/8 2>&1); ok $([ $? -ne 0 ]; echo $?) "an egress list without nat is refused"
out=$("$FLEETCTL" create unet-bad --backend user --network nat --egress-allow 'a b' 2>&1)
ok $([ $? -ne 0 ]; echo $?) "a malformed egress list is refused: $out"

# The rules: named per agent, gone with the agent, restored at start.
check "the table has $A's chain" -- nft list chain inet fleet agent-$A
"$FLEETCTL" rm --force $A >/dev/null; ok $? "rm $A"
check "$A's chain is gone" -- sh -c "! nft list chain inet fleet agent-$A"
check "$A's counter is gone" -- sh -c "! nft list counter inet fleet refused-$A"
check "$A's host interface is gone" -- sh -c "! ip link show flh0"
check "$A's namespace file is gone" -- test ! -e "$STATE/netns/$A"
nft delete table inet fleet; ok $? "delete the whole table by hand"
like "$(from $B 169.254.169.254 80)" '^metadata' "without the table $B reaches the metadata server (control: the rules did it)"
stop_fleetd; ok $? "fleetd stops"
user_fleetd_start --hooks-listen 0.0.0.0:$HOOKS_PORT --hooks-user "$HUSER"; ok $? "fleetd starts again"
check "$B's chain is back" -- nft list chain inet fleet agent-$B
is "$(from $B 169.254.169.254 80)" "" "$B no longer reaches the metadata address"
like "$(from $B 198.51.100.3 8080)" '^outside-three ' "$B still reaches what its list allows"
"$FLEETCTL" rm --force $B >/dev/null; "$FLEETCTL" rm --force $N >/dev/null
done_testing
