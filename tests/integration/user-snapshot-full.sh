#!/bin/bash
# A full disk under a user agent's snapshots and restores. fleetd's whole
# state dir (database, homes, snapshots/, users/NAME.restore where a restore
# builds its copy) is a small tmpfs the test mounts and unmounts on exit, also
# on failure, so the host's disk is never filled. A snapshot and a restore
# that run out of space fail with "No space left on device" and leave nothing
# behind: no row, no half-made directory, the agent running and not frozen,
# its home exactly as it was. Once space is freed both work.
. "$FLEET_SRCDIR/tests/lib/common.sh"

[ "$(id -u)" = 0 ] || skip_all "needs root (user agents are Unix users)"

# Outside /tmp: each exec has a private /tmp.
STATE=$(mktemp -d /var/lib/fleet-usf.XXXXXX); SOCKDIR=$(mktemp -d /run/fleet-usf.XXXXXX)
on_exit "_umount_under '$STATE'; rm -rf --one-file-system '$STATE' '$SOCKDIR'"
chmod 0755 "$SOCKDIR"
SOCK=$SOCKDIR/fleetd.sock
FLEETD_PID=
# Runs after _remove_agents (registered later): fleetd holds files on the tmpfs.
unmount_state() {
	[ -z "$FLEETD_PID" ] || stop_fleetd || stop_fleetd KILL
	umount "$STATE" || umount -l "$STATE"
}
trap "trap '' TERM INT; _cleanup" EXIT	# a signal (bash runs EXIT on TERM and INT) must not cut the unmount short
mount -t tmpfs -o size=32m,mode=0711 fleet-usf "$STATE"; ok $? "a 32 MiB tmpfs as fleetd's state dir"
on_exit unmount_state
"$FLEETD" --state-dir "$STATE" --socket "$SOCK" --config "$TEST_TMP/none.conf" \
	--user-uid-min "$_uid_base" --user-uid-max "$((_uid_base + 999))" 2>"$TEST_TMP/start.err"
ok $? "fleetd starts"
FLEETD_PID=$(head -1 "$STATE/fleetd.lock"); _pids+=("$FLEETD_PID"); _sockets+=("$SOCK")
on_exit _remove_agents
export FLEET_SOCKET=$SOCK

A=diskfull$(test_run_id)	# agent names of this run (two checkouts at once never collide)
HOME_DIR=$STATE/users/$A
SNAPS=$STATE/snapshots/$A
ex() { "$FLEETCTL" exec "$A" "$@"; }
avail() { df -B1 --output=avail "$STATE" | tail -1 | tr -d ' '; }
_fills=0
fill() {	# fill BYTES: leave BYTES free (0: none at all)
	local a; a=$(avail)
	[ "$a" -gt "$1" ] || return 0
	fallocate -l $((a - $1)) "$STATE/filler.$((++_fills))"
}
unfill() { rm -f "$STATE"/filler.*; }
# Everything about the home: names, types, modes, owners, sizes, mtimes, inodes, contents. Not the
# mtime of the home itself: the health check before each snapshot writes a probe file there.
home_state() {
	(cd "$HOME_DIR" && stat -c '. %F %a %u %g %i' . && find . -mindepth 1 -printf '%p %y %m %U %G %s %T@ %i\n' | sort &&
		find . -type f -print0 | sort -z | xargs -0 -r md5sum)
}
# The snapshots as fleet lists them, as the database holds them (any state), as directories.
snaps() {
	echo "fleet=$("$FLEETCTL" --json snapshots "$A" | jq -r '[.[].name] | join(",")')" \
		"db=$(sqlite3 "$STATE/fleet.db" "SELECT group_concat(name || ':' || state, ',') FROM (SELECT name, state FROM snapshots ORDER BY name)")" \
		"dirs=$(ls -A "$SNAPS" | paste -sd, -)"
}
wait_for() { local d=$((SECONDS + $1)); shift; until "$@"; do [ $SECONDS -lt $d ] || return 1; sleep 0.1; done; }
trash_empty() { [ -z "$(ls -A "$STATE/snapshots/.trash")" ]; }
# 0 when the agent's cgroup is not frozen (v2 cgroup.events, else the v1 freezer); fails if neither is found.
not_frozen() {
	local f
	f=$(find /sys/fs/cgroup -maxdepth 8 -path "*/fleet/$A/cgroup.events" 2>/dev/null | head -1)
	[ -n "$f" ] && { grep -qx 'frozen 0' "$f"; return; }
	f=$(find /sys/fs/cgroup -maxdepth 8 -path "*/fleet/$A/freezer.state" 2>/dev/null | head -1)
	[ -n "$f" ] && grep -qx THAWED "$f"
}
state() { "$FLEETCTL" --json show "$A" | jq -r .state; }

