#!/bin/bash
# A fleetd killed (kill -9) while it builds a memory store (user/memfs.c:
# here a stopped agent's store built again at a new quota) leaves the build's
# NAME.img.new and its stage directory under <state>/memfs; the stage was
# mounted only in the build thread's own mount namespace (never in fleetd's,
# so no sandbox has a copy), and is mounted nowhere once fleetd is gone.
# fleetd's next start removes both, and leaves the agent's completed image
# (and its data) as it was (docs/memory.md, "Quota").
. "$FLEET_SRCDIR/tests/lib/common.sh"
A=umsw$(test_run_id)	# agent names of this run (two checkouts at once never collide)

[ "$(id -u)" = 0 ] || skip_all "needs root (user agents are Unix users)"

user_fleetd_setup umsw
user_fleetd_start; ok $? "fleetd starts"
"$FLEETCTL" create $A --backend user --memory-quota 160 >/dev/null; ok $? "create $A with a 160 MiB store"
MEMDIR=$STATE/memfs HOME_DIR=$STATE/users/$A
printf kept | "$FLEETCTL" memory $A put note; ok $? "put a value"
# Data for the rebuild to copy (with its stage mounted), long enough to be caught at it.
for i in 1 2 3 4 5 6 7; do head -c $((20 << 20)) /dev/zero > "$HOME_DIR/memory/blob$i"; done
chown fleet-$A: "$HOME_DIR"/memory/blob*; ok $? "fill the store with 140 MiB"
img_id=$(stat -c '%i %s' "$MEMDIR/$A.img")	# its mtime moves: mounting writes the superblock

# The resize of a stopped agent builds $A.img.new on .$A.stage; kill -9
# fleetd once the stage is mounted. A build that ends before the poll sees it,
# or between the poll and the kill, is tried again at the next size (never a
# duration: the order of events), from what that try left.
hit=no want_quota=160	# the store's quota before the killed build
# stage_in_fleetd: the stage is mounted in the namespace of one of fleetd's threads (the build's)
stage_in_fleetd() { cat /proc/$FLEETD_PID/task/*/mountinfo 2>/dev/null | grep -q " $MEMDIR/.$A.stage "; }
for quota in 200 230 256; do
	killed=no
	"$FLEETCTL" set $A --memory-quota $quota >/dev/null 2>&1 & setpid=$!; _pids+=($setpid)
	while kill -0 $setpid 2>/dev/null; do
		if stage_in_fleetd; then
			in_own=$(grep -c " $MEMDIR/.$A.stage " /proc/$FLEETD_PID/mountinfo)
			stop_fleetd KILL && killed=yes
			break
		fi
		sleep 0.005
	done
	wait $setpid 2>/dev/null
	if [ $killed = yes ] && [ -d "$MEMDIR/.$A.stage" ] && [ -e "$MEMDIR/$A.img.new" ]; then
		hit=yes
		break
	fi
	diag "the build at $quota MiB ended before the kill caught its stage; again"
	if [ $killed = yes ]; then
		user_fleetd_start || break
	fi
	img_id=$(stat -c '%i %s' "$MEMDIR/$A.img")
	want_quota=$("$FLEETCTL" --json show $A | jq -r .memory.quota_mib)
done
is "$hit" yes "fleetd was killed while its build's stage was mounted"
is "${in_own:-}" 0 "  in the build's own mount namespace, not in fleetd's"
stage_mounts=$(grep -l " $MEMDIR/.$A.stage " /proc/[0-9]*/mountinfo 2>/dev/null | tr '\n' ' ')
is "$stage_mounts" "" "  and with fleetd gone it is mounted nowhere"
check "  it left the stage directory" -- test -d "$MEMDIR/.$A.stage"
check "  and the new image" -- test -e "$MEMDIR/$A.img.new"

user_fleetd_start; ok $? "fleetd starts again"
check "the stage is gone" -- test ! -e "$MEMDIR/.$A.stage"
check "the killed build's image is gone" -- test ! -e "$MEMDIR/$A.img.new"
like "$(cat "$STATE/fleetd.log")" "removing .*/$A\.img\.new, the image of a build a killed fleetd left" "fleetd says so"
is "$(stat -c '%i %s' "$MEMDIR/$A.img")" "$img_id" "the completed image is the same file, of the same size"
check "  and mounted on the home" -- mountpoint -q "$HOME_DIR/memory"
is "$("$FLEETCTL" memory $A get note)" kept "its data is there"
is "$("$FLEETCTL" --json show $A | jq -r .memory.quota_mib)" "$want_quota" "the quota is the one the store has"
later=$((want_quota < 256 ? 256 : 250))	# a size the store does not have (256 MiB: the most)
"$FLEETCTL" set $A --memory-quota $later >/dev/null; ok $? "a later resize works"
is "$("$FLEETCTL" memory $A get note)" kept "  keeping the data"

done_testing
