#!/bin/bash
# No acknowledged webhook delivery is lost, and none is run twice (#11): a
# burst of signed deliveries (curl, a few at a time, each one's status
# recorded) to a route with two subscribers, with kill -9 of fleetd in the
# middle, then fleetd restarted on the same state; and separately with
# kill -9 of the listener child, which fleetd restarts. After each, every
# delivery that got a 2xx has exactly one run per subscriber; one that did
# not has none, except the few in flight at the kill, which fleetd may have
# committed before its answer could go out (at most one per parallel
# sender, and then all of its runs: a delivery is stored whole or not at
# all). Sending all of them again then stores only those never stored:
# the acknowledged ones are duplicates (200) and queue nothing.
. "$FLEET_SRCDIR/tests/lib/common.sh"

[ "$(id -u)" = 0 ] || skip_all "needs root (user agents are Unix users)"
U=uhc$(test_run_id)	# agent names of this run (two checkouts at once never collide)
HOOKS_USER=$U-hooks	# this test's hooks_user: fleetd creates it
. "$FLEET_SRCDIR/tests/lib/hooks.sh"
PY=/usr/bin/python3	# the system's: pyenv shims are not for every user
[ -x "$PY" ] || PY=$(command -v python3) || skip_all "python3 not installed"

P=6		# deliveries in flight at once
N1=300		# the burst with the kill of fleetd
N2=200		# the burst with the kill of the listener

user_fleetd_setup uhc
# One run at a time: the runs (of `true`) only have to exist, not to race the test for the CPUs.
hooks_fleetd_start --max-concurrent-runs 1 --hooks-request-timeout 120; ok $? "fleetd starts with its listener"
for a in $U-a $U-b; do
	"$FLEETCTL" create "$a" --backend user --max-queued 100000 --command true >/dev/null; ok $? "create agent $a"
done
KEY=uhc-hmac-secret-0123456789abcd
printf '%s' "$KEY" | "$FLEETCTL" hook add $U-a --source hmac --route $U-h --header X-Uhc-Sig >/dev/null
ok $? "an hmac route for $U-a"
"$FLEETCTL" hook add $U-b --source hmac --route $U-h </dev/null >/dev/null; ok $? "$U-b subscribes to it too"
printf '{}' > "$TEST_TMP/empty.json"
deadline=$((SECONDS + 30))
while [ "$(post /hooks/$U-h "$TEST_TMP/empty.json")" = 404 ] && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
is "$(post /hooks/$U-h "$TEST_TMP/empty.json")" 401 "the listener has the route"

# make_set DIR FIRST LAST: signed bodies DIR/I.json, DIR/I.sig (the id is the body's SHA-256, DIR/I.id)
make_set() {
	local dir=$1 i nonce
	mkdir -p "$dir"
	nonce=$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')
	for ((i = $2; i <= $3; i++)); do
		printf '{"n":%d,"nonce":"%s","pad":"%0200d"}' "$i" "$nonce" 0 > "$dir/$i.json"
		hmac_hex "$KEY" "$dir/$i.json" > "$dir/$i.sig"
		sha256sum < "$dir/$i.json" | cut -d' ' -f1 > "$dir/$i.id"
	done
}
# send_one DIR URL I: one delivery; its status into DIR/I.st (000: no answer)
cat > "$TEST_TMP/send_one.sh" <<'EOF'
dir=$1 url=$2 i=$3
curl -s -o /dev/null -w '%{http_code}' --max-time 60 -X POST -H 'Content-Type: application/json' \
	-H "X-Uhc-Sig: $(cat "$dir/$i.sig")" --data-binary "@$dir/$i.json" "$url" > "$dir/$i.st.tmp"
