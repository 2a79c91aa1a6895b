#!/bin/bash
# Failing dependencies of a VM agent (#13, docs/reliability.md "Failing
# dependencies"), on one guest under the test's own private libvirtd:
# 1. libvirtd stopped and started again with runs and execs in flight: they
#    finish (they go through QEMU's socket, not libvirtd); while it is down
#    reads are served and a new exec is refused saying libvirt cannot be
#    reached; the health check after the run gives no verdict (it once
#    marked the agent bad: "it is not running"); once libvirtd is back
#    fleetd reconnects by itself and the agent is still running.
# 2. the guest's QEMU killed (kill -9) with a run and an exec in flight:
#    fleetd notices, the agent is stopped with the reason, the run ends
#    failed with an error, the exec fails; `start` brings it back.
# 3. a simulated host reboot (#14, docs/operations.md): fleetd, QEMU and
#    libvirtd all killed with SIGKILL, the boot id fleetd recorded made to
#    differ from the kernel's; libvirtd and fleetd started again, the agent
#    (--autostart on) boots by itself and exec works.
. "$FLEET_SRCDIR/tests/lib/common.sh"

. "$FLEET_SRCDIR/tests/lib/vmfleet.sh"
vmfleet_setup --tcg
command -v jq >/dev/null || skip_all "jq not installed"

last_run() { "$FLEETCTL" --json runs dqa | jq -r 'max_by(.id).id'; }
running() { [ "$("$FLEETCTL" --json runs dqa "$1" | jq -r .state)" = running ]; }
libvirtd_pid() { vmns_exec cat /run/libvirtd.pid 2>/dev/null; }

fleetd_ns_start; ok $? "fleetd starts inside the namespace"
"$FLEETCTL" create dqa --backend vm --network none --health-interval 0 --restart never \
	--command 'sleep 25; echo run-$FLEET_RUN_ID' >/dev/null && "$FLEETCTL" start dqa >/dev/null
ok $? "a VM agent runs"
"$FLEETCTL" exec dqa -- true; ok $? "exec works"

# ---------------- 1. libvirtd stopped and started under load ----------------
"$FLEETCTL" trigger dqa >/dev/null; ok $? "a run is queued"
RUN1=$(last_run)
wait_for 120 running "$RUN1"; ok $? "run $RUN1 is running"
for i in 1 2 3; do
	"$FLEETCTL" exec dqa -- sh -c "sleep 20; echo exec-$i" >"$TEST_TMP/exec$i.out" 2>&1 &
	eval "EXEC$i=\$!"
done
# The execs are in flight once their sleep runs in the guest.
wait_for 120 bash -c "[ \$('$FLEETCTL' exec dqa -- sh -c 'cat /proc/[0-9]*/comm 2>/dev/null | grep -cx sleep' 2>/dev/null || echo 0) -ge 4 ]"
ok $? "three execs and the run are in flight"
LPID=$(libvirtd_pid)
kill -TERM "$LPID"; ok $? "stop libvirtd (pid $LPID)"
wait_for 60 bash -c "! kill -0 $LPID 2>/dev/null"; ok $? "libvirtd is gone"
check "list is served while libvirtd is down" -- "$FLEETCTL" list
is "$("$FLEETCTL" --json show dqa | jq -r .state)" running "show: dqa still running (what fleetd last knew)"
out=$("$FLEETCTL" exec dqa -- true 2>&1); rc=$?
diag "a new exec while libvirtd is down: rc $rc: $out"
ok $([ $rc -ne 0 ] && echo 0 || echo 1) "a new exec while libvirtd is down is refused"
like "$out" "cannot reach libvirt" "saying libvirt cannot be reached (not that the guest is not running)"
for i in 1 2 3; do
	eval "wait \$EXEC$i"; ok $? "exec $i in flight finished"
	is "$(cat "$TEST_TMP/exec$i.out")" "exec-$i" "with its output"
done
vmns_exec libvirtd -d; ok $? "start libvirtd again"
wait_for 120 grep -q "libvirt: reconnected" "$STATE/fleetd.log"; ok $? "fleetd reconnects by itself"
is "$(run_wait dqa "$RUN1" 300)" succeeded "the run that was in flight succeeded"
like "$("$FLEETCTL" logs dqa "$RUN1")" "run-$RUN1" "with its output"
wait_for 120 "$FLEETCTL" exec dqa -- true; ok $? "exec works after libvirtd's restart"
is "$("$FLEETCTL" --json show dqa | jq -r .state)" running "dqa is running"

