#!/bin/bash
# The control API with curl: status codes, the error shape, bad input of
# every kind changes nothing, caller identity from SO_PEERCRED.
. "$FLEET_SRCDIR/tests/lib/common.sh"
R=$(test_run_id) A=api${R}-alpha SNEAKY=api${R}-sneaky	# agent names of this run (two checkouts at once never collide)
# Before any result: a skip plan after results is invalid TAP.
id nobody >/dev/null 2>&1 && command -v setpriv >/dev/null || skip_all "needs user nobody and setpriv"

start_fleetd api --max-body-bytes 2048 || { ok 1 "fleetd starts"; done_testing; }

out=$(api GET /v1/status)
is "${out##* }" 200 "GET /v1/status is 200"
is "$(printf '%s' "${out% *}" | jq -r .version)" "$("$FLEETD" --version | cut -d' ' -f2)" "status reports the version"

out=$(api POST /v1/agents "{\"name\":\"$A\",\"backend\":\"user\",\"memory_mib\":128}")
is "${out##* }" 201 "POST /v1/agents creates (201)"
is "$(printf '%s' "${out% *}" | jq -r .state)" stopped "the new user agent is provisioned and stopped"
out=$(api GET /v1/agents/$A); is "${out##* }" 200 "GET /v1/agents/$A"
# The brief view (what `fleetctl list` asks for): the table's fields, nothing else.
out=$(api GET '/v1/agents?view=brief'); is "${out##* }" 200 "GET /v1/agents?view=brief"
is "$(printf '%s' "${out% *}" | jq -c '.agents[0] | keys')" \
	'["backend","created_at","memory_mib","name","network","state","vcpus"]' "the brief view has the list's seven fields"
is "$(printf '%s' "${out% *}" | jq -c '.agents[0] | [.name, .memory_mib, .state]')" "[\"$A\",128,\"stopped\"]" \
	"with the agent's values"
out=$(api GET /v1/agents); is "$(printf '%s' "${out% *}" | jq -r '.agents[0].health.status')" unknown \
	"without a view the list has the full objects"
# The table view (what `fleetctl list` asks for): the text it prints, rendered by fleetd.
out=$(curl -sS --unix-socket "$SOCK" -D "$TEST_TMP/table.h" "http://fleet/v1/agents?view=table"); ok $? "GET /v1/agents?view=table"
like "$(cat "$TEST_TMP/table.h")" "^HTTP/1.1 200" "200"
like "$(cat "$TEST_TMP/table.h")" "Content-Type: text/plain" "as text"
like "$(printf '%s' "$out" | head -1)" "^NAME +BACKEND +STATE +MEMORY +VCPUS +NETWORK +HOST +CREATED$" "its header"
like "$out" "$A +user +stopped +128MiB +1 +none +- +[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}Z" "and the agent's row"
is "$out" "$("$FLEETCTL" list)" "exactly what fleetctl list prints"

# err_case DESCRIPTION WANT_STATUS WANT_CODE METHOD PATH [BODY]
err_case() {
	local desc=$1 want=$2 code=$3; shift 3
	local out body
	out=$(api "$@"); body=${out% *}
	is "${out##* }" "$want" "$desc: status $want"
	is "$(printf '%s' "$body" | jq -r '.code + "|" + (.error | type)' 2>/dev/null)" "$code|string" \
		"$desc: error shape with code $code"
}

err_case "unknown list view" 400 invalid GET '/v1/agents?view=everything'
err_case "unknown field" 400 unknown_field POST /v1/agents '{"name":"b","colour":"red"}'
err_case "wrong type for memory" 400 wrong_type POST /v1/agents '{"name":"b","memory_mib":"lots"}'
err_case "wrong type for name" 400 wrong_type POST /v1/agents '{"name":7}'
err_case "float for vcpus" 400 wrong_type POST /v1/agents '{"name":"b","vcpus":1.5}'
err_case "missing name" 400 missing_field POST /v1/agents '{"backend":"vm"}'
err_case "invalid JSON" 400 bad_json POST /v1/agents '{"name":'
err_case "JSON array instead of object" 400 bad_json POST /v1/agents '["name"]'
err_case "duplicate keys" 400 bad_json POST /v1/agents '{"name":"b","name":"c"}'
err_case "empty body" 400 bad_request POST /v1/agents ''
err_case "NUL in name" 400 bad_json POST /v1/agents '{"name":"ab\u0000cd"}'
err_case "upper-case name" 400 invalid_name POST /v1/agents '{"name":"Alpha"}'
err_case "path in name" 400 invalid_name POST /v1/agents '{"name":"../../etc/passwd"}'
err_case "33-character name" 400 invalid_name POST /v1/agents '{"name":"abcdefghijklmnopqrstuvwxyz0123456"}'
err_case "unknown backend" 400 invalid POST /v1/agents '{"name":"b","backend":"docker"}'
err_case "memory too small" 400 out_of_range POST /v1/agents '{"name":"b","memory_mib":1}'
err_case "memory absurd" 400 out_of_range POST /v1/agents '{"name":"b","memory_mib":99999999999}'
err_case "vcpus absurd" 400 out_of_range POST /v1/agents '{"name":"b","vcpus":4096}'
err_case "disk zero" 400 out_of_range POST /v1/agents '{"name":"b","disk_gib":0}'
err_case "empty command" 400 invalid POST /v1/agents '{"name":"b","command":""}'
err_case "duplicate agent" 409 exists POST /v1/agents "{\"name\":\"$A\",\"backend\":\"user\"}"
big=$(printf '{"name":"b","command":"%s"}' "$(head -c 3000 /dev/zero | tr '\0' x)")
err_case "body over max_body_bytes" 413 too_large POST /v1/agents "$big"
err_case "encoded ../ in path" 400 invalid_name GET '/v1/agents/..%2Fetc'
err_case "encoded NUL in path" 400 invalid_name GET '/v1/agents/ab%00cd'
err_case "upper case in path" 400 invalid_name DELETE /v1/agents/ALPHA
err_case "unknown agent" 404 not_found GET /v1/agents/ghost
err_case "unknown agent delete" 404 not_found DELETE /v1/agents/ghost
err_case "unknown path" 404 not_found GET /v1/nothing
err_case "wrong method" 405 method_not_allowed PUT /v1/agents '{}'
err_case "bad audit limit" 400 invalid GET '/v1/audit?limit=0'
err_case "exec without argv" 400 missing_field POST /v1/agents/$A/exec '{}'
err_case "exec with empty argv" 400 invalid POST /v1/agents/$A/exec '{"argv":[]}'
err_case "exec with a number in argv" 400 invalid POST /v1/agents/$A/exec '{"argv":["ls",3]}'
err_case "exec with bad stdin" 400 invalid POST /v1/agents/$A/exec '{"argv":["cat"],"stdin":"not base64!"}'
err_case "exec with a bad env name" 400 invalid POST /v1/agents/$A/exec '{"argv":["env"],"env":{"a b":"x"}}'
err_case "exec with absurd timeout" 400 out_of_range POST /v1/agents/$A/exec '{"argv":["true"],"timeout_s":-1}'
err_case "exec with an unknown field" 400 unknown_field POST /v1/agents/$A/exec '{"argv":["true"],"tty":true}'
err_case "start with a bad body" 400 wrong_type POST /v1/agents/$A/start '{"timeout_s":"x"}'
err_case "stop of an unknown agent" 404 not_found POST /v1/agents/ghost/stop
err_case "unknown verb" 404 not_found POST /v1/agents/$A/explode
err_case "GET on a verb" 405 method_not_allowed GET /v1/agents/$A/start

