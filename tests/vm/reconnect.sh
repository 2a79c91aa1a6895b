#!/bin/bash
# Reconnecting to a guest that is already up: fleetd opens a new SSH session
# after a fleetd restart, after a restore (to a checkpoint that holds its
# old session: fleetd keeps its session across a snapshot, so the next exec
# needs no new one), and after virsh reverts to such a checkpoint. The guest's relay (agentd/relay.c) must open exactly one sshd
# connection per host connection, and none while no host is connected.
# It once took the virtio port's POLLIN, which the driver also reports when
# no host is connected, for the host's first bytes: it then connected to
# sshd, read 0 and started over, dozens of times a second, and every
# reconnect waited seconds for the guest's banner (docs/vm-backend.md,
# "Reconnecting to a running guest"). This test counts sshd's connections
# (dropbear logs each one on the console); how long a reconnect takes is
# only reported here: the figures belong to tests/bench/snapshot-bench.sh.
. "$FLEET_SRCDIR/tests/lib/common.sh"

. "$FLEET_SRCDIR/tests/lib/vmfleet.sh"
. "$FLEET_SRCDIR/tests/lib/schema.sh"
vmfleet_setup --tcg

# sshd_conns: connections dropbear accepted so far ("Child connection from ...").
sshd_conns() { grep -ac "Child connection from" "$STATE/vms/re/console.log"; }
# new_conns SINCE: how many since that count
new_conns() { echo $(($(sshd_conns) - $1)); }
secs_since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }'; }
# at_most_a_retry N DESCRIPTION: one connection per session; a second one only
# if fleetd's handshake timed out and it tried again (a very busy host).
at_most_a_retry() {
	if [ "$1" -ge 1 ] && [ "$1" -le 2 ]; then ok 0 "$2"; else ok 1 "$2"; diag "sshd connections: $1"; fi
}

fleetd_ns_start; ok $? "fleetd starts inside the namespace"
"$FLEETCTL" create re --backend vm --network none --health-interval 0 --restart never >/dev/null &&
	"$FLEETCTL" start re >/dev/null
ok $? "a VM agent runs"
"$FLEETCTL" exec re -- true; ok $? "exec works"

# --- no host connected: the relay sleeps ----------------------------------------------------------
stop_fleetd; ok $? "fleetd stops (the guest keeps running)"
is "$(virsh_ns domstate fleet-re | tr -d ' ')" running "the domain still runs"
c=$(sshd_conns)
sleep 3
is "$(new_conns "$c")" 0 "while no host is connected, the relay opens no sshd connection"

# --- a fleetd restart, as an upgrade: a newer fleetd migrates an older database (#14) ------------
# The database taken back to schema 12 while the guest runs: the restarted
# fleetd migrates it and adopts the same QEMU, untouched.
qemu_pid=$(vmns_exec cat /run/libvirt/qemu/fleet-re.pid)
schema_take_back "$STATE/fleet.db"; ok $? "the database is taken back to schema version 12 (guest running)"
fleetd_ns_start; ok $? "fleetd starts again"
for v in $SCHEMA_TAKEN_BACK; do
	like "$(cat "$STATE/fleetd.log")" "database migrated to schema version $v" "it migrates the database to version $v"
done
is "$(vmns_exec cat /run/libvirt/qemu/fleet-re.pid)" "$qemu_pid" "the guest's QEMU is the same process (pid ${qemu_pid:-none})"
is "$("$FLEETCTL" --json show re | jq -r .host)" local "the agent is on the local host (migration 18)"
c=$(sshd_conns); t0=$EPOCHREALTIME
"$FLEETCTL" exec re -- true; ok $? "the first exec after the restart works"
diag "first exec after a fleetd restart: $(secs_since "$t0") s"
at_most_a_retry "$(new_conns "$c")" "its new session made one sshd connection"

# --- a snapshot: fleetd keeps its session, no reconnect -------------------------------------------------
"$FLEETCTL" exec re -- sh -c 'echo kept > ~/mark'
c=$(sshd_conns)
"$FLEETCTL" snapshot re one >/dev/null; ok $? "snapshot the running guest"
t0=$EPOCHREALTIME
is "$("$FLEETCTL" exec re -- cat /home/agent/mark)" kept "the first exec after the snapshot works"
diag "first exec after the snapshot: $(secs_since "$t0") s"
is "$(new_conns "$c")" 0 "the session outlived the snapshot: no new sshd connection"
c=$(sshd_conns); fails=0
for i in 1 2 3; do
	"$FLEETCTL" snapshot re "again$i" >/dev/null && "$FLEETCTL" exec re -- true || fails=$((fails + 1))
done
is "$fails" 0 "three more snapshots, each followed by an exec"
is "$(new_conns "$c")" 0 "and no new sshd connection for them either"

# --- a restore: a new QEMU, the checkpoint's relay inside fleetd's old session ------------------------
"$FLEETCTL" exec re -- sh -c 'rm ~/mark'
"$FLEETCTL" exec re -- test -e /home/agent/mark; is $? 1 "a file is removed after the snapshot"
c=$(sshd_conns)
"$FLEETCTL" restore re one >/dev/null; ok $? "restore the checkpoint"
is "$("$FLEETCTL" exec re -- cat /home/agent/mark)" kept "exec works, on the checkpoint's files"
at_most_a_retry "$(new_conns "$c")" "the reconnect after the restore made one sshd connection"

# --- a checkpoint that holds fleetd's open session (virsh's, not fleet's) -------------------------------
# After the revert, the guest's relay is back inside that session, and fleetd's
# new connection can reach it before the notice that the old one is gone: the
# relay must give it a new sshd connection, not feed it to the old one.
virsh_ns snapshot-create-as fleet-re held --atomic >/dev/null; ok $? "virsh takes a checkpoint with fleetd's session open"
"$FLEETCTL" exec re -- true
c=$(sshd_conns); n=$(grep -ac "a new host connection began" "$STATE/vms/re/console.log")
virsh_ns snapshot-revert fleet-re held >/dev/null; ok $? "virsh reverts to it"
t0=$EPOCHREALTIME
# The first exec may still meet fleetd's dead session (fleetd notices when idle).
wait_for 120 "$FLEETCTL" exec re -- true; ok $? "exec works again"
diag "exec after virsh's revert: $(secs_since "$t0") s; the relay started over $(($(grep -ac "a new host connection began" \
	"$STATE/vms/re/console.log") - n)) time(s)"
at_most_a_retry "$(new_conns "$c")" "the reconnect after virsh's revert made one sshd connection"

"$FLEETCTL" rm --force re >/dev/null; ok $? "rm --force removes the agent"
done_testing
