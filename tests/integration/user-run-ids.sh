#!/bin/bash
# Run ids are never reused and run logs go with their agent: remove an agent
# whose runs are the newest, create one again, and its runs get new ids and
# no old log is left to be truncated or read. Logs left without a run (fleetd
# killed between removing the rows and the files) are swept at start.
. "$FLEET_SRCDIR/tests/lib/common.sh"

[ "$(id -u)" = 0 ] || skip_all "needs root (user agents are Unix users)"
command -v jq >/dev/null || skip_all "jq not installed"

user_fleetd_setup rid
user_fleetd_start; ok $? "fleetd starts"
# wait_run AGENT ID: until the run has finished (at most 60 s)
wait_run() {
	local deadline=$((SECONDS + 60)) st
	while st=$("$FLEETCTL" --json runs "$1" "$2" | jq -r .state); [ "$st" = queued ] || [ "$st" = running ]; do
		[ $SECONDS -ge $deadline ] && return 1
		sleep 0.2
	done
}

"$FLEETCTL" create ridkeep --backend user --command 'echo keep $FLEET_RUN_ID' >/dev/null; ok $? "create ridkeep"
"$FLEETCTL" create ridgone --backend user --command 'echo secret of run $FLEET_RUN_ID' >/dev/null; ok $? "create ridgone"
keep=$("$FLEETCTL" --json trigger ridkeep | jq -r .id)
wait_run ridkeep "$keep"; ok $? "a run of ridkeep ($keep) finishes"
old=()
for i in 1 2; do
	old+=("$("$FLEETCTL" --json trigger ridgone | jq -r .id)")
	wait_run ridgone "${old[-1]}"; ok $? "run ${old[-1]} of ridgone finishes"
done
ok $([ -f "$STATE/runs/${old[0]}.log" ] && [ -f "$STATE/runs/${old[1]}.log" ] && echo 0 || echo 1) \
	"ridgone's runs have logs on the host"

"$FLEETCTL" rm --force ridgone >/dev/null; ok $? "remove ridgone (its runs are the newest)"
ok $([ ! -e "$STATE/runs/${old[0]}.log" ] && [ ! -e "$STATE/runs/${old[1]}.log" ] && echo 0 || echo 1) \
	"its run logs are gone from $STATE/runs"
ok $([ -f "$STATE/runs/$keep.log" ] && echo 0 || echo 1) "ridkeep's log stays"

"$FLEETCTL" create ridgone --backend user --command 'echo new $FLEET_RUN_ID' >/dev/null; ok $? "create ridgone again"
new=$("$FLEETCTL" --json trigger ridgone | jq -r .id)
wait_run ridgone "$new"; ok $? "its run $new finishes"
ok $([ "$new" -gt "${old[1]}" ] && echo 0 || echo 1) "the new run's id ($new) is above the removed ones (${old[*]})"
out=$("$FLEETCTL" --json runs ridgone | jq -r '[.[].id] | map(tostring) | join(" ")')
is "$out" "$new" "the new agent sees only its own run"

# kill -9 between removing the rows and the logs: the next start sweeps them.
stop_fleetd; ok $? "fleetd stops"
echo "left behind" > "$STATE/runs/424242.log"
echo "not a run log" > "$STATE/runs/notes.txt"
user_fleetd_start; ok $? "fleetd starts again"
ok $([ ! -e "$STATE/runs/424242.log" ] && echo 0 || echo 1) "a log whose run row is gone is removed at start"
ok $([ -f "$STATE/runs/notes.txt" ] && [ -f "$STATE/runs/$keep.log" ] && [ -f "$STATE/runs/$new.log" ] && echo 0 || echo 1) \
	"logs of existing runs and files fleetd did not name stay"

done_testing