out=$(curl -sS --unix-socket "$SOCK" -H 'Content-Type: text/plain' -d '{"name":"b"}' -w ' %{http_code}' http://fleet/v1/agents)
is "${out##* }" 415 "a non-JSON content type is refused (415)"

# A body far over the cap is cut off by the HTTP layer, and fleetd lives on.
head -c 200000 /dev/zero | tr '\0' x > "$TEST_TMP/huge"
code=$(curl -s --unix-socket "$SOCK" -H 'Content-Type: application/json' --data-binary "@$TEST_TMP/huge" -o /dev/null -w '%{http_code}' http://fleet/v1/agents)
like "$code" "^(413|000)$" "a 200 kB body is refused (413, or the connection is closed while curl still sends)"
check "fleetd still answers after the oversized body" -- curl -sSf --unix-socket "$SOCK" http://fleet/v1/status

# Garbage on the socket does not hurt fleetd.
printf 'NOT HTTP AT ALL\r\n\r\n' | socat - "UNIX-CONNECT:$SOCK" >/dev/null 2>&1
head -c 4096 /dev/urandom | socat -t1 - "UNIX-CONNECT:$SOCK" >/dev/null 2>&1
check "fleetd still answers after garbage" -- curl -sSf --unix-socket "$SOCK" http://fleet/v1/status

# Nothing of the above changed any state.
out=$(api GET /v1/agents)
is "$(printf '%s' "${out% *}" | jq -c '[.agents[].name]')" "[\"$A\"]" "refused calls created nothing"
is "$(printf '%s' "${out% *}" | jq -r '.agents[0].memory_mib')" 128 "and changed nothing"

# Every state-changing call is audited, with uid and outcome, refused ones too.
out=$(api GET '/v1/audit?limit=1000'); body=${out% *}
is "$(printf '%s' "$body" | jq '[.entries[] | select(.action == "agent.create" and .outcome == "ok")] | length')" 1 "one successful create audited"
is "$(printf '%s' "$body" | jq '[.entries[] | select(.outcome == "refused")] | length >= 30')" true "refused calls are audited"
is "$(printf '%s' "$body" | jq -r --arg t "$A" '[.entries[] | select(.target == $t)][0].uid')" 0 "audit records uid 0 for root"
is "$(printf '%s' "$body" | jq -r '[.entries[] | select(.target == "../../etc/passwd")][0].detail')" \
	"invalid agent name: name must start with a lower-case letter (a-z)" "audit records why a call was refused"

# The socket is 0660 and the kernel keeps others out; fleetd checks again.
is "$(stat -c %a "$SOCK")" 660 "socket mode is 0660"
chmod 0755 "$TEST_TMP"
err=$(setpriv --reuid=nobody --regid=nogroup --clear-groups curl -sS --unix-socket "$SOCK" http://fleet/v1/status 2>&1)
ok $([ $? -ne 0 ] && echo 0 || echo 1) "uid nobody cannot connect to the 0660 socket"
chmod 0666 "$SOCK"	# simulate a mistake in permissions: fleetd must still refuse
out=$(setpriv --reuid=nobody --regid=nogroup --clear-groups curl -sS --unix-socket "$SOCK" -X POST \
	-H 'Content-Type: application/json' -d "{\"name\":\"$SNEAKY\",\"backend\":\"user\"}" -w ' %{http_code}' http://fleet/v1/agents)
is "${out##* }" 403 "even with a 0666 socket, fleetd refuses uid nobody (SO_PEERCRED)"
out=$(api GET /v1/agents/$SNEAKY); is "${out##* }" 404 "and nothing was created"

done_testing
