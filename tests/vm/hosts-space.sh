#!/bin/bash
# A nearly full disk on another host (#15) during a remote VM agent's
# snapshots. Its disks are volumes in the fleet pool there, and fleetd asks
# that pool how much is free (libvirt's storage API: a refresh, then its
# info), as it asks the file system for a local agent (snapshot-full.sh).
# h2's pool directory is a small tmpfs mounted inside h2's own mount
# namespace, so no real disk fills. A checkpoint of the running guest that
# cannot fit is refused before it starts (507 no_space, the pool and host
# named) and leaves nothing behind, the guest running on; a disk-only
# snapshot fits; a delete on a completely full pool is refused (libvirt
# would drop its record and leave it in the image); once space is freed the
# delete works.
. "$FLEET_SRCDIR/tests/lib/common.sh"

. "$FLEET_SRCDIR/tests/lib/vmfleet.sh"
vmfleet_setup --tcg jq fallocate df qemu-img

. "$FLEET_SRCDIR/tests/lib/host2.sh"
host2_start

A=rs$(test_run_id)	# a name of this run's own
POOL=/var/lib/libvirt/fleet	# inside h2's mount namespace
in_h2() { nsenter -t "${H2[0]}" -m -- "$@"; }
avail() { in_h2 df -B1 --output=avail "$POOL" | tail -1 | tr -d ' '; }
fill() {	# fill BYTES: leave BYTES free in the pool (0: none at all)
	local a; a=$(avail)
	[ "$a" -gt "$1" ] || return 0
	in_h2 fallocate -l $((a - $1)) "$POOL/filler.$((++_fills))"
}
_fills=0
unfill() { in_h2 sh -c "rm -f '$POOL'/filler.*"; }
ex() { "$FLEETCTL" exec "$A" "$@"; }
snaps() {	# fleet's list, libvirt's on h2, and what the overlay volume holds
	local fleet lv qc
	fleet=$("$FLEETCTL" --json snapshots "$A" | jq -r '[.[].name] | sort | join(",")')
	lv=$(virsh_h2 snapshot-list "fleet-$A" --name | grep -v '^$' | sort | paste -sd, -)
	qc=$(in_h2 qemu-img info -U --output=json "$POOL/agent-$A.disk.qcow2" | jq -r '[.snapshots[]?.name] | sort | join(",")')
	echo "fleet=$fleet libvirt=$lv qcow2=$qc"
}
want() { echo "fleet=$1 libvirt=$1 qcow2=$1"; }

in_h2 mkdir -p "$POOL" && in_h2 mount -t tmpfs -o size=224m,mode=0711 fleet-pool "$POOL"
ok $? "h2's pool directory is a 224 MiB tmpfs"
fleetd_ns_start; ok $? "fleetd starts inside the first namespace"
"$FLEETCTL" host add h2 "$H2_URI" >/dev/null; ok $? "host add h2"
out=$("$FLEETCTL" create "$A" --host h2 --health-interval 0 --restart never 2>&1); ok $? "create $A on h2: $out"
"$FLEETCTL" start "$A" >/dev/null; ok $? "start $A (a 256 MiB TCG guest on h2)"
diag "the pool on h2 after the start: $(( $(avail) >> 20 )) MiB free"

# --- a checkpoint that cannot fit: refused before it starts ----------------------------------
err=$("$FLEETCTL" snapshot "$A" big 2>&1); is "$?" 1 "a checkpoint of the running guest fails"
diag "$err"
like "$err" "the host disk is nearly full: [0-9.]+ MiB free in pool fleet on host h2, and a checkpoint of the running guest may need up to 288 MiB" \
	"the error names the pool and its host, and what the checkpoint may need"
out=$(api POST "/v1/agents/$A/snapshots" '{"name":"big"}')
is "${out##* }|$(printf '%s' "${out% *}" | jq -r .code)" "507|no_space" "the API answers 507 no_space"
is "$(snaps)" "$(want "")" "no snapshot anywhere: fleet, libvirt on h2, the overlay volume"
is "$(virsh_h2 domstate "fleet-$A")" running "the guest runs on"
is "$(ex -- echo alive)" alive "exec works"

# --- a disk-only snapshot fits; a delete on a full pool is refused -----------------------------
"$FLEETCTL" stop "$A" >/dev/null; ok $? "stop $A"
out=$("$FLEETCTL" snapshot "$A" off 2>&1); ok $? "a disk-only snapshot fits: $out"
is "$(snaps)" "$(want off)" "and is known everywhere"
fill 0; is "$(avail)" 0 "fill the pool completely"
err=$("$FLEETCTL" snapshot rm "$A" off 2>&1); is "$?" 1 "deleting a snapshot on a full pool is refused"
diag "$err"
like "$err" "the host disk is full \(0.0 MiB free in pool fleet on host h2\).*free some space first" "saying why and where"
is "$(snaps)" "$(want off)" "the snapshot is still everywhere"
unfill
"$FLEETCTL" snapshot rm "$A" off >/dev/null; ok $? "once space is freed, the delete works"
is "$(snaps)" "$(want "")" "the snapshot is gone from fleet, libvirt and the volume"

"$FLEETCTL" rm --force "$A" >/dev/null; ok $? "rm $A"
"$FLEETCTL" host rm h2 >/dev/null; ok $? "host rm h2"
done_testing
