#!/bin/bash
# Exec output flow control with a user agent: a command that prints 1 GiB to
# a client that first sleeps 10 s must not grow fleetd's memory (fleetd stops
# reading the command's pipes above 1 MiB of unsent reply and resumes below
# 256 KiB), and every byte and the exit status must still arrive. A client
# that hangs up while the command is paused still cancels it.
. "$FLEET_SRCDIR/tests/lib/common.sh"

[ "$(id -u)" = 0 ] || skip_all "needs root (user agents are Unix users)"
command -v jq >/dev/null || skip_all "jq not installed"
command -v curl >/dev/null || skip_all "curl not installed"

GIB=1073741824
# What fleetd may grow by while streaming: the 1 MiB high watermark, one
# chunk over it, malloc's slack. Without flow control it buffers nearly all
# of the base64 output the client has not read (over 1 GiB here).
BOUND_KIB=$((16 * 1024))

# Under --enable-asan, ASan's quarantine (256 MiB by default) would hold
# freed buffers and be all the RSS measures: keep it small.
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=4
user_fleetd_setup ubkp
user_fleetd_start; ok $? "fleetd starts"
A=bkp$(test_run_id)	# agent names of this run (two checkouts at once never collide)
"$FLEETCTL" create $A --backend user >/dev/null && "$FLEETCTL" start $A >/dev/null
ok $? "a user agent, started"

status_kib() { awk -v k="$1:" '$1 == k { print $2 }' "/proc/$FLEETD_PID/status"; }

# Warm up the exec path (malloc arenas, libevent buffers) before the baseline.
n=$("$FLEETCTL" exec $A --no-stdin -- head -c 8388608 /dev/zero | wc -c)
is "$n" 8388608 "warm-up: 8 MiB through exec"

idle=$(status_kib VmRSS)
echo 5 > "/proc/$FLEETD_PID/clear_refs"	# reset VmHWM, the peak RSS, to now
( while kill -0 "$FLEETD_PID" 2>/dev/null; do status_kib VmRSS; sleep 0.5; done ) > "$TEST_TMP/rss" &
sampler=$!
on_exit "kill $sampler"

# The reader takes nothing for 10 s, then everything.
n=$("$FLEETCTL" exec $A --no-stdin -- head -c $GIB /dev/zero | { sleep 10; cat; } | wc -c)
st=${PIPESTATUS[0]}
kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null
peak=$(status_kib VmHWM)
is "$n" $GIB "all 1 GiB of output arrived"
is "$st" 0 "and the exit status 0 after it"
diag "fleetd RSS idle ${idle} KiB, peak ${peak} KiB (+$((peak - idle)) KiB);" \
	"RSS every 0.5 s (KiB): $(awk 'NR % 10 == 1' "$TEST_TMP/rss" | tr '\n' ' ')"
ok $([ $((peak - idle)) -lt $BOUND_KIB ] && echo 0 || echo 1) \
	"fleetd's peak RSS stays within $BOUND_KIB KiB of idle (+$((peak - idle)) KiB)"

# Two slow readers at once: each stream is bounded on its own.
idle=$(status_kib VmRSS)
echo 5 > "/proc/$FLEETD_PID/clear_refs"
for i in 1 2; do
	( "$FLEETCTL" exec $A --no-stdin -- sh -c 'head -c 134217728 /dev/zero; echo tail >&2' 2>"$TEST_TMP/err$i" |
		{ sleep 5; cat; } | wc -c > "$TEST_TMP/n$i"; echo "${PIPESTATUS[0]}" > "$TEST_TMP/st$i" ) &
	pids[$i]=$!
done
wait "${pids[1]}" "${pids[2]}"
peak=$(status_kib VmHWM)
is "$(cat "$TEST_TMP/n1") $(cat "$TEST_TMP/n2")" "134217728 134217728" "two slow readers at once: 128 MiB each, complete"
is "$(cat "$TEST_TMP/err1" "$TEST_TMP/err2" | tr '\n' ' ')" "tail tail " "stderr after stdout on both"
is "$(cat "$TEST_TMP/st1") $(cat "$TEST_TMP/st2")" "0 0" "both exit 0"
ok $([ $((peak - idle)) -lt $BOUND_KIB ] && echo 0 || echo 1) \
	"and fleetd's peak RSS stays within $BOUND_KIB KiB of idle (+$((peak - idle)) KiB)"

# A client that hangs up while the command is paused: the command is
# cancelled and the exec ends (a snapshot is refused while one is in flight).
curl -sS -N --unix-socket "$SOCK" -X POST -H 'Content-Type: application/json' \
	--data-binary '{"argv": ["sh", "-c", "head -c 1073741824 /dev/zero; touch finished"]}' \
	"http://fleet/v1/agents/$A/exec" 2>/dev/null | { sleep 3; head -c 65536 >/dev/null; }
deadline=$((SECONDS + 60))
until "$FLEETCTL" snapshot $A after-hangup >/dev/null 2>"$TEST_TMP/snap.err"; do
	[ $SECONDS -ge $deadline ] && break
	sleep 0.5
done
ok $([ $SECONDS -lt $deadline ] && echo 0 || echo 1) "a paused exec whose client hung up ends (snapshot possible again)"
"$FLEETCTL" exec $A --no-stdin -- test -e finished
is $? 1 "its command was killed before it finished"

done_testing
