#!/bin/bash
# Run ids are never reused and run logs go with their agent: remove an agent
# whose runs are the newest, create one again, and its runs get new ids and
# no old log is left to be truncated or read. Logs left without a run (fleetd
# killed between removing the rows and the files) are swept at start.
. "$FLEET_SRCDIR/tests/lib/common.sh"
R=$(test_run_id) KEEP=rid${R}keep GONE=rid${R}gone	# agent names of this run (two checkouts at once never collide)

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

"$FLEETCTL" create $KEEP --backend user --command 'echo keep $FLEET_RUN_ID' >/dev/null; ok $? "create $KEEP"
"$FLEETCTL" create $GONE --backend user --command 'echo secret of run $FLEET_RUN_ID' >/dev/null; ok $? "create $GONE"
keep=$("$FLEETCTL" --json trigger $KEEP | jq -r .id)
wait_run $KEEP "$keep"; ok $? "a run of $KEEP ($keep) finishes"
old=()
for i in 1 2; do
	old+=("$("$FLEETCTL" --json trigger $GONE | jq -r .id)")
	wait_run $GONE "${old[-1]}"; ok $? "run ${old[-1]} of $GONE finishes"
done
ok $([ -f "$STATE/runs/${old[0]}.log" ] && [ -f "$STATE/runs/${old[1]}.log" ] && echo 0 || echo 1) \
	"$GONE's runs have logs on the host"

"$FLEETCTL" rm --force $GONE >/dev/null; ok $? "remove $GONE (its runs are the newest)"
ok $([ ! -e "$STATE/runs/${old[0]}.log" ] && [ ! -e "$STATE/runs/${old[1]}.log" ] && echo 0 || echo 1) \
	"its run logs are gone from $STATE/runs"
ok $([ -f "$STATE/runs/$keep.log" ] && echo 0 || echo 1) "$KEEP's log stays"

"$FLEETCTL" create $GONE --backend user --command 'echo new $FLEET_RUN_ID' >/dev/null; ok $? "create $GONE again"
new=$("$FLEETCTL" --json trigger $GONE | jq -r .id)
wait_run $GONE "$new"; ok $? "its run $new finishes"
ok $([ "$new" -gt "${old[1]}" ] && echo 0 || echo 1) "the new run's id ($new) is above the removed ones (${old[*]})"
out=$("$FLEETCTL" --json runs $GONE | jq -r '[.[].id] | map(tostring) | join(" ")')
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
