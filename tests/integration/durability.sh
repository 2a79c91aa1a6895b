#!/bin/bash
# Acknowledged writes survive kill -9 of fleetd.
. "$FLEET_SRCDIR/tests/lib/common.sh"
U=dur$(test_run_id)	# agent names of this run (two checkouts at once never collide)

start_fleetd dur || { ok 1 "fleetd starts"; done_testing; }
"$FLEETCTL" create $U-survivor --backend user >/dev/null
ok $? "create acknowledged"
stop_fleetd KILL
ok $? "fleetd killed with SIGKILL right after the create"
start_fleetd dur
ok $? "fleetd restarts on the same state dir after kill -9 (stale lock and socket are fine)"
is "$("$FLEETCTL" --json show $U-survivor | jq -r .name)" $U-survivor "the agent is there after the restart"

# Many acknowledged creates, then kill -9 at once: every acknowledged one survives.
acked=0
for i in $(seq 1 25); do
	"$FLEETCTL" create "$U-bulk-$i" --backend user >/dev/null 2>&1 && acked=$((acked + 1))
done
# Positive control: with no acknowledged create, "all of them survive" proves nothing.
is "$acked" 25 "all 25 creates acknowledged"
stop_fleetd KILL
start_fleetd dur
is "$("$FLEETCTL" --json list | jq --arg p "$U-bulk-" '[.[] | select(.name | startswith($p))] | length')" "$acked" \
	"all $acked acknowledged creates survive kill -9"
"$FLEETCTL" rm $U-bulk-1 >/dev/null
stop_fleetd KILL
start_fleetd dur
check "an acknowledged remove survives kill -9 too" -- bash -c "! '$FLEETCTL' show $U-bulk-1"
like "$("$FLEETCTL" audit --limit 1000)" "agent.remove +$U-bulk-1 +ok" "the audit record survives kill -9"
# An exec's audit record is written without an fsync (store/audit.c: it ran beside the command's
# start): in the WAL, it survives kill -9 all the same.
if [ "$(id -u)" = 0 ]; then
	"$FLEETCTL" exec $U-bulk-2 --no-stdin -- true; ok $? "an exec"
	stop_fleetd KILL
	start_fleetd dur
	like "$("$FLEETCTL" audit --limit 1000)" "agent.exec +$U-bulk-2 +ok" "its audit record survives kill -9 right after it"
fi	# (not root: no user agent can run a command)

is "$(stat -c %a "$STATE")" 711 "state dir is 0711 (traversable for user agents' homes, not listable)"
is "$(stat -c %a "$STATE/fleetd.log")" 600 "log file is 0600"
is "$(stat -c %a "$STATE/fleetd.lock")" 600 "lock file is 0600"
is "$(stat -c %a "$STATE/fleet.db")" 600 "database file is 0600"
is "$(sqlite3 "$STATE/fleet.db" 'PRAGMA journal_mode')" wal "database is in WAL mode"
is "$(sqlite3 "$STATE/fleet.db" 'PRAGMA user_version')" 18 "schema version is recorded (18: queued-runs counter, secret sizes, memory quotas, egress lists, secret files, autostart, hosts)"
tables=$(sqlite3 "$STATE/fleet.db" "SELECT group_concat(name, ' ') FROM (SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name)")
is "$tables" "agents audit events hook_deliveries hook_routes hook_subscriptions hosts runs schedules secrets snapshots" \
	"tables for agents, snapshots, runs, events, webhook routes, subscriptions and delivery ids, hosts, cron schedules, secrets and audit"
is "$(sqlite3 "$STATE/fleet.db" 'PRAGMA foreign_key_list(snapshots)' | cut -d'|' -f3,7 | head -1)" "agents|CASCADE" \
	"snapshots belong to agents (foreign key, cascade)"

done_testing
