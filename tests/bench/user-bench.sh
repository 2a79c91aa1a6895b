#!/bin/bash
# Benchmark of the user backend (not part of make check). Needs root and a
# fleetd built with the user backend. Every figure comes with a baseline
# measured in the same run, and the ratio between them:
#   1. trigger-to-process-start: `fleetctl exec A -- date +%s%N` against a
#      plain fork/exec of the same `date +%s%N` from this shell (again once
#      the N agents below exist: their stores are mounts each sandbox copies);
#      and the same exec through fleetd's API from one process, no client
#      program started per call (tests/bench/exec-api-bench.c, built here
#      with cc and libcurl), against posix_spawn of date by that process;
#      and the floor of any client program: the same date started through
#      a static program that only execs it (tests/bench/exec-trampoline.c),
#      in the same interleaved loop; each sample after a quiet GAP (0.05 s),
#      so what one left running (fleetd makes the agent's next spare once a
#      command ends) is timed in no other, fleet's or the baseline's;
#   2. N agents (default 500): create time per agent against plain
#      groupadd+useradd+mkdir of a user; `fleetctl list` with N agents
#      against with 0; fleetd's RSS with N agents against with 0; starting
#      every agent (one keeper sandbox each) and the memory that costs;
#   3. the verbs that read the whole fleet: `fleetctl list`, `status` and
#      `show` (medians of REPS calls) with N agents against with 0 (show:
#      of the same agent, alone and among N), and fleetd's start (its
#      reconcile of every agent) with N stopped user agents against an
#      empty state dir, the target being 2 s + 20 ms per agent.
# Agents are named qbN (Unix users fleet-qbN, in a uid range of their own; BENCH_PREFIX for another prefix);
# all of them go at the end, also when the bench fails.
# Stdout also gets one line per row of issue #16 measured, for
# tests/bench/quick.sh: ratio|ROW|FLEET|BASELINE|RATIO|TARGET.
# Usage: tests/bench/user-bench.sh [--quick] [N]   (default N 1000; --quick:
# N 10, 30 latency samples, 5 repetitions; FLEETD/FLEETCTL default to ./daemon/)
set -u
QUICK=0
[ "${1:-}" = --quick ] && { QUICK=1; shift; }
if [ $QUICK = 1 ]; then N=${1:-10}; SAMPLES=${SAMPLES:-30}; REPS=${REPS:-5}; NBASE=5
else N=${1:-1000}; SAMPLES=${SAMPLES:-200}; REPS=${REPS:-15}; NBASE=50; fi
FLEETD=${FLEETD:-$PWD/daemon/fleetd}
FLEETCTL=${FLEETCTL:-$PWD/ctl/fleetctl}
SRCDIR=${FLEET_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
GAP=${BENCH_GAP:-0.05}	# quiet seconds before each latency sample (see 1. above); BENCH_GAP=0: back to back

[ "$(id -u)" = 0 ] || { echo "user-bench: needs root" >&2; exit 77; }
[ -x "$FLEETD" ] && [ -x "$FLEETCTL" ] || { echo "user-bench: no fleetd/fleetctl at $FLEETD (set FLEETD, FLEETCTL)" >&2; exit 77; }

# BENCH_PREFIX and BENCH_UID_BASE let two runs share a machine (names and uid ranges of their own).
P=${BENCH_PREFIX:-qb}
UBASE=${BENCH_UID_BASE:-4700000}
UMIN=$UBASE UMAX=$((UBASE + 9999))
STATE=$(mktemp -d /var/lib/fleet-bench.XXXXXX)
SOCK=$STATE.sock
export FLEET_SOCKET=$SOCK
FLEETD_PID=
: > "$STATE.conf"
stop_fleetd() {
	[ -n "$FLEETD_PID" ] || return 0
	kill "$FLEETD_PID" 2>/dev/null
	for i in $(seq 600); do kill -0 "$FLEETD_PID" 2>/dev/null || break; sleep 0.05; done
	FLEETD_PID=
}
cleanup() {
	set +e
	if [ -n "$FLEETD_PID" ]; then
		"$FLEETCTL" --json list 2>/dev/null | jq -r '.[].name' | while read -r n; do "$FLEETCTL" rm --force "$n" >/dev/null 2>&1; done
		stop_fleetd
	fi
	# What a failed run left: only users of this bench (name and uid range).
	getent passwd | awk -F: -v lo=$UMIN -v hi=$UMAX '$1 ~ /^fleet-('"$P"'[0-9]+|'"$P"'-lat)$/ && $3 >= lo && $3 <= hi {print $1}' |
		while read -r u; do userdel "$u" 2>/dev/null; groupdel "$u" 2>/dev/null; done
	for i in $(seq 0 49); do userdel "${P}base-$i" 2>/dev/null; groupdel "${P}base-$i" 2>/dev/null; done
	# What a failed removal left mounted (users/ and netns/, mounts of their own, what is below them; loop
	# devices go with them), deepest first: rm -rf stops at each.
	awk -v a="$STATE/" -v b="$STATE.empty/" 'index($2, a) == 1 || index($2, b) == 1 {print $2}' /proc/self/mounts |
		sort -r | while read -r m; do umount -l "$m"; done
	rm -rf "$STATE" "$STATE.empty" "$SOCK" "$STATE.base" "$STATE.lat" "$STATE.conf" "$STATE.t" "$STATE.apibench" "$STATE.apibench.log" "$STATE.tramp" "$STATE.floor"
}
trap cleanup EXIT
trap 'exit 130' INT TERM	# the cleanup above, also when stopped

now_ns() { local t=${EPOCHREALTIME/./}; echo "${t}000"; }	# no fork
median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : int((a[NR/2]+a[NR/2+1])/2)}'; }
p95() { sort -n | awk '{a[NR]=$1} END {i=int(NR*0.95); if (i<1) i=1; print a[i]}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.1f", a / b; else print "inf" }'; }
ms() { awk -v n="$1" 'BEGIN { printf "%.2f", n / 1e6 }'; }
rss_kib() { awk '/^VmRSS:/ {print $2}' /proc/"$1"/status; }
ratio2() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "inf" }'; }
# ratio|ROW|FLEET|BASELINE|RATIO|TARGET (tests/bench/quick.sh collects these)
row() { echo "ratio|$1|$2|$3|$4|$5"; }
# Median wall time (ns) of REPS runs of a command.
median_of() {
	: > "$STATE.t"
	for _ in $(seq "$REPS"); do
		local t0; t0=$(now_ns); "$@" >/dev/null 2>&1; echo $(( $(now_ns) - t0 )) >> "$STATE.t"
	done
	median < "$STATE.t"
}
# Start fleetd on state dir $1; the wall time (ns) it took to be ready (its reconcile included) in START_NS.
start_fleetd() {
	local t0; t0=$(now_ns)
	"$FLEETD" --state-dir "$1" --socket "$SOCK" --config "$STATE.conf" --user-uid-min $UMIN --user-uid-max $UMAX 2>/dev/null ||
		{ echo "user-bench: fleetd did not start" >&2; exit 1; }
	START_NS=$(( $(now_ns) - t0 ))
	FLEETD_PID=$(head -1 "$1/fleetd.lock")
}

