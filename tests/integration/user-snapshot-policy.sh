#!/bin/bash
# Snapshot policy and retention with a user agent: --snapshot-keep keeps the
# newest N plus pinned ones and the newest good one; pin/unpin; a cron
# schedule takes snapshots by itself; bad settings are refused and change
# nothing; kill -9 of fleetd in the middle of a restore is finished at the
# next start; kill -9 in the middle of a delete too.
. "$FLEET_SRCDIR/tests/lib/common.sh"
A=usp$(test_run_id)	# agent names of this run (two checkouts at once never collide)

[ "$(id -u)" = 0 ] || skip_all "needs root (user agents are Unix users)"
command -v jq >/dev/null || skip_all "jq not installed"

user_fleetd_setup usp
user_fleetd_start; ok $? "fleetd starts"
names() { "$FLEETCTL" --json snapshots "$1" | jq -r '[.[].name] | join(" ")'; }

"$FLEETCTL" create $A --backend user --health-interval 0 >/dev/null; ok $? "create"
"$FLEETCTL" start $A >/dev/null; ok $? "start"

# --- bad settings are refused and change nothing ---
out=$("$FLEETCTL" set $A --snapshot-schedule '61 * * * *' 2>&1); is $? 2 "fleetctl refuses a bad cron spec"
like "$out" "minute field: 61 is out of range 0-59" "and names the field"
out=$(api PATCH /v1/agents/$A '{"snapshot_schedule": "* * *"}')
is "${out##* }" 400 "the API refuses a bad cron spec too"
like "$out" "expected 5 fields, got 3" "with the parser's words"
out=$(api PATCH /v1/agents/$A '{"snapshot_policy": "cron"}')
is "${out##* }" 400 "the cron policy without a schedule is refused"
out=$("$FLEETCTL" set $A --snapshot-policy sometimes 2>&1); is $? 2 "an unknown policy is a usage error"
out=$("$FLEETCTL" set $A --snapshot-keep -1 2>&1); is $? 2 "a negative keep is a usage error"
out=$(api PATCH /v1/agents/$A '{"snapshot_keep": 100000}'); is "${out##* }" 400 "the API refuses keep past 1000"
out=$(api PATCH /v1/agents/$A '{"snapshot_keep": "3"}'); is "${out##* }" 400 "and keep that is not a number"
is "$("$FLEETCTL" --json show $A | jq -c '.snapshots | [.policy, .schedule, .keep]')" '["none",null,0]' \
	"after all that: still no policy, keep all"

# --- retention: the newest N, pinned ones, the newest good one ---
"$FLEETCTL" snapshot $A s1 --pin >/dev/null; ok $? "s1, pinned"
"$FLEETCTL" snapshot $A s2 >/dev/null
"$FLEETCTL" snapshot $A s3 >/dev/null
"$FLEETCTL" stop $A >/dev/null
# Snapshots of a stopped agent are not checked: health unknown, never "good".
"$FLEETCTL" snapshot $A s4 >/dev/null; "$FLEETCTL" snapshot $A s5 >/dev/null; "$FLEETCTL" snapshot $A s6 >/dev/null
is "$(names $A)" "s1 s2 s3 s4 s5 s6" "six snapshots, none deleted while keep is 0"
is "$("$FLEETCTL" --json snapshots $A | jq -r '[.[] | select(.good == true) | .name] | join(" ")')" "s1 s2 s3" \
	"the three taken while running are good"
out=$("$FLEETCTL" set $A --snapshot-keep 2); ok $? "set --snapshot-keep 2"
like "$out" "keep the newest 2" "show says so"
is "$(names $A)" "s1 s3 s5 s6" "keep 2 applies at once: the newest two, pinned s1, newest good s3"
is "$(ls "$STATE/snapshots/$A" | tr '\n' ' ')" "s1 s3 s5 s6 " "the deleted ones are gone from disk too"
like "$("$FLEETCTL" audit --limit 20)" "snapshot.prune +$A/s2 +ok" "retention deletions are in the audit log"
"$FLEETCTL" snapshot $A s7 >/dev/null
is "$(names $A)" "s1 s3 s6 s7" "a new snapshot pushes the oldest unprotected one out"
out=$("$FLEETCTL" snapshot unpin $A s1); ok $? "unpin s1"
like "$out" "unpinned, and deleted by the retention policy" "past the line, it goes at once, and fleetctl says so"
is "$(names $A)" "s3 s6 s7" "s1 is gone"
"$FLEETCTL" snapshot pin $A s6 >/dev/null; ok $? "pin s6"
"$FLEETCTL" snapshot $A s8 >/dev/null; "$FLEETCTL" snapshot $A s9 >/dev/null
is "$(names $A)" "s3 s6 s8 s9" "pinned s6 and good s3 stay past the newest two"
is "$("$FLEETCTL" --json snapshots $A | jq -r '.[] | select(.name == "s6") | .pinned')" true "s6 lists as pinned"
out=$("$FLEETCTL" snapshot pin $A nope 2>&1); is $? 1 "pinning an unknown snapshot fails"
like "$out" "no snapshot 'nope'" "and says so"
out=$("$FLEETCTL" snapshot pin $A 'Bad Name' 2>&1); is $? 2 "an invalid snapshot name is a usage error"
out=$(api PATCH /v1/agents/$A/snapshots/s6 '{"pinned": "yes"}'); is "${out##* }" 400 "the API wants a boolean"

