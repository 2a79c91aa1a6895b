#!/bin/bash
# The example bots (#12), set up as examples/triage-bot/README.md and
# examples/review-bot/README.md tell an operator: two user agents, each with
# its script in its home, its own secret and its own webhook route; a
# signed DataDog alert and signed GitHub pull_request deliveries sent with
# curl; then their runs, memory, redacted logs, the review bot skipping a
# PR+commit it remembers, neither reading the other's memory or secret, and
# the real-API path: with --network nat the bots POST to a stand-in API
# (tests/lib/api-standin.py) on 198.51.100.2, inside a network namespace
# this test makes ("the outside", as in user-network.sh), which records
# what it received. The whole test runs in a fresh network and mount
# namespace: nothing leaves it.
. "$FLEET_SRCDIR/tests/lib/own-netns.sh"
. "$FLEET_SRCDIR/tests/lib/common.sh"

[ "$(id -u)" = 0 ] || skip_all "needs root (user agents are Unix users)"
own_netns_ready
for t in nft ip nsenter python3 curl; do command -v $t >/dev/null || skip_all "$t missing"; done
HOOKS_USER=exb-hooks-$$
. "$FLEET_SRCDIR/tests/lib/hooks.sh"

RID=$(test_run_id) && T=exb${RID}-triage R=exb${RID}-review	# agent names of this run (two checkouts at once never collide)
EX=$FLEET_SRCDIR/examples
rand() { head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
SLACK_TOKEN="xoxb-$(rand)" GITHUB_TOKEN="ghp_$(rand)"

# ---- the outside: 198.51.100.2 behind a veth pair, with the stand-in API ----
. "$FLEET_SRCDIR/tests/lib/outside.sh"
outside_setup || fail_all "cannot make the outside namespace"
API_LOG=$TEST_TMP/api.log
: >"$API_LOG"
nsenter --net="$OUTSIDE_NS" python3 "$FLEET_SRCDIR/tests/lib/api-standin.py" 198.51.100.2 8080 "$API_LOG" 2>"$TEST_TMP/api.err" &
_pids+=($!)
api_up=1
for ((i = 0; i < 300; i++)); do
	curl -s -m 2 -o /dev/null -X POST -d '{}' http://198.51.100.2:8080/ready && { api_up=0; break; }
	sleep 0.1
done
ok $api_up "the stand-in API answers the host on 198.51.100.2:8080 (control)" || sed 's/^/#   /' "$TEST_TMP/api.err"
: >"$API_LOG"	# forget the control's request

user_fleetd_setup exb
hooks_fleetd_start || { ok 1 "fleetd starts with its webhook listener"; done_testing; }
ok 0 "fleetd starts with its webhook listener on $HOOKS_ADDR"

# ---- as the READMEs say: create, script, secret, route ----
# The command is the READMEs' 'sh ~/bot.sh'; its `agentd` is fleetd's (the build's, though not installed
# and maybe under /tmp: the sandbox shows it at /run/fleet/bin, first on the agent's PATH).
"$FLEETCTL" create $T --backend user --network nat --egress-allow 198.51.100.2:8080 \
	--command "sh ~/bot.sh" >/dev/null
ok $? "create $T (user agent)"
"$FLEETCTL" create $R --backend user --network nat --egress-allow 198.51.100.2:8080 \
	--command "GITHUB_API_URL=http://198.51.100.2:8080 sh ~/bot.sh" >/dev/null
ok $? "create $R (user agent, its API at the stand-in)"
"$FLEETCTL" exec $T -- sh -c 'cat > ~/bot.sh' <"$EX/triage-bot/bot.sh"; ok $? "the triage script goes into $T's home by exec's stdin"
"$FLEETCTL" exec $R -- sh -c 'cat > ~/bot.sh' <"$EX/review-bot/bot.sh"; ok $? "the review script goes into $R's home"
is "$("$FLEETCTL" exec $R -- sh -c 'cat ~/bot.sh' </dev/null | cksum)" "$(cksum <"$EX/review-bot/bot.sh")" "it arrived whole"
printf '%s\n' "$SLACK_TOKEN" | "$FLEETCTL" secret set $T SLACK_TOKEN --trim-newline >/dev/null; ok $? "secret SLACK_TOKEN for $T"
printf '%s\n' "$GITHUB_TOKEN" | "$FLEETCTL" secret set $R GITHUB_TOKEN --trim-newline >/dev/null; ok $? "secret GITHUB_TOKEN for $R"
out=$("$FLEETCTL" hook add $T --source datadog --generate); ok $? "a datadog route for $T"
DD_SECRET=$(sed -n 's/^secret (shown once; give it to the sender): //p' <<<"$out")
like "$out" "url: .*/hooks/$T-datadog" "named $T-datadog, its URL printed"
out=$("$FLEETCTL" hook add $R --source github --generate \
	--events pull_request.opened,pull_request.synchronize,pull_request.reopened); ok $? "a github route for $R"
GH_SECRET=$(sed -n 's/^secret (shown once; give it to the sender): //p' <<<"$out")
[ -n "$DD_SECRET" ] && [ -n "$GH_SECRET" ]; ok $? "both secrets were shown once"

# fire_dd ID TITLE PRIORITY: a DataDog alert; prints the run it queued.
fire_dd() {
	printf '{"id": "%s", "title": "%s", "transition": "Triggered", "priority": "%s", "host": "db-1"}' \
		"$1" "$2" "$3" >"$TEST_TMP/dd.json"
	local st; st=$(post "/hooks/$T-datadog" "$TEST_TMP/dd.json" -H "X-Fleet-Secret: $DD_SECRET")
	[ "$st" = 202 ] || { diag "datadog delivery $1: HTTP $st $(cat "$HOOK_RESP")"; return 1; }
	runs_of "$T-datadog" "$1" | sed 's/^.*://'
}
# fire_pr DELIVERY ACTION SHA: a GitHub pull_request delivery for acme/widgets#7; prints the run.
fire_pr() {
	jq -n --arg a "$2" --arg s "$3" '{action: $a, number: 7,
		pull_request: {number: 7, title: "Fix the flaky test", head: {sha: $s}, base: {sha: "0000000000000000000000000000000000000000"}},
		repository: {full_name: "acme/widgets"}}' >"$TEST_TMP/pr.json"
	local st; st=$(github_post "$R-github" "$GH_SECRET" pull_request "$1" "$TEST_TMP/pr.json")
	[ "$st" = 202 ] || { diag "github delivery $1: HTTP $st $(cat "$HOOK_RESP")"; return 1; }
	runs_of "$R-github" "$1" | sed 's/^.*://'
}

