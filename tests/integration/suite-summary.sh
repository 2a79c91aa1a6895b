#!/bin/bash
# tests/summary.sh, the last step of tests/run.sh, on make check outputs in
# automake's format: under CI=true (.ci/run sets it) a skip fails the run
# and the skipped tests are named.
. "$FLEET_SRCDIR/tests/lib/common.sh"

# check_out PASS SKIP FAIL: an automake `make check` output with these counts.
check_out() {
	local i
	for ((i = 1; i <= $1; i++)); do echo "PASS: tests/unit/test_names $i - fine"; done
	for ((i = 1; i <= $2; i++)); do echo "SKIP: tests/unit/test_cron $i # SKIP no /usr/share/zoneinfo/America/New_York (tzdata)"; done
	for ((i = 1; i <= $3; i++)); do echo "FAIL: tests/integration/api.sh $i - broken"; done
	cat <<SUM
============================================================================
Testsuite summary for fleet 0.1
============================================================================
# TOTAL: $(($1 + $2 + $3))
# PASS:  $1
# SKIP:  $2
# XFAIL: 0
# FAIL:  $3
# XPASS: 0
# ERROR: 0
SUM
}
summ() {	# summ CI PASS SKIP FAIL MAKE_RC: the summary's output, then "rc=N"
	local out
	check_out "$2" "$3" "$4" > "$TEST_TMP/check.out"
	out=$(CI=$1 bash "$FLEET_SRCDIR/tests/summary.sh" "$TEST_TMP/check.out" "$5" 2>&1)
	printf '%s\nrc=%s' "$out" "$?"
}

out=$(summ "" 5 0 0 0)
is "${out##*$'\n'}" rc=0 "all passed: exit 0"
like "$out" "5 passed, 0 failed, 0 skipped" "and says so"
out=$(summ "" 5 1 0 0)
is "${out##*$'\n'}" rc=0 "a skip outside CI: exit 0"
like "$out" "5 passed, 0 failed, 1 skipped" "counted as skipped"
out=$(summ true 5 2 0 0)
is "${out##*$'\n'}" rc=1 "a skip under CI=true: exit 1"
like "$out" "5 passed, 2 failed, 2 skipped" "each skip counted as a failure"
like "$out" "  tests/unit/test_cron 1 # SKIP no /usr/share/zoneinfo" "the skipped test is named"
out=$(summ true 5 0 0 0)
is "${out##*$'\n'}" rc=0 "under CI=true with nothing skipped: exit 0"
out=$(summ "" 5 0 1 2)
is "${out##*$'\n'}" rc=1 "a failure: exit 1"
like "$out" "5 passed, 1 failed, 0 skipped" "counted"
out=$(summ "" 5 0 0 2)
is "${out##*$'\n'}" rc=1 "make check failed with no failed test (a build error): exit 1"

done_testing
