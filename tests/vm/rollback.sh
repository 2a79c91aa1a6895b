#!/bin/bash
# Health checks and automatic rollback with a real guest: a snapshot taken
# while healthy is marked good; a guest broken three ways (system gone, disk
# full, no SSH server) fails its check and fleet restores the good snapshot
# by itself: files, a background process and exec all come back. A check that
# keeps failing after the restore leaves the agent bad, without flapping.
# The checks go to the guest's health service (agentd/health_server.h): it
# must see each breakage the exec of `agentd health` saw.
. "$FLEET_SRCDIR/tests/lib/common.sh"

. "$FLEET_SRCDIR/tests/lib/vmfleet.sh"
vmfleet_setup --tcg

fleetd_ns_start --log-level debug; ok $? "fleetd starts inside the namespace"

ex() { "$FLEETCTL" exec rb "$@"; }
rollbacks() { "$FLEETCTL" --json audit --limit 1000 | jq '[.[] | select(.action == "auto.rollback")] | length'; }
# wait_rollback N: until N automatic rollbacks are recorded and the agent runs healthy again.
wait_rollback() {
	local deadline=$((SECONDS + 300))
	while [ $SECONDS -lt $deadline ]; do
		if [ "$(rollbacks)" -ge "$1" ] && [ "$("$FLEETCTL" --json show rb | jq -r '.state + "/" + .health.status')" = running/healthy ]; then
			return 0
		fi
		sleep 1
	done
	return 1
}

"$FLEETCTL" create rb --backend vm --health-interval 3 --auto-rollback >/dev/null; ok $? "create with --health-interval 3 --auto-rollback"
"$FLEETCTL" start rb >/dev/null; ok $? "start it"
is "$("$FLEETCTL" health rb)" "agent 'rb': healthy (healthy)" "the default check (agentd health) passes"
like "$(cat "$STATE/fleetd.log")" "health request to the guest's service" "through the guest's health service"
ex -- sh -c 'echo precious > ~/memory/keep'
ex --root -- sh -c 'sleep 100000 >/dev/null 2>&1 </dev/null & echo $! > /root/bg.pid'
bgpid=$(ex --root -- cat /root/bg.pid)
"$FLEETCTL" snapshot rb good1 >/dev/null; ok $? "snapshot while healthy"
is "$("$FLEETCTL" --json snapshots rb | jq -r '.[0].good')" true "a snapshot taken while healthy is marked good"
like "$("$FLEETCTL" snapshots rb)" "good1 .* full +good" "snapshots shows it as good"

back_again() {	# back_again WHAT: the guest is as it was at good1
	is "$(ex -- cat /home/agent/memory/keep 2>&1)" precious "$1: exec works and the file is back"
	# Retried: a periodic check may hold the agent busy for a moment.
	wait_for 30 ex --root -- kill -0 "$bgpid"; ok $? "$1: the background process runs again"
	like "$("$FLEETCTL" show rb)" "rollback: .*restored 'good1' after" "$1: show says what the rollback did"
}

# 1: the system is gone
ex --root -- sh -c 'rm -rf /usr /bin /sbin' >/dev/null 2>&1
wait_rollback 1; ok $? "with /usr /bin /sbin deleted, fleet rolls back by itself"
back_again "system deleted"

# 2: the disk is full
ex -- sh -c 'dd if=/dev/zero of=$HOME/fill bs=1M 2>/dev/null; true'
# The periodic check (every 3 s) may see it first and already be rolling back (busy).
out=$("$FLEETCTL" health rb 2>&1)
like "$out" "agent 'rb': unhealthy \(.*1 MiB free|under way|busy" "a full disk fails the check (or fleet is already restoring)"
wait_rollback 2; ok $? "with the disk full, fleet rolls back by itself"
back_again "disk full"
ex -- test -e /home/agent/fill; is "$?" 1 "disk full: the filler is gone"

# 3: no SSH server (and none coming back): the guest stops answering
ex --root -- sh -c 'mv /usr/sbin/dropbear /usr/sbin/dropbear.off; (sleep 1; killall dropbear) >/dev/null 2>&1 &' >/dev/null 2>&1
wait_rollback 3; ok $? "with its SSH server gone, fleet rolls back by itself"
back_again "no SSH server"

like "$("$FLEETCTL" audit --limit 1000)" "auto.rollback +rb/good1 +ok" "the audit log records each rollback"
like "$(curl -sS --unix-socket "$SOCK" http://fleet/metrics)" '^fleet_rollbacks_total\{outcome="ok"\} 3$' \
	"and GET /metrics counts them"

# A check that fails whatever is restored, after three rollbacks this hour:
# the rate limit holds, the agent stays bad, nothing flaps.
# Counted before the new check is set: the periodic check (every 3 s) may
# fail and record its refused rollback before the next line runs.
before=$(rollbacks)
"$FLEETCTL" set rb --health-cmd 'echo always broken; exit 1' >/dev/null; ok $? "set a check that always fails"
deadline=$((SECONDS + 200))
until [ "$("$FLEETCTL" --json show rb | jq -r .state)" = bad ] || [ $SECONDS -ge $deadline ]; do sleep 1; done
is "$("$FLEETCTL" --json show rb | jq -r .state)" bad "an agent past the rollback limit is bad"
like "$("$FLEETCTL" show rb)" "rollback: .*rolled back 3 times within 3600 s already; not again" \
	"and show says why (the rate limit)"
sleep 12	# four more check intervals
is "$(rollbacks)" "$((before + 1))" "and fleet does not roll it back again and again"

! grep -q "no health service in the guest" "$STATE/fleetd.log"; ok $? "no check fell back to an exec"
like "$(grep -c "health request to the guest's service" "$STATE/fleetd.log")" '^([2-9]|[1-9][0-9]+)$' \
	"the periodic checks went to the service"

"$FLEETCTL" rm --force rb >/dev/null; ok $? "rm"
done_testing
