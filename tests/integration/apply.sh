#!/bin/bash
# fleetctl apply and export (docs/apply.md) with user agents and a real
# fleetd: a fleet file creates agents with their settings, secrets (from a
# file and from the environment), schedules, snapshot policies and a webhook
# route with subscribers; a second apply says "no changes" and changes
# nothing (audit log, updated_at); --dry-run prints the plan and changes
# nothing; an edited field changes only that field; a field taken out of the
# file goes back to its default (the plan says so), and an agent created
# with every default applies as no changes; a schedule's payload goes in and
# comes back byte for byte (curl GET of the schedule); --prune removes only with
# the flag; export -> wipe -> apply round-trips; bad files (unknown key, wrong
# type, bad YAML, duplicate agent) are refused with FILE:LINE:COLUMN, and a
# missing from_env before anything changes; a change that cannot be made in
# place is refused; a value fleetd refuses stops the apply there. The
# secret compare and subscription PATCH endpoints, with curl.
. "$FLEET_SRCDIR/tests/lib/common.sh"
R=$(test_run_id) T=ap${R}-triage RV=ap${R}-review X=ap${R}-extra UP=AP${R^^}	# agent names of this run (two checkouts at once never collide) (UP: in export's FLEET_SECRET_ names)

[ "$(id -u)" = 0 ] || skip_all "needs root (user agents are Unix users)"
command -v jq >/dev/null || skip_all "jq not installed"

user_fleetd_setup apply
user_fleetd_start; ok $? "fleetd starts"
audit_count() { "$FLEETCTL" --json audit --limit 10000 | jq length; }
agent_json() { "$FLEETCTL" --json show "$1"; }

D=$TEST_TMP/fleet
mkdir -p "$D"
printf 'token-from-a-file-0123456789\n' > "$D/review.token"
export APPLY_TRIAGE_KEY="key-from-the-env-0123456789"
export APPLY_HOOK_SECRET="route-secret-0123456789abcdef"
cat > "$D/fleet.yaml" <<EOF
version: 1
agents:
  $T:
    backend: user
    command: echo triage
    health_interval_s: 0
    snapshot_policy: before-run
    snapshot_keep: 3
    run_timeout_s: 600
    max_queued: 10
    autostart: true
    boot_priority: 7
    secrets:
      API_KEY: {from_env: APPLY_TRIAGE_KEY}
    schedules:
      - cron: "30 9 * * 1-5"
        tz: UTC
        catch_up: skip
      - cron: "@daily"
        payload: "{\"digest\": true,\n \"note\": \"naïve 'quotes'\"}\n"
  $RV:
    backend: user
    command: "echo review"
    health_interval_s: 0
    snapshot_schedule: "0 * * * *"
    memory_quota_mib: 32
    secrets:
      GH_TOKEN: {from_file: review.token, trim_newline: true}
hooks:
  ap-github:
    source: github
    secret: {from_env: APPLY_HOOK_SECRET}
    subscribers:
      - agent: $T
      - agent: $RV
        events: [pull_request.opened, push]
EOF

# --- errors first: nothing may change ---
n0=$(audit_count)
out=$("$FLEETCTL" apply 2>&1); is $? 2 "apply without FILE is a usage error"
like "$out" "apply needs exactly one FILE" "and says so"
"$FLEETCTL" apply a.yaml b.yaml >/dev/null 2>&1; is $? 2 "two files: a usage error"
"$FLEETCTL" apply --force "$D/fleet.yaml" >/dev/null 2>&1; is $? 2 "an unknown option: a usage error"
"$FLEETCTL" export extra >/dev/null 2>&1; is $? 2 "export takes no arguments"
like "$("$FLEETCTL" apply --help)" "^Usage: fleetctl .*apply FILE \[--dry-run\] \[--prune\]" "apply --help"
like "$("$FLEETCTL" help)" "^  export " "help lists export"
out=$("$FLEETCTL" apply "$D/missing.yaml" 2>&1); is $? 1 "a missing file fails"
like "$out" "cannot open $D/missing.yaml: No such file" "and says so"
bad() {	# bad NAME WANT-PATTERN DESCRIPTION  (the file is on stdin)
	cat > "$D/$1.yaml"
	out=$("$FLEETCTL" apply "$D/$1.yaml" 2>&1); is $? 1 "$3: apply fails"
	like "$out" "$2" "$3: $(printf '%s' "$2" | sed 's/\\//g')"
}
bad unknown "^$D/unknown.yaml:4:5: unknown key 'comand' in agent 'ap-x'" "an unknown key" <<'EOF'
agents:
  ap-x:
    backend: user
    comand: echo