# fleetd's start with nothing to reconcile: the baseline of the reconcile row.
mkdir -p "$STATE.empty"
start_fleetd "$STATE.empty"; stop_fleetd; start_fleetd "$STATE.empty"; start0=$START_NS; stop_fleetd
start_fleetd "$STATE"
"$FLEETCTL" create $P-lat --backend user >/dev/null || { echo "user-bench: this fleetd cannot create user agents" >&2; exit 77; }

echo "# user backend benchmark: $(nproc) CPUs, kernel $(uname -r), $N agents, $SAMPLES latency samples"

# ---- 1. trigger-to-process-start ----
# SAMPLES of each, interleaved: an exec in the agent and the same date from this shell; sets lat, base.
# With $1 = a trampoline (tests/bench/exec-trampoline.c), also the same date started through it: sets floor.
latency_samples() {
	local tramp=${1:-} datebin; datebin=$(command -v date)
	"$FLEETCTL" exec $P-lat -- true </dev/null	# warm up
	: > "$STATE.lat"; : > "$STATE.base"; : > "$STATE.floor"
	for i in $(seq "$SAMPLES"); do
		sleep "$GAP"; t0=$(now_ns); t1=$("$FLEETCTL" exec $P-lat --no-stdin -- date +%s%N); echo $((t1 - t0)) >> "$STATE.lat"
		sleep "$GAP"; t0=$(now_ns); t1=$(date +%s%N); echo $((t1 - t0)) >> "$STATE.base"
		[ -z "$tramp" ] || { sleep "$GAP"; t0=$(now_ns); t1=$("$tramp" "$datebin" +%s%N); echo $((t1 - t0)) >> "$STATE.floor"; }
	done
	lat=$(median < "$STATE.lat"); base=$(median < "$STATE.base")
	floor=; [ -z "$tramp" ] || floor=$(median < "$STATE.floor")
}
# The floor of any client program: a static program that only execs the same date, started the same way.
# A client that asks a daemon to start a command pays at least this before the daemon's path.
tramp=
if cc -O2 -static -o "$STATE.tramp" "$SRCDIR/tests/bench/exec-trampoline.c" 2>"$STATE.apibench.log"; then tramp=$STATE.tramp
else echo "user-bench: cannot build exec-trampoline (static): $(head -3 "$STATE.apibench.log")" >&2; fi
latency_samples "$tramp"
lat95=$(p95 < "$STATE.lat"); base95=$(p95 < "$STATE.base")
echo "start latency (median): fleetctl exec $(ms "$lat") ms, plain fork/exec $(ms "$base") ms, ratio $(ratio "$lat" "$base")"
echo "start latency (p95):    fleetctl exec $(ms "$lat95") ms, plain fork/exec $(ms "$base95") ms, ratio $(ratio "$lat95" "$base95")"
row "user agent: exec start latency" "$(ms "$lat") ms" "$(ms "$base") ms plain fork/exec" "$(ratio2 "$lat" "$base")" "<= 1.5x"
if [ -n "$floor" ]; then
	echo "start latency (median): static exec trampoline $(ms "$floor") ms, ratio $(ratio "$floor" "$base")"
	row "user agent: exec start latency, floor of any client program" "$(ms "$floor") ms" "$(ms "$base") ms plain fork/exec" "$(ratio2 "$floor" "$base")" "(the floor)"
