#!/bin/bash
# The webhook listener end to end, once (#11): fleetd with --hooks-listen
# 127.0.0.1:0 runs fleet-hooksd; a signed GitHub delivery (the signature
# computed by openssl, not by fleet) is answered 202 and its run gets the
# event on stdin; fleetctl status shows the listener up; kill -9 of the
# listener makes fleetd restart it (restarts 1) and it serves again; and
# after kill -9 of fleetd while its listener is stopped (so it still holds
# the port), a new fleetd binds the same port at once and serves.
# The larger end-to-end tests (every source, refusals, crashes under load,
# privilege separation) are hooks-*.sh of their own.
. "$FLEET_SRCDIR/tests/lib/common.sh"
U=hkfs$(test_run_id)	# agent names of this run (two checkouts at once never collide)

[ "$(id -u)" = 0 ] || skip_all "needs root (user agents and the listener's user are Unix users)"
for t in jq curl openssl; do command -v $t >/dev/null || skip_all "$t not installed"; done

# The listener's user: of this run alone (another worktree may run this test at the same time).
HUSER=hkfs-$$
# Registered first, so it runs last: the listener's user goes once every process of it is gone.
_hkfs_cleanup() {
	local p i
	# fleetd stops its listener (SIGTERM, then SIGKILL); then any listener of this test left over.
	[ -n "$FLEETD_PID" ] && kill -TERM "$FLEETD_PID" 2>/dev/null
	for ((i = 0; i < 100; i++)); do kill -0 "$FLEETD_PID" 2>/dev/null || break; sleep 0.1; done
	for p in $LISTENER_PIDS; do
		[ "$(awk '/^Uid:/ { print $2 }' "/proc/$p/status" 2>/dev/null)" = "$(id -u "$HUSER" 2>/dev/null)" ] &&
			kill -9 "$p" 2>/dev/null
	done
	# The agent's user, if fleetd could not remove it: only users whose home lies in this run's state dir.
	case $STATE in /var/lib/fleet-hkfs.?*)
		for p in $(getent passwd | awk -F: -v d="$STATE/" 'index($6, d) == 1 { print $1 }'); do
			ps -o pid= -u "$p" 2>/dev/null | xargs -r kill -9 2>/dev/null
			userdel "$p" 2>/dev/null
			groupdel "$p" 2>/dev/null
		done ;;
	esac
	sleep 0.5
	userdel "$HUSER" 2>/dev/null
	groupdel "$HUSER" 2>/dev/null
}
on_exit _hkfs_cleanup
LISTENER_PIDS=

user_fleetd_setup hkfs
hooks() { "$FLEETCTL" --json status | jq -r ".hooks.$1"; }
# wait_up [NOT_PID]: until the listener is up (with another pid than NOT_PID); at most 60 s
wait_up() {
	local deadline=$((SECONDS + 60))
	until [ "$(hooks state)" = up ] && [ "$(hooks pid)" != "${1:-x}" ]; do
		[ $SECONDS -ge $deadline ] && return 1
		sleep 0.2
	done
	LISTENER_PIDS="$LISTENER_PIDS $(hooks pid)"
}
SECRET=hkfs-github-secret-0123456789
# deliver ID [BODY]: a signed GitHub pull_request delivery; prints "BODY STATUS"
deliver() {
	local body=${2:-'{"action":"opened","number":7}'} sig
	sig=$(printf '%s' "$body" | openssl dgst -sha256 -hmac "$SECRET" | sed 's/^.*= *//')
	curl -sS -X POST -H 'Content-Type: application/json' -H 'X-GitHub-Event: pull_request' \
		-H "X-GitHub-Delivery: $1" -H "X-Hub-Signature-256: sha256=$sig" --data-binary "$body" \
		-w ' %{http_code}' "http://127.0.0.1:$PORT/hooks/${ROUTE:-hkfs-gh}"
}
# wait_done ID: until run ID of $U-a is over (at most 60 s)
wait_done() {
	local deadline=$((SECONDS + 60))
	until [[ "$("$FLEETCTL" --json runs $U-a "$1" | jq -r .state)" =~ ^(succeeded|failed|timed-out|cancelled|interrupted)$ ]]; do
		[ $SECONDS -ge $deadline ] && return 1
		sleep 0.2
	done
}

