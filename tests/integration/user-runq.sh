#!/bin/bash
# The run queue, finished (#11), with user agents, as a user runs it:
# trigger --payload (the event on stdin, FLEET_* in the environment, the
# 1 MiB cap), the run timeout (timed-out, the process tree killed), cancel
# of a queued and of a running run, --max-queued (fleetctl and the API's
# 429), logs and logs -f, --retry-interrupted across a kill -9 of fleetd,
# and max_concurrent_runs.
. "$FLEET_SRCDIR/tests/lib/common.sh"
U=urq$(test_run_id)	# agent names of this run (two checkouts at once never collide)

[ "$(id -u)" = 0 ] || skip_all "needs root (user agents are Unix users)"
command -v jq >/dev/null || skip_all "jq not installed"

# Safety net when fleetd cannot remove them (it failed to restart): this
# test's agents are the Unix users whose home lies in its state dir.
# Registered first, so it runs last: after fleetd's own rm --force.
_urq_users() {
	local u
	case $STATE in /var/lib/fleet-urq.?*) ;; *) return 0 ;; esac	# only ever this test's own dir
	for u in $(getent passwd | awk -F: -v d="$STATE/" 'index($6, d) == 1 { print $1 }'); do
		ps -o pid= -u "$u" 2>/dev/null | xargs -r kill -9 2>/dev/null
		userdel "$u" 2>/dev/null
		groupdel "$u" 2>/dev/null
	done
}
on_exit _urq_users
user_fleetd_setup urq
user_fleetd_start; ok $? "fleetd starts"
runj() { "$FLEETCTL" --json runs "$1" "$2"; }
state() { runj "$1" "$2" | jq -r .state; }
# wait_state AGENT ID STATE...: until the run is in one of the states (at most 60 s)
wait_state() {
	local a=$1 id=$2 deadline=$((SECONDS + 60)) st; shift 2
	while st=$(state "$a" "$id"); [[ " $* " != *" $st "* ]]; do
		[ $SECONDS -ge $deadline ] && return 1
		sleep 0.2
	done
}
wait_run() { wait_state "$1" "$2" succeeded failed timed-out cancelled interrupted; }
# sleepers USER: how many sleep processes the agent's Unix user has (pgrep only reads /proc)
sleepers() { pgrep -c -u "$1" -x sleep || true; }
# wait_no_sleepers USER: until none is left (at most 30 s)
wait_no_sleepers() {
	local deadline=$((SECONDS + 30))
	while [ "$(sleepers "$1")" != 0 ]; do [ $SECONDS -ge $deadline ] && return 1; sleep 0.2; done
}

# --- options: create and set ---
"$FLEETCTL" create $U-a --backend user --run-timeout 30 --max-queued 2 --retry-interrupted 0 \
	--command 'cat > ~/in.json; env | grep ^FLEET_ | sort > ~/env.txt; cat ~/in.json' >/dev/null
ok $? "create with --run-timeout, --max-queued, --retry-interrupted"
is "$("$FLEETCTL" --json show $U-a | jq -Sc .runs)" '{"max_queued":2,"retry_interrupted":0,"secret_files":false,"timeout_s":30}' \
	"show has them"
like "$("$FLEETCTL" show $U-a)" "runs: +timeout 30s, at most 2 queued" "and says them in words"
"$FLEETCTL" create $U-d --backend user --command true >/dev/null
is "$("$FLEETCTL" --json show $U-d | jq -Sc .runs)" '{"max_queued":100,"retry_interrupted":0,"secret_files":false,"timeout_s":3600}' \
	"the defaults: 3600 s, 100 queued, no retry"
out=$("$FLEETCTL" set $U-d --run-timeout 0 2>&1); is $? 2 "--run-timeout 0 is a usage error"
like "$out" "--run-timeout needs seconds from 1" "with the range"
out=$(api PATCH /v1/agents/$U-d '{"max_queued": 0}'); is "${out##* }" 400 "the API refuses max_queued 0"