EOF
bad type "^$D/type.yaml:4:23: memory_quota_mib must be an integer, not 'lots'" "a wrong type" <<'EOF'
agents:
  ap-x:
    backend: user
    memory_quota_mib: lots
EOF
bad quoted "^$D/quoted.yaml:3:20: auto_rollback must be true or false, not a quoted string" "a quoted boolean" <<'EOF'
agents:
  ap-x:
    auto_rollback: "true"
EOF
bad yaml "^$D/yaml.yaml:4:12: mapping values are not allowed" "bad YAML" <<'EOF'
agents:
  ap-x:
   backend: user
    command: [unclosed
EOF
bad dup "^$D/dup.yaml:4:3: duplicate agent name 'ap-x' \(first at line 2\)" "a duplicate agent name" <<'EOF'
agents:
  ap-x:
    backend: user
  ap-x:
    backend: user
EOF
bad value "^$D/value.yaml:5:14: secret 'TOKEN' must be a reference" "a secret value in the file" <<'EOF'
agents:
  ap-x:
    backend: user
    secrets:
      TOKEN: hunter2hunter2hunter2
EOF
bad noenv "^$D/noenv.yaml:6:21: secret 'K': the environment variable 'APPLY_NOT_SET' is not set" \
	"a missing from_env" <<'EOF'
agents:
  ap-x:
    backend: user
    command: echo x
    secrets:
      K: {from_env: APPLY_NOT_SET}
EOF
bad enum "^$D/enum.yaml:3:14: backend is vm or user, not 'docker'" "an unknown backend" <<'EOF'
agents:
  ap-x:
    backend: docker
EOF
bad top "^$D/top.yaml:1:1: unknown key 'agent' in the file" "an unknown top-level key" <<'EOF'
agent:
  ap-x: {}
EOF
is "$("$FLEETCTL" --json list | jq length)" 0 "no bad file made an agent"
is "$(audit_count)" "$n0" "and the audit log has no new record"

# --- dry run: the plan, field by field; nothing changes ---
out=$("$FLEETCTL" apply --dry-run "$D/fleet.yaml"); ok $? "apply --dry-run"
like "$out" "^\+ agent $T" "the plan creates $T"
like "$out" "    snapshot_keep: 3" "field by field"
like "$out" "\+ secret $RV/GH_TOKEN \(28 bytes\)" "a secret with its size (one newline trimmed)"
like "$out" "\\+ schedule $T \\{\"cron\":\"30 9 \\* \\* 1-5\",\"tz\":\"UTC\",\"catch_up\":\"skip\"\\}" "a schedule"
like "$out" "\+ route ap-github \(source github" "the route"
like "$out" "\+ subscriber ap-github/$RV events: \[\"pull_request.opened\",\"push\"\]" "its subscribers"
like "$out" "changes planned; nothing changed \(--dry-run\)$" "and says nothing changed"
is "$("$FLEETCTL" --json list | jq length)" 0 "dry run: no agent"
is "$(audit_count)" "$n0" "dry run: no audit record"

# --- apply ---
out=$("$FLEETCTL" apply "$D/fleet.yaml"); ok $? "apply creates the fleet"
like "$out" "^applied [0-9]+ changes$" "and counts the changes"
t=$(agent_json $T)
is "$(jq -r '[.backend, .command, .snapshots.policy, .snapshots.keep, .runs.timeout_s, .runs.max_queued, .health.interval_s] | join(" ")' <<<"$t")" \
	"user echo triage before-run 3 600 10 0" "$T has its settings"
is "$(jq -c .boot <<<"$t")" '{"autostart":true,"priority":7}' "and its autostart and boot priority"
r=$(agent_json $RV)
is "$(jq -r '[.snapshots.policy, .snapshots.schedule, .memory.quota_mib] | join(" ")' <<<"$r")" \
	"cron 0 * * * * 32" "$RV has its snapshot policy and quota"
is "$("$FLEETCTL" --json secret ls $T | jq -r '.[] | .key + "=" + (.size|tostring)')" "API_KEY=27" "$T's secret"
is "$("$FLEETCTL" exec $RV --no-stdin --secrets -- sh -c 'printf %s "$GH_TOKEN"')" \
	"token-from-a-file-0123456789" "$RV's secret, from the file, trimmed"
is "$("$FLEETCTL" --json schedule ls $T | jq -r '[.[] | .cron + "/" + (.tz // "host") + "/" + .catch_up] | sort | join(" ")')" \
	"30 9 * * 1-5/UTC/skip @daily/host/once" "$T's schedules"
is "$("$FLEETCTL" --json hook ls | jq -r '.[] | .route + " " + .source + " " + ([.subscribers[] | .agent + ":" + ((.events // ["*"]) | join(","))] | sort | join(" "))')" \
	"ap-github github $RV:pull_request.opened,push $T:*" "the route and its subscriptions"

# A schedule's payload is in the file (inline, a YAML string): fleetd has it byte for byte.
PAYLOAD=$(printf '{"digest": true,\n "note": "na\xc3\xafve '"'"'quotes'"'"'"}\n'; echo x); PAYLOAD=${PAYLOAD%x}
sid=$("$FLEETCTL" --json schedule ls $T | jq -r '.[] | select(.cron == "@daily") | .id')
out=$(api GET "/v1/agents/$T/schedules/$sid")
is "${out##* }" 200 "curl: GET one schedule answers 200"
is "$(jq -j .payload <<<"${out% *}"; echo x)" "${PAYLOAD}x" "with the payload the file gave, byte for byte"
is "$(jq -r .payload_bytes <<<"${out% *}")" "$(printf %s "$PAYLOAD" | wc -c)" "and its size"
out=$(api GET /v1/agents/$T/schedules/999999); is "${out##* }" 404 "curl: no such schedule: 404"
out=$(api GET /v1/agents/$T/schedules/x1); is "${out##* }" 400 "curl: a bad id: 400"

# --- a second apply changes nothing ---
n1=$(audit_count); u1=$(agent_json $T | jq -r .updated_at)
out=$("$FLEETCTL" apply "$D/fleet.yaml"); ok $? "a second apply"
is "$out" "no changes" "says no changes"
is "$(audit_count)" "$n1" "no audit record"
is "$(agent_json $T | jq -r .updated_at)" "$u1" "updated_at as it was"

# --- the compare endpoint, with curl: never a value back ---
out=$(api POST /v1/agents/$T/secrets/API_KEY/compare "$APPLY_TRIAGE_KEY")
is "${out##* }" 200 "compare: the same value answers 200"
is "$(jq -c . <<<"${out% *}")" "{\"agent\":\"$T\",\"key\":\"API_KEY\",\"same\":true}" "with same: true and no value"
out=$(api POST /v1/agents/$T/secrets/API_KEY/compare "other")
is "${out##* }" 200 "compare: another value answers 200"
is "$(jq -r .same <<<"${out% *}")" false "and same: false"
out=$(api POST /v1/agents/$T/secrets/NOPE/compare "x"); is "${out##* }" 404 "compare: no such key: 404"

# --- edit one field and a secret's value: only those change ---
sed -i 's/run_timeout_s: 600/run_timeout_s: 900/' "$D/fleet.yaml"
export APPLY_TRIAGE_KEY="a-new-key-from-the-env-0123456789"
out=$("$FLEETCTL" apply --dry-run "$D/fleet.yaml")
is "$out" "~ agent $T: run_timeout_s: 600 -> 900
~ secret $T/API_KEY (33 bytes: the value differs)
2 changes planned; nothing changed (--dry-run)" "the plan: that field and that secret"
is "$(agent_json $T | jq -r .runs.timeout_s)" 600 "dry run changed nothing"
n2=$(audit_count); ur=$(agent_json $RV | jq -r .updated_at)
"$FLEETCTL" apply "$D/fleet.yaml" >/dev/null; ok $? "apply the edit"
is "$(agent_json $T | jq -r '[.runs.timeout_s, .runs.max_queued, .snapshots.keep] | join(" ")')" "900 10 3" \
	"the field changed, the others did not"
is "$(agent_json $RV | jq -r .updated_at)" "$ur" "the other agent was not touched"
is "$("$FLEETCTL" --json audit --limit $(( $(audit_count) - n2 )) | jq -r '[.[] | .action] | sort | join(" ")')" \
	"agent.update secret.set" "two audit records: the update and the secret"
is "$("$FLEETCTL" exec $T --no-stdin --secrets -- sh -c 'printf %s "$API_KEY"')" "$APPLY_TRIAGE_KEY" \
	"the secret has its new value"

# --- a value fleetd refuses stops the apply there; applying again after the fix finishes it ---
sed 's/run_timeout_s: 900/run_timeout_s: 901/; s/snapshot_schedule: "0 \* \* \* \*"/snapshot_schedule: "61 * * * *"/' \
	"$D/fleet.yaml" > "$D/refused.yaml"
out=$("$FLEETCTL" apply "$D/refused.yaml" 2>&1); is $? 1 "a cron spec fleetd refuses fails the apply"
like "$out" "minute field: 61 is out of range" "with fleetd's words"
like "$out" "apply stopped: 1 of 2 changes made" "saying how far it got"
is "$(agent_json $T | jq -r .runs.timeout_s)" 901 "the change before it was made"
is "$(agent_json $RV | jq -r .snapshots.schedule)" "0 * * * *" "the refused one was not"
out=$("$FLEETCTL" apply "$D/fleet.yaml"); ok $? "apply the good file"
is "$out" "~ agent $T: run_timeout_s: 901 -> 900
applied 1 change" "only what differs is planned again"

# --- a setting taken out of the file goes back to its default, shown in the plan ---
grep -v -e '^    max_queued: 10$' -e '^    boot_priority: 7$' "$D/fleet.yaml" > "$D/removed.yaml"
out=$("$FLEETCTL" apply --dry-run "$D/removed.yaml")
is "$out" "~ agent $T: max_queued: 10 -> 100 (not in the file: the default)
~ agent $T: boot_priority: 7 -> 0 (not in the file: the default)
1 change planned; nothing changed (--dry-run)" "the plan resets the two removed settings"
"$FLEETCTL" apply "$D/removed.yaml" >/dev/null; ok $? "apply the file without them"
is "$(agent_json $T | jq -r '[.runs.max_queued, .boot.priority, .runs.timeout_s] | join(" ")')" "100 0 900" \
	"they are back to their defaults, the rest as it was"
is "$("$FLEETCTL" apply "$D/removed.yaml")" "no changes" "and that file applies as no changes now"
out=$("$FLEETCTL" apply "$D/fleet.yaml"); ok $? "the full file again"
is "$(agent_json $T | jq -r '[.runs.max_queued, .boot.priority] | join(" ")')" "10 7" "sets them again"
# A removed command cannot be: PATCH has no "unset" for it; a removed backend is the default (vm): re-create.
grep -v -e '^    command: echo triage$' -e '^    backend: user$' "$D/fleet.yaml" > "$D/nocommand.yaml"
out=$("$FLEETCTL" apply "$D/nocommand.yaml" 2>&1); is $? 1 "a removed command and backend are refused"
like "$out" "agent '$T': command is \"echo triage\" and the file leaves it out: it cannot be unset" \
	"the command: it cannot be unset"
like "$out" "agent '$T': backend is \"user\", the file says \"vm\" \(not in the file: the default\): it cannot be changed" \
	"the backend: its default would need a new agent"

# --- changes that cannot be made are refused whole ---
sed 's/run_timeout_s: 900/run_timeout_s: 901/; s/^    backend: user$/    backend: vm/' "$D/fleet.yaml" > "$D/cannot.yaml"
n3=$(audit_count)
out=$("$FLEETCTL" apply "$D/cannot.yaml" 2>&1); is $? 1 "a backend change is refused"
like "$out" "agent '$T': backend is \"user\", the file says \"vm\": it cannot be changed in place" "and says why"
like "$out" "problems? in the plan: nothing changed" "nothing changed"
is "$(agent_json $T | jq -r .runs.timeout_s)" 900 "not even the field that could change"
is "$(audit_count)" "$n3" "no audit record"

# --- routes: a new subscriber is added; settings and events are refused whole ---
cp "$D/fleet.yaml" "$D/hooks.yaml"
cat >> "$D/hooks.yaml" <<EOF
  ap-hmac:
    source: hmac
    secret: {from_env: APPLY_HOOK_SECRET}
    header: X-Hub-Sig
    subscribers:
      - agent: $RV
EOF
out=$("$FLEETCTL" apply "$D/hooks.yaml"); ok $? "apply a second route"
like "$out" "\+ route ap-hmac \(source hmac, secret 29 bytes\)" "the plan names it"
like "$out" '    header: "X-Hub-Sig"' "with its settings"
is "$("$FLEETCTL" --json hook ls | jq -r '.[] | select(.route == "ap-hmac") | .header + " " + .subscribers[0].agent')" \
	"X-Hub-Sig $RV" "the route has its header and subscriber"
echo "      - agent: $T" >> "$D/hooks.yaml"	# ap-hmac's list is the file's end
out=$("$FLEETCTL" apply "$D/hooks.yaml"); ok $? "apply a second subscriber"
like "$out" "^\+ subscriber ap-hmac/$T events: \(unset\)" "only the subscriber is added"
sed 's/header: X-Hub-Sig/header: X-Other/; s/events: \[pull_request.opened, push\]/events: [push]/' "$D/hooks.yaml" > "$D/hooks2.yaml"
n4=$(audit_count)
out=$("$FLEETCTL" apply "$D/hooks2.yaml" 2>&1); is $? 1 "a changed route setting is refused"
like "$out" "route 'ap-hmac': header is \"X-Hub-Sig\", the file says \"X-Other\": a route's settings are fixed" "with why"
is "$(audit_count)" "$n4" "nothing changed, not even the subscription's events"
sed -i 's/header: X-Other/header: X-Hub-Sig/' "$D/hooks2.yaml"
out=$("$FLEETCTL" apply "$D/hooks2.yaml"); ok $? "a subscription's events change"
is "$out" "~ subscriber ap-github/$RV events: [\"pull_request.opened\",\"push\"] -> [\"push\"]
applied 1 change" "in place (PATCH), nothing else"
is "$("$FLEETCTL" --json hook ls | jq -c --arg rv "$RV" '.[] | select(.route == "ap-github") | [.subscribers[] | select(.agent == $rv) | .events]')" \
	'[["push"]]' "the subscription takes only push now"
is "$("$FLEETCTL" --json audit --limit 1 | jq -r '.[0] | .action + " " + .target')" "hook.update $RV/ap-github" "audited"
out=$(api PATCH /v1/hooks/ap-github/subscribers/$RV '{"events": ""}'); is "${out##* }" 200 "curl: events \"\" takes every event"
is "$(jq -c .events <<<"${out% *}")" null "and says so"
out=$(api PATCH /v1/hooks/ap-github/subscribers/$X '{"events": "push"}'); is "${out##* }" 404 "curl: not subscribed: 404"
out=$(api PATCH /v1/hooks/ap-github/subscribers/$RV '{"events": "bad event!"}'); is "${out##* }" 400 "curl: a bad list: 400"
out=$(api PATCH /v1/hooks/ap-github/subscribers/$RV '{"filter": "push"}'); is "${out##* }" 400 "curl: an unknown field: 400"
out=$("$FLEETCTL" apply --prune "$D/fleet.yaml"); ok $? "apply --prune the file without ap-hmac"
like "$out" "- subscriber ap-hmac/$RV" "removes its subscribers"
is "$("$FLEETCTL" --json hook ls | jq -r '[.[].route] | join(" ")')" "ap-github" "and the route went with the last one"

# --- prune: only with the flag ---
"$FLEETCTL" create $X --backend user >/dev/null; ok $? "an agent the file does not name"
printf 'extra-secret-0123456789' | "$FLEETCTL" secret set $T EXTRA >/dev/null
"$FLEETCTL" schedule add $T '@hourly' >/dev/null
out=$("$FLEETCTL" apply "$D/fleet.yaml"); is "$out" "no changes" "without --prune, extra things stay: no changes"
# fleetctl's table of defaults is fleetd's: an agent made with none given, named with none, is as the file says.
sed "s/^agents:\$/agents:\\n  $X:\\n    backend: user/" "$D/fleet.yaml" > "$D/extra.yaml"
is "$("$FLEETCTL" apply --dry-run "$D/extra.yaml")" "no changes" "an agent created with every default: no changes"
is "$("$FLEETCTL" --json list | jq -r '[.[].name] | sort | join(" ")')" "$X $RV $T" "$X is there"
out=$("$FLEETCTL" apply --prune --dry-run "$D/fleet.yaml"); ok $? "apply --prune --dry-run"
like "$out" "- agent $X" "the plan removes $X"
like "$out" "- secret $T/EXTRA" "and the extra secret"
like "$out" "- schedule $T #[0-9]+ .*@hourly" "and the extra schedule"
is "$("$FLEETCTL" --json list | jq length)" 3 "dry run: still there"
"$FLEETCTL" apply --prune "$D/fleet.yaml" >/dev/null; ok $? "apply --prune"
is "$("$FLEETCTL" --json list | jq -r '[.[].name] | sort | join(" ")')" "$RV $T" "$X is gone"
is "$("$FLEETCTL" --json secret ls $T | jq -r '[.[].key] | join(" ")')" "API_KEY" "the extra secret is gone"
is "$("$FLEETCTL" --json schedule ls $T | jq length)" 2 "the extra schedule is gone"
out=$("$FLEETCTL" apply --prune "$D/fleet.yaml"); is "$out" "no changes" "a second --prune: no changes"

# --- export -> wipe -> apply round-trips ---
"$FLEETCTL" export > "$D/export1.yaml"; ok $? "export"
like "$(cat "$D/export1.yaml")" "API_KEY: \{from_env: FLEET_SECRET_${UP}_TRIAGE_API_KEY\}" "secrets as references"
like "$(cat "$D/export1.yaml")" "secret: \{from_env: FLEET_HOOK_SECRET_AP_GITHUB\}" "the route's secret too"
out=$("$FLEETCTL" apply "$D/export1.yaml" 2>&1); is $? 1 "the export with unset placeholders is refused"
like "$out" "FLEET_HOOK_SECRET_AP_GITHUB' is not set|FLEET_SECRET_${UP}_[A-Z_]+' is not set" "naming the variable"
export "FLEET_SECRET_${UP}_TRIAGE_API_KEY=$APPLY_TRIAGE_KEY" "FLEET_SECRET_${UP}_REVIEW_GH_TOKEN=token-from-a-file-0123456789"
export FLEET_HOOK_SECRET_AP_GITHUB="$APPLY_HOOK_SECRET"
is "$("$FLEETCTL" apply "$D/export1.yaml")" "no changes" "apply of the export on the same fleet: no changes"
for a in $T $RV; do "$FLEETCTL" rm --force "$a" >/dev/null; done
is "$("$FLEETCTL" --json list | jq length)" 0 "wiped: no agents"
is "$("$FLEETCTL" --json hook ls | jq length)" 0 "and no routes"
"$FLEETCTL" apply "$D/export1.yaml" >/dev/null; ok $? "apply the export on the empty fleet"
"$FLEETCTL" export > "$D/export2.yaml"; ok $? "export again"
diff -u "$D/export1.yaml" "$D/export2.yaml" >"$TEST_TMP/export.diff"; ok $? "the two exports are the same"
[ -s "$TEST_TMP/export.diff" ] && sed 's/^/# /' "$TEST_TMP/export.diff"
is "$("$FLEETCTL" exec $T --no-stdin --secrets -- sh -c 'printf %s "$API_KEY"')" "$APPLY_TRIAGE_KEY" \
	"the secret came back from its reference"
like "$(cat "$D/export1.yaml")" "payload: " "the export holds the schedule's payload"
sid=$("$FLEETCTL" --json schedule ls $T | jq -r '.[] | select(.cron == "@daily") | .id')
is "$(api GET "/v1/agents/$T/schedules/$sid" | sed '$ s/ [0-9]*$//' | jq -j .payload; echo x)" "${PAYLOAD}x" \
	"the payload came back byte for byte"
is "$("$FLEETCTL" apply "$D/fleet.yaml")" "no changes" "and the original file sees the same fleet"

done_testing
