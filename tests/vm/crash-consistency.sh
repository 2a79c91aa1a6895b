#!/bin/bash
# Crash consistency with a VM agent (#13): kill -9 of fleetd at a random
# moment while a running guest is snapshotted, restored and written to, and
# VM agents are created and removed; then "power loss": kill -9 of fleetd,
# the guest's QEMU and libvirtd at once. After each: the database as the
# kill left it passes `PRAGMA integrity_check`; after the restart (of all
# three for the power loss) every acknowledged snapshot and create is there,
# every acknowledged remove gone; libvirt's domains, the vms/ directories,
# libvirt's snapshot records and the qcow2 snapshots inside the disk agree
# with the database (no orphan either way); the guest runs again and execs.
# One guest serves every check (TCG boots are slow).
#
# Usage (by hand): tests/vm/crash-consistency.sh [--cycles N] [--seed S]
# (or CRASH_VM_CYCLES / CRASH_SEED); the last cycle is the power loss.
. "$FLEET_SRCDIR/tests/lib/common.sh"
. "$FLEET_SRCDIR/tests/lib/vmfleet.sh"
. "$FLEET_SRCDIR/tests/lib/crash.sh"

crash_args "${CRASH_VM_CYCLES:-3}" "$@"
command -v jq >/dev/null || skip_all "jq not installed"
command -v sqlite3 >/dev/null || skip_all "sqlite3 not installed"
vmfleet_setup --tcg
RANDOM=$SEED	# again: vmfleet_setup may have drawn from it
diag "crash-consistency (VM): $CYCLES cycles, the last a power loss; seed $SEED (again: CRASH_SEED=$SEED CRASH_VM_CYCLES=$CYCLES)"

fleetd_ns_start; ok $? "fleetd starts inside the namespace" || done_testing
"$FLEETCTL" create vcc --backend vm --network none --health-interval 0 >/dev/null &&
	"$FLEETCTL" start vcc >/dev/null
ok $? "a VM agent runs" || done_testing
"$FLEETCTL" exec vcc -- true; ok $? "exec works"