# --- trigger --payload: the event on stdin, FLEET_* in the environment ---
printf '{"alert": "disk full", "host": "db1"}' > "$TEST_TMP/payload.json"
out=$("$FLEETCTL" trigger $U-a --wait --payload "$TEST_TMP/payload.json" 2>/dev/null); ok $? "trigger --wait --payload FILE"
id=$(jq -r .run_id <<<"$out")
is "$(jq -r .source <<<"$out")" manual "stdin is the event as JSON: source manual"
is "$(jq -r .body <<<"$out")" '{"alert": "disk full", "host": "db1"}' "its body is the payload, byte for byte"
is "$(jq -r '.trigger + " " + .agent' <<<"$out")" "manual $U-a" "with trigger and agent"
like "$(jq -r .received_at <<<"$out")" '^[0-9]{4}-[0-9]{2}-[0-9]{2}T' "and when it came"
env=$("$FLEETCTL" exec $U-a -- cat env.txt)
like "$env" "^FLEET_RUN_ID=$id\$" "FLEET_RUN_ID"
like "$env" "^FLEET_TRIGGER=manual\$" "FLEET_TRIGGER"
like "$env" "^FLEET_EVENT_SOURCE=manual\$" "FLEET_EVENT_SOURCE"
like "$env" "^FLEET_EVENT_TYPE=\$" "FLEET_EVENT_TYPE (none for a manual run)"
like "$env" "^FLEET_DELIVERY_ID=\$" "FLEET_DELIVERY_ID (none)"
out=$(printf 'from stdin' | "$FLEETCTL" trigger $U-a --wait --payload - 2>/dev/null); ok $? "--payload - reads stdin"
is "$(jq -r .body <<<"$out")" "from stdin" "and that is the body"
out=$("$FLEETCTL" trigger $U-a --wait 2>/dev/null)
is "$(jq -r '.body' <<<"$out")" null "without --payload the body is null"
head -c $((1024 * 1024 + 1)) /dev/zero | tr '\0' a > "$TEST_TMP/big"
out=$("$FLEETCTL" trigger $U-a --payload "$TEST_TMP/big" 2>&1); is $? 1 "a payload over 1 MiB is refused"
like "$out" "larger than 1048576 bytes \(1 MiB\)" "and says the limit"
{ printf '{"payload": "'; head -c $((1024 * 1024 + 3)) /dev/zero | base64 -w0; printf '"}'; } > "$TEST_TMP/big.json"
out=$(curl -sS --unix-socket "$SOCK" -X POST -H 'Content-Type: application/json' --data-binary @"$TEST_TMP/big.json" \
	-w ' %{http_code}' http://fleet/v1/agents/$U-a/runs)
is "${out##* }" 413 "the API answers 413 above 1 MiB"
out=$(api POST /v1/agents/$U-a/runs '{"payload": "%%%"}'); is "${out##* }" 400 "and 400 for a payload that is not base64"

# A queued run keeps its payload across kill -9.
"$FLEETCTL" set $U-a --command 'sleep 3; cat' >/dev/null
r1=$("$FLEETCTL" --json trigger $U-a | jq -r .id)
r2=$(printf 'kept' | "$FLEETCTL" --json trigger $U-a --payload - | jq -r .id)
user_fleetd_kill_restart; ok $? "fleetd starts again after kill -9 with a run queued"
wait_run $U-a "$r2"; ok $? "the queued run runs after the restart"
like "$("$FLEETCTL" logs $U-a "$r2")" '"body":"kept"' "with its payload"

# --- the run timeout: timed-out, its whole process tree killed ---
"$FLEETCTL" set $U-a --run-timeout 2 --command 'sleep 300 & sleep 300' >/dev/null
id=$("$FLEETCTL" --json trigger $U-a | jq -r .id)
wait_run $U-a "$id"; ok $? "a run over its timeout ends"
is "$(runj $U-a "$id" | jq -r '.state + ": " + .error')" \
	"timed-out: timed out after 2 s (the agent's --run-timeout) and was killed" "it is timed-out and says why"
wait_no_sleepers fleet-$U-a; ok $? "its processes (the background one too) are gone"
"$FLEETCTL" trigger $U-a --wait >/dev/null 2>&1; is $? 124 "trigger --wait exits 124 for a timed-out run"

# --- cancel: a queued run and a running one ---
"$FLEETCTL" set $U-a --run-timeout 3600 --command 'echo started; sleep 300 & sleep 300' >/dev/null
c1=$("$FLEETCTL" --json trigger $U-a | jq -r .id)
c2=$("$FLEETCTL" --json trigger $U-a | jq -r .id)
wait_state $U-a "$c1" running; ok $? "one run runs, one waits"
c3=$("$FLEETCTL" --json trigger $U-a | jq -r .id); ok $? "a third is queued: two wait (--max-queued 2)"
out=$("$FLEETCTL" trigger $U-a 2>&1); is $? 1 "a fourth is refused"
like "$out" "queue is full: 2 runs wait already" "and says why"
out=$(api POST /v1/agents/$U-a/runs); is "${out##* }" 429 "the API answers 429"
like "${out% *}" '"queue_full"' "with code queue_full"
is "$("$FLEETCTL" --json runs $U-a | jq '[.[] | select(.state == "queued")] | length')" 2 "the refused left no run"
"$FLEETCTL" cancel $U-a "$c3" >/dev/null
out=$("$FLEETCTL" cancel $U-a "$c2"); ok $? "cancel the queued run"
like "$out" "run $c2 cancelled" "it is cancelled at once"
is "$(state $U-a "$c2")" cancelled "and stays so"
out=$("$FLEETCTL" cancel $U-a "$c1"); ok $? "cancel the running run"
like "$out" "being cancelled" "its processes are being killed"
wait_run $U-a "$c1"; is "$(state $U-a "$c1")" cancelled "it ends cancelled"
wait_no_sleepers fleet-$U-a; ok $? "its whole process tree is gone"
like "$("$FLEETCTL" logs $U-a "$c1")" "^started" "its log has what it wrote before"
out=$("$FLEETCTL" cancel $U-a "$c1" 2>&1); is $? 1 "cancelling an ended run fails"
like "$out" "is over already \(cancelled\)" "and says why"
out=$("$FLEETCTL" cancel $U-d "$c1" 2>&1); is $? 1 "another agent's run cannot be cancelled through this one"
out=$("$FLEETCTL" cancel $U-a x 2>&1); is $? 2 "a run ID that is not a number is a usage error"

# --- logs and logs -f ---
"$FLEETCTL" set $U-a --command 'for i in 1 2 3; do echo line $i; sleep 1; done' >/dev/null
id=$("$FLEETCTL" --json trigger $U-a | jq -r .id)
wait_state $U-a "$id" running succeeded
out=$("$FLEETCTL" logs $U-a "$id" -f); ok $? "logs -f follows the run and ends with it"
is "$(tr '\n' ' ' <<<"$out")" "line 1 line 2 line 3 " "it printed everything the run wrote"
is "$(state $U-a "$id")" succeeded "the run had ended when logs -f did"
is "$("$FLEETCTL" logs $U-a "$id" | tr '\n' ' ')" "line 1 line 2 line 3 " "logs prints an ended run's log"
out=$("$FLEETCTL" logs $U-a 99999 2>&1); is $? 1 "logs of an unknown run fails"
out=$(api GET "/v1/agents/$U-a/runs/$id/log?offset=7"); is "$(jq -r .data <<<"${out% *}")" "line 2
line 3" "the API reads from an offset"

# --- retry-interrupted, across kill -9; then max_concurrent_runs ---
"$FLEETCTL" set $U-a --retry-interrupted 1 --command 'echo attempt; echo $FLEET_RUN_ID >> ~/seen; sleep 3' >/dev/null
id=$("$FLEETCTL" --json trigger $U-a | jq -r .id)
wait_state $U-a "$id" running; ok $? "a run is under way"
sleep 0.5
user_fleetd_kill_restart --max-concurrent-runs 1; ok $? "fleetd starts again after kill -9 (max_concurrent_runs 1)"
wait_run $U-a "$id"; ok $? "the cut-off run ran again"
is "$(runj $U-a "$id" | jq -r '.state + " " + (.retries|tostring)')" "succeeded 1" "and succeeded, retried once"
is "$("$FLEETCTL" exec $U-a -- sh -c "grep -c '^$id\$' seen")" 2 "its command ran twice"
like "$("$FLEETCTL" logs $U-a "$id")" "fleetd stopped during the run; it runs again from here" \
	"its log keeps the first attempt's output and says where the second begins"

"$FLEETCTL" create $U-b --backend user --command 'sleep 300' >/dev/null
"$FLEETCTL" create $U-c --backend user --command 'echo c ran' >/dev/null
b=$("$FLEETCTL" --json trigger $U-b | jq -r .id)
wait_state $U-b "$b" running; ok $? "$U-b's run runs"
c=$("$FLEETCTL" --json trigger $U-c | jq -r .id)
sleep 2
is "$(state $U-c "$c")" queued "$U-c's run waits: max_concurrent_runs is 1"
"$FLEETCTL" cancel $U-b "$b" >/dev/null
wait_run $U-c "$c"; ok $? "once $U-b's ends, $U-c's runs"
is "$(state $U-c "$c")" succeeded "and succeeds"
done_testing
