#!/bin/bash
# Benchmark of the user backend (not part of make check). Needs root and a
# fleetd built with the user backend. Every figure comes with a baseline
# measured in the same run, and the ratio between them:
#   1. trigger-to-process-start: `fleetctl exec A -- date +%s%N` against a
#      plain fork/exec of the same `date +%s%N` from this shell;
#   2. N agents (default 500): create time per agent against plain
#      groupadd+useradd+mkdir of a user; `fleetctl list` with N agents
#      against with 0; fleetd's RSS with N agents against with 0; starting
#      every agent (one keeper sandbox each) and the memory that costs.
# Usage: tests/bench/user-bench.sh [N]   (FLEETD/FLEETCTL default to ./daemon/)
set -u
N=${1:-500}
FLEETD=${FLEETD:-$PWD/daemon/fleetd}
FLEETCTL=${FLEETCTL:-$PWD/ctl/fleetctl}
SAMPLES=${SAMPLES:-200}

[ "$(id -u)" = 0 ] || { echo "user-bench: needs root" >&2; exit 77; }
[ -x "$FLEETD" ] && [ -x "$FLEETCTL" ] || { echo "user-bench: no fleetd/fleetctl at $FLEETD (set FLEETD, FLEETCTL)" >&2; exit 77; }

UMIN=4700000 UMAX=4709999
STATE=$(mktemp -d /var/lib/fleet-bench.XXXXXX)
SOCK=$STATE.sock
export FLEET_SOCKET=$SOCK
FLEETD_PID=
: > "$STATE.conf"
cleanup() {
	set +e
	if [ -n "$FLEETD_PID" ]; then
		"$FLEETCTL" --json list 2>/dev/null | jq -r '.[].name' | while read -r n; do "$FLEETCTL" rm --force "$n" >/dev/null 2>&1; done
		kill "$FLEETD_PID" 2>/dev/null
		for i in $(seq 100); do kill -0 "$FLEETD_PID" 2>/dev/null || break; sleep 0.05; done
	fi
	for i in $(seq 0 49); do userdel "fbase-$i" 2>/dev/null; groupdel "fbase-$i" 2>/dev/null; done
	rm -rf "$STATE" "$SOCK" "$STATE.base" "$STATE.lat" "$STATE.conf"
}
trap cleanup EXIT

now_ns() { local t=${EPOCHREALTIME/./}; echo "${t}000"; }	# no fork
median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : int((a[NR/2]+a[NR/2+1])/2)}'; }
p95() { sort -n | awk '{a[NR]=$1} END {i=int(NR*0.95); if (i<1) i=1; print a[i]}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.1f", a / b; else print "inf" }'; }
ms() { awk -v n="$1" 'BEGIN { printf "%.2f", n / 1e6 }'; }
rss_kib() { awk '/^VmRSS:/ {print $2}' /proc/"$1"/status; }

"$FLEETD" --state-dir "$STATE" --socket "$SOCK" --config "$STATE.conf" --user-uid-min $UMIN --user-uid-max $UMAX 2>/dev/null ||
	{ echo "user-bench: fleetd did not start" >&2; exit 1; }
FLEETD_PID=$(head -1 "$STATE/fleetd.lock")
"$FLEETCTL" create bench-lat --backend user >/dev/null || { echo "user-bench: this fleetd cannot create user agents" >&2; exit 77; }

echo "# user backend benchmark: $(nproc) CPUs, kernel $(uname -r), $N agents, $SAMPLES latency samples"

# ---- 1. trigger-to-process-start ----
"$FLEETCTL" exec bench-lat -- true </dev/null	# warm up
: > "$STATE.base"
for i in $(seq "$SAMPLES"); do
	t0=$(now_ns); t1=$("$FLEETCTL" exec bench-lat --no-stdin -- date +%s%N); echo $((t1 - t0)) >> "$STATE.lat"
	t0=$(now_ns); t1=$(date +%s%N); echo $((t1 - t0)) >> "$STATE.base"
