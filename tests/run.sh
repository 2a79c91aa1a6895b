#!/bin/bash
# Run fleet's whole test suite: installs what it needs, builds, runs
# `make check`, and ends with "N passed, N failed". Run as root.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh || exit 1
bash scripts/build.sh "$@" || { echo "0 passed, 1 failed"; exit 1; }
build=${FLEET_BUILD_DIR:-$PWD/build}
make -C "$build" -j2 check >"$build/check.out" 2>&1
rc=$?
grep -E '^(PASS|FAIL|XFAIL|XPASS|SKIP|ERROR):' "$build/check.out" | grep -vE '^PASS:' | sed 's/^/  /'
summary() { sed -n "s/^# $1: *//p" "$build/check.out" | tail -1; }
pass=$(summary PASS); fail=$(summary FAIL); err=$(summary ERROR); xpass=$(summary XPASS); skip=$(summary SKIP)
if [ -z "$pass" ]; then
	tail -30 "$build/check.out"
	echo "0 passed, 1 failed"
	exit 1
fi
failed=$(( ${fail:-0} + ${err:-0} + ${xpass:-0} ))
[ "$rc" -ne 0 ] && [ "$failed" -eq 0 ] && failed=1
echo "test logs: $build/test-suite.log"
echo "${pass} passed, ${failed} failed, ${skip:-0} skipped"
[ "$failed" -eq 0 ]
