#!/bin/bash
# tests/summary.sh CHECK_OUT MAKE_RC: the end of tests/run.sh. Lists every
# result of `make check`'s output (CHECK_OUT) that is not a PASS, then prints
# "N passed, N failed, N skipped" and exits non-zero when anything failed.
# Under CI=true a skip is a failure too (a missing package must not let CI
# pass silently): the skipped tests are named and counted as failed.
set -uo pipefail
out=$1 rc=$2
grep -E '^(PASS|FAIL|XFAIL|XPASS|SKIP|ERROR):' "$out" | grep -vE '^PASS:' | sed 's/^/  /'
summary() { sed -n "s/^# $1: *//p" "$out" | tail -1; }
pass=$(summary PASS); fail=$(summary FAIL); err=$(summary ERROR); xpass=$(summary XPASS); skip=$(summary SKIP)
if [ -z "$pass" ]; then
	tail -30 "$out"
	echo "0 passed, 1 failed"
	exit 1
fi
# What each failed test said (its "not ok" lines and the diagnostics after
# them, bounded), so a CI log that shows only this summary still says why.
why_failed() {
	local log
	grep -E '^(FAIL|ERROR|XPASS):' "$out" | sed -E 's/^[A-Z]+: ([^ ]+).*/\1/' | sort -u | while read -r t; do
		log=$(dirname "$out")/${t%.sh}.log
		[ -f "$log" ] || continue
		echo "why ${t}:"
		if grep -q '^not ok' "$log"; then
			awk '/^(PASS|FAIL|XFAIL|XPASS|SKIP|ERROR):/ { next }	# the TAP driver copies each result
				/^not ok/ { n = 12 } n > 0 && (/^not ok/ || /^#/) { print; n--; next } { n = 0 }' "$log" | head -60
			# and what else it printed (stderr of its commands), the first lines
			grep -vE '^(ok|not ok|#|[0-9]+\.\.[0-9]+|(PASS|FAIL|XFAIL|XPASS|SKIP|ERROR):)' "$log" | head -8
		else
			tail -15 "$log"
		fi | sed 's/^/    /'
	done
}
why_failed
# The slowest test files (a .log's birth to its .trs's last write), so a CI
# log shows where the suite's time goes (its limit is 45 minutes).
slowest() {
	local trs log
	find "$(dirname "$out")" -name '*.trs' 2>/dev/null | while read -r trs; do
		log=${trs%.trs}.log
		[ -f "$log" ] || continue
		echo "$(( $(stat -c %Y "$trs") - $(stat -c %W "$log") )) ${log#"$(dirname "$out")"/}"
	done | sort -rn | head -12 | awk '$1 > 0 { printf "  %5d s  %s\n", $1, $2 }'
}
echo "slowest test files:"
slowest
failed=$(( ${fail:-0} + ${err:-0} + ${xpass:-0} ))
[ "$rc" -ne 0 ] && [ "$failed" -eq 0 ] && failed=1
if [ "${CI:-}" = true ] && [ "${skip:-0}" -gt 0 ]; then
	echo "CI=true: ${skip} skipped, each counted as a failure:"
	grep -E '^SKIP:' "$out" | sed 's/^SKIP: /  /'
	failed=$((failed + skip))
fi
echo "${pass} passed, ${failed} failed, ${skip:-0} skipped"
[ "$failed" -eq 0 ]
