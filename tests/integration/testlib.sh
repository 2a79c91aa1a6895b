#!/bin/bash
# The test helpers themselves (tests/lib/common.sh): a check that cannot
# fail proves nothing, so each helper is shown failing where it must.
. "$FLEET_SRCDIR/tests/lib/common.sh"

# lib_run CI SCRIPT: run SCRIPT in a fresh bash that sourced common.sh, with
# CI=CI; prints its output, then "rc=N".
lib_run() {
	local out rc
	out=$(CI=$1 bash -c ". '$FLEET_SRCDIR/tests/lib/common.sh'; $2" 2>&1); rc=$?
	printf '%s\nrc=%s' "$out" "$rc"
}

# --- skip_all -------------------------------------------------------------------------------------
out=$(lib_run "" 'skip_all "no frobnicator"')
is "$out" $'1..0 # SKIP no frobnicator\nrc=0' "skip_all before any result: a skip plan, exit 0"
out=$(lib_run true 'skip_all "no frobnicator"')
is "$out" $'not ok 1 - prerequisite missing under CI: no frobnicator\n1..1\nrc=1' "under CI=true it fails"
# After results, a skip plan is invalid TAP: it must fail, CI or not.
out=$(lib_run "" 'ok 0 "first"; skip_all "late"')
is "$out" $'ok 1 - first\nnot ok 2 - skip_all after 1 results (check prerequisites first): late\n1..2\nrc=1' \
	"skip_all after a result: a failed result and a valid plan, exit 1"

# --- stop_fleetd ----------------------------------------------------------------------------------
start_fleetd lib || { ok 1 "fleetd starts"; done_testing; }
pid=$FLEETD_PID
stop_fleetd; ok $? "stop_fleetd stops a running fleetd"
check "it is gone" -- bash -c "! kill -0 $pid"
stop_fleetd; rc=$?
check "stop_fleetd again, on the fleetd that is already gone, fails" -- isnt_rc "$rc"

# A fleetd that died on its own (here: kill -9 behind the helper's back).
start_fleetd lib || { ok 1 "fleetd restarts"; done_testing; }
kill -KILL "$FLEETD_PID"
for ((i = 0; i < 3000; i++)); do kill -0 "$FLEETD_PID" 2>/dev/null || break; sleep 0.01; done
check "fleetd was killed" -- bash -c "! kill -0 $FLEETD_PID"
out=$(stop_fleetd TERM); rc=$?
check "stop_fleetd on a fleetd that had already died fails" -- isnt_rc "$rc"
like "$out" "had already exited" "and says so"
# A pid that is alive but not a fleetd (a dead fleetd's pid, reused) is not signalled.
sleep 300 & other=$!; _pids+=("$other")
FLEETD_PID=$other
stop_fleetd KILL; rc=$?
check "stop_fleetd refuses a pid that is not a fleetd" -- isnt_rc "$rc"
check "and leaves that process alone" -- kill -0 "$other"
kill "$other"; wait "$other" 2>/dev/null

done_testing
