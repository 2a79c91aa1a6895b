#!/bin/bash
# The run queue with a user agent: fleetctl trigger, run logs and exit codes,
# one run at a time per agent, a stopped environment started for a run, the
# before-run snapshot policy, the health check after every run (a run that
# breaks the agent is rolled back), and kill -9 of fleetd with runs queued
# and under way.
. "$FLEET_SRCDIR/tests/lib/common.sh"
R=$(test_run_id) A=ur${R} NOCMD=ur${R}-nocmd	# agent names of this run (two checkouts at once never collide)

[ "$(id -u)" = 0 ] || skip_all "needs root (user agents are Unix users)"
command -v jq >/dev/null || skip_all "jq not installed"

user_fleetd_setup urun
user_fleetd_start; ok $? "fleetd starts"
runj() { "$FLEETCTL" --json runs "$1" "$2"; }
# wait_run AGENT ID: until the run has finished (at most 60 s)
wait_run() {
	local deadline=$((SECONDS + 60)) st
	while st=$(runj "$1" "$2" | jq -r .state); [ "$st" = queued ] || [ "$st" = running ]; do
		[ $SECONDS -ge $deadline ] && return 1
		sleep 0.2
	done
}

# --- a run, its log and exit code ---
"$FLEETCTL" create $A --backend user \
	--command 'echo "run $FLEET_RUN_ID of $FLEET_AGENT by $FLEET_TRIGGER"; echo oops >&2; echo "$FLEET_RUN_ID" >> ~/runs.txt; exit ${EXIT:-0}' \
	>/dev/null; ok $? "create an agent with a command"
is "$("$FLEETCTL" --json show $A | jq -r .state)" stopped "it is stopped"
out=$("$FLEETCTL" trigger $A --wait 2>"$TEST_TMP/err"); ok $? "trigger --wait exits 0 for a run that exits 0"
like "$out" "^run 1 of $A by manual" "the log has the command's stdout, with FLEET_RUN_ID, FLEET_AGENT, FLEET_TRIGGER"
like "$out" "oops" "and its stderr"
like "$(cat "$TEST_TMP/err")" "run 1 succeeded" "trigger --wait says how the run ended"
is "$("$FLEETCTL" --json show $A | jq -r .state)" running "the stopped environment was started for the run"
is "$(runj $A 1 | jq -r '.state + " " + (.exit_code|tostring) + " " + .trigger')" "succeeded 0 manual" \
	"runs ID shows state, exit code and trigger"
is "$(stat -c %a "$STATE/runs/1.log")" 600 "the run's log on the host is 0600"
"$FLEETCTL" exec $A -- cat "$STATE/runs/1.log" >/dev/null 2>&1
ok $([ $? -ne 0 ] && echo 0 || echo 1) "the agent cannot read run logs on the host"
like "$("$FLEETCTL" runs $A 1)" "exit code: +0" "runs NAME ID shows the run"

# A failing command: trigger --wait exits with its code.
"$FLEETCTL" set $A --command 'echo failing; exit 7' >/dev/null; ok $? "set --command changes what runs"
"$FLEETCTL" trigger $A --wait >/dev/null 2>&1
is $? 7 "trigger --wait exits with the run's exit code"
is "$(runj $A 2 | jq -r '.state + " " + (.exit_code|tostring)')" "failed 7" "the run is recorded as failed, exit 7"

