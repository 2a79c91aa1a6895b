#!/bin/bash
# Benchmark of VM snapshots and restores (not part of make check; not a TAP
# test). Runs fleetd under a private libvirtd in a network + mount namespace
# it creates (tests/lib/vmns.sh), boots one VM agent at a time (TCG, no NIC)
# and measures, in the same run and on THE SAME domain fleet-NAME, fleet
# against plain virsh doing what fleet does underneath:
#
#   snapshot:  `fleetctl snapshot NAME S` against
#              `virsh snapshot-create-as fleet-NAME S --atomic` (the XML and
#              flag fleet uses: <domainsnapshot><name>S</name></domainsnapshot>,
#              ATOMIC; of a running guest a full checkpoint, RAM and disk);
#              each also with the first `fleetctl exec NAME -- true` after it.
#   restore:   `fleetctl restore NAME S` (returns once exec works again)
#              against `virsh snapshot-revert fleet-NAME S` (flags 0, as fleet)
#              alone, and against revert + the first successful
#              `fleetctl exec NAME -- true` (retried until it works).
#   delete:    `fleetctl snapshot rm` against `virsh snapshot-delete`, after
#              every round, so the qcow2 does not grow without bound.
#
# Points: guest memory (--memory list, default 256 512 1024 MiB, no churn) and
# disk churn on the first of those guests (--churn list, default 0 64 256 MiB of
# /dev/urandom written to /home/agent/churn with conv=fsync just before each
# snapshot; the root filesystem is the image's 1 GiB ext4). ROUNDS rounds
# per point, alternating which side goes first; medians. A time budget
# (--budget, default 1080 s) cuts rounds at later points rather than overrun.
#
# Prints a table on stdout; writes the figures ("key value" lines) to --out
# FILE (default: stdout); --keep DIR keeps the raw samples and fleetd's log.
#
# Usage: tests/bench/snapshot-bench.sh [--rounds R] [--quick] [--memory "MIB..."]
#            [--churn "MIB..."] [--budget S] [--out FILE] [--keep DIR] [--debug-log]
#   --quick    2 rounds (one with each side first), memory 256 512, churn 0 64
#              (about 90 s; the default: about 8-9 minutes; --quick --rounds 1: the old run)
# Also prints, in both modes, one line per row of issue #16 it measures:
#   ratio|ROW|FLEET|BASELINE|RATIO|TARGET
# Env (as for make check): FLEET_SRCDIR, FLEET_BUILDDIR, FLEETD, FLEETCTL, AGENTD.
set -u

OUT=
KEEP=
ROUNDS=3
MEMS="256 512 1024"
CHURNS="0 64 256"
BUDGET_S=${BUDGET_S:-1080}	# stop starting new rounds when this would be exceeded
DEBUG_LOG=
while [ $# -gt 0 ]; do
	case $1 in
	--out) OUT=$2; shift 2 ;;
	--keep) KEEP=$2; shift 2 ;;
	--rounds) ROUNDS=$2; shift 2 ;;
	--memory) MEMS=$2; shift 2 ;;
	--churn) CHURNS=$2; shift 2 ;;
	--budget) BUDGET_S=$2; shift 2 ;;
	# Two rounds, not one: rounds alternate which side goes first, and with one round per point
	# fleet went first at both points that give ratio lines (docs/benchmarks.md, 2026-12-03 10:13).
	--quick) ROUNDS=2; MEMS="256 512"; CHURNS="0 64"; shift ;;
	--debug-log) DEBUG_LOG=1; shift ;;
	-h|--help) sed -n '2,36p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "snapshot-bench: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done
case "$ROUNDS" in ''|*[!0-9]*|0) echo "snapshot-bench: --rounds wants a positive number" >&2; exit 2 ;; esac

