#!/bin/bash
# Exec output flow control with a VM agent: a command that prints 256 MiB
# (not 1 GiB: SSH through a TCG guest's virtio-serial is slow) to a client
# that first sleeps 10 s must not grow fleetd's memory: fleetd stops reading
# the exec's SSH channel above 1 MiB of unsent reply, the channel's 512 KiB
# window then stops the guest's sender, and reading resumes below 256 KiB.
# Meanwhile the same SSH session still serves other execs. Every byte and
# the exit status must arrive.
. "$FLEET_SRCDIR/tests/lib/common.sh"

. "$FLEET_SRCDIR/tests/lib/vmfleet.sh"
vmfleet_setup --tcg

SIZE=268435456
# What fleetd may grow by: the 1 MiB high watermark and a chunk, the paused
# channel's window that libssh2 holds, malloc's slack. Without flow control
# it buffers all the base64 output the client has not read.
BOUND_KIB=$((16 * 1024))

status_kib() { awk -v k="$1:" '$1 == k { print $2 }' "/proc/$FLEETD_PID/status"; }
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$FLEETD_PID/stat"; }

# Under --enable-asan, ASan's quarantine (256 MiB by default) would hold
# freed buffers and be all the RSS measures: keep it small.
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=4
fleetd_ns_start; ok $? "fleetd starts inside the namespace"
A=bkpv1
"$FLEETCTL" create $A --backend vm --network none --health-interval 0 --restart never >/dev/null &&
	"$FLEETCTL" start $A >/dev/null
ok $? "a VM agent runs"
n=$("$FLEETCTL" exec $A --no-stdin -- head -c 8388608 /dev/zero | wc -c)
is "$n" 8388608 "warm-up: 8 MiB through exec"

idle=$(status_kib VmRSS)
echo 5 > "/proc/$FLEETD_PID/clear_refs"	# reset VmHWM, the peak RSS, to now
# The reader takes nothing for 10 s, then everything. While it sleeps,
# another exec on the same session must still work.
( "$FLEETCTL" exec $A --no-stdin -- sh -c "head -c $SIZE /dev/zero; echo tail >&2" 2>"$TEST_TMP/err" |
	{ sleep 10; cat; } | wc -c > "$TEST_TMP/n"; echo "${PIPESTATUS[0]}" > "$TEST_TMP/st" ) &
slow=$!
sleep 4
t0=$(cpu_ticks)
is "$("$FLEETCTL" exec $A --no-stdin -- echo beside)" beside "another exec on the same session runs while the first is paused"
sleep 3
diag "fleetd RSS while the reader sleeps: $(status_kib VmRSS) KiB (idle $idle);" \
	"CPU over ~3 s paused: $(( $(cpu_ticks) - t0 )) ticks"
wait "$slow"
peak=$(status_kib VmHWM)
is "$(cat "$TEST_TMP/n")" $SIZE "all 256 MiB of output arrived"
is "$(cat "$TEST_TMP/err")" tail "stderr written after it too"
is "$(cat "$TEST_TMP/st")" 0 "and the exit status 0"
diag "fleetd RSS idle ${idle} KiB, peak ${peak} KiB (+$((peak - idle)) KiB)"
ok $([ $((peak - idle)) -lt $BOUND_KIB ] && echo 0 || echo 1) \
	"fleetd's peak RSS stays within $BOUND_KIB KiB of idle (+$((peak - idle)) KiB)"

# A client that hangs up while the exec is paused: the command is killed
# and the exec ends, so a snapshot (refused while one runs) goes through.
curl -sS -N --unix-socket "$SOCK" -X POST -H 'Content-Type: application/json' \
	--data-binary '{"argv": ["sh", "-c", "head -c 1073741824 /dev/zero; touch finished"]}' \
	"http://fleet/v1/agents/$A/exec" 2>/dev/null | { sleep 5; head -c 65536 >/dev/null; }
wait_for 60 "$FLEETCTL" snapshot $A after-hangup
ok $? "a paused exec whose client hung up ends (a snapshot goes through)"
"$FLEETCTL" exec $A --no-stdin -- test -e finished
is $? 1 "its command was killed before it finished"

done_testing
