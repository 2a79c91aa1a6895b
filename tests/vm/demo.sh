#!/bin/bash
# The README's first command, as a newcomer runs it: `bash scripts/demo.sh`
# on a host where libvirtd is not running. It runs in private mount, network
# and PID namespaces: its own /run, /etc and /var/lib (overlays: the demo's
# user agent is a real Unix user, and a mount point created on the host's
# /var/lib would outlive the test), /usr/local (make install),
# /var/lib/fleet, /var/lib/libvirt, /var/cache/libvirt and /var/log/libvirt,
# and no network but loopback, so it can download nothing. When the namespace's first
# process exits, the kernel ends everything the demo left running (libvirtd,
# virtlogd, fleetd, QEMU); its agents are removed before that, by fleetctl.
. "$FLEET_SRCDIR/tests/lib/common.sh"

[ "$(id -u)" = 0 ] || skip_all "needs root"
for c in unshare qemu-system-x86_64 libvirtd virtlogd virsh ip useradd; do
	command -v "$c" >/dev/null || skip_all "$c not installed (scripts/deps.sh installs it)"
done
grep -qw overlay /proc/filesystems || modprobe overlay 2>/dev/null || skip_all "no overlayfs (for a private /etc)"

D=$TEST_TMP/ns
mkdir -p "$D"/{usrlocal,varlib-fleet,varlib-libvirt,cache-libvirt,etc-upper,etc-work,varlib-upper,varlib-work}
chmod 0755 "$D" "$D"/*
# The host's own state, to compare after.
ls -A /usr/local/bin /usr/local/sbin > "$TEST_TMP/usrlocal.before" 2>&1
host_fleet_before=$([ -e /var/lib/fleet ] && echo present || echo absent)

# The demo builds with scripts/build.sh, which cleans a source tree
# configured in place (README: "Building by hand") before its out-of-tree
# build: under a make check of such a tree that would delete the build under
# test, so then the demo runs on a copy of the sources (a fresh checkout).
src=$FLEET_SRCDIR
if [ -f "$FLEET_SRCDIR/config.status" ]; then
	src=$TEST_TMP/src
	mkdir -p "$src"
	tar -C "$FLEET_SRCDIR" --exclude=./.git --exclude=./build --exclude='*.o' --exclude='*.a' \
		--exclude=config.status --exclude=config.log --exclude=./Makefile --exclude=autoconfig.h -cf - . |
		tar -C "$src" -xf -
	diag "the source tree is configured in place: the demo runs on a copy, $src"
fi

# Runs as PID 1 of the new namespaces; its exit ends them.
cat > "$D/inner.sh" <<'EOF'
set -eu	# until the demo starts: it must never run with the host's /etc or /var/lib
D=$1 SRC=$2
mount --make-rprivate /
mount -t tmpfs -o mode=0755 tmpfs /run
mkdir -p /run/lock
mount -t overlay overlay -o "lowerdir=/etc,upperdir=$D/etc-upper,workdir=$D/etc-work" /etc
# Guests and networks a host's libvirt may have defined are not the demo's.
rm -f /etc/libvirt/qemu/*.xml /etc/libvirt/qemu/autostart/* /etc/libvirt/qemu/networks/*.xml \
	/etc/libvirt/qemu/networks/autostart/* 2>/dev/null
mount --bind "$D/usrlocal" /usr/local
mount -t overlay overlay -o "lowerdir=/var/lib,upperdir=$D/varlib-upper,workdir=$D/varlib-work" /var/lib
# Mount points that exist on the host already (libvirt-daemon-system), or in the overlay.
mkdir -p /var/lib/fleet /var/lib/libvirt
mount --bind "$D/varlib-fleet" /var/lib/fleet
mkdir -p "$D/varlib-libvirt"/{qemu,dnsmasq,images,network} && chmod 0755 "$D/varlib-libvirt"/*
mount --bind "$D/varlib-libvirt" /var/lib/libvirt
# Seeded with the host's QEMU capabilities, so libvirtd need not probe again.
cp -a /var/cache/libvirt/. "$D/cache-libvirt/" 2>/dev/null || true
mount --bind "$D/cache-libvirt" /var/cache/libvirt
mount -t tmpfs -o mode=0755 tmpfs /var/log/libvirt && mkdir -p /var/log/libvirt/qemu
# A /sys for this network namespace, keeping the cgroup mounts.
mkdir -p "$D/cgroup"
mount --rbind /sys/fs/cgroup "$D/cgroup"
mount -t sysfs sysfs /sys
mount --rbind "$D/cgroup" /sys/fs/cgroup
umount -l "$D/cgroup"
ip link set lo up
set +e
{
	echo "libvirtd before the demo: $(pgrep -x libvirtd || echo none)"	# this PID namespace's /proc
	echo "libvirt socket before the demo: $([ -S /run/libvirt/libvirt-sock ] && echo present || echo absent)"
} > "$D/before"

# As a newcomer's shell would: no fleet variables from make check or a developer.
unset FLEET_SOCKET FLEET_BUILD_DIR FLEET_IMAGE_DIR
bash "$SRC/scripts/demo.sh" </dev/null > "$D/demo.out" 2>&1
echo $? > "$D/demo.rc"

# What the demo leaves running, stopped in order: its agents (domains,
# users, cgroups) by fleetctl, then fleetd and libvirtd by their pid files.
export PATH=/usr/local/sbin:/usr/local/bin:$PATH
for a in demo-vm demo-user demo-triage demo-review; do fleetctl rm --force "$a" >> "$D/cleanup.out" 2>&1; done
for u in fleet-demo-user fleet-demo-triage fleet-demo-review; do
	getent passwd $u > /dev/null && echo "$u still exists" >> "$D/cleanup.out"
done
gone() { ! kill -0 "$1" 2>/dev/null || [ "$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null)" = Z ]; }
stop() {	# stop PIDFILE: TERM, then wait (up to 30 s) for it to go
	local pid i
	pid=$(head -1 "$1" 2>/dev/null) && [ -n "$pid" ] || return 0
	kill -TERM "$pid" 2>/dev/null || return 0
	for ((i = 0; i < 300; i++)); do gone "$pid" && return 0; sleep 0.1; done
}
stop /var/lib/fleet/fleetd.lock
stop /run/libvirtd.pid
stop /run/virtlogd.pid
ps -eo pid=,stat=,comm= | awk '$2 !~ /^Z/' > "$D/left"
EOF

# A bound on a hung demo, not a timed check: --kill-child ends the namespace.
timeout 3600 unshare --mount --net --pid --fork --kill-child --mount-proc -- bash "$D/inner.sh" "$D" "$src" \
	</dev/null >"$TEST_TMP/ns.log" 2>&1
ok $? "the namespaces were set up and torn down" || sed 's/^/#   /' "$TEST_TMP/ns.log"
is "$(cat "$D/before" 2>/dev/null)" $'libvirtd before the demo: none\nlibvirt socket before the demo: absent' \
	"no libvirtd ran in the namespace before the demo"

# has ERE DESCRIPTION: a line of the demo's output matches (its whole output
# is shown once, below, if the demo failed).
has() { grep -qE -- "$1" "$D/demo.out" 2>/dev/null; ok $? "$2"; }
demo_rc=$(cat "$D/demo.rc" 2>/dev/null)
is "$demo_rc" 0 "bash scripts/demo.sh exits 0" || { diag "its output ends:"; tail -40 "$D/demo.out" | sed 's/^/#   /'; }
has "==> Starting libvirtd" "it started libvirtd itself"
has "^Compiled against library: libvirt" "and printed its version"
has "==> Creating agents" "it creates the agents"
has "^uid=1000\(agent\)" "exec runs in the VM as the guest's agent user"
has "^uid=[0-9]+\(fleet-demo-user\)" "and in the user agent as its own Unix user"
has "^stdin works" "exec passes stdin"
has "^rollback: .*restored 'known-good'" "the wrecked VM was rolled back to its good snapshot"
check "after the rollback the agent's file is back" -- \
	bash -c "sed -n '/^rollback: /,\$p' '$D/demo.out' | grep -qx remembered"
has "==> A signed webhook runs an agent" "it fires a signed webhook at an agent"
has "^webhooks: up on 127\.0\.0\.1:8470 " "fleetd's listener is up, on loopback (the namespace's)"
has '"status": ?"accepted".*\(HTTP 202\)$' "the signed delivery is answered 202 accepted"
has '\(HTTP 401\)$' "the forged one 401"
has "^[0-9TZ:-]+ +github +demo-github " "fleetctl events shows the delivery"
has "^review run [0-9]+ \([a-z]+ push\); journal has" "and its run ran demo-user's command, with the event's type"
# The example bots (examples/wire-bots.sh): one webhook each, runs, logs, memory, no cross-reads.
# after CMD: the demo's output from the line '$ CMD' to the next command line.
after() { awk -v c="\$ $1" '$0 == c { on = 1; next } on && /^\$ / { exit } on' "$D/demo.out" 2>/dev/null; }
has "==> Two example bots" "it wires the two example bots"
like "$(after 'fleetctl runs demo-triage')" '^[0-9]+ +datadog +succeeded ' "the triage bot's DataDog run succeeded"
like "$(after 'fleetctl runs demo-review')" '^[0-9]+ +github +succeeded ' "the review bot's pull_request run succeeded"
has "^triage-bot: POST .*Authorization: Bearer \[secret SLACK_TOKEN\]" "the triage bot's log shows its token redacted"
has "^review-bot: POST .*Authorization: Bearer \[secret GITHUB_TOKEN\]" "and the review bot's"
has "would post to Slack channel #oncall: PAGE on-call \(P1\)" "offline, the triage bot says what it would post"
has "would comment on acme/widgets#7" "and the review bot what it would comment"
like "$(after 'fleetctl memory demo-review get reviewed')" "^acme/widgets#7 59b20b8d" "the review bot remembers the PR"
like "$(after 'fleetctl memory demo-triage ls')" '^incidents ' "the triage bot's memory has its incidents"
has "^cat: .*/demo-review/memory/reviewed: Permission denied" "the triage bot cannot read the review bot's memory"
has "^cat: .*/demo-triage/memory/incidents: Permission denied" "nor the review bot the triage bot's"
has "^GITHUB_TOKEN=\(not set\)$" "the triage bot's environment has no GITHUB_TOKEN"
has "^SLACK_TOKEN=\(not set\)$" "the review bot's has no SLACK_TOKEN"
has "^cross-read of fleet's secrets: denied" "and the triage bot cannot read fleet's database"
has "==> Audit log" "the demo ran to its last step"

# Nothing of it is left: the namespace's processes died with it, its agents
# were removed, the host's users, /usr/local and /var/lib are as they were.
is "$(grep -cE ' (fleetd|fleet-hooksd|libvirtd|virtlogd|qemu-system-x86)$' "$D/left" 2>/dev/null)" 0 \
	"fleetd, its webhook listener, libvirtd and QEMU were stopped before the namespace ended"
is "$(grep -c 'still exists' "$D/cleanup.out" 2>/dev/null)" 0 "the demo's user agents were removed"
# (Other tests add and remove users meanwhile: only the demo's are looked for.)
is "$(getent passwd | grep -cE '^fleet-demo-|:/var/lib/fleet/')" 0 "the host has no user of the demo's"
ls -A /usr/local/bin /usr/local/sbin > "$TEST_TMP/usrlocal.after" 2>&1
check "the host's /usr/local is unchanged" -- cmp -s "$TEST_TMP/usrlocal.before" "$TEST_TMP/usrlocal.after"
is "$([ -e /var/lib/fleet ] && echo present || echo absent)" "$host_fleet_before" "the host's /var/lib/fleet is untouched"

done_testing
