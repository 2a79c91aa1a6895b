#!/bin/bash
# User agents as an operator drives them (fleetctl create/exec/start/stop/rm),
# then agent A attacking agent B and fleetd from inside its own environment:
# every attempt must fail, and each is asserted. Needs root.
. "$FLEET_SRCDIR/tests/lib/common.sh"

[ "$(id -u)" = 0 ] || skip_all "needs root (user agents are Unix users)"
command -v perl >/dev/null || skip_all "perl missing (used for the ptrace attempt)"

# Agent names are global (they become system users): prefix them per test file.
U=uiso$(test_run_id) && A=$U-a B=$U-b	# agent names of this run (two checkouts at once never collide)
UMIN=$((4300000 + ($$ % 500) * 100)); UMAX=$((UMIN + 99))
cleanup_agents() {
	for n in $A $B; do "$FLEETCTL" rm --force $n >/dev/null 2>&1; done
	for n in $A $B; do userdel fleet-$n 2>/dev/null; groupdel fleet-$n 2>/dev/null; done
}

# State and socket outside /tmp: each sandbox gets a private /tmp, which would hide them and
# make the attempts below pass for the wrong reason. Here only file modes and namespaces stop A.
STATE=$(mktemp -d /var/lib/fleet-uiso.XXXXXX); SOCKDIR=$(mktemp -d /run/fleet-uiso.XXXXXX)
chmod 0755 "$SOCKDIR"; SOCK=$SOCKDIR/fleetd.sock
on_exit "_umount_under '$STATE'; rm -rf '$STATE' '$SOCKDIR'"
on_exit cleanup_agents
"$FLEETD" --state-dir "$STATE" --socket "$SOCK" --config "$TEST_TMP/none.conf" \
	--user-uid-min $UMIN --user-uid-max $UMAX 2>"$TEST_TMP/start.err" || {
	ok 1 "fleetd starts"; sed 's/^/#   /' "$TEST_TMP/start.err"; done_testing; }
FLEETD_PID=$(head -1 "$STATE/fleetd.lock"); _pids+=("$FLEETD_PID"); export FLEET_SOCKET=$SOCK
status=$(api GET /v1/status)
if ! printf '%s' "${status% *}" | jq -e '.. | objects | select(has("user")) | .user | test("^available")' >/dev/null 2>&1; then
	skip_all "this fleetd has no user backend yet ($(printf '%s' "${status% *}" | jq -c '.backends? // empty' 2>/dev/null))"
fi

# ---- the happy path, as an operator ----
out=$("$FLEETCTL" create $A --backend user --memory 128 2>&1); ok $? "create $A --backend user"
out=$("$FLEETCTL" create $B --backend user --memory 96 2>&1); ok $? "create $B --backend user"
ua=$(id -u fleet-$A 2>/dev/null); ub=$(id -u fleet-$B 2>/dev/null)
is "$ua" "$UMIN" "$A got the first uid of the configured range"
is "$(id -g fleet-$A)" "$ua" "gid == uid"
is "$(id -G fleet-$A)" "$ua" "no supplementary groups"
is "$(getent passwd fleet-$A | cut -d: -f6,7)" "$STATE/users/$A:/usr/sbin/nologin" "home under the state dir, no login shell"
is "$(stat -c '%a %U' "$STATE/users/$A")" "700 fleet-$A" "home 0700, the agent's"
is "$(cd "$STATE/users/$A" && ls)" "$(printf 'memory\nwork')" "home holds memory/ and work/"
is "$(stat -c '%a %U' "$STATE/users")" "711 root" "users/ is 0711 root"

out=$("$FLEETCTL" exec $A -- sh -c 'id -un; echo "$FLEET_AGENT $HOME"; pwd' </dev/null); ok $? "exec exits 0"
is "$out" "$(printf 'fleet-%s\n%s %s\n%s' $A $A "$STATE/users/$A" "$STATE/users/$A")" "exec runs as the agent, in its home"
out=$(printf 'to stdin' | "$FLEETCTL" exec $A -- cat); is "$out" "to stdin" "stdin reaches the command"
"$FLEETCTL" exec $A -- sh -c 'exit 4' </dev/null >/dev/null 2>&1; is "$?" 4 "fleetctl exec exits with the command's code"
out=$("$FLEETCTL" exec $A --env FLEET_X=1 -- env </dev/null | sort | tr '\n' ' ')
is "$out" "FLEET_AGENT=$A FLEET_X=1 HOME=$STATE/users/$A PATH=/run/fleet/bin:/usr/local/bin:/usr/bin:/bin USER=fleet-$A " \
	"the environment is clean: only FLEET_*, HOME, USER, PATH"

