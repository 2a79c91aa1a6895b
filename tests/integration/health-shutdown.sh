#!/bin/bash
# fleetd stopped (SIGTERM) while a health check of a user agent is running:
# the backend's shutdown ends the check's exec and reports it, after the
# health state is gone. fleetd must still exit cleanly (status 0).
. "$FLEET_SRCDIR/tests/lib/common.sh"
A=hsd$(test_run_id)	# agent names of this run (two checkouts at once never collide)

[ "$(id -u)" = 0 ] || skip_all "needs root (user agents are Unix users)"

user_fleetd_setup hsd
# Under valgrind where it is installed: what the stop leaves unfreed (the
# state of the check's caller, which is told nothing) is a leak it reports.
VG=()
if command -v valgrind >/dev/null && ! ldd "$FLEETD" | grep -q libasan; then
	VG=(valgrind --tool=memcheck --leak-check=full --errors-for-leak-kinds=definite,indirect
	    --show-leak-kinds=definite,indirect --num-callers=20 --log-file="$TEST_TMP/vg.log")
fi
"${VG[@]}" "$FLEETD" --foreground --state-dir "$STATE" --socket "$SOCK" --config "$TEST_TMP/none.conf" \
	--user-uid-min "$_uid_base" --user-uid-max "$((_uid_base + 999))" \
	2>>"$TEST_TMP/fg.err" &
fg=$!
_pids+=("$fg")
for ((i = 0; i < 600; i++)); do "$FLEETCTL" status >/dev/null 2>&1 && break; sleep 0.1; done
"$FLEETCTL" status >/dev/null; ok $? "fleetd runs in the foreground"
_sockets+=("$SOCK")

"$FLEETCTL" create $A --backend user --health-cmd 'sleep 300' --health-interval 1 >/dev/null; ok $? "create with a check that takes long"
"$FLEETCTL" start $A >/dev/null; ok $? "start it"
# The periodic check is in flight once its sleep runs as the agent.
for ((i = 0; i < 600; i++)); do pgrep -u fleet-$A -x sleep >/dev/null && break; sleep 0.1; done
check "a check is running" -- pgrep -u fleet-$A -x sleep
kill -TERM "$fg"
wait "$fg"; st=$?
is "$st" 0 "fleetd exits 0 with the check in flight"
grep -v '^$' "$TEST_TMP/fg.err" | tail -5 | sed 's/^/# /'
check "the check killed by the shutdown is no verdict (nothing logged as failed)" -- \
	sh -c "! grep -q 'health check failed' '$TEST_TMP/fg.err'"
if ((${#VG[@]})); then
	grep -q 'ERROR SUMMARY: 0 errors' "$TEST_TMP/vg.log"
	ok $? "valgrind: nothing of the check's leaks (its caller's state freed with the health state)" ||
		grep -v 'unhandled\|You may be\|README\|Nevertheless\|bug_reports\|noted but\|spurious' "$TEST_TMP/vg.log" | head -40 | sed 's/^/#   /'
else
	diag "valgrind not installed: the leak check is left out"
fi
user_fleetd_start; ok $? "fleetd starts again"
"$FLEETCTL" rm --force $A >/dev/null; ok $? "remove it"
done_testing
