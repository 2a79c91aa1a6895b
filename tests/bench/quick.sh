#!/bin/bash
# The benchmarks of issue #16 in one table (`make bench-quick`; not part of
# make check). Runs each bench script that measures a row of that table with
# --quick (a reduced run, about 90 s each; --full: the scripts' own default
# runs, `make bench`), keeps each one's whole output in a log, and prints
# one table of the ratio lines they print on stdout, in the form
#   ratio|ROW|FLEET|BASELINE|RATIO|TARGET
# A script that has no --quick yet, that skips (no root, no image, no
# libvirt) or that fails prints no such line: its row says "not measured"
# and why. Needs root, like the scripts.
# Usage: tests/bench/quick.sh [--full] [--keep DIR]
# Env (as for make check): FLEET_SRCDIR, FLEET_BUILDDIR, FLEETD, FLEETCTL, AGENTD.
set -u
MODE=--quick
KEEP=
while [ $# -gt 0 ]; do
	case $1 in
	--full) MODE=; shift ;;
	--keep) KEEP=$2; shift 2 ;;
	*) echo "usage: $0 [--full] [--keep DIR]" >&2; exit 2 ;;
	esac
done
FLEET_SRCDIR=${FLEET_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
FLEET_BUILDDIR=${FLEET_BUILDDIR:-$PWD}
FLEETD=${FLEETD:-$FLEET_BUILDDIR/daemon/fleetd}
FLEETCTL=${FLEETCTL:-$FLEET_BUILDDIR/ctl/fleetctl}
AGENTD=${AGENTD:-$FLEET_BUILDDIR/agentd/agentd}
export FLEET_SRCDIR FLEET_BUILDDIR FLEETD FLEETCTL AGENTD

LOGS=${KEEP:-$(mktemp -d /tmp/fleet-bench-quick.XXXXXX)}
mkdir -p "$LOGS"
# The scripts with rows of issue #16, in the order of its table.
SCRIPTS="snapshot-bench.sh vm-bench.sh user-bench.sh"
ROWS=$LOGS/rows
: > "$ROWS"
t_all=$EPOCHREALTIME

for s in $SCRIPTS; do
	path=$FLEET_SRCDIR/tests/bench/$s
	log=$LOGS/${s%.sh}.log
	if [ ! -f "$path" ]; then
		echo "ratio|$s|not measured: no such script||||" >> "$ROWS"
		continue
	fi
	if [ -n "$MODE" ] && ! grep -q -- '--quick' "$path"; then
		echo "ratio|$s|not measured: it has no --quick yet||||" >> "$ROWS"
		continue
	fi
	echo "quick: running $s $MODE (log: $log)" >&2
	t0=$EPOCHREALTIME
	# Run from the build tree: the scripts find ./daemon/fleetd there when FLEETD is not set.
	(cd "$FLEET_BUILDDIR" && bash "$path" $MODE) > "$log" 2>&1
	rc=$?
	secs=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.0f", b - a }')
	echo "quick: $s: exit $rc after $secs s" >&2
	if grep -q '^ratio|' "$log"; then
		grep '^ratio|' "$log" >> "$ROWS"
		[ $rc = 0 ] || echo "ratio|$s|part measured: exit $rc (see $log)||||" >> "$ROWS"
	elif [ $rc = 77 ]; then
		echo "ratio|$s|not measured: skipped ($(tail -1 "$log" | cut -c1-80))||||" >> "$ROWS"
	else
		echo "ratio|$s|not measured: exit $rc, no ratio line (see $log)||||" >> "$ROWS"
	fi
done

total=$(awk -v a="$t_all" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.0f", b - a }')
echo
echo "Issue #16 benchmarks, ${MODE:---full}, $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs, kernel $(uname -r), $total s in all"
echo
echo "| what | fleet | baseline, same run | ratio | target |"
echo "|---|---|---|---|---|"
while IFS='|' read -r _ row fleet base ratio target; do
	echo "| $row | $fleet | $base | $ratio | $target |"
done < "$ROWS"
echo
echo "logs: $LOGS"
