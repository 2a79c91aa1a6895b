#!/bin/bash
# make install puts fleetd, fleetctl, agentd, fleet-hooksd, fleet-init, the systemd unit and the sample
# fleetd.conf in place.
. "$FLEET_SRCDIR/tests/lib/common.sh"

dest=$TEST_TMP/root
make -C "$FLEET_BUILDDIR" install DESTDIR="$dest" >"$TEST_TMP/install.log" 2>&1
ok $? "make install DESTDIR=... succeeds"
prefix=$(sed -n 's/^prefix = //p' "$FLEET_BUILDDIR/Makefile")
package=$(sed -n 's/^PACKAGE = //p' "$FLEET_BUILDDIR/Makefile")
# fleet-hooksd (the webhook listener) and fleet-init (PID 1 of a user sandbox), where fleetd looks
# when they are not beside it (FLEET_HOOKSD_PATH, FLEET_INIT_PATH).
for f in sbin/fleetd bin/fleetctl bin/agentd "libexec/$package/fleet-hooksd" "libexec/$package/fleet-init" lib/systemd/system/fleetd.service; do
	check "installs $f" -- test -e "$dest$prefix/$f"
done
unit=$dest$prefix/lib/systemd/system/fleetd.service
like "$(cat "$unit")" "ExecStart=$prefix/sbin/fleetd --foreground" "the unit starts the installed fleetd in the foreground"
like "$(cat "$unit")" "Type=notify" "the unit waits for fleetd's readiness"
like "$(cat "$unit")" "KillMode=process" "stopping the service leaves guests alone"
for d in NoNewPrivileges=yes ProtectSystem=true PrivateTmp=yes ProtectKernelModules=yes UMask=0077; do
	like "$(cat "$unit")" "^$d$" "the unit hardens with $d"
done
for f in share/man/man1/fleetctl.1 share/man/man8/fleetd.8 share/man/man5/fleetd.conf.5 \
	share/bash-completion/completions/fleetctl; do
	check "installs $f" -- test -s "$dest$prefix/$f"
done
# The state dir's mode is fleetd's own (0711: user agents traverse to their homes), and systemd
# leaves fleetd's cgroup subtree to it (user agents' cgroups), as docs/operations.md says.
like "$(cat "$unit")" "^StateDirectoryMode=0711$" "the unit gives the state dir fleetd's mode"
like "$(cat "$unit")" "^Delegate=yes$" "the unit delegates fleetd's cgroup subtree to it"
docdir=$(sed -n 's/^docdir = //p' "$FLEET_BUILDDIR/Makefile" | sed "s|\${datarootdir}|$prefix/share|; s|\${PACKAGE_TARNAME}|$package|")
check "installs the sample fleetd.conf into $docdir" -- cmp "$dest$docdir/fleetd.conf.sample" "$FLEET_SRCDIR/systemd/fleetd.conf.sample"
like "$("$dest$prefix/sbin/fleetd" --version)" "^fleetd " "the installed fleetd runs"
done_testing
