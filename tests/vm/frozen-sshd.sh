#!/bin/bash
# A guest whose SSH server freezes (#13, docs/reliability.md "Failing
# dependencies"), end to end with real guests under the test's own private
# libvirtd: a root exec in the guest finds the dropbear process serving
# fleetd's session (its own ancestor) and stops it (SIGSTOP), then says so on
# the guest's serial console (the SSH session cannot carry it any more).
# An exec in flight and an exec sent after the freeze both fail with fleet's
# keepalive error, without a timeout of their own and without hanging
# fleetctl; fleetd, `status` and another agent keep answering; the next exec
# connects again (a new dropbear) and sends SIGCONT to the frozen one; exec
# works without restarting fleetd.
# Then `set --network` on a VM agent, as a user runs it: refused, saying
# so, and nothing of the agent changed (the other fields of the same call
# included).
. "$FLEET_SRCDIR/tests/lib/common.sh"

. "$FLEET_SRCDIR/tests/lib/vmfleet.sh"
vmfleet_setup --tcg
command -v jq >/dev/null || skip_all "jq not installed"

A=vfza
B=vfzb
# Bounds on waits only, never on how long something took: fleet's own
# keepalive gives up after 45 to 60 s; TCG guests on a shared host are slow.
LONG=600

fleetd_ns_start; ok $? "fleetd starts inside the namespace"
for n in "$A" "$B"; do
	"$FLEETCTL" create "$n" --backend vm --memory 256 --network none --health-interval 0 --restart never \
		>/dev/null || fail_all "create $n"
done
"$FLEETCTL" start "$A" >/dev/null & SA=$!
"$FLEETCTL" start "$B" >/dev/null & SB=$!
wait $SA && wait $SB; ok $? "two VM agents run"
is "$("$FLEETCTL" exec "$A" -- echo hi)" hi "exec works on $A"

# ---------------- the freeze ----------------
# In flight when the server freezes: prints, then sleeps.
timeout $LONG "$FLEETCTL" exec "$A" -- sh -c 'echo started; sleep 300; echo not-reached' \
	>"$TEST_TMP/inflight.out" 2>&1 &
INFLIGHT=$!
wait_for $LONG grep -q started "$TEST_TMP/inflight.out"; ok $? "an exec is in flight"
# The freezer: walks up from its shell to the dropbear serving this session.
FREEZE='p=$$
while [ "$(cat /proc/$p/comm)" != dropbear ]; do set -- $(cat /proc/$p/stat); p=$4; [ "$p" -gt 1 ] || exit 9; done
echo $p > /run/fleet-frozen-dropbear
kill -STOP $p
echo "fleet-frozen-dropbear $p" > /dev/ttyS0
sleep 3000'
timeout $LONG "$FLEETCTL" exec "$A" --root -- sh -c "$FREEZE" >"$TEST_TMP/freezer.out" 2>&1 &
FREEZER=$!
wait_for $LONG grep -aq "fleet-frozen-dropbear" "$STATE/vms/$A/console.log"
ok $? "the guest's dropbear serving fleetd is stopped (SIGSTOP, said on the serial console)"
diag "$(grep -a fleet-frozen-dropbear "$STATE/vms/$A/console.log" | tail -1 | tr -d '\r')"
# Sent after the freeze: its channel is never answered.
timeout $LONG "$FLEETCTL" exec "$A" -- echo after >"$TEST_TMP/after.out" 2>&1 &
AFTER=$!

check "status answers while the guest's sshd is frozen" -- "$FLEETCTL" status
check "list answers" -- "$FLEETCTL" list
is "$("$FLEETCTL" exec "$B" -- echo other)" other "another agent's exec works meanwhile"

wait $INFLIGHT; rc=$?
diag "the exec in flight: rc $rc: $(cat "$TEST_TMP/inflight.out")"
ok $([ $rc -ne 0 ] && [ $rc -ne 124 ] && echo 0 || echo 1) "the exec in flight fails (not cut by the test's bound)"
like "$(cat "$TEST_TMP/inflight.out")" "stopped answering" "with fleet's keepalive error"
! grep -q not-reached "$TEST_TMP/inflight.out"; ok $? "and never reached its end"
wait $AFTER; rc=$?
diag "the exec sent after the freeze: rc $rc: $(cat "$TEST_TMP/after.out")"
ok $([ $rc -ne 0 ] && [ $rc -ne 124 ] && echo 0 || echo 1) "the exec sent after the freeze fails (not cut by the test's bound)"
like "$(cat "$TEST_TMP/after.out")" "stopped answering" "with the same error"
wait $FREEZER; rc=$?
ok $([ $rc -ne 0 ] && [ $rc -ne 124 ] && echo 0 || echo 1) "the freezer's own exec failed with the session too"
check "fleetd still runs (never restarted)" -- kill -0 "$FLEETD_PID"
is "$("$FLEETCTL" --json show "$A" | jq -r .state)" running "$A is still running"

# ---------------- recovery ----------------
out=$("$FLEETCTL" exec "$A" --root -- sh -c 'p=$(cat /run/fleet-frozen-dropbear); kill -CONT $p && echo continued $p' 2>&1)
rc=$?
is "$rc" 0 "the next exec connects again (a new dropbear) while the old one is still stopped"
like "$out" "continued" "and sends SIGCONT to the frozen dropbear"
is "$("$FLEETCTL" exec "$A" -- echo again)" again "exec works again"
is "$("$FLEETCTL" exec "$B" -- echo other)" other "so does the other agent's"
is "$(head -1 "$STATE/fleetd.lock")" "$FLEETD_PID" "the same fleetd throughout"

# ---------------- set --network on a VM agent ----------------
out=$("$FLEETCTL" set "$A" --network nat 2>&1); rc=$?
diag "set --network nat on a running VM agent: rc $rc: $out"
ok $([ $rc -ne 0 ] && echo 0 || echo 1) "set --network nat on a running VM agent is refused"
like "$out" "not supported" "saying it is not supported"
like "$out" "create a new agent" "and what to do instead"
"$FLEETCTL" stop "$A" >/dev/null; ok $? "stop $A"
before=$("$FLEETCTL" --json show "$A" | jq -S .)
xml_before=$(virsh_ns dumpxml "fleet-$A" --inactive)
out=$("$FLEETCTL" set "$A" --network nat --command 'echo changed' 2>&1); rc=$?
diag "set --network nat --command on the stopped VM agent: rc $rc: $out"
ok $([ $rc -ne 0 ] && echo 0 || echo 1) "refused on the stopped agent too"
like "$out" "not supported" "saying it is not supported"
is "$("$FLEETCTL" --json show "$A" | jq -S .)" "$before" \
	"nothing of the agent changed (its command included)"
is "$(virsh_ns dumpxml "fleet-$A" --inactive)" "$xml_before" "its domain is unchanged"
! virsh_ns dumpxml "fleet-$A" --inactive | grep -q "<interface"; ok $? "and has no network interface"
"$FLEETCTL" set "$A" --network none >/dev/null; ok $? "set --network none (what it has) is no change, accepted"
"$FLEETCTL" start "$A" >/dev/null; ok $? "start $A"
is "$("$FLEETCTL" exec "$A" -- sh -c 'ls /sys/class/net | grep -vx lo | wc -l')" 0 "the guest has no network device but lo"

"$FLEETCTL" rm --force "$A" >/dev/null; ok $? "rm --force $A"
"$FLEETCTL" rm --force "$B" >/dev/null; ok $? "rm --force $B"
done_testing
