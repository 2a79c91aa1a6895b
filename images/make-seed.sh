#!/bin/bash
# make-seed.sh: build a guest's seed disk (/dev/vdb), the small ext2 image
# that carries one agent's identity into the guest. The guest's /sbin/init
# copies it into place at every boot. See images/README.md.
#
#   images/make-seed.sh --out FILE --host-key DROPBEAR_KEY --authorized-keys FILE
#                       --hostname NAME [--root-authorized-keys FILE]
set -euo pipefail

PROG=make-seed.sh
OUT= HOSTKEY= AUTH= ROOTAUTH= NAME=

die() { echo "$PROG: error: $*" >&2; exit 1; }
usage() {
    echo "usage: $PROG --out FILE --host-key F --authorized-keys F --hostname NAME [--root-authorized-keys F]" >&2
    exit 2
}
while [ $# -gt 0 ]; do
    case "$1" in
    --out) OUT=${2:?}; shift 2 ;;
    --host-key) HOSTKEY=${2:?}; shift 2 ;;
    --authorized-keys) AUTH=${2:?}; shift 2 ;;
    --root-authorized-keys) ROOTAUTH=${2:?}; shift 2 ;;
    --hostname) NAME=${2:?}; shift 2 ;;
    -h|--help) usage ;;
    *) echo "$PROG: unknown argument: $1" >&2; usage ;;
    esac
done
[ -n "$OUT" ] && [ -n "$HOSTKEY" ] && [ -n "$AUTH" ] && [ -n "$NAME" ] || usage
command -v mke2fs >/dev/null 2>&1 || die "'mke2fs' not found; install the Debian package 'e2fsprogs'"
[ -s "$HOSTKEY" ] || die "--host-key $HOSTKEY: missing or empty (make it with: dropbearkey -t ed25519 -f FILE)"
[ -r "$AUTH" ] || die "--authorized-keys $AUTH: not readable"
[ -z "$ROOTAUTH" ] || [ -r "$ROOTAUTH" ] || die "--root-authorized-keys $ROOTAUTH: not readable"
# A hostname label set: letters, digits, '-' and '.', at most 63 characters.
[[ "$NAME" =~ ^[A-Za-z0-9][A-Za-z0-9.-]{0,62}$ ]] || die "--hostname '$NAME' is not a valid host name"

umask 077
STAGE=$(mktemp -d "${TMPDIR:-/tmp}/fleet-seed.XXXXXX")
trap 'rm -rf "$STAGE"' EXIT
cp "$HOSTKEY" "$STAGE/dropbear_ed25519_host_key"
cp "$AUTH" "$STAGE/authorized_keys_agent"
if [ -n "$ROOTAUTH" ]; then cp "$ROOTAUTH" "$STAGE/authorized_keys_root"; else : > "$STAGE/authorized_keys_root"; fi
echo "$NAME" > "$STAGE/hostname"

# ext2: no journal needed for a disk the guest mounts read-only; the guest's
# ext4 driver reads it. 2 MiB leaves room for long authorized_keys files.
rm -f "$OUT.tmp"
truncate -s 2M "$OUT.tmp"
mke2fs -q -F -t ext2 -L fleet-seed -m 0 -E root_owner=0:0 -d "$STAGE" "$OUT.tmp" ||
    die "mke2fs failed for $OUT"
mv -f "$OUT.tmp" "$OUT"
