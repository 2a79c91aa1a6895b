#!/bin/bash
# Hostile clients cannot take the webhook listener (or fleetd) down (#11):
# hundreds of slowloris connections (headers trickled), half-open ones
# (connect, send nothing) and endless chunked bodies, from eight loopback
# source addresses (127.0.0.2-9), while a good client (127.0.0.1) sends
# signed deliveries one after another. Bounds on behaviour, generous because
# the machine is shared (they are not speed targets):
#   - every good delivery is 202, and its p99 latency stays under GOOD_P99_MS;
#   - the listener's RSS stays under LISTENER_RSS_KB and fleetd's under
#     FLEETD_RSS_KB (read from /proc while it goes on);
#   - the listener closes hostile connections (the per-source cap, the
#     request deadline, the body cap): none is still open long after the
#     deadline, and when they stop its connection count goes back to 0.
. "$FLEET_SRCDIR/tests/lib/common.sh"

[ "$(id -u)" = 0 ] || skip_all "needs root (user agents are Unix users)"
PY=/usr/bin/python3	# the system's: pyenv shims are not for every user
[ -x "$PY" ] || PY=$(command -v python3) || skip_all "python3 not installed"
U=uhh$(test_run_id)	# agent names and hooks_user of this run (two checkouts at once never collide)
HOOKS_USER=$U-hooks	# this test's hooks_user: fleetd creates it
. "$FLEET_SRCDIR/tests/lib/hooks.sh"

GOOD=150		# good deliveries
GOOD_P99_MS=2000	# their p99 latency stays under this
LISTENER_RSS_KB=$((96 * 1024))
FLEETD_RSS_KB=$((256 * 1024))
DEADLINE=5		# hooks_request_timeout: a whole request within 5 s of its accept
HOSTILE_MIN_S=30	# the hostile clients keep at it while the good client runs, and at least this long
STALE_S=15		# a hostile connection still open this long after it was opened was not closed by the deadline
SRCS=8 SLOW=40 HALF=20 CHUNKED=1 CHUNK_KIB=128	# per source: 61 connections, 8 sources
PER_SOURCE=32		# hooks_max_per_source: the sources' extra connections are closed at once

user_fleetd_setup uhh
hooks_fleetd_start --hooks-request-timeout "$DEADLINE" --hooks-max-per-source "$PER_SOURCE" \
	--hooks-max-connections 512 --max-concurrent-runs 1
ok $? "fleetd starts with its listener ($HOOKS_ADDR), deadline ${DEADLINE}s, $PER_SOURCE per source"
"$FLEETCTL" create $U-a --backend user --max-queued 100000 --command true >/dev/null; ok $? "create agent $U-a"
KEY=uhh-hmac-secret-0123456789abcd
printf '%s' "$KEY" | "$FLEETCTL" hook add $U-a --source hmac --route uhh-h --header X-Uhh-Sig >/dev/null
ok $? "an hmac route for it (1 MiB bodies)"
printf '{}' > "$TEST_TMP/empty.json"
deadline=$((SECONDS + 30))
while [ "$(post /hooks/uhh-h "$TEST_TMP/empty.json")" = 404 ] && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
is "$(post /hooks/uhh-h "$TEST_TMP/empty.json")" 401 "the listener has the route"

# rss PID: VmRSS in kB (0 when gone)
rss() { awk '/^VmRSS:/ { print $2; f = 1 } END { if (!f) print 0 }' "/proc/$1/status" 2>/dev/null || echo 0; }
diag "before: listener RSS $(rss "$HOOKS_PID") kB, fleetd $(rss "$FLEETD_PID") kB"

# --- the hostile clients, in the background ---
STOP=$TEST_TMP/hostile.stop
hostile_t0=$SECONDS
HOOKRAW_HEADER="X-Uhh-Sig: $(printf '%064d' 0)" "$PY" "$FLEET_SRCDIR/tests/lib/hookraw.py" hostile \
	127.0.0.1 "${HOOKS_ADDR##*:}" 600 "$STOP" "$STALE_S" /hooks/uhh-h 127.0.0 "$SRCS" "$SLOW" "$HALF" "$CHUNKED" "$CHUNK_KIB" \
	> "$TEST_TMP/hostile.json" 2> "$TEST_TMP/hostile.err" &
HOSTILE_PID=$!; _pids+=("$HOSTILE_PID")
# Until they hold the listener's per-source share (at most 30 s): only then does the good client start.
deadline=$((SECONDS + 30))
while [ "$(hooks_json connections)" -lt $((SRCS * PER_SOURCE / 2)) ] && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
conns=$(hooks_json connections)
ok $([ "$conns" -ge $((SRCS * PER_SOURCE / 2)) ] && echo 0 || echo 1) "the hostile clients hold $conns connections"

# --- the good client: signed deliveries, one after another ---
max_l=0 max_f=0 n202=0 bad=0
: > "$TEST_TMP/lat"
for ((i = 1; i <= GOOD; i++)); do
	printf '{"good":%d,"nonce":"%s"}' "$i" "$RANDOM$RANDOM" > "$TEST_TMP/g.json"
	out=$(curl -s -o /dev/null -w '%{http_code} %{time_total}' --max-time 60 -X POST -H 'Content-Type: application/json' \
		-H "X-Uhh-Sig: $(hmac_hex "$KEY" "$TEST_TMP/g.json")" --data-binary "@$TEST_TMP/g.json" "$HOOKS_URL/hooks/uhh-h")
	st=${out% *}
	if [ "$st" = 202 ]; then n202=$((n202 + 1)); else bad=$((bad + 1)); diag "good delivery $i: $st"; fi
	awk -v t="${out#* }" 'BEGIN { printf "%d\n", t * 1000 }' >> "$TEST_TMP/lat"
	l=$(rss "$HOOKS_PID") f=$(rss "$FLEETD_PID")
	[ "$l" -gt "$max_l" ] && max_l=$l
	[ "$f" -gt "$max_f" ] && max_f=$f
