#!/bin/bash
# No sandbox holds an agent's network namespace mount (user/init.c's
# drop_netns_mounts, netns.c's netns_dir_mount; docs/user-backend.md "What a
# sandbox holds of the network namespaces"). Each sandbox's mount namespace
# starts as a copy of fleetd's, where every NAT agent's namespace is bound at
# <state>/netns/NAME: A's keeper held a mount of B's namespace (a handle to
# enter B's network) for as long as it lived, one more mount for every NAT
# agent in every sandbox. Here A runs (its keeper lives), an exec of A runs
# across the changes and a spare of A waits, while B is restarted and
# removed: none of A's sandboxes holds a mount of any agent's namespace
# (these checks fail without the fix), each is in A's own, and after the rm
# no process, mount or fd on the host refers to B's namespace (that one held
# before too: the unlink of B's file detaches its copies in every mount
# namespace), while A still reaches the outside (tests/lib/outside.sh: an
# address inside this test's own namespaces). Then the netns mount survives
# a kill -9 of fleetd unchanged, and a state dir whose namespaces an older
# fleetd bound without it is taken over without a second mount of any.
. "$FLEET_SRCDIR/tests/lib/own-netns.sh"
. "$FLEET_SRCDIR/tests/lib/common.sh"

[ "$(id -u)" = 0 ] || skip_all "needs root (user agents are Unix users)"
own_netns_ready
for t in nft ip nsenter socat jq findmnt; do command -v $t >/dev/null || skip_all "$t missing"; done

A=nna$(test_run_id) B=nnb$(test_run_id)
. "$FLEET_SRCDIR/tests/lib/outside.sh"
outside_setup || fail_all "cannot make the outside namespace"
outside_serve 198.51.100.2 8080 outside-two

FLEETD_PID=
on_exit '[ -n "$FLEETD_PID" ] && kill -TERM $FLEETD_PID; for _w in $(seq 100); do kill -0 $FLEETD_PID || break; sleep 0.1; done'
user_fleetd_setup nnpin
user_fleetd_start || { ok 1 "fleetd starts"; done_testing; }
NS=$STATE/netns

