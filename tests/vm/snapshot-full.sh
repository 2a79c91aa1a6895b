#!/bin/bash
# A full host disk during a VM agent's snapshots. vms/ (where disk.qcow2
# lives) is a small tmpfs mounted inside the test's own mount namespace, so
# the host's disk is never filled. A checkpoint of a running guest that cannot
# fit, a disk-only snapshot and a delete on a completely full disk all fail
# with an error that says the disk is full, and leave nothing behind: no
# snapshot row, no libvirt snapshot, no snapshot inside disk.qcow2. The guest
# keeps working, earlier snapshots restore, and once space is freed snapshots
# and deletes work again.
. "$FLEET_SRCDIR/tests/lib/common.sh"

. "$FLEET_SRCDIR/tests/lib/vmfleet.sh"
vmfleet_setup --tcg fallocate df du qemu-img jq sqlite3

VMS=$STATE/vms
VMS_MIB=448	# a 256 MiB guest: its first checkpoint fits (~100 MiB used after it), not a second one once filled
ex() { "$FLEETCTL" exec full "$@"; }
avail() { vmns_exec df -B1 --output=avail "$VMS" | tail -1 | tr -d ' '; }
# fill BYTES: leave BYTES free on the tmpfs (0: none at all).
fill() {
	local a; a=$(avail)
	[ "$a" -gt "$1" ] || return 0
	vmns_exec fallocate -l $((a - $1)) "$VMS/filler.$((++_fills))"
}
_fills=0
unfill() { vmns_exec sh -c "rm -f '$VMS'/filler.*"; }
qcow2_bytes() { vmns_exec du -B1 "$VMS/full/disk.qcow2" | cut -f1; }
# The snapshots as fleet lists them, as its database holds them (any state),
# as libvirt knows them and as disk.qcow2 holds them; all must agree.
snaps() {
	local fleet db lv qc
	fleet=$("$FLEETCTL" --json snapshots full | jq -r '[.[].name] | sort | join(",")')
	db=$(sqlite3 "$STATE/fleet.db" "SELECT group_concat(name || ':' || state, ',') FROM (SELECT name, state FROM snapshots ORDER BY name)")
	lv=$(virsh_ns snapshot-list fleet-full --name | grep -v '^$' | sort | paste -sd, -)
	qc=$(vmns_exec qemu-img info -U --output=json "$VMS/full/disk.qcow2" | jq -r '[.snapshots[]?.name] | sort | join(",")')
	echo "fleet=$fleet db=$db libvirt=$lv qcow2=$qc"
}
want() { local l=$1 d; d=$(echo "$1" | sed 's/\([^,]*\)/\1:ready/g'); echo "fleet=$l db=$d libvirt=$l qcow2=$l"; }
domstate() { virsh_ns domstate fleet-full --reason; }

vmns_exec mount -t tmpfs -o size=${VMS_MIB}m,mode=0711 fleet-full-vms "$VMS"
ok $? "a $VMS_MIB MiB tmpfs on vms/ inside the test's mount namespace"
vmns_exec sh -c "echo qemu > '$VMS/virt-type'"
fleetd_ns_start; ok $? "fleetd starts inside the namespace"
"$FLEETCTL" create full --backend vm --memory 256 >/dev/null && "$FLEETCTL" start full >/dev/null
ok $? "a 256 MiB VM agent runs"
is "$(vmns_exec findmnt -n -o FSTYPE --target "$VMS/full/disk.qcow2")|$(ls -A "$VMS")" "tmpfs|virt-type" \
	"its disk is on the tmpfs, not on the host's disk"

ex -- sh -c 'echo precious > ~/memory/keep'
out=$("$FLEETCTL" snapshot full before 2>&1); ok $? "a checkpoint of the running guest while there is room"
is "$out" "agent 'full': snapshot 'before' taken (full)" "it is a full checkpoint"
diag "after it: $(( $(avail) >> 20 )) MiB free, disk.qcow2 $(( $(qcow2_bytes) >> 20 )) MiB"

