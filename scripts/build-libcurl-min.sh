#!/bin/bash
# build-libcurl-min.sh: build the libcurl fleetctl links, offline, from the
# Debian source package scripts/deps.sh fetched (the installed
# libcurl4-openssl-dev's version, Debian's patches applied): HTTP/1.1 over a
# Unix socket and nothing else, as a static library.
#
# Why: fleetctl only ever speaks HTTP to fleetd's Unix socket, and Debian's
# libcurl brings 33 shared libraries (TLS, LDAP, RTMP, GSSAPI, IDN, HTTP/2,
# brotli, zstd...) whose loading and relocation cost every fleetctl call
# about 9 ms here, most of a user agent's exec (docs/benchmarks.md, issue
# #16). Built this way fleetctl starts in about the time /bin/true does.
#
#   scripts/build-libcurl-min.sh --out DIR [--source-cache DIR] [--jobs N]
#   scripts/build-libcurl-min.sh --check [--source-cache DIR]
#
# Output in DIR: libcurl.a and libcurl-min.info (key=value: debian_version,
# sha256, inputs_sha256). Does nothing when DIR already holds a build of the
# same inputs (the .dsc, this script, the compiler, Debian's build flags).
# Concurrent runs on one DIR take turns (flock). A build is also kept in
# $FLEET_LIBCURL_CACHE (default /var/cache/fleet/libcurl-min/INPUTS_SHA256/,
# where writable): every build tree of the host (the tests make a few) copies
# it from there instead of compiling curl again. --check: exit 0 when the
# source of the installed version is in the cache (configure asks; without
# it fleetctl links the system's libcurl). Source cache: --source-cache, else
# $FLEET_CURL_SRC, else /var/cache/fleet/curl-src.
set -euo pipefail

PROG=build-libcurl-min.sh
CACHE=${FLEET_CURL_SRC:-/var/cache/fleet/curl-src}
BUILT=${FLEET_LIBCURL_CACHE:-/var/cache/fleet/libcurl-min}
OUT=
JOBS=2
CHECK=0

die() { echo "$PROG: error: $*" >&2; exit 1; }
usage() { echo "usage: $PROG --out DIR [--source-cache DIR] [--jobs N] | --check [--source-cache DIR]" >&2; exit 2; }

while [ $# -gt 0 ]; do
	case "$1" in
	--out) OUT=${2:?}; shift 2 ;;
	--source-cache) CACHE=${2:?}; shift 2 ;;
	--jobs) JOBS=${2:?}; shift 2 ;;
	--check) CHECK=1; shift ;;
	-h|--help) usage ;;
	*) echo "$PROG: unknown argument: $1" >&2; usage ;;
	esac
done
case "$JOBS" in ''|*[!0-9]*) die "--jobs wants a number" ;; esac

# The headers fleetctl compiles against are the installed package's: the
# library must come from the same source version.
VER=$(dpkg-query -W -f '${source:Version}' libcurl4-openssl-dev 2>/dev/null) ||
	die "libcurl4-openssl-dev is not installed; run scripts/deps.sh as root"
DSC=$(ls "$CACHE/$VER"/*.dsc 2>/dev/null | head -1) || true
if [ $CHECK = 1 ]; then
	[ -n "$DSC" ] && command -v dpkg-source >/dev/null 2>&1
	exit
fi
[ -n "$OUT" ] || usage
[ -n "$DSC" ] || die "the Debian source of curl $VER (the installed libcurl4-openssl-dev) is not in $CACHE/$VER;" \
	"run scripts/deps.sh as root (it fetches it with apt), or configure --without-minimal-libcurl"

need() { command -v "$1" >/dev/null 2>&1 || die "'$1' not found; install the Debian package '$2' (scripts/deps.sh does)"; }
need dpkg-source dpkg-dev
need dpkg-buildflags dpkg-dev
need gcc gcc
need make make
need flock util-linux
need sha256sum coreutils

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
INPUTS=$( {
	sha256sum "$DSC" "$0" | sed 's| .*/| |'
	gcc -dumpfullversion
	cd / && DEB_BUILD_MAINT_OPTIONS=hardening=+all dpkg-buildflags --export=sh
} | sha256sum | cut -d' ' -f1)
fresh() {	# fresh DIR: DIR holds a whole build of these inputs
	[ -f "$1/libcurl.a" ] && [ -f "$1/libcurl-min.info" ] &&
		grep -qx "inputs_sha256=$INPUTS" "$1/libcurl-min.info" &&
		grep -qx "sha256=$(sha256sum "$1/libcurl.a" | cut -d' ' -f1)" "$1/libcurl-min.info"
}
install_into() {	# install_into DIR FROM: the library first, the info last (a half-written DIR is never fresh)
	cp "$2/libcurl.a" "$1/libcurl.a.tmp" && mv "$1/libcurl.a.tmp" "$1/libcurl.a" &&
		cp "$2/libcurl-min.info" "$1/libcurl-min.info.tmp" && mv "$1/libcurl-min.info.tmp" "$1/libcurl-min.info"
}

