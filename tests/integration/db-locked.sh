#!/bin/bash
# fleet's database locked by another process (#13, docs/reliability.md
# "Failing dependencies"): the test opens fleet.db with the sqlite3 CLI and
# holds `BEGIN EXCLUSIVE` (in WAL mode: the write lock; readers go on) while
# fleetd serves. Reads keep working; every write is refused after the busy
# timeout with 503 "db_locked" and a message saying the database is locked,
# and leaves nothing of itself (no row, no home, no Unix user); a webhook
# delivery is 503, never 2xx. After the holder rolls back, the same writes
# succeed with no restart, and the database passes integrity_check.
. "$FLEET_SRCDIR/tests/lib/common.sh"

[ "$(id -u)" = 0 ] || skip_all "needs root (user agents are Unix users)"
U=udl$(test_run_id)	# agent names and hooks_user of this run (two checkouts at once never collide)
HOOKS_USER=$U-hooks
. "$FLEET_SRCDIR/tests/lib/hooks.sh"

user_fleetd_setup udl
hooks_fleetd_start; ok $? "fleetd starts, with its webhook listener"

KEY=udl-hmac-secret-0123456789abcdef
"$FLEETCTL" create $U-a --backend user --command 'echo ran-$FLEET_RUN_ID' >/dev/null; ok $? "create agent $U-a"
"$FLEETCTL" start $U-a >/dev/null; ok $? "start it"
printf '%s' "$KEY" | "$FLEETCTL" hook add $U-a --source hmac --route udl-h --header X-Udl-Sig >/dev/null
ok $? "a webhook route for $U-a"
printf 'before' | "$FLEETCTL" secret set $U-a TOKEN >/dev/null; ok $? "secret set"
"$FLEETCTL" trigger $U-a --wait >/dev/null 2>&1; ok $? "a run succeeds"
# deliver ID: a signed delivery to udl-h with body {"n":ID}; prints the status.
deliver() { printf '{"n":"%s"}' "$1" >"$TEST_TMP/d.json"; post /hooks/udl-h "$TEST_TMP/d.json" -H "X-Udl-Sig: $(hmac_hex "$KEY" "$TEST_TMP/d.json")"; }
is "$(deliver d-before)" 202 "a webhook delivery is accepted (202)"

# what_is_there: everything acknowledged, for before/after comparisons.
what_is_there() {
	"$FLEETCTL" --json list | jq -r '[.[].name] | sort | join(",")'
	"$FLEETCTL" --json show $U-a | jq -r '.command'
	"$FLEETCTL" --json secret ls $U-a | jq -r '[.[].key] | join(",")'
	"$FLEETCTL" --json runs $U-a --limit 100 | jq -r '[.[].id] | sort | join(",")'
	"$FLEETCTL" --json schedule ls $U-a | jq -r 'length'
	db_counts
}
BEFORE=$(what_is_there)

# ---------------- another process holds the write lock ----------------
# The holder: sqlite3 reading its commands from a fifo kept open by fd 7.
mkfifo "$TEST_TMP/holder.in"
sqlite3 "$STATE/fleet.db" <"$TEST_TMP/holder.in" >"$TEST_TMP/holder.out" 2>&1 &
HOLDER=$!
exec 7>"$TEST_TMP/holder.in"
on_exit "kill $HOLDER 2>/dev/null"
printf '.timeout 60000\nBEGIN EXCLUSIVE;\n.print holding\n' >&7
for _ in $(seq 600); do grep -q holding "$TEST_TMP/holder.out" && break; sleep 0.1; done
is "$(cat "$TEST_TMP/holder.out")" holding "another process holds fleet.db's write lock (BEGIN EXCLUSIVE)"

# Reads: served as before (WAL lets readers past a writer).
check "list still answers while the database is locked" -- "$FLEETCTL" list
is "$("$FLEETCTL" --json show $U-a | jq -r .state)" running "show still answers: $U-a running"
check "runs still answer" -- "$FLEETCTL" runs $U-a
check "status still answers" -- "$FLEETCTL" status

# locked_refusal WHAT OUT RC: refused with the message that says why.
locked_msg='database is locked by another process'
locked_refusal() {
	diag "$1 while locked: $2"
	if [ "$3" -ne 0 ]; then ok 0 "$1 while locked: refused"; else ok 1 "$1 while locked: refused"; fi
	like "$2" "$locked_msg" "$1 while locked: the refusal says the database is locked"
}

out=$(api PUT /v1/agents/$U-a/secrets/OTHER '{"value":"x"}')
is "${out##* }" 503 "secret set while locked: 503"
is "$(echo "${out% *}" | jq -r .code)" db_locked "its code is db_locked"
like "$(echo "${out% *}" | jq -r .error)" "$locked_msg" "its error says the database is locked"

out=$(printf 'during' | "$FLEETCTL" secret set $U-a TOKEN2 2>&1); locked_refusal "secret set" "$out" $?
out=$("$FLEETCTL" set $U-a --command 'echo changed' 2>&1); locked_refusal "set --command" "$out" $?
out=$("$FLEETCTL" schedule add $U-a '0 3 * * *' 2>&1); locked_refusal "schedule add" "$out" $?
out=$("$FLEETCTL" trigger $U-a 2>&1); locked_refusal "trigger" "$out" $?
out=$("$FLEETCTL" create $U-b --backend user --command 'echo b' 2>&1); locked_refusal "create" "$out" $?
check "the refused create left no Unix user" -- bash -c "! getent passwd fleet-$U-b"
check "the refused create left no home" -- test ! -e "$STATE/users/$U-b"
code=$(deliver d-during)
is "$code" 503 "a webhook delivery while locked: 503 (the sender retries), not 2xx"
is "$(jq -r .code <"$HOOK_RESP")" db_locked "its code is db_locked"
check "fleetd is still there" -- kill -0 "$FLEETD_PID"

# ---------------- the lock is released ----------------
printf 'ROLLBACK;\n.print released\n.quit\n' >&7
exec 7>&-
wait "$HOLDER"; ok $? "the other process releases the lock and exits"
is "$(what_is_there)" "$BEFORE" "nothing of the refused writes was kept"

# Recovery without a restart.
printf 'after' | "$FLEETCTL" secret set $U-a TOKEN2 >/dev/null; ok $? "secret set works again"
"$FLEETCTL" set $U-a --command 'echo changed-$FLEET_RUN_ID' >/dev/null; ok $? "set works again"
"$FLEETCTL" schedule add $U-a '0 3 * * *' >/dev/null; ok $? "schedule add works again"
out=$("$FLEETCTL" trigger $U-a --wait 2>&1); ok $? "trigger works again"
like "$out" "changed-" "and the run runs the new command"
"$FLEETCTL" create $U-b --backend user --command 'echo b' >/dev/null; ok $? "create works again"
is "$(deliver d-after)" 202 "a webhook delivery is accepted again"
is "$(db_q 'PRAGMA integrity_check')" ok "integrity_check: ok"
is "$("$FLEETCTL" --json show $U-a | jq -r .state)" running "$U-a is still running"
check "fleetd was never restarted" -- kill -0 "$FLEETD_PID"

done_testing