# ---- the triage bot, offline (no TRIAGE_API_URL): what it would do ----
run=$(fire_dd dd-exb-1 "Disk full on db-1" P1); ok $? "a signed DataDog alert is accepted, run $run queued"
is "$(run_wait $T "$run")" succeeded "$T's run succeeded"
log=$("$FLEETCTL" logs $T "$run")
like "$log" "would post to Slack channel #oncall: PAGE on-call \(P1\): Disk full on db-1" "its log says what it would do"
is "$("$FLEETCTL" memory $T get incident-count)" 1 "its memory counts the incident"
like "$("$FLEETCTL" memory $T get incidents)" "alert=dd-exb-1 priority=P1 .*title=Disk full on db-1$" "and keeps its history"
like "$("$FLEETCTL" memory $T get last-action)" "would: post to Slack channel #oncall" "and the action it would have taken"
like "$("$FLEETCTL" memory $T ls)" "^incident-count" "fleetctl memory ls lists its keys"

# ---- the triage bot, live: the same bot with TRIAGE_API_URL ----
"$FLEETCTL" set $T --command "TRIAGE_API_URL=http://198.51.100.2:8080/api sh ~/bot.sh" >/dev/null
ok $? "set $T's command with TRIAGE_API_URL (README: going live)"
run=$(fire_dd dd-exb-2 "Latency high on web-3" P3); ok $? "a second alert, run $run"
is "$(run_wait $T "$run")" succeeded "$T's live run succeeded"
log=$("$FLEETCTL" logs $T "$run")
like "$log" "done: post to Slack channel #ops-alerts: Alert \(P3\): Latency high on web-3" "its log says it posted"
like "$log" "Authorization: Bearer \[secret SLACK_TOKEN\]" "the token it printed is redacted in the log"
case $log in *"$SLACK_TOKEN"*) ok 1 "the log holds no token value" ;; *) ok 0 "the log holds no token value" ;; esac
req=$(jq -c 'select(.path == "/api/chat.postMessage")' "$API_LOG")
is "$(jq -r .authorization <<<"$req")" "Bearer $SLACK_TOKEN" "the stand-in API got the POST with the secret as its bearer token"
is "$(jq -r '.body | fromjson | .channel + " " + .text' <<<"$req")" "#ops-alerts Alert (P3): Latency high on web-3 on db-1" \
	"and the channel and text in its JSON body"
