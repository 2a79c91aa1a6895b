#!/bin/bash
# An agent's secrets (#12) with user agents, through fleetctl and a real
# fleetd: set (stdin only), ls, rm; a run gets its own agent's secrets in
# its environment and no other's; rotation counts from the next run;
# exec --secrets; no value in argv (host /proc), in the audit, the
# database file or fleetd's log; a ciphertext copied into another agent's
# row does not decrypt (the run fails, nothing leaks); the host key file.
. "$FLEET_SRCDIR/tests/lib/common.sh"
R=$(test_run_id) SA=sec${R}a SB=sec${R}b	# agent names of this run (two checkouts at once never collide)

[ "$(id -u)" = 0 ] || skip_all "needs root (user agents are Unix users)"
command -v jq >/dev/null || skip_all "jq not installed"
command -v sqlite3 >/dev/null || skip_all "sqlite3 not installed"

user_fleetd_setup usec
user_fleetd_start; ok $? "fleetd starts"
is "$(stat -c '%a %s %u' "$STATE/secret.key")" "400 32 0" "it made the host key: 0400, 32 bytes, root's"
runj() { "$FLEETCTL" --json runs "$1" "$2"; }
rand() { head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
V1="s1-$(rand)"; V2="s2-$(rand)"; VB="sb-$(rand)"
# Everything must be free of these (but the agents' own processes and run logs).
ALL="$V1|$V2|$VB"

"$FLEETCTL" create $SA --backend user --command 'echo "TOKEN=${TOKEN:-unset} API=${API_KEY:-unset}"' >/dev/null
ok $? "create agent $SA"
"$FLEETCTL" create $SB --backend user --command 'echo "TOKEN=${TOKEN:-unset} API=${API_KEY:-unset}"' >/dev/null
ok $? "create agent $SB"

# --- set, stdin only ---
printf '%s' "$V1" | "$FLEETCTL" secret set $SA TOKEN >"$TEST_TMP/out"; ok $? "secret set reads the value from stdin"
like "$(cat "$TEST_TMP/out")" "secret TOKEN set \\(${#V1} bytes\\)" "and says so, with the size, not the value"
"$FLEETCTL" secret set $SA TOKEN "$V2" </dev/null >/dev/null 2>&1
is $? 2 "a value on the command line is a usage error"
printf 'x\n' | "$FLEETCTL" secret set $SA API_KEY --trim-newline >/dev/null; ok $? "set API_KEY with --trim-newline"
printf 'x\n' | "$FLEETCTL" secret set $SA RAW >/dev/null; ok $? "set RAW without it"
is "$("$FLEETCTL" --json secret ls $SA | jq -r '[.[] | .key + "=" + (.size|tostring)] | join(" ")')" \
	"API_KEY=1 RAW=2 TOKEN=${#V1}" "ls --json: keys by name and sizes (one newline dropped only when asked)"
out=$("$FLEETCTL" secret ls $SA); ok $? "secret ls"
like "$out" "^KEY +SIZE +CREATED +UPDATED" "a table"
like "$(grep '^TOKEN' <<<"$out")" "^TOKEN +${#V1} +[0-9]{4}-" "with the size and dates"
"$FLEETCTL" secret ls $SB | grep -q "has no secrets"; ok $? "the other agent has none"
out=$(printf 'v' | "$FLEETCTL" secret set $SA 'A-B' 2>&1); is $? 2 "a key that is no variable name is a usage error"
out=$(printf 'v' | "$FLEETCTL" secret set $SA FLEET_RUN_ID 2>&1); is $? 1 "fleetd refuses a FLEET_* key"
like "$out" "not FLEET_" "and says why"
head -c 65537 /dev/zero | tr '\0' a | "$FLEETCTL" secret set $SA BIG >/dev/null 2>&1
is $? 2 "a value over 64 KiB is refused"
out=$(printf 'v' | "$FLEETCTL" secret set nosuch TOKEN 2>&1); is $? 1 "secret set of an unknown agent fails"
like "$out" "no such agent|no agent" "and says so"
out=$(api PUT /v1/agents/$SA/secrets/BIG "$(head -c 65537 /dev/zero | tr '\0' a)"); is "${out##* }" 413 "the API refuses a value over 64 KiB (413)"

# --- a run gets its own agent's secrets, no other's ---
out=$("$FLEETCTL" trigger $SA --wait 2>/dev/null); ok $? "a run of $SA"
# The run log is redacted (core/redact.h): the marker shows the value was printed; "x" is too short to redact.
is "$out" "TOKEN=[secret TOKEN] API=x" "its environment has its secrets (its log shows them redacted)"
printf '%s' "$VB" | "$FLEETCTL" secret set $SB API_KEY >/dev/null
out=$("$FLEETCTL" trigger $SB --wait 2>/dev/null); ok $? "a run of $SB"
is "$out" "TOKEN=unset API=[secret API_KEY]" "$SB's run has its own secret and not $SA's"

# --- rotation: the next run sees the new value ---
printf '%s' "$V2" | "$FLEETCTL" secret set $SA TOKEN >/dev/null; ok $? "rotate $SA's TOKEN"
out=$("$FLEETCTL" trigger $SA --wait 2>/dev/null)
# Redaction knows only the current value: had the run printed the old one, it would show.
is "$out" "TOKEN=[secret TOKEN] API=x" "the next run sees the new value"
is "$("$FLEETCTL" --json secret ls $SA | jq -r '.[] | select(.key == "TOKEN") | .size')" "${#V2}" "ls shows its size"

# --- exec --secrets ---
is "$("$FLEETCTL" exec $SA --no-stdin --secrets -- sh -c 'echo "$TOKEN"')" "$V2" "exec --secrets gets them"
is "$("$FLEETCTL" exec $SA --no-stdin -- sh -c 'echo "${TOKEN:-unset}"')" "unset" "exec without it does not"

# --- never in argv on the host; only the agent's own process has it in its environ ---
"$FLEETCTL" set $SA --command 'exec sleep 30' >/dev/null
id=$("$FLEETCTL" --json trigger $SA | jq -r .id)
deadline=$((SECONDS + 60))
until [ "$(runj $SA "$id" | jq -r .state)" = running ] || [ $SECONDS -ge $deadline ]; do sleep 0.2; done
uid=$(id -u fleet-$SA)
pids=(); deadline=$((SECONDS + 60))
until pids=($(pgrep -u "$uid" -x sleep)); [ ${#pids[@]} -gt 0 ] || [ $SECONDS -ge $deadline ]; do sleep 0.2; done
ok $([ ${#pids[@]} -gt 0 ] && echo 0 || echo 1) "the run's process is there (uid $uid)"
tr '\0' '\n' <"/proc/${pids[0]}/environ" | grep -qxF "TOKEN=$V2"
ok $? "positive control: the run's own environ holds its secret"
leaks=""
for p in /proc/[0-9]*; do
	if grep -qaE "$ALL" "$p/cmdline" 2>/dev/null; then leaks+=" ${p#/proc/}:cmdline"; fi
	[ "$(stat -c %u "$p" 2>/dev/null)" = "$uid" ] && continue
	if grep -qaE "$ALL" "$p/environ" 2>/dev/null; then leaks+=" ${p#/proc/}:environ"; fi
done
is "$leaks" "" "no process on the host has a value in its argv, none but the agent's in its environ"
"$FLEETCTL" cancel $SA "$id" >/dev/null 2>&1
deadline=$((SECONDS + 60))
while st=$(runj $SA "$id" | jq -r .state); [ "$st" = running ] && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
"$FLEETCTL" set $SA --command 'echo "TOKEN=${TOKEN:-unset} API=${API_KEY:-unset}"' >/dev/null

# --- rm ---
"$FLEETCTL" secret rm $SA RAW >/dev/null; ok $? "secret rm"
is "$("$FLEETCTL" --json secret ls $SA | jq -r '[.[].key] | join(" ")')" "API_KEY TOKEN" "it is gone"
out=$("$FLEETCTL" secret rm $SA RAW 2>&1); is $? 1 "removing it again fails"
like "$out" "has no secret 'RAW'" "and says so"

# --- the audit: who set or removed which key, never the value ---
audit=$("$FLEETCTL" --json audit --limit 1000)
is "$(jq -r --arg t "$SA/TOKEN" '[.[] | select(.action == "secret.set" and .target == $t and .outcome == "ok")] | length' <<<"$audit")" 2 \
	"the audit has both sets of $SA/TOKEN"
is "$(jq -r --arg t "$SA/RAW" '[.[] | select(.action == "secret.remove" and .target == $t)] | length' <<<"$audit")" 2 \
	"and the removals of $SA/RAW (ok, refused)"
grep -qE "$ALL" <<<"$audit"; is $? 1 "no value in the audit"

# --- a ciphertext copied into another agent's row does not decrypt ---
printf 'decoy' | "$FLEETCTL" secret set $SB TOKEN >/dev/null
sqlite3 "$STATE/fleet.db" "UPDATE secrets SET ciphertext = (SELECT s.ciphertext FROM secrets s JOIN agents a ON a.id = s.agent_id
	WHERE a.name = '$SA' AND s.name = 'TOKEN'), nonce = (SELECT s.nonce FROM secrets s JOIN agents a ON a.id = s.agent_id
	WHERE a.name = '$SA' AND s.name = 'TOKEN') WHERE name = 'TOKEN' AND agent_id = (SELECT id FROM agents WHERE name = '$SB')"
ok $? "copy $SA's TOKEN ciphertext and nonce into $SB's row with sqlite3"
out=$("$FLEETCTL" trigger $SB --wait 2>&1); ok $([ $? -ne 0 ] && echo 0 || echo 1) "$SB's next run fails"
last=$("$FLEETCTL" --json runs $SB --limit 1 | jq -r '.[0].id')
like "$(runj $SB "$last" | jq -r '.state + ": " + .error')" "^failed: .*does not decrypt" "with a clear error"
grep -qE "$ALL" <<<"$out$(runj $SB "$last")"; is $? 1 "and no value in it"
out=$("$FLEETCTL" exec $SB --no-stdin --secrets -- true 2>&1); is $? 1 "exec --secrets of $SB fails too"
like "$out" "does not decrypt" "saying why"
printf '%s' "$VB" | "$FLEETCTL" secret set $SB TOKEN >/dev/null; ok $? "setting the key again repairs it"
is "$("$FLEETCTL" trigger $SB --wait 2>/dev/null)" "TOKEN=[secret API_KEY] API=[secret API_KEY]" \
	"$SB's runs work again (one value under two keys: the first key names it)"

# --- fleetd restarts with the same key; refuses a key file that is not its own ---
stop_fleetd; ok $? "stop fleetd"
user_fleetd_start; ok $? "start it again"
is "$("$FLEETCTL" trigger $SA --wait 2>/dev/null)" "TOKEN=[secret TOKEN] API=x" "the secrets still decrypt"
stop_fleetd
chmod 0440 "$STATE/secret.key"
"$FLEETD" --state-dir "$STATE" --socket "$SOCK" --config "$TEST_TMP/none.conf" --hooks-listen none 2>"$TEST_TMP/bad.err"
is $? 1 "a host key with mode 0440: fleetd does not start"
like "$(cat "$TEST_TMP/bad.err")" "host key .* mode 0400 .*mode 0440" "and says why"
chmod 0400 "$STATE/secret.key"
user_fleetd_start; ok $? "with the mode back it starts"

# --- no value in the database files or fleetd's log ---
"$FLEETCTL" rm --force $SB >/dev/null; ok $? "remove $SB"
is "$(sqlite3 "$STATE/fleet.db" "SELECT count(*) FROM secrets s LEFT JOIN agents a ON a.id = s.agent_id WHERE a.id IS NULL OR a.name = '$SB'")" 0 \
	"its secrets went with it"
stop_fleetd
found=$(cat "$STATE"/fleet.db* "$STATE/fleetd.log" "$TEST_TMP/start.err" 2>/dev/null | strings | grep -cE "$ALL")
is "$found" 0 "strings of fleet.db (and its WAL) and fleetd.log hold no value"
ok $([ -s "$STATE/fleetd.log" ] && echo 0 || echo 1) "(fleetd.log is not empty)"
strings "$STATE/fleet.db"* | grep -q "$SA/TOKEN"; ok $? "positive control: strings does find the audit's key names"
# Running again, so the cleanup removes the agents (and their Unix users) through it.
user_fleetd_start; ok $? "fleetd starts again"
"$FLEETCTL" rm --force $SA >/dev/null; ok $? "remove $SA"

done_testing
