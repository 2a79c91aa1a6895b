#!/bin/bash
# Wires the two example bots into a running fleetd, as their READMEs say,
# and shows what they did: the end of the README's first command
# (scripts/demo.sh). Two user agents, demo-triage (examples/triage-bot) and
# demo-review (examples/review-bot), each with its script in its home, a
# token of its own as a secret and a webhook route of its own; one signed
# webhook fired at each with curl at fleet's listener (on loopback); their
# runs, logs (the tokens redacted) and memory; and each one trying to read
# the other's memory and secret, and failing. The agents have no network
# (--network none, the default), so the bots say what they would post.
# Needs fleetctl on PATH, curl, openssl, jq; FLEET_SOCKET as fleetctl
# takes it. The bots call `agentd`: a user agent's sandbox has fleetd's own
# first on its PATH. Safe to run again: it replaces agents of these two
# names.
set -euo pipefail
cd "$(dirname "$0")/.."

T=demo-triage R=demo-review
show() { printf '$ %s\n' "$*"; "$@"; }

listen=$(fleetctl --json status | jq -r '.hooks.listen // empty')
[ -n "$listen" ] || { echo "fleetd's webhook listener is not up" >&2; exit 1; }
for a in $T $R; do
	fleetctl show "$a" >/dev/null 2>&1 && fleetctl rm --force "$a" >/dev/null
done

echo "$ fleetctl create $T --backend user --command 'TRIAGE_API_URL=https://slack.com/api sh ~/bot.sh'"
fleetctl create $T --backend user --command "TRIAGE_API_URL=https://slack.com/api sh ~/bot.sh" >/dev/null
echo "$ fleetctl create $R --backend user --command 'sh ~/bot.sh'"
fleetctl create $R --backend user --command "sh ~/bot.sh" >/dev/null
echo "$ fleetctl exec $T -- sh -c 'cat > ~/bot.sh' < examples/triage-bot/bot.sh    # and the same for $R"
fleetctl exec $T -- sh -c 'cat > ~/bot.sh' <examples/triage-bot/bot.sh
fleetctl exec $R -- sh -c 'cat > ~/bot.sh' <examples/review-bot/bot.sh
# Made-up tokens: there is no network here, and the logs must show them redacted.
echo "$ fleetctl secret set $T SLACK_TOKEN < token; fleetctl secret set $R GITHUB_TOKEN < token"
printf 'xoxb-%s' "$(openssl rand -hex 16)" | fleetctl secret set $T SLACK_TOKEN
printf 'ghp_%s' "$(openssl rand -hex 16)" | fleetctl secret set $R GITHUB_TOKEN
hookout=$(mktemp)
show fleetctl hook add $T --source datadog --generate | tee "$hookout" | grep -v "^secret"
dd_secret=$(sed -n 's/^secret (shown once; give it to the sender): //p' "$hookout")
show fleetctl hook add $R --source github --generate \
	--events pull_request.opened,pull_request.synchronize,pull_request.reopened |
	tee "$hookout" | grep -v '^secret'
gh_secret=$(sed -n 's/^secret (shown once; give it to the sender): //p' "$hookout")
rm -f "$hookout"
echo "(the two secrets were printed once, each for its own sender; they are left out here)"

echo
echo "DataDog posts an alert, its shared secret in a header:"
alert_id=dd-$(openssl rand -hex 4)
alert="{\"id\": \"$alert_id\", \"title\": \"Disk almost full\", \"transition\": \"Triggered\", \"priority\": \"P1\", \"host\": \"db-1\"}"
echo "$ curl -H 'X-Fleet-Secret: ...' --data-binary '$alert' http://$listen/hooks/$T-datadog"
curl -sS --max-time 60 -w ' (HTTP %{http_code})\n' -H 'Content-Type: application/json' \
	-H "X-Fleet-Secret: $dd_secret" --data-binary "$alert" "http://$listen/hooks/$T-datadog"
echo "GitHub posts a pull_request.opened, signed (HMAC-SHA256 of the body):"
pr='{"action": "opened", "number": 7, "pull_request": {"number": 7, "title": "Fix the flaky test", "head": {"sha": "59b20b8d9e1c0a7b3f4e5d6c7b8a9f0e1d2c3b4a"}}, "repository": {"full_name": "acme/widgets"}}'
sig=$(printf '%s' "$pr" | openssl dgst -sha256 -hmac "$gh_secret" -r | cut -d' ' -f1)
echo "$ curl -H 'X-GitHub-Event: pull_request' -H 'X-Hub-Signature-256: sha256=${sig:0:12}...' --data-binary '{\"action\": \"opened\", \"number\": 7, ...}' \\"
echo "       http://$listen/hooks/$R-github"
curl -sS --max-time 60 -w ' (HTTP %{http_code})\n' -H 'Content-Type: application/json' \
	-H 'X-GitHub-Event: pull_request' -H "X-GitHub-Delivery: $(cat /proc/sys/kernel/random/uuid)" \
	-H "X-Hub-Signature-256: sha256=$sig" --data-binary "$pr" "http://$listen/hooks/$R-github"

for a in $T $R; do
	route=$T-datadog; [ $a = $R ] && route=$R-github
	run=$(fleetctl --json events --route "$route" --limit 1 | jq -r '.[0].runs[0]')
	echo
	echo "$ fleetctl logs $a $run -f      # waits for the run to end; the token shows as [secret ...]"
	fleetctl logs $a "$run" -f
	show fleetctl runs $a
	show fleetctl memory $a ls
done
show fleetctl memory $T get incidents
show fleetctl memory $R get reviewed

echo
echo "Each bot's memory and secret are its own. From inside $T:"
echo "$ fleetctl exec $T -- sh -c 'cat ~/../$R/memory/reviewed'"
if fleetctl exec $T -- sh -c "cat ~/../$R/memory/reviewed" </dev/null; then
	echo "$T READ $R's MEMORY" >&2; exit 1
fi
echo "cross-read of $R's memory: denied"
echo "$ fleetctl exec $T --secrets -- sh -c 'echo \"GITHUB_TOKEN=\${GITHUB_TOKEN:-(not set)}\"'"
fleetctl exec $T --secrets -- sh -c 'echo "GITHUB_TOKEN=${GITHUB_TOKEN:-(not set)}"' </dev/null
echo "$ fleetctl exec $T -- sh -c 'cat ~/../../fleet.db'      # where fleet keeps every secret, encrypted"
if fleetctl exec $T -- sh -c 'cat ~/../../fleet.db >/dev/null' </dev/null; then
	echo "$T READ FLEET'S DATABASE" >&2; exit 1
fi
echo "cross-read of fleet's secrets: denied"
echo "And from inside $R:"
echo "$ fleetctl exec $R -- sh -c 'cat ~/../$T/memory/incidents'"
if fleetctl exec $R -- sh -c "cat ~/../$T/memory/incidents" </dev/null; then
	echo "$R READ $T's MEMORY" >&2; exit 1
fi
echo "cross-read of $T's memory: denied"
echo "$ fleetctl exec $R --secrets -- sh -c 'echo \"SLACK_TOKEN=\${SLACK_TOKEN:-(not set)}\"'"
fleetctl exec $R --secrets -- sh -c 'echo "SLACK_TOKEN=${SLACK_TOKEN:-(not set)}"' </dev/null
