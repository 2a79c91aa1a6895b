#!/bin/bash
# fleetctl move (#15): a VM agent moved offline between fleetd's own libvirtd
# and a second private libvirtd (tests/lib/host2.sh, qemu+unix through
# /proc/PID/root: nothing crosses a network), through libvirt's storage API.
# One TCG guest: made locally with memory, a secret, a run, a schedule and a
# checkpoint snapshot; the refusals (running without --stop, its own host,
# an unknown host, a draining one); fleetd killed -9 in the middle of a
# move (the agent whole on its source after the restart, the half copy on
# h2 gone, and it starts there); moved to h2 with --stop (its volumes in
# h2's pool, its overlay backed by h2's base volume, the domain and its
# snapshot on h2's libvirtd and gone here), started there with memory,
# secret and data intact, the snapshot listed and restored there; h2's
# libvirtd killed during a copy (the move fails with libvirt's reason, the
# agent stays whole here, the leftover goes before the next move); stopped
# and moved back here, memory intact, its history kept.
. "$FLEET_SRCDIR/tests/lib/common.sh"

. "$FLEET_SRCDIR/tests/lib/vmfleet.sh"
vmfleet_setup --tcg jq sqlite3 curl qemu-img

. "$FLEET_SRCDIR/tests/lib/host2.sh"
host2_start

apiq() { api "$@" | tr -d "\n"; }
H2_POOL=${H2[2]}/fleet	# /var/lib/libvirt/fleet on h2, as seen from outside its namespace
ID=$(cd "$STATE/images" && sha256sum vmlinuz initramfs.img base.qcow2 | sha256sum | cut -d' ' -f1)
mv_vols() { virsh_h2 vol-list fleet 2>/dev/null | awk '$1 ~ /^agent-mv\./ { print $1 }' | sort | tr '\n' ' '; }
host_state() { "$FLEETCTL" --json show mv | jq -r '"\(.host) \(.state)"'; }
backing() { qemu-img info -U --output=json "$1" | jq -r '."backing-filename"'; }

fleetd_ns_start; ok $? "fleetd starts inside the first namespace"
"$FLEETCTL" host add h2 "$H2_URI" >/dev/null; ok $? "host add h2 (the second libvirtd)"

# --- an agent here, with everything fleet keeps of it ------------------------------------------------
out=$("$FLEETCTL" create mv --host local --health-interval 0 --restart never --command 'echo ran' 2>&1)
ok $? "create mv on local: $out"
"$FLEETCTL" start mv >/dev/null; ok $? "start mv (a TCG guest here)"
printf 'kept across hosts' | "$FLEETCTL" memory mv put note; ok $? "memory put"
printf 'tok-%s' "$$" | "$FLEETCTL" secret set mv TOKEN >/dev/null; ok $? "a secret"
run=$("$FLEETCTL" --json trigger mv --wait | jq -r .id); like "$run" '^[0-9]+$' "a run before any move: $run"
"$FLEETCTL" schedule add mv '0 3 * * *' >/dev/null; ok $? "a schedule"
"$FLEETCTL" exec mv -- sh -c 'echo before > /home/agent/mark'; ok $? "a file in the guest"
"$FLEETCTL" snapshot mv s1 >/dev/null; ok $? "snapshot s1: a checkpoint of the running guest"
"$FLEETCTL" exec mv -- sh -c 'echo after > /home/agent/mark'; ok $? "the file changed after it"
# ~190 MiB the copy must carry (not zeros: they would be holes), so a kill finds it under way.
"$FLEETCTL" exec mv -- sh -c 'head -c 16m /dev/urandom > /tmp/r && for i in 1 2 3 4 5 6 7 8 9 10 11 12; do cat /tmp/r; done > /home/agent/big && sync' 
ok $? "190 MiB of data in the guest"
uuid=$(virsh_ns domuuid fleet-mv)

# --- refusals ----------------------------------------------------------------------------------------
out=$("$FLEETCTL" move mv h2 2>&1); isnt_rc $?; ok $? "move of a running agent without --stop is refused"
like "$out" "running; stop it first, or move it with --stop" "saying so: $out"
like "$(apiq POST /v1/agents/mv/move '{"host":"h2"}')" '"busy".* 409$' "the API: 409 busy"
like "$(apiq POST /v1/agents/mv/move '{"host":"local","stop":true}')" "on host 'local' already\",\"code\":\"already_there\"} 409$" \
	"to its own host: 409 already_there"
