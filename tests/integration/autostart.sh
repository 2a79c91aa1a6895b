#!/bin/bash
# Host reboot (#14): agents marked --autostart on are started when fleetd
# first starts after the host booted, higher --boot-priority first, at most
# boot_concurrency at a time; a fleetd restarted within one boot starts
# nothing (an operator's stop stays a stop). The reboot is simulated: fleetd
# and every agent's sandbox killed with SIGKILL, and the boot id fleetd
# recorded in its state dir made to differ from the kernel's, as a reboot
# makes it.
. "$FLEET_SRCDIR/tests/lib/common.sh"
U=ast$(test_run_id)	# agent names of this run (two checkouts at once never collide)

[ "$(id -u)" = 0 ] || skip_all "needs root (user agents are Unix users)"
command -v jq >/dev/null || skip_all "needs jq"

user_fleetd_setup ast
user_fleetd_start --boot-concurrency 1; ok $? "fleetd starts (boot_concurrency 1)"
LOG=$STATE/fleetd.log
BOOT_ID=$(cat /proc/sys/kernel/random/boot_id)
wait_log() {	# wait_log PATTERN: until the log has PATTERN (at most 60 s)
	local i
	for ((i = 0; i < 1200; i++)); do
		grep -qE "$1" "$LOG" && return 0
		sleep 0.05
	done
	return 1
}
wait_log "autostart: done after the host booted: 0 started, 0 failed"
ok $? "its first start in this boot autostarts nothing (no agents yet)"
is "$(cat "$STATE/boot-id")" "$BOOT_ID" "and records the host's boot id in the state dir"
state() { "$FLEETCTL" --json show "$1" | jq -r .state; }

"$FLEETCTL" create $U-a --backend user --autostart on --boot-priority 10 >/dev/null; ok $? "create $U-a (autostart, priority 10)"
"$FLEETCTL" create $U-b --backend user --autostart on >/dev/null; ok $? "create $U-b (autostart, priority 0)"
"$FLEETCTL" create $U-c --backend user >/dev/null; ok $? "create $U-c (no autostart)"
"$FLEETCTL" create $U-d --backend user --autostart on --boot-priority 5 >/dev/null; ok $? "create $U-d (autostart, priority 5)"
is "$("$FLEETCTL" --json show $U-a | jq -c .boot)" '{"autostart":true,"priority":10}' "show --json has its boot settings"
like "$("$FLEETCTL" show $U-d)" "boot: +autostart on, priority 5" "and show prints them"
like "$("$FLEETCTL" show $U-c)" "boot: +autostart off, priority 0" "off by default"
"$FLEETCTL" set $U-c --autostart on --boot-priority -3 >/dev/null; ok $? "set changes them"
is "$("$FLEETCTL" --json show $U-c | jq -c .boot)" '{"autostart":true,"priority":-3}' "(autostart on, priority -3)"
"$FLEETCTL" set $U-c --autostart off >/dev/null
is "$("$FLEETCTL" --json show $U-c | jq -c .boot)" '{"autostart":false,"priority":-3}' "and back off, the priority kept"
out=$("$FLEETCTL" set $U-c --autostart maybe 2>&1); is $? 2 "--autostart maybe is a usage error (exit 2)"
like "$out" "--autostart takes on or off" "and says what it takes"
out=$("$FLEETCTL" create $U-x --backend user --boot-priority 5000 2>&1); is $? 2 "--boot-priority 5000 is refused"
like "$out" "--boot-priority needs a number from -1000 to 1000" "with the range"
out=$(api PATCH /v1/agents/$U-c '{"boot_priority": 1001}'); is "${out##* }" 400 "the API refuses priority 1001 too (400)"
like "$out" "boot_priority" "naming the field"
out=$(api PATCH /v1/agents/$U-c '{"autostart": "yes"}'); is "${out##* }" 400 "and an autostart that is not true or false"

for a in $U-a $U-b $U-c $U-d; do "$FLEETCTL" start $a >/dev/null || diag "start $a failed"; done
for a in $U-a $U-b $U-c $U-d; do is "$(state $a)" running "$a runs"; done

# A restart of fleetd within one boot (an upgrade, a crash): nothing is started.
"$FLEETCTL" stop $U-b >/dev/null; ok $? "the operator stops $U-b"
stop_fleetd TERM; ok $? "fleetd stops"
user_fleetd_start --boot-concurrency 1; ok $? "fleetd starts again in the same boot"
is "$(state $U-b)" stopped "$U-b stays stopped"
is "$(grep -c 'autostart: the host booted' "$LOG")" 1 "and no autostart began (still the first start's one)"

# The reboot: every process gone, the recorded boot id another than the kernel's.
keepers=
for a in $U-a $U-c $U-d; do keepers="$keepers $(keeper_of $a)"; done
is "$(echo $keepers | wc -w)" 3 "three sandboxes run ($U-a, $U-c, $U-d)"
stop_fleetd KILL; ok $? "kill -9 fleetd"
kill -9 $keepers; ok $? "kill -9 every agent's sandbox"
echo 00000000-0000-0000-0000-000000000000 > "$STATE/boot-id"
: > "$LOG.before" && cp "$LOG" "$LOG.before" && : > "$LOG"
user_fleetd_start --boot-concurrency 1; ok $? "fleetd starts after the (simulated) reboot"
wait_log "autostart: done after the host booted"; ok $? "its autostart finishes"
like "$(cat "$LOG")" "autostart: done after the host booted: 3 started, 0 failed" "three agents started, none failed"
like "$(cat "$LOG")" "the host booted since fleetd last ran; 3 agent\(s\) to start, at most 1 at a time" \
	"it says what it will do"
for a in $U-a $U-b $U-d; do is "$(state $a)" running "$a (autostart) runs again"; done
is "$(state $U-c)" stopped "$U-c (autostart off) does not"
line() { grep -n "$1" "$LOG" | head -1 | cut -d: -f1; }
order="$(line "starting agent '$U-a'") $(line "agent '$U-a' started") $(line "starting agent '$U-d'") $(line "agent '$U-d' started") $(line "starting agent '$U-b'")"
is "$(tr ' ' '\n' <<<"$order" | sort -n | tr '\n' ' ')" "$order " \
	"priority order ($U-a 10, $U-d 5, $U-b 0), one at a time: each begins after the one before started"
is "$(cat "$STATE/boot-id")" "$BOOT_ID" "the boot id is recorded again"
ok "$([ -n "$(keeper_of $U-a)" ] && echo 0 || echo 1)" "$U-a has a sandbox again"
is "$("$FLEETCTL" exec $U-a --no-stdin -- echo hi)" hi "and exec works in it"

stop_fleetd TERM; ok $? "fleetd stops"
user_fleetd_start; ok $? "and starts again in this boot"
is "$(grep -c 'autostart: starting' "$LOG")" 3 "no agent started a second time"

for a in $U-a $U-b $U-c $U-d; do "$FLEETCTL" rm --force $a >/dev/null; done
done_testing
