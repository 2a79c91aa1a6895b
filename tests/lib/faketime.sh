# libfaketime for the clock-jump tests: source after common.sh. Sets
# FAKETIME_LIB, or skips the file: not installed, or fleetd an ASan build
# (ASan's runtime must be the first library loaded; a preloaded libfaketime
# comes before it and fleetd refuses to start: "ASan runtime does not come first").
FAKETIME_LIB=
for l in /usr/lib/*/faketime/libfaketime.so.1 /usr/lib/faketime/libfaketime.so.1; do
	[ -r "$l" ] && FAKETIME_LIB=$l && break
done
[ -n "$FAKETIME_LIB" ] || skip_all "libfaketime not installed (Debian package libfaketime; scripts/deps.sh)"
! ldd "$FLEETD" 2>/dev/null | grep -q libasan ||
	skip_all "fleetd is an ASan build: libfaketime cannot be preloaded ahead of ASan's runtime"
