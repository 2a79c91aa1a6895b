#!/bin/bash
# Webhook routes and subscriptions (#11) as an operator uses them, against a
# real fleetd with user agents: fleetctl hook add (secret on stdin, or
# --generate printed once), hook ls (never a secret: not in its output, the
# API's JSON, the audit log or fleetd's log; only in the 0600 database),
# fan-out to a second agent with an --events filter, rotate with its grace,
# rm (the route goes with its last subscriber), an agent's removal taking
# its subscriptions, bad input refused with nothing stored, and the events
# listing with its filters.
. "$FLEET_SRCDIR/tests/lib/common.sh"
U=uhr$(test_run_id)	# agent names of this run (two checkouts at once never collide)

[ "$(id -u)" = 0 ] || skip_all "needs root (user agents are Unix users)"
command -v jq >/dev/null || skip_all "jq not installed"

user_fleetd_setup uhr
user_fleetd_start --hooks-public-url https://hooks.example.test; ok $? "fleetd starts"
for a in $U-a $U-b; do
	"$FLEETCTL" create "$a" --backend user >/dev/null; ok $? "create agent $a"
done
routes() { "$FLEETCTL" --json hook ls | jq -r 'map(.route) | join(",")'; }
# no_secret WHAT TEXT SECRET...: none of the secrets appears in TEXT
no_secret() {
	local what=$1 text=$2 s found=0; shift 2
	for s in "$@"; do grep -qF -- "$s" <<<"$text" && found=1; done
	ok $found "$what holds no secret"
}

# --- add: the secret from stdin, the URL to give the sender ---
SECRET=uhr-github-secret-0123456789
out=$(printf '%s\n' "$SECRET" | "$FLEETCTL" hook add $U-a --source github); ok $? "hook add reads the secret from stdin"
like "$out" "agent '$U-a' subscribed to github route '$U-a-github' \(new\)" "it makes route AGENT-SOURCE"
like "$out" "url: https://hooks.example.test/hooks/$U-a-github" "and prints its URL from hooks_public_url"