is "$("$FLEETCTL" memory $T get incident-count)" 2 "memory counts two incidents now"

# ---- the review bot: posts, remembers, skips what it remembers ----
SHA1=59b20b8d9e1c0a7b3f4e5d6c7b8a9f0e1d2c3b4a SHA2=aa11bb22cc33dd44ee55ff6600771188990aabbc
D1=exb-$(rand)
run=$(fire_pr "$D1" opened $SHA1); ok $? "a signed pull_request.opened is accepted, run $run queued"
is "$(run_wait $R "$run")" succeeded "$R's run succeeded"
log=$("$FLEETCTL" logs $R "$run")
like "$log" "commented on acme/widgets#7" "its log says it commented"
like "$log" "Authorization: Bearer \[secret GITHUB_TOKEN\]" "the token is redacted in its log"
case $log in *"$GITHUB_TOKEN"*) ok 1 "its log holds no token value" ;; *) ok 0 "its log holds no token value" ;; esac
is "$(jq -r 'select(.path == "/repos/acme/widgets/issues/7/comments") | .authorization' "$API_LOG")" "Bearer $GITHUB_TOKEN" \
	"the stand-in got POST /repos/acme/widgets/issues/7/comments with the token"
like "$(jq -r 'select(.path == "/repos/acme/widgets/issues/7/comments") | .body | fromjson | .body' "$API_LOG")" \
	"^Automated review of 59b20b8 by fleet review-bot" "and the comment as the body's 'body'"
like "$("$FLEETCTL" memory $R get reviewed)" "^acme/widgets#7 $SHA1 [0-9TZ:-]+ commented$" "memory remembers the PR at that commit"
like "$("$FLEETCTL" memory $R ls)" "last-comment" "and the comment"

is "$(github_post "$R-github" "$GH_SECRET" pull_request "$D1" "$TEST_TMP/pr.json")" 200 \
	"the same delivery again (same delivery id) is fleet's duplicate: no run"
posts() { jq -r 'select(.path == "/repos/acme/widgets/issues/7/comments") | .path' "$API_LOG" | wc -l; }
run=$(fire_pr "exb-$(rand)" opened $SHA1); ok $? "the same body under a new delivery id, run $run"
is "$(run_wait $R "$run")" succeeded "that run succeeded"
like "$("$FLEETCTL" logs $R "$run")" "already reviewed acme/widgets#7 at $SHA1 .*skipped" "and skipped it, from memory"
is "$(posts)" 1 "the API got no second comment"
run=$(fire_pr "exb-$(rand)" synchronize $SHA2); ok $? "a synchronize with a new head commit, run $run"
is "$(run_wait $R "$run")" succeeded "that run succeeded"
is "$(posts)" 2 "and commented again"
is "$("$FLEETCTL" memory $R get reviewed | wc -l)" 2 "memory has both reviews"

