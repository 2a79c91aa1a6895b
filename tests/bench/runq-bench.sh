#!/bin/bash
# Benchmark of the run queue's cost in fleetd (not part of make check; not a
# TAP test). Two figures, each a ratio or a count within one run, so a
# loaded machine changes them little:
#
#   queue growth  fleetd's CPU time (utime + stime, /proc) per run queued
#                 (POST /v1/agents/NAME/runs, one curl on the control
#                 socket), B at a time, for a user agent whose first run
#                 hangs: with the queue nearly empty, and again with N more
#                 runs waiting (put into its database directly with sqlite3,
#                 in one transaction, as queuing them one by one would take
#                 minutes). Their ratio is 1 when queuing (the room check)
#                 and the dispatch each queuing kicks do not grow with the
#                 queue; CPU time, not wall time, so the fsyncs and the
#                 machine's other work do not hide it.
#   fsyncs/run    fsync + fdatasync calls of fleetd (perf's syscall
#                 tracepoints) while R runs of `true` are queued and run,
#                 per run: the enqueue's own commit, the run's start and
#                 end, and the health check after it; and fleetd's CPU time
#                 per run.
#
# Usage: tests/bench/runq-bench.sh [--batch B] [--queue N] [--runs R]
# Env: FLEET_SRCDIR, FLEET_BUILDDIR, FLEETD, FLEETCTL (as for make check),
# so FLEETD=/other/build/daemon/fleetd measures another build. Needs root,
# curl, jq and perf. Everything it starts is stopped by PID; its agents
# (Unix users fleet-rqb-*) and its state go, also when it fails.
set -u

BATCH=300 QUEUE=20000 RUNS=100
while [ $# -gt 0 ]; do
	case $1 in
	--batch) BATCH=$2; shift 2 ;;
	--queue) QUEUE=$2; shift 2 ;;
	--runs) RUNS=$2; shift 2 ;;
	-h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "runq-bench: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done
for v in "$BATCH" "$QUEUE" "$RUNS"; do
	case $v in ''|*[!0-9]*|0) echo "runq-bench: --batch, --queue and --runs want positive numbers" >&2; exit 2 ;; esac
done
FLEET_BUILDDIR=${FLEET_BUILDDIR:-$PWD}
FLEETD=${FLEETD:-$FLEET_BUILDDIR/daemon/fleetd}
FLEETCTL=${FLEETCTL:-$FLEET_BUILDDIR/ctl/fleetctl}
die() { echo "runq-bench: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "runq-bench: needs root" >&2; exit 77; }
for c in curl jq perf sqlite3; do command -v $c >/dev/null || die "needs $c"; done
for x in "$FLEETD" "$FLEETCTL"; do [ -x "$x" ] || die "not built: $x"; done

# One run at a time: the agents' Unix users and the uid range are fixed.
exec 9>/run/lock/fleet-runq-bench.lock || die "cannot open the lock"
flock -n 9 || die "another runq-bench.sh is running on this host"

BT=$(mktemp -d /tmp/fleet-runq-bench.XXXXXX) || exit 1
STATE=$(mktemp -d /var/lib/fleet-rqbench.XXXXXX) || exit 1
SOCK=$BT/fleetd.sock
export FLEET_SOCKET=$SOCK
FLEETD_PID= PERF_PID=
: > "$BT/none.conf"
FC() { timeout 300 "$FLEETCTL" "$@"; }
stop_pid() {	# TERM, wait up to 10 s, then KILL
	local pid=$1 i
	kill -TERM "$pid" 2>/dev/null || return 0
	for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
	kill -KILL "$pid" 2>/dev/null
}
cleanup() {
	set +e
	[ -n "$PERF_PID" ] && stop_pid "$PERF_PID"
	if [ -n "$FLEETD_PID" ] && kill -0 "$FLEETD_PID" 2>/dev/null; then
		for a in rqb-hang rqb-true; do FC rm --force "$a" >/dev/null 2>&1; done
		stop_pid "$FLEETD_PID"
	fi
	case $STATE in /var/lib/fleet-rqbench.?*) umount -l "$STATE/users" "$STATE/netns" 2>/dev/null; rm -rf "$STATE" ;; esac
	case $BT in /tmp/fleet-runq-bench.?*) rm -rf "$BT" ;; esac
}
trap cleanup EXIT
trap 'exit 1' INT TERM

"$FLEETD" --state-dir "$STATE" --socket "$SOCK" --config "$BT/none.conf" --hooks-listen none \
	--user-uid-min 4790000 --user-uid-max 4790999 2>"$BT/fleetd.err" || die "fleetd did not start: $(cat "$BT/fleetd.err")"
