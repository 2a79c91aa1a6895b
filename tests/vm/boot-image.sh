#!/bin/bash
# boot-image.sh: integration test (TAP) for the guest image. Boots it under a
# private libvirtd (tests/lib/vmns.sh) and checks SSH over the virtio-serial
# control channel with a pinned host key, persistence across reboot, ACPI
# shutdown and destroy+start, and poweroff from inside.
#
#   tests/vm/boot-image.sh [--network nat|none]
#
# Env: FLEET_IMAGE_DIR (image cache, default $PWD/images/out; built when
# missing or made with another agentd or dropbear), AGENTD (agentd binary for
# the image, default agentd/agentd), FLEET_DROPBEAR (fleet's patched dropbear,
# default $PWD/images/dropbear/dropbear, built by images/build-dropbear.sh from
# the source scripts/deps.sh fetches; without it the test fails), FLEET_VIRT_TYPE (kvm|qemu, default: kvm if usable),
# CI=true (a missing prerequisite fails instead of skipping).
set -u

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
NETWORK=nat
BOOT_TIMEOUT=${FLEET_BOOT_TIMEOUT:-180}   # fleetd's vm_boot_timeout: TCG on a busy host is slow
PLAN=13

while [ $# -gt 0 ]; do
    case "$1" in
    --network) NETWORK=${2:-}; shift 2 ;;
    *) echo "usage: $0 [--network nat|none]" >&2; exit 2 ;;
    esac
done
case "$NETWORK" in nat|none) ;; *) echo "--network must be nat or none" >&2; exit 2 ;; esac

