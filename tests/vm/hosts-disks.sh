#!/bin/bash
# A remote VM agent's disks (#15) on a second private libvirtd
# (tests/lib/host2.sh, qemu+tcp on a veth pair inside the test's own
# namespaces), through libvirt's storage API only. One TCG guest on h2:
#  - backup --with-disks while it runs (its volumes downloaded from h2, the
#    guest paused and resumed), the agent removed (its domain and volumes
#    gone from h2), fleetd's state dir wiped, --restore-from: its volumes
#    uploaded to h2's pool again (the overlay backed by h2's base volume),
#    its domain defined there with its old UUID; it starts with its file and
#    memory, and its snapshot (a checkpoint) restores there;
#  - fleetctl upgrade to a rebuilt image (a changed agentd): the new image
#    reaches h2 at the next start (uploaded once, its marker last), the
#    domain boots its kernel, the guest runs the new agentd, its disk data
#    kept, its disk still on the base it was made on; a second start
#    uploads nothing;
#  - its memory disk grown back at a start after a restore brought back a
#    snapshot taken before its quota grew;
#  - fleetd stopped (TERM) and killed (-9) while a backup copy has the
#    guest paused: its next start resumes the guest.
. "$FLEET_SRCDIR/tests/lib/common.sh"

. "$FLEET_SRCDIR/tests/lib/vmfleet.sh"
vmfleet_setup --tcg jq sqlite3 qemu-img

. "$FLEET_SRCDIR/tests/lib/host2.sh"
host2_start

A=rd$(test_run_id)	# a name of this run's own
H2_POOL=${H2[2]}/fleet	# /var/lib/libvirt/fleet on h2, as seen from outside its namespace
ID=$(cd "$STATE/images" && sha256sum vmlinuz initramfs.img base.qcow2 | sha256sum | cut -d' ' -f1)
ex() { "$FLEETCTL" exec "$A" "$@"; }
m() { "$FLEETCTL" memory "$A" "$@"; }
vols() { virsh_h2 vol-list fleet 2>/dev/null | awk -v a="agent-$A." 'index($1, a) == 1 { print $1 }' | sort | tr '\n' ' '; }
backing() { qemu-img info -U --output=json "$1" | jq -r '."backing-filename"'; }
vsize() { qemu-img info -U --output=json "$1" | jq -r '."virtual-size"'; }
memdisk_bytes() { echo $(( ($1 + $1 / 25 + 8) << 20 )); }	# vm_memdisk_mib's size for a quota

fleetd_ns_start; ok $? "fleetd starts inside the first namespace"
"$FLEETCTL" host add h2 "$H2_URI" >/dev/null; ok $? "host add h2 ($H2_URI)"
out=$("$FLEETCTL" create "$A" --host h2 --memory-quota 64 --health-interval 0 --restart never 2>&1)
ok $? "create $A on h2: $out"
"$FLEETCTL" start "$A" >/dev/null; ok $? "start $A (a TCG guest on h2)"

# --- backup --with-disks of the remote agent, removal, restore -----------------------------------
printf 'kept in the backup' | m put note; ok $? "a memory key"
ex -- sh -c 'echo in-snap > /home/agent/keep && sync'; ok $? "a file in the guest"
"$FLEETCTL" snapshot "$A" s1 >/dev/null; ok $? "snapshot s1 (a checkpoint of the running guest on h2)"
ex -- sh -c 'echo after-snap > /home/agent/keep && sync'; ok $? "the file changed after it"
uuid=$(virsh_h2 domuuid "fleet-$A")
BK=$TEST_TMP/backup
out=$(echo "rd pass" | "$FLEETCTL" backup "$BK" --with-disks 2>&1); ok $? "backup --with-disks while the remote guest runs: $out"
is "$(ex -- cat /home/agent/keep)" after-snap "the guest is resumed: exec works after"
like "$(cat "$STATE/fleetd.log")" "agent '$A': paused [0-9.]+ s while its disks were copied" "the pause is logged"
is "$(jq -r ".agents[] | select(.name == \"$A\") | .copied | join(\" \")" "$BK/manifest.json")" disks \
	"the manifest says its disks are in"
