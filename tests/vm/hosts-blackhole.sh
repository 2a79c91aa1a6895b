#!/bin/bash
# A host that stops answering without refusing (#15): its network black-holed
# (every packet to h2 dropped: a pulled cable, a powered-off machine, a
# firewall), not a refused connection. A connect to it then waits for TCP's
# own timeout (about two minutes). fleetd must go on answering meanwhile:
# its API, its other agents, `host ls` saying h2 is unreachable (or its facts
# stale, never waiting for them); and once h2 answers again, fleetd
# reconnects by itself. A `host add` of a black-holed URI connects on a
# worker and is answered unreachable once its bound (20 s,
# HOSTS_CONNECT_TIMEOUT_S) passes, every other call answered meanwhile; one
# still connecting when fleetd stops is answered 503. A host's facts are read
# only when someone reads them: an idle fleetd asks h2 nothing.
. "$FLEET_SRCDIR/tests/lib/common.sh"

. "$FLEET_SRCDIR/tests/lib/vmfleet.sh"
vmfleet_setup --tcg jq

. "$FLEET_SRCDIR/tests/lib/host2.sh"
host2_start

h2_reachable() { "$FLEETCTL" --json host ls | jq -r '.[] | select(.name == "h2") | .reachable'; }
h2_down() { [ "$(h2_reachable)" = false ]; }
h2_up() { [ "$(h2_reachable)" = true ]; }

h2_shown() { timeout 10 "$FLEETCTL" host ls | awk '$1 == "h2" { print $2 }'; }
h2_not_ready() { case "$(h2_shown)" in unreachable|stale) return 0 ;; *) return 1 ;; esac; }
apiq() { api "$@" | tr -d "\n"; }
# Two more addresses of the test's own namespace, routed to the veth toward h2 and dropped
# by the same table: nothing ever answers there.
BH_ADDR=198.18.15.6 BH2_ADDR=198.18.15.7
add_bh() { apiq POST /v1/hosts "{\"name\":\"$1\",\"uri\":\"qemu+tcp://$2/system\"}" > "$TEST_TMP/add-$1.out"; }
# fleetd's connect to a black hole waits in SYN-SENT (its SYNs dropped): an add is under way.
connecting() { [ -n "$(vmns_exec ss -tnH state syn-sent dst "$1")" ]; }

# --log-level debug: fleetd logs each read of a host's facts it starts (vm/virt.c facts_refresh).
fleetd_ns_start --log-level debug; ok $? "fleetd starts inside the first namespace"
"$FLEETCTL" host add h2 "$H2_URI" >/dev/null; ok $? "host add h2"

# --- facts read when someone reads them, not while fleetd is idle ---------------------------------
reads() { grep -cF "libvirt: reading the facts of $H2_URI on a worker" "$STATE/fleetd.log"; }
n0=$(reads)
# Idle: no call to fleetd for more than twice FACTS_FRESH_S (5 s); what is measured is that nothing happens.
sleep 12
is "$(reads)" "$n0" "idle 12 s with h2 connected: fleetd read none of its facts (its debug log: $n0 reads before)"
out=$("$FLEETCTL" --json host ls); ok $? "host ls after the idle spell"
is "$(jq -r '.[] | select(.name == "h2") | .reachable' <<<"$out")" true "h2 is reachable"
check "its facts shown are the old ones, at once ($(jq -r '.[] | select(.name == "h2") | .facts_age_s' <<<"$out") s)" -- \
	test "$(jq -r '.[] | select(.name == "h2") | .facts_age_s' <<<"$out")" -ge 10
is "$(reads)" "$((n0 + 1))" "and that read of old facts started one read of h2's"
"$FLEETCTL" host ls >/dev/null; ok $? "a second host ls right after"
is "$(reads)" "$((n0 + 1))" "starts none (one under way, or the facts are fresh)"
h2_fresh() { [ "$("$FLEETCTL" --json host ls | jq -r '.[] | select(.name == "h2") | .facts_age_s')" -lt 5 ]; }
wait_for 10 h2_fresh; ok $? "host ls shows fresh facts once the read is in"
like "$("$FLEETCTL" host ls)" "h2 +ready" "and h2 ready (not stale)"
# A table of the test's own in the first namespace (fleetd's), dropping what goes to BH_ADDR and
# BH2_ADDR, then to h2.
vmns_exec ip route add "$BH_ADDR/32" dev fleet-h1 &&
	vmns_exec ip route add "$BH2_ADDR/32" dev fleet-h1 &&
	vmns_exec nft add table ip fleet_test_blackhole &&
	vmns_exec nft add chain ip fleet_test_blackhole out '{ type filter hook output priority 0; }' &&
	vmns_exec nft add rule ip fleet_test_blackhole out ip daddr "{ $BH_ADDR, $BH2_ADDR }" drop
ok $? "every packet to $BH_ADDR and $BH2_ADDR is dropped"

# --- host add of a black hole: on a worker, bounded, the loop free meanwhile ------------------------
add_bh h3 "$BH_ADDR" &
add_pid=$!
pending() { kill -0 "$add_pid" 2>/dev/null; }
wait_for 10 connecting "$BH_ADDR"; ok $? "fleetd is connecting to $BH_ADDR (SYN-SENT, ss in fleetd's namespace)"
like "$(apiq POST /v1/hosts "{\"name\":\"h3\",\"uri\":\"qemu+tcp://$BH_ADDR/system\"}")" 'is being added already".* 409$' \
	"a second add of h3 while the first connects: 409"