exec 9>"$OUT/.lock"
flock 9
if fresh "$OUT"; then
	exit 0
fi
# Root-owned and only root writes it (so no other user can plant a library there).
if [ "$(stat -c %u "$BUILT" 2>/dev/null)" = 0 ] && fresh "$BUILT/$INPUTS" && install_into "$OUT" "$BUILT/$INPUTS"; then
	echo "libcurl-min: $OUT/libcurl.a (curl $VER, HTTP only, from $BUILT)"
	exit 0
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/fleet-libcurl.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
trap 'exit 130' INT TERM
LOG=$WORK/build.log
run() {	# run DESCRIPTION CMD...: output to the log, shown when it fails
	"${@:2}" >>"$LOG" 2>&1 || { tail -40 "$LOG" >&2; die "$1 failed"; }
}

echo "libcurl-min: building an HTTP-only static libcurl from $DSC (about a minute)"
# Unpacks the upstream tarball and applies Debian's own patches (security
# fixes included); checks the files against the .dsc's checksums.
run "dpkg-source -x" dpkg-source -x "$DSC" "$WORK/src"
UPSTREAM=${VER%%-*}
grep -q "^#define LIBCURL_VERSION \"$UPSTREAM\"" "$WORK/src/include/curl/curlver.h" ||
	die "the source in $DSC is not curl $UPSTREAM"

mkdir "$WORK/build"
export DEB_BUILD_MAINT_OPTIONS=hardening=+all
(
	cd "$WORK/build"
	CFLAGS="$(dpkg-buildflags --get CFLAGS) -ffile-prefix-map=$WORK/src/="
	CPPFLAGS=$(dpkg-buildflags --get CPPFLAGS)
	# HTTP over a Unix socket: no TLS or other library, no other protocol, no
	# proxy (fleetctl's requests never go through one), no auth, cookies,
	# netrc, HSTS or alt-svc (nothing of them applies to fleetd's socket).
	run configure "$WORK/src/configure" --disable-shared --enable-static --with-pic \
		--disable-dependency-tracking --disable-silent-rules \
		--without-ssl --without-zlib --without-brotli --without-zstd --without-libpsl \
		--without-libidn2 --without-nghttp2 --without-libssh2 --without-libssh --without-librtmp \
		--without-gssapi --without-libgsasl --without-hyper --without-ngtcp2 --without-nghttp3 \
		--without-quiche --without-msh3 --without-ca-bundle --without-ca-path \
		--disable-ftp --disable-file --disable-ldap --disable-ldaps --disable-rtsp --disable-dict \
		--disable-telnet --disable-tftp --disable-pop3 --disable-imap --disable-smb --disable-smtp \
		--disable-gopher --disable-mqtt --disable-manual --disable-ntlm --disable-ntlm-wb \
		--disable-tls-srp --enable-unix-sockets --disable-cookies --disable-alt-svc --disable-hsts \
		--disable-doh --disable-netrc --disable-progress-meter --disable-proxy --disable-ipv6 \
		--disable-ares --disable-threaded-resolver --disable-websockets --disable-mime \
		--disable-socketpair --disable-headers-api --disable-basic-auth --disable-bearer-auth \
		--disable-digest-auth --disable-kerberos-auth --disable-negotiate-auth --disable-aws \
		--disable-crypto-auth --disable-libcurl-option \
		CC=gcc CFLAGS="$CFLAGS" CPPFLAGS="$CPPFLAGS"
	run make make -j"$JOBS" -C lib libcurl.la
)
LIB=$WORK/build/lib/.libs/libcurl.a
[ -s "$LIB" ] || die "the build made no $LIB"
{
	echo "debian_version=$VER"
	echo "sha256=$(sha256sum "$LIB" | cut -d' ' -f1)"
	echo "inputs_sha256=$INPUTS"
} > "$WORK/libcurl-min.info"
cp "$LIB" "$WORK/libcurl.a"
install_into "$OUT" "$WORK" || die "cannot write $OUT"
# Kept for the host's other build trees, where root may write (a new directory renamed into place).
if [ "$(id -u)" = 0 ] && mkdir -p "$BUILT" 2>/dev/null && [ "$(stat -c %u "$BUILT")" = 0 ] && [ ! -e "$BUILT/$INPUTS" ]; then
	keep=$(mktemp -d "$BUILT/.new.XXXXXX") && chmod 0755 "$keep" && install_into "$keep" "$WORK" &&
		mv -T "$keep" "$BUILT/$INPUTS" 2>/dev/null || rm -rf "${keep:-/nonexistent}"
fi
echo "libcurl-min: $OUT/libcurl.a (curl $VER, HTTP only)"
