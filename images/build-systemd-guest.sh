#!/bin/bash
# build-systemd-guest.sh: a Debian 12 guest with systemd as PID 1 and the
# unified cgroup hierarchy, with fleet installed (`make install`) and its unit
# enabled: the host fleet is meant for, for tests/vm/systemd-host.sh (issue #14:
# this machine kind has no systemd as PID 1 and only cgroup v1).
#
#   images/build-systemd-guest.sh --build BUILD_DIR --ssh-key PUBKEY --out DIR
#
# The root filesystem comes from Debian's packages through debootstrap
# (images/fetch-systemd-rootfs.sh, images/systemd-guest.packages), cached as a
# tarball under $FLEET_CACHE (default /var/cache/fleet)/systemd-guest; this
# script downloads nothing. Every build unpacks it, checks that every library
# fleet's programs link is there, installs fleet
# from BUILD_DIR with `make install DESTDIR=...` (the same binaries the suite
# tests), enables fleetd.service, and writes:
#
#   DIR/root.img          ext4 root filesystem (raw; boots with root=/dev/vda)
#   DIR/vmlinuz           the host's Debian kernel (as images/build-image.sh)
#   DIR/ssh_host_ed25519_key.pub  the guest's host key, to pin (known_hosts)
#
# The initramfs is fleet's own (BUILD_DIR/images/out/initramfs.img: virtio
# modules, then switch_root to init=, here /usr/lib/systemd/systemd). The guest gets DHCP
# from systemd-networkd on its one NIC (QEMU user networking in the test),
# root logs in with PUBKEY only.
set -euo pipefail

PROG=build-systemd-guest.sh
BUILD=
OUT=
SSH_KEY=
SIZE_MIB=1536
CACHE=${FLEET_CACHE:-/var/cache/fleet}/systemd-guest

die() { echo "$PROG: error: $*" >&2; exit 1; }
usage() { echo "usage: $PROG --build BUILD_DIR --ssh-key PUBKEY --out DIR [--size-mib N]" >&2; exit 2; }
while [ $# -gt 0 ]; do
	case "$1" in
	--build) BUILD=${2:?}; shift 2 ;;
	--out) OUT=${2:?}; shift 2 ;;
	--ssh-key) SSH_KEY=${2:?}; shift 2 ;;
	--size-mib) SIZE_MIB=${2:?}; shift 2 ;;
	*) usage ;;
	esac
done
[ -n "$BUILD" ] && [ -n "$OUT" ] && [ -n "$SSH_KEY" ] || usage
[ "$(id -u)" = 0 ] || die "run as root (make install into the image, file ownership)"
BUILD=$(cd "$BUILD" && pwd)
[ -x "$BUILD/daemon/fleetd" ] || die "no fleetd in $BUILD: build fleet first"
[ -r "$SSH_KEY" ] || die "--ssh-key $SSH_KEY: not readable"
for c in mke2fs:e2fsprogs ssh-keygen:openssh-client depmod:kmod; do
	command -v "${c%%:*}" >/dev/null || die "'${c%%:*}' not found; install the Debian package '${c#*:}'"
done

# ---------------------------------------------------------------- the root (cached)
# Fetched by images/fetch-systemd-rootfs.sh (tests/run.sh starts it in the
# background): wait for a fetch under way, never download here.
TARBALL=$("$(dirname "$0")/fetch-systemd-rootfs.sh" --print-path)
if [ -d "$CACHE" ]; then
	exec 9>"$CACHE/.lock"
	flock 9
	exec 9>&-
fi
[ -s "$TARBALL" ] || die "no $TARBALL: run images/fetch-systemd-rootfs.sh as root first (it downloads Debian packages)"

# ---------------------------------------------------------------- this build
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
ROOT=$(mktemp -d "$OUT/root.XXXXXX")
trap 'rm -rf --one-file-system "$ROOT"' EXIT
tar -C "$ROOT" --numeric-owner -xf "$TARBALL"

