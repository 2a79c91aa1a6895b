#!/bin/bash
# Run fleet's whole test suite: installs what it needs, builds, runs
# `make check`, and ends with "N passed, N failed, N skipped" (tests/summary.sh;
# under CI=true a skip counts as a failure). Run as root.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh || exit 1
bash scripts/build.sh "$@" || { echo "0 passed, 1 failed"; exit 1; }
build=${FLEET_BUILD_DIR:-$PWD/build}
make -C "$build" -j2 check >"$build/check.out" 2>&1
rc=$?
echo "test logs: $build/test-suite.log"
exec bash tests/summary.sh "$build/check.out" "$rc"
