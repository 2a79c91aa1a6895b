#!/bin/sh
# review-bot: a code-review bot for fleet, run once per GitHub pull_request
# delivery (opened, synchronize, reopened).
#
# fleet runs this as the agent's command ('sh ~/bot.sh') for each webhook
# delivery; the run's stdin is the event as one JSON object whose "body" is
# what GitHub posted, and FLEET_EVENT_TYPE is 'pull_request.ACTION'
# (docs/runs.md, "What the command gets"). It
#   1. reads the repository, the PR's number, title and head commit;
#   2. skips a PR at a commit it has already reviewed: its memory store holds
#      one line per review (agentd memory get/put: survives runs, restarts
#      and fleetd restarts; GitHub redelivers, and a PR's 'edited' or
#      'reopened' comes with a commit already seen);
#   3. reviews it (here: a checklist comment; adapt review() to your needs);
#   4. posts the comment through the GitHub API, POST
#      $GITHUB_API_URL/repos/OWNER/REPO/issues/N/comments, when it has a
#      GITHUB_TOKEN secret and network; otherwise writes the comment it
#      would have posted into its memory and its run log.
#
# Settings (environment; put them in the agent's --command):
#   GITHUB_API_URL   default https://api.github.com (GitHub Enterprise: https://HOST/api/v3)
#   GITHUB_TOKEN     a token that may comment on the repository: a fleet secret
#                    ('fleetctl secret set'), never in --command
#   AGENTD           agentd to use (default: agentd on PATH)
# Tools: POSIX sh, sed, grep, date, and curl or busybox wget; jq when it
# exists (see field() for what happens without it).
set -u

AGENTD=${AGENTD:-agentd}
API=${GITHUB_API_URL:-https://api.github.com}
API=${API%/}

EVENT=$(cat)

# field PATH: the value at jq PATH in the delivery's body (empty if missing).
# With jq: parsed properly. Without jq (fleet's VM guest image has busybox
# only): the first '"NAME": "VALUE"' (or a number) in the body, NAME being
# PATH's last name, as it appears escaped in the event's JSON. Limits of
# that fallback: a value holding an escaped character (a quote, a
# backslash, \n) is not read (the field is empty), and the first field of
# that name anywhere is taken: right for GitHub's pull_request payloads,
# where the top-level "number", the PR's "title" and its head's "sha" come
# first, but for a PR from a fork "full_name" is the fork's. Give the guest
# jq (or run the bot as a user agent, on the host's tools) for those.
field() {
	if command -v jq >/dev/null 2>&1; then
		printf '%s' "$EVENT" | jq -r "(.body // \"{}\") | fromjson | $1 // empty |
			if type == \"string\" or type == \"number\" then . else empty end" 2>/dev/null
	else
		name=${1##*.}
		printf '%s' "$EVENT" | tr '\n' ' ' |
			grep -o "\\\\\"$name\\\\\": *\\(\\\\\"[^\\\\\"]*\\\\\"\\|[0-9][0-9]*\\)" |
			head -n 1 | sed 's/^[^:]*: *//; s/^\\"//; s/\\"$//'
	fi
}

# json_str TEXT: TEXT as a JSON string (quotes included).
json_str() {
	if command -v jq >/dev/null 2>&1; then
		jq -n --arg s "$1" '$s'
	else
		printf '"%s"' "$(printf '%s' "$1" | tr -d '\000-\011\013-\037' | sed 's/\\/\\\\/g; s/"/\\"/g' |
			sed ':a; N; $!ba; s/\n/\\n/g')"
	fi
}

# memory_append KEY LINE: the store's value KEY with LINE added at the end.
memory_append() {
	{ "$AGENTD" memory get "$1" 2>/dev/null; printf '%s\n' "$2"; } | "$AGENTD" memory put "$1"
}

action=${FLEET_EVENT_TYPE#pull_request.}
case ${FLEET_EVENT_TYPE:-} in
pull_request.opened | pull_request.synchronize | pull_request.reopened) ;;
*) echo "review-bot: nothing to do for '${FLEET_EVENT_TYPE:-no event type}'"; exit 0 ;;
esac
repo=$(field .repository.full_name)
number=$(field .number)
title=$(field .pull_request.title)
sha=$(field .pull_request.head.sha)
# These name a path of the API: only what GitHub's names can be.
case $repo in */*) ;; *) repo= ;; esac
case $repo in *[!A-Za-z0-9._/-]* | */*/* | .* | */.*) repo= ;; esac
case $number in '' | *[!0-9]*) number= ;; esac
case $sha in *[!0-9a-f]*) sha= ;; esac
if [ -z "$repo" ] || [ -z "$number" ] || [ -z "$sha" ]; then
	echo "review-bot: not a pull_request delivery it can read (repository '$repo', number '$number', head '$sha')" >&2
	exit 1