done
# The good client again, keeping its connection: three deliveries on one, each 202 and kept,
# the connection closed once idle for the deadline (hookraw.py session reads each whole answer).
for i in 1 2 3; do
	printf '{"kept":%d,"nonce":"%s"}' "$i" "$RANDOM$RANDOM" > "$TEST_TMP/k$i.json"
	{ printf 'POST /hooks/uhh-h HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Uhh-Sig: %s\r\n' \
		"$(hmac_hex "$KEY" "$TEST_TMP/k$i.json")"
	  printf 'Content-Length: %s\r\n\r\n' "$(stat -c %s "$TEST_TMP/k$i.json")"; cat "$TEST_TMP/k$i.json"; } > "$TEST_TMP/k$i.req"
done
is "$("$PY" "$FLEET_SRCDIR/tests/lib/hookraw.py" session 127.0.0.1 "${HOOKS_ADDR##*:}" "$TEST_TMP/k1.req" \
	"$TEST_TMP/k2.req" "$TEST_TMP/k3.req" | tr '\n' ' ' | sed 's/ $//')" "202 keep 202 keep 202 keep eof" \
	"a good client keeping its connection: three deliveries on it, all 202, while the hostile clients are at it"
hostile_alive=0; kill -0 "$HOSTILE_PID" 2>/dev/null && hostile_alive=1
is "$n202" "$GOOD" "every good delivery is 202 ($bad not)"
p99=$(sort -n "$TEST_TMP/lat" | awk -v n="$GOOD" 'NR == int((n * 99 + 99) / 100) { print }')
diag "good latency ms: p50 $(sort -n "$TEST_TMP/lat" | awk -v n="$GOOD" 'NR == int((n + 1) / 2)') p99 $p99 max $(sort -n "$TEST_TMP/lat" | tail -1)"
ok $([ "$p99" -lt "$GOOD_P99_MS" ] && echo 0 || echo 1) "the good client's p99 ($p99 ms) stays under $GOOD_P99_MS ms"
is "$hostile_alive" 1 "(the hostile clients were at it all along)"
while [ $((SECONDS - hostile_t0)) -lt "$HOSTILE_MIN_S" ]; do	# their run lasts well past the deadline
	l=$(rss "$HOOKS_PID") f=$(rss "$FLEETD_PID")
	[ "$l" -gt "$max_l" ] && max_l=$l
	[ "$f" -gt "$max_f" ] && max_f=$f
	sleep 0.5
done
touch "$STOP"
wait "$HOSTILE_PID"
ok $([ "$max_l" -lt "$LISTENER_RSS_KB" ] && echo 0 || echo 1) "the listener's RSS stays under $LISTENER_RSS_KB kB (at most $max_l)"
ok $([ "$max_f" -lt "$FLEETD_RSS_KB" ] && echo 0 || echo 1) "fleetd's RSS stays under $FLEETD_RSS_KB kB (at most $max_f)"

# --- what became of the hostile connections ---
h=$(cat "$TEST_TMP/hostile.json")
diag "hostile: $h"
[ -s "$TEST_TMP/hostile.err" ] && diag "$(cat "$TEST_TMP/hostile.err")"
for k in slow half chunked; do
	is "$(jq -r ".$k.stale_open" <<<"$h")" 0 "no $k connection is still open $STALE_S s after it was opened"
	ok $([ "$(jq -r ".$k.closed_by_listener" <<<"$h")" -gt 0 ] && echo 0 || echo 1) \
		"the listener closed $k connections ($(jq -r ".$k.closed_by_listener" <<<"$h") of $(jq -r ".$k.opened" <<<"$h"))"
done
ok $([ "$(jq -r '.slow.opened + .half.opened' <<<"$h")" -gt $((SRCS * (SLOW + HALF))) ] && echo 0 || echo 1) \
	"hundreds of slowloris and half-open connections were made ($(jq -r '.slow.opened + .half.opened' <<<"$h"))"
deadline=$((SECONDS + 30))
while [ "$(hooks_json connections)" != 0 ] && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
is "$(hooks_json connections)" 0 "once they stopped, the listener holds no connection"
is "$(hooks_json pid)" "$HOOKS_PID" "the listener is the one it was (it never died)"
is "$(hooks_json restarts)" 0 "and never restarted"
ok $([ "$(hooks_json refused)" -gt 0 ] && echo 0 || echo 1) "status counts refusals ($(hooks_json refused))"
printf '{"after":1}' > "$TEST_TMP/after.json"
is "$(post /hooks/uhh-h "$TEST_TMP/after.json" -H "X-Uhh-Sig: $(hmac_hex "$KEY" "$TEST_TMP/after.json")")" 202 \
	"a good delivery afterwards is 202"
is "$(db_q "SELECT count(*) FROM events WHERE route = 'uhh-h'")" $((GOOD + 3 + 1)) "only the good deliveries were stored"

done_testing