mv "$dir/$i.st.tmp" "$dir/$i.st"
EOF
# burst DIR N: all N, P at a time, in the background (BURST_PID)
burst() { seq 1 "$2" | xargs -P "$P" -n 1 bash "$TEST_TMP/send_one.sh" "$1" "$HOOKS_URL/hooks/$U-h" & BURST_PID=$!; _pids+=("$BURST_PID"); }
# answered DIR: how many have their status
answered() { find "$1" -name '*.st' | wc -l; }
# wait_answered DIR N: until N have their status (at most 300 s)
wait_answered() {
	local deadline=$((SECONDS + 300))
	while [ "$(answered "$1")" -lt "$2" ]; do [ $SECONDS -ge $deadline ] && return 1; sleep 0.05; done
}
# runs_by_delivery: "DELIVERY_ID RUNS AGENTS" of every delivery stored for the
# route (a redelivery's own row, outcome duplicate, notes it and queues nothing)
runs_by_delivery() {
	db_q "SELECT e.delivery_id, count(r.id), coalesce(group_concat(DISTINCT a.name), '-')
		FROM events e LEFT JOIN runs r ON r.event_id = e.id LEFT JOIN agents a ON a.id = r.agent_id
		WHERE e.route = '$U-h' AND e.outcome IS NOT 'duplicate' GROUP BY e.id" | tr '|' ' '
}
# audit WHAT DIR N MIDBURST: the 2xx have one run per subscriber, the others none (but
# for at most P in flight, stored whole); sets UNSTORED to the indexes never stored
audit() {
	local what=$1 dir=$2 n=$3 mid=$4 i st id runs agents acked=0 other=0 bad_acked=0 partial=0 inflight=0
	declare -A stored=()
	while read -r id runs agents; do stored[$id]="$runs $agents"; done < <(runs_by_delivery)
	UNSTORED=()
	for ((i = 1; i <= n; i++)); do
		st=$(cat "$dir/$i.st" 2>/dev/null || echo none) id=$(cat "$dir/$i.id")
		case $st in
		2??)	acked=$((acked + 1))
			[ "${stored[$id]:-}" = "2 $U-a,$U-b" ] || { bad_acked=$((bad_acked + 1)); diag "$what: #$i got $st, stored: '${stored[$id]:-nothing}'"; } ;;
		*)	other=$((other + 1))
			case ${stored[$id]:-} in
			"")	UNSTORED+=("$i") ;;
			"2 $U-a,$U-b") inflight=$((inflight + 1)) ;;
			*)	partial=$((partial + 1)); diag "$what: #$i got $st, stored: '${stored[$id]}'" ;;
			esac ;;
		esac
	done
	diag "$what: $acked acknowledged, $other not ($inflight of them stored: in flight at the kill)"
	# After fleetd's kill its port is closed: the rest of the burst cannot be answered 2xx.
	# The listener's port stays (fleetd holds it): there only those in flight may fail.
	ok $([ $acked -gt 0 ] && { [ "$mid" != fleetd ] || [ $other -gt 0 ]; } && echo 0 || echo 1) \
		"$what: the kill came mid-burst ($acked 2xx, $other not)"
	is $bad_acked 0 "$what: every acknowledged delivery has exactly one run per subscriber"
	is $partial 0 "$what: no delivery is stored in part"
	ok $([ $inflight -le $P ] && echo 0 || echo 1) "$what: of the unacknowledged, only those in flight were stored ($inflight <= $P)"
	is "$(db_q "SELECT count(*) FROM hook_deliveries d JOIN hook_routes r ON r.id = d.route_id WHERE r.name = '$U-h'")" \
		"$(runs_by_delivery | wc -l)" "$what: one delivery id per stored delivery"
}
# resend WHAT DIR N: all again (P at a time); the stored ones are 200 and add no run
resend() {
	local what=$1 dir=$2 n=$3 i st id dup=0 new=0 bad=0 runs0 want_new=${#UNSTORED[@]}
	runs0=$(db_q "SELECT count(*) FROM runs")
	rm -f "$dir"/*.st
	burst "$dir" "$n"
	wait "$BURST_PID"
	for ((i = 1; i <= n; i++)); do
		st=$(cat "$dir/$i.st" 2>/dev/null || echo none)
		case $st in 200) dup=$((dup + 1)) ;; 202) new=$((new + 1)) ;; *) bad=$((bad + 1)); diag "$what: #$i: $st" ;; esac
	done
	is "$bad" 0 "$what: every one sent again is answered 200 or 202"
	is "$new" "$want_new" "$what: only those never stored are accepted as new ($want_new)"
	is "$(( $(db_q "SELECT count(*) FROM runs") - runs0 ))" $((2 * want_new)) "$what: and only they queued runs, one per subscriber"
	is "$(runs_by_delivery | awk -v want="$U-a,$U-b" '$2 != 2 || $3 != want' | wc -l)" 0 "$what: now every delivery has its two runs"
	is "$(runs_by_delivery | wc -l)" "$N_ALL" "$what: every delivery is stored once"
}

# --- kill -9 of fleetd mid-burst ---
make_set "$TEST_TMP/b1" 1 "$N1"
burst "$TEST_TMP/b1" "$N1"
wait_answered "$TEST_TMP/b1" $((N1 / 3)); ok $? "a third of the burst is answered"
old_listener=$HOOKS_PID
stop_fleetd KILL; ok $? "kill -9 fleetd mid-burst"
wait "$BURST_PID"
is "$(answered "$TEST_TMP/b1")" "$N1" "every sender of the burst has its status"
deadline=$((SECONDS + 30))
while kill -0 "$old_listener" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
kill -0 "$old_listener" 2>/dev/null; is $? 1 "the listener exits when fleetd is gone (it serves nothing on its own)"
_hooks_kill_left	# only if the check above failed: never leave it behind
hooks_fleetd_start --max-concurrent-runs 1 --hooks-request-timeout 120; ok $? "fleetd restarts on the same state, its listener up ($HOOKS_ADDR)"
audit "fleetd killed" "$TEST_TMP/b1" "$N1" fleetd
N_ALL=$N1
resend "fleetd killed" "$TEST_TMP/b1" "$N1"

# --- kill -9 of the listener child mid-burst: fleetd restarts it ---
restarts0=$(hooks_json restarts)
make_set "$TEST_TMP/b2" 1 "$N2"
# One delivery certainly in flight at the kill: half of it sent before, the rest after
# (hooks_request_timeout is 120 s here, so the deadline cannot end it first).
mkdir "$TEST_TMP/cut"
printf '{"cut":1,"nonce":"%s"}' "$RANDOM$RANDOM" > "$TEST_TMP/cut/body.json"
{ printf 'POST /hooks/%s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Uhc-Sig: %s\r\n' \
	"$U-h" "$(hmac_hex "$KEY" "$TEST_TMP/cut/body.json")"
  printf 'Content-Length: %d\r\nConnection: close\r\n\r\n' "$(stat -c %s "$TEST_TMP/cut/body.json")"
  cat "$TEST_TMP/cut/body.json"; } > "$TEST_TMP/cut/req"
"$PY" "$FLEET_SRCDIR/tests/lib/hookraw.py" partial 127.0.0.1 "${HOOKS_ADDR##*:}" "$TEST_TMP/cut/req" \
	"$TEST_TMP/cut/sent" "$TEST_TMP/cut/go" > "$TEST_TMP/cut/status" &
CUT_PID=$!; _pids+=("$CUT_PID")
deadline=$((SECONDS + 30))
while [ ! -e "$TEST_TMP/cut/sent" ] && [ $SECONDS -lt $deadline ]; do sleep 0.05; done
# Until the listener has it (its connection count, in the status within a second or so; at most 30 s).
while [ "$(hooks_json connections)" -lt 1 ] && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
is "$(hooks_json connections)" 1 "the listener holds the half-sent delivery"
burst "$TEST_TMP/b2" "$N2"
wait_answered "$TEST_TMP/b2" $((N2 / 3)); ok $? "a third of the second burst is answered"
old_listener=$HOOKS_PID
kill -9 "$old_listener"; ok $? "kill -9 the listener (pid $old_listener) mid-burst"
touch "$TEST_TMP/cut/go"
wait "$BURST_PID" "$CUT_PID"
like "$(cat "$TEST_TMP/cut/status")" '^(closed|HTTP/1\.[01] 5[0-9][0-9])' \
	"the delivery cut off by the kill got no 2xx ($(cat "$TEST_TMP/cut/status"))"
is "$(answered "$TEST_TMP/b2")" "$N2" "every sender of the second burst has its status"
hooks_wait_up "$old_listener"; ok $? "fleetd restarted the listener (pid $HOOKS_PID)"
is "$(hooks_json listen)" "$HOOKS_ADDR" "on the same address: fleetd holds the listening socket"
ok $([ "$(hooks_json restarts)" -gt "$restarts0" ] && echo 0 || echo 1) "status counts the restart"
is "$(cat "/proc/$FLEETD_PID/comm" 2>/dev/null)" fleetd "fleetd itself kept running"
audit "listener killed" "$TEST_TMP/b2" "$N2" listener
cut_id=$(sha256sum < "$TEST_TMP/cut/body.json" | cut -d' ' -f1)
is "$(db_q "SELECT count(*) FROM events WHERE route = '$U-h' AND delivery_id = '$cut_id'")" 0 "and it was not stored"
is "$(post /hooks/$U-h "$TEST_TMP/cut/body.json" -H "X-Uhc-Sig: $(hmac_hex "$KEY" "$TEST_TMP/cut/body.json")")" 202 \
	"sent again whole, it is accepted"
N_ALL=$((N1 + N2 + 1))
resend "listener killed" "$TEST_TMP/b2" "$N2"

done_testing
