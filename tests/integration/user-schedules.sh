#!/bin/bash
# Cron triggers with user agents (fleetctl schedule): add, ls and rm; bad
# specs, zones and catch-up words refused by fleetctl (exit 2) and by the
# API (400); a schedule one minute ahead fires in that minute in a named
# zone (Asia/Kolkata, UTC+05:30) and the same wall-clock time in UTC does
# not; slots missed while fleetd was down (kill -9) run once with
# --catch-up once and not at all with skip; schedules survive the kill and
# go with their agent. Waits for minute boundaries: some 3 to 4 minutes.
. "$FLEET_SRCDIR/tests/lib/common.sh"
U=usc$(test_run_id)	# agent names of this run (two checkouts at once never collide)

[ "$(id -u)" = 0 ] || skip_all "needs root (user agents are Unix users)"
command -v jq >/dev/null || skip_all "jq not installed"
[ -r /usr/share/zoneinfo/Asia/Kolkata ] || skip_all "no tz database (/usr/share/zoneinfo/Asia/Kolkata)"

user_fleetd_setup usc
user_fleetd_start; ok $? "fleetd starts"
cmd='echo "cron run $FLEET_RUN_ID by $FLEET_TRIGGER"'
for a in $U-a $U-once $U-skip $U-rm; do
	"$FLEETCTL" create "$a" --backend user --command "$cmd" >/dev/null; ok $? "create $a"
done
# cron_runs AGENT: the ids of the agent's runs with trigger cron, one a line
cron_runs() { "$FLEETCTL" --json runs "$1" | jq -r '.[] | select(.trigger == "cron") | .id'; }
# before_second S: wait for the start of the next minute unless fewer than S seconds of this one have gone
before_second() { local s=$(( $(date +%s) % 60 )); [ "$s" -lt "$1" ] || sleep $((60 - s)); }

# --- bad input: fleetctl's own checks (exit 2), then the API's (400) ---
out=$("$FLEETCTL" schedule add $U-a 'every day' 2>&1); is $? 2 "a bad spec is a usage error"
like "$out" "invalid cron spec 'every day'" "and says so"
out=$("$FLEETCTL" schedule add $U-a '61 * * * *' 2>&1); is $? 2 "a minute of 61 is refused"
like "$out" "minute field: 61 is out of range 0-59" "naming the field"
out=$("$FLEETCTL" schedule add $U-a '@daily' --tz Mars/Olympus 2>&1); is $? 2 "an unknown zone is refused"
like "$out" "unknown time zone 'Mars/Olympus'" "and named"
out=$("$FLEETCTL" schedule add $U-a '@daily' --tz ../../etc/passwd 2>&1); is $? 2 "a path is not a zone"
like "$out" "is not a time zone name" "and is said not to be one"
out=$("$FLEETCTL" schedule add $U-a '@daily' --catch-up always 2>&1); is $? 2 "an unknown catch-up is refused"
like "$out" "--catch-up is once or skip" "with the choices"
out=$("$FLEETCTL" schedule add $U-a 2>&1); is $? 2 "add without a spec is a usage error"
out=$("$FLEETCTL" schedule frob 2>&1); is $? 2 "an unknown schedule command is a usage error"
out=$("$FLEETCTL" schedule add ghost '@daily' 2>&1); is $? 1 "add for an unknown agent fails in fleetd"
like "$out" "no such agent" "and says so"
out=$(api POST /v1/agents/$U-a/schedules '{"cron": "* * * *"}')
is "${out##* }" 400 "the API refuses a spec of four fields"
like "${out% *}" "invalid cron spec" "with the reason"
out=$(api POST /v1/agents/$U-a/schedules '{"cron": "@daily", "tz": "Nowhere/Atlantis"}')
is "${out##* }" 400 "the API refuses an unknown zone"
like "${out% *}" "unknown time zone" "with the reason"
out=$(api POST /v1/agents/$U-a/schedules '{"cron": "@daily", "tz": "../../../etc/shadow"}')
is "${out##* }" 400 "and a zone that is a path"
out=$(api POST /v1/agents/$U-a/schedules '{"cron": "@daily", "catch_up": "all"}')
is "${out##* }" 400 "and an unknown catch-up"
out=$(api POST /v1/agents/$U-a/schedules '{"cron": "@daily", "when": "now"}')
is "${out##* }" 400 "and an unknown field"
out=$(api DELETE /v1/agents/$U-a/schedules/x1); is "${out##* }" 400 "a malformed schedule id is refused"
is "$("$FLEETCTL" --json schedule ls | jq length)" 0 "nothing refused was stored"

