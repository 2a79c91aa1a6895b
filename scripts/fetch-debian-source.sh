#!/bin/bash
# fetch-debian-source.sh: download the Debian source package of an installed
# binary package into one of fleet's caches, so that fleet can build from it
# offline: dropbear-bin's for fleet's patched dropbear (images/build-dropbear.sh,
# images/README.md), libcurl4-openssl-dev's for fleetctl's HTTP-only libcurl
# (scripts/build-libcurl-min.sh).
#
#   scripts/fetch-debian-source.sh --package BINARY_PACKAGE --cache DIR
#
# Called by scripts/deps.sh, the one step of fleet that downloads. Uses apt
# itself, with a private sources list (deb-src lines for the host's Debian
# release: CODENAME, CODENAME-updates, CODENAME-security) and private state
# and cache dirs: the host's apt configuration, lists and caches are not
# touched. apt checks the Release files' signatures with the Debian archive
# keyring and every downloaded file against the signed Sources index.
#
# Cache: one directory per version: DIR/VERSION/ holds the .dsc and the
# files it names (VERSION: the installed package's source version). A
# version already there is not fetched again.
# Env: FLEET_DEBIAN_MIRROR (default http://deb.debian.org/debian),
# FLEET_DEBIAN_SECURITY_MIRROR (default http://deb.debian.org/debian-security).
set -euo pipefail

PROG=fetch-debian-source.sh
BIN=
CACHE=
MIRROR=${FLEET_DEBIAN_MIRROR:-http://deb.debian.org/debian}
SECURITY_MIRROR=${FLEET_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg

die() { echo "$PROG: error: $*" >&2; exit 1; }

while [ $# -gt 0 ]; do
	case "$1" in
	--package) BIN=${2:?}; shift 2 ;;
	--cache) CACHE=${2:?}; shift 2 ;;
	*) echo "usage: $PROG --package BINARY_PACKAGE --cache DIR" >&2; exit 2 ;;
	esac
done
[ -n "$BIN" ] && [ -n "$CACHE" ] || { echo "usage: $PROG --package BINARY_PACKAGE --cache DIR" >&2; exit 2; }

command -v apt-get >/dev/null || die "apt-get not found (this needs Debian)"
src=$(dpkg-query -W -f '${source:Package} ${source:Version}' "$BIN" 2>/dev/null) ||
	die "$BIN is not installed (scripts/deps.sh installs it)"
PKG=${src% *}
VER=${src#* }
DEST=$CACHE/$VER
if ls "$DEST"/*.dsc >/dev/null 2>&1; then
	echo "deps: $PKG source $VER already in $DEST"
	exit 0
fi
[ -r "$KEYRING" ] || die "$KEYRING missing; install the Debian package 'debian-archive-keyring'"
CODENAME=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
[ -n "$CODENAME" ] || die "no VERSION_CODENAME in /etc/os-release"

mkdir -p "$CACHE"
# Work next to the cache, so the final rename is atomic: a present
# DIR/VERSION is always complete.
WORK=$(mktemp -d "$CACHE/.fetch.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
chmod 0755 "$WORK"	# _apt must reach lists/partial and dl
mkdir -p "$WORK/lists/partial" "$WORK/cache" "$WORK/dl"
cat > "$WORK/sources.list" <<EOF
deb-src [signed-by=$KEYRING] $MIRROR $CODENAME main
deb-src [signed-by=$KEYRING] $MIRROR $CODENAME-updates main
deb-src [signed-by=$KEYRING] $SECURITY_MIRROR $CODENAME-security main
EOF
APT=(apt-get -q
	-o "Dir::Etc::SourceList=$WORK/sources.list"
	-o Dir::Etc::SourceParts=/nonexistent
	-o "Dir::State::Lists=$WORK/lists"
	-o "Dir::Cache=$WORK/cache")
# apt downloads as the unprivileged _apt user when it can write the target dir.
if getent passwd _apt >/dev/null; then
	chown _apt "$WORK/lists/partial" "$WORK/dl"
fi

echo "deps: fetching Debian's source of $PKG $VER (the installed $BIN) into $DEST"
"${APT[@]}" update >"$WORK/update.log" 2>&1 || {
	cat "$WORK/update.log" >&2
	die "apt-get update of the private deb-src list failed"
}
# Any W:/E: (a Release file that fails its signature check, an index that
# could not be fetched) is fatal here: nothing unverified gets into the cache.
if grep -E '^(W|E):' "$WORK/update.log" >&2; then
	die "apt-get update of the private deb-src list reported the problems above"
fi
(cd "$WORK/dl" && "${APT[@]}" source --download-only "$PKG=$VER") >"$WORK/source.log" 2>&1 || {
	cat "$WORK/source.log" >&2
	if grep -q "Can not find version\|Unable to find a source package" "$WORK/source.log"; then
		die "the Debian archive no longer has $PKG $VER (the installed $BIN); upgrade it" \
			"(apt-get install --only-upgrade $BIN) and run scripts/deps.sh again"
	fi
	die "apt-get source $PKG=$VER failed"
}
dsc=$(ls "$WORK"/dl/*.dsc 2>/dev/null | head -1)
[ -n "$dsc" ] && grep -qx "Version: $VER" "$dsc" || die "apt-get source did not download ${PKG}_$VER.dsc"
# apt has checked every file against the signed index; make sure all the
# .dsc names are here (dpkg-source -x checks their checksums again).
for f in $(sed -n '/^Files:/,/^[^ ]/s/^ [0-9a-f]\{32\} [0-9]* //p' "$dsc"); do
	[ -s "$WORK/dl/$f" ] || die "$f (named by $(basename "$dsc")) was not downloaded"
done
chown -R 0:0 "$WORK/dl" 2>/dev/null || true
chmod 0755 "$WORK/dl"
chmod 0644 "$WORK"/dl/*
rm -rf "$DEST"
mv "$WORK/dl" "$DEST"
echo "deps: $PKG source $VER: $(cd "$DEST" && echo *)"
