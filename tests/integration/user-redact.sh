#!/bin/bash
# An agent's secrets never show in what fleet keeps of its output (#12), with
# user agents and a real fleetd: a run that prints its secret plain, as
# base64 (alone and inside a longer text, wrapped), base64url, URL-encoded
# and split across two writes shows only "[secret KEY]" in `fleetctl logs`,
# `runs show` and the log file on disk; a health check that prints it too;
# fleetd's log holds no value; and no snapshot is taken while a run holding
# secrets is in the sandbox.
. "$FLEET_SRCDIR/tests/lib/common.sh"
R=$(test_run_id) A1=rdx${R}a A2=rdx${R}b A3=rdx${R}c	# agent names of this run (two checkouts at once never collide)

[ "$(id -u)" = 0 ] || skip_all "needs root (user agents are Unix users)"
command -v jq >/dev/null || skip_all "jq not installed"

user_fleetd_setup rdx
user_fleetd_start; ok $? "fleetd starts"
rand() { head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
V="p@ss w/rd+$(rand)"	# reserved characters, so its URL form differs from it
# Every form the run prints, computed here the way the run computes them.
B64=$(printf '%s' "$V" | base64 -w0)
B64URL=$(printf '%s' "$B64" | tr '+/' '-_' | tr -d '=')
URL=$(printf '%s' "$V" | od -An -tx1 -v | tr -d ' \n' | sed 's/\(..\)/%\1/g')
# Inside a longer base64 text at offset 2: the characters from the 4th on are the value's alone.
INNER=$(printf 'xy%sTAIL' "$V" | base64 -w0 | cut -c4-30)
# How many lines of stdin hold any of them (fixed strings: base64 and the value hold '+').
forms() { grep -cF -e "$V" -e "$B64" -e "$B64URL" -e "$URL" -e "$INNER" -e "${V:0:12}"; }

# The command prints the value in every form; the last one in two writes with a pause between.
cmd='printf "plain=%s\n" "$TOKEN"
printf "b64=%s\n" "$(printf %s "$TOKEN" | base64 -w0)"
printf "b64url=%s\n" "$(printf %s "$TOKEN" | base64 -w0 | tr "+/" "-_" | tr -d =)"
printf "url=%s\n" "$(printf %s "$TOKEN" | od -An -tx1 -v | tr -d " \n" | sed "s/\(..\)/%\1/g")"
printf "inner=%s\n" "$(printf "xy%sTAIL" "$TOKEN" | base64 -w0)"
printf "wrapped=%s\n" "$(printf "%s%s%s" "$TOKEN" "$TOKEN" "$TOKEN" | base64 -w 16)"
printf "split=%s" "${TOKEN%??????????}"; sleep 0.5; printf "%s\n" "${TOKEN#${TOKEN%??????????}}"
echo end'
"$FLEETCTL" create $A1 --backend user --command "$cmd" >/dev/null; ok $? "create agent $A1"
printf '%s' "$V" | "$FLEETCTL" secret set $A1 TOKEN >/dev/null; ok $? "set its TOKEN"

out=$("$FLEETCTL" trigger $A1 --wait 2>/dev/null); ok $? "a run that prints its secret in every form"
id=$("$FLEETCTL" --json runs $A1 | jq -r 'map(.id) | max')
logs=$("$FLEETCTL" logs $A1 "$id"); ok $? "fleetctl logs"
file=$(cat "$STATE/runs/$id.log")
is "$(grep -c '^end$' <<<"$logs")" 1 "positive control: the whole output is there"
for what in plain b64 b64url url split; do
	is "$(grep "^$what=" <<<"$logs")" "$what=[secret TOKEN]" "logs: the $what form is the marker"
done
like "$(grep '^inner=' <<<"$logs")" '^inner=.{2,3}\[secret TOKEN\].{3,8}$' \
	"logs: inside a longer base64 text, only the characters mixed with its neighbours stay"
wrapped=$(sed -n '/^wrapped=/,/^split=/p' <<<"$logs" | sed '$d' | tr -d '\n')
is "$(grep -o '\[secret TOKEN\]' <<<"$wrapped" | wc -l)" 3 "logs: the value 3 times in base64 wrapped at 16 columns: 3 markers"
left=$(sed 's/\[secret TOKEN\]//g; s/^wrapped=//' <<<"$wrapped")
ok $([ ${#left} -le 6 ] && echo 0 || echo 1) "and only the characters mixing two copies (and the padding) stay: '$left'"
for src in logs file out; do
	found=$(printf '%s\n' "${!src}" | forms)
	is "$found" 0 "$src: no line holds the value, its base64, base64url or URL form, or its first 12 bytes"
done
is "$file" "$logs" "the log file on disk is what fleetctl logs shows"
shown=$("$FLEETCTL" runs $A1 "$id"); ok $? "runs show"
like "$shown" 'plain=\[secret TOKEN\]' "runs show: the marker"
is "$(printf '%s\n' "$shown" | forms)" 0 "runs show: no form of the value"

# --- no snapshot while a run holds the secrets ---
"$FLEETCTL" set $A1 --command 'echo started; exec sleep 600' >/dev/null
id=$("$FLEETCTL" --json trigger $A1 | jq -r .id)
deadline=$((SECONDS + 120))
until [ "$("$FLEETCTL" --json runs $A1 "$id" | jq -r .state)" = running ] || [ $SECONDS -ge $deadline ]; do sleep 0.2; done
until pgrep -u "$(id -u fleet-$A1)" -x sleep >/dev/null || [ $SECONDS -ge $deadline ]; do sleep 0.2; done
check "the run's command is in the sandbox" -- pgrep -u "$(id -u fleet-$A1)" -x sleep
# Its line was written before the sleep: redaction holds back only what may begin a value.
is "$("$FLEETCTL" logs $A1 "$id")" "started" "logs while it runs: the line it printed is there already"
out=$("$FLEETCTL" snapshot $A1 during 2>&1); is $? 1 "a snapshot while it runs is refused"
like "$out" "run $id holds its secrets in memory" "and says why"
is "$("$FLEETCTL" --json snapshots $A1 | jq 'map(select(.name == "during")) | length')" 0 "no snapshot was made"
"$FLEETCTL" cancel $A1 "$id" >/dev/null; ok $? "cancel the run"
until [ "$("$FLEETCTL" --json runs $A1 "$id" | jq -r .state)" = cancelled ] || [ $SECONDS -ge $deadline ]; do sleep 0.2; done
"$FLEETCTL" snapshot $A1 after >/dev/null; ok $? "once it ended, the snapshot is taken"

# An agent without secrets is not held up.
"$FLEETCTL" create $A2 --backend user --command 'exec sleep 600' >/dev/null; ok $? "create agent $A2 (no secrets)"
id=$("$FLEETCTL" --json trigger $A2 | jq -r .id)
until [ "$("$FLEETCTL" --json runs $A2 "$id" | jq -r .state)" = running ] || [ $SECONDS -ge $deadline ]; do sleep 0.2; done
out=$("$FLEETCTL" snapshot $A2 during 2>&1)
grep -q "holds its secrets" <<<"$out"; is $? 1 "a snapshot of an agent without secrets is not refused for them"
"$FLEETCTL" cancel $A2 "$id" >/dev/null

# --- the health detail ---
"$FLEETCTL" set $A1 --health-cmd 'printf "%s\n" "$(cat $HOME/leak)"; exit 1' >/dev/null; ok $? "a health check that prints a file"
"$FLEETCTL" exec $A1 --no-stdin --secrets -- sh -c 'printf "%s" "$TOKEN" >"$HOME/leak"'; ok $? "exec --secrets writes the value into the home"
"$FLEETCTL" health $A1 >/dev/null 2>&1; is $? 3 "the check fails"
detail=$("$FLEETCTL" --json show $A1 | jq -r .health.detail)
is "$detail" "exit status 1: [secret TOKEN]" "its recorded detail shows the marker"
"$FLEETCTL" set $A1 --health-cmd true >/dev/null
"$FLEETCTL" exec $A1 --no-stdin -- rm -f leak

# --- fleetd's log ---
is "$(cat "$STATE/fleetd.log" "$TEST_TMP/start.err" 2>/dev/null | forms)" 0 "fleetd's log holds no form of the value"
like "$(cat "$STATE/fleetd.log")" "health check failed: exit status 1: \\[secret TOKEN\\]" \
	"positive control: it logged the check's detail, redacted"

# --- exec --secret-files: each secret a file on a tmpfs of this exec's own ---
out=$("$FLEETCTL" exec $A1 --no-stdin --secret-files -- sh -c '
	echo "dir=$FLEET_SECRETS_DIR"
	echo "env=${TOKEN:-unset}"
	echo "mount=$(awk -v d="$FLEET_SECRETS_DIR" "\$5 == d { print \$9 }" /proc/self/mountinfo)"
	echo "modes=$(stat -c "%a:%U" "$FLEET_SECRETS_DIR" "$FLEET_SECRETS_DIR/TOKEN" | tr "\n" " ")"
	echo "files=$(ls "$FLEET_SECRETS_DIR" | tr "\n" " ")"
	printf "value=%s\n" "$(cat "$FLEET_SECRETS_DIR/TOKEN")"'); ok $? "exec --secret-files"
is "$(grep '^dir=' <<<"$out")" "dir=/run/secrets" "FLEET_SECRETS_DIR names the directory"
is "$(grep '^mount=' <<<"$out")" "mount=tmpfs" "which is a tmpfs mount of its own (/proc/self/mountinfo inside)"
is "$(grep '^modes=' <<<"$out")" "modes=700:fleet-$A1 400:fleet-$A1 " "0700 and 0400, the agent's"
is "$(grep '^files=' <<<"$out")" "files=TOKEN " "one file per secret"
is "$(grep '^value=' <<<"$out")" "value=$V" "the file holds the value, exactly (exec output is not redacted)"
is "$(grep '^env=' <<<"$out")" "env=unset" "and the environment does not"
out=$("$FLEETCTL" exec $A1 --no-stdin -- sh -c 'ls -d /run/secrets 2>&1; echo "dir=${FLEET_SECRETS_DIR:-unset}"')
like "$out" "No such file" "after it, the next exec has no /run/secrets"
like "$out" "dir=unset" "nor FLEET_SECRETS_DIR"
grep -q " /run/secrets " /proc/self/mountinfo; is $? 1 "the host has no such mount"
is "$(grep -rlF -- "$V" "$STATE" 2>/dev/null | wc -l)" 0 "no file under the state dir (the agent's home included) holds the value"
"$FLEETCTL" exec $A1 --no-stdin --secret-files -- sleep 300 >/dev/null 2>&1 &
execpid=$!
deadline=$((SECONDS + 60))
until pgrep -u "$(id -u fleet-$A1)" -x sleep >/dev/null || [ $SECONDS -ge $deadline ]; do sleep 0.2; done
out=$("$FLEETCTL" snapshot $A1 during-exec 2>&1); is $? 1 "a snapshot during an exec with secret files is refused"
like "$out" "an exec given them holds its secrets" "and says why"
kill "$execpid"; wait "$execpid"	# the client goes: fleetd cancels the command

# --- an agent whose runs get their secrets as files (--secret-files on) ---
"$FLEETCTL" create $A3 --backend user --secret-files on --command '
	echo "dir=$FLEET_SECRETS_DIR"
	echo "env=${TOKEN:-unset}"
	echo "mount=$(awk -v d="$FLEET_SECRETS_DIR" "\$5 == d { print \$9 }" /proc/self/mountinfo)"
	printf "value=%s\n" "$(cat "$FLEET_SECRETS_DIR/TOKEN")"' >/dev/null; ok $? "create agent $A3 --secret-files on"
like "$("$FLEETCTL" show $A3)" "secrets as files" "show says so"
printf '%s' "$V" | "$FLEETCTL" secret set $A3 TOKEN >/dev/null; ok $? "set its TOKEN"
out=$("$FLEETCTL" trigger $A3 --wait 2>/dev/null); ok $? "a run of it"
is "$out" "dir=/run/secrets
env=unset
mount=tmpfs
value=[secret TOKEN]" "its secret is a file on a tmpfs of its own, not a variable (the file's content, printed, is redacted)"
out=$("$FLEETCTL" exec $A3 --no-stdin -- sh -c 'ls -d /run/secrets 2>&1'); like "$out" "No such file" "after the run there is no /run/secrets"
"$FLEETCTL" set $A3 --secret-files off >/dev/null; ok $? "set --secret-files off"
out=$("$FLEETCTL" trigger $A3 --wait 2>/dev/null)
like "$out" "env=\[secret TOKEN\]" "then its runs get the variable again"
like "$out" "dir=$" "and no directory"

# --- a value too short to redact: set warns ---
out=$(printf 'abc' | "$FLEETCTL" secret set $A1 PIN 2>&1 >/dev/null); ok $? "a 3-byte secret can be set"
like "$out" "warning: a value under 4 bytes is not redacted" "but set warns that it is not redacted"
out=$(printf 'abcd' | "$FLEETCTL" secret set $A1 PIN 2>&1 >/dev/null)
is "$out" "" "a 4-byte one: no warning"

done_testing
