#!/bin/sh
# triage-bot: an incident-triage bot for fleet, run once per DataDog alert.
#
# fleet runs this as the agent's command ('sh ~/bot.sh') for each webhook
# delivery; the run's stdin is the event as one JSON object whose "body" is
# the alert DataDog posted (docs/runs.md, "What the command gets"). It
#   1. reads the alert's id, title, transition, priority and host;
#   2. counts it in its memory store and appends it to the incident history
#      (agentd memory get/put: atomic, survives runs and restarts);
#   3. decides what to do: page for a triggered P1/P2, else post to a channel;
#   4. does it: with TRIAGE_API_URL set, a SLACK_TOKEN secret and network,
#      it POSTs a Slack chat.postMessage; otherwise it writes the action it
#      would have taken into its memory and its run log.
#
# Settings (environment; put them in the agent's --command, e.g.
# 'TRIAGE_API_URL=https://slack.com/api sh ~/bot.sh'):
#   TRIAGE_API_URL   base URL of a Slack-compatible API (unset: never posts)
#   TRIAGE_CHANNEL   channel for ordinary alerts (default #ops-alerts)
#   TRIAGE_PAGE_CHANNEL  channel for pages (default #oncall)
#   SLACK_TOKEN      the bot token: a fleet secret ('fleetctl secret set'), never in --command
#   AGENTD           agentd to use (default: agentd on PATH)
# Tools: POSIX sh, sed, date, and curl or busybox wget; jq when it exists
# (see field() for what happens without it).
set -u

AGENTD=${AGENTD:-agentd}
CHANNEL=${TRIAGE_CHANNEL:-#ops-alerts}
PAGE_CHANNEL=${TRIAGE_PAGE_CHANNEL:-#oncall}

EVENT=$(cat)

# field NAME: the alert's top-level field NAME (empty if missing).
# With jq: parsed properly. Without jq (fleet's VM guest image has busybox
# only): the first '"NAME": "VALUE"' (or a number) in the event's body, as
# it appears escaped in the event's JSON. Limits of that fallback: a value
# holding an escaped character (a quote, a backslash, \n) is not read (the
# field is empty), and a nested field of the same name that comes first
# would be taken; DataDog's flat payload (README.md) has no nesting.
field() {
	if command -v jq >/dev/null 2>&1; then
		printf '%s' "$EVENT" | jq -r --arg k "$1" \
			'(.body // "{}") | fromjson | .[$k] // empty | if type == "string" or type == "number" then . else empty end' 2>/dev/null
	else
		printf '%s' "$EVENT" | tr '\n' ' ' |
			grep -o "\\\\\"$1\\\\\": *\\(\\\\\"[^\\\\\"]*\\\\\"\\|[0-9][0-9]*\\)" |
			head -n 1 | sed 's/^[^:]*: *//; s/^\\"//; s/\\"$//'
	fi
}

# json_str TEXT: TEXT as a JSON string (quotes included).
json_str() {
	if command -v jq >/dev/null 2>&1; then
		jq -n --arg s "$1" '$s'
	else
		printf '"%s"' "$(printf '%s' "$1" | tr -d '\000-\037' | sed 's/\\/\\\\/g; s/"/\\"/g')"
	fi
}

# memory_append KEY LINE: the store's value KEY with LINE added at the end.
memory_append() {
	{ "$AGENTD" memory get "$1" 2>/dev/null; printf '%s\n' "$2"; } | "$AGENTD" memory put "$1"
}

id=$(field id)
title=$(field title)
transition=$(field transition)
priority=$(field priority)
host=$(field host)
[ -n "$title" ] || title="(untitled alert)"
[ -n "$id" ] || id=${FLEET_DELIVERY_ID:-unknown}
now=$(date -u +%Y-%m-%dT%H:%M:%SZ)

# Memory: how many alerts so far, and one history line per alert.
count=$("$AGENTD" memory get incident-count 2>/dev/null || echo 0)
case $count in '' | *[!0-9]*) count=0 ;; esac
count=$((count + 1))
printf '%s\n' "$count" | "$AGENTD" memory put incident-count || { echo "triage-bot: cannot write memory" >&2; exit 1; }
memory_append incidents "$now alert=$id priority=${priority:-none} transition=${transition:-none} host=${host:-none} title=$title" ||
	{ echo "triage-bot: cannot write memory" >&2; exit 1; }
echo "triage-bot: alert $id (${priority:-no priority}, ${transition:-no transition}) on ${host:-no host}: $title"
echo "triage-bot: incident #$count in memory"

# The decision.
case "$transition:$priority" in
Recovered:* | recovered:*) channel=$CHANNEL text="Resolved: $title" ;;
*:P1 | *:P2 | *:p1 | *:p2) channel=$PAGE_CHANNEL text="PAGE on-call ($priority): $title on ${host:-?} (incident #$count)" ;;
*) channel=$CHANNEL text="Alert (${priority:-no priority}): $title on ${host:-?}" ;;
esac
action="post to Slack channel $channel: $text"

