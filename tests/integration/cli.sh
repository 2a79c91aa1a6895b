#!/bin/bash
# fleetctl as an operator uses it: every command, its output, its exit codes.
. "$FLEET_SRCDIR/tests/lib/common.sh"
U=cli$(test_run_id)	# agent names of this run (two checkouts at once never collide)

start_fleetd cli || { ok 1 "fleetd starts"; done_testing; }

out=$("$FLEETCTL" status); ok $? "status exits 0"
like "$out" "^fleetd [0-9.]+ \(pid $FLEETD_PID\)" "status names version and pid"
like "$out" "agents: +0" "status counts no agents"

out=$("$FLEETCTL" create $U-triage --backend user --memory 512 --command 'triage --once'); ok $? "create with options exits 0"
like "$out" "agent '$U-triage' created \(backend user, state stopped\)" "create says what it did"
out=$("$FLEETCTL" create --backend user $U-review); ok $? "options may come before the name"

out=$("$FLEETCTL" list)
like "$out" "^NAME +BACKEND +STATE" "list prints a table header"
like "$out" "$U-review +user +stopped +256MiB" "list shows $U-review with the default memory"
like "$out" "$U-triage +user +stopped +512MiB" "list shows $U-triage with its memory"

out=$("$FLEETCTL" --json list)
is "$(printf '%s' "$out" | jq -r '.[].name' | tr '\n' ' ')" "$U-review $U-triage " "--json list is JSON with both agents"

out=$("$FLEETCTL" show $U-triage)
like "$out" "command: +triage --once" "show prints the command"
like "$out" "state: +stopped" "show prints the state"
like "$out" "restart: +on-failure" "show prints the restart policy (default on-failure)"
is "$("$FLEETCTL" --json show $U-triage | jq -r .memory_mib)" "512" "--json show"

err=$("$FLEETCTL" create $U-triage 2>&1); rc=$?
is "$rc" 1 "creating an existing agent exits 1"
is "$err" "fleetctl: agent '$U-triage': already exists" "and names the agent"

err=$("$FLEETCTL" show ghost 2>&1); rc=$?
is "$rc" 1 "show of an unknown agent exits 1"
is "$err" "fleetctl: agent 'ghost': no such agent" "and says so"
err=$("$FLEETCTL" rm ghost 2>&1); is "$?" 1 "rm of an unknown agent exits 1"

# Invalid names are refused before anything is sent (exit 2), for every command.
for name in 'Bad' '../etc' 'a/b' 'a.b' '-x' '' 'abcdefghijklmnopqrstuvwxyz0123456' 'bot_1' 'x y'; do
	err=$("$FLEETCTL" create "$name" 2>&1); rc=$?
	is "$rc" 2 "create '$name' is a usage error"
	like "$err" "invalid agent name|needs an agent NAME|unknown option" "create '$name' explains why"
done
err=$("$FLEETCTL" show 'UPPER' 2>&1); is "$?" 2 "show with an invalid name exits 2"
err=$("$FLEETCTL" rm 'a/../b' 2>&1); is "$?" 2 "rm with an invalid name exits 2"

# Usage errors exit 2 and point at help.
err=$("$FLEETCTL" frobnicate 2>&1); is "$?" 2 "unknown command exits 2"
like "$err" "unknown command 'frobnicate'" "and names it"
err=$("$FLEETCTL" create x --memory lots 2>&1); is "$?" 2 "non-numeric --memory exits 2"
err=$("$FLEETCTL" create x --backend docker 2>&1); is "$?" 2 "unknown backend exits 2"
like "$err" "--backend must be 'vm' or 'user'" "and lists the choices"
err=$("$FLEETCTL" create x --bogus 2>&1); is "$?" 2 "unknown option exits 2"
err=$("$FLEETCTL" show 2>&1); is "$?" 2 "show without a name exits 2"
err=$("$FLEETCTL" 2>&1); is "$?" 2 "no command exits 2"

# Range checks happen in fleetd: exit 1 with its message.
err=$("$FLEETCTL" create big --backend user --memory 999999 2>&1); is "$?" 1 "absurd memory refused by fleetd"
like "$err" "memory_mib must be from 64 to 65536" "with the range"
err=$("$FLEETCTL" create cpu --backend user --vcpus 0 2>&1); is "$?" 1 "zero vcpus refused"
err=$("$FLEETCTL" create net --backend user --egress-allow 10.0.0.0/8 2>&1); is "$?" 1 "an egress list without --network nat refused"
like "$err" "egress_allow needs network 'nat'" "with the reason"
err=$("$FLEETCTL" create pol --restart sometimes 2>&1); is "$?" 2 "an unknown --restart policy is a usage error"
is "$("$FLEETCTL" --json list | jq length)" 2 "refused creates left nothing behind"