FLEET_SRCDIR=${FLEET_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
FLEET_BUILDDIR=${FLEET_BUILDDIR:-$PWD}
FLEETD=${FLEETD:-$FLEET_BUILDDIR/daemon/fleetd}
FLEETCTL=${FLEETCTL:-$FLEET_BUILDDIR/ctl/fleetctl}
AGENTD=${AGENTD:-$FLEET_BUILDDIR/agentd/agentd}
export FLEET_SRCDIR FLEET_BUILDDIR FLEETD FLEETCTL AGENTD

die() { echo "snapshot-bench: $*" >&2; exit 1; }
log() { echo "# $*" >&2; }
[ "$(id -u)" = 0 ] || { echo "snapshot-bench: needs root" >&2; exit 77; }
for x in "$FLEETD" "$FLEETCTL" "$AGENTD"; do [ -x "$x" ] || die "not built: $x (set FLEETD, FLEETCTL, AGENTD)"; done
for c in qemu-system-x86_64 qemu-img libvirtd virtlogd virsh mke2fs unshare nsenter jq timeout; do
	command -v "$c" >/dev/null || die "$c not installed"
done

BT=$(mktemp -d /tmp/fleet-snap-bench.XXXXXX) || exit 1
chmod 0755 "$BT"
STATE=$BT/state
SOCK=$BT/fleetd.sock
export FLEET_SOCKET=$SOCK
FLEETD_PID=
: > "$BT/none.conf"

bench_cleanup() {
	set +e
	if [ -n "$FLEETD_PID" ] && kill -0 "$FLEETD_PID" 2>/dev/null; then
		for a in $(timeout 30 "$FLEETCTL" --json list 2>/dev/null | jq -r '.[].name' 2>/dev/null); do
			timeout 120 "$FLEETCTL" rm --force "$a" >/dev/null 2>&1
		done
		kill "$FLEETD_PID" 2>/dev/null
		for _ in $(seq 100); do kill -0 "$FLEETD_PID" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$FLEETD_PID" 2>/dev/null
	fi
	if [ -n "$KEEP" ]; then
		mkdir -p "$KEEP" && cp -r "$BT/samples" "$KEEP/" 2>/dev/null
		cp "$STATE/fleetd.log" "$KEEP/fleetd.log" 2>/dev/null
		cp "$BT/exec.err" "$KEEP/exec.err" 2>/dev/null
	fi
	vmns_stop
	rm -rf "$BT"
}
trap bench_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

. "$FLEET_SRCDIR/tests/lib/image.sh"
image_ensure >&2 || die "cannot build the guest image"
. "$FLEET_SRCDIR/tests/lib/vmns.sh"
vmns_start || die "cannot start a private libvirtd"
trap bench_cleanup EXIT		# vmns_start chained its own; ours calls vmns_stop in order

mkdir -p "$STATE/images" "$STATE/vms" "$BT/samples"
cp "$IMG/vmlinuz" "$IMG/initramfs.img" "$IMG/base.qcow2" "$STATE/images/"
echo qemu > "$STATE/vms/virt-type"	# TCG: /dev/kvm here does not run guests
S=$BT/samples

FLEETD_ARGS=()
[ -z "$DEBUG_LOG" ] || FLEETD_ARGS+=(--log-level debug)
vmns_exec "$FLEETD" --state-dir "$STATE" --socket "$SOCK" --config "$BT/none.conf" "${FLEETD_ARGS[@]}" \
	2>"$BT/fleetd.err" || die "fleetd did not start: $(cat "$BT/fleetd.err")"
FLEETD_PID=$(head -1 "$STATE/fleetd.lock")
virsh_ns() { vmns_exec virsh -q -c qemu:///system "$@"; }

now_us() { local t=$EPOCHREALTIME; echo "${t/./}"; }
median() { sort -n | awk '{a[NR]=$1} END {if (NR == 0) print ""; else print (NR % 2) ? a[(NR+1)/2] : int((a[NR/2]+a[NR/2+1])/2)}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a != "" && b > 0) printf "%.2f", a / b; else print "n/a" }'; }
sec() { awk -v n="$1" 'BEGIN { if (n == "") print "-"; else printf "%.2f", n / 1e6 }'; }
mib() { awk -v n="$1" 'BEGIN { if (n == "") print "-"; else printf "%.0f", n / 1048576 }'; }
alloc() { stat -c '%b %B' "$1" 2>/dev/null | awk '{print $1 * $2}'; }
# med FILE: median of a sample file ("" if none)
med() { [ -s "$1" ] && median < "$1"; }
each() { [ -s "$1" ] && awk '{printf "%s%.2f", (NR > 1 ? "," : ""), $1 / 1e6}' "$1"; }

FC() { timeout 300 "$FLEETCTL" "$@"; }
X() { FC exec "$NAME" --no-stdin -- "$@"; }

# first_exec: `fleetctl exec NAME -- true` until it succeeds (180 s at most);
# prints the number of attempts.
first_exec() {
	local deadline=$((SECONDS + 180)) n=0
	while :; do
		n=$((n + 1))
		timeout 200 "$FLEETCTL" exec "$NAME" --no-stdin -- true >/dev/null 2>>"$BT/exec.err" && { echo "$n"; return 0; }
		[ $SECONDS -lt $deadline ] || return 1
		sleep 0.1
	done
}

# --- one VM agent at a time ----------------------------------------------------------------

NAME=
DISK=
vm_up() {
	local mem=$1 t0
	NAME=snap$mem
	DISK=$STATE/vms/$NAME/disk.qcow2
	t0=$SECONDS
	# No periodic health check (it would exec in the guest at random moments of
	# either side's measurement); no automatic restart (virsh's revert stops and
	# starts QEMU, which fleetd would otherwise take for a crash of its guest).
	FC create "$NAME" --backend vm --memory "$mem" --network none --health-interval 0 --restart never \
		>/dev/null || die "fleetctl create $NAME failed"
	FC start "$NAME" >/dev/null || die "fleetctl start $NAME failed (console: $(FC console "$NAME" --bytes 300))"
	for _ in 1 2 3; do X true >/dev/null 2>&1; done
	# Let the freshly booted guest settle (its init's background jobs).
	sleep 5
	# One untimed checkpoint, deleted: the first checkpoint of a fresh
	# disk.qcow2 grows the file by its whole RAM image (new host blocks, new
	# refcount blocks), later ones reuse the clusters the delete freed. Without
	# this, whichever side goes first on a new guest pays that alone (fleet,
	# at the 512 MiB point of --quick: the 5.7x of issue #16).
	# It is also reverted to: every measured snapshot then comes after a revert (a new QEMU
	# process, its RAM partly allocated), the first of a point included, as every later one does.
	virsh_ns snapshot-create-as "fleet-$NAME" warmup --atomic >/dev/null &&
		virsh_ns snapshot-revert "fleet-$NAME" warmup >/dev/null &&
		first_exec >/dev/null &&
		virsh_ns snapshot-delete "fleet-$NAME" warmup >/dev/null || die "$NAME: the warm-up checkpoint failed"
	log "$NAME: ${mem} MiB guest up in $((SECONDS - t0)) s"
}
vm_down() {
	[ -n "$NAME" ] || return 0
	cp "$STATE/vms/$NAME/console.log" "$S/$NAME.console.log" 2>/dev/null
	FC rm --force "$NAME" >/dev/null || log "fleetctl rm --force $NAME failed"
	NAME=
}

# --- one round of one side ------------------------------------------------------------------

# churn C: write C MiB of new data into the guest's disk (as the agent).
churn() {
	local c=$1 t0
	[ "$c" -gt 0 ] || return 0
	t0=$(now_us)
	X dd if=/dev/urandom of=/home/agent/churn bs=1M count="$c" conv=fsync >/dev/null 2>&1 ||
		die "$NAME: writing $c MiB of churn failed"
	echo $(($(now_us) - t0)) >> "$P.churn"
}

# side_round SIDE SNAP: churn, snapshot, first exec, change a file, restore,
# first exec, check the change is undone, delete the snapshot.
side_round() {
	local side=$1 snap=$2 t0 t1 t2 a0 a1 n
	churn "$CHURN"
	# The same warm-up on both sides, untimed: one health check. The QEMU a revert starts runs
	# the check's guest code cold (TCG translates it again: the first check after a restore
	# takes ~100 ms more, docs/benchmarks.md 2026-12-03 10:13), and fleet's snapshot runs a
	# check. The exec after it makes that check stale (core/activity.c), so the snapshot still
	# runs its own.
	FC health "$NAME" >/dev/null 2>&1
	X sh -c 'rm -f /home/agent/marker; sync' >/dev/null 2>&1
	a0=$(alloc "$DISK")
	t0=$(now_us)
	if [ "$side" = fleet ]; then
		FC snapshot "$NAME" "$snap" >/dev/null || die "$NAME: fleetctl snapshot $snap failed"
	else
		virsh_ns snapshot-create-as "fleet-$NAME" "$snap" --atomic >/dev/null ||
			die "$NAME: virsh snapshot-create-as $snap failed"
	fi
	t1=$(now_us)
	a1=$(alloc "$DISK")
	n=$(first_exec) || die "$NAME: no exec after the $side snapshot $snap"
	t2=$(now_us)
	echo $((t1 - t0)) >> "$P.$side.snap"
	echo $((t2 - t0)) >> "$P.$side.snapx"
	echo $((t2 - t1)) >> "$P.$side.snapexec"
	echo $((n - 1)) >> "$P.$side.snapfail"
	[ -n "$a0" ] && [ -n "$a1" ] && echo $((a1 - a0)) >> "$P.$side.grow"
	qemu-img info -U --output=json "$DISK" 2>/dev/null |
		jq -r --arg s "$snap" '.snapshots[]? | select(.name == $s) | ."vm-state-size"' >> "$P.$side.vmstate"

	X sh -c 'echo changed > /home/agent/marker' >/dev/null 2>&1 || die "$NAME: cannot write the marker"
	t0=$(now_us)
	if [ "$side" = fleet ]; then
		FC restore "$NAME" "$snap" >/dev/null || die "$NAME: fleetctl restore $snap failed"
	else
		virsh_ns snapshot-revert "fleet-$NAME" "$snap" >/dev/null || die "$NAME: virsh snapshot-revert $snap failed"
	fi
	t1=$(now_us)
	n=$(first_exec) || die "$NAME: no exec after the $side restore of $snap"
	t2=$(now_us)
	echo $((t1 - t0)) >> "$P.$side.rev"
	echo $((t2 - t0)) >> "$P.$side.revx"
	echo $((t2 - t1)) >> "$P.$side.revexec"
	echo $((n - 1)) >> "$P.$side.revfail"
	if X test -e /home/agent/marker >/dev/null 2>&1; then
		echo "$side $snap" >> "$BT/samples/not-undone"
		log "$NAME: the $side restore of $snap left the marker file in place"
	fi

	t0=$(now_us)
	if [ "$side" = fleet ]; then
		FC snapshot rm "$NAME" "$snap" >/dev/null || die "$NAME: fleetctl snapshot rm $snap failed"
	else
		virsh_ns snapshot-delete "fleet-$NAME" "$snap" >/dev/null || die "$NAME: virsh snapshot-delete $snap failed"
	fi
	echo $(($(now_us) - t0)) >> "$P.$side.del"
	log "  $NAME churn $CHURN $side: snapshot $(sec "$(tail -1 "$P.$side.snap")") s" \
		"(+exec $(sec "$(tail -1 "$P.$side.snapexec")") s), restore $(sec "$(tail -1 "$P.$side.rev")") s" \
		"(+exec $(sec "$(tail -1 "$P.$side.revexec")") s), delete $(sec "$(tail -1 "$P.$side.del")") s," \
		"vmstate $(mib "$(tail -1 "$P.$side.vmstate")") MiB"
}

# --- the points ---------------------------------------------------------------------------

CHURN_MEM=${MEMS%% *}
FIRST_CHURN=${CHURNS%% *}
POINTS=()
for m in $MEMS; do
	if [ "$m" = "$CHURN_MEM" ]; then
		for c in $CHURNS; do POINTS+=("$m:$c"); done
	else
		POINTS+=("$m:$FIRST_CHURN")
	fi
done
log "snapshot-bench: $(nproc) CPUs, kernel $(uname -r), points ${POINTS[*]} (MiB memory:churn), up to $ROUNDS rounds, budget $BUDGET_S s"
cat "$STATE/images/vmlinuz" "$STATE/images/initramfs.img" "$STATE/images/base.qcow2" > /dev/null

BOOT_EST=45		# a guest's create + boot + settle under TCG, for the budget
round_est=60		# one round (both sides), until measured
order=0
declare -A RDONE
for i in "${!POINTS[@]}"; do
	MEM=${POINTS[$i]%%:*}
	CHURN=${POINTS[$i]##*:}
	P=$S/m${MEM}c$CHURN
	if [ "${NAME#snap}" != "$MEM" ] || [ -z "$NAME" ]; then
		vm_down
		vm_up "$MEM"
	fi
	RDONE[$i]=0
	for r in $(seq "$ROUNDS"); do
		if [ "$r" -gt 1 ]; then
			# Keep one round (and a boot where the memory changes) for every later point.
			reserve=0 prev=$MEM
			for j in "${!POINTS[@]}"; do
				[ "$j" -gt "$i" ] || continue
				reserve=$((reserve + round_est))
				[ "${POINTS[$j]%%:*}" = "$prev" ] || reserve=$((reserve + BOOT_EST))
				prev=${POINTS[$j]%%:*}
			done
			if [ $((SECONDS + round_est + reserve)) -gt "$BUDGET_S" ]; then
				log "time budget: ${MEM} MiB, churn $CHURN: $((r - 1)) rounds"
				break
			fi
		fi
		rs=$SECONDS
		if [ $((order % 2)) = 0 ]; then
			side_round fleet "f${MEM}c${CHURN}r$r"; side_round virsh "v${MEM}c${CHURN}r$r"
		else
			side_round virsh "v${MEM}c${CHURN}r$r"; side_round fleet "f${MEM}c${CHURN}r$r"
		fi
		order=$((order + 1))
		RDONE[$i]=$r
		round_est=$((SECONDS - rs))
		# fleet's health check alone (what fleet runs before every snapshot of a running guest)
		t0=$(now_us)
		FC health "$NAME" >/dev/null 2>&1
		echo $(($(now_us) - t0)) >> "$P.health"
	done
	[ "$CHURN" = 0 ] || X rm -f /home/agent/churn >/dev/null 2>&1
done
vm_down

# --- report ----------------------------------------------------------------------------------

row() { printf '%4s MiB %4s MiB %3s |' "$1" "$2" "$3"; }
{
	echo "VM snapshot benchmark, $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs, $(uname -r), TCG (domain type qemu), load $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "guests: 1 vCPU, no NIC; both sides on fleet's domain fleet-NAME; median of R rounds (s); whole run $SECONDS s"
	echo
	printf '%-21s | %-22s | %-22s | %7s %7s\n' "" "snapshot" "snapshot + first exec" "vmstate" "health"
	printf '%-21s | %6s %6s %6s  | %6s %6s %6s  | %7s %7s\n' "memory  churn     R" fleet virsh ratio fleet virsh ratio MiB "check"
	for i in "${!POINTS[@]}"; do
		m=${POINTS[$i]%%:*}; c=${POINTS[$i]##*:}; P=$S/m${m}c$c
		fs=$(med "$P.fleet.snap"); vs=$(med "$P.virsh.snap")
		fx=$(med "$P.fleet.snapx"); vx=$(med "$P.virsh.snapx")
		row "$m" "$c" "${RDONE[$i]}"
		printf ' %6s %6s %6s  | %6s %6s %6s  | %7s %7s\n' "$(sec "$fs")" "$(sec "$vs")" "$(ratio "$fs" "$vs")" \
			"$(sec "$fx")" "$(sec "$vx")" "$(ratio "$fx" "$vx")" \
			"$(mib "$(cat "$P".*.vmstate 2>/dev/null | median)")" "$(sec "$(med "$P.health")")"
	done
	echo
	printf '%-21s | %-29s | %-14s | %-13s | %s\n' "" "restore (until exec works)" "virsh revert" "exec after" "delete"
	printf '%-21s | %6s %6s %6s %6s  | %6s %6s  | %6s %6s | %6s %6s\n' "memory  churn     R" \
		fleet virsh ratio "+1st" "alone" "ratio" fleet virsh fleet virsh
	for i in "${!POINTS[@]}"; do
		m=${POINTS[$i]%%:*}; c=${POINTS[$i]##*:}; P=$S/m${m}c$c
		fr=$(med "$P.fleet.rev"); frx=$(med "$P.fleet.revx"); vr=$(med "$P.virsh.rev"); vrx=$(med "$P.virsh.revx")
		row "$m" "$c" "${RDONE[$i]}"
		printf ' %6s %6s %6s %6s  | %6s %6s  | %6s %6s | %6s %6s\n' "$(sec "$fr")" "$(sec "$vrx")" "$(ratio "$fr" "$vrx")" \
			"$(sec "$frx")" "$(sec "$vr")" "$(ratio "$fr" "$vr")" \
			"$(sec "$(med "$P.fleet.revexec")")" "$(sec "$(med "$P.virsh.revexec")")" \
			"$(sec "$(med "$P.fleet.del")")" "$(sec "$(med "$P.virsh.del")")"
	done
	echo
	echo "snapshot: fleetctl snapshot | virsh snapshot-create-as --atomic; + first exec: until the next"
	echo "  fleetctl exec -- true has worked. vmstate: the checkpoint's RAM image (qemu-img info)."
	echo "restore: fleet = fleetctl restore (it returns once exec works again); virsh = snapshot-revert"
	echo "  + the first successful fleetctl exec -- true; +1st = fleet's restore + one exec;"
	echo "  alone = virsh snapshot-revert by itself (the guest is not reachable yet when it returns)."
	echo "exec after: the first exec after the restore (virsh: it opens fleetd's new SSH session)."
	echo "churn written per side and round (s, median): $(for i in "${!POINTS[@]}"; do
		c=${POINTS[$i]##*:}; [ "$c" = 0 ] || printf '%s MiB %s; ' "$c" "$(sec "$(med "$S/m${POINTS[$i]%%:*}c$c.churn")")"; done |
		sed 's/; $//')"
	echo "execs that failed before one worked: fleet $(cat "$S"/*.fleet.*fail 2>/dev/null | awk '{s += $1} END {print s + 0}')," \
		"virsh $(cat "$S"/*.virsh.*fail 2>/dev/null | awk '{s += $1} END {print s + 0}')"
	[ -s "$S/not-undone" ] && echo "restores that did not undo the marker file: $(tr '\n' ' ' < "$S/not-undone")"
} > "$BT/table"
cat "$BT/table"

figures() {
	echo "date $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "cpus $(nproc)"
	echo "kernel $(uname -r)"
	echo "domain_type qemu"
	for i in "${!POINTS[@]}"; do
		m=${POINTS[$i]%%:*}; c=${POINTS[$i]##*:}; P=$S/m${m}c$c; k=m${m}_c$c
		echo "${k}_rounds ${RDONE[$i]}"
		for side in fleet virsh; do
			for x in snap snapx rev revx revexec del; do
				echo "${k}_${side}_${x}_s $(sec "$(med "$P.$side.$x")") ($(each "$P.$side.$x"))"
			done
			echo "${k}_${side}_qcow2_growth_mib $(mib "$(med "$P.$side.grow")")"
			echo "${k}_${side}_vmstate_mib $(mib "$(med "$P.$side.vmstate")")"
		done
		echo "${k}_ratio_snap $(ratio "$(med "$P.fleet.snap")" "$(med "$P.virsh.snap")")"
		echo "${k}_ratio_restore_vs_revert $(ratio "$(med "$P.fleet.rev")" "$(med "$P.virsh.rev")")"
		echo "${k}_ratio_restore_vs_revert_exec $(ratio "$(med "$P.fleet.rev")" "$(med "$P.virsh.revx")")"
		echo "${k}_health_check_s $(sec "$(med "$P.health")")"
		[ "$c" = 0 ] || echo "${k}_churn_write_s $(sec "$(med "$P.churn")")"
	done
	echo "elapsed_s $SECONDS"
}
# The rows of issue #16's table (bench-quick convention): churn 0 points.
for m in 256 512; do
	P=$S/m${m}c0
	[ -s "$P.fleet.snap" ] && [ -s "$P.virsh.snap" ] || continue
	fs=$(med "$P.fleet.snap"); vs=$(med "$P.virsh.snap")
	echo "ratio|snapshot, running $m MiB guest|$(sec "$fs") s|$(sec "$vs") s virsh snapshot-create-as|$(ratio "$fs" "$vs")x|<= 1.1x"
done
P=$S/m${CHURN_MEM}c$FIRST_CHURN
if [ -s "$P.fleet.rev" ] && [ -s "$P.virsh.revx" ]; then
	fr=$(med "$P.fleet.rev"); vrx=$(med "$P.virsh.revx")
	echo "ratio|restore until exec works|$(sec "$fr") s|$(sec "$vrx") s revert + first exec|$(ratio "$fr" "$vrx")x|<= 1.0x"
fi
if [ -n "$OUT" ] && [ "$OUT" != - ]; then
	figures > "$OUT"
else
	echo
	figures
fi