FLEETD_PID=$(head -1 "$STATE/fleetd.lock")

# queue AGENT COUNT: COUNT runs of AGENT through one curl (one connection); prints fleetd's CPU ms per run.
queue() {
	local args=() i c0 c1
	for ((i = 0; i < $2; i++)); do args+=("http://fleet/v1/agents/$1/runs"); done
	c0=$(cpu_ticks)
	curl -sS --unix-socket "$SOCK" -X POST -w '\n%{http_code}\n' "${args[@]}" >"$BT/answers" || die "curl failed"
	c1=$(cpu_ticks)
	grep -E '^[0-9]{3}$' "$BT/answers" | sort | uniq -c >"$BT/codes"
	[ "$(tr -s ' ' <"$BT/codes")" = " $2 202" ] || die "not $2 runs queued: $(tr '\n' ' ' <"$BT/codes")"
	awk -v t=$((c1 - c0)) -v hz="$(getconf CLK_TCK)" -v n="$2" 'BEGIN { printf "%.3f", t * 1000 / hz / n }'
}
# fleetd's utime + stime, in clock ticks (fields 14 and 15 of /proc/PID/stat, after the comm's ')').
cpu_ticks() { sed 's/.*) //' "/proc/$FLEETD_PID/stat" | awk '{ print $12 + $13 }'; }

# --- queue growth ---
FC create rqb-hang --backend user --memory 128 --command 'sleep 3600' --max-queued 100000 --restart never \
	--health-interval 0 >/dev/null || die "fleetctl create rqb-hang failed"
FC start rqb-hang >/dev/null || die "fleetctl start rqb-hang failed"
queue rqb-hang 1 >/dev/null || exit 1	# it runs (and hangs): the rest wait behind it
c_short=$(queue rqb-hang "$BATCH") || exit 1
sqlite3 "$STATE/fleet.db" ".timeout 10000" "BEGIN IMMEDIATE;
	WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < $QUEUE)
	INSERT INTO runs (agent_id, trigger, state, queued_at) SELECT a.id, 'manual', 'queued', strftime('%s')
	FROM agents a, n WHERE a.name = 'rqb-hang'; COMMIT;" || die "cannot add $QUEUE queued runs"
sleep 2	# a tick of the queue with them
c_long=$(queue rqb-hang "$BATCH") || exit 1
echo "queue growth: fleetd CPU per run queued: $c_short ms with ~$BATCH waiting, $c_long ms with ~$((QUEUE + BATCH))" \
	"waiting: ratio $(awk -v a="$c_long" -v b="$c_short" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')"
FC rm --force rqb-hang >/dev/null || die "fleetctl rm rqb-hang failed"

# --- fsyncs per run ---
FC create rqb-true --backend user --memory 128 --command true --max-queued 100000 --restart never \
	--health-interval 0 >/dev/null || die "fleetctl create rqb-true failed"
FC start rqb-true >/dev/null || die "fleetctl start rqb-true failed"
perf stat -x, -e syscalls:sys_enter_fsync,syscalls:sys_enter_fdatasync -p "$FLEETD_PID" -o "$BT/perf" &
PERF_PID=$!
sleep 1	# perf attaches
t0=$(date +%s%N) c0=$(cpu_ticks)
queue rqb-true "$RUNS" >/dev/null || exit 1
runs_json() { curl -sS --unix-socket "$SOCK" "http://fleet/v1/agents/rqb-true/runs?limit=10000" | jq -c '.runs'; }
while [ "$(runs_json | jq '[.[] | select(.state == "queued" or .state == "running")] | length')" != 0 ]; do
	sleep 0.2
done
t1=$(date +%s%N) c1=$(cpu_ticks)
kill -INT "$PERF_PID"; wait "$PERF_PID"; PERF_PID=
done_runs=$(runs_json | jq '[.[] | select(.state == "succeeded")] | length')
syncs=$(awk -F, '/syscalls/ { s += $1 } END { print s + 0 }' "$BT/perf")
echo "fsyncs/run: $RUNS runs of true ($done_runs succeeded) in $(awk -v d=$((t1 - t0)) 'BEGIN { printf "%.2f", d / 1e9 }') s:" \
	"$syncs fsync+fdatasync, $(awk -v s="$syncs" -v n="$RUNS" 'BEGIN { printf "%.2f", s / n }') per run;" \
	"fleetd CPU $(awk -v t=$((c1 - c0)) -v hz="$(getconf CLK_TCK)" -v n="$RUNS" 'BEGIN { printf "%.2f", t * 1000 / hz / n }') ms per run"