answered=0 late=0
while pending; do
	if timeout 5 "$FLEETCTL" status >/dev/null 2>&1; then answered=$((answered + 1)); else late=$((late + 1)); fi
	sleep 1
done
wait "$add_pid"
like "$(cat "$TEST_TMP/add-h3.out")" "host 'h3': cannot connect: qemu\+tcp://$BH_ADDR/system: no answer within 20 s.*\"unreachable\".* 400$" \
	"host add of a black hole: 400 unreachable once its bound passed: $(cat "$TEST_TMP/add-h3.out")"
check "status was asked meanwhile ($answered times)" -- test "$answered" -ge 5
is "$late" 0 "and answered every time ($answered of $((answered + late)), none took 5 s)"
is "$("$FLEETCTL" --json host ls | jq -r '.[].name' | tr '\n' ' ')" "local h2 " "h3 is not recorded"
like "$(grep "h3" "$STATE/fleetd.log" | tail -1)" "host 'h3'.*no answer within 20 s" "fleetd's log says why"

# --- h2 black-holed -------------------------------------------------------------------------------
vmns_exec nft add rule ip fleet_test_blackhole out ip daddr "$H2_ADDR" drop
ok $? "every packet to h2 is dropped from now on"
# host ls starts a read of its facts on a worker, which the silence holds: host ls shows them stale, then h2 unreachable.
wait_for 90 h2_not_ready; ok $? "host ls shows h2 $(h2_shown) (answering at once meanwhile)"
# This one as a user types it: fleetctl host add.
{ "$FLEETCTL" host add h4 "qemu+tcp://$BH2_ADDR/system" > "$TEST_TMP/add-h4.out" 2>&1; echo "rc=$?" >> "$TEST_TMP/add-h4.out"; } &
add_pid=$!
wait_for 10 connecting "$BH2_ADDR"; ok $? "a host add of h4 at $BH2_ADDR is connecting"
out=$(timeout 10 "$FLEETCTL" host ls 2>&1); ok $? "host ls answers while a host add to a black hole is pending"
check "(the add was still pending)" -- pending
like "$out" "h2 +(unreachable|stale)" "and shows h2 unreachable or stale"
# libvirt's keepalive (5 s x 3) calls the silent connection dead.
wait_for 90 h2_down; ok $? "fleetd sees h2 unreachable (libvirt's keepalive)"
# While fleetd retries h2 (each connect waits for TCP), every call is answered at once.
answered=0 late=0
for i in $(seq 20); do
	if timeout 5 "$FLEETCTL" status >/dev/null 2>&1; then answered=$((answered + 1)); else late=$((late + 1)); fi
	sleep 2
done
is "$late" 0 "fleetd answered all $answered status calls over 40 s of retries (none took 5 s)"
out=$(timeout 10 "$FLEETCTL" host ls 2>&1); ok $? "host ls answers"
like "$out" "h2 +unreachable" "and says h2 is unreachable"
wait "$add_pid"
like "$(tr '\n' ' ' < "$TEST_TMP/add-h4.out")" "host 'h4': cannot connect: qemu\+tcp://$BH2_ADDR/system: no answer within 20 s rc=1" \
	"fleetctl host add h4 was refused unreachable too, exit 1: $(tr '\n' ' ' < "$TEST_TMP/add-h4.out")"

# --- fleetd stopped with a host add still connecting: answered 503, nothing left behind ----------
# An address of its own (h3's orphaned connect to BH_ADDR may still be in SYN-SENT).
BH3_ADDR=198.18.15.5
vmns_exec ip route add "$BH3_ADDR/32" dev fleet-h1 &&
	vmns_exec nft add rule ip fleet_test_blackhole out ip daddr "$BH3_ADDR" drop
ok $? "every packet to $BH3_ADDR is dropped too"
add_bh h5 "$BH3_ADDR" &
add_pid=$!
wait_for 10 connecting "$BH3_ADDR"; ok $? "a host add of h5 at $BH3_ADDR is connecting"
stop_fleetd TERM; ok $? "fleetd stops on SIGTERM meanwhile"
wait "$add_pid"
like "$(cat "$TEST_TMP/add-h5.out")" 'fleetd is stopping; this call was not finished.*"unavailable".* 503$' \
	"the pending host add is answered 503: $(cat "$TEST_TMP/add-h5.out")"
like "$(grep "h5" "$STATE/fleetd.log" | tail -1)" "host 'h5' not added: fleetd is stopping" "fleetd's log says why"
! grep -qE "AddressSanitizer|Segmentation|double free|corrupted" "$STATE/fleetd.log"; ok $? "nothing freed twice or used after"
vmns_exec nft delete table ip fleet_test_blackhole; ok $? "h2 answers again"
fleetd_ns_start; ok $? "fleetd starts again"
is "$("$FLEETCTL" --json host ls | jq -r '.[].name' | tr '\n' ' ')" "local h2 " "h5 is not recorded"
wait_for 200 h2_up; ok $? "fleetd reconnects to h2 by itself"
"$FLEETCTL" host rm h2 >/dev/null; ok $? "host rm h2"
done_testing
