#!/bin/bash
# The libFuzzer harnesses in make check: build them (tests/fuzz/build.sh,
# clang with ASan and UBSan, into $FLEET_BUILDDIR/fuzz) if needed, then run
# each for a few seconds on its corpus (tests/fuzz/corpus/NAME: the seeds
# and every crash-* regression input, each of which must run clean). One
# `ok` per harness. New inputs go to a temp dir, never into the source tree.
# Longer runs: tests/fuzz/run.sh --minutes N.
. "$FLEET_SRCDIR/tests/lib/common.sh"

command -v "${FUZZ_CC:-clang}" >/dev/null ||
	skip_all "clang not installed (scripts/deps.sh installs clang and libclang-rt-14-dev)"
out=$FLEET_BUILDDIR/fuzz
if ! log=$(bash "$FLEET_SRCDIR/tests/fuzz/build.sh" --out "$out" --config-header "$FLEET_BUILDDIR/autoconfig.h" 2>&1); then
	fail_all "the harnesses do not build: $(printf '%s' "$log" | tail -5 | tr '\n' ' ')"
fi

for src in "$FLEET_SRCDIR"/tests/fuzz/fuzz_*.c; do
	name=$(basename "$src" .c); name=${name#fuzz_}
	corpus=$FLEET_SRCDIR/tests/fuzz/corpus/$name
	bin=$out/fuzz_$name
	if [ ! -x "$bin" ] || [ ! -d "$corpus" ]; then
		ok 1 "fuzz_$name: built, with a corpus in tests/fuzz/corpus/$name"
		continue
	fi
	mkdir -p "$TEST_TMP/new-$name"
	# Every regression input on its own first: each must run without a crash.
	mapfile -t crashes < <(find "$corpus" -maxdepth 1 -type f -name 'crash-*' | sort)
	regress=0
	if [ ${#crashes[@]} -gt 0 ]; then
		"$bin" -rss_limit_mb=2048 -timeout=30 "${crashes[@]}" >"$TEST_TMP/$name.regress.log" 2>&1 || regress=$?
	fi
	# Then a short bounded run: 5 seconds or 200000 inputs, whichever comes first.
	"$bin" -max_total_time=5 -runs=200000 -timeout=30 -rss_limit_mb=2048 -print_final_stats=1 \
		-artifact_prefix="$TEST_TMP/crash-$name-" "$TEST_TMP/new-$name" "$corpus" >"$TEST_TMP/$name.log" 2>&1
	rc=$?
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$TEST_TMP/$name.log")
	ok $((rc || regress)) "fuzz_$name: ${#crashes[@]} regression inputs and ${execs:-?} runs on $(find "$corpus" -type f | wc -l) seeds, no crash" || {
		[ "$regress" -eq 0 ] || sed 's/^/#   /' "$TEST_TMP/$name.regress.log" | grep -E 'ERROR|runtime error|fuzz_' | head -10
		grep -E 'ERROR|runtime error|SUMMARY|fuzz_[a-z]+:|Test unit written' "$TEST_TMP/$name.log" | head -10 | sed 's/^/#   /'
		for f in "$TEST_TMP"/crash-"$name"-*; do
			[ -f "$f" ] && diag "crash input (base64): $(base64 -w0 "$f")"
		done
	}
done
done_testing
