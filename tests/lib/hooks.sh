# Helpers for the webhook listener's end-to-end tests (#11): a fleetd whose
# listener binds 127.0.0.1:0 (its port learnt from `fleetctl --json status`),
# deliveries signed with the openssl CLI (independently of fleet's own
# verifiers), posted with curl, and the store's row counts read with sqlite3.
# Source tests/lib/common.sh first, then call user_fleetd_setup.

command -v jq >/dev/null || skip_all "jq not installed"
command -v openssl >/dev/null || skip_all "openssl not installed"
command -v sqlite3 >/dev/null || skip_all "sqlite3 not installed"
command -v curl >/dev/null || skip_all "curl not installed"

# Each test file's listener runs as a hooks_user of its own, HOOKS_USER
# (set before sourcing this), which fleetd creates; removed at exit if this
# test made it. Every listener seen that is still there at exit (fleetd died
# without taking it along) is killed by its pid, if that pid is still a
# fleet-hooksd.
: "${HOOKS_USER:?set HOOKS_USER, the hooks_user of this test file, first}"
_hooks_pids=()
_hooks_kill_left() {
	local p
	for p in "${_hooks_pids[@]}"; do
		[ "$(cat "/proc/$p/comm" 2>/dev/null)" = fleet-hooksd ] && kill -9 "$p"
	done
	return 0
}
_hooks_user_made=
getent passwd "$HOOKS_USER" >/dev/null || _hooks_user_made=1
# Registered before user_fleetd_setup's handlers, so it runs after them (the
# agents are gone): fleetd (ours, by pid) first, so it restarts no listener.
_hooks_cleanup() {
	[ "$(cat "/proc/${FLEETD_PID:-none}/comm" 2>/dev/null)" = fleetd ] && kill -9 "$FLEETD_PID"
	_hooks_kill_left
	if [ -n "$_hooks_user_made" ]; then
		for _ in $(seq 50); do pgrep -u "$HOOKS_USER" >/dev/null || break; sleep 0.1; done
		userdel "$HOOKS_USER" 2>/dev/null
		groupdel "$HOOKS_USER" 2>/dev/null
	fi
	return 0
}
on_exit _hooks_cleanup

# hooks_json FIELD: a member of GET /v1/status's "hooks" object ("null" if none).
hooks_json() { "$FLEETCTL" --json status 2>/dev/null | jq -r ".hooks.$1"; }

# hooks_wait_up [NOT_PID]: until the listener is up (and, given NOT_PID, is
# another process than that one: a restarted child), at most 60 s. Sets
# HOOKS_ADDR (ADDR:PORT actually bound), HOOKS_URL and HOOKS_PID.
hooks_wait_up() {
	local not=${1:-} deadline=$((SECONDS + 60)) st
	while :; do
		st=$("$FLEETCTL" --json status 2>/dev/null | jq -r '.hooks | "\(.state) \(.pid) \(.listen)"')
		set -- $st
		if [ "${1:-}" = up ] && [ "${2:-null}" != null ] && [ "$2" != "$not" ]; then
			HOOKS_PID=$2 HOOKS_ADDR=$3 HOOKS_URL=http://$3
			_hooks_pids+=("$2")
			return 0
		fi
		[ $SECONDS -ge $deadline ] && { diag "listener not up after 60 s: '$st'"; return 1; }
		sleep 0.1
	done
}

# hooks_fleetd_start [ARGS...]: user_fleetd_start with the listener on a free
# loopback port, then hooks_wait_up.
hooks_fleetd_start() {
	user_fleetd_start --hooks-listen 127.0.0.1:0 --hooks-user "$HOOKS_USER" "$@" || return 1
	hooks_wait_up
}