is "$(jq -r ".agents[] | select(.name == \"$A\") | .domain_uuid" "$BK/manifest.json")" "$uuid" "with its domain's UUID on h2"
is "$(jq -r ".agents[] | select(.name == \"$A\") | [.vm_files[].as] | sort | join(\" \")" "$BK/manifest.json")" \
	"client disk.qcow2 host host.fingerprint memory.qcow2 seed.img" "its overlay, memory disk, seed and keys"
is "$(backing "$BK/vm-$A-disk.qcow2")" "/var/lib/libvirt/fleet/image-$ID.base.qcow2" \
	"the overlay in the backup is h2's volume (backed by h2's base volume)"
is "$(qemu-img info -U --output=json "$BK/vm-$A-disk.qcow2" | jq -r '[.snapshots[]?.name] | join(" ")')" s1 \
	"it holds the internal snapshot s1"
is "$(stat -c '%a %U' "$BK/vm-$A-disk.qcow2")" "600 root" "the downloaded file is 0600, root's"
is "$(vsize "$BK/vm-$A-memory.qcow2")" "$(memdisk_bytes 64)" "the memory disk is h2's volume, sized for its quota"

"$FLEETCTL" rm --force "$A" >/dev/null; ok $? "the agent is removed"
! virsh_h2 dominfo "fleet-$A" >/dev/null 2>&1; ok $? "its domain is gone from h2"
is "$(vols)" "" "and its volumes"
stop_fleetd; ok $? "fleetd stops"
rm -rf "$STATE" && mkdir -p "$STATE/images" "$STATE/vms" && echo qemu > "$STATE/vms/virt-type" &&
	cp "$IMG/vmlinuz" "$IMG/initramfs.img" "$IMG/base.qcow2" "$IMG/manifest.json" "$STATE/images/"
ok $? "fleetd's state dir wiped (the image left in image_dir)"
printf 'rd pass\n' | vmns_exec "$FLEETD" --state-dir "$STATE" --socket "$SOCK" --config "$TEST_TMP/none.conf" \
	--restore-from "$BK" 2>>"$TEST_TMP/fleetd.start"; ok $? "fleetd --restore-from"
FLEETD_PID=$(head -1 "$STATE/fleetd.lock"); _pids+=("$FLEETD_PID")
like "$(cat "$STATE/fleetd.log")" "restore: agent '$A' \(vm\) restored on its disks \(memory store included\), 1 snapshot" \
	"its log says so, with its snapshot"
like "$(cat "$STATE/fleetd.log")" "domain fleet-$A defined again on host h2" "on h2"
is "$(vols)" "agent-$A.disk.qcow2 agent-$A.memory.qcow2 agent-$A.seed.img " "its volumes are in h2's pool again"
is "$(backing "$H2_POOL/agent-$A.disk.qcow2")" "/var/lib/libvirt/fleet/image-$ID.base.qcow2" \
	"its overlay backed by h2's base volume"
is "$(virsh_h2 domuuid "fleet-$A")" "$uuid" "its domain on h2 has its old UUID"
! virsh_ns dominfo "fleet-$A" >/dev/null 2>&1; ok $? "and none is on fleetd's own libvirtd"
[ ! -e "$STATE/vms/$A/disk.qcow2" ] && [ ! -e "$STATE/vms/$A/disk.qcow2.restore" ] && [ -s "$STATE/vms/$A/seed.img" ]
ok $? "here only its seed (and keys), as a remote agent has them"
is "$("$FLEETCTL" --json show "$A" | jq -r '"\(.state) \(.host)"')" "stopped h2" "show: stopped on h2"
"$FLEETCTL" start "$A" >/dev/null; ok $? "the restored agent boots on h2"
is "$(ex -- cat /home/agent/keep)" after-snap "its file is there"
is "$(m get note)" "kept in the backup" "and its memory key"
"$FLEETCTL" restore "$A" s1 >/dev/null; ok $? "its snapshot s1 restores on h2"
is "$(ex -- cat /home/agent/keep)" in-snap "to what the snapshot held"

