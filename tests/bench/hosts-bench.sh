#!/bin/bash
# Benchmark of VM agents on another host (issue #15's "Benchmark" bullet; not
# part of make check, not a TAP test). fleetd runs in a private namespace with
# its own libvirtd (tests/lib/vmfleet.sh), next to a second private libvirtd,
# h2, reached over qemu+tcp across a veth pair between the two namespaces
# (tests/lib/host2.sh: nothing leaves the namespaces this script makes). Three
# TCG guests of the same image, 256 MiB, 1 vCPU, no NIC, measured in the same
# run, interleaved:
#
#   loc  on local: fleetd's own libvirtd, its channel today's Unix socket
#        (vms/loc/ctl.sock), its disks in fleetd's state dir;
#   rem  on h2 (qemu+tcp): disks in h2's fleet pool, its channel streamed
#        over the libvirt connection (virDomainOpenChannel);
#   lch  on "loop": fleetd's own libvirtd added a second time as a host
#        (qemu+unix to its socket), so a guest on fleetd's own machine is
#        reached through virDomainOpenChannel the way a remote one is: the
#        stream against the local socket, with no network in between.
#
#   exec:      N x `fleetctl exec A -- true` for each, rotating which goes
#              first; median and p95 (ms). Ratios rem/loc and lch/loc.
#   snapshot:  R x `fleetctl snapshot A S` of the running guest (a checkpoint,
#              RAM and disk) on loc and on rem, alternating which goes first,
#              each deleted after (`fleetctl snapshot rm`); median (s),
#              ratio rem/loc.
#
# h2 is on the same machine: "remote" here is libvirt's remote protocol and
# stream over TCP, not a network's latency or bandwidth.
#
# Usage: tests/bench/hosts-bench.sh [--quick] [--n N] [--rounds R] [--out FILE]
#   --quick  N=15, R=2 (a few minutes on 2 loaded cores); default N=50, R=5
# Prints a table; writes "key value unit" lines to --out FILE (default: none).
# Env (as for make check): FLEET_SRCDIR, FLEET_BUILDDIR, FLEETD, FLEETCTL, AGENTD.
set -u

OUT=
N=50
ROUNDS=5
while [ $# -gt 0 ]; do
	case $1 in
	--out) OUT=$2; shift 2 ;;
	--n) N=$2; shift 2 ;;
	--rounds) ROUNDS=$2; shift 2 ;;
	--quick) N=15; ROUNDS=2; shift ;;
	-h|--help) sed -n '2,33p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "hosts-bench: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done
case "$N$ROUNDS" in *[!0-9]*) echo "hosts-bench: --n and --rounds want numbers" >&2; exit 2 ;; esac

