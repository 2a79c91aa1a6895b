#!/bin/bash
# fleetctl watch and GET /v1/watch against a real fleetd with user agents:
# a watcher sees an agent created and started, a run queued, started and
# finished (fleetctl trigger), a snapshot and a restore, a health result;
# ?agent= filters; readable lines; bad input. Then a reader that stops
# reading (curl, SIGSTOPped) is cut off with a last overflow line while
# fleetd's RSS stays bounded and other clients (a second watcher, fleetctl)
# are served.
. "$FLEET_SRCDIR/tests/lib/common.sh"
R=$(test_run_id) && export W1=wat${R}a W2=wat${R}b	# agent names of this run (two checkouts at once never collide) (exported: jq reads them as $ENV.W1)

[ "$(id -u)" = 0 ] || skip_all "needs root (user agents are Unix users)"
command -v jq >/dev/null || skip_all "jq not installed"
command -v curl >/dev/null || skip_all "curl not installed"

user_fleetd_setup uwatch
# A small per-watcher bound, so the slow reader below is cut off after a few hundred events.
user_fleetd_start --watch-buffer-bytes 4096; ok $? "fleetd starts"

# start_watch OUT [ARGS...]: fleetctl --json watch ARGS into OUT, in the
# background (WATCH_PID), back once fleetd has said the watch is in place.
start_watch() {
	local out=$1 i
	shift
	"$FLEETCTL" --json watch "$@" >"$out" 2>"$out.err" &
	WATCH_PID=$!
	_pids+=("$WATCH_PID")
	for ((i = 0; i < 600; i++)); do
		grep -q '"type":"watching"' "$out" 2>/dev/null && return 0
		kill -0 "$WATCH_PID" 2>/dev/null || break
		sleep 0.05
	done
	diag "watch did not start: $(cat "$out.err")"
	return 1
}
# wait_event OUT JQ-FILTER: until a line of OUT matches (at most 60 s).
wait_event() {
	local i
	for ((i = 0; i < 1200; i++)); do
		[ -n "$(jq -c "select($2)" "$1" 2>/dev/null | head -1)" ] && return 0
		sleep 0.05
	done
	diag "no event $2 in $1:"; sed 's/^/#   /' "$1" | tail -20
	return 1
}
stop_watch() { kill "$1" 2>/dev/null; wait "$1" 2>/dev/null; }

# --- everything one agent goes through, seen by an unfiltered and a filtered watcher ---
start_watch "$TEST_TMP/all"; ok $? "fleetctl watch starts"
all_pid=$WATCH_PID
start_watch "$TEST_TMP/f1" $W1; ok $? "fleetctl watch NAME starts"
wat1_pid=$WATCH_PID
is "$(head -1 "$TEST_TMP/f1" | jq -c .)" "{\"type\":\"watching\",\"agent\":\"$W1\"}" "its first line says what it watches"

"$FLEETCTL" create $W1 --backend user --command 'echo run $FLEET_RUN_ID' --health-cmd true >/dev/null
ok $? "create a user agent"
"$FLEETCTL" create $W2 --backend user >/dev/null; ok $? "create a second agent"
wait_event "$TEST_TMP/all" '.type == "agent.created" and .agent == $ENV.W1 and .backend == "user"'
ok $? "the watcher sees the create"
wait_event "$TEST_TMP/all" '.type == "agent.state" and .agent == $ENV.W1 and .state == "stopped"'
ok $? "and the agent's state change (provisioned: stopped)"
# time is wall-clock Unix ms (it once was the monotonic clock): within a minute of the test's clock.
t=$(jq -r 'select(.type == "agent.created" and .agent == $ENV.W1) | .time' "$TEST_TMP/all")
now=$(date +%s%3N)
ok $([ -n "$t" ] && [ $((now - t)) -ge 0 ] && [ $((now - t)) -lt 60000 ] && echo 0 || echo 1) \
	"an event's time is Unix ms ($t, now $now)"