# ---------------------------------------------------------------- TAP
N=0
FAILED=0
ok() { N=$((N + 1)); echo "ok $N - $*"; }
not_ok() { N=$((N + 1)); FAILED=$((FAILED + 1)); echo "not ok $N - $*"; }
check() { local d=$1; shift; if "$@"; then ok "$d"; else not_ok "$d"; fi; }
skip() { N=$((N + 1)); echo "ok $N - $1 # SKIP $2"; }
diag() { sed 's/^/# /' <<<"$*"; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

missing_prereq() {
    if [ "${CI:-}" = true ]; then
        echo "1..1"
        echo "not ok 1 - prerequisites: $*"
        exit 1
    fi
    echo "1..0 # SKIP $*"
    exit 0
}

# ---------------------------------------------------------------- prerequisites
[ "$(id -u)" = 0 ] || missing_prereq "needs root (private libvirtd in a namespace)"
for c in qemu-system-x86_64:qemu-system-x86 qemu-img:qemu-utils virsh:libvirt-clients \
         libvirtd:libvirt-daemon-system virtlogd:libvirt-daemon-system ssh:openssh-client \
         ssh-keygen:openssh-client socat:socat dropbearkey:dropbear-bin mke2fs:e2fsprogs \
         unshare:util-linux nsenter:util-linux flock:util-linux; do
    command -v "${c%%:*}" >/dev/null 2>&1 || missing_prereq "${c%%:*} not found (Debian package ${c#*:})"
done
if [ "$NETWORK" = nat ]; then
    command -v dnsmasq >/dev/null 2>&1 || missing_prereq "dnsmasq not found (Debian package dnsmasq-base)"
fi
AGENTD=${AGENTD:-$REPO/agentd/agentd}
[ -x "$AGENTD" ] || missing_prereq "no agentd binary at $AGENTD (build it or set AGENTD)"
IMG=${FLEET_IMAGE_DIR:-$PWD/images/out}
DROPBEAR=${FLEET_DROPBEAR:-$PWD/images/dropbear/dropbear}
# fleet's patched dropbear (a no-op when up to date); never the stock one.
if ! out=$("$REPO/images/build-dropbear.sh" --out "${DROPBEAR%/*}" 2>&1); then
    printf '%s\n' "$out" | sed 's/^/# /'
    echo "1..1"
    echo "not ok 1 - no patched dropbear: run scripts/deps.sh as root (it fetches its source)"
    exit 1
fi

# shellcheck source=../lib/vmns.sh
. "$REPO/tests/lib/vmns.sh"

T=$(mktemp -d "${TMPDIR:-/tmp}/fleet-boot-test.XXXXXX")
cleanup() {
    vmns_stop
    rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo "1..$PLAN"

# skip_rest REASON: report the remaining tests as skipped and stop.
skip_rest() {
    while [ $N -lt $PLAN ]; do skip "not run" "$1"; done
    exit 1
}

# ---------------------------------------------------------------- 1: image
image_fresh() {
    local f want have
    for f in vmlinuz initramfs.img base.qcow2 manifest.json; do [ -s "$IMG/$f" ] || return 1; done
    want=$(sha256sum "$AGENTD" | cut -d' ' -f1)
    have=$(sed -n 's/.*"agentd_sha256": "\([0-9a-f]*\)".*/\1/p' "$IMG/manifest.json")
    [ "$want" = "$have" ] || return 1
    want=$(sha256sum "$DROPBEAR" | cut -d' ' -f1)
    have=$(sed -n 's/.*"dropbear_sha256": "\([0-9a-f]*\)".*/\1/p' "$IMG/manifest.json")
    [ "$want" = "$have" ]
}
build_image() {
    mkdir -p "$IMG" || return 1
    (
        flock 9
        image_fresh && exit 0
        "$REPO/images/build-image.sh" --agentd "$AGENTD" --dropbear "$DROPBEAR" --out "$IMG" 2>&1 | sed 's/^/# /'
        exit "${PIPESTATUS[0]}"
    ) 9>"$IMG/.lock"
}
if image_fresh; then
    ok "guest image present in $IMG"
elif build_image && image_fresh; then
    ok "guest image built into $IMG"
else
    not_ok "guest image build"
    skip_rest "no image"
fi
diag "image: base.qcow2 $(stat -c %s "$IMG/base.qcow2") bytes, initramfs $(stat -c %s "$IMG/initramfs.img") bytes, vmlinuz $(stat -c %s "$IMG/vmlinuz") bytes"

# ---------------------------------------------------------------- 2: libvirtd
if vmns_start; then
    ok "private libvirtd in a network namespace"
else
    not_ok "private libvirtd in a network namespace"
    skip_rest "no libvirtd"
fi

# KVM if /dev/kvm opens and answers KVM_GET_API_VERSION (12) and libvirt
# agrees; TCG otherwise.
kvm_usable() {
    [ -c /dev/kvm ] || return 1
    perl -e 'open(my $f, "+<", "/dev/kvm") or exit 1; my $v = ioctl($f, 0xAE00, 0); exit((defined $v && $v == 12) ? 0 : 1)' 2>/dev/null || return 1
    vmns_virsh domcapabilities --virttype kvm >/dev/null 2>&1
}
VIRT=${FLEET_VIRT_TYPE:-}
if [ -z "$VIRT" ]; then
    if kvm_usable; then VIRT=kvm; else VIRT=qemu; fi
fi

# ---------------------------------------------------------------- 3: define + start
DOM=fleet-boot-$VMNS_ID
NET=fleet-net-$VMNS_ID
IMGDIR=$VMNS_VARLIB/images            # /var/lib/libvirt/images inside
CHANDIR=$VMNS_VARLIB/fleet            # /var/lib/libvirt/fleet inside
mkdir -p "$CHANDIR" && chmod 0755 "$CHANDIR"
SOCK_NS=/var/lib/libvirt/fleet/$DOM.ctl
SOCK=$CHANDIR/$DOM.ctl                # same socket, host path
CONSOLE=$CHANDIR/$DOM.console.log

# Keys: a dropbear host key made here and pinned; an OpenSSH client key.
dropbearkey -t ed25519 -f "$T/host_key" >/dev/null 2>&1
dropbearkey -t ed25519 -f "$T/other_host_key" >/dev/null 2>&1
ssh-keygen -q -t ed25519 -N '' -C fleet-test -f "$T/id_ed25519"
echo "guest $(dropbearkey -y -f "$T/host_key" | grep '^ssh-ed25519' | cut -d' ' -f1,2)" > "$T/known_hosts"
echo "guest $(dropbearkey -y -f "$T/other_host_key" | grep '^ssh-ed25519' | cut -d' ' -f1,2)" > "$T/known_hosts_wrong"

# Kernel, initramfs and base are copied in: libvirt relabels (chowns) what
# a domain uses, and the shared cache must stay untouched.
cp "$IMG/vmlinuz" "$IMG/initramfs.img" "$IMG/base.qcow2" "$IMGDIR/"
vmns_exec qemu-img create -q -f qcow2 -b /var/lib/libvirt/images/base.qcow2 -F qcow2 \
    "/var/lib/libvirt/images/$DOM.qcow2" >/dev/null
"$REPO/images/make-seed.sh" --out "$IMGDIR/$DOM.seed" --host-key "$T/host_key" \
    --authorized-keys "$T/id_ed25519.pub" --root-authorized-keys "$T/id_ed25519.pub" \
    --hostname "$DOM"

NIC=
if [ "$NETWORK" = nat ]; then
    cat > "$T/net.xml" <<EOF
<network>
  <name>$NET</name>
  <forward mode='nat'/>
  <bridge name='fbr$VMNS_ID' stp='off'/>
  <ip address='192.168.150.1' netmask='255.255.255.0'>
    <dhcp><range start='192.168.150.10' end='192.168.150.99'/></dhcp>
  </ip>
</network>
EOF
    vmns_virsh net-create /dev/stdin < "$T/net.xml" >/dev/null ||
        diag "net-create failed"
    NIC="<interface type='network'><source network='$NET'/><model type='virtio'/><port isolated='yes'/></interface>"
fi
# dom_xml TYPE: the domain definition for virt type TYPE (kvm|qemu).
dom_xml() {
    local cpu=
    [ "$1" = kvm ] && cpu="<cpu mode='host-passthrough'/>"
    cat <<EOF
<domain type='$1'>
  <name>$DOM</name>
  <memory unit='MiB'>256</memory>
  <vcpu>1</vcpu>
  <os>
    <type arch='x86_64' machine='pc'>hvm</type>
    <kernel>/var/lib/libvirt/images/vmlinuz</kernel>
    <initrd>/var/lib/libvirt/images/initramfs.img</initrd>
    <cmdline>console=ttyS0 root=/dev/vda rw</cmdline>
  </os>
  <features><acpi/></features>
  $cpu
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>restart</on_reboot>
  <on_crash>destroy</on_crash>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    <disk type='file' device='disk'>
      <driver name='qemu' type='qcow2'/>
      <source file='/var/lib/libvirt/images/$DOM.qcow2'/>
      <target dev='vda' bus='virtio'/>
    </disk>
    <disk type='file' device='disk'>
      <driver name='qemu' type='raw'/>
      <source file='/var/lib/libvirt/images/$DOM.seed'/>
      <target dev='vdb' bus='virtio'/>
      <readonly/>
    </disk>
    <serial type='file'>
      <source path='/var/lib/libvirt/fleet/$DOM.console.log'/>
      <target port='0'/>
    </serial>
    <channel type='unix'>
      <source mode='bind' path='$SOCK_NS'/>
      <target type='virtio' name='org.fleet.ctl'/>
    </channel>
    $NIC
    <rng model='virtio'><backend model='random'>/dev/urandom</backend></rng>
    <memballoon model='none'/>
  </devices>
</domain>
EOF
}

console_tail() { [ -r "$CONSOLE" ] && tail -n "${1:-25}" "$CONSOLE" | tr -d '\r' | sed 's/^/# console: /'; }

start_guest() {
    dom_xml "$VIRT" > "$T/dom.xml"
    vmns_virsh define "$T/dom.xml" >/dev/null || return 1
    T_START=$(now)
    vmns_virsh start "$DOM" >/dev/null
}
# kernel_runs SECONDS: did the kernel reach /init (seen on the console)?
kernel_runs() {
    local deadline=$((SECONDS + $1))
    while [ $SECONDS -lt $deadline ]; do
        grep -q 'Run /init' "$CONSOLE" 2>/dev/null && return 0
        sleep 0.2
    done
    return 1
}
started=0
if start_guest; then
    started=1
    # /dev/kvm can open and answer and still run guests unusably slowly
    # (nested virtualization): unless KVM was asked for, fall back to TCG.
    if [ "$VIRT" = kvm ] && [ -z "${FLEET_VIRT_TYPE:-}" ] && ! kernel_runs 20; then
        diag "KVM guest did not reach /init within 20 s; falling back to TCG"
        vmns_virsh destroy "$DOM" >/dev/null 2>&1
        vmns_virsh undefine "$DOM" >/dev/null 2>&1
        : > "$CONSOLE"
        VIRT=qemu
        start_guest || started=0
    fi
fi
if [ $started = 1 ]; then
    ok "domain $DOM defined and started (type $VIRT, network $NETWORK)"
else
    not_ok "domain $DOM defined and started (type $VIRT, network $NETWORK)"
    console_tail
    skip_rest "guest did not start"
fi
diag "channel socket: $(stat -c '%A %U:%G' "$SOCK" 2>/dev/null || echo missing), dir $(stat -c '%A %U:%G' "$CHANDIR")"

# ---------------------------------------------------------------- SSH helpers
# gssh [-k KNOWN] USER CMD...: SSH into the guest over the channel socket,
# once. A connection to a running guest whose banner never comes is a
# failure, never retried: that is the relay bug tests/vm/reconnect.sh is
# there to catch (docs/vm-backend.md, "Reconnecting to a running guest").
# Only wait_ssh, while the guest boots, tries again.
gssh() {
    local known=$T/known_hosts
    if [ "$1" = -k ]; then known=$2; shift 2; fi
    _gssh "$known" "$@"
}
_gssh() {
    local known=$1 user=$2
    shift 2
    timeout 60 ssh -F /dev/null -i "$T/id_ed25519" -o IdentitiesOnly=yes -o BatchMode=yes \
        -o "ProxyCommand=socat - UNIX-CONNECT:$SOCK" \
        -o StrictHostKeyChecking=yes -o "UserKnownHostsFile=$known" -o GlobalKnownHostsFile=/dev/null \
        -o ConnectTimeout="${GSSH_TIMEOUT:-6}" -o ServerAliveInterval=5 -o ServerAliveCountMax=3 -o LogLevel=ERROR \
        "$user@guest" "$@"
}

# wait_ssh SECONDS [NOT_BOOT_ID]: until SSH works (in a boot other than
# NOT_BOOT_ID); prints the boot id.
wait_ssh() {
    local limit=$1 not=${2:-} t0=$SECONDS next=10 id
    while [ $((SECONDS - t0)) -lt "$limit" ]; do
        # A long banner timeout: bytes sent before the guest is up wait in
        # the socket, so one attempt can span the whole boot.
        id=$(GSSH_TIMEOUT=30 gssh agent cat /proc/sys/kernel/random/boot_id 2>/dev/null </dev/null)
        if [ -n "$id" ] && [ "$id" != "$not" ]; then
            echo "$id"
            return 0
        fi
        if [ $((SECONDS - t0)) -ge $next ]; then
            echo "# still waiting for SSH ($((SECONDS - t0)) s)" >&2
            next=$((next + 10))
        fi
        sleep 0.2
    done
    return 1
}

# wait_state STATE SECONDS
wait_state() {
    local deadline=$((SECONDS + $2))
    while [ $SECONDS -lt $deadline ]; do
        [ "$(vmns_virsh domstate "$DOM" 2>/dev/null)" = "$1" ] && return 0
        sleep 0.2
    done
    return 1
}

# ---------------------------------------------------------------- 4: SSH
if BOOT=$(wait_ssh "$BOOT_TIMEOUT"); then
    ok "SSH as agent over virtio-serial with pinned host key"
    diag "boot-to-SSH: $(elapsed "$T_START") s (type $VIRT)"
else
    not_ok "SSH as agent over virtio-serial with pinned host key (within ${BOOT_TIMEOUT}s)"
    console_tail 40
    skip_rest "no SSH"
fi

# ---------------------------------------------------------------- 5-8
check "id -un is agent" [ "$(gssh agent id -un </dev/null)" = agent ]
check "agent can write /home/agent/memory" \
    gssh agent 'touch /home/agent/memory/probe && rm /home/agent/memory/probe' </dev/null
if [ "$NETWORK" = nat ]; then
    lease() {
        local i
        for i in $(seq 1 60); do
            gssh agent ip -4 -o addr show dev eth0 </dev/null 2>/dev/null | grep -q 'inet 192\.168\.150\.' && return 0
            sleep 0.5
        done
        return 1
    }
    check "guest eth0 got a DHCP lease on the isolated NAT network" lease
else
    check "guest has no NIC (--network none)" gssh agent '! test -e /sys/class/net/eth0' </dev/null
fi
refused() {
    local out
    out=$(gssh -k "$T/known_hosts_wrong" agent true 2>&1 </dev/null) && return 1
    grep -qi 'host key verification failed' <<<"$out" || { diag "$out"; return 1; }
    # The relay must be ready for the next connection.
    [ "$(gssh agent echo again </dev/null)" = again ]
}
check "a wrong pinned host key is refused (and the next connection works)" refused

# A host connection's tail that comes after sshd closed it (a client's last
# packets) must not be taken for the next connection's first bytes: the
# relay gave them to a new sshd, and the next client then met two banners.
stale_tail() {
    { printf 'SSH-2.0-probe\r\n'; sleep 2; head -c 256 /dev/zero | tr '\0' 'x'; sleep 2
      printf 'tail after sshd closed'; sleep 2; } | timeout 30 socat - "UNIX-CONNECT:$SOCK" >/dev/null 2>&1
    [ "$(gssh agent echo next </dev/null)" = next ]
}
check "bytes a host sends after sshd closed its connection do not break the next one" stale_tail

# ---------------------------------------------------------------- 9: virsh reboot
rebooted() {
    local b2
    gssh agent 'echo note-1 > /home/agent/memory/note && sync' </dev/null || return 1
    vmns_virsh reboot "$DOM" >/dev/null || return 1
    b2=$(wait_ssh "$BOOT_TIMEOUT" "$BOOT") || { diag "no SSH after reboot"; console_tail; return 1; }
    BOOT=$b2
    [ "$(gssh agent cat /home/agent/memory/note </dev/null)" = note-1 ]
}
check "virsh reboot: new boot, file under /home/agent kept" rebooted

# ---------------------------------------------------------------- 10: ACPI shutdown
T0=$(now)
if vmns_virsh shutdown "$DOM" >/dev/null && wait_state "shut off" 60; then
    ok "virsh shutdown (ACPI power button) powers the guest off"
    diag "shutdown took $(elapsed "$T0") s"
else
    not_ok "virsh shutdown (ACPI power button) powers the guest off"
    console_tail
    vmns_virsh destroy "$DOM" >/dev/null 2>&1
fi

# ---------------------------------------------------------------- 11: destroy + start
destroy_start() {
    local b
    if [ "$(vmns_virsh domstate "$DOM")" != running ]; then
        vmns_virsh start "$DOM" >/dev/null || return 1
        BOOT=$(wait_ssh "$BOOT_TIMEOUT") || return 1
    fi
    [ "$(gssh agent cat /home/agent/memory/note </dev/null)" = note-1 ] || { diag "note lost after shutdown"; return 1; }
    gssh agent 'echo note-2 > /home/agent/memory/note2 && sync' </dev/null || return 1
    vmns_virsh destroy "$DOM" >/dev/null || return 1
    T_START=$(now)
    vmns_virsh start "$DOM" >/dev/null || return 1
    b=$(wait_ssh "$BOOT_TIMEOUT" "$BOOT") || return 1
    diag "boot-to-SSH after destroy+start: $(elapsed "$T_START") s"
    BOOT=$b
    [ "$(gssh agent cat /home/agent/memory/note2 </dev/null)" = note-2 ]
}
check "files under /home/agent survive shutdown and destroy+start" destroy_start

# ---------------------------------------------------------------- 12: poweroff inside
gssh root poweroff </dev/null >/dev/null 2>&1
check "root's poweroff inside the guest shuts the domain off" wait_state "shut off" 60

[ $FAILED -eq 0 ] || console_tail 15
exit $((FAILED > 0))