FLEET_SRCDIR=${FLEET_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
FLEET_BUILDDIR=${FLEET_BUILDDIR:-$PWD}
FLEETD=${FLEETD:-$FLEET_BUILDDIR/daemon/fleetd}
FLEETCTL=${FLEETCTL:-$FLEET_BUILDDIR/ctl/fleetctl}
AGENTD=${AGENTD:-$FLEET_BUILDDIR/agentd/agentd}
FLEET_DROPBEAR=${FLEET_DROPBEAR:-$FLEET_BUILDDIR/images/dropbear/dropbear}
export FLEET_SRCDIR FLEET_BUILDDIR FLEETD FLEETCTL AGENTD FLEET_DROPBEAR

LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
T0=$(date -u +%H:%M)
# The tests' own helpers: namespaces, fleetd in the first one, cleanup on exit.
. "$FLEET_SRCDIR/tests/lib/common.sh"
. "$FLEET_SRCDIR/tests/lib/vmfleet.sh"
vmfleet_setup --tcg jq
. "$FLEET_SRCDIR/tests/lib/host2.sh"
host2_start
fleetd_ns_start || { echo "hosts-bench: fleetd did not start" >&2; exit 1; }

die() { echo "hosts-bench: $*" >&2; exit 1; }
now_ns() { date +%s%N; }
median() { sort -n | awk '{a[NR]=$1} END {if (NR == 0) print 0; else print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
p95() { sort -n | awk '{a[NR]=$1} END {i=int(NR*0.95 + 0.999999); if (i<1) i=1; print (NR ? a[i] : 0)}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }

"$FLEETCTL" host add h2 "$H2_URI" >/dev/null || die "host add h2 failed"
"$FLEETCTL" host add loop "qemu+unix:///system?socket=/run/libvirt/libvirt-sock" >/dev/null || die "host add loop failed"
AGENTS="loc rem lch"
declare -A HOST=([loc]=local [rem]=h2 [lch]=loop)
for a in $AGENTS; do
	"$FLEETCTL" create "$a" --host "${HOST[$a]}" --health-interval 0 --restart never >/dev/null || die "create $a failed"
done
for a in $AGENTS; do
	t0=$(now_ns)
	"$FLEETCTL" start "$a" >/dev/null || die "start $a failed"
	echo "# $a started on ${HOST[$a]} in $(( ($(now_ns) - t0) / 1000000 )) ms" >&2
	"$FLEETCTL" exec "$a" -- true || die "exec on $a failed"
done
[ -S "$STATE/vms/loc/ctl.sock" ] && [ ! -e "$STATE/vms/lch/ctl.sock" ] && [ ! -e "$STATE/vms/rem/ctl.sock" ] ||
	die "loc should have its local socket and only it"

# --- exec true round trip ----------------------------------------------------------------------
fails=0
set -- $AGENTS
for ((i = 0; i < N; i++)); do
	for a in "$@"; do
		t0=$(now_ns)
		"$FLEETCTL" exec "$a" -- true || fails=$((fails + 1))
		echo $(( ($(now_ns) - t0) / 1000 )) >> "$TEST_TMP/exec.$a"
	done
	set -- "${@:2}" "$1"	# rotate who goes first
done
ms() { awk '{ printf "%.1f\n", $1 / 1000 }' "$TEST_TMP/exec.$1"; }

# --- snapshot of the running guest -------------------------------------------------------------
sfails=0
set -- loc rem
for ((r = 1; r <= ROUNDS; r++)); do
	for a in "$@"; do
		t0=$(now_ns)
		"$FLEETCTL" snapshot "$a" "b$r" >/dev/null || sfails=$((sfails + 1))
		echo $(( ($(now_ns) - t0) / 1000000 )) >> "$TEST_TMP/snap.$a"
		"$FLEETCTL" snapshot rm "$a" "b$r" >/dev/null 2>&1
	done
	set -- "$2" "$1"
done
sec() { awk '{ printf "%.2f\n", $1 / 1000 }' "$TEST_TMP/snap.$1"; }

# --- report ----------------------------------------------------------------------------------
el=$(ms loc | median) elp=$(ms loc | p95)
er=$(ms rem | median) erp=$(ms rem | p95)
ec=$(ms lch | median) ecp=$(ms lch | p95)
sl=$(sec loc | median) sr=$(sec rem | median)
dtype() { sed -n "s/^<domain type='\([a-z]*\)'.*/\1/p"; }
types="loc $(virsh_ns dumpxml fleet-loc | dtype), rem $(virsh_h2 dumpxml fleet-rem | dtype), lch $(virsh_ns dumpxml fleet-lch | dtype)"
load=$(cut -d' ' -f1-3 /proc/loadavg)
{
	echo "More hosts benchmark, $(date -u +%Y-%m-%d) $T0-$(date -u +%H:%M) UTC, $(nproc) CPUs, $(uname -r)"
	echo "load average at the start $LOAD0, at the end $load"
	echo "guests: 256 MiB, 1 vCPU, no NIC, same image, domain types: $types"
	echo "exec samples: $N each; snapshot rounds: $ROUNDS"
	echo
	printf '  %-52s %10s %10s %7s\n' "exec true round trip (ms)" local other ratio
	printf '  %-52s %10s %10s %7s\n' "remote (h2, qemu+tcp, OpenChannel): median" "$el" "$er" "$(ratio "$er" "$el")"
	printf '  %-52s %10s %10s %7s\n' "remote (h2, qemu+tcp, OpenChannel): p95" "$elp" "$erp" "$(ratio "$erp" "$elp")"
	printf '  %-52s %10s %10s %7s\n' "local guest via OpenChannel (qemu+unix): median" "$el" "$ec" "$(ratio "$ec" "$el")"
	printf '  %-52s %10s %10s %7s\n' "local guest via OpenChannel (qemu+unix): p95" "$elp" "$ecp" "$(ratio "$ecp" "$elp")"
	echo
	printf '  %-52s %10s %10s %7s\n' "snapshot of the running guest (s)" local remote ratio
	printf '  %-52s %10s %10s %7s\n' "median" "$sl" "$sr" "$(ratio "$sr" "$sl")"
	printf '  %-52s %10s %10s\n' "all samples" "$(sec loc | tr '\n' ' ')" "$(sec rem | tr '\n' ' ')"
	echo "failures: exec $fails, snapshot $sfails"
}
if [ -n "$OUT" ]; then
	{
		echo "exec_local_median $el ms"; echo "exec_local_p95 $elp ms"
		echo "exec_remote_median $er ms"; echo "exec_remote_p95 $erp ms"
		echo "exec_local_openchannel_median $ec ms"; echo "exec_local_openchannel_p95 $ecp ms"
		echo "snapshot_local_median $sl s"; echo "snapshot_remote_median $sr s"
		echo "failures $((fails + sfails))"
	} > "$OUT"
fi
for a in $AGENTS; do "$FLEETCTL" rm --force "$a" >/dev/null 2>&1; done
[ "$((fails + sfails))" = 0 ]