out=$("$FLEETCTL" start $A 2>&1); ok $? "start $A"
like "$("$FLEETCTL" show $A)" "state: +running" "show says running"
err=$("$FLEETCTL" rm $A 2>&1); is "$?" 1 "rm refuses a running agent"
like "$err" "running" "and says why"
"$FLEETCTL" exec $A -- sh -c '(setsid sleep 600 &) ; (sleep 600 &); true' </dev/null
out=$("$FLEETCTL" stop $A 2>&1); ok $? "stop $A"
like "$("$FLEETCTL" show $A)" "state: +stopped" "show says stopped"
ps -u "$ua" -o pid= >/dev/null 2>&1; is "$?" 1 "no process of $A is left after stop"

out=$("$FLEETCTL" exec $A --timeout 1 -- sh -c '(sleep 600 &); sleep 600' </dev/null 2>&1); rc=$?
ok $((rc == 0)) "a timed-out exec fails (exit $rc)"
like "$out" "timed out" "and says it timed out"
ps -u "$ua" -o pid= >/dev/null 2>&1; is "$?" 1 "the timeout killed every process, double fork included"

# ---- B holds secrets and files; A attacks ----
"$FLEETCTL" exec $B -- sh -c 'echo b-notes > memory/notes; echo b-work > work/file' </dev/null
"$FLEETCTL" exec $B --env SECRET_B=b-secret-value -- sleep 300 </dev/null >/dev/null 2>&1 &
bexec=$!
for i in $(seq 200); do bpid=$(pgrep -u "$ub" -x sleep | head -1); [ -n "$bpid" ] && break; sleep 0.05; done
ok $((${#bpid} == 0)) "B's process is running (host pid ${bpid:-none})"
grep -qz SECRET_B=b-secret-value /proc/$bpid/environ; ok $? "B's process really holds the secret (seen from the host)"

attempt() {	# attempt DESCRIPTION SCRIPT: run SCRIPT as A; it must print nothing on stdout but the end marker
	local desc=$1 script=$2 got
	got=$("$FLEETCTL" exec $A -- sh -c "$script; echo attempt-ran" </dev/null 2>/dev/null)
	is "$got" "attempt-ran" "A cannot $desc"
}
denied() {	# denied DESCRIPTION SCRIPT: as attempt, and the failure is a refusal, not a missing path
	local desc=$1 script=$2 got
	got=$("$FLEETCTL" exec $A -- sh -c "$script; echo attempt-ran" </dev/null 2>&1)
	like "$got" "Permission denied" "A cannot $desc: permission denied"
	is "$(printf '%s\n' "$got" | grep -v 'Permission denied')" "attempt-ran" "and it got nothing"
}
# Controls: what A attacks below exists and holds something (seen by B, or from the host).
is "$("$FLEETCTL" exec $B -- cat memory/notes </dev/null)" "b-notes" "B wrote its memory file (control, as B)"
BCG=$(find /sys/fs/cgroup -path "*/fleet/$B/cgroup.procs" 2>/dev/null)
ok $((${#BCG} == 0)) "B's cgroup.procs exists ($(echo $BCG))"
bcg_has=
for f in $BCG; do grep -qx "$bpid" "$f" && { bcg_has=$f; break; }; done
ok $((${#bcg_has} == 0)) "from the host, B's cgroup lists B's process (control)"
BH=$STATE/users/$B
out=$("$FLEETCTL" exec $A -- sh -c "ls -d $STATE $STATE/users \$HOME >/dev/null && echo can-reach-home" </dev/null 2>&1)
is "$out" "can-reach-home" "A can reach its own home through the state dir (control for the attempts)"
denied "read B's memory"			"cat $BH/memory/notes"
attempt "read B's work files"			"cat $BH/work/file"
attempt "list B's home"				"ls $BH"
attempt "write into B's work"			"echo x > $BH/work/evil && echo wrote"
attempt "overwrite B's memory"			"echo x > $BH/memory/notes && echo wrote"
attempt "find B's secret in any environ"	"cat /proc/[0-9]*/environ | tr '\\0' '\\n' | grep b-secret"
attempt "read B's environ by host pid"		"cat /proc/$bpid/environ"
attempt "read B's cmdline by host pid"		"cat /proc/$bpid/cmdline"
attempt "see B's processes at all"		"ps -eo user= | grep -v fleet-$A"
attempt "signal B's process"			"kill -0 $bpid && echo signalled"
attempt "kill B's process"			"kill -9 $bpid && echo killed"
attempt "ptrace B's process"			"perl -e 'exit(syscall(101, 16, \$ARGV[0], 0, 0) == -1)' $bpid && echo attached"
attempt "read fleetd's database"		"cat $STATE/fleet.db"
attempt "read fleetd's log"			"cat $STATE/fleetd.log"
attempt "list the state dir"			"ls $STATE"
attempt "list the other homes"			"ls $STATE/users"
attempt "read fleetd's lock file"		"cat $STATE/fleetd.lock"
attempt "connect to fleetd's control socket"	"curl -s --unix-socket $SOCK http://fleet/v1/status"
attempt "use fleetctl against fleetd"		"$FLEETCTL -s $SOCK list 2>/dev/null"
for f in $BCG; do denied "read B's cgroup ${f#/sys/fs/cgroup/}" "cat $f"; done
attempt "become root"				"su -c id root 2>/dev/null; sudo -n id 2>/dev/null"
kill -0 "$bpid" 2>/dev/null; ok $? "B's process survived all of it"
grep -qz SECRET_B=b-secret-value /proc/$bpid/environ 2>/dev/null; ok $? "and still holds its secret"

# Without the PID namespace, the uid alone keeps A out: try it from the host as A's uid.
if command -v setpriv >/dev/null; then
	out=$(setpriv --reuid="$ua" --regid="$ua" --clear-groups cat /proc/$bpid/environ 2>/dev/null); is "$out" "" "A's uid alone cannot read B's environ"
	setpriv --reuid="$ua" --regid="$ua" --clear-groups kill -0 "$bpid" 2>/dev/null; is "$?" 1 "A's uid alone cannot signal B"
fi

# ---- limits: a fork bomb and a memory hog stay inside A ----
out=$("$FLEETCTL" exec $A --timeout 60 -- perl -e 'my $n = 0; for (1..5000) { my $p = fork; last unless defined $p; if (!$p) { sleep 30; exit } $n++ } print "$n\n"' </dev/null 2>/dev/null)
ok $(( out > 0 && out < 512 ? 0 : 1 )) "a fork bomb stops below 512 processes ($out forks)"
out=$("$FLEETCTL" exec $A --timeout 60 -- tail /dev/zero </dev/null 2>&1); rc=$?
ok $((rc == 0)) "a memory hog is killed (exit $rc)"
like "$out" "signal 9|killed|137" "by SIGKILL at the memory limit"
kill -0 "$bpid" 2>/dev/null; ok $? "B was not hurt by A's fork bomb or memory hog"
out=$("$FLEETCTL" exec $B -- echo still-fine </dev/null); is "$out" "still-fine" "B still runs commands"

kill "$bexec" 2>/dev/null; wait "$bexec" 2>/dev/null

# ---- removal ----
out=$("$FLEETCTL" rm $A 2>&1); ok $? "rm a stopped agent"
"$FLEETCTL" start $B >/dev/null 2>&1
out=$("$FLEETCTL" rm --force $B 2>&1); ok $? "rm --force a running agent"
for n in $A $B; do
	getent passwd fleet-$n >/dev/null; is "$?" 2 "user fleet-$n is gone"
	getent group fleet-$n >/dev/null; is "$?" 2 "group fleet-$n is gone"
	[ -e "$STATE/users/$n" ]; is "$?" 1 "home of $n is gone"
done
ps -u "$ua","$ub" -o pid= >/dev/null 2>&1; is "$?" 1 "no process of either agent is left"

done_testing