else
	row "user agent: exec start latency, floor of any client program" "not measured: cannot build tests/bench/exec-trampoline.c statically" "" "" ""
fi
rm -f "$STATE.lat" "$STATE.base" "$STATE.floor"
# The same exec with no client program started per call (a trigger, an API caller): one process, one
# libcurl handle, against posix_spawn of the same date by that process (tests/bench/exec-api-bench.c).
if cc -O2 -Wall -Wextra -o "$STATE.apibench" "$SRCDIR/tests/bench/exec-api-bench.c" \
	$(pkg-config --cflags --libs libcurl) 2>"$STATE.apibench.log"; then
	"$STATE.apibench" "$SOCK" $P-lat "$SAMPLES" || {
		echo "user-bench: exec-api-bench failed" >&2
		row "user agent: exec start latency, API call" "not measured: exec-api-bench failed (its error is in this script's log)" "" "" ""
	}
else
	echo "user-bench: cannot build exec-api-bench: $(head -3 "$STATE.apibench.log")" >&2
	row "user agent: exec start latency, API call" "not measured: cannot build tests/bench/exec-api-bench.c" "" "" ""
fi
# The same with no spare sandbox (FLEET_TEST_NO_SPARES, a benchmark's switch): each exec clones its own.
stop_fleetd
export FLEET_TEST_NO_SPARES=1; start_fleetd "$STATE"; unset FLEET_TEST_NO_SPARES
latency_samples
echo "start latency, no spares (median): fleetctl exec $(ms "$lat") ms, plain fork/exec $(ms "$base") ms, ratio $(ratio "$lat" "$base")"
row "user agent: exec start latency, no spare sandbox" "$(ms "$lat") ms" "$(ms "$base") ms plain fork/exec" "$(ratio2 "$lat" "$base")" "(what spares save)"
rm -f "$STATE.lat" "$STATE.base"
stop_fleetd; start_fleetd "$STATE"