# --- one at a time, oldest first ---
"$FLEETCTL" set $A --command 'echo start $FLEET_RUN_ID >> ~/order; sleep 1; echo end $FLEET_RUN_ID >> ~/order' >/dev/null
ids=()
for i in 1 2 3; do ids+=("$("$FLEETCTL" --json trigger $A | jq -r .id)"); done
ok $([ ${#ids[@]} -eq 3 ] && echo 0 || echo 1) "three runs queued at once"
wait_run $A "${ids[2]}"; ok $? "the third finishes"
is "$("$FLEETCTL" exec $A -- cat order | tr '\n' ' ')" \
	"start ${ids[0]} end ${ids[0]} start ${ids[1]} end ${ids[1]} start ${ids[2]} end ${ids[2]} " \
	"runs of one agent never overlap and go in order"

# --- bad input ---
"$FLEETCTL" create $NOCMD --backend user >/dev/null
out=$("$FLEETCTL" trigger $NOCMD 2>&1); is $? 1 "trigger of an agent without a command fails"
like "$out" "has no command to run" "and says why"
out=$("$FLEETCTL" set $A --command '' 2>&1); is $? 1 "an empty command is refused"
like "$out" "command must be 1 to 4096 characters" "with the limits"
out=$("$FLEETCTL" trigger ghost 2>&1); is $? 1 "trigger of an unknown agent fails"
like "$out" "no such agent" "and says so"
out=$("$FLEETCTL" trigger 'Bad!' 2>&1); is $? 2 "an invalid agent name is a usage error"
out=$("$FLEETCTL" runs $A abc 2>&1); is $? 2 "a run id that is not a number is a usage error"
out=$("$FLEETCTL" runs $A 99999 2>&1); is $? 1 "an unknown run id fails"
like "$out" "no run 99999" "and says so"
out=$(api GET /v1/agents/$NOCMD/runs/1); is "${out##* }" 404 "another agent's run id is not found under this agent"
out=$(api GET /v1/agents/$A/runs/1x); is "${out##* }" 400 "the API refuses a malformed run id"
out=$(api GET "/v1/agents/$A/runs?limit=0"); is "${out##* }" 400 "and a bad limit"
"$FLEETCTL" rm $NOCMD >/dev/null

# --- before-run snapshots and the health check after each run ---
"$FLEETCTL" set $A --snapshot-policy before-run --health-interval 0 --auto-rollback on >/dev/null
ok $? "set the before-run policy and auto-rollback (no periodic checks)"
"$FLEETCTL" set $A --command 'echo keep > ~/memory/fact' >/dev/null
"$FLEETCTL" trigger $A --wait >/dev/null 2>&1; ok $? "a run with the before-run policy"
last=$(runj $A "$("$FLEETCTL" --json runs $A --limit 1 | jq -r '.[0].id')")
snap=$(jq -r .snapshot <<<"$last")
like "$snap" "^run-" "the run names the snapshot taken before it"
is "$("$FLEETCTL" --json snapshots $A | jq -r --arg s "$snap" '.[] | select(.name == $s) | .note')" \
	"before run $(jq -r .id <<<"$last")" "the snapshot exists, noted with the run"
# A run that breaks the agent: the check after it fails and fleet rolls back.
"$FLEETCTL" set $A --command 'rm -rf ~/memory; chmod 500 ~' >/dev/null
"$FLEETCTL" trigger $A --wait >/dev/null 2>&1; ok $? "a run that breaks its own home exits 0"
deadline=$((SECONDS + 60))
until [ "$("$FLEETCTL" --json audit --limit 1000 | jq '[.[] | select(.action == "auto.rollback")] | length')" -ge 1 ] &&
	[ "$("$FLEETCTL" --json show $A | jq -r '.state + "/" + .health.status')" = running/healthy ] ||
	[ $SECONDS -ge $deadline ]; do sleep 0.3; done
is "$("$FLEETCTL" --json show $A | jq -r '.state + "/" + .health.status')" running/healthy \
	"the health check after the run failed and fleet rolled back by itself"
is "$("$FLEETCTL" exec $A -- cat memory/fact 2>&1)" keep "the file from before the breaking run is back"
"$FLEETCTL" set $A --snapshot-policy none >/dev/null

# --- kill -9 with one run under way and one queued ---
"$FLEETCTL" set $A --command 'echo $FLEET_RUN_ID >> ~/seen; sleep 3' >/dev/null
a=$("$FLEETCTL" --json trigger $A | jq -r .id); b=$("$FLEETCTL" --json trigger $A | jq -r .id)
deadline=$((SECONDS + 30))
until [ "$(runj $A "$a" | jq -r .state)" = running ] || [ $SECONDS -ge $deadline ]; do sleep 0.1; done
is "$(runj $A "$a" | jq -r .state)" running "the first run is under way"
user_fleetd_kill_restart; ok $? "fleetd starts again after kill -9"
is "$(runj $A "$a" | jq -r '.state + ": " + .error')" \
	"interrupted: fleetd stopped during the run; it was not run again" "the run under way is marked interrupted"
wait_run $A "$b"; ok $? "the queued run still runs after the restart"
is "$(runj $A "$b" | jq -r .state)" succeeded "and succeeds"
sleep 0.5
is "$("$FLEETCTL" exec $A -- sh -c "grep -c '^$a\$' seen")" 1 "the interrupted run was not run twice"

# --- a graceful stop with a run under way ---
c=$("$FLEETCTL" --json trigger $A | jq -r .id)
deadline=$((SECONDS + 30))
until [ "$(runj $A "$c" | jq -r .state)" = running ] || [ $SECONDS -ge $deadline ]; do sleep 0.1; done
kill "$FLEETD_PID"
deadline=$((SECONDS + 30))
while kill -0 "$FLEETD_PID" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
ok $(kill -0 "$FLEETD_PID" 2>/dev/null && echo 1 || echo 0) "SIGTERM stops fleetd with a run under way"
is "$(sqlite3 "$STATE/fleet.db" "SELECT state || ': ' || error FROM runs WHERE id = $c")" \
	"interrupted: fleetd stopped during the run" "that run is recorded as interrupted"
user_fleetd_start; ok $? "fleetd starts again"
like "$("$FLEETCTL" runs $A)" "$c +manual +interrupted" "runs lists it as interrupted"
done_testing