done
lat=$(median < "$STATE.lat"); base=$(median < "$STATE.base")
lat95=$(p95 < "$STATE.lat"); base95=$(p95 < "$STATE.base")
echo "start latency (median): fleetctl exec $(ms "$lat") ms, plain fork/exec $(ms "$base") ms, ratio $(ratio "$lat" "$base")"
echo "start latency (p95):    fleetctl exec $(ms "$lat95") ms, plain fork/exec $(ms "$base95") ms, ratio $(ratio "$lat95" "$base95")"
rm -f "$STATE.lat" "$STATE.base"
"$FLEETCTL" rm bench-lat >/dev/null

# ---- 2. N agents ----
rss0=$(rss_kib "$FLEETD_PID")
t0=$(now_ns); "$FLEETCTL" list >/dev/null; list0=$(( $(now_ns) - t0 ))

# Baseline: what a user costs without fleet (50 users, same tools).
t0=$(now_ns)
for i in $(seq 0 49); do
	groupadd -g $((4719000 + i)) "fbase-$i" && useradd --system -u $((4719000 + i)) -g $((4719000 + i)) -M -N -l \
		-d "$STATE/base-$i" -s /usr/sbin/nologin "fbase-$i" 2>/dev/null && mkdir -m 0700 "$STATE/base-$i"
done
base_create=$(( ($(now_ns) - t0) / 50 ))
for i in $(seq 0 49); do userdel "fbase-$i"; groupdel "fbase-$i" 2>/dev/null; rmdir "$STATE/base-$i"; done

t0=$(now_ns)
for i in $(seq 1 "$N"); do
	"$FLEETCTL" create "bench-$i" --backend user --memory 64 >/dev/null || { echo "user-bench: create bench-$i failed" >&2; exit 1; }
done
create=$(( ($(now_ns) - t0) / N ))
echo "create: $(ms "$create") ms per agent ($N agents), plain groupadd+useradd+mkdir $(ms "$base_create") ms, ratio $(ratio "$create" "$base_create")"

t0=$(now_ns); "$FLEETCTL" list >/dev/null; listN=$(( $(now_ns) - t0 ))
echo "list: $(ms "$listN") ms with $N agents, $(ms "$list0") ms with 0, ratio $(ratio "$listN" "$list0")"
rssN=$(rss_kib "$FLEETD_PID")
echo "fleetd RSS: ${rssN} KiB with $N agents, ${rss0} KiB with 0, ratio $(ratio "$rssN" "$rss0")"

t0=$(now_ns)
for i in $(seq 1 "$N"); do "$FLEETCTL" start "bench-$i" >/dev/null || { echo "user-bench: start bench-$i failed" >&2; exit 1; }; done
start=$(( ($(now_ns) - t0) / N ))
rssS=$(rss_kib "$FLEETD_PID")
keepers=$(pgrep -c -x fleet-init)
echo "start: $(ms "$start") ms per agent; $keepers keeper sandboxes; fleetd RSS ${rssS} KiB, ratio to idle $(ratio "$rssS" "$rss0")"
pss=$(for p in $(pgrep -x fleet-init); do awk '/^Pss:/ {s+=$2} END {print s}' /proc/$p/smaps_rollup 2>/dev/null; done | awk '{s+=$1} END {print s+0}')
echo "keepers: $pss KiB PSS in all, $(( pss / (keepers > 0 ? keepers : 1) )) KiB each"
t0=$(now_ns); "$FLEETCTL" list >/dev/null; listR=$(( $(now_ns) - t0 ))
echo "list: $(ms "$listR") ms with $N running agents, ratio to 0 agents $(ratio "$listR" "$list0")"
t0=$(now_ns)
for i in $(seq 1 "$N"); do "$FLEETCTL" rm --force "bench-$i" >/dev/null; done
echo "rm --force: $(ms $(( ($(now_ns) - t0) / N ))) ms per running agent"
