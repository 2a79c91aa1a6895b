#!/bin/bash
# The spare sandbox of a user agent (user/spare.c, issue #16): after an exec
# one waits, set up, in the agent's cgroup; the next exec runs in it; it
# carries nothing of one exec into another (environment, secret files,
# /tmp); it counts as no process of the agent (the agent stays stopped);
# a mount made since its clone is seen all the same (a stale spare is not
# used); it never outlives the agent's stop, its removal, fleetd or its idle
# limit; it is made once the command that took the last one ends, or
# SPARE_DEFER_MS into it if it runs longer; a spare set up for a uid the agent's user no longer has (made
# again by hand) is not used; and it never stands in a restore's way: restores of one agent while
# another execs (a spare made after each exec) all work, no spare of the
# other agent holds a copy of the restored store (user/init.c drops every
# other agent's store), and a restore cut
# off by kill -9 is done again at the next start while execs go on (issue
# #16: each of them failed "cannot unmount .../.NAME.stage: busy" once).
# Its own mount (and network) namespace: a mount anywhere on the host (other
# tests') would make a waiting spare stale, and the exec that should take it
# would get a fresh sandbox.
. "$FLEET_SRCDIR/tests/lib/own-netns.sh"
. "$FLEET_SRCDIR/tests/lib/common.sh"

[ "$(id -u)" = 0 ] || skip_all "needs root (user agents are Unix users)"
own_netns_ready
command -v jq >/dev/null || skip_all "jq not installed"

A=spr$(test_run_id)
user_fleetd_setup uspr
user_fleetd_start || { ok 1 "fleetd starts"; done_testing; }
"$FLEETCTL" create $A --backend user >/dev/null 2>&1; ok $? "create $A" || done_testing

# gone PID: until it is gone (a zombie counts as gone: it runs nothing).
gone() {
	local i
	for ((i = 0; i < 500; i++)); do
		[ -d /proc/$1 ] && ! grep -q '^State:[[:space:]]*Z' /proc/$1/status 2>/dev/null || return 0
		sleep 0.01
	done
	return 1
}
state_of() { "$FLEETCTL" --json show "$1" | jq -r .state; }

is "$(spare_of $A)" "" "no spare before the first exec"
cg_fresh=$("$FLEETCTL" exec $A --no-stdin -- cat /proc/self/cgroup); ok $? "first exec (a sandbox of its own)"
like "$cg_fresh" ":/fleet/$A\$" "it runs in $A's cgroups"
s1=$(wait_spare $A); ok $? "then a spare waits in $A's cgroup (pid ${s1:-none})"
is "$(stat -c %u /proc/$s1 2>/dev/null)" 0 "it is root's, like every sandbox init"
is "$(cat /proc/$s1/task/$s1/children 2>/dev/null)" "" "it runs nothing: no child"
is "$(state_of $A)" stopped "the agent is still stopped: a spare is no process of the agent"

# The next exec runs in that spare: while it sleeps, the spare is its sandbox's init, with the command as child.
"$FLEETCTL" exec $A --no-stdin -- sleep 1 & ex=$!
for ((i = 0; i < 300; i++)); do [ -n "$(cat /proc/$s1/task/$s1/children 2>/dev/null)" ] && break; sleep 0.01; done
is "$(cat /proc/$s1/comm 2>/dev/null)" fleet-init "the next exec takes the spare: it is that exec's sandbox init now"
ok "$([ -n "$(cat /proc/$s1/task/$s1/children 2>/dev/null)" ]; echo $?)" "with the command as its child"
is "$(state_of $A)" running "the agent runs while the command does"
wait $ex; ok $? "that exec ends well"
gone $s1; ok $? "the used spare ended with its command"
s2=$(wait_spare $A); ok $? "and a new spare waits"
ok "$([ "$s2" != "$s1" ]; echo $?)" "another process"

# A command a spare takes is in the agent's cgroups, the same as one in a sandbox of its own: fleetd
# opens no cgroup file for it (the spare joined them when it was made: user/keeper.c).
cg_s2=$(cat /proc/$s2/cgroup)
cg_spare=$("$FLEETCTL" exec $A --no-stdin -- cat /proc/self/cgroup); ok $? "an exec through the spare"
gone $s2; ok $? "it took the spare"
is "$cg_spare" "$cg_fresh" "its command is in the same cgroups as the first exec's, in every hierarchy"
is "$cg_s2" "$cg_fresh" "as the spare was while it waited"

