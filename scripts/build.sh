#!/bin/bash
# Build fleet out of tree in ./build (developer mode: warnings are errors).
# Extra arguments go to configure, e.g. --enable-asan.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD
build=${FLEET_BUILD_DIR:-$src/build}
[ -x configure ] && [ configure -nt configure.ac ] && [ configure -nt Makefile.am ] || ./autogen.sh >/dev/null
mkdir -p "$build"
cd "$build"
if [ ! -f Makefile ] || [ "$src/configure" -nt Makefile ] || [ $# -gt 0 ]; then
	"$src/configure" --enable-werror "$@" >configure.out || { cat configure.out; exit 1; }
fi
make -j"$(nproc)" >make.out 2>&1 || { tail -50 make.out; exit 1; }
echo "build: ok ($build)"
