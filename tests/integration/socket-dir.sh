#!/bin/bash
# The control socket's directory and path are not trusted blindly: a
# directory others can write is refused at start, and a symlink put where
# the socket was never makes fleetd (root) chown or chmod its target.
. "$FLEET_SRCDIR/tests/lib/common.sh"

[ "$(id -u)" = 0 ] || skip_all "needs root (chown of the decoy file)"

# --- a socket directory others can write --------------------------------------------
for mode in 1777 0777 0757; do
	mkdir -p "$TEST_TMP/open$mode"; chmod "$mode" "$TEST_TMP/open$mode"
	err=$("$FLEETD" --state-dir "$TEST_TMP/s$mode" --socket "$TEST_TMP/open$mode/fleetd.sock" \
		--config "$TEST_TMP/none.conf" 2>&1); rc=$?
	if [ "$rc" = 0 ]; then
		_pids+=("$(head -1 "$TEST_TMP/s$mode/fleetd.lock")")
		kill "$(head -1 "$TEST_TMP/s$mode/fleetd.lock")" 2>/dev/null
	fi
	is "$rc" 1 "fleetd refuses a socket directory of mode $mode"
	like "$err" "refusing socket directory $TEST_TMP/open$mode: others can write it" "and says why ($mode)"
	check "no socket was created in it ($mode)" -- test ! -e "$TEST_TMP/open$mode/fleetd.sock"
done
mkdir -p "$TEST_TMP/other"; chown 65534:65534 "$TEST_TMP/other"; chmod 0755 "$TEST_TMP/other"
err=$("$FLEETD" --state-dir "$TEST_TMP/sother" --socket "$TEST_TMP/other/fleetd.sock" --config "$TEST_TMP/none.conf" 2>&1)
rc=$?; [ "$rc" = 0 ] && { _pids+=("$(head -1 "$TEST_TMP/sother/fleetd.lock")"); kill "${_pids[-1]}"; }
is "$rc" 1 "fleetd refuses a socket directory another user owns"

# fleetd creates a missing socket directory 0755 (its own umask is 0077).
start_fleetd made --socket "$TEST_TMP/newdir/fleetd.sock" || ok 1 "fleetd starts with a new socket dir"
is "$(stat -c '%a %U' "$TEST_TMP/newdir")" "755 root" "a socket directory fleetd creates is 0755 root"
is "$(stat -c '%a %U' "$TEST_TMP/newdir/fleetd.sock")" "660 root" "the socket is 0660 root"
stop_fleetd TERM

# --- a symlink where the socket goes -----------------------------------------------------
decoy=$TEST_TMP/decoy
echo secret > "$decoy"; chown 65534:65534 "$decoy"; chmod 0600 "$decoy"

# Planted before the start: the stale entry is replaced, the decoy untouched.
ln -s "$decoy" "$TEST_TMP/pre.sock"
start_fleetd pre --socket "$TEST_TMP/pre.sock"; ok $? "fleetd starts over a planted symlink"
check "it serves a real socket there" -- test -S "$TEST_TMP/pre.sock" -a ! -L "$TEST_TMP/pre.sock"
is "$(stat -c '%a %u:%g' "$decoy")" "600 65534:65534" "the symlink's target kept its owner and mode"
stop_fleetd TERM

# Swapped in while fleetd runs (as anyone who could write the directory
# could): SIGHUP re-applies the socket's owner and mode, by path before.
start_fleetd swap; ok $? "fleetd starts"
rm -f "$SOCK"; ln -s "$decoy" "$SOCK"
kill -HUP "$FLEETD_PID"
for ((i = 0; i < 500; i++)); do grep -q "reload: configuration re-read" "$STATE/fleetd.log" && break; sleep 0.02; done
like "$(cat "$STATE/fleetd.log")" "reload: configuration re-read" "fleetd re-read its configuration"
is "$(stat -c '%a %u:%g' "$decoy")" "600 65534:65534" "a SIGHUP does not chown or chmod the symlink's target"
is "$(cat "$decoy")" secret "nor write to it"
like "$(cat "$STATE/fleetd.log")" "is no longer fleetd's socket" "fleetd logs that its socket was replaced"
rm -f "$SOCK"
stop_fleetd TERM

done_testing