# A snapshot freezes the agent's cgroups: it drops the waiting spare (taken without the leftover-freeze
# check), and the exec after it gets a sandbox of its own, after that check.
s2=$(wait_spare $A); ok $? "a spare waits"
"$FLEETCTL" snapshot $A sp1 >/dev/null; ok $? "a snapshot of $A while a spare waits"
gone $s2; ok $? "the snapshot dropped the spare"
is "$(timeout 20 "$FLEETCTL" exec $A --no-stdin -- cat /proc/self/cgroup 2>&1)" "$cg_fresh" "the exec after it runs, in $A's cgroups"
s2=$(wait_spare $A); ok $? "and a new spare waits"

# Nothing of one exec reaches the next: environment, secret files, /tmp, processes.
printf 'tok-%s' "$(test_run_id)" | "$FLEETCTL" secret set $A TOKEN >/dev/null; ok $? "set a secret"
out=$("$FLEETCTL" exec $A --no-stdin --env MARK=one --secret-files -- sh -c \
	'echo "$MARK $(cat "$FLEET_SECRETS_DIR/TOKEN")"; echo left > /tmp/left; (setsid sleep 30 &) ; true' 2>&1)
is "$out" "one tok-$(test_run_id)" "an exec with --env and --secret-files gets both (through a spare)"
s3=$(wait_spare $A)
out=$("$FLEETCTL" exec $A --no-stdin -- sh -c \
	'echo "mark=${MARK:-unset} secrets=${FLEET_SECRETS_DIR:-unset} $(ls -A /run /tmp | tr "\n" " ")$(pgrep -c sleep)"' 2>&1)
is "$out" "mark=unset secrets=unset /run: fleet lock  /tmp: 0" \
	"the next exec has none of it: no variable, no /run/secrets, an empty /tmp, no process of the last one"

# A mount fleetd's namespace got after the spare's clone: the spare is stale, so not used.
s4=$(wait_spare $A); ok $? "a spare waits"
M=$STATE/spare-mnt; mkdir -p "$M"
mount -t tmpfs -o mode=0755,size=1m spare-test "$M" && on_exit "umount -l '$M'"
echo fresh > "$M/f"; chmod 0644 "$M/f"
is "$("$FLEETCTL" exec $A --no-stdin -- cat "$M/f" 2>&1)" fresh "a mount made after the spare's clone is seen by the next exec"
gone $s4; ok $? "the stale spare was dropped"
umount "$M"

# Restores of R while $A execs in a loop (each exec asks for a spare, cloned on fleetd's maker thread).
R=spq$(test_run_id)
"$FLEETCTL" create $R --backend user --memory-quota 100 >/dev/null; ok $? "create $R (restored below)"
printf snap1 | "$FLEETCTL" memory $R put mark >/dev/null && "$FLEETCTL" snapshot $R s1 >/dev/null
ok $? "$R: a mark, and a snapshot s1 of it"
exec_loop() { while [ ! -e "$TEST_TMP/stop-execs" ]; do "$FLEETCTL" exec $A --no-stdin -- true >/dev/null 2>&1; done; }
rm -f "$TEST_TMP/stop-execs"; exec_loop & el=$!; _pids+=($el)
fails=() spare_held=()
for ((i = 0; i < 30; i++)); do
	before=$(spare_of $A)
	out=$("$FLEETCTL" restore $R s1 2>&1) || fails+=("$i: $out")
	# The spare that waited before the restore, if it still waits, has no copy of $R's store, old or new.
	[ -n "$before" ] && grep -q " $STATE/users/$R/memory " /proc/$before/mountinfo 2>/dev/null && spare_held+=("$before")
done
touch "$TEST_TMP/stop-execs"; wait $el
is "${fails[*]:-}" "" "30 restores of $R while $A execs in a loop all work"
is "${spare_held[*]:-}" "" "no spare of $A holds a mount of $R's store"
for ((i = 0; i < 200; i++)); do
	grep -q " (deleted)" <(grep -h "$STATE/memfs/$R.img" /sys/block/loop*/loop/backing_file 2>/dev/null) || break
	sleep 0.05
done
is "$(grep -h "$STATE/memfs/$R.img" /sys/block/loop*/loop/backing_file 2>/dev/null | grep -c deleted)" 0 \
	"no loop device backs an old, deleted image of $R's (nothing kept one)"
is "$(grep -l "/\.$R\.stage " /proc/[0-9]*/mountinfo 2>/dev/null | tr '\n' ' ')" "" "no process has $R's stage mounted"
is "$("$FLEETCTL" memory $R get mark)" snap1 "$R's store is the snapshot's"

