#!/bin/bash
# Build fleet's libFuzzer harnesses (tests/fuzz/fuzz_*.c) with clang, ASan and
# UBSan, out of the main (gcc) build: each harness links the project's own
# sources it fuzzes, compiled again here with the sanitizers and coverage.
#   tests/fuzz/build.sh [--out DIR] [--config-header FILE]
# DIR defaults to ./build/fuzz; FILE is the main build's autoconfig.h
# (default ./build/autoconfig.h). Recompiles only what changed. Prints the
# harness directory on success.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
out=$src/build/fuzz
confh=$src/build/autoconfig.h
while [ $# -gt 0 ]; do
	case $1 in
	--out) out=$2; shift 2 ;;
	--config-header) confh=$2; shift 2 ;;
	*) echo "usage: $0 [--out DIR] [--config-header FILE]" >&2; exit 2 ;;
	esac
done
CC=${FUZZ_CC:-clang}
if ! command -v "$CC" >/dev/null; then
	echo "fuzz: $CC not found: install the Debian packages clang and libclang-rt-14-dev (scripts/deps.sh)" >&2
	exit 77
fi
[ -f "$confh" ] || { echo "fuzz: no $confh: configure the main build first (scripts/build.sh)" >&2; exit 1; }
mkdir -p "$out/obj"
out=$(cd "$out" && pwd)

# Flags as the main build's (configure.ac), plus the sanitizers and coverage.
pkgflags=$(pkg-config --cflags jansson libcrypto libarchive)
pkglibs=$(pkg-config --libs jansson libcrypto libarchive)
# Warnings are the gcc build's business (clang's differ); the harnesses themselves are held to -Werror.
CFLAGS="-std=c11 -D_GNU_SOURCE -g -O1 -w -fno-omit-frame-pointer
	-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
	-include $confh -I$src $pkgflags"

# The project's sources each harness needs (their libraries' files, as mk/*.am lists them).
COMMON="common/util.c common/log.c common/names.c common/cron.c common/tz.c common/base64.c common/termsafe.c"
MODEL="model/agent.c model/snapshot.c model/run.c model/config.c model/egress.c"
HOOKS="hooks/verify_common.c hooks/source.c hooks/route.c hooks/proto.c hooks/verify_github.c
	hooks/verify_slack.c hooks/verify_twilio.c hooks/verify_datadog.c hooks/verify_standard.c hooks/verify_hmac.c"
declare -A NEEDS=(
	[proto]="$HOOKS $MODEL $COMMON"
	[verify]="$HOOKS $MODEL $COMMON"
	[cron]="$COMMON"
	[names]="$HOOKS $COMMON"
	[config]="$MODEL $COMMON"
	[memory]="agentd/memory.c $COMMON"
)

# One object per source file, rebuilt when the source, a header of the tree or the flags changed.
stamp=$out/obj/flags
echo "$CC $CFLAGS" | cmp -s - "$stamp" 2>/dev/null || { echo "$CC $CFLAGS" >"$stamp"; rm -f "$out"/obj/*.o; }
newest_h=$(find "$src" -path "$src/build" -prune -o -name '*.h' -newer "$stamp" -print -quit)
[ -z "$newest_h" ] || { touch "$stamp"; rm -f "$out"/obj/*.o; }
obj() {	# source path (relative to src) -> object path, compiled if needed
	local o=$out/obj/$(echo "${1%.c}" | tr / _).o
	if [ ! -f "$o" ] || [ "$src/$1" -nt "$o" ]; then
		# shellcheck disable=SC2086
		case $1 in
		tests/fuzz/*) extra="-Wall -Wextra -Werror -Wno-unused-parameter" ;;
		*) extra= ;;
		esac
		$CC $CFLAGS $extra -c "$src/$1" -o "$o.tmp" && mv "$o.tmp" "$o" || return 1
	fi
	echo "$o"
}
for name in "${!NEEDS[@]}"; do
	h=tests/fuzz/fuzz_$name.c
	[ -f "$src/$h" ] || continue
	objs=()
	for s in $h ${NEEDS[$name]}; do
		o=$(obj "$s") || exit 1
		objs+=("$o")
	done
	bin=$out/fuzz_$name
	rebuild=0
	[ -f "$bin" ] || rebuild=1
	for o in "${objs[@]}"; do [ "$o" -nt "$bin" ] && rebuild=1; done
	if [ $rebuild = 1 ]; then
		# shellcheck disable=SC2086
		$CC -fsanitize=fuzzer,address,undefined "${objs[@]}" $pkglibs -lpthread -ldl -o "$bin.tmp" && mv "$bin.tmp" "$bin" || exit 1
	fi
done
echo "$out"