# db_q SQL: one query on fleetd's database (read-only; fleetd may be writing).
db_q() { sqlite3 -readonly -cmd ".timeout 10000" "$STATE/fleet.db" "$1"; }
# db_counts: "EVENTS RUNS DELIVERIES", the rows a refused delivery must not add.
db_counts() { db_q "SELECT (SELECT count(*) FROM events) || ' ' || (SELECT count(*) FROM runs) || ' ' ||
	(SELECT count(*) FROM hook_deliveries)"; }
# runs_of ROUTE DELIVERY_ID: "AGENT:RUN ..." of the runs that delivery queued, by agent name.
runs_of() {
	db_q "SELECT a.name || ':' || r.id FROM runs r JOIN events e ON r.event_id = e.id
		JOIN agents a ON a.id = r.agent_id WHERE e.route = '$1' AND e.delivery_id = '$2'
		ORDER BY a.name, r.id" | tr '\n' ' ' | sed 's/ $//'
}

# Signatures, over the bytes of FILE, by openssl alone.
# hmac_hex KEY FILE / hmac_b64 KEY FILE: HMAC-SHA256 with a text key.
hmac_hex() { openssl dgst -sha256 -hmac "$1" <"$2" | sed 's/^.*= //'; }
hmac_b64() { openssl dgst -sha256 -hmac "$1" -binary <"$2" | base64 -w0; }
# hmac_sha1_b64 KEY FILE: Twilio's HMAC-SHA1, base64.
hmac_sha1_b64() { openssl dgst -sha1 -hmac "$1" -binary <"$2" | base64 -w0; }
# hmac_hexkey_b64 HEXKEY FILE: HMAC-SHA256 with a binary key (Standard Webhooks' decoded whsec_).
hmac_hexkey_b64() { openssl dgst -sha256 -mac HMAC -macopt "hexkey:$1" -binary <"$2" | base64 -w0; }

# post URL_PATH FILE [CURL_ARGS...]: POST FILE's bytes to the listener; prints
# the status (000 when no answer came); the answer's body is in $HOOK_RESP.
# Content-Type: $HOOK_CT, default application/json (curl would send a second
# one given with -H, not replace it).
HOOK_RESP=$TEST_TMP/hook-resp
post() {
	local path=$1 file=$2; shift 2
	curl -s -o "$HOOK_RESP" -w '%{http_code}' --max-time 60 -X POST -H "Content-Type: ${HOOK_CT:-application/json}" \
		--data-binary "@$file" "$@" "$HOOKS_URL$path"
}

# github_post ROUTE KEY EVENT DELIVERY FILE [CURL_ARGS...]
github_post() {
	local route=$1 key=$2 ev=$3 id=$4 file=$5; shift 5
	post "/hooks/$route" "$file" -H "X-GitHub-Event: $ev" -H "X-GitHub-Delivery: $id" \
		-H "X-Hub-Signature-256: sha256=$(hmac_hex "$key" "$file")" "$@"
}
# slack_post ROUTE KEY TIMESTAMP FILE [CURL_ARGS...]: signed over v0:TIMESTAMP:BODY
slack_post() {
	local route=$1 key=$2 ts=$3 file=$4 base; shift 4
	base=$TEST_TMP/slack-base.$BASHPID
	{ printf 'v0:%s:' "$ts"; cat "$file"; } >"$base"
	post "/hooks/$route" "$file" -H "X-Slack-Request-Timestamp: $ts" \
		-H "X-Slack-Signature: v0=$(hmac_hex "$key" "$base")" "$@"
}
# standard_post ROUTE WHSEC ID TIMESTAMP FILE [CURL_ARGS...]: signed over ID.TIMESTAMP.BODY
# with the base64-decoded key of WHSEC (whsec_BASE64).
standard_post() {
	local route=$1 whsec=$2 id=$3 ts=$4 file=$5 base hexkey; shift 5
	base=$TEST_TMP/std-base.$BASHPID
	{ printf '%s.%s.' "$id" "$ts"; cat "$file"; } >"$base"
	hexkey=$(printf '%s' "${whsec#whsec_}" | base64 -d | od -An -v -tx1 | tr -d ' \n')
	post "/hooks/$route" "$file" -H "webhook-id: $id" -H "webhook-timestamp: $ts" \
		-H "webhook-signature: v1,$(hmac_hexkey_b64 "$hexkey" "$base")" "$@"
}
# twilio_form FILE NAME=VALUE...: writes the form body (values percent-encoded)
# to FILE and prints the string Twilio signs after the URL: every name and
# value, decoded, sorted by name.
twilio_form() {
	local file=$1 p body= signed=; shift
	for p in "$@"; do
		body+=${body:+&}${p%%=*}=$(jq -rn --arg v "${p#*=}" '$v | @uri')
	done
	printf '%s' "$body" >"$file"
	while IFS= read -r p; do signed+=${p%%=*}${p#*=}; done < <(printf '%s\n' "$@" | LC_ALL=C sort -t= -k1,1 -k2)
	printf '%s' "$signed"
}
# twilio_post ROUTE KEY PUBLIC_URL FILE SIGNED_PARAMS [CURL_ARGS...]: HMAC-SHA1 of
# PUBLIC_URL/hooks/ROUTE followed by SIGNED_PARAMS (from twilio_form), base64.
twilio_post() {
	local route=$1 key=$2 url=$3 file=$4 params=$5 base; shift 5
	base=$TEST_TMP/twilio-base.$BASHPID
	printf '%s/hooks/%s%s' "$url" "$route" "$params" >"$base"
	HOOK_CT=application/x-www-form-urlencoded post "/hooks/$route" "$file" \
		-H "X-Twilio-Signature: $(hmac_sha1_b64 "$key" "$base")" "$@"
}

# run_state AGENT RUN
run_state() { "$FLEETCTL" --json runs "$1" "$2" 2>/dev/null | jq -r .state; }
