#!/bin/bash
# The lifecycle owner (core/lifecycle.c) with real user agents:
# - a remove writes its intent first: kill -9 of fleetd in the middle of
#   'rm' (while the home is being deleted) is finished at the next start,
#   never left as a 'stopped' agent whose user or home is gone;
# - an environment removed behind fleet's back (userdel, rm -rf of the home)
#   is 'missing' at the next start, with what is gone, and 'rm' cleans up;
# - the restart policy acts for user agents too: a sandbox killed from
#   outside comes back (on-failure), or stays stopped (never).
. "$FLEET_SRCDIR/tests/lib/common.sh"
U=ulc$(test_run_id)	# agent names of this run (two checkouts at once never collide)

[ "$(id -u)" = 0 ] || skip_all "needs root (user agents are Unix users)"
command -v jq >/dev/null || skip_all "needs jq"

user_fleetd_setup ulc
user_fleetd_start; ok $? "fleetd starts"
LOG=$STATE/fleetd.log

gone_entirely() {	# gone_entirely NAME DESC
	getent passwd fleet-$1 >/dev/null; is "$?" 2 "$2: no user fleet-$1"
	getent group fleet-$1 >/dev/null; is "$?" 2 "$2: no group fleet-$1"
	[ -e "$STATE/users/$1" ]; is "$?" 1 "$2: no home"
	"$FLEETCTL" show $1 >/dev/null 2>&1; is "$?" 1 "$2: no agent record"
}

# --- kill -9 in the middle of a remove ------------------------------------------------------------
"$FLEETCTL" create $U-rm --backend user >/dev/null; ok $? "create $U-rm"
home=$STATE/users/$U-rm
# Many files, so that deleting the home takes long enough to be caught at it.
mkdir "$home/work/many" && (cd "$home/work/many" && seq 1 60000 | xargs touch) &&
	chown -R --reference="$home" "$home/work/many"
ok $? "its home holds 60000 files"

