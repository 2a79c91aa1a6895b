#!/bin/bash
# A user agent's sandbox outlives fleetd (like a VM domain): the next fleetd
# adopts it and must watch it as if it had started it itself.
# - a sandbox that was running when fleetd started, and is killed from
#   outside afterwards, is noticed and restarted (restart on-failure);
# - a stop fleet is asked for, of such an adopted sandbox, is clean and not
#   taken for a failure (no restart).
. "$FLEET_SRCDIR/tests/lib/common.sh"
A=uad$(test_run_id)-a	# agent names of this run (two checkouts at once never collide)

[ "$(id -u)" = 0 ] || skip_all "needs root (user agents are Unix users)"
command -v jq >/dev/null || skip_all "needs jq"

user_fleetd_setup uad
user_fleetd_start; ok $? "fleetd starts"
LOG=$STATE/fleetd.log

wait_log() {	# wait_log PATTERN: until the log has PATTERN (bounded; the assertion follows)
	for ((i = 0; i < 6000; i++)); do
		grep -qE "$1" "$LOG" && return 0
		sleep 0.05
	done
	return 1
}

"$FLEETCTL" create $A --backend user >/dev/null; ok $? "create $A (restart on-failure, the default)"
"$FLEETCTL" start $A >/dev/null; ok $? "start $A"
before=$(keeper_of $A)
ok $([ -n "$before" ] && echo 0 || echo 1) "found its keeper (${before:-none})"

stop_fleetd TERM; ok $? "fleetd stops (SIGTERM)"
check "the keeper outlives fleetd" -- kill -0 "$before"
user_fleetd_start; ok $? "fleetd starts again"
is "$("$FLEETCTL" --json show $A | jq -r .state)" running "$A is running after the restart"
is "$(keeper_of $A)" "$before" "with the same keeper, not a second one"

# The sandbox dies after fleetd started: only a watched sandbox is noticed.
kill -9 "$before"
wait_log "agent '$A': restarted and reachable again"
like "$(cat "$LOG")" "agent '$A': its environment stopped without fleet asking" \
	"fleetd notices that the adopted sandbox died"
like "$(cat "$LOG")" "agent '$A': restarted and reachable again" "and restarts it (on-failure)"
wait_agent_state $A running
is "$("$FLEETCTL" --json show $A | jq -r .state)" running "$A runs again"
after=$(keeper_of $A)
ok $([ -n "$after" ] && [ "$after" != "$before" ] && echo 0 || echo 1) "in a new sandbox (${after:-none})"

# Adopted again, then stopped by fleet: a clean stop, not a failure.
stop_fleetd TERM; ok $? "fleetd stops again"
user_fleetd_start; ok $? "fleetd starts a third time"
is "$(keeper_of $A)" "$after" "the new sandbox was adopted too"
"$FLEETCTL" stop $A >/dev/null; ok $? "stop $A"
is "$("$FLEETCTL" --json show $A | jq -r .state)" stopped "$A is stopped"
is "$(keeper_of $A)" "" "its sandbox is gone"
is "$(grep -c "agent '$A': restarting" "$LOG")" 1 "a stop fleet asked for is not restarted (still one restart)"
is "$(grep -c "agent '$A': its environment stopped without fleet asking" "$LOG")" 1 \
	"and is not logged as a failure (still the one, of the kill)"

"$FLEETCTL" rm $A >/dev/null; ok $? "remove $A"

done_testing
