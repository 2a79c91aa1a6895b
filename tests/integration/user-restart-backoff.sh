#!/bin/bash
# The restart backoff (core/lifecycle.c) through the API, with a real user
# agent: a sandbox killed from outside waits out its backoff as 'stopped'
# with a detail that says so, and the operator's stop (of an agent that is
# stopped already: the API's own path) or start cancels the pending restart.
# The backoff is an hour, so nothing here depends on how long anything takes.
. "$FLEET_SRCDIR/tests/lib/common.sh"
A=urb$(test_run_id)-a	# agent names of this run (two checkouts at once never collide)

[ "$(id -u)" = 0 ] || skip_all "needs root (user agents are Unix users)"
command -v jq >/dev/null || skip_all "needs jq"

user_fleetd_setup urb
user_fleetd_start --restart-backoff-ms 3600000 --restart-backoff-max-ms 3600000
ok $? "fleetd starts (restart backoff: an hour, at most an hour)"
LOG=$STATE/fleetd.log

keeper_of() {	# the agent's keeper: the child of fleetd in the agent's cgroup
	local c
	for c in $(cat /proc/"$FLEETD_PID"/task/*/children 2>/dev/null); do
		grep -qE ":/fleet/$1\$" /proc/$c/cgroup 2>/dev/null && echo $c
	done
}
detail() { "$FLEETCTL" --json show "$1" | jq -r '.state_detail // ""'; }
crash_and_wait() {	# crash_and_wait NAME: kill its keeper, until the detail promises a restart (bounded)
	local k i
	k=$(keeper_of "$1")
	[ -n "$k" ] || return 1
	kill -9 $k
	for ((i = 0; i < 6000; i++)); do
		case $(detail "$1") in *"automatic restart"*) return 0 ;; esac
		sleep 0.05
	done
	return 1
}

"$FLEETCTL" create $A --backend user >/dev/null; ok $? "create $A (restart on-failure)"
"$FLEETCTL" start $A >/dev/null; ok $? "start it"
crash_and_wait $A; ok $? "its sandbox is killed; fleetd notices"
is "$("$FLEETCTL" --json show $A | jq -r .state)" stopped "it is stopped while the restart waits"
like "$(detail $A)" "^stopped without fleet asking; automatic restart 1 of at most 5 in 600 s in 3600000 ms$" \
	"and says a restart waits, and how long"
like "$("$FLEETCTL" show $A)" "why: +stopped without fleet asking; automatic restart 1" "fleetctl show says so too"
"$FLEETCTL" stop $A >/dev/null; ok $? "the operator stops it (it is stopped already)"
is "$(detail $A)" "" "the detail no longer promises a restart"
like "$(cat "$LOG")" "agent '$A': its pending automatic restart is cancelled" "fleetd logs the cancel"

"$FLEETCTL" start $A >/dev/null; ok $? "start it again"
crash_and_wait $A; ok $? "its sandbox is killed again"
like "$(detail $A)" "automatic restart 2 of at most 5 in 600 s in 3600000 ms" \
	"the second restart in the window would wait twice as long, at most the max"
"$FLEETCTL" start $A >/dev/null; ok $? "the operator starts it during the backoff"
is "$("$FLEETCTL" --json show $A | jq -r .state)" running "it runs"
is "$(detail $A)" "" "with no restart promised"
is "$(grep -c "agent '$A': its pending automatic restart is cancelled" "$LOG")" 2 "the operator's start cancelled it"
is "$(keeper_of $A | wc -l)" 1 "one sandbox"
"$FLEETCTL" rm --force $A >/dev/null; ok $? "remove it"

done_testing