"$FLEETCTL" rm $U-rm >/dev/null 2>&1 &
rm_cli=$!
# fleetd deletes the home with an 'rm' child: kill -9 fleetd while that child runs.
child=
for ((i = 0; i < 30000; i++)); do
	for c in $(cat /proc/"$FLEETD_PID"/task/*/children 2>/dev/null); do
		[ "$(cat /proc/$c/comm 2>/dev/null)" = rm ] && child=$c
	done
	[ -n "$child" ] && break
	sleep 0.01
done
ok $([ -n "$child" ] && echo 0 || echo 1) "caught fleetd deleting the home (rm pid ${child:-none})"
kill -9 "$FLEETD_PID"
wait "$rm_cli" 2>/dev/null
# The orphaned rm finishes on its own; let it, so the restart does not race it.
for ((i = 0; i < 60000; i++)); do kill -0 "$child" 2>/dev/null || break; sleep 0.01; done
getent passwd fleet-$U-rm >/dev/null; ok $? "after the kill the user fleet-$U-rm is still there (the remove was cut off)"

user_fleetd_start; ok $? "fleetd starts again"
like "$(cat "$LOG")" "agent '$U-rm': a remove was interrupted \(fleetd stopped\); finished it" \
	"the start finishes the interrupted remove"
gone_entirely $U-rm "interrupted remove"

# --- an environment removed behind fleet's back ---------------------------------------------------
"$FLEETCTL" create $U-user --backend user >/dev/null; ok $? "create $U-user"
"$FLEETCTL" create $U-home --backend user >/dev/null; ok $? "create $U-home"
stop_fleetd; ok $? "fleetd stops"
userdel fleet-$U-user; ok $? "userdel fleet-$U-user by hand"
groupdel fleet-$U-user 2>/dev/null
umount "$STATE/users/$U-home/memory"	# its memory store's own file system (user/memfs.c)
rm -rf "$STATE/users/$U-home"; ok $? "rm -rf the home of $U-home by hand"
user_fleetd_start; ok $? "fleetd starts again"

j=$("$FLEETCTL" --json show $U-user)
is "$(jq -r .state <<<"$j")" missing "an agent whose user is gone is 'missing', not 'stopped'"
like "$(jq -r .state_detail <<<"$j")" "Unix user fleet-$U-user is gone" "and says what is gone"
j=$("$FLEETCTL" --json show $U-home)
is "$(jq -r .state <<<"$j")" missing "an agent whose home is gone is 'missing'"
like "$(jq -r .state_detail <<<"$j")" "home .*/users/$U-home is gone" "and says so"
like "$("$FLEETCTL" list)" "$U-user +user +missing" "the list shows it"
like "$("$FLEETCTL" show $U-user)" "why: +.*Unix user fleet-$U-user is gone" "show says what is gone, without --json"
err=$("$FLEETCTL" start $U-user 2>&1); is "$?" 1 "start of a missing agent fails"
like "$err" "is gone" "with what is gone"

# Still missing after another restart: the record never turns back to 'stopped' by itself.
stop_fleetd; user_fleetd_start; ok $? "fleetd restarts"
is "$("$FLEETCTL" --json show $U-user | jq -r .state)" missing "still missing after a restart"

"$FLEETCTL" rm $U-user >/dev/null; ok $? "rm of the missing agent succeeds"
gone_entirely $U-user "missing user, after rm"
"$FLEETCTL" rm $U-home >/dev/null; ok $? "rm of the agent without a home succeeds"
gone_entirely $U-home "missing home, after rm"

# --- the restart policy for user agents ------------------------------------------------------------
keeper_of() {	# the agent's keeper: the child of fleetd in the agent's cgroup (its sandbox's init runs as root)
	local c
	for c in $(cat /proc/"$FLEETD_PID"/task/*/children 2>/dev/null); do
		grep -qE ":/fleet/$1\$" /proc/$c/cgroup 2>/dev/null && echo $c
	done
}
"$FLEETCTL" create $U-rs --backend user >/dev/null; ok $? "create $U-rs (restart on-failure, the default)"
"$FLEETCTL" create $U-nr --backend user --restart never >/dev/null; ok $? "create $U-nr (restart never)"
"$FLEETCTL" start $U-rs >/dev/null && "$FLEETCTL" start $U-nr >/dev/null; ok $? "start both"
before=$(keeper_of $U-rs); nr=$(keeper_of $U-nr)
ok $([ -n "$before" ] && [ -n "$nr" ] && echo 0 || echo 1) "found both keepers ($U-rs: ${before:-none}, $U-nr: ${nr:-none})"
kill -9 $before $nr
for ((i = 0; i < 6000; i++)); do
	grep -q "agent '$U-rs': restarted and reachable again" "$LOG" && break
	sleep 0.05
done
like "$(cat "$LOG")" "agent '$U-rs': its environment stopped without fleet asking \(its sandbox was killed by signal 9\)" \
	"fleetd notices the sandbox was killed"
like "$(cat "$LOG")" "agent '$U-rs': restarted and reachable again" "and restarts it (on-failure)"
wait_agent_state $U-rs running
is "$("$FLEETCTL" --json show $U-rs | jq -r .state)" running "$U-rs runs again"
after=$(keeper_of $U-rs)
ok $([ -n "$after" ] && [ "$after" != "$before" ] && echo 0 || echo 1) "with a new sandbox ($(echo $after))"
wait_agent_state $U-nr stopped
is "$("$FLEETCTL" --json show $U-nr | jq -r .state)" stopped "$U-nr (restart never) stays stopped"
grep -q "agent '$U-nr': restarting" "$LOG"; is "$?" 1 "and is not restarted"
"$FLEETCTL" stop $U-rs >/dev/null; ok $? "stop $U-rs"
is "$("$FLEETCTL" --json show $U-rs | jq -r .state)" stopped "a stop fleet was asked for is not restarted"
is "$(grep -c "agent '$U-rs': restarting" "$LOG")" 1 "only the one restart of $U-rs"
"$FLEETCTL" rm $U-rs >/dev/null && "$FLEETCTL" rm $U-nr >/dev/null; ok $? "remove both"

# A cgroup left behind (a fleetd that crashed between making it and recording the agent, an agent
# removed while fleetd was down) does not block the name: empty, it is taken over; with a process
# in it, it is someone's, and create refuses.
"$FLEETCTL" create $U-cg --backend user >/dev/null; ok $? "create $U-cg"
cgdirs=$(find /sys/fs/cgroup -maxdepth 7 -type d -path "*/fleet/$U-cg" 2>/dev/null)
ok $([ -n "$cgdirs" ] && echo 0 || echo 1) "it has cgroups ($(echo $cgdirs | wc -w))"
"$FLEETCTL" rm $U-cg >/dev/null; ok $? "rm $U-cg"
# rm takes the shared fleet/ too when no agent of any fleetd is left: make it again (-p).
for d in $cgdirs; do mkdir -p "$d"; done
made=$(for d in $cgdirs; do [ -d "$d" ] && echo "$d"; done | wc -l)
on_exit "for d in $(echo $cgdirs); do rmdir \$d \${d%/*}; done 2>/dev/null"
"$FLEETCTL" create $U-cg --backend user >/dev/null; ok $? "create $U-cg again over its empty leftover cgroups"
# cgroup_create is the one judge of a leftover (no pre-check that removes it first): it says so.
is "$(grep -c "cgroup .*/fleet/$U-cg was left behind, empty: taking it over" "$LOG")" "$made" \
	"fleetd took over each of them ($made)"
"$FLEETCTL" rm $U-cg >/dev/null; ok $? "rm $U-cg"
# Left in some hierarchies only (the tracking one, unified or pids, is not among them): each is taken over.
partial=$(echo $cgdirs | tr ' ' '\n' | grep -vE '/(unified|pids)/')
for d in $partial; do mkdir -p "$d"; done
"$FLEETCTL" create $U-cg --backend user >/dev/null; ok $? "create $U-cg over leftovers in some hierarchies only ($(echo $partial | wc -w))"
if [ -n "$partial" ]; then
	like "$(cat "$LOG")" "cgroup .*/fleet/$U-cg was left behind, empty: taking it over" "fleetd says it took them over"
fi
"$FLEETCTL" rm $U-cg >/dev/null; ok $? "rm $U-cg"
for d in $cgdirs; do mkdir -p "$d"; done
sleep 300 & cgpid=$!; _pids+=($cgpid)
first=$(echo $cgdirs | cut -d' ' -f1)
echo $cgpid > "$first/cgroup.procs"
out=$("$FLEETCTL" create $U-cg --backend user 2>&1); rc=$?
ok $([ $rc -ne 0 ] && echo 0 || echo 1) "not over a leftover with a process in it"
like "$out" "already exists.*processes" "and says why"
kill -9 $cgpid; wait $cgpid 2>/dev/null
getent passwd fleet-$U-cg >/dev/null; is $? 2 "and nothing of the agent is left (no user)"

done_testing
