#!/bin/bash
# Snapshots, health checks and automatic rollback of a user agent: a home
# broken by its own agent (files deleted, home made unwritable) fails the
# health check and fleet restores the newest good snapshot by itself.
. "$FLEET_SRCDIR/tests/lib/common.sh"
A=urb$(test_run_id)	# agent names of this run (two checkouts at once never collide)

[ "$(id -u)" = 0 ] || skip_all "needs root (user agents are Unix users)"

user_fleetd_setup urb
user_fleetd_start; ok $? "fleetd starts"
ex() { "$FLEETCTL" exec $A "$@"; }

"$FLEETCTL" create $A --backend user --health-interval 2 --auto-rollback >/dev/null; ok $? "create with auto-rollback"
"$FLEETCTL" start $A >/dev/null; ok $? "start it"
is "$("$FLEETCTL" health $A)" "agent '$A': healthy (healthy)" "the default check passes"
ex -- sh -c 'echo precious > ~/memory/keep; mkdir -p ~/work/repo; echo code > ~/work/repo/main.c'
out=$("$FLEETCTL" snapshot $A good1); ok $? "snapshot"
is "$out" "agent '$A': snapshot 'good1' taken (dir)" "a user agent's snapshot is a copy of its home"
is "$("$FLEETCTL" --json snapshots $A | jq -r '.[0].good')" true "taken while healthy: marked good"
ex -- ls "$STATE/snapshots" >/dev/null 2>&1; ok $([ $? -ne 0 ] && echo 0 || echo 1) "the agent cannot see its snapshots"

# A watcher (fleetctl watch NAME) sees what the rollback does.
"$FLEETCTL" --json watch $A >"$TEST_TMP/watch" 2>/dev/null &
watch_pid=$!; _pids+=("$watch_pid")
for ((i = 0; i < 600; i++)); do grep -q '"watching"' "$TEST_TMP/watch" && break; sleep 0.05; done

# Break it: delete everything, then make the home unwritable.
ex -- sh -c 'rm -rf ~/memory ~/work; chmod 500 ~'
deadline=$((SECONDS + 60))
until [ "$("$FLEETCTL" --json audit --limit 1000 | jq '[.[] | select(.action == "auto.rollback")] | length')" -ge 1 ] &&
	[ "$("$FLEETCTL" --json show $A | jq -r '.state + "/" + .health.status')" = running/healthy ] ||
	[ $SECONDS -ge $deadline ]; do sleep 0.5; done
is "$("$FLEETCTL" --json show $A | jq -r '.state + "/" + .health.status')" running/healthy \
	"the failed check is followed by an automatic rollback"
is "$(ex -- cat memory/keep 2>&1)" precious "the memory file is back"
is "$(ex -- cat "$STATE/users/$A/work/repo/main.c" 2>&1)" code "the work tree is back"
is "$(stat -c %a "$STATE/users/$A")" 700 "the home is 0700 again"
like "$("$FLEETCTL" show $A)" "rollback: .*restored 'good1' after: " "show says what the rollback did"
like "$("$FLEETCTL" audit --limit 100)" "auto.rollback +$A/good1 +ok" "the audit log records it"
for ((i = 0; i < 600; i++)); do grep -q '"rollback.finished"' "$TEST_TMP/watch" && break; sleep 0.05; done
is "$(jq -r 'select(.type | test("^(health|rollback|restore)")) | "\(.type) \(if .type == "health" then .healthy else .snapshot end)"' "$TEST_TMP/watch" |
	uniq | grep -A3 '^health false' | head -4 | tr '\n' ' ')" \
	"health false rollback.started good1 restore.finished good1 health true " \
	"fleetctl watch shows the failed check, the rollback's start and restore, and the check after it"
like "$(jq -r 'select(.type == "rollback.finished") | .snapshot + " " + .cause' "$TEST_TMP/watch")" "^good1 " \
	"and the rollback's end, with its cause"
kill "$watch_pid"; wait "$watch_pid" 2>/dev/null
# rollbacks: the fleet_rollbacks_total lines of GET /metrics (docs/metrics.md)
rollbacks() { curl -sS --unix-socket "$SOCK" http://fleet/metrics | grep '^fleet_rollbacks_total'; }
is "$(rollbacks)" 'fleet_rollbacks_total{outcome="ok"} 1' "GET /metrics counts the rollback"

# By hand: restore a named snapshot.
ex -- sh -c 'echo changed > ~/memory/keep'
"$FLEETCTL" restore $A good1 >/dev/null; ok $? "restore by hand"
is "$(ex -- cat "$STATE/users/$A/memory/keep")" precious "the file is as it was"

# The rate limit (3 an hour) is counted from the audit log: a restart of fleetd does not reset it.
starts() { "$FLEETCTL" --json audit --limit 1000 | jq '[.[] | select(.action == "auto.rollback.start")] | length'; }
# A rollback has ended when its "auto.rollback ... ok" is written: the restore
# removes ~/broken before the verifying check has run, so waiting only for the
# file to go (and state running, which it never left) let the next "touch
# broken" fail that check and mark the agent bad instead of rolling back.
oks() { "$FLEETCTL" --json audit --limit 1000 | jq '[.[] | select(.action == "auto.rollback" and .outcome == "ok")] | length'; }
state_is() { [ "$("$FLEETCTL" --json show $A | jq -r .state)" = "$1" ]; }
"$FLEETCTL" set $A --health-cmd 'test ! -e "$HOME/broken"' >/dev/null; ok $? "a check that fails while ~/broken exists"
for n in 2 3; do
	ex -- touch broken
	deadline=$((SECONDS + 60))
	until [ "$(oks)" -ge $n ] && state_is running && ! ex -- test -e broken || [ $SECONDS -ge $deadline ]; do sleep 0.3; done
	is "$(starts)" $n "rollback $n of the hour"
	is "$(oks)" $n "rollback $n ended healthy"
done
ex -- touch broken
deadline=$((SECONDS + 60))
until state_is bad || [ $SECONDS -ge $deadline ]; do sleep 0.3; done
like "$("$FLEETCTL" show $A)" "rolled back 3 times within 3600 s already; not again" "the fourth is refused: state bad"
is "$(rollbacks | sort)" $'fleet_rollbacks_total{outcome="failed"} 1\nfleet_rollbacks_total{outcome="ok"} 3' \
	"GET /metrics counts 3 rollbacks that ended healthy and the refused one as failed"
user_fleetd_kill_restart; ok $? "fleetd starts again after kill -9"
ex -- rm -f broken
deadline=$((SECONDS + 30))
until state_is running || [ $SECONDS -ge $deadline ]; do sleep 0.3; done
is "$("$FLEETCTL" --json show $A | jq -r .state)" running "healthy again: no longer bad"
ex -- touch broken
deadline=$((SECONDS + 30))
until state_is bad || [ $SECONDS -ge $deadline ]; do sleep 0.3; done
like "$("$FLEETCTL" show $A)" "rolled back 3 times within 3600 s already; not again" \
	"after the restart the limit still holds: no fourth rollback"
is "$(starts)" 3 "three rollbacks started this hour, no more"

"$FLEETCTL" snapshot rm $A good1 >/dev/null; ok $? "snapshot rm"
is "$("$FLEETCTL" --json snapshots $A | jq length)" 0 "no snapshots left"
done_testing
