#!/bin/bash
# build-dropbear.sh: build fleet's patched dropbear server, offline, from the
# Debian source package scripts/deps.sh fetched (the installed dropbear-bin's
# version) plus fleet's patches in images/patches/. Why: images/README.md.
#
#   images/build-dropbear.sh --out DIR [--source-cache DIR] [--jobs N]
#
# Output in DIR: dropbear (the server only, stripped) and dropbear.info
# (key=value: debian_version, fleet_patches, sha256, inputs_sha256).
# Does nothing when DIR already holds a build of the same inputs (the .dsc,
# the patches and this script, by sha256). Concurrent runs on one DIR
# take turns (flock). Source cache: --source-cache, else $FLEET_DROPBEAR_SRC,
# else /var/cache/fleet/dropbear-src (images/fetch-dropbear-source.sh).
set -euo pipefail

PROG=build-dropbear.sh
HERE=$(cd "$(dirname "$0")" && pwd)
CACHE=${FLEET_DROPBEAR_SRC:-/var/cache/fleet/dropbear-src}
OUT=
JOBS=2

die() { echo "$PROG: error: $*" >&2; exit 1; }
usage() { echo "usage: $PROG --out DIR [--source-cache DIR] [--jobs N]" >&2; exit 2; }

while [ $# -gt 0 ]; do
	case "$1" in
	--out) OUT=${2:?}; shift 2 ;;
	--source-cache) CACHE=${2:?}; shift 2 ;;
	--jobs) JOBS=${2:?}; shift 2 ;;
	-h|--help) usage ;;
	*) echo "$PROG: unknown argument: $1" >&2; usage ;;
	esac
done
[ -n "$OUT" ] || usage
case "$JOBS" in ''|*[!0-9]*) die "--jobs wants a number" ;; esac

need() { command -v "$1" >/dev/null 2>&1 || die "'$1' not found; install the Debian package '$2' (scripts/deps.sh does)"; }
need dpkg-query dpkg
need dpkg-source dpkg-dev
need dpkg-buildflags dpkg-dev
need patch patch
need gcc gcc
need make make
need strip binutils
need flock util-linux
need sha256sum coreutils

VER=$(dpkg-query -W -f '${source:Version}' dropbear-bin 2>/dev/null) ||
	die "dropbear-bin is not installed; run scripts/deps.sh as root"
DSC=$(ls "$CACHE/$VER"/*.dsc 2>/dev/null | head -1) || true
[ -n "$DSC" ] || die "the Debian source of dropbear $VER (the installed dropbear-bin) is not in $CACHE/$VER;" \
	"run scripts/deps.sh as root (it fetches it with apt); fleet does not use the stock dropbear (images/README.md)"
for h in tomcrypt.h tommath.h zlib.h; do
	[ -e "/usr/include/$h" ] || die "/usr/include/$h missing; run scripts/deps.sh as root (libtomcrypt-dev libtommath-dev zlib1g-dev)"
done
PATCHES=()
for p in "$HERE"/patches/dropbear-*.patch; do [ -e "$p" ] && PATCHES+=("$p"); done

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
# Everything the binary is made from, by content (mtimes change on checkout),
# plus the compiler and Debian's build flags (from a fixed directory: they
# name the current one).
INPUTS=$( {
	sha256sum "$DSC" "$0" "${PATCHES[@]}" | sed 's| .*/| |'
	gcc -dumpfullversion
	cd / && DEB_BUILD_MAINT_OPTIONS=hardening=+all dpkg-buildflags --export=sh
} | sha256sum | cut -d' ' -f1)
fresh() {
	[ -x "$OUT/dropbear" ] && [ -f "$OUT/dropbear.info" ] &&
		grep -qx "inputs_sha256=$INPUTS" "$OUT/dropbear.info" &&
		grep -qx "sha256=$(sha256sum "$OUT/dropbear" | cut -d' ' -f1)" "$OUT/dropbear.info"
}

exec 9>"$OUT/.lock"
flock 9
if fresh; then
	echo "dropbear: up to date: $OUT/dropbear ($VER + fleet patches)"
	exit 0
fi

START=$(date +%s.%N)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fleet-dropbear.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
trap 'exit 130' INT TERM
LOG=$WORK/build.log
run() {	# run DESCRIPTION CMD...: output to the log, shown when it fails
	"${@:2}" >>"$LOG" 2>&1 || { tail -40 "$LOG" >&2; die "$1 failed"; }
}

echo "dropbear: building $VER + ${#PATCHES[@]} fleet patch(es) from $DSC"
# Unpacks the upstream tarball and applies Debian's own patches (3.0 quilt);
# checks the files against the .dsc's checksums.
run "dpkg-source -x" dpkg-source -x "$DSC" "$WORK/src"
for p in "${PATCHES[@]}"; do
	echo "dropbear:   applying ${p##*/}"
	run "patch ${p##*/}" patch -d "$WORK/src" -p1 --forward --batch --no-backup-if-mismatch -i "$p"
done

# Out of the source tree, configured as debian/rules does: hardening=+all
# build flags, -fPIE -pie, the system libtomcrypt/libtommath, Debian's paths,
# and debian/localoptions.h (sftp-server path, default PATHs) in the build dir.
mkdir "$WORK/build"
cp "$WORK/src/debian/localoptions.h" "$WORK/build/"
export DEB_BUILD_MAINT_OPTIONS=hardening=+all
(
	cd "$WORK/build"
	# The prefix map makes __FILE__ "common-channel.c", as in Debian's own
	# in-tree build (assertion messages), and the binary reproducible.
	CFLAGS="$(dpkg-buildflags --get CFLAGS) -ffile-prefix-map=$WORK/src/="
	CPPFLAGS=$(dpkg-buildflags --get CPPFLAGS)
	LDFLAGS="$(dpkg-buildflags --get LDFLAGS) -fPIE -pie"
	run configure "$WORK/src/configure" --disable-bundled-libtom --prefix=/usr --sysconfdir=/etc \
		--localstatedir=/var --runstatedir=/run --disable-silent-rules --disable-dependency-tracking \
		CC=gcc CFLAGS="$CFLAGS" CPPFLAGS="$CPPFLAGS" LDFLAGS="$LDFLAGS"
	# Only the server: not dbclient, dropbearkey or dropbearconvert.
	run make make -j"$JOBS" PROGRAMS=dropbear dropbear
)
BIN=$WORK/build/dropbear
strip --remove-section=.comment --remove-section=.note --strip-unneeded "$BIN"
"$BIN" -V 2>&1 | grep -q "^Dropbear v${VER%%-*}" || die "the built dropbear does not say it is v${VER%%-*}: $("$BIN" -V 2>&1)"

names=
for p in "${PATCHES[@]}"; do names="$names${names:+ }${p##*/}"; done
{
	echo "debian_version=$VER"
	echo "fleet_patches=$names"
	echo "sha256=$(sha256sum "$BIN" | cut -d' ' -f1)"
	echo "inputs_sha256=$INPUTS"
} > "$WORK/dropbear.info"
# Binary first, info last: a matching info means a complete build.
rm -f "$OUT/dropbear.info"
install -m 0755 "$BIN" "$OUT/dropbear.tmp"
mv -f "$OUT/dropbear.tmp" "$OUT/dropbear"
mv -f "$WORK/dropbear.info" "$OUT/dropbear.info"
chmod 0644 "$OUT/dropbear.info"
fresh || die "the build in $OUT does not check out"
echo "dropbear: built $OUT/dropbear in $(awk -v a="$START" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"
