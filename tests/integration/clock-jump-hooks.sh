#!/bin/bash
# The webhook replay windows under a wall clock jump (#13, docs/reliability.md
# "Failing dependencies"), end to end: fleetd AND fleet-hooksd see the jump.
#
# fleetd spawns fleet-hooksd with a clean environment and the listener
# chroots into the empty STATE/listener-root, so neither an LD_PRELOAD
# given to fleetd nor an /etc/ld.so.preload with /etc/faketimerc reaches
# the listener's clock (libfaketime re-reads its file after the chroot,
# finds none and falls back to the real time; Debian 12's libfaketime
# 0.9.10 also fakes the monotonic clock unless told by the environment).
# So, in this test's own mount namespace only (tests/lib/own-netns.sh), a
# wrapper is bind-mounted over the fleet-hooksd next to fleetd: it runs the
# real one (a copy) under libfaketime with FAKETIME_TIMESTAMP_FILE=/faketimerc,
# a path inside the listener's chroot, where the test writes the offset once
# the listener is up (the root is checked empty at its start, by fleetd and
# by fleet-hooksd). fleetd's own offset file gets the same value. The product
# has no test knob; the host's clock is never touched.
#
# Slack (X-Slack-Request-Timestamp) and Standard Webhooks (webhook-timestamp)
# deliveries: signed with the (jumped) current time they are accepted after a
# day forward and after two days back; signed with the time before the jump
# they are refused 401 and store nothing; redeliveries across the jump are
# recognised (200, nothing new); every accepted delivery has exactly one
# event and one run.
. "$FLEET_SRCDIR/tests/lib/own-netns.sh"
. "$FLEET_SRCDIR/tests/lib/common.sh"

[ "$(id -u)" = 0 ] || skip_all "needs root (user agents are Unix users)"
own_netns_ready
. "$FLEET_SRCDIR/tests/lib/faketime.sh"
HOOKSD=$(dirname "$(readlink -f "$FLEETD")")/fleet-hooksd
[ -x "$HOOKSD" ] || skip_all "no fleet-hooksd next to $FLEETD"
U=uchk$(test_run_id)	# agent names and hooks_user of this run (two checkouts at once never collide)
HOOKS_USER=$U-hooks	# this test's hooks_user: fleetd creates it
. "$FLEET_SRCDIR/tests/lib/hooks.sh"

# The real listener, copied (the bind mount hides it), keeping its name (its comm is checked).
mkdir -p "$TEST_TMP/real" && cp "$HOOKSD" "$TEST_TMP/real/fleet-hooksd"
cat >"$TEST_TMP/hooksd-wrap" <<EOF
#!/bin/sh
exec env LD_PRELOAD=$FAKETIME_LIB FAKETIME_TIMESTAMP_FILE=/faketimerc FAKETIME_NO_CACHE=1 \\
	FAKETIME_DONT_FAKE_MONOTONIC=1 $TEST_TMP/real/fleet-hooksd "\$@"
EOF
chmod 0755 "$TEST_TMP/hooksd-wrap"
# Private to this test's mount namespace: gone with it, whatever happens.
mount --bind "$TEST_TMP/hooksd-wrap" "$HOOKSD" || fail_all "cannot bind-mount the wrapper over $HOOKSD"

user_fleetd_setup uchk
CLOCK=$TEST_TMP/clock-offset
echo "+0" >"$CLOCK"
LD_PRELOAD=$FAKETIME_LIB FAKETIME_TIMESTAMP_FILE=$CLOCK FAKETIME_NO_CACHE=1 FAKETIME_DONT_FAKE_MONOTONIC=1 \
	hooks_fleetd_start; ok $? "fleetd and its listener start"
ROOT=$STATE/listener-root
is "$(tr '\0' '\n' <"/proc/$HOOKS_PID/environ" | grep -c '^FAKETIME_TIMESTAMP_FILE=/faketimerc$')" 1 \
	"the listener runs under libfaketime (the wrapper)"
check "libfaketime is loaded in the listener" -- grep -q faketime "/proc/$HOOKS_PID/maps"

OFFSET=0
# set_clock SECONDS: fleetd's and the listener's wall clock are the real one plus SECONDS from now on.
set_clock() {
	printf '%+d\n' "$1" >"$CLOCK.new" && mv "$CLOCK.new" "$CLOCK" &&
		printf '%+d\n' "$1" >"$ROOT/.faketimerc.new" && chmod 0644 "$ROOT/.faketimerc.new" &&
		mv "$ROOT/.faketimerc.new" "$ROOT/faketimerc" && OFFSET=$1
}
# now: the jumped clock's time, as a sender whose clock is right by it would sign.
now() { echo $(($(date +%s) + OFFSET)); }
set_clock 0; ok $? "the listener's offset file is in its root"