like "$(apiq POST /v1/agents/mv/move '{"host":"nowhere","stop":true}')" 'nowhere.* 404$' "to an unknown host: 404"
like "$(apiq POST /v1/agents/nosuch/move '{"host":"h2"}')" ' 404$' "an unknown agent: 404"
like "$(apiq POST /v1/agents/mv/move '{}')" 'names the target .*host.* 400$' "no host: 400"
"$FLEETCTL" host drain h2 >/dev/null; ok $? "drain h2"
out=$("$FLEETCTL" move mv h2 --stop 2>&1); isnt_rc $?; ok $? "move to a draining host is refused: $out"
like "$out" "draining" "saying it is draining"
"$FLEETCTL" host undrain h2 >/dev/null; ok $? "undrain h2"
is "$(host_state)" "local running" "after the refusals mv still runs here"

# --- fleetd killed -9 in the middle of a move -----------------------------------------------------
"$FLEETCTL" move mv h2 --stop >"$TEST_TMP/move1.out" 2>&1 &
mover=$!
staged() { [ -e "$STATE/vms/mv/disk.qcow2.move" ]; }
wait_fast() { local d=$((SECONDS + $1)); shift; until "$@"; do [ $SECONDS -lt $d ] || return 1; sleep 0.05; done; }
wait_fast 120 staged; ok $? "the move stops mv and stages its disk here"
# The copy runs on a worker: fleetd answers meanwhile, and the agent is busy.
is "$("$FLEETCTL" list | awk '$1 == "mv" { print $1 }')" mv "fleetd answers a list during the copy"
like "$(apiq POST /v1/agents/mv/start)" "move is under way.* 409$" "a start of mv during the copy: 409 busy"
out=$("$FLEETCTL" host rm h2 2>&1); isnt_rc $?; ok $? "host rm h2 during a move to it is refused: $out"
like "$out" "a move of agent 'mv' to host 'h2' is under way" "saying which move"
like "$(apiq DELETE /v1/hosts/h2)" " 409$" "the API: 409"
# Kill while the upload to h2 runs, if it gets that far while we look; else during the staging copy.
uploading() { [[ "$(mv_vols)" == *agent-mv.disk.qcow2* ]] || ! staged; }
wait_fast 30 uploading
phase=$([[ "$(mv_vols)" == *agent-mv.disk.qcow2* ]] && echo "uploading to h2" || echo "staging here")
[ -e "$STATE/moves/mv" ]; ok $? "its move record is on disk while it runs"
kill -KILL "$FLEETD_PID"; ok $? "fleetd killed -9 while the move was $phase"
wait "$mover"; isnt_rc $?; ok $? "the interrupted fleetctl move fails"
fleetd_ns_start; ok $? "fleetd starts again"
is "$(host_state)" "local stopped" "mv is on its source (local), stopped"
is "$(mv_vols)" "" "its half copy on h2 is gone (no agent-mv volume in h2's pool)"
virsh_h2 dominfo fleet-mv >/dev/null 2>&1; isnt_rc $?; ok $? "no fleet-mv domain on h2"
[ ! -e "$STATE/moves/mv" ] && [ ! -e "$STATE/vms/mv/disk.qcow2.move" ]; ok $? "no record or staged copy left here"
grep -q "a move from local to h2 was cut short; it is on local, its copy on h2 removed" "$STATE/fleetd.log"
ok $? "fleetd's log says what it undid"
is "$(virsh_ns domuuid fleet-mv)" "$uuid" "its domain here is the same one"
"$FLEETCTL" start mv >/dev/null; ok $? "mv starts on its source"
is "$("$FLEETCTL" exec mv -- cat /home/agent/mark)" after "its data is whole"
is "$("$FLEETCTL" memory mv get note)" "kept across hosts" "so is its memory"

# --- h2's libvirtd killed in the middle of an upload: the move fails, saying why ---------------------
h2_reachable() { [ "$("$FLEETCTL" --json host ls | jq -r '.[] | select(.name == "h2") | .reachable')" = "$1" ]; }
"$FLEETCTL" move mv h2 --stop >"$TEST_TMP/move2.out" 2>&1 &
mover=$!
wait_fast 120 staged; ok $? "a second move stages mv's disk"
on_h2() { [[ "$(mv_vols)" == *agent-mv.disk.qcow2* ]] || ! staged; }
wait_fast 30 on_h2
kill -KILL "$(h2_libvirtd_pid)"; ok $? "h2's libvirtd is killed while the move copies"
wait "$mover"; isnt_rc $?; ok $? "the move fails: $(head -c 300 "$TEST_TMP/move2.out")"
like "$(cat "$TEST_TMP/move2.out")" "cannot move: .*(libvirt|connect|stream|upload|socket|closed|end of file)" \
	"saying what libvirt said"
is "$(host_state)" "local stopped" "mv stays on local, whole"
virsh_ns dominfo fleet-mv >/dev/null 2>&1; ok $? "its domain here untouched"
h2_libvirtd_restart; ok $? "h2's libvirtd is started again"
wait_for 60 h2_reachable true; ok $? "fleetd reconnects to h2"