declare -A AGENT=([vcc]=present) SNAP=()
ACKED=0 OTHER=0
J=$TEST_TMP/journal
{ crash_workers_lib 300; cat <<'EOF'
w_snaps() {	# write, snapshot, now and then a restore, on the running guest
	local f=$1 cyc=$2 i s rc old=("${@:3}")
	for ((i = 0; i < 3; i++)); do
		s=v$cyc-$i
		fc exec vcc -- sh -c "echo $s > ~/mark" >/dev/null; rc=$?; rec "$f" mark "$s" "$rc"; [ $rc = 0 ] || return 0
		fc snapshot vcc "$s" >/dev/null; rc=$?; rec "$f" snap "$s" "$rc"; [ $rc = 0 ] || return 0
		if ((${#old[@]} && i == 1)); then
			fc restore vcc "${old[0]}" >/dev/null; rc=$?; rec "$f" restore "${old[0]}" "$rc"; [ $rc = 0 ] || return 0
		fi
	done
}
w_agents() {	# creates and removes of VM agents (defined, never started)
	local f=$1 cyc=$2 i name rc live=("${@:3}")
	for ((i = 0; i < 3; i++)); do
		name=vcc-c$cyc-$i
		fc create "$name" --backend vm --network none --health-interval 0 >/dev/null; rc=$?; rec "$f" create "$name" "$rc"
		[ $rc = 0 ] || return 0
		if ((${#live[@]})); then
			fc rm --force "${live[0]}" >/dev/null; rc=$?; rec "$f" rm "${live[0]}" "$rc"; live=("${live[@]:1}")
			[ $rc = 0 ] || return 0
		fi
	done
}
EOF
} > "$TEST_TMP/workers.sh"
qemu_pid() { vmns_exec cat /run/libvirt/qemu/fleet-vcc.pid 2>/dev/null; }
libvirtd_pid() { vmns_exec cat /run/libvirtd.pid 2>/dev/null; }

cycle() {
	local c=$1 power=$2 pids=() name live=() olds=() delay op a rc bad copy i
	rm -rf "$J"; mkdir -p "$J"
	for name in "${!AGENT[@]}"; do [ "$name" != vcc ] && [ "${AGENT[$name]}" = present ] && live+=("$name"); done
	for name in "${!SNAP[@]}"; do [ "${SNAP[$name]}" = present ] && olds+=("$name"); done
	delay=$((2000 + RANDOM % 15000))
	( . "$TEST_TMP/workers.sh"; w_snaps "$J/snaps" "$c" "${olds[@]:0:1}" ) & pids+=($!)
	( . "$TEST_TMP/workers.sh"; w_agents "$J/agents" "$c" "${live[@]:0:2}" ) & pids+=($!)
	_pids+=("${pids[@]}")
	sleep "$(printf '%d.%03d' $((delay / 1000)) $((delay % 1000)))"
	if [ "$power" = 1 ]; then
		local qp lp
		qp=$(qemu_pid) lp=$(libvirtd_pid)
		# All three at once: one kill(1), as a power cut would stop them.
		kill -9 "$FLEETD_PID" "$qp" "$lp"; ok $? "cycle $c (at ${delay} ms): power loss: kill -9 of fleetd, QEMU ($qp) and libvirtd ($lp) at once"
		for ((i = 0; i < 600; i++)); do kill -0 "$FLEETD_PID" 2>/dev/null || kill -0 "$qp" 2>/dev/null || kill -0 "$lp" 2>/dev/null || break; sleep 0.1; done
	else
		stop_fleetd KILL; ok $? "cycle $c (at ${delay} ms): kill -9 of fleetd"
	fi
	wait "${pids[@]}"
	copy=$(crash_db_copy)
	is "$(sqlite3 "$copy" 'PRAGMA integrity_check')" ok "cycle $c: integrity_check of the database as the kill left it"
	if [ "$power" = 1 ]; then
		vmns_exec libvirtd -d; ok $? "cycle $c: libvirtd starts again"
		wait_for 60 virsh_ns uri; ok $? "cycle $c: and answers"
	fi
	fleetd_ns_start; ok $? "cycle $c: fleetd restarts" || return 1
	crash_wait_restored vcc 1500	# at most 300 s

	# the journal against what is there
	local agents_now snaps_now
	agents_now=$("$FLEETCTL" --json list | jq -r '.[].name' | sort)
	bad=()
	while read -r op a rc; do
		[ -n "$op" ] || continue
		if [ "$rc" = 0 ]; then ACKED=$((ACKED + 1)); else OTHER=$((OTHER + 1)); fi
		case $op.$rc in create.0) AGENT[$a]=present ;; rm.0) AGENT[$a]=absent ;; *) AGENT[$a]=either ;; esac
	done < <(cat "$J/agents" 2>/dev/null)
	for name in "${!AGENT[@]}"; do
		local there=absent
		grep -qx -- "$name" <<<"$agents_now" && there=present
		case ${AGENT[$name]} in either | "$there") ;; *) bad+=("$name: ${AGENT[$name]} acknowledged, $there") ;; esac
		if [ "$there" = absent ]; then unset "AGENT[$name]"; else AGENT[$name]=present; fi
	done
	is "${bad[*]:-}" "" "cycle $c: every acknowledged create and remove holds"
	bad=()
	while read -r op a rc; do
		[ -n "$op" ] || continue
		if [ "$rc" = 0 ]; then ACKED=$((ACKED + 1)); else OTHER=$((OTHER + 1)); fi
		case $op.$rc in snap.0) SNAP[$a]=present ;; snap.*) SNAP[$a]=either ;; esac
	done < <(cat "$J/snaps" 2>/dev/null)
	snaps_now=$("$FLEETCTL" --json snapshots vcc | jq -r '.[].name' | sort)
	for name in "${!SNAP[@]}"; do
		local there=absent
		grep -qx -- "$name" <<<"$snaps_now" && there=present
		case ${SNAP[$name]} in either | "$there") ;; *) bad+=("snapshot $name: ${SNAP[$name]} acknowledged, $there") ;; esac
		if [ "$there" = absent ]; then unset "SNAP[$name]"; else SNAP[$name]=present; fi
	done
	is "${bad[*]:-}" "" "cycle $c: every acknowledged snapshot is there"
	is "$(crash_half_states)" "" \
		"cycle $c: no agent is left half-made, half-removed or missing"

	# libvirt and the disk against the database
	is "$(set_diff "$(sed 's/^/fleet-/' <<<"$agents_now")" "$(virsh_ns list --all --name | sed '/^$/d' | sort)")" "" \
		"cycle $c: libvirt's domains and the agents agree"
	is "$(set_diff "$agents_now" "$(find "$STATE/vms" -mindepth 1 -maxdepth 1 -type d ! -name '.*' -printf '%f\n' | sort)")" "" \
		"cycle $c: the vms/ directories and the agents agree"
	is "$(set_diff "$snaps_now" "$(virsh_ns snapshot-list fleet-vcc --name | sed '/^$/d' | sort)")" "" \
		"cycle $c: libvirt's snapshots of vcc and its records agree"
	is "$(set_diff "$snaps_now" "$(vmns_exec qemu-img snapshot -U -l "$STATE/vms/vcc/disk.qcow2" | awk 'NR > 2 { print $2 }' | sort)")" "" \
		"cycle $c: the qcow2 snapshots in vcc's disk and its records agree"
	is "$(sqlite3 -readonly "$STATE/fleet.db" "SELECT count(*) FROM snapshots WHERE state != 'ready'")" 0 "cycle $c: every snapshot record is ready"
	is "$(find "$STATE" \( -name '*.tmp' -o -name '.*.tmp' \) -printf '%P\n' | tr '\n' ' ')" "" "cycle $c: no temp file left in the state dir"

	# the guest: fleetd starts it again if the power loss stopped it; either way it execs
	[ "$("$FLEETCTL" --json show vcc | jq -r .state)" = running ] || "$FLEETCTL" start vcc >/dev/null
	wait_for 300 "$FLEETCTL" exec vcc -- true; ok $? "cycle $c: the guest runs and execs ($("$FLEETCTL" --json show vcc | jq -r .state))"
}

for ((cyc = 1; cyc <= CYCLES; cyc++)); do
	cycle "$cyc" $([ "$cyc" = "$CYCLES" ] && echo 1 || echo 0) || break
done
diag "$CYCLES cycles (the last a power loss): $ACKED actions acknowledged, $OTHER cut off; all checked"
done_testing