# mounts PID: how many mounts below the netns dir the process's mount namespace has (any agent's).
mounts() { grep -c " $NS/" /proc/$1/mountinfo 2>/dev/null; }
# holds PID AGENT: how many mounts of AGENT's namespace file the process's mount namespace has.
holds() { grep -c " $NS/$2 " /proc/$1/mountinfo 2>/dev/null; }
# netof PID: the process's network namespace (net:[INODE]).
netof() { readlink /proc/$1/ns/net 2>/dev/null; }
# users_of NET: every process or thread in NET, every fd on it, every mount of it (nsfs, any mount namespace).
users_of() {
	local n=$1 ino=${1//[^0-9]/}
	for l in /proc/[0-9]*/task/[0-9]*/ns/net; do [ "$(readlink "$l" 2>/dev/null)" = "$n" ] && echo "in it: $l"; done
	for l in /proc/[0-9]*/fd/*; do [ "$(readlink "$l" 2>/dev/null)" = "$n" ] && echo "fd: $l"; done
	grep -l " net:\[$ino\] " /proc/[0-9]*/mountinfo 2>/dev/null | sed 's/^/mount in: /'
}
alive() { [ -d /proc/$1 ] && ! grep -q '^State:[[:space:]]*Z' /proc/$1/status 2>/dev/null; }
from_a() { "$FLEETCTL" exec $A --no-stdin -- sh -c 'socat -T3 - TCP:198.51.100.2:8080,connect-timeout=3 </dev/null 2>/dev/null' 2>&1; }

check "fleetd made $NS a mount point" -- mountpoint -q "$NS"
"$FLEETCTL" create $A --backend user --network nat >/dev/null; ok $? "create $A --network nat"
"$FLEETCTL" create $B --backend user --network nat >/dev/null; ok $? "create $B --network nat"
is "$(holds $FLEETD_PID $A) $(holds $FLEETD_PID $B)" "1 1" "(fleetd's namespace has both namespaces bound)"
netA=net:[$(stat -L -c %i "$NS/$A")] netB=net:[$(stat -L -c %i "$NS/$B")]
ok "$([ "$netA" != "$netB" ]; echo $?)" "two namespaces: $A's $netA, $B's $netB"

"$FLEETCTL" start $A >/dev/null; ok $? "start $A"
for ((i = 0; i < 300; i++)); do kA=$(keeper_of $A); [ -n "$kA" ] && break; sleep 0.02; done
ok "$([ -n "$kA" ]; echo $?)" "$A's keeper runs (pid ${kA:-none})"
is "$(netof $kA)" "$netA" "$A's keeper is in $A's namespace"
is "$(mounts $kA)" 0 "$A's keeper holds no mount of any agent's namespace ($B's or its own)"
like "$(from_a)" '^outside-two 198\.51\.100\.1$' "an exec of $A reaches the outside (NATed), from its own namespace"
out=$("$FLEETCTL" exec $A --no-stdin -- sh -c "grep -c ' $NS/' /proc/self/mountinfo; readlink /proc/self/ns/net" 2>&1)
is "$out" "0
$netA" "an exec of $A holds no namespace mount and is in $A's namespace"

sp=$(wait_spare $A); ok $? "a spare of $A waits (pid ${sp:-none}; the next exec takes it)"
is "$(mounts ${sp:-0}) $(netof ${sp:-0})" "0 $netA" "the spare holds no namespace mount, in $A's namespace"

# An exec of A that runs across the restart and the rm of B.
"$FLEETCTL" exec $A --no-stdin -- sleep 60 >/dev/null 2>&1 & ex=$!; _pids+=($ex)
exi=
for ((i = 0; i < 500; i++)); do
	for p in $(pgrep -x fleet-init); do
		[ "$p" != "$kA" ] && grep -qE ":/fleet/$A\$" /proc/$p/cgroup 2>/dev/null && grep -q . /proc/$p/task/$p/children && exi=$p
	done
	[ -n "$exi" ] && break
	sleep 0.02
done
ok "$([ -n "$exi" ]; echo $?)" "a long exec of $A runs (its sandbox's init: ${exi:-none})"
is "$(mounts ${exi:-0}) $(netof ${exi:-0})" "0 $netA" "the exec's sandbox holds no namespace mount, in $A's namespace"
for ((i = 0; i < 300; i++)); do sp=$(spare_of $A); [ -n "$sp" ] && [ "$sp" != "$exi" ] && break; sleep 0.01; done
ok "$([ -n "$sp" ] && [ "$sp" != "$exi" ]; echo $?)" "and a new spare of $A waits (pid ${sp:-none})"
is "$(mounts ${sp:-0})" 0 "it holds no namespace mount either"

# B runs, restarts (its namespace is kept, not made again), is removed.
"$FLEETCTL" start $B >/dev/null; ok $? "start $B"
for ((i = 0; i < 300; i++)); do kB=$(keeper_of $B); [ -n "$kB" ] && break; sleep 0.02; done
is "$(netof ${kB:-0})" "$netB" "$B's keeper is in $B's namespace"
"$FLEETCTL" stop $B >/dev/null && "$FLEETCTL" start $B >/dev/null; ok $? "restart $B"
is "net:[$(stat -L -c %i "$NS/$B")]" "$netB" "$B's namespace is the same after the restart (kept, not made again)"
is "$(holds $kA $B) $(holds $exi $B) $(holds $sp $B)" "0 0 0" "none of $A's sandboxes holds $B's namespace"
"$FLEETCTL" rm --force $B >/dev/null; ok $? "rm $B"
check "$B's namespace file is gone" -- test ! -e "$NS/$B"
left=
for ((i = 0; i < 200; i++)); do left=$(users_of "$netB"); [ -z "$left" ] && break; sleep 0.05; done
is "$left" "" "no process, fd or mount on the host refers to $B's old namespace $netB"
is "$(grep -c " $NS/$B " /proc/[0-9]*/mountinfo 2>/dev/null | grep -vc ':0$')" 0 "no process has a mount at $B's namespace path"
ok "$(alive $kA && alive $exi && alive $sp; echo $?)" "$A's keeper, long exec and spare live on"
like "$(from_a)" '^outside-two 198\.51\.100\.1$' "$A still reaches the outside"
kill $ex 2>/dev/null; wait $ex 2>/dev/null

# kill -9 leaves the netns mount: the next fleetd uses it as it is (no second one on top).
user_fleetd_kill_restart; ok $? "fleetd restarts after kill -9"
is "$(grep -c " $NS " /proc/self/mountinfo)" 1 "one netns mount, the one it found"
is "$(holds $FLEETD_PID $A)" 1 "$A's namespace is bound once"
is "net:[$(stat -L -c %i "$NS/$A")] $(netof $kA)" "$netA $netA" "the same namespace, its keeper still in it"
like "$(from_a)" '^outside-two 198\.51\.100\.1$' "$A reaches the outside after the restart"
"$FLEETCTL" stop $A >/dev/null; ok $? "stop $A"

# A state dir an older fleetd left: A's namespace bound right on its file, netns/ no mount point.
stop_fleetd; ok $? "fleetd stops"
touch "$TEST_TMP/holdA" && mount --bind "$NS/$A" "$TEST_TMP/holdA"; ok $? "keep $A's namespace at a path of the test's"
umount -l "$NS"; ok $? "take the netns mount away (and $A's binding with it)"
mount --bind "$TEST_TMP/holdA" "$NS/$A" && umount "$TEST_TMP/holdA"
ok $? "bind $A's namespace on its file as an older fleetd did"
user_fleetd_start; ok $? "fleetd starts on that state dir"
check "$NS is a mount point again" -- mountpoint -q "$NS"
like "$(cat "$STATE/fleetd.log" 2>/dev/null)" "1 network namespace moved into the netns mount" "fleetd's log says it took the namespace along"
is "$(holds $$ $A)" 1 "$A's namespace is bound once (the one below the netns mount went)"
is "net:[$(stat -L -c %i "$NS/$A")]" "$netA" "the same namespace: it was not made a second time"
out=$("$FLEETCTL" exec $A --no-stdin -- sh -c "grep -c ' $NS/' /proc/self/mountinfo; readlink /proc/self/ns/net" 2>&1)
is "$out" "0
$netA" "an exec of $A is in it and holds no namespace mount"
like "$(from_a)" '^outside-two 198\.51\.100\.1$' "and reaches the outside"
"$FLEETCTL" rm --force $A >/dev/null; ok $? "rm $A"
left=
for ((i = 0; i < 200; i++)); do left=$(users_of "$netA"); [ -z "$left" ] && break; sleep 0.05; done
is "$left" "" "nothing on the host refers to $A's namespace any more"

done_testing