# start, exec, stop as an operator uses them (a user agent: cheap and real).
out=$("$FLEETCTL" start $U-triage); ok $? "start exits 0"
is "$out" "agent '$U-triage' started (state running)" "start says what it did"
is "$("$FLEETCTL" exec $U-triage -- id -un)" "fleet-$U-triage" "exec runs as the agent's own user"
out=$("$FLEETCTL" exec $U-triage -- sh -c 'echo out; echo err >&2; exit 5' 2>"$TEST_TMP/err"); rc=$?
is "$rc" 5 "exec exits with the command's exit code"
is "$out|$(cat "$TEST_TMP/err")" "out|err" "stdout and stderr stay apart"
is "$(printf 'a\nb\nc\n' | "$FLEETCTL" exec $U-triage -- wc -l)" 3 "stdin reaches the command"
is "$("$FLEETCTL" exec $U-triage --env GREETING=hi -- sh -c 'echo $GREETING')" hi "--env sets a variable"
"$FLEETCTL" exec $U-triage --timeout 1 -- sleep 30 2>/dev/null; is "$?" 124 "--timeout kills the command (exit 124)"
"$FLEETCTL" exec $U-triage -- sh -c 'kill -TERM $$' 2>/dev/null; is "$?" 143 "death by signal N exits 128+N"
err=$("$FLEETCTL" exec $U-triage -- /no/such/program 2>&1); rc=$?
ok $([ $rc -ne 0 ] && echo 0 || echo 1) "a missing program fails"
like "$err" "No such file or directory" "and says so"
# A client that hangs up mid-stream cancels the command; fleetd carries on.
timeout 0.5 "$FLEETCTL" exec $U-triage -- sh -c 'while :; do echo spam; done' >/dev/null 2>&1
timeout 0.5 "$FLEETCTL" exec $U-triage -- sleep 300 >/dev/null 2>&1
gone() { ! ps -o args= -u fleet-$U-triage 2>/dev/null | grep -qE '^sleep 300|spam'; }
for _ in $(seq 50); do gone && break; sleep 0.1; done
check "commands of clients that hung up are killed" -- gone
is "$("$FLEETCTL" exec $U-triage -- echo alive)" alive "and fleetd still serves execs"
out=$("$FLEETCTL" stop $U-triage --timeout 5); ok $? "stop exits 0"
is "$out" "agent '$U-triage' stopped (state stopped)" "stop says what it did"
out=$("$FLEETCTL" restart $U-triage); ok $? "restart exits 0"
like "$out" "restarted \(state running\)" "restart leaves it running"
"$FLEETCTL" stop $U-triage >/dev/null
err=$("$FLEETCTL" exec $U-triage true 2>&1); is "$?" 2 "exec without -- is a usage error"
like "$err" "exec needs '--' before the command" "and says so"
err=$("$FLEETCTL" exec -- true 2>&1); is "$?" 2 "exec without a name is a usage error"
err=$("$FLEETCTL" exec $U-triage -- 2>&1); is "$?" 2 "exec without a command is a usage error"
err=$("$FLEETCTL" exec ghost -- true 2>&1); is "$?" 1 "exec in an unknown agent exits 1"
is "$err" "fleetctl: agent 'ghost': no such agent" "and says so"
err=$("$FLEETCTL" stop $U-triage --timeout soon 2>&1); is "$?" 2 "a non-numeric --timeout is a usage error"

# Every "VERB NAME" command shares one argument check (ctl/call.c): the same
# words, exit 2 before anything is sent; and --help shows the command's usage.
for c in show rm start stop restart console snapshots health trigger upgrade; do
	err=$("$FLEETCTL" $c 2>&1); is "$?" 2 "$c without a name is a usage error"
	like "$err" "^fleetctl: $c needs exactly one agent NAME" "$c says what it needs"
	err=$("$FLEETCTL" $c $U-triage $U-review 2>&1); is "$?" 2 "$c with two names is a usage error"
	err=$("$FLEETCTL" $c Bad 2>&1); is "$?" 2 "$c with an invalid name is a usage error"
	like "$err" "^fleetctl: invalid agent name 'Bad'" "$c says why the name is invalid"
	out=$("$FLEETCTL" $c --help); is "$?" 0 "$c --help exits 0"
	like "$out" "^Usage: fleetctl .* $c NAME" "$c --help shows its usage"
