#!/bin/bash
# GET /metrics (docs/metrics.md), end to end with one fleetd: a user agent
# with a webhook route, a signed delivery (202) and a forged one (401), a
# run, a snapshot, a restore and a health check; then the exposition on the
# control socket (curl) and on metrics_listen (127.0.0.1:0) passes
# `promtool check metrics` and says what happened; a real Prometheus server
# on loopback scrapes metrics_listen and answers fleet_agents through its
# query API. A non-loopback metrics_listen is refused without
# metrics_allow_remote.
. "$FLEET_SRCDIR/tests/lib/common.sh"
U=mtr$(test_run_id)	# agent names of this run (two checkouts at once never collide)

[ "$(id -u)" = 0 ] || skip_all "needs root (user agents and the listener's user are Unix users)"
for t in jq curl openssl promtool prometheus python3; do command -v $t >/dev/null || skip_all "$t not installed"; done

HUSER=mtr-$$
PROM_PID=
_mtr_cleanup() {
	local i
	if [ -n "$PROM_PID" ]; then
		kill -TERM "$PROM_PID" 2>/dev/null
		for ((i = 0; i < 100; i++)); do kill -0 "$PROM_PID" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$PROM_PID" 2>/dev/null
	fi
	[ -n "$FLEETD_PID" ] && kill -TERM "$FLEETD_PID" 2>/dev/null
	for ((i = 0; i < 100; i++)); do kill -0 "$FLEETD_PID" 2>/dev/null || break; sleep 0.1; done
	userdel "$HUSER" 2>/dev/null
	groupdel "$HUSER" 2>/dev/null
}
on_exit _mtr_cleanup

