#!/bin/bash
# A second host reached as docs/multi-host.md tells operators to reach one
# (#15): qemu+ssh:// with a key, the host key checked. The second private
# libvirtd of tests/lib/host2.sh with H2_TRANSPORT=ssh: an SSH server
# (dropbear) in its namespaces on the veth address, taking only a test key;
# libvirt runs OpenSSH's ssh from fleetd's namespace and virt-ssh-helper on
# h2. Nothing fleet-specific on h2, and no traffic leaves the namespaces the
# test made. Checks: host add and host ls over SSH (versions, TCG, ready);
# an agent created there (the image uploaded through the storage API over
# SSH), started, exec'd into, snapshotted and restored, stopped, removed
# with its volumes; a host key known_hosts does not match refuses a host add
# with ssh's reason, and records nothing.
. "$FLEET_SRCDIR/tests/lib/common.sh"

. "$FLEET_SRCDIR/tests/lib/vmfleet.sh"
vmfleet_setup --tcg jq ssh ssh-keygen dropbearkey virt-ssh-helper
[ -x /usr/sbin/dropbear ] || skip_all "/usr/sbin/dropbear missing (dropbear-bin; scripts/deps.sh installs it)"

. "$FLEET_SRCDIR/tests/lib/host2.sh"
H2_TRANSPORT=ssh
host2_start

id=$(test_run_id)
a=ss$id
vols() { virsh_h2 vol-list fleet 2>/dev/null | awk -v a="agent-$a." 'index($1, a) == 1 { print $1 }' | sort | tr '\n' ' '; }

like "$H2_URI" "^qemu\+ssh://root@$H2_ADDR/system\?keyfile=" "h2 is reached by qemu+ssh with a key: $H2_URI"
fleetd_ns_start; ok $? "fleetd starts inside the first namespace"
out=$("$FLEETCTL" host add h2 "$H2_URI" 2>&1); ok $? "host add h2 over SSH: $out"
ls_out=$("$FLEETCTL" host ls)
like "$ls_out" "h2 +ready" "host ls: h2 ready"
is "$("$FLEETCTL" --json host ls | jq -r '.[] | select(.name == "h2") | "\(.reachable) \(.virt) \(.libvirt_version != null)"')" \
	"true tcg true" "reachable over SSH, TCG, libvirt's version read there"

# --- an agent on h2, everything through the SSH transport ---------------------------------------
out=$("$FLEETCTL" create "$a" --host h2 --health-interval 0 --restart never 2>&1); ok $? "create $a on h2: $out"
like "$out" "host h2" "placed on h2"
like "$(vols)" "agent-$a.disk.qcow2" "its overlay is a volume in h2's pool: $(vols)"
"$FLEETCTL" start "$a" >/dev/null; ok $? "start $a on h2"
is "$(virsh_h2 domstate "fleet-$a" | head -1)" running "its domain runs on h2's libvirtd"
is "$("$FLEETCTL" exec "$a" -- cat /etc/hostname)" "$a" "exec over the channel stream inside SSH"
"$FLEETCTL" exec "$a" -- sh -c 'echo one > /home/agent/mark'; ok $? "a file in the guest"
"$FLEETCTL" snapshot "$a" s1 >/dev/null; ok $? "snapshot s1 on h2"
"$FLEETCTL" exec "$a" -- sh -c 'echo two > /home/agent/mark'; ok $? "the file changed"
"$FLEETCTL" restore "$a" s1 >/dev/null; ok $? "restore s1 on h2"
is "$("$FLEETCTL" exec "$a" -- cat /home/agent/mark)" one "the file is back as s1 had it"

# --- a host key known_hosts does not match: ssh refuses it, fleet says so ---------------------------
good=$TEST_TMP/known_hosts.good
cp "$H2_SSH_DIR/ns1-root/.ssh/known_hosts" "$good"
ssh-keygen -q -t ed25519 -N '' -f "$TEST_TMP/other_key"
printf '%s %s\n' "$H2_ADDR" "$(cut -d' ' -f1-2 "$TEST_TMP/other_key.pub")" > "$TEST_TMP/known_hosts.bad"
h2_ssh_known_hosts "$TEST_TMP/known_hosts.bad"
out=$("$FLEETCTL" host add h2b "$H2_URI" 2>&1); isnt_rc $?; ok $? "host add of h2 under a wrong host key is refused"
like "$out" "(REMOTE HOST IDENTIFICATION HAS CHANGED|Host key verification failed)" "with ssh's reason: ${out:0:200}"
is "$("$FLEETCTL" --json host ls | jq '[.[] | select(.name == "h2b")] | length')" 0 "and no host h2b is recorded"
h2_ssh_known_hosts "$good"

# --- the end: stop, rm, its volumes gone there --------------------------------------------------------
"$FLEETCTL" stop "$a" >/dev/null; ok $? "stop $a"
"$FLEETCTL" rm "$a" >/dev/null; ok $? "rm $a"
is "$(vols)" "" "its volumes are gone from h2's pool"
virsh_h2 dominfo "fleet-$a" >/dev/null 2>&1; isnt_rc $?; ok $? "and its domain from h2's libvirtd"
"$FLEETCTL" host rm h2 >/dev/null; ok $? "host rm h2 (empty)"
grep -q "Exit before auth\|Pubkey auth succeeded for 'root'" "$H2_SSH_DIR/dropbear.log"; ok $? "h2's SSH server logged the key logins"
done_testing