done
for c in status list audit; do
	err=$("$FLEETCTL" $c extra 2>&1); is "$?" 2 "$c with an argument is a usage error"
	like "$err" "^fleetctl: $c takes no arguments" "$c says it takes none"
done

# Help comes from the command table.
out=$("$FLEETCTL" help); ok $? "help exits 0"
for c in status create list show rm start stop restart exec audit; do like "$out" "^  $c " "help lists $c"; done
out=$("$FLEETCTL" help create)
like "$out" "Usage: fleetctl .*create NAME \[--backend vm\|user\]" "help create shows usage"
like "$out" "--memory MIB" "help create lists --memory"
out=$("$FLEETCTL" rm --help); like "$out" "--force" "rm --help lists --force"
err=$("$FLEETCTL" help nope 2>&1); is "$?" 2 "help for an unknown command exits 2"
like "$("$FLEETCTL" --version)" "^fleetctl [0-9]" "--version"

# rm, then audit shows who did what.
out=$("$FLEETCTL" rm $U-review); ok $? "rm exits 0"
is "$out" "agent '$U-review' removed" "rm says what it removed"
out=$("$FLEETCTL" rm $U-triage --force); ok $? "rm --force after the name works"
check "rm removed the agent's user" -- bash -c "! getent passwd fleet-$U-triage"
out=$("$FLEETCTL" list); is "$out" "no agents" "list says so when empty"
out=$("$FLEETCTL" audit)
like "$out" "agent.create +$U-triage +ok" "audit shows the create"
like "$out" "agent.remove +$U-review +ok" "audit shows the remove"
like "$out" "agent.create +$U-triage +refused +agent '$U-triage': already exists" "audit shows the refused create"
like "$out" "^[0-9T:.-]+Z +0 " "audit shows time and uid 0"
is "$("$FLEETCTL" --json audit --limit 2 | jq length)" 2 "audit --limit"

# The socket comes from -s, else FLEET_SOCKET, else the default.
out=$(FLEET_SOCKET=/nonexistent "$FLEETCTL" -s "$SOCK" status); ok $? "-s wins over FLEET_SOCKET"
err=$(FLEET_SOCKET=$TEST_TMP/nothing.sock "$FLEETCTL" status 2>&1); is "$?" 1 "FLEET_SOCKET is used (missing socket exits 1)"
like "$err" "cannot connect to fleetd at $TEST_TMP/nothing.sock: No such file or directory \(is fleetd running\?\)" "and says where it looked"

# fleetctl's HTTP is libcurl's: what it makes of a peer that is not fleetd, or of
# an exec stream cut short. The peers are socats on sockets in TEST_TMP.
# fake_peer NAME REPLY-FILE: a socket that answers every connection with REPLY-FILE.
fake_peer() {
	socat "UNIX-LISTEN:$TEST_TMP/$1.sock,fork" SYSTEM:"cat '$2'; sleep 0.2" 2>/dev/null &
	_pids+=("$!")
	disown "$!"	# killed at exit without a "Killed" line
	for ((i = 0; i < 200; i++)); do [ -S "$TEST_TMP/$1.sock" ] && return 0; sleep 0.05; done
	return 1
}
printf 'SSH-2.0-dropbear_2022.83\r\n' >"$TEST_TMP/ssh.reply"
fake_peer ssh "$TEST_TMP/ssh.reply"; ok $? "a peer that speaks SSH"
err=$("$FLEETCTL" -s "$TEST_TMP/ssh.sock" status 2>&1); is $? 1 "fleetctl against it exits 1"
like "$err" "talking to fleetd at $TEST_TMP/ssh.sock: Protocol error" "and says the answer is not HTTP"
# An exec whose chunked stream (split mid-line) breaks off before its last chunk.
line1='{"stream":"stdout","data":"aGVsbG8K"}'
printf 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: application/x-ndjson\r\n\r\n%x\r\n%s\r\n%x\r\n%s\r\n' \
	16 "${line1:0:16}" $((${#line1} - 16 + 1)) "${line1:16}"$'\n' >"$TEST_TMP/cut.reply"
fake_peer cut "$TEST_TMP/cut.reply"; ok $? "a peer whose exec stream breaks off"
out=$("$FLEETCTL" -s "$TEST_TMP/cut.sock" exec x --no-stdin -- true 2>"$TEST_TMP/cut.err"); is $? 1 "exec exits 1"
is "$out" hello "the output that came, split across chunks, is printed"
like "$(cat "$TEST_TMP/cut.err")" "exec stream from fleetd broke off" "and it says the stream broke off"

done_testing
