#!/bin/bash
# Upgrade (#14): a newer fleetd starts on an older state dir while an
# agent's environment runs, migrates the database at start without touching
# the environment, and everything kept there works after. The older state
# dir is made here by this build's fleetd, then its database is taken back
# to schema version 12 as a fleetd of that version left it (the columns of
# migrations 13-17 dropped, user_version 12). tests/unit/test_db_upgrade
# migrates a database of every schema version (tests/fixtures/schema/),
# row by row; this test is the whole daemon doing it.
. "$FLEET_SRCDIR/tests/lib/common.sh"
U=upg$(test_run_id)	# agent names of this run (two checkouts at once never collide)
. "$FLEET_SRCDIR/tests/lib/schema.sh"

[ "$(id -u)" = 0 ] || skip_all "needs root (user agents are Unix users)"
for t in jq sqlite3; do command -v $t >/dev/null || skip_all "needs $t"; done

user_fleetd_setup upg
user_fleetd_start; ok $? "fleetd starts"
LOG=$STATE/fleetd.log


"$FLEETCTL" create $U-a --backend user --command 'cat; echo; echo ran' >/dev/null; ok $? "create $U-a"
"$FLEETCTL" start $U-a >/dev/null; ok $? "start $U-a"
printf 'remember me' | "$FLEETCTL" memory $U-a put note >/dev/null; ok $? "put a key in its memory"
"$FLEETCTL" schedule add $U-a '0 3 * * *' --tz UTC >/dev/null; ok $? "add a schedule"
printf 'upg-github-secret-0123456789' | "$FLEETCTL" hook add $U-a --source github --route upg-gh >/dev/null
ok $? "subscribe it to a webhook route"
printf 'before' | "$FLEETCTL" trigger $U-a --wait --payload - >/dev/null; ok $? "a run before the upgrade"
run1=$("$FLEETCTL" --json runs $U-a --limit 1 | jq -r '.[0].id')
keeper=$(keeper_of $U-a)
ok $([ -n "$keeper" ] && echo 0 || echo 1) "its sandbox runs (${keeper:-none})"

stop_fleetd TERM; ok $? "the old fleetd stops (SIGTERM, as systemctl stop does)"
check "the agent's sandbox outlives it" -- kill -0 "$keeper"
schema_take_back "$STATE/fleet.db"
ok $? "the state dir's database is taken back to schema version 12"
is "$(sqlite3 "$STATE/fleet.db" 'PRAGMA user_version')" 12 "(user_version 12)"

user_fleetd_start; ok $? "the newer fleetd starts on it"
for v in $SCHEMA_TAKEN_BACK; do
	like "$(cat "$LOG")" "database migrated to schema version $v" "and migrates it to version $v"
done
newest=$(grep -o 'migrated to schema version [0-9]*' "$LOG" | tail -1 | grep -o '[0-9]*$')
is "$(sqlite3 "$STATE/fleet.db" 'PRAGMA user_version')" "$newest" "the database is at the newest version ($newest)"
is "$(sqlite3 "$STATE/fleet.db" 'PRAGMA integrity_check')" ok "and intact"
is "$("$FLEETCTL" --json host ls | jq -r '.[].name')" local "the host 'local' is there after the upgrade (migration 18)"
is "$(keeper_of $U-a)" "$keeper" "the agent's sandbox was not touched (the same one, adopted)"
is "$("$FLEETCTL" --json show $U-a | jq -r .state)" running "$U-a is running"
is "$("$FLEETCTL" --json show $U-a | jq -r .memory.quota_mib)" 64 "with the default memory quota (migration 14)"
is "$("$FLEETCTL" memory $U-a get note)" "remember me" "its memory is there"
like "$("$FLEETCTL" schedule ls $U-a)" "0 3 \* \* \*" "its schedule is there"
like "$("$FLEETCTL" hook ls $U-a)" "upg-gh" "its webhook route is there"
is "$("$FLEETCTL" --json runs $U-a "$run1" | jq -r .state)" succeeded "its run from before is there, succeeded"
printf 'after' | "$FLEETCTL" trigger $U-a --wait --payload - >/dev/null; ok $? "a run after the upgrade"
run2=$("$FLEETCTL" --json runs $U-a --limit 1 | jq -r '.[0].id')
ok $([ "$run2" -gt "$run1" ] 2>/dev/null && echo 0 || echo 1) "with a new id ($run2 after $run1)"
like "$("$FLEETCTL" logs $U-a "$run2")" "ran" "and its output"
is "$("$FLEETCTL" exec $U-a --no-stdin -- echo hello)" hello "exec works"
printf 'a secret value' | "$FLEETCTL" secret set $U-a TOKEN >/dev/null; ok $? "a secret can be set (migration 13's table)"
like "$("$FLEETCTL" secret ls $U-a)" "TOKEN" "and is listed"

"$FLEETCTL" rm --force $U-a >/dev/null; ok $? "remove $U-a"
done_testing