user_fleetd_start --hooks-listen 127.0.0.1:0 --hooks-user "$HUSER"; ok $? "fleetd starts with a listener on 127.0.0.1:0"
wait_up; ok $? "the listener comes up"
listen=$(hooks listen)
like "$listen" '^127\.0\.0\.1:[0-9]+$' "status says the address it bound: $listen"
PORT=${listen##*:}
ok "$([ "$PORT" != 0 ] && echo 0 || echo 1)" "a port was chosen"

"$FLEETCTL" create $U-a --backend user --command 'cat' >/dev/null; ok $? "create agent $U-a"
out=$(printf '%s\n' "$SECRET" | "$FLEETCTL" hook add $U-a --source github --route hkfs-gh --events pull_request)
ok $? "subscribe it to a github route"
# No hooks_public_url: the URL given to senders is where the listener listens (not the default port 8470).
like "$out" "url: http://127\.0\.0\.1:$PORT/hooks/hkfs-gh" "and hook add prints the listener's own address as its URL"

# Twilio signs the URL it was given: with no public URL set, that address's (a delivery signed over it is taken).
TW_KEY=hkfs-twilio-auth-token-01234
printf '%s' "$TW_KEY" | "$FLEETCTL" hook add $U-a --source twilio --route hkfs-tw >/dev/null
ok $? "subscribe it to a twilio route with no public URL"
tw_sig=$(printf '%s' "http://127.0.0.1:$PORT/hooks/hkfs-twBodyhiMessageSidSMhkfs1" |
	openssl dgst -sha1 -hmac "$TW_KEY" -binary | base64)
tw=$(curl -sS -o /dev/null -w '%{http_code}' -H "X-Twilio-Signature: $tw_sig" \
	--data-binary 'MessageSid=SMhkfs1&Body=hi' "http://127.0.0.1:$PORT/hooks/hkfs-tw")
is "$tw" 202 "a twilio delivery signed over the listener's own URL is accepted"
"$FLEETCTL" hook rm $U-a hkfs-tw >/dev/null; ok $? "and its route removed"
# A watcher (fleetctl watch, GET /v1/watch) sees the delivery and the run it causes.
"$FLEETCTL" --json watch >"$TEST_TMP/watch" 2>/dev/null &
watch_pid=$!; _pids+=("$watch_pid")
for ((i = 0; i < 600; i++)); do grep -q '"watching"' "$TEST_TMP/watch" && break; sleep 0.05; done

out=$(deliver hkfs-1)
is "${out##* }" 202 "a signed delivery is accepted (202)"
is "$(jq -c . <<<"${out% *}")" '{"status":"accepted","delivery":"hkfs-1","runs":1}' "with one run queued"
run=$("$FLEETCTL" --json events --route hkfs-gh | jq -r '.[0].runs[0]')
like "$run" '^[0-9]+$' "fleetctl events names the run"
wait_done "$run"; ok $? "the run ends"
is "$("$FLEETCTL" --json runs $U-a "$run" | jq -r .state)" succeeded "and succeeds"
log=$("$FLEETCTL" logs $U-a "$run")
is "$(jq -r '.source + " " + .route + " " + .delivery_id + " " + .type' <<<"$log")" \
	"github hkfs-gh hkfs-1 pull_request.opened" "its stdin is the event: source, route, delivery id, type"
is "$(jq -r .body <<<"$log")" '{"action":"opened","number":7}' "and the body, byte for byte"
for ((i = 0; i < 600; i++)); do grep -q "\"run.finished\".*\"run\":$run," "$TEST_TMP/watch" && break; sleep 0.05; done
is "$(jq -r 'select(.type == "delivery") | "\(.route) \(.delivery) \(.event_type) \(.outcome) \(.runs)"' "$TEST_TMP/watch")" \
	"hkfs-gh hkfs-1 pull_request.opened queued 1" "fleetctl watch shows the delivery"
# A webhook-queued run is said queued like a manual one (it once went from delivery straight to started).
is "$(jq -r "select(.run == $run) | .type" "$TEST_TMP/watch" | tr '\n' ' ')" "run.queued run.started run.finished " \
	"and its run queued, starting and finishing"
is "$(jq -r "select(.type == \"run.queued\" and .run == $run) | \"\(.agent) \(.trigger)\"" "$TEST_TMP/watch")" \
	"$U-a github" "run.queued names its agent, and the route's source as trigger"
is "$(jq -r 'select(.type == "delivery" or .type == "run.queued") | .type' "$TEST_TMP/watch" | tr '\n' ' ')" \
	"delivery run.queued " "the delivery comes before the run it queued"
kill "$watch_pid"; wait "$watch_pid" 2>/dev/null
like "$("$FLEETCTL" status)" "webhooks: up on 127\.0\.0\.1:$PORT \(pid [0-9]+\), 2 accepted" \
	"fleetctl status shows the listener up"

out=$(deliver hkfs-1)
is "${out##* }" 200 "a redelivery is answered 200"
is "$(jq -r .status <<<"${out% *}")" duplicate "as a duplicate"

# --- route changes and SIGHUP reach the running listener ---
tables() { grep -c "webhooks: sent the listener its table of" "$STATE/fleetd.log"; }
# wait_tables N: until fleetd has sent its Nth table (at most 30 s)
wait_tables() {
	local deadline=$((SECONDS + 30))
	until [ "$(tables)" -ge "$1" ]; do [ $SECONDS -ge $deadline ] && return 1; sleep 0.2; done
}
n=$(tables)
out=$("$FLEETCTL" hook add $U-a --source github --route hkfs-gh2 --generate </dev/null)
ok $? "a second route, made while the listener runs"
SECRET2=$(sed -n 's/^secret (shown once; give it to the sender): //p' <<<"$out")
wait_tables $((n + 1)); ok $? "fleetd sends the listener its table again"
like "$(tail -50 "$STATE/fleetd.log")" "its table of 2 route\(s\)" "with both routes"
out=$(SECRET=$SECRET2 ROUTE=hkfs-gh2 deliver hkfs-9)
is "${out##* }" 202 "the listener serves the new route"
kill -HUP "$FLEETD_PID"
wait_tables $((n + 2)); ok $? "and fleetd sends it again at SIGHUP (its limits may have changed)"

# --- kill -9 of the listener: fleetd restarts it ---
old=$(hooks pid)
kill -9 "$old"; ok $? "kill -9 the listener (pid $old)"
wait_up "$old"; ok $? "fleetd restarts it"
is "$(hooks restarts)" 1 "status counts the restart"
is "$(hooks listen)" "$listen" "on the same address"
out=$(deliver hkfs-2)
is "${out##* }" 202 "and it serves again"

# --- kill -9 of fleetd while its listener still holds the port ---
lp=$(hooks pid)
kill -STOP "$lp"; ok $? "stop the listener (pid $lp): it cannot notice fleetd going and exit"
kill -9 "$FLEETD_PID"; ok $? "kill -9 fleetd"
while kill -0 "$FLEETD_PID" 2>/dev/null; do sleep 0.1; done
user_fleetd_start --hooks-listen "127.0.0.1:$PORT" --hooks-user "$HUSER"
ok $? "a new fleetd starts on the same port at once"
wait_up "$lp"; ok $? "with a listener of its own"
out=$(deliver hkfs-3)
is "${out##* }" 202 "which serves"
like "$(cat "$STATE/fleetd.log")" "listener of a previous fleetd \(pid $lp\) still holds the port; ending it" \
	"the old listener was ended, as the log says"
st=$(awk '/^State:/ { print $2 }' "/proc/$lp/status" 2>/dev/null)
ok "$([ -z "$st" ] || [ "$st" = Z ] && echo 0 || echo 1)" "the old listener is gone"

"$FLEETCTL" rm --force $U-a >/dev/null; ok $? "remove the agent"
stop_fleetd; ok $? "fleetd stops"
done_testing