"$FLEETCTL" create $U-a --backend user --command 'cat >/dev/null' >/dev/null; ok $? "create $U-a"
add() { local a=$1 s=$2; shift 2; printf '%s' "$s" | "$FLEETCTL" hook add "$a" "$@" >/dev/null; }
SL_KEY=uchk-slack-signing-secret-0123
WHSEC=whsec_$(head -c 32 /dev/urandom | base64 -w0)
add $U-a "$SL_KEY" --source slack --route uchk-slack; ok $? "slack route"
add $U-a "$WHSEC" --source standard --route uchk-std; ok $? "standard webhooks route"
printf '{}' >"$TEST_TMP/empty.json"
deadline=$((SECONDS + 30))
while [ "$(post /hooks/uchk-std "$TEST_TMP/empty.json")" = 404 ] && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
is "$(post /hooks/uchk-std "$TEST_TMP/empty.json")" 401 "the listener has the routes (unsigned: 401)"

# body N: the delivery's body files, slack (event_id EvUCHKN) and standard.
body() {
	printf '{"type":"event_callback","event_id":"EvUCHK%s","event":{"type":"app_mention","text":"n%s"}}' "$1" "$1" \
		>"$TEST_TMP/sl$1.json"
	printf '{"type":"invoice.paid","data":{"id":%s}}' "$1" >"$TEST_TMP/std$1.json"
}
# deliver WHAT N TS WANT: the slack and standard deliveries N signed at TS; both answered WANT.
# A refusal must store nothing.
deliver() {
	local what=$1 n=$2 ts=$3 want=$4 before st
	body "$n"
	before=$(db_counts)
	st=$(slack_post uchk-slack "$SL_KEY" "$ts" "$TEST_TMP/sl$n.json")
	is "$st" "$want" "$what: slack delivery $n answered $want"
	st=$(standard_post uchk-std "$WHSEC" "msg_uchk_$n" "$ts" "$TEST_TMP/std$n.json")
	is "$st" "$want" "$what: standard delivery $n answered $want"
	[ "$want" = 401 ] && is "$(db_counts)" "$before" "$what: the refusals stored nothing"
	return 0
}

deliver "real time" 1 "$(now)" 202

# ---------------- a day forward ----------------
PRE=$(now)
set_clock 86400; ok $? "clocks: +1 day"
deliver "a day forward, signed by the jumped clock" 2 "$(now)" 202
deliver "a day forward, signed before the jump" 3 "$PRE" 401
deliver "a day forward, signed 6 minutes before the jumped clock" 3 $(($(now) - 360)) 401
deliver "a day forward, redelivery of 1 (new timestamp)" 1 "$(now)" 200

# ---------------- two days back ----------------
PRE=$(now)
set_clock -86400; ok $? "clocks: -1 day (two days back)"
deliver "two days back, signed by the jumped clock" 4 "$(now)" 202
deliver "two days back, signed before the jump (2 days ahead of the clock)" 5 "$PRE" 401
deliver "two days back, signed 6 minutes after the jumped clock" 5 $(($(now) + 360)) 401
deliver "two days back, redelivery of 2 (accepted in the future)" 2 "$(now)" 200

# ---------------- the real time again ----------------
PRE=$(now)
set_clock 0; ok $? "clocks: the real time (a day forward)"
deliver "back at the real time" 6 "$(now)" 202
deliver "back at the real time, signed before the jump" 7 "$PRE" 401
deliver "back at the real time, redelivery of 4" 4 "$(now)" 200

# Nothing lost, nothing doubled: each accepted delivery has one event and one run, which succeeded.
for n in 1 2 4 6; do
	for rd in "uchk-slack EvUCHK$n" "uchk-std msg_uchk_$n"; do
		set -- $rd
		is "$(db_q "SELECT count(*) FROM events WHERE route = '$1' AND delivery_id = '$2' AND
			outcome IS NOT 'duplicate'")" 1 "$1 $2: one event (besides redeliveries recorded as duplicate)"
		r=$(runs_of "$1" "$2")
		like "$r" "^$U-a:[0-9]+\$" "$1 $2: one run ($r)"
		is "$(run_wait $U-a "${r#*:}")" succeeded "$1 $2: its run succeeded"
	done
done
is "$(db_q "SELECT count(*) FROM events WHERE outcome IS NOT 'duplicate'")" 8 \
	"8 events in all besides duplicates (4 accepted deliveries per source)"
is "$(db_q "SELECT count(*) FROM events WHERE outcome = 'duplicate'")" 6 "6 redeliveries recorded as duplicate"
is "$(db_q "SELECT count(*) FROM hook_deliveries")" 8 "8 delivery ids kept"
is "$(db_q "SELECT count(*) FROM runs")" 8 "8 runs in all"
is "$(hooks_json pid)" "$HOOKS_PID" "the same listener served it all (never restarted)"
check "fleetd is still there" -- kill -0 "$FLEETD_PID"
is "$(db_q 'PRAGMA integrity_check')" ok "integrity_check: ok"

done_testing