user_fleetd_setup mtr
user_fleetd_start --hooks-listen 127.0.0.1:0 --hooks-user "$HUSER" --metrics-listen 127.0.0.1:0
ok $? "fleetd starts with metrics_listen 127.0.0.1:0"
maddr=$("$FLEETCTL" --json status | jq -r .metrics_listen)
like "$maddr" '^127\.0\.0\.1:[1-9][0-9]*$' "status says where the metrics are served: $maddr"
like "$("$FLEETCTL" status)" "metrics:  GET /metrics on the socket and on $maddr" "fleetctl status says so too"
until [ "$("$FLEETCTL" --json status | jq -r .hooks.state)" = up ] || [ $SECONDS -ge 60 ]; do sleep 0.2; done
HPORT=$("$FLEETCTL" --json status | jq -r .hooks.listen); HPORT=${HPORT##*:}

# --- some work to count ---
"$FLEETCTL" create $U-a --backend user --command 'cat >/dev/null; echo done' >/dev/null; ok $? "create agent $U-a"
"$FLEETCTL" start $U-a >/dev/null; ok $? "start it"
SECRET=mtr-github-secret-0123456789
printf '%s\n' "$SECRET" | "$FLEETCTL" hook add $U-a --source github --route mtr-gh --events pull_request >/dev/null
ok $? "subscribe it to a github route"
deliver() {	# deliver ID SECRET: prints the status
	local body='{"action":"opened","number":7}' sig
	sig=$(printf '%s' "$body" | openssl dgst -sha256 -hmac "$2" | sed 's/^.*= *//')
	curl -sS -o /dev/null -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
		-H 'X-GitHub-Event: pull_request' -H "X-GitHub-Delivery: $1" -H "X-Hub-Signature-256: sha256=$sig" \
		--data-binary "$body" "http://127.0.0.1:$HPORT/hooks/mtr-gh"
}
is "$(deliver mtr-1 "$SECRET")" 202 "a signed delivery is accepted"
is "$(deliver mtr-2 not-the-secret-at-all-0123)" 401 "a forged one is refused 401"
# The listener reports its refusals once a second: wait for fleetd to have this one (at most 30 s).
deadline=$((SECONDS + 30))
until [ "$("$FLEETCTL" --json status | jq .hooks.refused)" -ge 1 ] || [ $SECONDS -ge $deadline ]; do sleep 0.2; done
run=$("$FLEETCTL" --json events --route mtr-gh | jq -r '.[0].runs[0]')
is "$(run_wait $U-a "$run")" succeeded "the delivery's run succeeds"
"$FLEETCTL" snapshot $U-a s1 >/dev/null; ok $? "take a snapshot"
"$FLEETCTL" restore $U-a s1 >/dev/null; ok $? "restore it"
"$FLEETCTL" health $U-a >/dev/null; ok $? "a health check"

# --- the exposition ---
scrape() { curl -sS --unix-socket "$SOCK" -w '\n%{http_code} %{content_type}' http://fleet/metrics; }
out=$(scrape)
like "$(tail -1 <<<"$out")" '^200 text/plain; version=0\.0\.4' "GET /metrics on the control socket: 200, text format 0.0.4"
sed '$d' <<<"$out" >"$TEST_TMP/metrics.txt"
promtool check metrics <"$TEST_TMP/metrics.txt" >"$TEST_TMP/promtool.out" 2>&1; rc=$?
ok $rc "promtool check metrics passes on it"
[ $rc = 0 ] || sed 's/^/#   /' "$TEST_TMP/promtool.out"
m() { awk -v k="$1 " 'index($0, k) == 1 { print $NF }' "$TEST_TMP/metrics.txt"; }	# m SERIES: its value
is "$(m 'fleet_agents{backend="user",state="running"}')" 1 "fleet_agents: one user agent running"
is "$(m 'fleet_agents{backend="vm",state="running"}')" 0 "and none of the VM backend (zeros are there too)"
is "$(m "fleet_runs_total{agent=\"$U-a\",outcome=\"succeeded\"}")" 1 "fleet_runs_total counts the run"
is "$(m "fleet_run_duration_seconds_count{agent=\"$U-a\",outcome=\"succeeded\"}")" 1 "its duration is observed"
is "$(m "fleet_run_duration_seconds_bucket{agent=\"$U-a\",outcome=\"succeeded\",le=\"+Inf\"}")" 1 "in the +Inf bucket"
is "$(m 'fleet_webhook_deliveries_total{route="mtr-gh",source="github",answer="202"}')" 1 \
	"the delivery by route, source and answer"
is "$(m 'fleet_webhook_signature_failures_total{source="github"}')" 1 "the forged one as a github signature failure"
is "$(m 'fleet_webhook_refusals_total{status="401"}')" 1 "and a refusal with status 401"
is "$(m "fleet_run_queue_depth{agent=\"$U-a\"}")" 0 "its queue is empty"
is "$(m 'fleet_snapshot_duration_seconds_count{backend="user",outcome="ok"}')" 1 "the snapshot is observed"
is "$(m 'fleet_restore_duration_seconds_count{backend="user",outcome="ok"}')" 1 "the restore"
like "$(m 'fleet_health_check_duration_seconds_count{backend="user",outcome="healthy"}')" '^[1-9][0-9]*$' \
	"and health checks (the snapshot's and the one by hand)"
mem=$(m "fleet_agent_memory_bytes{agent=\"$U-a\",backend=\"user\"}")
like "$mem" '^[1-9][0-9]*$' "the running user agent's memory, from its cgroup: $mem bytes"
like "$(m fleet_process_resident_memory_bytes)" '^[1-9][0-9]*$' "fleetd's resident memory"
like "$(m fleet_process_open_fds)" '^[1-9][0-9]*$' "its open descriptors"
like "$(m fleet_event_loop_lag_seconds)" '^[0-9.]+$' "its event loop's lag"
ok "$(grep -Eq 'delivery="|run_id=|id="' "$TEST_TMP/metrics.txt" && echo 1 || echo 0)" "no delivery or run ids as labels"

# The same over TCP, and nothing else there.
tcp=$(curl -sS -w '\n%{http_code}' "http://$maddr/metrics")
is "$(tail -1 <<<"$tcp")" 200 "GET /metrics on metrics_listen: 200"
sed '$d' <<<"$tcp" | promtool check metrics >/dev/null 2>&1; ok $? "promtool check metrics passes on it too"
is "$(curl -sS -o /dev/null -w '%{http_code}' "http://$maddr/v1/status")" 404 "the control API is not served there"
is "$(curl -sS -o /dev/null -w '%{http_code}' -X POST "http://$maddr/metrics")" 405 "nor POST"

# --- a real Prometheus scrapes it ---
PPORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mkdir -p "$TEST_TMP/prom/data"
cat >"$TEST_TMP/prom/prometheus.yml" <<CONF
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: fleet
    static_configs:
      - targets: ['$maddr']
CONF
promtool check config "$TEST_TMP/prom/prometheus.yml" >/dev/null 2>&1; ok $? "promtool accepts the scrape config"
prometheus --config.file="$TEST_TMP/prom/prometheus.yml" --storage.tsdb.path="$TEST_TMP/prom/data" \
	--web.listen-address="127.0.0.1:$PPORT" >"$TEST_TMP/prom/log" 2>&1 &
PROM_PID=$!; _pids+=("$PROM_PID")
q='fleet_agents{backend="user",state="running"}'
deadline=$((SECONDS + 120)); val=
until [ "$val" = 1 ] || [ $SECONDS -ge $deadline ]; do
	sleep 0.5
	val=$(curl -sS -G --data-urlencode "query=$q" "http://127.0.0.1:$PPORT/api/v1/query" 2>/dev/null |
		jq -r '.data.result[0].value[1] // empty' 2>/dev/null)
done
is "$val" 1 "Prometheus scraped fleet: its query API answers $q = 1"
up=$(curl -sS -G --data-urlencode 'query=up{job="fleet"}' "http://127.0.0.1:$PPORT/api/v1/query" | jq -r '.data.result[0].value[1]')
is "$up" 1 "and counts the target up"
[ "$val" = 1 ] || tail -20 "$TEST_TMP/prom/log" | sed 's/^/#   /'
kill -TERM "$PROM_PID"; wait "$PROM_PID" 2>/dev/null; PROM_PID=

"$FLEETCTL" rm --force $U-a >/dev/null; ok $? "remove the agent"
stop_fleetd; ok $? "fleetd stops"

# --- metrics_listen off loopback is refused unless allowed ---
"$FLEETD" --state-dir "$STATE" --socket "$SOCK" --config "$TEST_TMP/none.conf" --hooks-listen none \
	--metrics-listen 0.0.0.0:0 2>"$TEST_TMP/remote.err"
is "$?" 1 "fleetd does not start with metrics_listen 0.0.0.0:0"
like "$(cat "$TEST_TMP/remote.err")" "not a loopback address.*metrics_allow_remote = yes" "and says why"
done_testing
