#!/bin/bash
# What a libvirtd restart does to work in flight on a local guest, on each of
# the two control-channel paths (issue #15: "use the same path for local
# guests if it costs nothing measurable"). Not part of make check, not a TAP
# test: an experiment whose answer docs/multi-host.md records. fleetd runs in
# a private namespace with its own libvirtd (tests/lib/vmfleet.sh); two TCG
# guests of the same image, 256 MiB, 1 vCPU, no NIC, both on that libvirtd:
#
#   loc  on local: its channel QEMU's Unix socket (vms/loc/ctl.sock), which
#        fleetd connects itself (today's local path);
#   lch  on "loop": the same libvirtd added a second time as a host (qemu+unix
#        to its socket), so fleetd reaches it through virDomainOpenChannel,
#        the stream a remote guest's channel is (the path local guests would
#        take if there were one path).
#
# Each gets a run (its command sleeps 25 s, then prints) and an exec (sleeps
# 20 s, then prints) in flight; then libvirtd is stopped with SIGTERM and
# started again, as tests/vm/deps-faults.sh part 1 does. Printed per guest:
# how the exec and the run ended, and whether an exec works after fleetd's
# reconnect. Last, loc (defined with a local agent's XML, its channel at
# vms/loc/ctl.sock) is recorded on "loop" while fleetd is stopped, so the
# next exec reaches it through virDomainOpenChannel: whether guests defined
# by earlier fleetds could be reached so.
#
# Usage: tests/bench/channel-libvirtd-restart.sh
# Env (as for make check): FLEET_SRCDIR, FLEET_BUILDDIR, FLEETD, FLEETCTL, AGENTD.
set -u

FLEET_SRCDIR=${FLEET_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
FLEET_BUILDDIR=${FLEET_BUILDDIR:-$PWD}
FLEETD=${FLEETD:-$FLEET_BUILDDIR/daemon/fleetd}
FLEETCTL=${FLEETCTL:-$FLEET_BUILDDIR/ctl/fleetctl}
AGENTD=${AGENTD:-$FLEET_BUILDDIR/agentd/agentd}
FLEET_DROPBEAR=${FLEET_DROPBEAR:-$FLEET_BUILDDIR/images/dropbear/dropbear}
export FLEET_SRCDIR FLEET_BUILDDIR FLEETD FLEETCTL AGENTD FLEET_DROPBEAR

LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
# The tests' own helpers: the namespace, fleetd in it, cleanup on exit.
. "$FLEET_SRCDIR/tests/lib/common.sh"
. "$FLEET_SRCDIR/tests/lib/vmfleet.sh"
vmfleet_setup --tcg jq
fleetd_ns_start || { echo "channel-libvirtd-restart: fleetd did not start" >&2; exit 1; }

die() { echo "channel-libvirtd-restart: $*" >&2; exit 1; }
libvirtd_pid() { vmns_exec cat /run/libvirtd.pid 2>/dev/null; }
last_run() { "$FLEETCTL" --json runs "$1" | jq -r 'max_by(.id).id'; }
running() { [ "$("$FLEETCTL" --json runs "$1" "$2" | jq -r .state)" = running ]; }
in_flight() { "$FLEETCTL" exec "$1" -- sh -c 'test -e /tmp/run-started && test -e /tmp/exec-started'; }

"$FLEETCTL" host add loop "qemu+unix:///system?socket=/run/libvirt/libvirt-sock" >/dev/null || die "host add loop failed"
AGENTS="loc lch"
declare -A HOST=([loc]=local [lch]=loop) EXEC RUN
for a in $AGENTS; do
	"$FLEETCTL" create "$a" --host "${HOST[$a]}" --health-interval 0 --restart never \
		--command 'touch /tmp/run-started; sleep 25; echo run-$FLEET_RUN_ID' >/dev/null || die "create $a failed"
	"$FLEETCTL" start "$a" >/dev/null || die "start $a failed"
	"$FLEETCTL" exec "$a" -- true || die "exec on $a failed"
done
[ -S "$STATE/vms/loc/ctl.sock" ] && [ ! -e "$STATE/vms/lch/ctl.sock" ] || die "loc should have its local socket and only it"

for a in $AGENTS; do
	"$FLEETCTL" trigger "$a" >/dev/null || die "trigger $a failed"
	RUN[$a]=$(last_run "$a")
	"$FLEETCTL" exec "$a" -- sh -c "touch /tmp/exec-started; sleep 20; echo exec-$a" >"$TEST_TMP/exec.$a" 2>&1 &
	EXEC[$a]=$!
done
for a in $AGENTS; do
	wait_for 120 running "$a" "${RUN[$a]}" && wait_for 120 in_flight "$a" || die "$a: the run and the exec are not in flight"
done
LPID=$(libvirtd_pid)
kill -TERM "$LPID" || die "cannot stop libvirtd"
wait_for 60 bash -c "! kill -0 $LPID 2>/dev/null" || die "libvirtd did not stop"
echo "# libvirtd (pid $LPID) stopped with the run and the exec in flight on both" >&2
vmns_exec libvirtd -d || die "libvirtd did not start again"
wait_for 120 grep -q "libvirt: reconnected" "$STATE/fleetd.log" || die "fleetd did not reconnect"

declare -A EXEC_RC RUN_ST AFTER
for a in $AGENTS; do
	wait "${EXEC[$a]}"; EXEC_RC[$a]=$?
	RUN_ST[$a]=$(run_wait "$a" "${RUN[$a]}" 300)
	t0=$SECONDS
	if wait_for 180 "$FLEETCTL" exec "$a" -- true; then AFTER[$a]="works (within $((SECONDS - t0)) s)"; else AFTER[$a]=fails; fi
done
{
	echo "libvirtd restart with work in flight, $(date -u '+%Y-%m-%d %H:%M') UTC, $(nproc) CPUs, $(uname -r)"
	echo "load average at the start $LOAD0, at the end $(cut -d' ' -f1-3 /proc/loadavg)"
	for a in $AGENTS; do
		echo
		echo "$a (host ${HOST[$a]}, $( [ "$a" = loc ] && echo "QEMU's socket" || echo virDomainOpenChannel)):"
		echo "  exec in flight: rc ${EXEC_RC[$a]}: $(tr '\n' ' ' < "$TEST_TMP/exec.$a")"
		echo "  run in flight:  ${RUN_ST[$a]}: $("$FLEETCTL" --json runs "$a" "${RUN[$a]}" | jq -r '.error // empty')"
		echo "  its output:     $("$FLEETCTL" logs "$a" "${RUN[$a]}" 2>&1 | tr '\n' ' ')"
		echo "  exec after the reconnect: ${AFTER[$a]}"
	done
}
# A guest defined with a local agent's XML (its channel at vms/loc/ctl.sock) reached through
# virDomainOpenChannel: loc recorded on host "loop" (the same libvirtd) while fleetd is stopped.
stop_fleetd || die "fleetd did not stop"
sqlite3 "$STATE/fleet.db" "UPDATE agents SET host = 'loop' WHERE name = 'loc'" || die "cannot record loc on loop"
fleetd_ns_start || die "fleetd did not start again"
out=$("$FLEETCTL" exec loc -- cat /etc/hostname 2>&1)
echo "loc's own XML (channel path vms/loc/ctl.sock) through virDomainOpenChannel: exec rc $?: $out"
sqlite3 "$STATE/fleet.db" "UPDATE agents SET host = 'local' WHERE name = 'loc'"
for a in $AGENTS; do "$FLEETCTL" rm --force "$a" >/dev/null; done