# --- add, ls, rm ---
printf '{"digest": "morning"}\n' > "$TEST_TMP/payload.json"
out=$("$FLEETCTL" schedule add $U-a '@daily' --tz Asia/Kolkata --payload "$TEST_TMP/payload.json")
ok $? "schedule add with a zone and a payload"
like "$out" "^agent '$U-a': schedule [0-9]+ added \('@daily' in Asia/Kolkata, catch-up once\); next run " \
	"it says what it added, catch-up once by default"
id=$("$FLEETCTL" --json schedule ls $U-a | jq -r '.[0].id')
is "$("$FLEETCTL" --json schedule ls $U-a | jq -r '.[0] | [.cron, .tz, .catch_up, (.payload_bytes|tostring)] | join(" ")')" \
	"@daily Asia/Kolkata once $(stat -c %s "$TEST_TMP/payload.json")" "ls shows its spec, zone, catch-up and payload size"
is "$("$FLEETCTL" --json schedule ls $U-a | jq -r '.[0].next_at')" \
	"$(date -u -d "$(TZ=Asia/Kolkata date -d 'tomorrow 00:00' '+%F %T %z')" +%FT%TZ)" \
	"its next slot is the next midnight in Kolkata"
"$FLEETCTL" schedule add $U-once '*/10 * * * *' --catch-up skip >/dev/null; ok $? "a schedule of another agent"
out=$("$FLEETCTL" schedule ls)
like "$out" "^$id +$U-a +@daily +Asia/Kolkata +once " "ls without an agent lists every schedule: $U-a's"
like "$out" " $U-once +\*/10 \* \* \* \* +\(host\) +skip " "and $U-once's (in the host's zone)"
out=$(api GET /v1/schedules); is "${out##* }" 200 "GET /v1/schedules"
is "$(jq -r '.schedules | length' <<<"${out% *}")" 2 "lists both"
is "$("$FLEETCTL" --json schedule ls $U-once | jq length)" 1 "ls AGENT only that agent's"
out=$("$FLEETCTL" schedule rm $U-once "$id" 2>&1); is $? 1 "rm with another agent's schedule id fails"
like "$out" "has no schedule $id" "and says so"
out=$("$FLEETCTL" schedule rm $U-a "$id"); ok $? "schedule rm"
like "$out" "schedule $id removed" "says so"
is "$("$FLEETCTL" --json schedule ls $U-a | jq length)" 0 "it is gone"
other=$("$FLEETCTL" --json schedule ls $U-once | jq -r '.[0].id')
"$FLEETCTL" schedule rm $U-once "$other" >/dev/null
audit=$("$FLEETCTL" --json audit --limit 30 | jq -r '.[] | .action + " " + .target + " " + .outcome')
like "$audit" "^schedule.add $U-a/$id ok$" "add is audited as schedule.add"
like "$audit" "^schedule.remove $U-a/$id ok$" "rm as schedule.remove"

