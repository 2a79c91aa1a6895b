#!/bin/bash
# A user agent's sandbox outlives fleetd (like a VM domain): the next fleetd
# adopts it and must watch it as if it had started it itself.
# - a sandbox that was running when fleetd started, and is killed from
#   outside afterwards, is noticed and restarted (restart on-failure);
# - a stop fleet is asked for, of such an adopted sandbox, is clean and not
#   taken for a failure (no restart).
. "$FLEET_SRCDIR/tests/lib/common.sh"

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
wait_state() {	# wait_state NAME STATE: until show says STATE (bounded; the assertion follows)
	for ((i = 0; i < 6000; i++)); do
		[ "$("$FLEETCTL" --json show $1 | jq -r .state)" = "$2" ] && return 0
		sleep 0.05
	done
	return 1
}

"$FLEETCTL" create uad-a --backend user >/dev/null; ok $? "create uad-a (restart on-failure, the default)"
"$FLEETCTL" start uad-a >/dev/null; ok $? "start uad-a"
before=$(keeper_of uad-a)
ok $([ -n "$before" ] && echo 0 || echo 1) "found its keeper (${before:-none})"

stop_fleetd TERM; ok $? "fleetd stops (SIGTERM)"
check "the keeper outlives fleetd" -- kill -0 "$before"
user_fleetd_start; ok $? "fleetd starts again"
is "$("$FLEETCTL" --json show uad-a | jq -r .state)" running "uad-a is running after the restart"
is "$(keeper_of uad-a)" "$before" "with the same keeper, not a second one"

# The sandbox dies after fleetd started: only a watched sandbox is noticed.
kill -9 "$before"
wait_log "agent 'uad-a': restarted and reachable again"
like "$(cat "$LOG")" "agent 'uad-a': its environment stopped without fleet asking" \
	"fleetd notices that the adopted sandbox died"
like "$(cat "$LOG")" "agent 'uad-a': restarted and reachable again" "and restarts it (on-failure)"
wait_state uad-a running
is "$("$FLEETCTL" --json show uad-a | jq -r .state)" running "uad-a runs again"
after=$(keeper_of uad-a)
ok $([ -n "$after" ] && [ "$after" != "$before" ] && echo 0 || echo 1) "in a new sandbox (${after:-none})"

# Adopted again, then stopped by fleet: a clean stop, not a failure.
stop_fleetd TERM; ok $? "fleetd stops again"
user_fleetd_start; ok $? "fleetd starts a third time"
is "$(keeper_of uad-a)" "$after" "the new sandbox was adopted too"
"$FLEETCTL" stop uad-a >/dev/null; ok $? "stop uad-a"
is "$("$FLEETCTL" --json show uad-a | jq -r .state)" stopped "uad-a is stopped"
is "$(keeper_of uad-a)" "" "its sandbox is gone"
is "$(grep -c "agent 'uad-a': restarting" "$LOG")" 1 "a stop fleet asked for is not restarted (still one restart)"
is "$(grep -c "agent 'uad-a': its environment stopped without fleet asking" "$LOG")" 1 \
	"and is not logged as a failure (still the one, of the kill)"

"$FLEETCTL" rm uad-a >/dev/null; ok $? "remove uad-a"

done_testing