# --- upgrade: a rebuilt image reaches h2 at the next start ----------------------------------------
IMGDIR=$STATE/images	# fleetd's image_dir: the default
AGENTD2=$TEST_TMP/agentd
cp "$AGENTD" "$AGENTD2" && printf '\n' >> "$AGENTD2"	# a harmless change: a byte after the ELF's end
OLD_SHA=$(sha256sum "$AGENTD" | cut -d' ' -f1)
NEW_SHA=$(sha256sum "$AGENTD2" | cut -d' ' -f1)
guest_agentd() { ex --root -- sha256sum /usr/bin/agentd | cut -d' ' -f1; }
is "$(guest_agentd)" "$OLD_SHA" "it runs the agentd it was built with"
"$FLEET_SRCDIR/images/build-image.sh" --agentd "$AGENTD2" --dropbear "$IMAGE_DROPBEAR" --out "$IMGDIR" 2>&1 |
	sed 's/^/#   /'
ok "${PIPESTATUS[0]}" "the image is rebuilt in image_dir with a changed agentd"
ID2=$(cd "$IMGDIR" && sha256sum vmlinuz initramfs.img base.qcow2 | sha256sum | cut -d' ' -f1)
[ "$ID2" != "$ID" ]; ok $? "another image: ${ID2:0:12}"
out=$("$FLEETCTL" --json upgrade "$A"); ok $? "fleetctl upgrade $A (running on h2)"
is "$(jq -r '"\(.changed) \(.to)"' <<<"$out")" "true $ID2" "it will boot the new image"
[ ! -e "$H2_POOL/image-$ID2.complete" ]; ok $? "nothing is sent to h2 yet (at its next start)"
ex -- sh -c 'echo across-upgrade > /home/agent/keep && sync'; ok $? "a file written before the restart"
"$FLEETCTL" restart "$A" >/dev/null; ok $? "the upgraded agent restarts (and boots) on h2"
like "$(cat "$STATE/fleetd.log")" "agent '$A': its domain on host h2 boots image sha256:${ID2:0:12}" "its log says so"
is "$(grep -c "uploading image sha256:${ID2:0:12} to" "$STATE/fleetd.log")" 1 "the new image was uploaded to h2 once"
[ -s "$H2_POOL/image-$ID2.complete" ]; ok $? "its marker is there, last"
cmp -s "$H2_POOL/image-$ID2.vmlinuz" "$IMGDIR/vmlinuz" && cmp -s "$H2_POOL/image-$ID2.initramfs.img" "$IMGDIR/initramfs.img"
ok $? "its kernel and initramfs volumes are the rebuilt image's"
like "$(virsh_h2 dumpxml "fleet-$A")" "<kernel>/var/lib/libvirt/fleet/image-$ID2.vmlinuz</kernel>" "h2's domain boots the new kernel"
is "$(virsh_h2 domuuid "fleet-$A")" "$uuid" "the same domain (its UUID)"
is "$(guest_agentd)" "$NEW_SHA" "the guest runs the new image's agentd"
is "$(ex -- cat /home/agent/keep)" across-upgrade "its file is still there"
is "$(m get note)" "kept in the backup" "and its memory"
is "$(backing "$H2_POOL/agent-$A.disk.qcow2")" "/var/lib/libvirt/fleet/image-$ID.base.qcow2" \
	"its disk keeps the base it was made on"
mtime=$(stat -c %Y "$H2_POOL/image-$ID2.base.qcow2")
"$FLEETCTL" restart "$A" >/dev/null; ok $? "restart again"
is "$(grep -c "uploading image sha256:${ID2:0:12} to" "$STATE/fleetd.log")" 1 "nothing uploaded again"
is "$(stat -c %Y "$H2_POOL/image-$ID2.base.qcow2")" "$mtime" "the base volume untouched"
is "$(guest_agentd)" "$NEW_SHA" "still the new agentd"