# post URL BODY: POST the JSON BODY to URL with the token; the answer in
# $answer. Returns 0 when the API took it, 2 when there is no network (the
# name does not resolve or nothing answers: a run without --network nat),
# 1 when the API refused it or did not answer in time.
post() {
	if command -v curl >/dev/null 2>&1; then
		answer=$(curl -sS --connect-timeout 10 --max-time 30 --fail -X POST \
			-H "Authorization: Bearer $SLACK_TOKEN" -H 'Content-Type: application/json; charset=utf-8' \
			--data-binary "$2" "$1" 2>&1)
		case $? in 0) return 0 ;; 6 | 7) return 2 ;; *) return 1 ;; esac
	fi
	# busybox wget (the VM guest's) checks no TLS certificate: the token
	# would go to whoever answers, so it is sent only over plain http (a
	# proxy on the guest's side, a test's stand-in).
	case $1 in
	http://*) ;;
	*) answer="no curl here, and busybox wget checks no TLS certificate: the token is not sent"; return 1 ;;
	esac
	# timeout(1), not wget's -T: busybox 1.35's wget crashes with -T.
	answer=$(timeout 30 wget -q -O - --header "Authorization: Bearer $SLACK_TOKEN" \
		--header 'Content-Type: application/json; charset=utf-8' --post-data "$2" "$1" 2>&1) && return 0
	case $answer in *"bad address"* | *unreachable* | *"Connection refused"*) return 2 ;; esac
	return 1
}

# The action: the real API when it can, else the record of what it would do.
if [ -z "${TRIAGE_API_URL:-}" ] || [ -z "${SLACK_TOKEN:-}" ]; then
	why="no TRIAGE_API_URL"
	[ -n "${SLACK_TOKEN:-}" ] || why="no SLACK_TOKEN secret"
	echo "triage-bot: would $action ($why)"
	printf '%s\n' "$now would: $action ($why)" | "$AGENTD" memory put last-action
	exit 0
fi
url=${TRIAGE_API_URL%/}/chat.postMessage
body="{\"channel\": $(json_str "$channel"), \"text\": $(json_str "$text")}"
# The request as sent. fleet replaces the token's value in run logs with
# [secret SLACK_TOKEN]; nothing else of it is ever printed or stored.
echo "triage-bot: POST $url (Authorization: Bearer $SLACK_TOKEN)"
post "$url" "$body"
case $? in
0)
	echo "triage-bot: done: $action"
	printf '%s\n' "$now done: $action" | "$AGENTD" memory put last-action
	;;
2)
	echo "triage-bot: no network ($answer): would $action"
	printf '%s\n' "$now would: $action (no network)" | "$AGENTD" memory put last-action
	;;
*)
	echo "triage-bot: the API call failed: $answer"
	printf '%s\n' "$now failed: $action" | "$AGENTD" memory put last-action
	exit 1
	;;
esac