# Every library fleet's programs link must be in the root (merged /usr: either path).
missing=
for b in "$BUILD"/daemon/fleetd "$BUILD"/daemon/fleet-hooksd "$BUILD"/daemon/fleet-init \
	"$BUILD"/ctl/fleetctl "$BUILD"/agentd/agentd; do
	# A static program (agentd, fleet-init) has none: ldd fails, nothing to check.
	for l in $({ ldd "$b" 2>/dev/null || true; } | awk '/=> \//{print $3}'); do
		n=${l##*/}
		[ -e "$ROOT/usr/lib/x86_64-linux-gnu/$n" ] || [ -e "$ROOT/lib/x86_64-linux-gnu/$n" ] ||
			[ -e "$ROOT$l" ] || missing="$missing $n"
	done
done
[ -z "$missing" ] || die "the root lacks libraries fleet links:$missing; add their Debian packages" \
	"(dpkg -S) to images/systemd-guest.packages"

# fleet, as an operator installs it (docs/operations.md "Deployment").
make -C "$BUILD" install DESTDIR="$ROOT" >"$OUT/install.log" 2>&1 || { tail -20 "$OUT/install.log" >&2; die "make install failed"; }
unit=$(cd "$ROOT" && find usr lib etc -name fleetd.service -path '*systemd/system*' 2>/dev/null | head -1)
[ -n "$unit" ] || die "make install put no fleetd.service into the image"
systemctl --root="$ROOT" enable "/$unit" >/dev/null 2>&1 || systemctl --root="$ROOT" enable fleetd.service >/dev/null
systemctl --root="$ROOT" enable systemd-networkd.service ssh.service >/dev/null 2>&1 || true

# Kernel modules a fleet host loads on demand (nftables, veth, tun, loop for the
# memory stores, file systems), from the host's Debian kernel the guest boots.
KVER=
for k in /boot/vmlinuz-*; do
	v=${k#/boot/vmlinuz-}
	[ -f "/lib/modules/$v/modules.dep" ] && KVER=$v
done
[ -n "$KVER" ] || die "no /boot/vmlinuz-* with modules; install the Debian package 'linux-image-amd64'"
cp /boot/vmlinuz-"$KVER" "$OUT/vmlinuz"
mkdir -p "$ROOT/lib/modules/$KVER/kernel/drivers"
cp -a /lib/modules/"$KVER"/modules.* "$ROOT/lib/modules/$KVER/"
for d in kernel/net kernel/lib kernel/crypto kernel/drivers/net kernel/drivers/block kernel/fs; do
	[ -d "/lib/modules/$KVER/$d" ] && mkdir -p "$ROOT/lib/modules/$KVER/${d%/*}" &&
		cp -a "/lib/modules/$KVER/$d" "$ROOT/lib/modules/$KVER/${d%/*}/"
done
depmod -b "$ROOT" "$KVER"

# Host identity, login, network, console.
echo fleet-systemd-guest > "$ROOT/etc/hostname"
printf '/dev/vda / ext4 rw,errors=remount-ro 0 1\n' > "$ROOT/etc/fstab"
install -d -m 0700 "$ROOT/root/.ssh"
install -m 0600 "$SSH_KEY" "$ROOT/root/.ssh/authorized_keys"
rm -f "$ROOT"/etc/ssh/ssh_host_*
ssh-keygen -q -t ed25519 -N '' -C fleet-systemd-guest -f "$ROOT/etc/ssh/ssh_host_ed25519_key"
cp "$ROOT/etc/ssh/ssh_host_ed25519_key.pub" "$OUT/ssh_host_ed25519_key.pub"
printf 'HostKey /etc/ssh/ssh_host_ed25519_key\nPermitRootLogin prohibit-password\nPasswordAuthentication no\nUseDNS no\n' \
	> "$ROOT/etc/ssh/sshd_config.d/fleet-test.conf"
printf '[Match]\nName=en* eth*\n[Network]\nDHCP=ipv4\n' > "$ROOT/etc/systemd/network/10-dhcp.network"
: > "$ROOT/etc/machine-id"	# a fresh one at first boot
# The socket group of docs/operations.md: fleetctl as a member, not root, is what operators do.
chroot "$ROOT" groupadd --system fleet 2>/dev/null || true

rm -f "$OUT/root.img"
mke2fs -q -F -t ext4 -L fleet-sd-root -d "$ROOT" -E root_owner=0:0 "$OUT/root.img" "${SIZE_MIB}M" ||
	die "mke2fs -d failed (is the image size, ${SIZE_MIB} MiB, too small?)"
echo "$PROG: ok: $OUT/root.img (systemd $(dpkg-query -W -f='${Version}' --admindir="$ROOT/var/lib/dpkg" systemd), fleet from $BUILD)"
