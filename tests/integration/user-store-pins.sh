#!/bin/bash
# No sandbox holds another agent's memory store (user/init.c's
# drop_other_stores, account.c's account_users_mount; docs/memory.md "What a
# sandbox holds"). Each sandbox's mount namespace starts as a copy of
# fleetd's, where every agent's store is mounted: a copy of B's store in A's
# keeper kept B's old file system, loop device and deleted image alive after
# a restore or rm of B for as long as the keeper lived. Here A runs (its
# keeper lives), an exec of A runs across the changes and a spare of A
# waits, while B's store is replaced (restore) and removed (rm): none of
# A's sandboxes holds a mount of B's store, each holds its own, and
# afterwards no loop device backs B's old or deleted image. Then the
# users mount survives a kill -9 of fleetd unchanged, and a state dir whose
# stores an older fleetd mounted without it is taken over without a second
# mount of any image.
. "$FLEET_SRCDIR/tests/lib/common.sh"

[ "$(id -u)" = 0 ] || skip_all "needs root (user agents are Unix users)"
command -v jq >/dev/null || skip_all "jq not installed"
command -v losetup >/dev/null || skip_all "losetup not installed"

A=pna$(test_run_id) B=pnb$(test_run_id)
user_fleetd_setup upin
user_fleetd_start || { ok 1 "fleetd starts"; done_testing; }
U=$STATE/users
IMG_B=$STATE/memfs/$B.img

# holds PID AGENT: how many mounts of AGENT's store the process's mount namespace has.
holds() { grep -c " $U/$2/memory " /proc/$1/mountinfo 2>/dev/null; }
# backing IMG: the loop devices whose backing file is IMG, "(deleted)" or not.
backing() {
	local f
	for f in /sys/block/loop*/loop/backing_file; do
		case "$(cat "$f" 2>/dev/null)" in "$1" | "$1 (deleted)") echo "${f%/loop/backing_file}" ;; esac
	done
}
# no_backing IMG: until no loop device backs IMG (an autoclear loop is let go once its last mount went).
no_backing() {
	local i
	for ((i = 0; i < 200; i++)); do [ -z "$(backing "$1")" ] && return 0; sleep 0.05; done
	diag "still backing $1: $(backing "$1" | tr '\n' ' ')"
	return 1
}
alive() { [ -d /proc/$1 ] && ! grep -q '^State:[[:space:]]*Z' /proc/$1/status 2>/dev/null; }

check "fleetd made $U a mount point" -- mountpoint -q "$U"
"$FLEETCTL" create $A --backend user --memory-quota 2 >/dev/null; ok $? "create $A"
"$FLEETCTL" create $B --backend user --memory-quota 2 >/dev/null; ok $? "create $B"
printf mine | "$FLEETCTL" memory $A put mark >/dev/null; ok $? "a value in $A's store"
printf old | "$FLEETCTL" memory $B put mark >/dev/null && "$FLEETCTL" snapshot $B s1 >/dev/null
ok $? "a value in $B's store, and a snapshot s1 of it"
printf new | "$FLEETCTL" memory $B put mark >/dev/null
"$FLEETCTL" start $A >/dev/null; ok $? "start $A"
for ((i = 0; i < 300; i++)); do kA=$(keeper_of $A); [ -n "$kA" ] && break; sleep 0.02; done
ok "$([ -n "$kA" ]; echo $?)" "$A's keeper runs (pid ${kA:-none})"
is "$(holds $kA $A)" 1 "control: $A's keeper holds its own store"
is "$(holds $kA $B)" 0 "$A's keeper holds no mount of $B's store"
is "$(holds $FLEETD_PID $B)" 1 "(fleetd's namespace has $B's store)"

out=$("$FLEETCTL" exec $A --no-stdin -- sh -c \
	"cat ~/memory/mark; echo; grep -c ' $U/$A/memory ' /proc/self/mountinfo; grep -c ' $U/$B/memory ' /proc/self/mountinfo" 2>&1)
is "$out" "mine
1
0" "an exec of $A reads its own store, holds its mount and none of $B's"
"$FLEETCTL" exec $A --no-stdin -- sh -c 'echo written > ~/memory/by-exec'; ok $? "an exec of $A writes into its store"
is "$("$FLEETCTL" memory $A get by-exec)" written "fleetd reads what it wrote (through agentd in a sandbox)"
out=$("$FLEETCTL" exec $A --no-stdin -- sh -c 'head -c 3000000 /dev/zero > ~/memory/big' 2>&1); rc=$?
ok "$([ $rc -ne 0 ]; echo $?)" "the quota still holds in $A's sandbox (2 MiB)"
like "$out" "No space left on device" "with the file system's own error"
"$FLEETCTL" exec $A --no-stdin -- sh -c 'rm -f ~/memory/big'

sp=$(wait_spare $A); ok $? "a spare of $A waits (pid ${sp:-none}; the next exec takes it)"
is "$(holds $sp $A) $(holds $sp $B)" "1 0" "the spare holds $A's store and none of $B's"