# ---- 2. N agents ----
rss0=$(rss_kib "$FLEETD_PID")
"$FLEETCTL" list >/dev/null
list0=$(median_of "$FLEETCTL" list)
status0=$(median_of "$FLEETCTL" status)
show0=$(median_of "$FLEETCTL" show $P-lat)

# Baseline: what a user costs without fleet (NBASE users, same tools).
t0=$(now_ns)
for i in $(seq 0 $((NBASE - 1))); do
	groupadd -g $(((UBASE + 19000) + i)) "${P}base-$i" && useradd --system -u $(((UBASE + 19000) + i)) -g $(((UBASE + 19000) + i)) -M -N -l \
		-d "$STATE/base-$i" -s /usr/sbin/nologin "${P}base-$i" 2>/dev/null && mkdir -m 0700 "$STATE/base-$i"
done
base_create=$(( ($(now_ns) - t0) / NBASE ))
for i in $(seq 0 $((NBASE - 1))); do userdel "${P}base-$i"; groupdel "${P}base-$i" 2>/dev/null; rmdir "$STATE/base-$i"; done

t0=$(now_ns)
for i in $(seq 1 "$N"); do
	"$FLEETCTL" create "$P$i" --backend user --memory 64 >/dev/null || { echo "user-bench: create $P$i failed" >&2; exit 1; }
done
create=$(( ($(now_ns) - t0) / N ))
echo "create: $(ms "$create") ms per agent ($N agents), plain groupadd+useradd+mkdir $(ms "$base_create") ms, ratio $(ratio "$create" "$base_create")"

"$FLEETCTL" list >/dev/null
listN=$(median_of "$FLEETCTL" list)
statusN=$(median_of "$FLEETCTL" status)
showN=$(median_of "$FLEETCTL" show $P-lat)
echo "list: $(ms "$listN") ms with $N more agents, $(ms "$list0") ms with 1, ratio $(ratio "$listN" "$list0")"
echo "status: $(ms "$statusN") ms with $N more agents, $(ms "$status0") ms with 1, ratio $(ratio "$statusN" "$status0")"
echo "show: $(ms "$showN") ms with $N other agents, $(ms "$show0") ms with 0, ratio $(ratio "$showN" "$show0")"
row "\`fleetctl list\`, $N user agents" "$(ms "$listN") ms" "same, 1 agent: $(ms "$list0") ms" "$(ratio2 "$listN" "$list0")" "<= 2x"
row "\`fleetctl status\`, $N user agents" "$(ms "$statusN") ms" "same, 1 agent: $(ms "$status0") ms" "$(ratio2 "$statusN" "$status0")" "<= 2x"
row "\`fleetctl show\`, $N user agents" "$(ms "$showN") ms" "same, alone: $(ms "$show0") ms" "$(ratio2 "$showN" "$show0")" "<= 2x"
# --quick: the list of 1000 as well, its other records added to fleetd's database with sqlite3
# (state defined, no Unix user: making 1000 users takes minutes; list reads only the database, so
# the cost is the same) and removed again before anything else reads them.
if [ $QUICK = 1 ] && [ "$N" -lt 999 ] && command -v sqlite3 >/dev/null; then
	extra=$((1000 - N - 1))
	sqlite3 -cmd '.timeout 5000' "$STATE/fleet.db" "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < $extra)
		INSERT INTO agents (name, backend, state, memory_mib, vcpus, disk_gib, created_at, updated_at)
		SELECT printf('qr%04d', i), 'user', 'defined', 64, 1, 2, strftime('%s', 'now'), strftime('%s', 'now') FROM n;"
	"$FLEETCTL" list >/dev/null
	list1k=$(median_of "$FLEETCTL" list)
	lines=$("$FLEETCTL" list | wc -l)
	sqlite3 -cmd '.timeout 5000' "$STATE/fleet.db" "DELETE FROM agents WHERE name GLOB 'qr[0-9][0-9][0-9][0-9]';"
	echo "list: $(ms "$list1k") ms with 1000 agents ($N real, $extra records; $((lines - 1)) rows printed), $(ms "$list0") ms with 1, ratio $(ratio "$list1k" "$list0")"
	row "\`fleetctl list\`, 1000 user agents ($extra of them records only)" "$(ms "$list1k") ms" "same, 1 agent: $(ms "$list0") ms" \
		"$(ratio2 "$list1k" "$list0")" "<= 2x"
