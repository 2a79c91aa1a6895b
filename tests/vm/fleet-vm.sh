#!/bin/bash
# VM agents end to end: a private libvirtd in a network + mount namespace
# (tests/lib/vmns.sh), fleetd inside it, real QEMU guests, fleetctl and curl
# from outside. Provisioning, exec over the SSH control channel, isolation,
# persistence across restarts of the guest and of fleetd, crash restarts,
# host key pinning, drift, and bad input that leaves nothing behind.
. "$FLEET_SRCDIR/tests/lib/common.sh"

. "$FLEET_SRCDIR/tests/lib/vmfleet.sh"
vmfleet_setup

fleetd_log() { cat "$STATE/fleetd.log"; }
no_domain() { ! vmns_exec virsh -q -c qemu:///system dominfo "$1" >/dev/null 2>&1; }

fleetd_ns_start; ok $? "fleetd starts inside the namespace"
like "$("$FLEETCTL" --json status | jq -r .backends.vm)" "^available" "the vm backend is available"

# --- provisioning -------------------------------------------------------------------
out=$("$FLEETCTL" create alpha --backend vm --memory 256 2>&1); ok $? "create a VM agent"
like "$out" "agent 'alpha' created \(backend vm, state stopped, host local\)" "a created VM agent is provisioned and stopped, on the host local"
"$FLEETCTL" create beta --backend vm >/dev/null; ok $? "create a second VM agent"
is "$(virsh_ns list --all --name | sort | tr '\n' ' ')" "fleet-alpha fleet-beta " "virsh sees exactly fleet's domains"
xml=$(virsh_ns dumpxml fleet-alpha)
like "$xml" "<fleet:name>alpha</fleet:name>" "the domain carries fleet's metadata"
like "$xml" "<target type='virtio' name='org.fleet.ctl'/>" "with the virtio-serial control channel"
like "$(qemu-img info "$STATE/vms/alpha/disk.qcow2")" "backing file: $STATE/images/sha256/[0-9a-f]{64}/base.qcow2" \
	"its disk is an overlay on the image store's copy of the base"
check "alpha's keys are root-only" -- test "$(stat -c %a "$STATE/keys/alpha")" = 700

t0=$SECONDS
out=$("$FLEETCTL" start alpha 2>&1); ok $? "start alpha (waits for its control channel)"
diag "alpha booted to SSH-ready in $((SECONDS - t0)) s"
# KVM that answers but runs no guest (some development machines): the watchdog switched this host
# to TCG within the start, remembered it, and redefined alpha's domain as TCG.
if grep -q "printed no kernel line .* on this host: KVM does not run guests there" "$STATE/fleetd.log"; then
	is "$(cat "$STATE/vms/virt-type")" qemu "KVM ran no guest here: the switch to TCG is remembered"
	like "$(virsh_ns dumpxml fleet-alpha | head -1)" "^<domain type='qemu'" "and alpha runs as a TCG domain"
else
	diag "the first KVM guest booted, or this host has no KVM: no switch to TCG"
fi
like "$out" "state running" "alpha is running"
"$FLEETCTL" start beta >/dev/null 2>&1; ok $? "start beta"
is "$(virsh_ns domstate fleet-alpha)" running "virsh agrees alpha runs"
no_domain fleet-alpha; is "$?" 1 "(no_domain sees a domain that exists)"
like "$("$FLEETCTL" list)" "alpha +vm +running" "fleetctl list agrees"

# --- exec -----------------------------------------------------------------------------
is "$("$FLEETCTL" exec alpha -- id -un)" agent "exec runs as the agent user"
is "$("$FLEETCTL" exec alpha --root -- id -un)" root "exec --root runs as root"
out=$("$FLEETCTL" exec alpha -- sh -c 'echo out; echo err >&2; exit 3' 2>"$TEST_TMP/err"); rc=$?
is "$rc" 3 "exec exits with the command's exit code"
is "$out" out "stdout comes back on stdout"
is "$(cat "$TEST_TMP/err")" err "stderr comes back on stderr"
is "$(printf 'hello\nworld\n' | "$FLEETCTL" exec alpha -- wc -l)" 2 "stdin is forwarded"
head -c 3000000 /dev/urandom > "$TEST_TMP/blob"
is "$("$FLEETCTL" exec alpha -- sha256sum < "$TEST_TMP/blob" | cut -d' ' -f1)" "$(sha256sum < "$TEST_TMP/blob" | cut -d' ' -f1)" \
	"3 MB of binary stdin arrive intact"
is "$("$FLEETCTL" exec alpha -- sh -c 'head -c 2000000 /dev/zero' | wc -c)" 2000000 "2 MB of output stream back"
"$FLEETCTL" exec alpha -- sh -c 'kill -9 $$' 2>"$TEST_TMP/sig.err"; rc=$?
is "$rc" 137 "a command killed by a signal exits 128+N"
[ "$rc" = 137 ] || diag "stderr: $(cat "$TEST_TMP/sig.err")" "fleetd: $(tail -5 "$STATE/fleetd.log")"
"$FLEETCTL" exec alpha --timeout 2 -- sleep 60 2>"$TEST_TMP/timeout.err"; rc=$?
is "$rc" 124 "a command past its timeout is killed (exit 124)"
[ "$rc" = 124 ] || diag "stderr: $(cat "$TEST_TMP/timeout.err")" "fleetd: $(tail -5 "$STATE/fleetd.log")"

# --- isolation --------------------------------------------------------------------------
"$FLEETCTL" exec beta -- sh -c 'echo beta-secret > ~/memory/notes' >/dev/null
check "alpha cannot see beta's memory" -- bash -c "! '$FLEETCTL' exec alpha -- cat /home/agent/memory/notes"
is "$("$FLEETCTL" exec alpha --root -- sh -c 'cat /proc/partitions' | awk 'NR > 2 {print $4}' | sort | tr '\n' ' ')" \
	"vda vdb vdc " "alpha's guest sees only its own three disks (root, seed, memory store)"
is "$("$FLEETCTL" exec alpha --root -- sh -c 'ls /sys/class/net | sort | tr "\n" " "')" "lo " "a --network none guest has no NIC"

# --- persistence ---------------------------------------------------------------------------
"$FLEETCTL" exec alpha --root -- sh -c 'mkdir -p /usr/local/bin && printf "#!/bin/sh\necho installed-tool\n" > /usr/local/bin/mytool && chmod 755 /usr/local/bin/mytool'
ok $? "install a program into alpha's /usr/local/bin"
"$FLEETCTL" exec alpha -- sh -c 'echo remember-me > ~/memory/fact'
"$FLEETCTL" restart alpha >/dev/null 2>&1; ok $? "restart alpha"
is "$("$FLEETCTL" exec alpha -- cat /home/agent/memory/fact)" remember-me "a file survives fleetctl restart"
is "$("$FLEETCTL" exec alpha -- mytool)" installed-tool "an installed program survives fleetctl restart"

kill -TERM "$FLEETD_PID"; wait_for 20 bash -c "! kill -0 $FLEETD_PID"
is "$(virsh_ns domstate fleet-alpha)" running "stopping fleetd leaves the guests running"
fleetd_ns_start; ok $? "fleetd starts again"
is "$("$FLEETCTL" exec alpha -- cat /home/agent/memory/fact)" remember-me "exec works after a fleetd restart, file intact"

# --- a killed QEMU is restarted ---------------------------------------------------------------
qpid=$(vmns_exec cat /run/libvirt/qemu/fleet-alpha.pid)
kill -9 "$qpid"; ok $? "kill -9 alpha's QEMU process"
wait_for 30 bash -c "grep -q \"agent 'alpha': restarting its guest\" '$STATE/fleetd.log'"; ok $? "fleetd notices and restarts it"
wait_for 120 bash -c "'$FLEETCTL' exec alpha -- true"; ok $? "alpha answers again after the crash"
is "$("$FLEETCTL" exec alpha -- cat /home/agent/memory/fact)" remember-me "and its files are intact"

# --- host key pinning ----------------------------------------------------------------------------
cp "$STATE/keys/alpha/host.fingerprint" "$TEST_TMP/fp.good"
echo "SHA256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA" > "$STATE/keys/alpha/host.fingerprint"
kill -TERM "$FLEETD_PID"; wait_for 20 bash -c "! kill -0 $FLEETD_PID"
fleetd_ns_start
err=$("$FLEETCTL" exec alpha -- true 2>&1); rc=$?
ok $([ $rc -ne 0 ] && echo 0 || echo 1) "a guest presenting another host key is refused"
like "$err" "host key" "with a clear error about the host key"
cp "$TEST_TMP/fp.good" "$STATE/keys/alpha/host.fingerprint"
kill -TERM "$FLEETD_PID"; wait_for 20 bash -c "! kill -0 $FLEETD_PID"
fleetd_ns_start

# --- drift ---------------------------------------------------------------------------------------
virsh_ns define /dev/stdin >/dev/null <<XML
<domain type='qemu'><name>fleet-stranger</name><memory unit='MiB'>64</memory>
<os><type arch='x86_64'>hvm</type></os></domain>
XML
kill -TERM "$FLEETD_PID"; wait_for 20 bash -c "! kill -0 $FLEETD_PID"
fleetd_ns_start
like "$(fleetd_log)" "drift: libvirt domain fleet-stranger belongs to no fleet agent; left alone" "drift is reported at start"
virsh_ns undefine fleet-stranger >/dev/null

# --- bad input, nothing half-created --------------------------------------------------------------
err=$("$FLEETCTL" create alpha --backend vm 2>&1); is "$?" 1 "a second create of the same name fails"
like "$err" "already exists" "and says so"
err=$("$FLEETCTL" create huge --backend vm --memory 9999999 2>&1); is "$?" 1 "absurd memory is refused"
err=$("$FLEETCTL" create many --backend vm --vcpus 1000 2>&1); is "$?" 1 "absurd vcpus are refused"
err=$("$FLEETCTL" exec ghost -- true 2>&1); like "$err" "no such agent" "exec in an unknown agent"
mv "$STATE/images/base.qcow2" "$TEST_TMP/base.away"
err=$("$FLEETCTL" create noimage --backend vm 2>&1); is "$?" 1 "create without a base image fails"
like "$err" "guest image missing: .*base.qcow2" "naming the missing file"
mv "$TEST_TMP/base.away" "$STATE/images/base.qcow2"
check "no row left for it" -- bash -c "! '$FLEETCTL' show noimage"
check "no domain left for it" -- no_domain fleet-noimage
check "no files left for it" -- test ! -e "$STATE/vms/noimage" -a ! -e "$STATE/keys/noimage"

# libvirtd down: a clear error; back up: fleetd reconnects on its own.
lvpid=$(vmns_exec cat /run/libvirtd.pid)
kill -TERM "$lvpid"; wait_for 20 bash -c "! kill -0 $lvpid"
err=$("$FLEETCTL" create nolibvirt --backend vm 2>&1); is "$?" 1 "create while libvirtd is down fails"
like "$err" "is libvirtd running" "and says why"
check "nothing half-created" -- test ! -e "$STATE/vms/nolibvirt"
vmns_exec libvirtd -d; wait_for 30 vmns_exec test -S /run/libvirt/libvirt-sock
wait_for 60 bash -c "grep -q 'libvirt: reconnected' '$STATE/fleetd.log'"; ok $? "fleetd reconnects to the restarted libvirtd"
is "$("$FLEETCTL" exec alpha -- cat /home/agent/memory/fact)" remember-me "and alpha is still driven"

# --- remove -----------------------------------------------------------------------------------------
err=$("$FLEETCTL" rm beta 2>&1); is "$?" 1 "rm of a running VM agent is refused"
like "$err" "stop it first or use --force" "and says how"
"$FLEETCTL" rm --force beta >/dev/null; ok $? "rm --force removes it"
check "its domain is gone" -- no_domain fleet-beta
check "its overlay and keys are gone" -- test ! -e "$STATE/vms/beta" -a ! -e "$STATE/keys/beta"
"$FLEETCTL" stop alpha >/dev/null; ok $? "stop alpha cleanly"
is "$(virsh_ns domstate fleet-alpha)" "shut off" "virsh agrees alpha is off"
# A line only alpha's own guest writes: its init's "up" line with its
# hostname (the agent name, from its seed disk). Any output at all would not
# tell alpha's console from an error text or another guest's.
like "$("$FLEETCTL" console alpha)" "init: up: alpha, " "fleetctl console shows alpha's console log (its init came up)"

done_testing
