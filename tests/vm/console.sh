#!/bin/bash
# fleetctl console with a real guest that writes escape sequences to its
# serial console (a window-title change, a screen clear, a cursor move, a
# lone CR): on a terminal (fleetctl run under script(1)) they are shown in a
# visible form and never reach the terminal; piped, the bytes are raw.
# While the guest runs, GET /metrics shows its memory and CPU time from
# libvirt's bulk domain statistics (docs/metrics.md).
. "$FLEET_SRCDIR/tests/lib/common.sh"

command -v script >/dev/null || skip_all "script (util-linux) not installed"
. "$FLEET_SRCDIR/tests/lib/vmfleet.sh"
vmfleet_setup --tcg

fleetd_ns_start; ok $? "fleetd starts inside the namespace"
"$FLEETCTL" create con --backend vm --memory 256 >/dev/null; ok $? "create a VM agent"
"$FLEETCTL" start con >/dev/null 2>&1; ok $? "start it"
metrics=$(curl -sS --unix-socket "$SOCK" http://fleet/metrics)
like "$metrics" '^fleet_agent_memory_bytes\{agent="con",backend="vm"\} [1-9][0-9]+$' \
	"GET /metrics: the guest's memory, from libvirt's bulk domain statistics"
like "$metrics" '^fleet_agent_cpu_seconds_total\{agent="con",backend="vm"\} [0-9]*\.?[0-9]*[1-9]' "and its CPU time"
like "$metrics" '^fleet_agents\{backend="vm",state="running"\} 1$' "fleet_agents counts it running"
# The guest writes to its own serial console, as anything in it could.
"$FLEETCTL" exec con --root -- sh -c \
	'printf "fleet-mark-1 \033]0;fleet-pwned\007\033[2J\033[10;10Hfleet-mark-2\rfake\n" > /dev/ttyS0'
ok $? "the guest writes escape sequences to /dev/ttyS0"
for ((i = 0; i < 100; i++)); do grep -aq fleet-mark-2 "$STATE/vms/con/console.log" && break; sleep 0.1; done
check "they are in the console log" -- grep -aq "fleet-mark-2" "$STATE/vms/con/console.log"

# On a terminal: script(1) gives fleetctl a pty; what fleetctl wrote is in the typescript.
script -qfc "$FLEETCTL console con" "$TEST_TMP/tty.out" >/dev/null 2>&1 </dev/null
ok $? "fleetctl console on a terminal exits 0"
line=$(grep -a "fleet-mark-1" "$TEST_TMP/tty.out" | tail -1)
like "$line" 'fleet-mark-1 \^\[\]0;fleet-pwned\^G\^\[\[2J\^\[\[10;10Hfleet-mark-2\^Mfake' \
	"on a terminal, ESC, BEL and a lone CR are shown as ^[, ^G and ^M"
check "no ESC byte reached the terminal" -- bash -c "! grep -aq \$'\\033' '$TEST_TMP/tty.out'"

# Piped: the raw bytes, for tools.
"$FLEETCTL" console con > "$TEST_TMP/pipe.out"; ok $? "fleetctl console piped exits 0"
check "piped, the bytes are raw" -- grep -aq $'fleet-mark-1 \033]0;fleet-pwned\007' "$TEST_TMP/pipe.out"

"$FLEETCTL" rm --force con >/dev/null; ok $? "remove it"
done_testing