fi
# Exec with N other agents: each one's memory store is a mount every new sandbox's namespace copies.
latency_samples
echo "start latency with $N other agents (median): fleetctl exec $(ms "$lat") ms, plain fork/exec $(ms "$base") ms, ratio $(ratio "$lat" "$base")"
row "user agent: exec start latency, $N other agents" "$(ms "$lat") ms" "$(ms "$base") ms plain fork/exec" "$(ratio2 "$lat" "$base")" "<= 1.5x"
rm -f "$STATE.lat" "$STATE.base"
rssN=$(rss_kib "$FLEETD_PID")
echo "fleetd RSS: ${rssN} KiB with $N agents, ${rss0} KiB with 0, ratio $(ratio "$rssN" "$rss0")"

# fleetd's start: reconcile of N+1 stopped user agents, against an empty state dir.
stop_fleetd
start_fleetd "$STATE"
startN=$START_NS
target_ns=$(( 2000000000 + 20000000 * (N + 1) ))
echo "fleetd start: $(ms "$startN") ms with $((N + 1)) stopped user agents, $(ms "$start0") ms with 0 (target < $(ms "$target_ns") ms)"
row "reconcile at fleetd start, $((N + 1)) user agents" "$(ms "$startN") ms" "empty state dir: $(ms "$start0") ms" \
	"$(ratio2 "$startN" "$start0")" "< 2 s + 20 ms/agent = $(ms "$target_ns") ms"

if [ $QUICK = 1 ]; then	# starting every agent: the full run only
	for i in $(seq 1 "$N"); do "$FLEETCTL" rm --force "$P$i" >/dev/null; done
	"$FLEETCTL" rm $P-lat >/dev/null
	exit 0
fi
t0=$(now_ns)
for i in $(seq 1 "$N"); do "$FLEETCTL" start "$P$i" >/dev/null || { echo "user-bench: start $P$i failed" >&2; exit 1; }; done
start=$(( ($(now_ns) - t0) / N ))
rssS=$(rss_kib "$FLEETD_PID")
keepers=$(pgrep -c -x fleet-init)
echo "start: $(ms "$start") ms per agent; $keepers keeper sandboxes; fleetd RSS ${rssS} KiB, ratio to idle $(ratio "$rssS" "$rss0")"
pss=$(for p in $(pgrep -x fleet-init); do awk '/^Pss:/ {s+=$2} END {print s}' /proc/$p/smaps_rollup 2>/dev/null; done | awk '{s+=$1} END {print s+0}')
echo "keepers: $pss KiB PSS in all, $(( pss / (keepers > 0 ? keepers : 1) )) KiB each"
t0=$(now_ns); "$FLEETCTL" list >/dev/null; listR=$(( $(now_ns) - t0 ))
echo "list: $(ms "$listR") ms with $N running agents, ratio to 0 agents $(ratio "$listR" "$list0")"
t0=$(now_ns)
for i in $(seq 1 "$N"); do "$FLEETCTL" rm --force "$P$i" >/dev/null; done
"$FLEETCTL" rm $P-lat >/dev/null
echo "rm --force: $(ms $(( ($(now_ns) - t0) / N ))) ms per running agent"
