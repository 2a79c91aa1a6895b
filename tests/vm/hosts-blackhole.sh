#!/bin/bash
# A host that stops answering without refusing (#15): its network black-holed
# (every packet to h2 dropped: a pulled cable, a powered-off machine, a
# firewall), not a refused connection. A connect to it then waits for TCP's
# own timeout (about two minutes). fleetd must go on answering meanwhile:
# its API, its other agents, `host ls` saying h2 is unreachable; and once h2
# answers again, fleetd reconnects by itself.
. "$FLEET_SRCDIR/tests/lib/common.sh"

. "$FLEET_SRCDIR/tests/lib/vmfleet.sh"
vmfleet_setup --tcg jq

. "$FLEET_SRCDIR/tests/lib/host2.sh"
host2_start

h2_reachable() { "$FLEETCTL" --json host ls | jq -r '.[] | select(.name == "h2") | .reachable'; }
h2_down() { [ "$(h2_reachable)" = false ]; }
h2_up() { [ "$(h2_reachable)" = true ]; }

fleetd_ns_start; ok $? "fleetd starts inside the first namespace"
"$FLEETCTL" host add h2 "$H2_URI" >/dev/null; ok $? "host add h2"
# A table of the test's own in the first namespace (fleetd's), dropping what goes to h2.
vmns_exec nft add table ip fleet_test_blackhole &&
	vmns_exec nft add chain ip fleet_test_blackhole out '{ type filter hook output priority 0; }' &&
	vmns_exec nft add rule ip fleet_test_blackhole out ip daddr "$H2_ADDR" drop
ok $? "every packet to h2 is dropped from now on"
# The first call on the silent connection waits for libvirt's keepalive (5 s x 3) to call it dead.
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
vmns_exec nft delete table ip fleet_test_blackhole; ok $? "h2 answers again"
wait_for 200 h2_up; ok $? "fleetd reconnects to h2 by itself"
"$FLEETCTL" host rm h2 >/dev/null; ok $? "host rm h2"
done_testing
