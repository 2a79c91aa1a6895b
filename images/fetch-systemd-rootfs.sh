#!/bin/bash
# fetch-systemd-rootfs.sh: debootstrap the root filesystem of the systemd host
# guest (images/build-systemd-guest.sh, tests/vm/systemd-host.sh) into fleet's
# cache, once: Debian 12 (bookworm) minbase with images/systemd-guest.packages,
# as a tarball /var/cache/fleet/systemd-guest/rootfs-KEY.tar (FLEET_CACHE
# overrides /var/cache/fleet), KEY a hash of the package list; there already:
# nothing to do. The test suite's one download besides scripts/deps.sh's:
# tests/run.sh starts it in the background before building, so its 5-8 minutes
# overlap the build and the unit tests; the guest's build waits for it (flock).
# Env: FLEET_DEBIAN_MIRROR (default: the host's Debian mirror, else
# http://deb.debian.org/debian).
#   images/fetch-systemd-rootfs.sh [--print-path]
set -euo pipefail

PROG=fetch-systemd-rootfs.sh
HERE=$(cd "$(dirname "$0")" && pwd)
CACHE=${FLEET_CACHE:-/var/cache/fleet}/systemd-guest
die() { echo "$PROG: error: $*" >&2; exit 1; }

PKGS=$(sed 's/#.*//' "$HERE/systemd-guest.packages" | tr -s ' \t\n' '\n' | grep . | sort -u | tr '\n' ' ')
KEY=$( (echo "v1 bookworm minbase"; echo "$PKGS") | sha256sum | cut -c1-16)
TARBALL=$CACHE/rootfs-$KEY.tar
if [ "${1:-}" = --print-path ]; then
	echo "$TARBALL"
	exit 0
fi
[ "$(id -u)" = 0 ] || die "run as root (debootstrap)"
command -v debootstrap >/dev/null || die "debootstrap not found; install the Debian package 'debootstrap'"
mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9
if [ -s "$TARBALL" ]; then
	echo "$PROG: up to date: $TARBALL"
	exit 0
fi
mirror=${FLEET_DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
	mirror=$(awk '/^URIs:/ && /debian\/?$/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
	[ -n "$mirror" ] || mirror=$(awk '$1 == "deb" && $3 == "bookworm" {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
	mirror=${mirror:-http://deb.debian.org/debian}
fi
tmp=$(mktemp -d "$CACHE/debootstrap.XXXXXX")
trap 'umount -R "$tmp/root/proc" "$tmp/root/sys" 2>/dev/null || true; rm -rf --one-file-system "$tmp"' EXIT
echo "$PROG: debootstrap bookworm from $mirror with: $PKGS"
if ! debootstrap --variant=minbase --include="$(echo $PKGS | tr ' ' ,)" bookworm "$tmp/root" "$mirror" \
	>"$tmp/debootstrap.log" 2>&1; then
	tail -20 "$tmp/debootstrap.log" >&2
	die "debootstrap failed (log above)"
fi
rm -rf "$tmp/root/var/cache/apt/archives/"*.deb "$tmp/root/var/lib/apt/lists/"*
tar -C "$tmp/root" --numeric-owner -cf "$tmp/rootfs.tar" .
mv "$tmp/rootfs.tar" "$TARBALL"
echo "$PROG: ok: $TARBALL"