# --memory-quota 4: the agent's memory store is an image allocated at its quota on this 32 MiB tmpfs
"$FLEETCTL" create "$A" --backend user --memory-quota 4 >/dev/null && "$FLEETCTL" start "$A" >/dev/null; ok $? "a user agent runs"
ex -- sh -c 'echo precious > ~/memory/keep; head -c 4M /dev/urandom > ~/work/blob'
blob_md5=$(md5sum < "$HOME_DIR/work/blob")
"$FLEETCTL" snapshot "$A" s1 >/dev/null; ok $? "a snapshot while there is room"
ex -- sh -c 'echo changed > ~/memory/keep; head -c 4M /dev/urandom > ~/work/blob2'
before=$(home_state)

# --- 1 MiB free: the copies do not fit ------------------------------------------------------
fill $((1 << 20)); ok $? "fill the disk up to 1 MiB free"
a0=$(avail)
err=$("$FLEETCTL" snapshot "$A" s2 2>&1); is "$?" 1 "a snapshot that does not fit fails"
like "$err" "snapshot 's2' failed: .*No space left on device" "the error says the disk is full"
out=$(api POST "/v1/agents/$A/snapshots" '{"name":"s2"}')
is "${out##* }|$(printf '%s' "${out% *}" | jq -r .code)" "507|no_space" "the API answers 507 no_space"
wait_for 10 trash_empty; ok $? "the half-made copy is removed (the trash empties)"
is "$(snaps)" "fleet=s1 db=s1:ready dirs=s1" "no row, no directory: only the earlier snapshot"
ok $([ "$(avail)" -ge $((a0 - (256 << 10))) ] && echo 0 || echo 1) "the space it took is free again"
not_frozen; ok $? "the agent is not left frozen"
is "$(state)" running "the agent runs on"
is "$(ex -- cat memory/keep 2>&1)" changed "exec works"
is "$(home_state)" "$before" "the home is untouched"

err=$("$FLEETCTL" restore "$A" s1 2>&1); is "$?" 1 "a restore that cannot build its copy fails"
like "$err" "restore of 's1' failed: .*No space left on device" "the error says the disk is full"
is "$(home_state)" "$before" "the home is exactly as it was (same inodes, same contents)"
wait_for 10 trash_empty; ok $? "the half-built copy is removed"
ok $([ ! -e "$HOME_DIR.restore" ] && echo 0 || echo 1) "no $A.restore is left"
ok $([ "$(avail)" -ge $((a0 - (256 << 10))) ] && echo 0 || echo 1) "the space it took is free again"
is "$(state)" running "the agent runs on (its keeper was not stopped)"
is "$(ex -- cat memory/keep 2>&1)" changed "exec works"

# --- no space at all: the database cannot grow either ---------------------------------------
fill 0; is "$(avail)" 0 "fill the disk completely"
err=$("$FLEETCTL" snapshot "$A" s2 2>&1); is "$?" 1 "a snapshot on a full disk fails"
like "$err" "No space left on device" "saying the disk is full"
wait_for 10 trash_empty
is "$(snaps)" "fleet=s1 db=s1:ready dirs=s1" "nothing of it is left"
err=$("$FLEETCTL" restore "$A" s1 2>&1); is "$?" 1 "a restore on a full disk fails"
like "$err" "No space left on device" "saying the disk is full"
wait_for 10 trash_empty
is "$(home_state)" "$before" "the home is exactly as it was"
is "$(ex -- cat memory/keep 2>&1)" changed "exec works"

# --- space freed ----------------------------------------------------------------------------
unfill
out=$("$FLEETCTL" restore "$A" s1 2>&1); ok $? "once space is freed, the restore works"
is "$(ex -- cat memory/keep 2>&1)" precious "the snapshot's file is back"
is "$(md5sum < "$HOME_DIR/work/blob")|$(ls "$HOME_DIR/work")" "$blob_md5|blob" "with its contents, and nothing newer"
is "$(stat -c '%a %U' "$HOME_DIR")" "700 fleet-$A" "the home is the agent's, 0700"
out=$("$FLEETCTL" snapshot "$A" s2 2>&1); ok $? "and a snapshot works"
is "$(snaps)" "fleet=s1,s2 db=s1:ready,s2:ready dirs=s1,s2" "it is listed and on disk"

# --- delete on a full disk: it must complete or change nothing ------------------------------
fill 0
err=$("$FLEETCTL" snapshot rm "$A" s2 2>&1); rc=$?
s=$(snaps)
if [ $rc = 0 ]; then
	is "$s" "fleet=s1 db=s1:ready dirs=s1" "a delete on a full disk that succeeds removes the snapshot everywhere"
else
	like "$err" "No space left on device" "a delete on a full disk that fails says the disk is full"
	# snapshots.c marks the row 'deleting' before the backend deletes anything:
	# when even that write fails, nothing has changed.
	is "$s" "fleet=s1,s2 db=s1:ready,s2:ready dirs=s1,s2" "and changes nothing: the snapshot stays listed and on disk"
fi
unfill
"$FLEETCTL" rm --force "$A" >/dev/null; ok $? "rm removes the agent"
is "$(sqlite3 "$STATE/fleet.db" "SELECT count(*) FROM snapshots")" 0 "no snapshot rows are left"
done_testing
