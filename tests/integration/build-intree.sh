#!/bin/bash
# The README's "Building by hand" (./configure in the source tree), then
# scripts/build.sh (what scripts/demo.sh runs first): an out-of-tree
# configure refuses a source dir configured in place, so build.sh must cope.
# On a copy of the source tree; two full builds.
. "$FLEET_SRCDIR/tests/lib/common.sh"

src=$TEST_TMP/src
mkdir -p "$src"
# The sources, without any build output (build dirs, objects, configure's results).
excl=(--exclude=./.git --exclude=./build --exclude='*.o' --exclude='*.a' --exclude=config.status \
	--exclude=config.log --exclude=./Makefile --exclude=autoconfig.h)
case "$FLEET_BUILDDIR" in "$FLEET_SRCDIR"/*) excl+=(--exclude="./${FLEET_BUILDDIR#"$FLEET_SRCDIR"/}") ;; esac
tar -C "$FLEET_SRCDIR" "${excl[@]}" -cf - . | tar -C "$src" -xf -
ok $? "a copy of the source tree"

(cd "$src" && ./autogen.sh && ./configure --enable-werror && make -j2) >"$TEST_TMP/byhand.log" 2>&1
ok $? "./autogen.sh && ./configure --enable-werror && make, in the tree (README: Building by hand)" ||
	tail -20 "$TEST_TMP/byhand.log" | sed 's/^/#   /'
check "that built fleetd in place" -- test -x "$src/daemon/fleetd"

out=$(cd "$src" && env -u FLEET_BUILD_DIR bash scripts/build.sh 2>&1); rc=$?
is "$rc" 0 "then scripts/build.sh succeeds" || printf '%s\n' "$out" | tail -20 | sed 's/^/#   /'
like "$out" "configured in place.*make distclean" "and says it cleaned the in-place configuration"
check "fleetd is built out of tree in build/" -- test -x "$src/build/daemon/fleetd"
check "the source dir is no longer configured in place" -- test ! -e "$src/config.status"
out=$(cd "$src" && env -u FLEET_BUILD_DIR bash scripts/build.sh 2>&1); rc=$?
is "$rc" 0 "scripts/build.sh again: nothing to clean" || printf '%s\n' "$out" | tail -20 | sed 's/^/#   /'
ok "$(grep -q distclean <<<"$out" && echo 1 || echo 0)" "and cleans nothing"

done_testing