# An exec of A that runs across the restore and the rm of B.
"$FLEETCTL" exec $A --no-stdin -- sh -c "echo up > ~/memory/long; sleep 30" >/dev/null 2>&1 & ex=$!; _pids+=($ex)
for ((i = 0; i < 500; i++)); do [ "$("$FLEETCTL" memory $A get long 2>/dev/null)" = up ] && break; sleep 0.02; done
exi=
for p in $(pgrep -x fleet-init); do
	[ "$p" != "$kA" ] && grep -qE ":/fleet/$A\$" /proc/$p/cgroup 2>/dev/null && grep -q . /proc/$p/task/$p/children && exi=$p
done
ok "$([ -n "$exi" ]; echo $?)" "a long exec of $A runs (its sandbox's init: ${exi:-none})"
is "$(holds ${exi:-0} $A) $(holds ${exi:-0} $B)" "1 0" "the exec's sandbox holds $A's store and none of $B's"
for ((i = 0; i < 300; i++)); do sp=$(spare_of $A); [ -n "$sp" ] && [ "$sp" != "$exi" ] && break; sleep 0.01; done
ok "$([ -n "$sp" ] && [ "$sp" != "$exi" ]; echo $?)" "and a new spare of $A waits (pid ${sp:-none})"
is "$(holds ${sp:-0} $A) $(holds ${sp:-0} $B)" "1 0" "it holds $A's store and none of $B's"

old_loop=$(backing "$IMG_B")
ok "$([ -n "$old_loop" ]; echo $?)" "$B's image is on ${old_loop##*/}"
"$FLEETCTL" restore $B s1 >/dev/null; ok $? "restore $B to s1 (a new image swapped in, the old one unmounted and deleted)"
is "$("$FLEETCTL" memory $B get mark)" old "$B's store is the snapshot's"
no_backing "$IMG_B (deleted)"; ok $? "no loop device backs $B's old, deleted image"
is "$(backing "$IMG_B" | wc -l)" 1 "one loop device backs its new one"
ok "$(alive $kA; echo $?)" "$A's keeper lives on"
ok "$(alive $exi; echo $?)" "so does $A's long exec"
ok "$(alive $sp; echo $?)" "and $A's spare: none of them had to go for $B's store to"

"$FLEETCTL" rm --force $B >/dev/null; ok $? "rm $B"
no_backing "$IMG_B"; ok $? "no loop device backs $B's image any more"
check "its image is gone" -- test ! -e "$IMG_B"
is "$(grep -c " $U/$B/memory " /proc/[0-9]*/mountinfo 2>/dev/null | grep -vc ':0$')" 0 "no process on the host has a mount of $B's store"
ok "$(alive $kA; echo $?)" "$A's keeper lives on"
is "$("$FLEETCTL" exec $A --no-stdin -- sh -c 'cat ~/memory/mark' 2>&1)" mine "an exec of $A still reads its own store"
kill $ex 2>/dev/null; wait $ex 2>/dev/null

# kill -9 leaves the users mount: the next fleetd uses it as it is (no second one on top).
user_fleetd_kill_restart; ok $? "fleetd restarts after kill -9"
is "$(grep -c " $U " /proc/self/mountinfo)" 1 "one users mount, the one it found"
is "$(holds $FLEETD_PID $A)" 1 "$A's store is mounted once"
"$FLEETCTL" stop $A >/dev/null; ok $? "stop $A"

# A state dir an older fleetd left: the stores mounted right on the homes, users/ no mount point.
stop_fleetd; ok $? "fleetd stops"
umount -l "$U"; ok $? "take the users mount away (and the stores with it, lazily)"
no_backing "$STATE/memfs/$A.img"; ok $? "$A's image is on no loop device"
mount -o loop,nosuid,nodev "$STATE/memfs/$A.img" "$U/$A/memory"; ok $? "mount $A's store on its home as an older fleetd did"
loop_a=$(backing "$STATE/memfs/$A.img")
user_fleetd_start; ok $? "fleetd starts on that state dir"
check "$U is a mount point again" -- mountpoint -q "$U"
like "$(cat "$STATE/fleetd.log" 2>/dev/null)" "1 memory store moved into the users mount" "fleetd's log says it took the store along"
is "$(holds $$ $A)" 1 "$A's store is mounted once (the one below the users mount went)"
is "$(backing "$STATE/memfs/$A.img")" "$loop_a" "on the same loop device: the image was not mounted a second time"
out=$("$FLEETCTL" exec $A --no-stdin -- sh -c "cat ~/memory/mark; echo; grep -c ' $U/$A/memory ' /proc/self/mountinfo" 2>&1)
is "$out" "mine
1" "an exec of $A reads its store, mounted once in its sandbox"
"$FLEETCTL" rm --force $A >/dev/null; ok $? "rm $A"
no_backing "$STATE/memfs/$A.img"; ok $? "no loop device backs $A's image any more"

done_testing