# --- --generate: a random secret, printed once ---
out=$("$FLEETCTL" hook add $U-a --source standard --route uhr-std --generate </dev/null); ok $? "hook add --generate"
GEN=$(sed -n 's/^secret (shown once; give it to the sender): //p' <<<"$out")
like "$GEN" '^whsec_[A-Za-z0-9+/]{43}=$' "it prints a whsec_ secret for a Standard Webhooks route"
GEN_B64=${GEN#whsec_}
out2=$("$FLEETCTL" hook add $U-b --source standard --route uhr-std --generate </dev/null 2>&1)
is $? 1 "--generate for an existing route is refused"
like "$out2" "keeps its secret" "saying it keeps its secret"

# --- a secret is never shown again ---
ls_json=$("$FLEETCTL" --json hook ls); ls_text=$("$FLEETCTL" hook ls)
api_json=$(api GET /v1/hooks)
like "$ls_text" "$U-a-github +github +https://hooks.example.test/hooks/$U-a-github +$U-a" "hook ls lists the route"
no_secret "hook ls" "$ls_text" "$SECRET" "$GEN_B64"
no_secret "hook ls --json" "$ls_json" "$SECRET" "$GEN_B64"
no_secret "GET /v1/hooks" "$api_json" "$SECRET" "$GEN_B64"
no_secret "the audit log" "$("$FLEETCTL" --json audit --limit 1000)" "$SECRET" "$GEN_B64"
no_secret "fleetd's log" "$(cat "$STATE/fleetd.log")" "$SECRET" "$GEN_B64"
found=0
for f in "$STATE"/fleet.db "$STATE"/fleet.db-wal; do
	[ -e "$f" ] || continue
	grep -qaF -- "$SECRET" "$f" && found=1
	is "$(stat -c %a "$f")" 600 "$(basename "$f") is 0600"
done
is $found 1 "the secret is in the database"

# --- fan-out: a second subscriber, with an event filter ---
out=$("$FLEETCTL" hook add $U-b --source github --route $U-a-github --events push,pull_request.opened </dev/null)
ok $? "$U-b subscribes to the existing route (no secret needed)"
like "$out" "\(existing\)" "it says the route existed"
sel=".[] | select(.route == \"$U-a-github\")"
is "$("$FLEETCTL" --json hook ls | jq -r "$sel | .subscribers | map(.agent) | join(\",\")")" "$U-a,$U-b" \
	"the route has both subscribers"
is "$("$FLEETCTL" --json hook ls | jq -r "$sel | .subscribers[] | select(.agent == \"$U-b\") | .events | join(\",\")")" \
	"push,pull_request.opened" "$U-b's event filter is stored"
is "$("$FLEETCTL" --json hook ls | jq -r "$sel | .subscribers[] | select(.agent == \"$U-a\") | .events")" null \
	"$U-a takes every event"
is "$("$FLEETCTL" --json hook ls $U-b | jq -r 'map(.route) | join(",")')" "$U-a-github" "hook ls AGENT shows its routes only"
out=$(printf '%s' "$SECRET" | "$FLEETCTL" hook add $U-b --source github --route $U-a-github 2>&1)
is $? 1 "subscribing again is refused"

# --- rotate: the old secret keeps working for the grace period ---
is "$("$FLEETCTL" --json hook ls | jq -r "$sel | .rotating_until")" null "no rotation under way"
NEW=uhr-github-secret-NEW-9876543210
out=$(printf '%s' "$NEW" | "$FLEETCTL" hook rotate $U-a-github --grace 2h); ok $? "hook rotate --grace 2h"
like "$out" "the previous one works until" "it says until when the old one works"
until=$("$FLEETCTL" --json hook ls | jq -r "$sel | .rotating_until")
d=$(( $(date -d "$until" +%s) - $(date +%s) ))
ok $([ $d -gt 6900 ] && [ $d -le 7200 ] && echo 0 || echo 1) "rotating_until is 2 h after the rotation ($d s from now)"
printf '%s' "$NEW-2" | "$FLEETCTL" hook rotate $U-a-github >/dev/null; ok $? "rotate without --grace"
until=$("$FLEETCTL" --json hook ls | jq -r "$sel | .rotating_until")
d=$(( $(date -d "$until" +%s) - $(date +%s) ))
ok $([ $d -gt 86100 ] && [ $d -le 86400 ] && echo 0 || echo 1) "the default grace is 24 h ($d s from now)"
printf '%s' "$NEW-3" | "$FLEETCTL" hook rotate $U-a-github --grace 0 >/dev/null; ok $? "rotate --grace 0"
is "$("$FLEETCTL" --json hook ls | jq -r "$sel | .rotating_until")" null "no grace: the old secret stops at once"
no_secret "hook ls after rotations" "$("$FLEETCTL" --json hook ls)" "$NEW" "$SECRET"
out=$("$FLEETCTL" hook rotate $U-a-github --grace 31d </dev/null 2>&1); is $? 2 "a grace over 30 days is refused"
out=$(printf short | "$FLEETCTL" hook rotate $U-a-github 2>&1); is $? 1 "a short new secret is refused"
out=$(printf '%s' "$NEW" | "$FLEETCTL" hook rotate uhr-nosuch 2>&1); is $? 1 "rotating an unknown route fails"
like "$out" "no such route" "saying so"
out=$("$FLEETCTL" hook rotate $U-a-github --generate --grace 0 </dev/null); ok $? "hook rotate --generate"
gen=$(sed -n 's/^secret (shown once; give it to the sender): //p' <<<"$out")
like "$gen" "^[0-9a-f]{64}$" "it prints the new secret once (64 hex digits)"
is "$(sqlite3 "$STATE/fleet.db" "SELECT hex(secret) FROM hook_routes WHERE name = '$U-a-github'")" \
	"$(printf '%s' "$gen" | od -An -tx1 | tr -d ' \n' | tr a-f A-F)" "and that is the route's secret now"
no_secret "hook ls after a generated rotation" "$("$FLEETCTL" --json hook ls)" "$gen"
out=$("$FLEETCTL" hook rotate uhr-nosuch --generate </dev/null 2>&1); is $? 1 "--generate for an unknown route fails"
like "$out" "no webhook route 'uhr-nosuch'" "saying so"

# --- bad input: clear errors, nothing stored ---
before=$(routes)
out=$(printf '%s' "$SECRET" | "$FLEETCTL" hook add $U-a --source gitlab 2>&1); is $? 2 "an unknown source is refused"
like "$out" "unknown source 'gitlab'" "naming it"
out=$(printf '%s' "$SECRET" | "$FLEETCTL" hook add $U-a --source slack --route 'Bad/Name' 2>&1); is $? 2 "a bad route name is refused"
like "$out" "invalid route name 'Bad/Name'" "naming it"
out=$(printf tooshort | "$FLEETCTL" hook add $U-a --source slack --route uhr-short 2>&1); is $? 1 "a short secret is refused"
like "$out" "16 to 512 bytes" "saying how long a secret must be"
out=$(printf 'whsec_!!notbase64!!' | "$FLEETCTL" hook add $U-a --source standard --route uhr-badw 2>&1)
is $? 1 "a bad whsec_ secret is refused"
like "$out" "not valid base64" "saying why"
out=$(printf '%s' "$SECRET" | "$FLEETCTL" hook add $U-a --source standard --route uhr-nowh 2>&1)
is $? 1 "a standard secret without whsec_ is refused"
out=$("$FLEETCTL" hook add $U-a --source slack --route uhr-argv --secret=ARGV-SECRET-0123456789 </dev/null 2>&1)
is $? 2 "a secret on argv (--secret=...) is refused"
like "$out" "never taken from the command line" "saying why"
no_secret "the refusal" "$out" ARGV-SECRET-0123456789
out=$("$FLEETCTL" hook add $U-a --source slack --route uhr-argv ARGV-SECRET-0123456789 </dev/null 2>&1)
is $? 2 "a secret as an extra argument is refused"
no_secret "that refusal" "$out" ARGV-SECRET-0123456789
out=$("$FLEETCTL" hook add $U-a --source slack --route uhr-empty </dev/null 2>&1); is $? 1 "an empty stdin is refused"
like "$out" "no secret on standard input" "saying where the secret goes"
out=$(printf '%s' "$SECRET" | "$FLEETCTL" hook add uhr-nobody --source slack 2>&1); is $? 1 "an unknown agent is refused"
out=$(printf '%s' "$SECRET" | "$FLEETCTL" hook add $U-a --source github --encoding base64 --route uhr-enc 2>&1)
is $? 1 "an option of another source (--encoding for github) is refused"
out=$(api POST /v1/hooks "{\"agent\":\"$U-a\",\"source\":\"gitlab\",\"secret\":\"0123456789abcdef0123\"}")
is "${out##* }" 400 "the API refuses an unknown source too"
out=$(api POST /v1/hooks "{\"agent\":\"$U-a\",\"source\":\"slack\",\"route\":\"../x\",\"secret\":\"0123456789abcdef0123\"}")
is "${out##* }" 400 "and a bad route name"
is "$(routes)" "$before" "none of them stored a route"

# --- rm: the route goes with its last subscriber ---
out=$("$FLEETCTL" hook rm $U-a $U-a-github); ok $? "hook rm $U-a $U-a-github"
is "$out" "agent '$U-a' unsubscribed from route '$U-a-github'" "the route stays for $U-b"
out=$("$FLEETCTL" hook rm $U-a $U-a-github 2>&1); is $? 1 "removing it again fails"
like "$out" "not subscribed" "saying so"
like "$("$FLEETCTL" hook rm $U-b $U-a-github)" "last subscriber: route removed" "removing the last subscriber removes the route"
is "$(routes)" "uhr-std" "only uhr-std is left"

# --- an agent's removal removes its subscriptions (and routes it was alone on) ---
printf '%s' "$SECRET" | "$FLEETCTL" hook add $U-b --source hmac --route uhr-ci --header X-Uhr-Sig >/dev/null
ok $? "an hmac route with its own header for $U-b"
"$FLEETCTL" hook add $U-a --source hmac --route uhr-ci </dev/null >/dev/null; ok $? "$U-a subscribes too"
is "$("$FLEETCTL" --json hook ls | jq -r '.[] | select(.route == "uhr-ci") | .header + " " + .encoding')" "X-Uhr-Sig hex" \
	"the route's header and encoding are stored"
"$FLEETCTL" rm $U-a >/dev/null; ok $? "remove agent $U-a"
is "$(routes)" "uhr-ci" "uhr-std ($U-a's alone) went with it"
is "$("$FLEETCTL" --json hook ls | jq -r '.[0].subscribers | map(.agent) | join(",")')" "$U-b" "uhr-ci keeps $U-b only"

# --- events: no webhook has arrived (the listener is not built yet); a manual trigger's event is
# listed with the run it queued, and the filters are checked ---
is "$("$FLEETCTL" --json events | jq -c .)" "[]" "--json: an empty list before anything arrived"
is "$("$FLEETCTL" events)" "no events" "fleetctl events: none"
"$FLEETCTL" set $U-b --command true >/dev/null && "$FLEETCTL" trigger $U-b --wait >/dev/null 2>&1
ok $? "a manual run"
run_id=$("$FLEETCTL" --json runs $U-b | jq -r '.[0].id')
is "$("$FLEETCTL" --json events | jq -c '[.[] | {source, runs}]')" "[{\"source\":\"manual\",\"runs\":[$run_id]}]" \
	"fleetctl events: the manual trigger's event, with the run it queued"
like "$("$FLEETCTL" events | tail -1)" "^[^ ]+ +manual +- " "the table names its source"
is "$("$FLEETCTL" events --route uhr-ci --limit 5)" "no events for route 'uhr-ci'" "--route and --limit"
out=$("$FLEETCTL" events --limit 0 2>&1); is $? 2 "--limit 0 is refused"
out=$("$FLEETCTL" events --route 'Bad!' 2>&1); is $? 2 "a bad --route is refused"
out=$(api GET '/v1/events?limit=abc'); is "${out##* }" 400 "the API refuses a bad limit"
out=$(api GET '/v1/events?route=Bad!'); is "${out##* }" 400 "and a bad route"

done_testing
