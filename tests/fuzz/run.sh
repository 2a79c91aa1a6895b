#!/bin/bash
# Run fleet's fuzz harnesses longer than make check does, on demand:
#   tests/fuzz/run.sh --minutes N [NAME...]     (NAME: proto, verify, cron, ...; default all)
# Builds them first (tests/fuzz/build.sh; FLEET_BUILD_DIR as scripts/build.sh,
# default ./build, configured). Each harness runs N minutes, one after the
# other, on its checked-in corpus plus a working corpus kept in
# BUILD/fuzz/work/NAME (what it learned survives to the next run). Logs go
# to BUILD/fuzz/run-DATE/NAME.log and crash inputs to
# BUILD/fuzz/run-DATE/crashes-NAME/, printed at the end: check each in as
# tests/fuzz/corpus/NAME/crash-WHAT once its bug is fixed.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${FLEET_BUILD_DIR:-$src/build}
minutes=
names=()
while [ $# -gt 0 ]; do
	case $1 in
	--minutes) minutes=$2; shift 2 ;;
	-h|--help) sed -n '2,9p' "$0"; exit 0 ;;
	-*) echo "run.sh: unknown option $1" >&2; exit 2 ;;
	*) names+=("$1"); shift ;;
	esac
done
[[ "$minutes" =~ ^[0-9]+$ ]] && [ "$minutes" -gt 0 ] || { echo "usage: $0 --minutes N [NAME...]" >&2; exit 2; }
if [ ${#names[@]} -eq 0 ]; then
	for f in "$src"/tests/fuzz/fuzz_*.c; do n=$(basename "$f" .c); names+=("${n#fuzz_}"); done
fi
out=$(bash "$src/tests/fuzz/build.sh" --out "$build/fuzz" --config-header "$build/autoconfig.h")
run=$build/fuzz/run-$(date +%Y%m%d-%H%M%S)
found=0
for name in "${names[@]}"; do
	bin=$out/fuzz_$name
	[ -x "$bin" ] || { echo "run.sh: no harness fuzz_$name" >&2; exit 2; }
	mkdir -p "$out/work/$name" "$run/crashes-$name"
	echo "fuzz_$name: $minutes min ..."
	rc=0
	# -fork keeps going past a crash (each one saved) for the whole time.
	"$bin" -fork=1 -ignore_crashes=1 -max_total_time=$((minutes * 60)) -timeout=30 -rss_limit_mb=2048 \
		-print_final_stats=1 -artifact_prefix="$run/crashes-$name/" \
		"$out/work/$name" "$src/tests/fuzz/corpus/$name" >"$run/$name.log" 2>&1 || rc=$?
	n=$(find "$run/crashes-$name" -type f | wc -l)
	execs=$(grep -oE '#[0-9]+' "$run/$name.log" | tail -1 | tr -d '#')
	echo "fuzz_$name: ${execs:-?} inputs run, $n crash inputs (exit $rc), log $run/$name.log"
	found=$((found + n))
	rmdir "$run/crashes-$name" 2>/dev/null || true
done
if [ "$found" -gt 0 ]; then
	echo "run.sh: $found crash inputs in $run/crashes-NAME/:"
	find "$run" -path '*/crashes-*' -type f
	exit 1
fi
echo "run.sh: no crash; logs in $run/"