# A restore cut off by kill -9 (its stage mounted, in its build's namespace) is done again at the next start, with execs going on.
head -c $((60 << 20)) /dev/zero > "$STATE/users/$R/memory/blob" && chown fleet-$R: "$STATE/users/$R/memory/blob"
printf snap2 | "$FLEETCTL" memory $R put mark >/dev/null && "$FLEETCTL" snapshot $R s2 >/dev/null
ok $? "$R: 60 MiB more in its store, and a snapshot s2 (a restore long enough to be caught at its build)"
printf later | "$FLEETCTL" memory $R put mark >/dev/null
stage_in_fleetd() { cat /proc/$FLEETD_PID/task/*/mountinfo 2>/dev/null | grep -q "/\.$R\.stage "; }
hit=no
for try in 1 2 3; do
	"$FLEETCTL" restore $R s2 >/dev/null 2>&1 & rp=$!; _pids+=($rp)
	killed=no
	while kill -0 $rp 2>/dev/null; do
		stage_in_fleetd && { kill -9 "$FLEETD_PID"; gone "$FLEETD_PID"; killed=yes; break; }
		sleep 0.005
	done
	wait $rp 2>/dev/null
	[ $killed = yes ] && { hit=yes; break; }
	diag "restore $try ended before the kill caught its stage; again"
	printf later | "$FLEETCTL" memory $R put mark >/dev/null
done
is "$hit" yes "fleetd killed (-9) while $R's restore had its stage mounted"
rm -f "$TEST_TMP/stop-execs"
user_fleetd_start; ok $? "fleetd restarts (and does the restore again)"
exec_loop & el=$!; _pids+=($el)
for ((i = 0; i < 600; i++)); do
	[ "$("$FLEETCTL" --json show $R | jq -r '.snapshots.restoring')" = null ] && break
	sleep 0.2
done
touch "$TEST_TMP/stop-execs"; wait $el
is "$("$FLEETCTL" --json show $R | jq -r '.snapshots.restoring')" null "the restore done again ended"
is "$(state_of $R)" stopped "$R is stopped, not bad"
is "$("$FLEETCTL" memory $R get mark)" snap2 "$R's store is s2's"
like "$(grep -F "'$R'" "$STATE/fleetd.log")" "restore of 's2' was interrupted .*restoring it again" "fleetd's log says it did it again"
is "$(grep -l "/\.$R\.stage " /proc/[0-9]*/mountinfo 2>/dev/null | tr '\n' ' ')" "" "no process has $R's stage mounted"
check "its stage directory is gone" -- test ! -e "$STATE/memfs/.$R.stage"
sa=$(wait_spare $A)
"$FLEETCTL" rm --force $R >/dev/null; ok $? "rm --force $R"
is "$(cat /proc/${sa:-0}/comm 2>/dev/null) $(grep -c " $STATE/users/$R/memory " /proc/${sa:-0}/mountinfo 2>/dev/null)" \
	"fleet-spare 0" "$A's spare waits on, with no mount of $R's store (none to drop for its sake)"
"$FLEETCTL" exec $A --no-stdin -- true; ok $? "an exec of $A"

# Its user recreated by hand with another uid (userdel, then useradd -u): the next exec runs as the new
# uid (fleetd keeps passwd entries, user/pwcache.h, but drops them when /etc/passwd changes), and the
# spare set up for the old uid is not used (its launch key holds the uid: user/spare.c) but dropped.
old_uid=$(id -u fleet-$A) new_uid=$((_uid_base + 900)) home=$(getent passwd fleet-$A | cut -d: -f6)
is "$("$FLEETCTL" exec $A --no-stdin -- id -u)" "$old_uid" "an exec runs as $A's uid $old_uid"
s8=$(wait_spare $A); ok $? "a spare waits, set up for uid $old_uid"
userdel fleet-$A; ok $? "userdel fleet-$A by hand"
getent group fleet-$A >/dev/null && groupdel fleet-$A
groupadd -g $new_uid fleet-$A &&
	useradd --system -M -N -l -u $new_uid -g $new_uid -d "$home" -s /usr/sbin/nologin fleet-$A &&
	chown -R $new_uid:$new_uid "$home"
ok $? "fleet-$A made again by hand: uid and gid $new_uid, the same home (given to it)"
is "$("$FLEETCTL" exec $A --no-stdin -- id -u 2>&1)" "$new_uid" "the next exec runs as the new uid $new_uid"
gone $s8; ok $? "the spare set up for the old uid was dropped"
s8=$(wait_spare $A); ok $? "a new spare waits"
is "$(stat -c %u /proc/$s8 2>/dev/null) $(awk '/^Uid:/ { print $2 }' /proc/$s8/status 2>/dev/null)" "0 0" \
	"it is root's, as every sandbox init"
is "$("$FLEETCTL" exec $A --no-stdin -- id -u 2>&1)" "$new_uid" "the exec that takes it runs as $new_uid"
gone $s8; ok $? "it took the new spare"

