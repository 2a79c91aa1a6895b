#!/bin/bash
# KVM on another host that its libvirt offers but that runs no guest (#15):
# the watchdog fleetd's own host has (vm/channel.c) covers another host too.
# The second private libvirtd of tests/lib/host2.sh with H2_KVM=keep (the
# other host files hide /dev/kvm from it), over its Unix socket. What h2's
# libvirt offers depends on the machine, and each case is checked as such:
#   - no KVM offered (no /dev/kvm): agents there are TCG domains from the start;
#   - KVM offered and working: the guest boots under KVM, the host stays KVM;
#   - KVM offered but running no guest (nested virtualization on some
#     development machines: the kernel never leaves its decompressor): the
#     first guest prints no kernel line within the watchdog's 20 s, fleetd
#     switches h2 to TCG for good (vms/virt-type@h2), redefines that guest as
#     a TCG domain and boots it again, and the start succeeds; host ls says
#     tcg, and the next agent there is a TCG domain at once.
. "$FLEET_SRCDIR/tests/lib/common.sh"

. "$FLEET_SRCDIR/tests/lib/vmfleet.sh"
vmfleet_setup --tcg jq

. "$FLEET_SRCDIR/tests/lib/host2.sh"
H2_TRANSPORT=unix
H2_KVM=keep
host2_start

id=$(test_run_id)
a=kv$id
b=kw$id
dom_type() { virsh_h2 dumpxml "fleet-$1" | sed -n "1s/^<domain type='\([a-z]*\)'.*/\1/p"; }
h2_virt() { "$FLEETCTL" --json host ls | jq -r '.[] | select(.name == "h2") | .virt'; }

fleetd_ns_start; ok $? "fleetd starts inside the first namespace"
"$FLEETCTL" host add h2 "$H2_URI" >/dev/null; ok $? "host add h2"
offered=$(h2_virt)
like "$offered" '^(kvm|tcg)$' "h2's libvirt offers: $offered (/dev/kvm $([ -e /dev/kvm ] && echo present || echo absent) on this machine)"

out=$("$FLEETCTL" create "$a" --host h2 --health-interval 0 --restart never 2>&1); ok $? "create $a on h2: $out"
is "$(dom_type "$a")" "$([ "$offered" = kvm ] && echo kvm || echo qemu)" "its domain there is of the type h2 offers"
"$FLEETCTL" start "$a" > "$TEST_TMP/start.out" 2>&1; ok $? "start $a on h2: $(cat "$TEST_TMP/start.out")"
is "$("$FLEETCTL" exec "$a" -- cat /etc/hostname)" "$a" "exec works in it"
switched=false
grep -q "printed no kernel line .* on host h2: KVM does not run guests there" "$STATE/fleetd.log" && switched=true
if [ "$offered" = tcg ]; then
	diag "h2 offers no KVM on this machine: nothing for the watchdog to watch"
	! $switched; ok $? "no switch logged"
elif $switched; then
	diag "KVM on this machine runs no guest: the watchdog switched h2 to TCG"
	is "$(dom_type "$a")" qemu "$a was redefined as a TCG domain on h2 and booted again"
	is "$(cat "$STATE/vms/virt-type@h2")" qemu "the switch is remembered (vms/virt-type@h2)"
	is "$(h2_virt)" tcg "host ls says h2 runs TCG now"
	like "$(cat "$STATE/vms/$a/console.log")" "Linux version" "and the guest's kernel printed its banner this time"
	out=$("$FLEETCTL" create "$b" --host h2 --health-interval 0 --restart never 2>&1); ok $? "create $b on h2: $out"
	is "$(dom_type "$b")" qemu "the next agent on h2 is a TCG domain from the start"
	"$FLEETCTL" start "$b" >/dev/null; ok $? "and starts"
	is "$(grep -c "printed no kernel line" "$STATE/fleetd.log")" 1 "with no second wait for the watchdog"
	stop_fleetd; ok $? "fleetd stops"
	fleetd_ns_start; ok $? "and starts again"
	is "$(h2_virt)" tcg "h2 is still TCG after the restart"
	"$FLEETCTL" stop "$b" >/dev/null; ok $? "stop $b"
	"$FLEETCTL" rm "$b" >/dev/null; ok $? "rm $b"
else
	diag "KVM works on this machine: the guest booted under KVM"
	is "$(dom_type "$a")" kvm "$a still runs as a KVM domain"
	[ ! -e "$STATE/vms/virt-type@h2" ]; ok $? "no switch remembered"
	is "$(h2_virt)" kvm "host ls says kvm"
fi
"$FLEETCTL" stop "$a" >/dev/null; ok $? "stop $a"
"$FLEETCTL" rm "$a" >/dev/null; ok $? "rm $a"
"$FLEETCTL" host rm h2 >/dev/null; ok $? "host rm h2"
[ ! -e "$STATE/vms/virt-type@h2" ]; ok $? "a host removed forgets its switch (added again, it is tried with KVM again)"
done_testing
