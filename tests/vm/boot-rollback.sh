#!/bin/bash
# A guest that no longer boots: its /sbin/init is moved away, so after a
# restart the guest sits in the initramfs rescue shell and never answers on
# its control channel. Past vm_boot_timeout fleet records that as a failed
# health check; with auto-rollback it restores the newest good snapshot (a
# full checkpoint: no boot needed) and the agent runs again; without, the
# agent turns bad and a person's restore --last-good brings it back.
. "$FLEET_SRCDIR/tests/lib/common.sh"

. "$FLEET_SRCDIR/tests/lib/vmfleet.sh"
vmfleet_setup --tcg

fleetd_ns_start --vm-boot-timeout 60; ok $? "fleetd starts inside the namespace (guests get 60 s to boot)"
ex() { "$FLEETCTL" exec br "$@"; }
state_health() { "$FLEETCTL" --json show br | jq -r '.state + "/" + .health.status'; }
state_health_is() { [ "$(state_health)" = "$1" ]; }
rollbacks_ok() { [ "$("$FLEETCTL" --json audit --limit 1000 | jq '[.[] | select(.action == "auto.rollback" and .outcome == "ok")] | length')" -ge "$1" ]; }

"$FLEETCTL" create br --backend vm --health-interval 0 --auto-rollback >/dev/null; ok $? "create with auto-rollback"
"$FLEETCTL" start br >/dev/null; ok $? "start"
ex -- sh -c 'echo precious > ~/memory/keep'
"$FLEETCTL" snapshot br good >/dev/null; ok $? "snapshot while healthy"
is "$("$FLEETCTL" --json snapshots br | jq -r '.[0].good')" true "marked good"

# --- with auto-rollback ---
ex --root -- mv /sbin/init /sbin/init.off; ok $? "move the guest's /sbin/init away"
out=$("$FLEETCTL" restart br 2>&1); is $? 1 "the restart fails: the guest does not boot"
like "$out" "did not answer on its control channel within 60 s" "and says why"
wait_for 240 rollbacks_ok 1; ok $? "fleet rolls the agent back by itself"
wait_for 60 state_health_is running/healthy; ok $? "and it runs healthy again"
is "$(ex -- cat /home/agent/memory/keep)" precious "exec works; the file is back"
ex --root -- test -x /sbin/init; ok $? "/sbin/init is back"
like "$("$FLEETCTL" show br)" "rollback: .*restored 'good' after: does not boot: the guest did not answer" \
	"show says what happened"

# --- without auto-rollback: bad, until a person restores ---
"$FLEETCTL" set br --auto-rollback off >/dev/null
ex --root -- mv /sbin/init /sbin/init.off
"$FLEETCTL" restart br >/dev/null 2>&1; is $? 1 "the restart fails again"
is "$(state_health)" bad/unhealthy "without auto-rollback the agent is bad"
like "$("$FLEETCTL" --json show br | jq -r .health.detail)" "^does not boot: " "its health says it does not boot"
"$FLEETCTL" restore br --last-good >/dev/null; ok $? "a person restores the last good snapshot"
wait_for 60 ex -- true; ok $? "exec works again"
is "$("$FLEETCTL" --json show br | jq -r .state)" running "the agent runs"

"$FLEETCTL" rm --force br >/dev/null; ok $? "rm"
done_testing