# ---- without jq and curl (the VM guest's case): busybox applets only ----
# The same script, as an exec with the agent's secrets, PATH holding busybox's
# applets alone: its grep -o fields, its sed JSON string and busybox wget.
if check "busybox is installed (busybox-static: scripts/deps.sh)" -- test -x /bin/busybox; then
	SHA3=cc11bb22cc33dd44ee55ff6600771188990aabbc
	jq -n --arg s $SHA3 '{action: "opened", number: 8, pull_request: {number: 8, title: "Say \"why\" in the README",
		head: {sha: $s}}, repository: {full_name: "acme/widgets"}} | {run_id: 0, body: tojson}' >"$TEST_TMP/event.json"
	bb() {
		"$FLEETCTL" exec $R --secrets -- sh -c \
			'd=$(mktemp -d); for a in sh sed grep tr head date cat printf wget timeout; do ln -s /bin/busybox $d/$a; done
			 FLEET_EVENT_TYPE=pull_request.opened AGENTD=$(command -v agentd) GITHUB_API_URL=http://198.51.100.2:8080 \
			 PATH=$d /bin/busybox sh ~/bot.sh' <"$TEST_TMP/event.json" 2>&1
	}
	out=$(bb); ok $? "without jq or curl, the review bot runs on busybox alone"
	like "$out" "acme/widgets#8 \(opened\) at cc11bb2: \(no title\)" \
		"it reads repo, number and commit; a title with escaped quotes is not read (its documented limit)"
	like "$out" "commented on acme/widgets#8" "and posts with busybox wget"
	req=$(jq -c 'select(.path == "/repos/acme/widgets/issues/8/comments")' "$API_LOG")
	is "$(jq -r .authorization <<<"$req")" "Bearer $GITHUB_TOKEN" "the stand-in got that POST with the token"
	like "$(jq -r '.body | fromjson | .body' <<<"$req")" "^Automated review of cc11bb2" "and a JSON body jq reads"
	like "$(bb)" "already reviewed acme/widgets#8 at $SHA3" "busybox's grep finds the review in memory"
fi

# ---- neither reads the other's memory or secret ----
out=$("$FLEETCTL" exec $T -- cat "$STATE/users/$R/memory/reviewed" </dev/null 2>&1); st=$?
ok $([ $st -ne 0 ]; echo $?) "$T cannot read $R's memory: $out"
out=$("$FLEETCTL" exec $R -- cat "$STATE/users/$T/memory/incidents" </dev/null 2>&1); st=$?
ok $([ $st -ne 0 ]; echo $?) "$R cannot read $T's memory: $out"
check "(control: $R reads its own)" -- "$FLEETCTL" exec $R -- cat "$STATE/users/$R/memory/reviewed"
is "$("$FLEETCTL" exec $T --secrets -- sh -c 'echo "${GITHUB_TOKEN:-unset} ${SLACK_TOKEN:+own-set}"' </dev/null 2>&1)" "unset own-set" \
	"$T's environment has its own secret, not $R's"
is "$("$FLEETCTL" exec $R --secrets -- sh -c 'echo "${SLACK_TOKEN:-unset} ${GITHUB_TOKEN:+own-set}"' </dev/null 2>&1)" "unset own-set" \
	"$R's environment has its own secret, not $T's"
out=$("$FLEETCTL" exec $T -- cat "$STATE/fleet.db" "$STATE/secret.key" </dev/null 2>&1 >/dev/null); st=$?
ok $([ $st -ne 0 ]; echo $?) "$T cannot read fleet's database or secret key: $out"

# ---- secrets went nowhere else: the memory stores and fleetd's log ----
out=$({ "$FLEETCTL" memory $T export; "$FLEETCTL" memory $R export; cat "$STATE/fleetd.log" 2>/dev/null; } | grep -c -e "$SLACK_TOKEN" -e "$GITHUB_TOKEN")
is "$out" 0 "no token value in either memory store or fleetd's log"

"$FLEETCTL" rm --force $T >/dev/null; "$FLEETCTL" rm --force $R >/dev/null
done_testing
