#!/bin/bash
# Snapshots and restores of a VM agent with a real guest: a full checkpoint
# of a running guest brings back its files and its running processes, a disk
# snapshot of a stopped one its files; a badly broken guest comes back;
# a kill -9 of fleetd in the middle of a snapshot is cleaned up at the next
# start, one in the middle of a restore is finished; bad input is refused.
# The health check inside a snapshot goes to the guest's health service
# (agentd/health_server.h), and without it runs as an exec: both mark a
# snapshot of a guest whose home takes no write bad; the service's kept
# start of /bin/sh does not hide a /bin/sh changed since.
. "$FLEET_SRCDIR/tests/lib/common.sh"

. "$FLEET_SRCDIR/tests/lib/vmfleet.sh"
vmfleet_setup --tcg

ex() { "$FLEETCTL" exec snap "$@"; }
job_idle() { vmns_exec virsh -q -c qemu:///system domjobinfo fleet-snap 2>/dev/null | grep -q 'Job type: *None'; }
qemu_pid() { vmns_exec cat /run/libvirt/qemu/fleet-snap.pid 2>/dev/null; }
no_libvirt_snapshot() { ! vmns_exec virsh -q -c qemu:///system snapshot-list fleet-snap --name | grep -q "$1"; }

fleetd_ns_start --log-level debug; ok $? "fleetd starts inside the namespace"
"$FLEETCTL" create snap --backend vm >/dev/null && "$FLEETCTL" start snap >/dev/null; ok $? "a VM agent runs"

# --- a full checkpoint of a running guest ------------------------------------------------
ex -- sh -c 'echo precious > ~/memory/keep'
ex --root -- sh -c 'sleep 100000 >/dev/null 2>&1 </dev/null & echo $! > /root/bg.pid'
bgpid=$(ex --root -- cat /root/bg.pid)
ok $([ -n "$bgpid" ] && echo 0 || echo 1) "a background process runs in the guest (pid $bgpid)"
t0=$(date +%s.%N)
out=$("$FLEETCTL" snapshot snap before --note "known good" 2>&1); ok $? "snapshot a running guest"
diag "snapshot of a running 256 MiB guest: $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"
is "$out" "agent 'snap': snapshot 'before' taken (full)" "a running guest gets a full checkpoint"
list=$("$FLEETCTL" --json snapshots snap)
is "$(printf '%s' "$list" | jq -r '.[0].name + "|" + .[0].kind + "|" + .[0].note')" "before|full|known good" \
	"snapshots lists it with its kind and note"
like "$("$FLEETCTL" snapshots snap)" "^NAME +TIME +SIZE +KIND" "snapshots prints a table"
is "$(virsh_ns snapshot-list fleet-snap --name | tr -d ' ')" "before" "libvirt has exactly that snapshot"

# Break it: files gone, process killed, then the system itself.
ex -- sh -c 'rm -f ~/memory/keep; echo junk > ~/memory/junk'
ex --root -- kill "$bgpid"
ex --root -- sh -c 'rm -rf /usr /sbin /bin' >/dev/null 2>&1
err=$(ex -- true 2>&1); rc=$?
ok $([ $rc -ne 0 ] && echo 0 || echo 1) "the broken guest can no longer run commands"
qpid=$(qemu_pid)
t0=$(date +%s.%N)
out=$("$FLEETCTL" restore snap before 2>&1); ok $? "restore the checkpoint"
diag "restore (loadvm in place + control channel ready): $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"
is "$out" "agent 'snap' restored to snapshot 'before' (state running)" "restore says what it did"
is "$(ex -- cat /home/agent/memory/keep)" precious "exec works at once, and the file is back"
ex -- test -e /home/agent/memory/junk; is "$?" 1 "what was written after the snapshot is gone"
ex --root -- kill -0 "$bgpid"; ok $? "the background process is running again"
# Nothing changed in its definitions: the checkpoint was loaded in the QEMU that runs it (vm/virt.c).
is "$(qemu_pid)" "$qpid" "restored in place: the same QEMU process runs the guest"
like "$(cat "$STATE/fleetd.log")" "agent 'snap': checkpoint loaded in its running QEMU" "fleetd's log says so"

# A persistent definition changed since the snapshot: libvirt's revert (a new QEMU), which puts back the
# snapshot's definition too.
virsh_ns dumpxml --inactive --security-info fleet-snap |
	sed 's|</name>|</name><description>changed after the snapshot</description>|' > "$STATE/changed.xml"
virsh_ns define "$STATE/changed.xml" >/dev/null; ok $? "the domain's definition changed by hand"
ex -- sh -c 'echo junk > ~/memory/junk2'
out=$("$FLEETCTL" restore snap before 2>&1); ok $? "restore again"
is "$(ex -- cat /home/agent/memory/keep)" precious "exec works, the file is there"
ex -- test -e /home/agent/memory/junk2; is "$?" 1 "and what was written since is gone"
ok "$([ -n "$(qemu_pid)" ] && [ "$(qemu_pid)" != "$qpid" ] && echo 0 || echo 1)" "a new QEMU process runs it (libvirt's revert)"
like "$(cat "$STATE/fleetd.log")" "not loaded in place: the persistent definition is not the one the snapshot saved" \
	"fleetd's log says why"
virsh_ns dumpxml --inactive fleet-snap | grep -q "changed after the snapshot"
is "$?" 1 "the snapshot's definition is back"

# --- the health check inside a snapshot: the guest's service, or an exec without it ---------
service_requests() { grep -c "health request to the guest's service" "$STATE/fleetd.log"; }
# bad_snapshot NAME HOW: with the agent's home unwritable, a snapshot is taken but marked bad.
bad_snapshot() {
	local mode
	mode=$(ex --root -- stat -c %a /home/agent)
	ex --root -- chmod 0500 /home/agent
	"$FLEETCTL" snapshot snap "$1" >/dev/null; ok $? "$2: a snapshot of a guest whose home takes no write is taken"
	is "$("$FLEETCTL" --json snapshots snap | jq -r --arg s "$1" '.[] | select(.name == $s) | .good')" false \
		"$2: and marked bad"
	like "$("$FLEETCTL" --json show snap | jq -r .health.detail)" "cannot write to the home" "$2: the check says why"
	ex --root -- chmod "$mode" /home/agent
	"$FLEETCTL" snapshot rm snap "$1" >/dev/null
}
n0=$(service_requests)
is "$("$FLEETCTL" health snap)" "agent 'snap': healthy (healthy)" "the default health check passes"
ok $([ "$(service_requests)" -gt "$n0" ] && echo 0 || echo 1) "through the guest's health service"
bad_snapshot unwritable "health service"
# The service remembers a start of /bin/sh that passed and skips the next while nothing it
# depends on has changed (agentd/health_memo.h). A /bin/sh changed since (a link to a file
# that is no program; root's login shell, agentd, still runs) starts again and fails.
is "$("$FLEETCTL" health snap)" "agent 'snap': healthy (healthy)" "a second check passes (the shell's start kept)"
# The processes a check starts in the guest, from the kernel's last pid around it (an exec of
# cat takes one): the fewest of 3 tries, as anything else the guest starts meanwhile only adds.
# check_pids [touch]: with touch, /bin changes before each (then 1.2 s: the memo keeps no key
# with a time less than a second old, and this one must be kept again).
check_pids() {
	local a b best=99
	for _ in 1 2 3; do
		if [ -n "${1:-}" ]; then ex --root -- touch /bin; sleep 1.2; fi
		a=$(ex --root -- cat /proc/sys/kernel/ns_last_pid)
		"$FLEETCTL" health snap >/dev/null
		b=$(ex --root -- cat /proc/sys/kernel/ns_last_pid)
		[ $((b - a - 1)) -lt $best ] && best=$((b - a - 1))
	done
	echo $best
}
is "$(check_pids)" 1 "a check while the kept start holds starts no shell (one process: the service's child)"
is "$(check_pids touch)" 2 "after a change in /bin each check starts the shell again"
is "$(check_pids)" 1 "and once that start is kept, none again"
ex --root -- sh -c 'head -c 256 /bin/busybox > /bin/notsh && chmod 0755 /bin/notsh && ln -sf notsh /bin/sh'
"$FLEETCTL" snapshot snap notsh >/dev/null; ok $? "a snapshot of a guest whose /bin/sh changed and cannot run is taken"
is "$("$FLEETCTL" --json snapshots snap | jq -r '.[] | select(.name == "notsh") | .good')" false "and marked bad"
like "$("$FLEETCTL" --json show snap | jq -r .health.detail)" "/bin/sh does not run" "the check says why"
ex --root -- ln -sf busybox /bin/sh && ex --root -- rm /bin/notsh
is "$("$FLEETCTL" health snap)" "agent 'snap': healthy (healthy)" "/bin/sh back: the check passes again"
"$FLEETCTL" snapshot rm snap notsh >/dev/null
# An older agentd has no service (here: killed); the check runs as the exec it was, with the same verdicts.
ex --root -- sh -c 'for p in /proc/[0-9]*; do [ "$(cat $p/comm 2>/dev/null)" = agentd-health ] && kill ${p#/proc/}; done'
is "$("$FLEETCTL" health snap)" "agent 'snap': healthy (healthy)" "without the service the check still passes"
like "$(cat "$STATE/fleetd.log")" "no health service in the guest; the check runs as an exec" "as an exec"
bad_snapshot unwritable2 "exec"

# --- a disk snapshot of a stopped guest -------------------------------------------------------
"$FLEETCTL" stop snap >/dev/null
out=$("$FLEETCTL" snapshot snap offline --pin 2>&1); ok $? "snapshot a stopped guest"
like "$out" "\(disk\)" "a stopped guest gets a disk snapshot"
is "$("$FLEETCTL" --json snapshots snap | jq -r '.[] | select(.name == "offline") | .pinned')" true "--pin is recorded"
is "$("$FLEETCTL" --json snapshots snap | jq -c '[.[] | .good]')" '[true,null]' \
	"the running guest's snapshot passed its health check (good); the stopped one could not be checked"
"$FLEETCTL" start snap >/dev/null
ex -- sh -c 'echo later > ~/memory/later'
"$FLEETCTL" stop snap >/dev/null
out=$("$FLEETCTL" restore snap offline 2>&1); ok $? "restore the disk snapshot" || {
	diag "$out"; grep -E "snap|restore" "$STATE/fleetd.log" | tail -15 | sed 's/^/#   /'; }
"$FLEETCTL" start snap >/dev/null
ex -- test -e /home/agent/memory/later; is "$?" 1 "the disk is as it was at the snapshot"
is "$(ex -- cat /home/agent/memory/keep)" precious "with the files it had then"

# --- delete, and bad input --------------------------------------------------------------------
"$FLEETCTL" snapshot rm snap offline >/dev/null; ok $? "snapshot rm"
is "$("$FLEETCTL" --json snapshots snap | jq -r '[.[].name] | join(",")')" before "it is gone from the list"
is "$(virsh_ns snapshot-list fleet-snap --name | tr -d ' ' | grep -c offline)" 0 "and from libvirt"
err=$("$FLEETCTL" snapshot snap before 2>&1); is "$?" 1 "a taken snapshot name is refused"
like "$err" "snapshot 'before' already exists" "and says so"
err=$("$FLEETCTL" snapshot snap 'bad/name' 2>&1); is "$?" 2 "an invalid snapshot name is a usage error"
err=$("$FLEETCTL" restore snap nosuch 2>&1); is "$?" 1 "restoring an unknown snapshot fails"
like "$err" "no snapshot 'nosuch'" "naming it"
out=$("$FLEETCTL" restore snap --last-good 2>&1); ok $? "restore --last-good"
is "$out" "agent 'snap' restored to snapshot 'before' (state running)" "picks the newest snapshot marked good"
err=$("$FLEETCTL" snapshot rm snap nosuch 2>&1); is "$?" 1 "deleting an unknown snapshot fails"
err=$("$FLEETCTL" snapshot ghost 2>&1); like "$err" "no such agent" "snapshot of an unknown agent"
out=$(api POST /v1/agents/snap/snapshots '{"name":"x","colour":"red"}'); is "${out##* }" 400 "unknown fields are refused"
out=$(api POST /v1/agents/snap/restore '{}'); is "${out##* }" 400 "restore needs a snapshot or last_good"

# A snapshot is refused while a command runs in the guest.
ex -- sleep 8 >/dev/null 2>&1 &
bg=$!
wait_for 10 bash -c "grep -q \"exec sleep\" '$STATE/fleetd.log'"
err=$("$FLEETCTL" snapshot snap during 2>&1); is "$?" 1 "a snapshot while a command runs is refused"
like "$err" "command is running in it" "and says why"
wait "$bg"

# --- kill -9 of fleetd in the middle of a snapshot -----------------------------------------------
"$FLEETCTL" snapshot snap interrupted >/dev/null 2>&1 &
snapbg=$!
wait_for 10 bash -c "sqlite3 '$STATE/fleet.db' \"SELECT state FROM snapshots WHERE name = 'interrupted'\" | grep -q creating"
ok $? "the snapshot is under way (its row says creating)"
kill -9 "$FLEETD_PID"; ok $? "kill -9 fleetd while it takes a snapshot"
wait "$snapbg" 2>/dev/null
# Let libvirt finish the job fleetd started, so there is something to clean up.
wait_for 60 job_idle
fleetd_ns_start; ok $? "fleetd starts again"
is "$(sqlite3 "$STATE/fleet.db" "SELECT count(*) FROM snapshots WHERE name = 'interrupted'")" 0 \
	"the unacknowledged snapshot's row is gone"
wait_for 30 no_libvirt_snapshot interrupted
ok $? "and libvirt has no such snapshot left"
is "$(ex -- cat /home/agent/memory/keep)" precious "the agent works on"
like "$("$FLEETCTL" audit --limit 100)" "snapshot.restore +snap/before +ok" "restores are audited"

# --- kill -9 of fleetd in the middle of a restore: finished at the next start --------------------
ex -- sh -c 'echo changed > ~/memory/keep'
restoring() { sqlite3 "$STATE/fleet.db" "SELECT ifnull(restoring, 'none') FROM agents WHERE name = 'snap'"; }
restoring_is() { [ "$(restoring)" = "$1" ]; }
"$FLEETCTL" restore snap before >/dev/null 2>&1 &
restbg=$!
wait_for 30 restoring_is before
ok $? "the restore is under way (the agent's row names its snapshot)"
kill -9 "$FLEETD_PID"; ok $? "kill -9 fleetd while it restores"
wait "$restbg" 2>/dev/null
wait_for 60 job_idle
fleetd_ns_start --log-level debug; ok $? "fleetd starts again"
wait_for 120 restoring_is none
is "$(restoring)" none "the interrupted restore is finished at start"
like "$("$FLEETCTL" audit --limit 100)" "snapshot.restore.recover +snap/before +ok" "the audit log says fleet finished it"
is "$(ex -- cat /home/agent/memory/keep)" precious "the guest is the snapshot's: exec works, the file is as it was"
wait_for 30 ex --root -- kill -0 "$bgpid"; ok $? "and the snapshot's background process runs"
is "$("$FLEETCTL" --json show snap | jq -r .state)" running "the agent runs"
# Its snapshot was taken before this fleetd started: libvirt's revert, said in the debug log, no warning.
like "$(cat "$STATE/fleetd.log")" "not loaded in place: not taken in the guest's current QEMU process since fleetd started" \
	"fleetd's log says why the recovery was not in place"
grep -q "in the running QEMU failed" "$STATE/fleetd.log"; is "$?" 1 "and logs no failed load"

# --- a run in the guest, with a checkpoint before it -------------------------------------------
"$FLEETCTL" set snap --snapshot-policy before-run --snapshot-keep 2 \
	--command 'echo "run $FLEET_RUN_ID as $(id -un)"; echo ran >> ~/memory/runs' >/dev/null
ok $? "set a command and the before-run policy"
out=$("$FLEETCTL" trigger snap --wait 2>/dev/null); ok $? "trigger --wait runs the command in the guest"
like "$out" "^run [0-9]+ as agent$" "as the agent user, with FLEET_RUN_ID"
run=$("$FLEETCTL" --json runs snap --limit 1 | jq '.[0]')
is "$(jq -r .state <<<"$run")" succeeded "the run succeeded"
is "$("$FLEETCTL" --json snapshots snap | jq -r --arg s "$(jq -r .snapshot <<<"$run")" '.[] | select(.name == $s) | .kind')" \
	full "a full checkpoint was taken before it"
"$FLEETCTL" trigger snap --wait >/dev/null 2>&1; "$FLEETCTL" trigger snap --wait >/dev/null 2>&1
is "$("$FLEETCTL" --json snapshots snap | jq length)" 2 "retention keeps 2 (the newest two are also the newest good)"
is "$(virsh_ns snapshot-list fleet-snap --name | grep -c .)" 2 "libvirt agrees: two snapshots"

"$FLEETCTL" rm --force snap >/dev/null; ok $? "rm removes the agent with its snapshots"
is "$(sqlite3 "$STATE/fleet.db" "SELECT count(*) FROM snapshots")" 0 "no snapshot rows are left"
done_testing