# --- a slot one minute ahead fires in that minute, in the schedule's zone ---
before_second 40
slot=$(( $(date +%s) / 60 * 60 + 60 ))
kol=$(TZ=Asia/Kolkata date -d "@$slot" '+%-M %-H')
"$FLEETCTL" schedule add $U-a "$kol * * *" --tz Asia/Kolkata >/dev/null; ok $? "a schedule for the next minute in Kolkata ($kol * * *)"
"$FLEETCTL" schedule add $U-a "$kol * * *" --tz UTC >/dev/null; ok $? "the same wall-clock time in UTC"
is "$("$FLEETCTL" --json schedule ls $U-a | jq -r '.[1].next_at')" "$(date -u -d "@$((slot + 19800))" +%FT%TZ)" \
	"whose next slot is 5 h 30 min later"
deadline=$((SECONDS + 150))
until [ -n "$(cron_runs $U-a)" ] || [ $SECONDS -ge $deadline ]; do sleep 1; done
runs=$(cron_runs $U-a)
is "$(wc -w <<<"$runs")" 1 "one cron run was queued"
first=$(head -1 <<<"$runs")
queued=$("$FLEETCTL" --json runs $U-a "$first" | jq -r .queued_at)
like "$queued" "^$(date -u -d "@$slot" +%Y-%m-%dT%H:%M):" "it was queued in the slot's minute ($(date -u -d "@$slot" +%H:%M) UTC)"
deadline=$((SECONDS + 60))
until [ "$("$FLEETCTL" --json runs $U-a "$first" | jq -r .state)" = succeeded ] || [ $SECONDS -ge $deadline ]; do sleep 0.5; done
like "$("$FLEETCTL" --json runs $U-a "$first" | jq -r .log)" "cron run $first by cron" "it ran the command with FLEET_TRIGGER=cron"
is "$(cron_runs $U-a | wc -w)" 1 "still one cron run once it is done (the slot fired once)"
for s in $("$FLEETCTL" --json schedule ls $U-a | jq -r '.[].id'); do "$FLEETCTL" schedule rm $U-a "$s" >/dev/null; done

# --- catch-up after downtime: once runs one, skip runs none ---
before_second 40
slot=$(( $(date +%s) / 60 * 60 + 60 ))
utc_spec=$(date -u -d "@$slot" '+%-M %-H * * *')
"$FLEETCTL" schedule add $U-once "$utc_spec" --tz UTC --catch-up once >/dev/null; ok $? "a catch-up once schedule for the next minute"
"$FLEETCTL" schedule add $U-skip "$utc_spec" --tz UTC --catch-up skip >/dev/null; ok $? "a catch-up skip schedule for the same minute"
stop_fleetd KILL; ok $? "kill -9 fleetd before the slot"
while [ "$(date +%s)" -le $((slot + 1)) ]; do sleep 1; done
user_fleetd_start; ok $? "start fleetd again after the slot went by"
is "$("$FLEETCTL" --json schedule ls | jq -r '[.[].agent] | sort | join(" ")')" "$U-once $U-skip" \
	"the schedules survived kill -9"
deadline=$((SECONDS + 60))
until [ -n "$(cron_runs $U-once)" ] || [ $SECONDS -ge $deadline ]; do sleep 0.5; done
is "$(cron_runs $U-once | wc -w)" 1 "catch-up once: the missed slot ran once"
is "$(cron_runs $U-skip | wc -w)" 0 "catch-up skip: it did not run (decided in the same pass)"
is "$("$FLEETCTL" --json schedule ls $U-skip | jq -r '.[0].last_at != null')" true \
	"the skipped slot is recorded as dealt with"

# --- an agent's schedules go with it ---
"$FLEETCTL" schedule add $U-rm '@hourly' >/dev/null; ok $? "a schedule of $U-rm"
"$FLEETCTL" rm --force $U-rm >/dev/null; ok $? "remove $U-rm"
is "$("$FLEETCTL" --json schedule ls | jq -r --arg a "$U-rm" '[.[] | select(.agent == $a)] | length')" 0 \
	"its schedules are gone"
is "$(sqlite3 "$STATE/fleet.db" 'SELECT count(*) FROM schedules s LEFT JOIN agents a ON a.id = s.agent_id WHERE a.id IS NULL')" \
	0 "no schedule row outlives its agent"

done_testing