id=$("$FLEETCTL" --json trigger $W1 | jq -r .id)
is "$(run_wait $W1 "$id")" succeeded "a triggered run succeeds"
wait_event "$TEST_TMP/all" ".type == \"run.queued\" and .agent == \"$W1\" and .run == $id and .trigger == \"manual\""
ok $? "the watcher sees the run queued"
wait_event "$TEST_TMP/all" ".type == \"run.started\" and .run == $id"; ok $? "started"
wait_event "$TEST_TMP/all" ".type == \"run.finished\" and .run == $id and .state == \"succeeded\" and .exit_code == 0"
ok $? "and finished, with its state and exit code"
wait_event "$TEST_TMP/all" '.type == "agent.state" and .agent == $ENV.W1 and .state == "running"'
ok $? "the start for the run is a state change"
wait_event "$TEST_TMP/all" '.type == "health" and .agent == $ENV.W1 and .healthy == true'
ok $? "the health check after the run is a health event"

"$FLEETCTL" health $W1 >/dev/null; ok $? "fleetctl health"
n=$(jq -c 'select(.type == "health")' "$TEST_TMP/all" | wc -l)
ok $([ "$n" -ge 2 ] && echo 0 || echo 1) "it is seen too ($n health events)"

"$FLEETCTL" snapshot $W1 s1 >/dev/null; ok $? "take a snapshot"
wait_event "$TEST_TMP/all" '.type == "snapshot.taken" and .agent == $ENV.W1 and .snapshot == "s1"'
ok $? "the watcher sees the snapshot"
"$FLEETCTL" stop $W1 >/dev/null
"$FLEETCTL" restore $W1 s1 >/dev/null; ok $? "restore it"
wait_event "$TEST_TMP/all" '.type == "restore.finished" and .agent == $ENV.W1 and .snapshot == "s1" and .ok == true'
ok $? "the watcher sees the restore"

"$FLEETCTL" rm $W2 >/dev/null; ok $? "remove the second agent"
wait_event "$TEST_TMP/all" '.type == "agent.removed" and .agent == $ENV.W2'; ok $? "the watcher sees the remove"

# The filtered watcher saw the first agent's events and none of the other agent's.
wait_event "$TEST_TMP/f1" '.type == "restore.finished"'; ok $? "the filtered watcher sees $W1's restore"
is "$(jq -r 'select(.type != "watching") | .agent' "$TEST_TMP/f1" | sort -u)" $W1 "and only $W1's events"
wait_event "$TEST_TMP/f1" ".type == \"run.finished\" and .run == $id"; ok $? "its run among them"
seqs=$(jq -r 'select(.seq) | .seq' "$TEST_TMP/all")
is "$seqs" "$(sort -n <<<"$seqs")" "events come in order of their seq"
stop_watch "$wat1_pid"
for ((i = 0; i < 200; i++)); do [ "$("$FLEETCTL" --json status | jq -r .watchers)" = 1 ] && break; sleep 0.05; done
is "$("$FLEETCTL" --json status | jq -r .watchers)" 1 "a watcher that hangs up is gone from status's watchers"

# Readable lines without --json.
"$FLEETCTL" watch $W1 >"$TEST_TMP/text" 2>"$TEST_TMP/text.err" &
text_pid=$!; _pids+=("$text_pid")
for ((i = 0; i < 600; i++)); do grep -q watching "$TEST_TMP/text.err" && break; sleep 0.05; done
like "$(cat "$TEST_TMP/text.err")" "watching agent $W1" "fleetctl watch NAME says what it watches"
"$FLEETCTL" health $W1 >/dev/null
for ((i = 0; i < 600; i++)); do grep -q health "$TEST_TMP/text" && break; sleep 0.05; done
like "$(cat "$TEST_TMP/text")" "^[0-9-]+T[0-9:]+Z health +$W1 +healthy=true" "readable lines: time, type, agent, fields"
stop_watch "$text_pid"

