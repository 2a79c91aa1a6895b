#!/bin/bash
# Run fleet's whole test suite: installs what it needs, builds, runs
# `make check`, and ends with "N passed, N failed, N skipped" (tests/summary.sh;
# under CI=true a skip counts as a failure). Run as root.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh || exit 1
build=${FLEET_BUILD_DIR:-$PWD/build}
mkdir -p "$build"
# The systemd host guest's Debian root (tests/vm/systemd-host.sh), a download of
# 5-8 minutes the first time: in the background, over the build and the unit
# tests; the test waits for it (a no-op once it is cached).
bash images/fetch-systemd-rootfs.sh >"$build/fetch-systemd-rootfs.log" 2>&1 &
fetch_pid=$!
bash scripts/build.sh "$@" || { kill "$fetch_pid" 2>/dev/null; echo "0 passed, 1 failed"; exit 1; }
make -C "$build" -j2 check >"$build/check.out" 2>&1
rc=$?
kill "$fetch_pid" 2>/dev/null	# done long before, unless the suite failed early
wait "$fetch_pid" 2>/dev/null
echo "test logs: $build/test-suite.log"
exec bash tests/summary.sh "$build/check.out" "$rc"
