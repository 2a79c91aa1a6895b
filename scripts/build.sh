#!/bin/bash
# Build fleet out of tree in ./build (developer mode: warnings are errors).
# Extra arguments go to configure, e.g. --enable-asan.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD
build=${FLEET_BUILD_DIR:-$src/build}
[ -x configure ] && [ configure -nt configure.ac ] && [ configure -nt Makefile.am ] || ./autogen.sh >/dev/null
# A tree configured in place (the README's "Building by hand": ./configure
# in the source dir) makes every out-of-tree configure refuse ("source
# directory already configured"): clean it first, as configure asks.
if [ -f "$src/config.status" ] && [ "$(cd "$src" && pwd -P)" != "$(mkdir -p "$build" && cd "$build" && pwd -P)" ]; then
	echo "build: $src was configured in place (./configure there); running 'make distclean' in it" \
		"so it can be built out of tree in $build" >&2
	if ! make -C "$src" distclean >"$src/distclean.out" 2>&1; then
		tail -20 "$src/distclean.out" >&2
		echo "build: 'make distclean' in $src failed; remove its config.status and Makefile by hand" >&2
		exit 1
	fi
	rm -f "$src/distclean.out"
fi
mkdir -p "$build"
cd "$build"
if [ ! -f Makefile ] || [ "$src/configure" -nt Makefile ] || [ $# -gt 0 ]; then
	"$src/configure" --enable-werror "$@" >configure.out || { cat configure.out; exit 1; }
fi
make -j"$(nproc)" >make.out 2>&1 || { tail -50 make.out; exit 1; }
echo "build: ok ($build)"