# --- local -> h2 ---------------------------------------------------------------------------------
out=$("$FLEETCTL" move mv h2 --stop 2>&1); ok $? "move mv h2 --stop: $out"
like "$out" "agent 'mv' moved to host h2 \(state stopped\)" "it says where"
is "$(host_state)" "h2 stopped" "show: on h2, stopped"
is "$(grep -c "a move from local to h2 was cut short; it is on local, its copy on h2 removed" "$STATE/fleetd.log")" 2 \
	"what the failed move left on h2 was removed first"
is "$(mv_vols)" "agent-mv.disk.qcow2 agent-mv.memory.qcow2 agent-mv.seed.img " \
	"h2's pool holds its disk, its memory disk and its seed"
is "$(backing "$H2_POOL/agent-mv.disk.qcow2")" "/var/lib/libvirt/fleet/image-$ID.base.qcow2" \
	"its overlay names h2's base volume (rebased here before it travelled)"
virsh_h2 vol-list fleet | grep -q "image-$ID.complete"; ok $? "the image reached h2 through the storage API"
is "$(virsh_h2 domuuid fleet-mv)" "$uuid" "h2's libvirtd has fleet-mv, the same UUID"
virsh_h2 snapshot-list fleet-mv --name | grep -qx s1; ok $? "and its snapshot s1"
virsh_h2 snapshot-dumpxml fleet-mv s1 | grep -q "$STATE"; isnt_rc $?; ok $? "naming no path of fleetd's host"
virsh_ns dominfo fleet-mv >/dev/null 2>&1; isnt_rc $?; ok $? "fleet-mv is gone from fleetd's libvirtd"
[ ! -e "$STATE/vms/mv/disk.qcow2" ] && [ ! -e "$STATE/vms/mv/memory.qcow2" ]; ok $? "and its disks from here"
[ ! -e "$STATE/moves/mv" ]; ok $? "the move record is gone"
"$FLEETCTL" start mv >/dev/null; ok $? "mv starts on h2"
is "$(virsh_h2 domstate fleet-mv)" running "h2's libvirtd runs it"
is "$("$FLEETCTL" memory mv get note)" "kept across hosts" "its memory is intact (its memory disk moved)"
is "$("$FLEETCTL" exec mv --secrets -- sh -c 'echo "$TOKEN"')" "tok-$$" "its secret is there"
is "$("$FLEETCTL" exec mv -- cat /home/agent/mark)" after "its data is intact"
is "$("$FLEETCTL" exec mv -- stat -c %s /home/agent/big)" $((192 << 20)) "all 192 MiB of it"
"$FLEETCTL" snapshots mv | grep -q '^s1 '; ok $? "snapshots lists s1"
"$FLEETCTL" restore mv s1 >/dev/null; ok $? "restore mv s1 on h2 (the checkpoint taken here)"
is "$("$FLEETCTL" exec mv -- cat /home/agent/mark)" before "the guest is back as at s1"
is "$("$FLEETCTL" memory mv get note)" "kept across hosts" "with its memory"
"$FLEETCTL" stop mv >/dev/null; ok $? "stop mv"

# --- h2 -> local ------------------------------------------------------------------------------------
out=$("$FLEETCTL" move mv local 2>&1); ok $? "move mv local: $out"
is "$(host_state)" "local stopped" "show: on local"
is "$(mv_vols)" "" "its volumes are gone from h2's pool"
virsh_h2 dominfo fleet-mv >/dev/null 2>&1; isnt_rc $?; ok $? "and its domain from h2's libvirtd"
is "$(backing "$STATE/vms/mv/disk.qcow2")" "$STATE/images/sha256/$ID/base.qcow2" \
	"its disk here names the image store's base"
virsh_ns snapshot-list fleet-mv --name | grep -qx s1; ok $? "fleetd's libvirtd has its snapshot s1"
"$FLEETCTL" start mv >/dev/null; ok $? "mv starts here again"
is "$("$FLEETCTL" memory mv get note)" "kept across hosts" "its memory is intact"
is "$("$FLEETCTL" exec mv -- cat /home/agent/mark)" before "its data as on h2"
is "$("$FLEETCTL" --json runs mv | jq -r --arg r "$run" '.[] | select(.id == ($r | tonumber)) | .state')" succeeded \
	"its run from before the moves is in its history"
is "$("$FLEETCTL" --json schedule ls mv | jq length)" 1 "its schedule is kept"
is "$("$FLEETCTL" secret ls mv | grep -c TOKEN)" 1 "its secret is kept"
"$FLEETCTL" stop mv >/dev/null; ok $? "stop mv"
"$FLEETCTL" rm mv >/dev/null; ok $? "rm mv"
stop_fleetd; ok $? "fleetd stops"

done_testing
