#!/bin/bash
# build-systemd-guest.sh: a Debian 12 guest with systemd as PID 1 and the
# unified cgroup hierarchy, with fleet installed (`make install`) and its unit
# enabled: the host fleet is meant for, for tests/vm/systemd-host.sh (issue #14:
# this machine kind has no systemd as PID 1 and only cgroup v1).
#
#   images/build-systemd-guest.sh --build BUILD_DIR --ssh-key PUBKEY --out DIR
#
# The root filesystem comes from Debian's packages through debootstrap
# (systemd, openssh-server, and the libraries fleet's programs link, found
# with ldd and dpkg -S), cached as a tarball under $FLEET_CACHE
# (default /var/cache/fleet)/systemd-guest, keyed by the package list: only the
# first build downloads anything. Every build then unpacks it, installs fleet
# from BUILD_DIR with `make install DESTDIR=...` (the same binaries the suite
# tests), enables fleetd.service, and writes:
#
#   DIR/root.img          ext4 root filesystem (raw; boots with root=/dev/vda)
#   DIR/vmlinuz           the host's Debian kernel (as images/build-image.sh)
#   DIR/ssh_host_ed25519_key.pub  the guest's host key, to pin (known_hosts)
#
# The initramfs is fleet's own (BUILD_DIR/images/out/initramfs.img: virtio
# modules, then switch_root to /sbin/init, here systemd). The guest gets DHCP
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
[ "$(id -u)" = 0 ] || die "run as root (debootstrap, make install into the image, file ownership)"
BUILD=$(cd "$BUILD" && pwd)
[ -x "$BUILD/daemon/fleetd" ] || die "no fleetd in $BUILD: build fleet first"
[ -r "$SSH_KEY" ] || die "--ssh-key $SSH_KEY: not readable"
for c in debootstrap:debootstrap mke2fs:e2fsprogs dpkg-query:dpkg ssh-keygen:openssh-client depmod:kmod; do
	command -v "${c%%:*}" >/dev/null || die "'${c%%:*}' not found; install the Debian package '${c#*:}'"
done

# ---------------------------------------------------------------- packages
# What a fleet host needs at run time (useradd, nft, ip, mke2fs for the
# memory stores, ...) and what the test drives it with (sshd), plus the
# Debian packages of every library fleet's programs link.
# libarchive13: agentd loads it at run time (memory export/import), so ldd does not name it.
PKGS="systemd systemd-sysv udev kmod dbus iproute2 nftables passwd util-linux procps e2fsprogs
openssh-server ca-certificates libarchive13"
libs=$(for b in "$BUILD"/daemon/fleetd "$BUILD"/daemon/fleet-hooksd "$BUILD"/daemon/fleet-init \
	"$BUILD"/ctl/fleetctl "$BUILD"/agentd/agentd; do
	# A static program (agentd, fleet-init) has none: ldd fails, nothing to add.
	[ -x "$b" ] && { ldd "$b" 2>/dev/null || true; } | awk '/=> \//{print $3}'
done | sort -u)
# One dpkg-query for all (it is slow per call), by file name: merged /usr
# means dpkg may know a library under /lib or /usr/lib.
pats=$(for l in $libs; do r=$(readlink -f "$l"); d=${r%/*}; echo "*/${d##*/}/${r##*/}"; done | sort -u)
# shellcheck disable=SC2086
owners=$(LC_ALL=C dpkg-query -S $pats 2>&1) ||
	die "a library fleet links belongs to no Debian package: $(grep -v '^[a-z0-9.+-]*:' <<<"$owners")"
PKGS="$PKGS $(grep -v '^diversion ' <<<"$owners" | sed -n 's/^\([^:, ]*\)[:,].*/\1/p')"
PKGS=$(printf '%s\n' $PKGS | sort -u | tr '\n' ' ')
KEY=$( (echo "v1 bookworm minbase"; echo "$PKGS") | sha256sum | cut -c1-16)
TARBALL=$CACHE/rootfs-$KEY.tar

# ---------------------------------------------------------------- rootfs (cached)
mirror() {	# the host's own Debian mirror (Debian's registry is the one reachable)
	local m
	m=$(awk '/^URIs:/ && /debian\/?$/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
	[ -n "$m" ] || m=$(awk '$1 == "deb" && $3 == "bookworm" {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
	echo "${m:-http://deb.debian.org/debian}"
}
if [ ! -s "$TARBALL" ]; then
	mkdir -p "$CACHE"
	exec 9>"$CACHE/.lock"
	flock 9
	if [ ! -s "$TARBALL" ]; then
		tmp=$(mktemp -d "$CACHE/debootstrap.XXXXXX")
		echo "$PROG: debootstrap bookworm with: $PKGS (once; cached as $TARBALL)"
		if ! debootstrap --variant=minbase --include="$(echo $PKGS | tr ' ' ,)" bookworm "$tmp/root" "$(mirror)" \
			>"$tmp/debootstrap.log" 2>&1; then
			tail -20 "$tmp/debootstrap.log" >&2
			umount -R "$tmp/root/proc" "$tmp/root/sys" 2>/dev/null || true
			rm -rf --one-file-system "$tmp"
			die "debootstrap failed (log above)"
		fi
		rm -rf "$tmp/root/var/cache/apt/archives/"*.deb "$tmp/root/var/lib/apt/lists/"*
		tar -C "$tmp/root" --numeric-owner -cf "$tmp/rootfs.tar" .
		mv "$tmp/rootfs.tar" "$TARBALL"
		rm -rf --one-file-system "$tmp"
	fi
	exec 9>&-
fi

# ---------------------------------------------------------------- this build
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
ROOT=$(mktemp -d "$OUT/root.XXXXXX")
trap 'rm -rf --one-file-system "$ROOT"' EXIT
tar -C "$ROOT" --numeric-owner -xf "$TARBALL"

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