# --- a checkpoint that cannot fit -----------------------------------------------------------
fill $((64 << 20)); ok $? "fill the disk up to 64 MiB free"
q0=$(qcow2_bytes)
err=$("$FLEETCTL" snapshot full during 2>&1); is "$?" 1 "a checkpoint that needs more than that fails"
diag "$err"
like "$err" "snapshot 'during' failed: the host disk is nearly full: 6[0-9.]+ MiB free in $VMS/full" \
	"the error says the disk is full, and where"
like "$err" "free some space, or stop the agent" "and what to do"
out=$(api POST /v1/agents/full/snapshots '{"name":"during"}')
is "${out##* }|$(printf '%s' "${out% *}" | jq -r .code)" "507|no_space" "the API answers 507 no_space"
is "$(snaps)" "$(want before)" "no row, no libvirt snapshot, nothing in disk.qcow2 but the earlier snapshot"
q1=$(qcow2_bytes)
ok $([ $((q1 - q0)) -lt $((8 << 20)) ] && echo 0 || echo 1) \
	"disk.qcow2 did not grow (by $(( (q1 - q0) >> 10 )) KiB): no memory image was written"
is "$(domstate)" "running (unpaused)" "the guest runs on"
is "$(ex -- cat /home/agent/memory/keep 2>&1)" precious "exec works"
ex -- sh -c 'echo later > ~/memory/later && sync'; ok $? "and the guest can still write to its disk"
out=$("$FLEETCTL" restore full before 2>&1); ok $? "the earlier checkpoint restores with the disk still nearly full"
is "$(ex -- cat /home/agent/memory/keep 2>&1)" precious "exec works after the restore, the file is there"
ex -- test -e /home/agent/memory/later; is "$?" 1 "and what was written after the checkpoint is gone"

unfill
out=$("$FLEETCTL" snapshot full during 2>&1); ok $? "once space is freed, the checkpoint succeeds"
is "$(snaps)" "$(want before,during)" "and is known everywhere"

# --- a completely full disk: disk-only snapshot and delete ----------------------------------
"$FLEETCTL" stop full >/dev/null; ok $? "stop the guest"
fill 0; is "$(avail)" 0 "fill the disk completely"
err=$("$FLEETCTL" snapshot full offline 2>&1); is "$?" 1 "a disk-only snapshot on a full disk fails"
diag "$err"
like "$err" "snapshot 'offline' failed: the host disk is full \(0.0 MiB free in $VMS/full\)" "the error says the disk is full"
like "$err" "No space left on device" "with QEMU's own words"
is "$(snaps)" "$(want before,during)" "nothing of it is left anywhere"
vmns_exec qemu-img check -q "$VMS/full/disk.qcow2"; ok $? "disk.qcow2 is consistent (qemu-img check)"
err=$("$FLEETCTL" snapshot rm full during 2>&1); is "$?" 1 "deleting a snapshot on a full disk is refused"
diag "$err"
like "$err" "the host disk is full .*free some space first" "saying why"
is "$(snaps)" "$(want before,during)" "the snapshot is still everywhere (libvirt would have dropped only its record)"

unfill
"$FLEETCTL" snapshot rm full during >/dev/null; ok $? "once space is freed, the delete works"
is "$(snaps)" "$(want before)" "the snapshot is gone from fleet, libvirt and disk.qcow2"
out=$("$FLEETCTL" snapshot full offline 2>&1); ok $? "and a disk-only snapshot succeeds"
like "$out" "\(disk\)" "of kind disk"
is "$(snaps)" "$(want before,offline)" "known everywhere"
out=$("$FLEETCTL" restore full before 2>&1)
is "$out" "agent 'full' restored to snapshot 'before' (state running)" "the first checkpoint still restores"
is "$(ex -- cat /home/agent/memory/keep 2>&1)" precious "and the agent works"

"$FLEETCTL" rm --force full >/dev/null; ok $? "rm removes the agent"
is "$(sqlite3 "$STATE/fleet.db" "SELECT count(*) FROM snapshots")" 0 "no snapshot rows are left"
done_testing