# Bad input.
out=$("$FLEETCTL" watch 'bad/name' 2>&1); is $? 2 "watch with an invalid name is a usage error"
like "$out" "invalid agent name" "and says why"
out=$("$FLEETCTL" watch a b 2>&1); is $? 2 "watch with two names is a usage error"
out=$(api GET '/v1/watch?agent=..%2F..'); is "${out##* }" 400 "GET /v1/watch with a bad agent name: 400"
out=$(api GET "/v1/watch?agent=$(printf 'a%.0s' {1..300})"); is "${out##* }" 400 "a name too long: 400, not every agent"
out=$(api GET '/v1/watch?x=1'); is "${out##* }" 400 "an unknown query: 400"
out=$(api POST /v1/watch '{}'); is "${out##* }" 405 "POST /v1/watch: 405"

# --- a reader that stops reading is cut off; fleetd stays bounded and serves others ---
curl -sS -N --unix-socket "$SOCK" http://fleet/v1/watch >"$TEST_TMP/slow" 2>"$TEST_TMP/slow.err" &
slow_pid=$!; _pids+=("$slow_pid")
for ((i = 0; i < 600; i++)); do grep -q watching "$TEST_TMP/slow" && break; sleep 0.05; done
kill -STOP "$slow_pid"; ok $? "a curl watcher started, then stopped (it reads nothing more)"
rss_before=$(awk '/VmRSS/ { print $2 }' "/proc/$FLEETD_PID/status")
# Every fleetctl health is one health event of about 100 bytes: 120 are far more than
# the 4 KiB fleetd holds plus the watcher socket's bounded send buffer.
for ((i = 0; i < 120; i++)); do
	"$FLEETCTL" health $W1 >/dev/null || break
	grep -q '"type":"overflow"' "$TEST_TMP/all" && break	# (never: the fleetctl watcher reads)
done
is "$i" 120 "120 health checks done while the slow watcher sleeps"
rss_after=$(awk '/VmRSS/ { print $2 }' "/proc/$FLEETD_PID/status")
diag "fleetd VmRSS ${rss_before} kB before, ${rss_after} kB after"
ok $([ $((rss_after - rss_before)) -lt 8192 ] && echo 0 || echo 1) "fleetd's RSS grew by less than 8 MiB"
is "$("$FLEETCTL" --json status | jq -r '"\(.agents) \(.watchers)"')" "1 1" \
	"fleetctl is served meanwhile; one watcher is left (the slow one was cut off)"
n=$(jq -c 'select(.type == "health")' "$TEST_TMP/all" | wc -l)
ok $([ "$n" -ge 120 ] && echo 0 || echo 1) "the reading watcher got every event ($n health events)"
ok $(grep -q overflow "$TEST_TMP/all"; [ $? -ne 0 ] && echo 0 || echo 1) "and was not cut off"
kill -CONT "$slow_pid"
for ((i = 0; i < 1200; i++)); do kill -0 "$slow_pid" 2>/dev/null || break; sleep 0.05; done
wait "$slow_pid"; is $? 0 "the slow curl ends once it reads again: fleetd ended its stream"
last=$(tail -1 "$TEST_TMP/slow")
is "$(jq -r .type <<<"$last")" overflow "its last line is the overflow marker"
like "$(jq -r .error <<<"$last")" "read too slowly" "which says why"
n=$(grep -c '"type":"health"' "$TEST_TMP/slow")
ok $([ "$n" -lt 120 ] && echo 0 || echo 1) "it got only part of the events ($n) before the cut"
like "$(cat "$STATE/fleetd.log" 2>/dev/null)" "watcher read too slowly" "fleetd logs the cut"

# fleetd stopping ends fleetctl watch with exit 1 and a message (its agent removed first:
# the cleanup removes agents through fleetd).
"$FLEETCTL" rm --force $W1 >/dev/null; ok $? "remove the agent"
stop_fleetd; ok $? "fleetd stops"
wait "$all_pid"; is $? 1 "fleetctl watch exits 1 when fleetd goes"
like "$(cat "$TEST_TMP/all.err")" "broke off|ended the watch" "and says so"
done_testing