fi
pr="$repo#$number"
now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
echo "review-bot: $pr ($action) at ${sha%"${sha#???????}"}: ${title:-(no title)}"

# Memory: one line per review, 'OWNER/REPO#N SHA TIME OUTCOME'.
if "$AGENTD" memory get reviewed 2>/dev/null | grep -q "^$pr $sha "; then
	echo "review-bot: already reviewed $pr at $sha (memory key 'reviewed'): skipped"
	exit 0
fi

# review: the comment for this PR. A real bot would fetch the diff
# ($API/repos/$repo/pulls/$number/files) and ask a model; this one writes
# a checklist so the path from delivery to comment is complete.
review() {
	printf 'Automated review of %s by fleet review-bot:\n' "${sha%"${sha#???????}"}"
	printf '%s\n' '- [ ] tests cover the change' '- [ ] the docs say what changed' '- [ ] no secret in the diff'
}
comment=$(review)

# post URL BODY: POST the JSON BODY to URL with the token; the answer in
# $answer. Returns 0 when the API took it, 2 when there is no network (the
# name does not resolve or nothing answers: a run without --network nat),
# 1 when the API refused it or did not answer in time.
post() {
	if command -v curl >/dev/null 2>&1; then
		answer=$(curl -sS --connect-timeout 10 --max-time 30 --fail -X POST \
			-H "Authorization: Bearer $GITHUB_TOKEN" -H 'Accept: application/vnd.github+json' \
			-H 'Content-Type: application/json' --data-binary "$2" "$1" 2>&1)
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
	answer=$(timeout 30 wget -q -O - --header "Authorization: Bearer $GITHUB_TOKEN" \
		--header 'Accept: application/vnd.github+json' --header 'Content-Type: application/json' \
		--post-data "$2" "$1" 2>&1) && return 0
	case $answer in *"bad address"* | *unreachable* | *"Connection refused"*) return 2 ;; esac
	return 1
}

url=$API/repos/$repo/issues/$number/comments
if [ -z "${GITHUB_TOKEN:-}" ]; then
	outcome="would-comment (no GITHUB_TOKEN secret)"
	echo "review-bot: would POST $url (no GITHUB_TOKEN secret):"
else
	# The request as sent. fleet replaces the token's value in run logs
	# with [secret GITHUB_TOKEN]; nothing else of it is printed or stored.
	echo "review-bot: POST $url (Authorization: Bearer $GITHUB_TOKEN)"
	post "$url" "{\"body\": $(json_str "$comment")}"
	case $? in
	0) outcome=commented; echo "review-bot: commented on $pr:" ;;
	2) outcome="would-comment (no network)"; echo "review-bot: no network ($answer): would comment on $pr:" ;;
	*)
		# Not remembered as reviewed: the next delivery tries again.
		echo "review-bot: the API call failed: $answer" >&2
		exit 1
		;;
	esac
fi
printf '%s\n' "$comment" | sed 's/^/    /'
printf '%s\n' "$comment" | "$AGENTD" memory put "last-comment" &&
	memory_append reviewed "$pr $sha $now $outcome" || { echo "review-bot: cannot write memory" >&2; exit 1; }
