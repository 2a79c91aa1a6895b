#!/bin/bash
# fleetd stopped (SIGTERM) while a health check of a user agent is running:
# the backend's shutdown ends the check's exec and reports it, after the
# health state is gone. fleetd must still exit cleanly (status 0).
. "$FLEET_SRCDIR/tests/lib/common.sh"

[ "$(id -u)" = 0 ] || skip_all "needs root (user agents are Unix users)"

user_fleetd_setup hsd
"$FLEETD" --foreground --state-dir "$STATE" --socket "$SOCK" --config "$TEST_TMP/none.conf" \
	--user-uid-min "$_uid_base" --user-uid-max "$((_uid_base + 999))" \
	2>>"$TEST_TMP/fg.err" &
fg=$!
_pids+=("$fg")
for ((i = 0; i < 600; i++)); do "$FLEETCTL" status >/dev/null 2>&1 && break; sleep 0.1; done
"$FLEETCTL" status >/dev/null; ok $? "fleetd runs in the foreground"
_sockets+=("$SOCK")

"$FLEETCTL" create hsd --backend user --health-cmd 'sleep 300' --health-interval 1 >/dev/null; ok $? "create with a check that takes long"
"$FLEETCTL" start hsd >/dev/null; ok $? "start it"
# The periodic check is in flight once its sleep runs as the agent.
for ((i = 0; i < 600; i++)); do pgrep -u fleet-hsd -x sleep >/dev/null && break; sleep 0.1; done
check "a check is running" -- pgrep -u fleet-hsd -x sleep
kill -TERM "$fg"
wait "$fg"; st=$?
is "$st" 0 "fleetd exits 0 with the check in flight"
grep -v '^$' "$TEST_TMP/fg.err" | tail -5 | sed 's/^/# /'
check "the check killed by the shutdown is no verdict (nothing logged as failed)" -- \
	sh -c "! grep -q 'health check failed' '$TEST_TMP/fg.err'"
user_fleetd_start; ok $? "fleetd starts again"
"$FLEETCTL" rm --force hsd >/dev/null; ok $? "remove it"
done_testing
