#!/bin/bash
# The wall clock jumping forward and back (#13, docs/reliability.md
# "Failing dependencies"), for fleetd only: it runs under libfaketime
# (Debian's libfaketime) with its offset read from a file the test rewrites
# (FAKETIME_TIMESTAMP_FILE, FAKETIME_NO_CACHE=1); the monotonic clock is
# left alone, as a real clock step leaves it. The host's clock is never
# touched. An agent with a cron trigger and a snapshot schedule, both every
# minute: a day forward queues one run, not one per minute passed over; two
# days back neither stalls the cron trigger nor the snapshot schedule (both
# go on by the new clock within a minute or so, where they waited for the
# clock to pass the old time before); then back to the real time.
# Waits for minute boundaries: some 3 to 5 minutes.
. "$FLEET_SRCDIR/tests/lib/common.sh"
U=uck$(test_run_id)	# agent names of this run (two checkouts at once never collide)

[ "$(id -u)" = 0 ] || skip_all "needs root (user agents are Unix users)"
command -v jq >/dev/null || skip_all "jq not installed"
command -v sqlite3 >/dev/null || skip_all "sqlite3 not installed"
. "$FLEET_SRCDIR/tests/lib/faketime.sh"

CLOCK=$TEST_TMP/clock-offset
echo "+0" >"$CLOCK"
# set_clock SECONDS: fleetd's wall clock is the real one plus SECONDS from now on.
set_clock() { printf '%+d\n' "$1" >"$CLOCK.new" && mv "$CLOCK.new" "$CLOCK"; }

user_fleetd_setup uck
LD_PRELOAD=$FAKETIME_LIB FAKETIME_TIMESTAMP_FILE=$CLOCK FAKETIME_NO_CACHE=1 FAKETIME_DONT_FAKE_MONOTONIC=1 \
	user_fleetd_start; ok $? "fleetd starts under libfaketime"
is "$(tr '\0' '\n' <"/proc/$FLEETD_PID/environ" | grep -c '^FAKETIME_TIMESTAMP_FILE=')" 1 "fleetd's clock is the test's"

db_q() { sqlite3 -readonly -cmd ".timeout 10000" "$STATE/fleet.db" "$1"; }
"$FLEETCTL" create $U-a --backend user --command 'echo tick' >/dev/null; ok $? "create $U-a"
"$FLEETCTL" start $U-a >/dev/null; ok $? "start it"
"$FLEETCTL" schedule add $U-a '* * * * *' --catch-up once >/dev/null; ok $? "a cron trigger every minute"
"$FLEETCTL" set $U-a --snapshot-schedule '* * * * *' >/dev/null; ok $? "a snapshot schedule every minute"

# cron_runs: how many runs of $U-a the cron trigger queued.
cron_runs() { "$FLEETCTL" --json runs $U-a --limit 10000 | jq '[.[] | select(.trigger == "cron")] | length'; }
# snaps: how many scheduled snapshots of $U-a were taken (audit; retention may remove snapshots).
snaps() { db_q "SELECT count(*) FROM audit WHERE action = 'snapshot.scheduled' AND outcome = 'ok'"; }
# wait_more WHAT N MAX_S: until WHAT (a function) says more than N, at most MAX_S seconds of real time.
wait_more() {
	local deadline=$((SECONDS + $3))
	while [ "$($1)" -le "$2" ]; do
		[ $SECONDS -ge "$deadline" ] && return 1
		sleep 1
	done
}

wait_more cron_runs 0 150; ok $? "the cron trigger fires by the real clock"
wait_more snaps 0 150; ok $? "a scheduled snapshot is taken by the real clock"

# ---------------- a day forward ----------------
R0=$(cron_runs); T0=$SECONDS
set_clock 86400
diag "fleetd's clock: +1 day"
wait_more cron_runs "$R0" 150; ok $? "after a day forward the cron trigger fires"
# 1440 slots were passed over: one run for them, then one a minute by the new clock.
R1=$(cron_runs) max=$((R0 + 2 + (SECONDS - T0) / 60))
ok "$([ "$R1" -le "$max" ]; echo $?)" "no burst of missed runs: $((R1 - R0)) new run(s), at most $((max - R0)) allowed"

# ---------------- two days back ----------------
R2=$(cron_runs) S2=$(snaps)
set_clock -86400
diag "fleetd's clock: -1 day (two days back from where it was)"
wait_more cron_runs "$R2" 180
ok $? "after two days back the cron trigger goes on by the new clock (no stall until the old time comes again)"
wait_more snaps "$S2" 180
ok $? "and so does the snapshot schedule"
R3=$(cron_runs); T3=$SECONDS
is "$(db_q "SELECT count(*) FROM audit WHERE action = 'schedule.fire' AND outcome = 'failed'")" 0 \
	"no firing was audited as failed"

# ---------------- the real time again ----------------
set_clock 0
diag "fleetd's clock: the real time (a day forward)"
wait_more cron_runs "$R3" 150; ok $? "back at the real time the cron trigger fires"
R4=$(cron_runs) max=$((R3 + 2 + (SECONDS - T3) / 60))
ok "$([ "$R4" -le "$max" ]; echo $?)" "again one run for the day passed over: $((R4 - R3)) new, at most $((max - R3))"
check "fleetd is still there" -- kill -0 "$FLEETD_PID"
is "$(db_q 'PRAGMA integrity_check')" ok "integrity_check: ok"

done_testing