# ---------------- 2. QEMU killed with a run and an exec in flight ----------------
"$FLEETCTL" set dqa --command 'sleep 600' >/dev/null; ok $? "the agent's command now sleeps 600 s"
"$FLEETCTL" trigger dqa >/dev/null; ok $? "a run is queued"
RUN2=$(last_run)
wait_for 120 running "$RUN2"; ok $? "run $RUN2 is running"
"$FLEETCTL" exec dqa -- sleep 600 >"$TEST_TMP/exec-k.out" 2>&1 &
EXECK=$!
wait_for 120 bash -c "[ \$('$FLEETCTL' exec dqa -- sh -c 'cat /proc/[0-9]*/comm 2>/dev/null | grep -cx sleep' 2>/dev/null || echo 0) -ge 2 ]"
ok $? "the run and an exec are in flight"
QPID=$(vmns_exec cat /run/libvirt/qemu/fleet-dqa.pid)
kill -9 "$QPID"; ok $? "kill -9 the guest's QEMU (pid $QPID)"
is "$(run_wait dqa "$RUN2" 300)" failed "the run in flight ends failed"
err=$("$FLEETCTL" --json runs dqa "$RUN2" | jq -r '.error // empty')
diag "its error: $err"
like "$err" "." "with an error that says why"
wait "$EXECK"; rc=$?
diag "the exec in flight: rc $rc: $(cat "$TEST_TMP/exec-k.out")"
ok $([ $rc -ne 0 ] && echo 0 || echo 1) "the exec in flight fails"
wait_for 120 bash -c "[ \"\$('$FLEETCTL' --json show dqa | jq -r .state)\" = stopped ]"
ok $? "fleetd notices: dqa is stopped (restart policy never)"
detail=$("$FLEETCTL" --json show dqa | jq -r '.state_detail // empty')
diag "its state_detail: $detail"
check "fleetd's log names the crash" -- grep -q "QEMU died or the guest crashed" "$STATE/fleetd.log"
"$FLEETCTL" start dqa >/dev/null; ok $? "start brings it back"
wait_for 180 "$FLEETCTL" exec dqa -- true; ok $? "exec works again"
check "fleetd was never restarted" -- kill -0 "$FLEETD_PID"

# ---------------- 3. a simulated host reboot ----------------
"$FLEETCTL" set dqa --autostart on --command true >/dev/null; ok $? "dqa is set to start after a host reboot"
QPID=$(vmns_exec cat /run/libvirt/qemu/fleet-dqa.pid)
LPID=$(libvirtd_pid)
kill -9 "$FLEETD_PID" "$QPID" "$LPID"; ok $? "kill -9 fleetd, the guest's QEMU and libvirtd"
wait_for 60 bash -c "! kill -0 $FLEETD_PID 2>/dev/null && ! kill -0 $QPID 2>/dev/null"
echo 00000000-0000-0000-0000-000000000000 > "$STATE/boot-id"	# a reboot changes the kernel's boot id
vmns_exec rm -f /run/libvirtd.pid
vmns_exec libvirtd -d; ok $? "start libvirtd again"
wait_for 60 virsh_ns uri; ok $? "libvirtd answers"
fleetd_ns_start; ok $? "start fleetd again"
# The first start of fleetd in this test logged one (nothing to start); wait for the next.
autostarts_done() { [ "$(grep -c 'autostart: done after the host booted' "$STATE/fleetd.log")" -ge 2 ]; }
wait_for 300 autostarts_done; ok $? "its autostart finishes"
like "$(grep 'autostart: done' "$STATE/fleetd.log" | tail -1)" "1 started, 0 failed" "dqa was started"
is "$("$FLEETCTL" --json show dqa | jq -r .state)" running "dqa is running"
wait_for 180 "$FLEETCTL" exec dqa -- true; ok $? "and exec works in its guest"

"$FLEETCTL" rm --force dqa >/dev/null; ok $? "rm --force removes the agent"
done_testing