# --- its memory disk grown back after a restore to before a quota grow -----------------------------
"$FLEETCTL" stop "$A" >/dev/null; ok $? "stop $A"
"$FLEETCTL" snapshot "$A" small >/dev/null; ok $? "a disk snapshot at quota 64 MiB"
"$FLEETCTL" set "$A" --memory-quota 96 >/dev/null; ok $? "set --memory-quota 96"
is "$(vsize "$H2_POOL/agent-$A.memory.qcow2")" "$(memdisk_bytes 96)" "its memory disk volume grew on h2"
"$FLEETCTL" restore "$A" small >/dev/null; ok $? "restore the snapshot from before the grow"
is "$(virsh_h2 domstate "fleet-$A")" "shut off" "it stays off"
is "$(vsize "$H2_POOL/agent-$A.memory.qcow2")" "$(memdisk_bytes 64)" "the revert brought back the smaller memory disk"
"$FLEETCTL" start "$A" >/dev/null; ok $? "start $A"
like "$(cat "$STATE/fleetd.log")" "agent '$A': its memory disk on host h2 grew back to 107 MiB" "its log says it grew back"
is "$(vsize "$H2_POOL/agent-$A.memory.qcow2")" "$(memdisk_bytes 96)" "its volume is its quota's size again"
read -r fs_blocks fs_bsize < <(ex -- stat -f -c '%b %S' /home/agent/memory)
fs_bytes=$(( ${fs_blocks:-0} * ${fs_bsize:-0} ))
[ "$fs_bytes" -ge $((96 << 20)) ]; ok $? "its ~/memory file system grew with it: $(( fs_bytes >> 20 )) MiB"

# --- a backup's pause outlives no fleetd: stopped (TERM), then killed (-9), while the copy has the
# guest paused. The link at 1 Mbit/s keeps the download of its volumes going long enough; the next
# start resumes the guest (it once stayed paused until an operator restarted it), and on SIGTERM
# fleetd frees nothing the backup's worker still uses.
h2_paused() { [ "$(virsh_h2 domstate "fleet-$A")" = paused ]; }
for sig in TERM KILL; do
	vmns_exec tc qdisc add dev fleet-h1 root tbf rate 1mbit burst 32kb latency 2s
	ok $? "the link to h2 slowed to 1 Mbit/s ($sig)"
	echo "rd pass" | "$FLEETCTL" backup "$TEST_TMP/bk-$sig" --with-disks > "$TEST_TMP/bk-$sig.out" 2>&1 &
	bk_pid=$!
	wait_for 60 h2_paused; ok $? "the backup copy has its guest paused on h2"
	[ -e "$STATE/vms/$A/backup-paused" ]; ok $? "with a record of the pause in its dir"
	stop_fleetd "$sig"; ok $? "fleetd stopped by SIG$sig during the copy"
	if [ "$sig" = TERM ]; then
		like "$(cat "$STATE/fleetd.log")" "1 job\(s\) still on worker threads .*backup copy.*not waiting" \
			"it leaves the copy on its worker thread"
		! grep -qE "AddressSanitizer|Segmentation|double free|corrupted" "$STATE/fleetd.log"
		ok $? "nothing freed under the worker"
	fi
	wait "$bk_pid"; isnt_rc $?; ok $? "the backup fails (answered 503 on SIGTERM, never on SIGKILL)"
	vmns_exec tc qdisc del dev fleet-h1 root; ok $? "the link to h2 at full speed again"
	h2_paused; ok $? "its guest is still paused with fleetd gone"
	fleetd_ns_start; ok $? "fleetd starts again"
	is "$(virsh_h2 domstate "fleet-$A")" running "fleetd's start resumed the guest"
	is "$(grep -c "agent '$A': its guest resumed (fleetd stopped while a backup copy had it paused)" "$STATE/fleetd.log")" \
		"$([ "$sig" = TERM ] && echo 1 || echo 2)" "its log says so"
	[ ! -e "$STATE/vms/$A/backup-paused" ]; ok $? "the record is gone"
	is "$(ex -- echo alive)" alive "exec works in it"
done

"$FLEETCTL" rm --force "$A" >/dev/null; ok $? "rm $A"
is "$(vols)" "" "its volumes are gone from h2"
done_testing