# Stop, start, removal and fleetd's end: no spare outlives them.
s5=$(wait_spare $A); ok $? "a spare waits"
"$FLEETCTL" start $A >/dev/null; ok $? "start $A"
"$FLEETCTL" stop $A >/dev/null; ok $? "stop $A"
gone $s5; ok $? "the stop killed the spare"
is "$(spare_of $A)" "" "no spare of $A is left"
is "$(state_of $A)" stopped "and $A is stopped"

"$FLEETCTL" exec $A --no-stdin -- true; ok $? "an exec after the stop"
s6=$(wait_spare $A); ok $? "a spare waits again"
kill -9 "$FLEETD_PID"; gone "$FLEETD_PID"
gone $s6; ok $? "fleetd killed (-9): its spare died with it"
export FLEET_TEST_SPARE_IDLE_S=2	# a test's: 60 s otherwise
user_fleetd_start; ok $? "fleetd restarts (a spare's idle limit: 2 s)"
unset FLEET_TEST_SPARE_IDLE_S
is "$(state_of $A)" stopped "$A is stopped after the restart (no spare taken for a keeper)"
"$FLEETCTL" exec $A --no-stdin -- true; ok $? "exec after the restart"
s7=$(wait_spare $A); ok $? "a spare waits"
for ((i = 0; i < 100; i++)); do [ -z "$(spare_of $A)" ] && break; sleep 0.1; done
gone $s7; ok $? "unused for its idle limit, it went"
"$FLEETCTL" exec $A --no-stdin -- true; ok $? "another exec"
s7=$(wait_spare $A); ok $? "a spare waits"

# The next spare is made once the command that took the last one ends, or SPARE_DEFER_MS after its
# start if it runs longer (user/spare.c: a spare's setup slowed the command's own start beside it).
export FLEET_TEST_SPARE_DEFER_MS=2000	# a test's: 50 ms otherwise
user_fleetd_kill_restart; ok $? "fleetd restarts (spares deferred 2 s)"
gone $s7
"$FLEETCTL" exec $A --no-stdin -- sleep 8 & ex=$!
wait_agent_state $A running; ok $? "a long command runs"
sleep 1
is "$(spare_of $A)" "" "1 s into it, no spare yet"
s8=$(wait_spare $A); ok $? "one waits 2 s into it"
ok "$(kill -0 $ex 2>/dev/null; echo $?)" "while the command still runs"
kill $ex 2>/dev/null; wait $ex 2>/dev/null
export FLEET_TEST_SPARE_DEFER_MS=600000
user_fleetd_kill_restart; ok $? "fleetd restarts (spares deferred 600 s)"
unset FLEET_TEST_SPARE_DEFER_MS
gone $s8
"$FLEETCTL" exec $A --no-stdin -- true; ok $? "a short command"
s8=$(wait_spare $A); ok $? "its spare waits as soon as it ended, not 600 s later"
"$FLEETCTL" exec $A --no-stdin -- sleep 3 & ex=$!
for ((i = 0; i < 300; i++)); do [ "$(cat /proc/$s8/comm 2>/dev/null)" = fleet-init ] && break; sleep 0.01; done
is "$(cat /proc/$s8/comm 2>/dev/null)" fleet-init "the next command took it"
sleep 1
is "$(spare_of $A)" "" "and, running, has no spare made yet"
wait $ex; ok $? "it ends well"
s8=$(wait_spare $A); ok $? "and then its spare waits"

# The command comes to the spare in the hand-over's message up to 32 KiB of JSON, beyond that in a
# memfd (user/launch.h, USER_LAUNCH_HAND_INLINE_MAX): both are taken, and arrive whole.
for n in 20000 40000; do
	s9=$(wait_spare $A)
	"$FLEETCTL" exec $A --no-stdin --env BIG="$(head -c $n /dev/zero | tr '\0' x)" -- sh -c 'echo ${#BIG}; sleep 1' > "$STATE.big" & ex=$!
	for ((i = 0; i < 300; i++)); do [ "$(cat /proc/$s9/comm 2>/dev/null)" = fleet-init ] && break; sleep 0.01; done
	is "$(cat /proc/$s9/comm 2>/dev/null)" fleet-init "an exec with a $n-byte variable takes the spare"
	wait $ex; ok $? "and ends well"
	is "$(cat "$STATE.big")" $n "the variable arrived whole"
done
rm -f "$STATE.big"
s9=$(wait_spare $A); ok $? "a spare waits"
"$FLEETCTL" rm --force $A >/dev/null; ok $? "rm --force $A"
gone $s9; ok $? "the removal killed the spare"
is "$(spare_of $A)" "" "nothing of $A is left"

done_testing
