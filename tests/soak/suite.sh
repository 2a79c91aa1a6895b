#!/bin/bash
# make check's slice of the soak (tests/soak/soak.sh): one minute under
# AddressSanitizer when this build is one (configure --enable-asan), else one
# minute of the plain build with fleetd under valgrind (slower: fewer rounds).
# SOAK_MINUTES=N in the environment runs longer.
: "${FLEETD:?run through make check (FLEETD unset)}"
if ldd "$FLEETD" 2>/dev/null | grep -q libasan; then
	exec bash "$FLEET_SRCDIR/tests/soak/soak.sh" --minutes "${SOAK_MINUTES:-1}" --asan
else
	exec bash "$FLEET_SRCDIR/tests/soak/soak.sh" --minutes "${SOAK_MINUTES:-1}" --valgrind
fi