# --- kill -9 in the middle of a delete: finished at the next start ---
sqlite3 "$STATE/fleet.db" "UPDATE snapshots SET state = 'deleting' WHERE name = 's8'"
user_fleetd_kill_restart; ok $? "fleetd starts after kill -9 (with s8 left 'deleting', as a kill in the middle of a delete leaves it)"
is "$(names $A)" "s3 s6 s9" "the delete is finished: s8 is gone from the list"
ok $([ ! -e "$STATE/snapshots/$A/s8" ] && echo 0 || echo 1) "and from disk"
is "$(sqlite3 "$STATE/fleet.db" "SELECT count(*) FROM snapshots WHERE name = 's8'")" 0 "and from the database"

# --- kill -9 in the middle of a restore: finished at the next start ---
"$FLEETCTL" set $A --snapshot-keep 0 >/dev/null
"$FLEETCTL" start $A >/dev/null
# Enough files that the restore's copy takes a while.
"$FLEETCTL" exec $A -- sh -c 'mkdir -p work && cd work && for d in $(seq 1 40); do mkdir d$d; for f in $(seq 1 100); do echo "$d/$f" > d$d/f$f; done; done; head -c 100000000 /dev/zero > big; echo before > ~/marker'
"$FLEETCTL" snapshot $A big >/dev/null; ok $? "snapshot of a home with 4000 files and 100 MB"
"$FLEETCTL" exec $A -- sh -c 'rm -rf work; echo after > ~/marker'
"$FLEETCTL" restore $A big >/dev/null 2>&1 &
restore_pid=$!
deadline=$((SECONDS + 30))
until [ "$(sqlite3 "$STATE/fleet.db" "SELECT restoring FROM agents WHERE name = '$A'" 2>/dev/null)" = big ] ||
	[ $SECONDS -ge $deadline ]; do sleep 0.02; done
is "$(sqlite3 "$STATE/fleet.db" "SELECT restoring FROM agents WHERE name = '$A'")" big "the restore is recorded before it starts"
kill -9 "$FLEETD_PID"
wait $restore_pid; ok $([ $? -ne 0 ] && echo 0 || echo 1) "the restore's client sees fleetd die"
user_fleetd_start; ok $? "fleetd starts again"
deadline=$((SECONDS + 60))
until [ -z "$(sqlite3 "$STATE/fleet.db" "SELECT restoring FROM agents WHERE name = '$A'")" ] ||
	[ $SECONDS -ge $deadline ]; do sleep 0.2; done
is "$(sqlite3 "$STATE/fleet.db" "SELECT ifnull(restoring, 'none') FROM agents WHERE name = '$A'")" none \
	"the interrupted restore is finished"
is "$("$FLEETCTL" exec $A -- cat marker)" before "the home is the snapshot's"
is "$("$FLEETCTL" exec $A -- sh -c 'find work -type f | wc -l')" 4001 "every file is back"
ok $(ls "$STATE/users" | grep -q '\.restore$' && echo 1 || echo 0) "no half-built home is left"
like "$("$FLEETCTL" audit --limit 20)" "snapshot.restore.recover +$A/big +ok" "the audit log says fleet finished it"
is "$("$FLEETCTL" --json show $A | jq -r .state)" running "the agent runs again (its keeper outlived fleetd)"

# --- a cron schedule takes snapshots by itself ---
out=$("$FLEETCTL" set $A --snapshot-schedule '* * * * *' --snapshot-keep 3); ok $? "set a schedule: every minute"
like "$out" "policy cron \(\* \* \* \* \*\)" "show says the policy and schedule"
deadline=$((SECONDS + 75))
until [ "$("$FLEETCTL" --json snapshots $A | jq '[.[] | select(.name | startswith("auto-"))] | length')" -ge 1 ] ||
	[ $SECONDS -ge $deadline ]; do sleep 1; done
auto=$("$FLEETCTL" --json snapshots $A | jq -r '[.[] | select(.name | startswith("auto-"))][0]')
like "$(jq -r .name <<<"$auto")" "^auto-[0-9]{8}-[0-9]{6}" "a scheduled snapshot appears within a minute"
is "$(jq -r .note <<<"$auto")" "scheduled (* * * * *)" "noted as scheduled"
like "$("$FLEETCTL" audit --limit 50)" "snapshot.scheduled +$A/auto-" "and audited"
is "$(names $A | wc -w)" 4 "retention applies to scheduled snapshots: 3 newest plus pinned s6 (good s3 went: newer good ones exist)"
"$FLEETCTL" set $A --snapshot-policy none >/dev/null
is "$("$FLEETCTL" --json show $A | jq -c '.snapshots | [.policy, .schedule, .keep]')" '["none",null,3]' \
	"policy none drops the schedule"
done_testing
