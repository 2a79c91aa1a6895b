#!/bin/bash
# fetch-dropbear-source.sh: download the Debian source package of the
# installed dropbear-bin into fleet's cache, so that images/build-dropbear.sh
# can build fleet's patched dropbear offline (see images/README.md). The
# download itself is scripts/fetch-debian-source.sh's (apt, a private deb-src
# list, checked with the Debian archive keyring).
#
#   images/fetch-dropbear-source.sh [--cache DIR]
#
# Cache: DIR (default $FLEET_DROPBEAR_SRC, else /var/cache/fleet/dropbear-src),
# one directory per version: DIR/VERSION/ holds the .dsc and the files it
# names. A version already there is not fetched again.
set -euo pipefail

CACHE=${FLEET_DROPBEAR_SRC:-/var/cache/fleet/dropbear-src}
while [ $# -gt 0 ]; do
	case "$1" in
	--cache) CACHE=${2:?}; shift 2 ;;
	*) echo "usage: fetch-dropbear-source.sh [--cache DIR]" >&2; exit 2 ;;
	esac
done
exec bash "$(dirname "$0")/../scripts/fetch-debian-source.sh" --package dropbear-bin --cache "$CACHE"
