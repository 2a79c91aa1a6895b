#!/bin/bash
# fleetctl doctor (#14): each check broken on purpose, its line read. One
# fleetd serving user agents, started with a libvirt URI nothing answers and
# an image dir we control; a second on a tiny tmpfs for space and inodes,
# with its webhook listener up; then fleetd in mount namespaces of its own without cgroups, with
# only the v1 freezer, with memory and pids but no freezer, /dev/kvm unusable and the TCG
# fallback remembered. The clock is read as it is (see the comment at its check).
# All in network and mount namespaces of the test's own (tests/lib/own-netns.sh):
# the NAT agent's nftables table is deleted there, never on the host.
. "$FLEET_SRCDIR/tests/lib/own-netns.sh"
. "$FLEET_SRCDIR/tests/lib/common.sh"
U=udr$(test_run_id)	# agent names and hooks_user of this run (two checkouts at once never collide)
HOOKS_USER=$U-hooks	# the second fleetd's listener runs as this user (tests/lib/hooks.sh)
. "$FLEET_SRCDIR/tests/lib/hooks.sh"

[ "$(id -u)" = 0 ] || skip_all "needs root (user agents are Unix users)"
own_netns_ready
for t in nft jq curl; do command -v $t >/dev/null || skip_all "$t missing"; done

# line CHECK: the doctor's line for CHECK from the text output in $out
line() { printf '%s\n' "$out" | awk -v c="$1" '$2 == c { print; getline; if ($1 == "fix:") print; exit }'; }
status_of() { printf '%s\n' "$json" | jq -r --arg c "$1" '.checks[] | select(.check == $c) | .status'; }

user_fleetd_setup doctor
IMG=$STATE.img
mkdir -p "$IMG"
on_exit "rm -rf '$IMG'"
NOVIRT="qemu+unix:///system?socket=$TEST_TMP/no-libvirtd.sock"
user_fleetd_start --libvirt-uri "$NOVIRT" --image-dir "$IMG" || fail_all "fleetd does not start"

# ---- fleetd's findings as JSON over the API -----------------------------------------------------
res=$(api GET /v1/doctor)
is "${res##* }" 200 "GET /v1/doctor answers 200"
body=${res% *}
check "every finding has check, status (OK|WARN|FAIL) and detail" -- \
	jq -e '.checks | length > 5 and all(.[]; (.check|type) == "string" and (.status | test("^(OK|WARN|FAIL)$")) and (.detail|type) == "string")' <<<"$body"
check "the top status is the worst" -- jq -e '.status == "FAIL"' <<<"$body"

# ---- a libvirtd that is not there ---------------------------------------------------------------
out=$("$FLEETCTL" doctor); rc=$?
is "$rc" 1 "doctor exits 1 when a line is FAIL"
l=$(line libvirt)
like "$l" "^FAIL libvirt +cannot reach libvirtd at qemu\+unix:///system\?socket=$TEST_TMP/no-libvirtd.sock" \
	"no libvirtd: FAIL naming the URI" || diag "$out"
like "$l" "fix: start libvirtd" "with the fix"
if [ -c /dev/kvm ]; then
	like "$(line kvm)" "^(OK|WARN) +kvm" "KVM or the TCG fallback is reported"
else	# this host has no KVM: the line a host without it gets, for real
	like "$(line kvm)" "^WARN kvm +/dev/kvm is missing or unusable: guests run under TCG" "no /dev/kvm here: WARN" ||
		diag "$out"
	like "$(line kvm)" "fix: enable virtualisation in the firmware and load kvm_intel or kvm_amd" "with the fix"
fi
like "$(line fleetd)" "^OK +fleetd +fleetd answers at $SOCK" "the client reached fleetd"
like "$(line socket-group)" "^OK +socket-group +group root, mode 0660" "the socket's group and mode"

# ---- the socket's group named from /etc/group (fleetctl reads it itself, no NSS) ----------------
# A group of the test's own, then a gid that /etc/group has no line for (shown by number); the
# socket goes back to root's group after (fleetd lets in its socket_group, not the file's group:
# the file's group is what doctor reads).
SGROUP=fd$U
groupadd --system "$SGROUP" || fail_all "cannot add the group $SGROUP"
on_exit "groupdel '$SGROUP'"
chgrp "$SGROUP" "$SOCK"
out=$("$FLEETCTL" doctor)
like "$(line socket-group)" "^OK +socket-group +group $SGROUP, mode 0660; you own it or are root" \
	"a socket group with a name: shown by its name" || diag "$out"
NOGID=64000
while awk -F: -v g="$NOGID" '$3 == g { found = 1 } END { exit !found }' /etc/group; do NOGID=$((NOGID + 1)); done
chgrp "$NOGID" "$SOCK"
out=$("$FLEETCTL" doctor)
like "$(line socket-group)" "^OK +socket-group +group $NOGID, mode 0660; you own it or are root" \
	"a gid without an /etc/group line: shown by number" || diag "$out"
out=$(setpriv --reuid=nobody --regid=nogroup --clear-groups "$FLEETCTL" -s "$SOCK" doctor)
like "$(line socket-group)" "^FAIL socket-group +group $NOGID, mode 0660: you may not connect" \
	"as nobody outside it: FAIL, by number" || diag "$out"
chgrp root "$SOCK"
out=$("$FLEETCTL" doctor)

# ---- the guest image: missing, then not this fleet's agentd, then matching --------------------
like "$(line guest-image)" "^FAIL guest-image +no complete guest image: $IMG/vmlinuz" "no image: FAIL naming the file"
like "$(line guest-image)" "fix: build it: images/build-image.sh --out $IMG" "with the command to build it"
: > "$IMG/vmlinuz"; : > "$IMG/initramfs.img"; : > "$IMG/base.qcow2"
echo '{"agentd_sha256": "0000000000000000000000000000000000000000000000000000000000000000"}' > "$IMG/manifest.json"
out=$("$FLEETCTL" doctor)
like "$(line guest-image)" "^WARN guest-image +the guest image in $IMG has agentd 000000000000, this fleet's" \
	"an image with another agentd: WARN" || diag "$out"
like "$(line guest-image)" "fix: rebuild it: .*fleetctl upgrade NAME" "with the rebuild and upgrade as fix"
echo "{\"agentd_sha256\": \"$(sha256sum "$AGENTD" | cut -d' ' -f1)\"}" > "$IMG/manifest.json"
out=$("$FLEETCTL" doctor)
like "$(line guest-image)" "^OK +guest-image +guest image in $IMG, its agentd is this fleet's" "the matching image: OK"

# ---- the listener off -----------------------------------------------------------------------------
like "$(line listener)" "^WARN listener +the webhook listener is off \(hooks_listen = none\)" "hooks_listen none: WARN"
like "$(line listener)" "fix: set hooks_listen in fleetd.conf" "with the fix"

# ---- cgroups, the clock, the state dir: reported ----------------------------------------------
like "$(line cgroups)" "^(OK|WARN|FAIL) +cgroups +" "the cgroup controllers are reported"
# The kernel's clock state, read here as fleetd reads it (adjtimex, nothing set): 5 is TIME_ERROR,
# not synchronised. A synchronised host's clock is not unsynchronised by the test: adjtimex's
# status is the host's own (no namespace holds it), and marking it would touch every program's
# time there. Where it is unsynchronised already (no time service, as on the CI's containers)
# the WARN is the real one. Reading denied (the unit's ProtectClock=): below, and in
# tests/vm/systemd-host.sh under systemd itself.
clock_state=$(python3 -c 'import ctypes; b = ctypes.create_string_buffer(1024); print(ctypes.CDLL(None).adjtimex(b))' 2>/dev/null)
case $clock_state in
5)	like "$(line clock)" "^WARN clock +the clock is not synchronised: cron slots drift" "an unsynchronised clock: WARN" ||
		diag "$out"
	like "$(line clock)" "fix: enable time synchronisation: timedatectl set-ntp true" "with the fix" ;;
[0-4])	like "$(line clock)" "^OK +clock +synchronised \(estimated error [0-9]+ us\)" "a synchronised clock: OK" ||
		diag "$out" ;;
*)	like "$(line clock)" "^(OK|WARN) +clock +" "the clock's synchronisation is reported"
	diag "the kernel's clock state could not be read here (python3: '$clock_state')" ;;
esac
like "$(line state-dir-space)" "^OK +state-dir-space +$STATE: [0-9]+ MiB free" "state dir space OK"

# ---- fleet's firewall table with a NAT agent, then deleted -------------------------------------
like "$(line firewall)" "^OK +firewall +no agent has --network nat" "no NAT agent: no rules needed"
"$FLEETCTL" create $U-nat --backend user --network nat >/dev/null; ok $? "a NAT user agent is created"
out=$("$FLEETCTL" doctor)
like "$(line firewall)" "^OK +firewall +table inet fleet present \(1 NAT agent" "its table is there: OK"
nft delete table inet fleet; ok $? "fleet's table is deleted (in the test's network namespace)"
out=$("$FLEETCTL" doctor)
like "$(line firewall)" "^FAIL firewall +table inet fleet or its chains are missing: 1 NAT agent" "missing table: FAIL" ||
	diag "$out"
like "$(line firewall)" "fix: restart fleetd" "with the fix"
json=$("$FLEETCTL" --json doctor)
is "$(status_of firewall)" FAIL "--json carries the same finding"
"$FLEETCTL" rm --force $U-nat >/dev/null; ok $? "the agent is removed"

# ---- a socket this user may not use -----------------------------------------------------------
NOBODY_OUT=$(setpriv --reuid=nobody --regid=nogroup --clear-groups "$FLEETCTL" -s "$SOCK" doctor); rc=$?
is "$rc" 1 "as nobody: exit 1"
out=$NOBODY_OUT
like "$(line socket-group)" "^FAIL socket-group +group root, mode 0660: you may not connect" \
	"as nobody: the socket's group says why" || diag "$out"

# ---- fleetd not running ------------------------------------------------------------------------
stop_fleetd; ok $? "fleetd stops"
out=$("$FLEETCTL" doctor); rc=$?
is "$rc" 1 "without fleetd: exit 1"
like "$(line fleetd)" "^FAIL fleetd +fleetd is not running: nothing listens at $SOCK" "says fleetd is not running"
like "$(line fleetd)" "fix: start it: systemctl start fleetd" "with the fix"
like "$(line kvm)" "^(OK|WARN) +kvm" "and still checks KVM locally"
case $clock_state in
5) like "$(line clock)" "^WARN clock +the clock is not synchronised" "and the clock: WARN here too" ;;
[0-4]) like "$(line clock)" "^OK +clock +synchronised" "and the clock: OK here too" ;;
esac

# ---- a tiny state dir: space, then inodes ----------------------------------------------------
SMALL=$TEST_TMP/small
mkdir -p "$SMALL"
mount -t tmpfs -o size=64m,nr_inodes=3000,mode=0755 fleet-doctor "$SMALL" || fail_all "cannot mount a tmpfs"
on_exit "umount -l '$SMALL'"
start_fleetd small/state --libvirt-uri "$NOVIRT" --hooks-listen 127.0.0.1:0 --hooks-user "$HOOKS_USER" ||
	fail_all "fleetd on the tmpfs does not start"
hooks_wait_up; ok $? "its webhook listener comes up (on the test's own loopback)"
out=$("$FLEETCTL" doctor)
like "$(line listener)" "^OK +listener +the webhook listener is up on $HOOKS_ADDR \(pid $HOOKS_PID\)" "the listener up: OK" ||
	diag "$out"
like "$(line state-dir-space)" "^(OK|WARN) +state-dir-space +$SMALL/state: [0-9]+ MiB free of 64 MiB" "a roomy tmpfs: not FAIL" ||
	diag "$out"
fallocate -l 56m "$SMALL/fill" || dd if=/dev/zero of="$SMALL/fill" bs=1M count=56 status=none
out=$("$FLEETCTL" doctor)
like "$(line state-dir-space)" "^FAIL state-dir-space +$SMALL/state: [0-9]+ MiB free of 64 MiB" "full: FAIL" || diag "$out"
like "$(line state-dir-space)" "fix: free space there" "with the fix"
rm -f "$SMALL/fill"
mkdir "$SMALL/many" && (cd "$SMALL/many" && seq 1 2400 | xargs touch)
out=$("$FLEETCTL" doctor)
like "$(line state-dir-inodes)" "^FAIL state-dir-inodes +$SMALL/state: [0-9]+ inodes free of 3000" "no inodes left: FAIL" ||
	diag "$out"
rm -rf "$SMALL/many"
stop_fleetd; ok $? "the second fleetd stops"

# ---- a listener that keeps dying ---------------------------------------------------------------
# fleetd runs the fleet-hooksd next to its own executable: a copy of fleetd beside one that
# exits at once (fault injection) has a listener that is down, restarted with a growing backoff.
BIN=$TEST_TMP/dying-listener
mkdir -p "$BIN"
cp "$FLEETD" "$BIN/fleetd"
printf '#!/bin/sh\necho "fleet-hooksd: broken on purpose by doctor.sh" >&2\nexit 3\n' > "$BIN/fleet-hooksd"
chmod 0755 "$BIN/fleetd" "$BIN/fleet-hooksd"
FLEETD=$BIN/fleetd start_fleetd dying --libvirt-uri "$NOVIRT" --hooks-listen 127.0.0.1:0 \
	--hooks-user "$HOOKS_USER" || fail_all "fleetd with a dying listener does not start"
# Between two restarts (backoff 1, 2, 4 s...) the listener is down: ask until doctor sees it so.
for _ in $(seq 40); do
	out=$("$FLEETCTL" doctor)
	case $(line listener) in FAIL*) break ;; esac
	sleep 0.5
done
like "$(line listener)" "^FAIL listener +the webhook listener on 127\.0\.0\.1:[0-9]+ is down after [0-9]+ restart\(s\)" \
	"a listener that keeps dying: FAIL, with its restarts" || diag "$out"
like "$(line listener)" "fix: " "with the fix" || diag "$out"
stop_fleetd; ok $? "that fleetd stops"

# ---- a host without cgroups, KVM broken, the TCG fallback remembered ----------------------------
# fleetd started in a mount namespace of its own where /sys/fs/cgroup is taken away (umount -R in
# that namespace: the host keeps its hierarchies), then made again with only the v1 hierarchies
# CGROUPS names; and /dev/null bound over /dev/kvm where there is one (KVM_GET_API_VERSION fails
# on it). fleetd and the user backend find their cgroups afresh at start and at each doctor.
BROKEN=$TEST_TMP/broken-host
mkdir -p "$BROKEN"
cat > "$BROKEN/fleetd" <<'EOF'
#!/bin/sh
# CGROUPS: "none", or comma-separated v1 controllers (each its own hierarchy); REAL_FLEETD: fleetd;
# DENY_CLOCK: tests/lib/deny-clock-read.py, to run it under (ProtectClock='s filter); TIMESYNC: 1
# for systemd-timesyncd's mark of a synchronised clock.
exec unshare --mount --propagation private -- sh -c '
	set -e
	if [ -e /dev/kvm ]; then mount --bind /dev/null /dev/kvm; fi
	umount -R /sys/fs/cgroup
	if [ "$CGROUPS" != none ]; then
		mount -t tmpfs -o size=1m,mode=0755 doctor-cgroups /sys/fs/cgroup
		for c in $(echo "$CGROUPS" | tr , " "); do
			mkdir /sys/fs/cgroup/$c
			mount -t cgroup -o $c cgroup /sys/fs/cgroup/$c
		done
	fi
	if [ -n "$TIMESYNC" ]; then	# systemd-timesyncd says synchronised (its mark, in a /run of our own)
		mount -t tmpfs -o size=1m,mode=0755 doctor-run /run
		mkdir -p /run/systemd/timesync
		: > /run/systemd/timesync/synchronized
	fi
	if [ -n "$DENY_CLOCK" ]; then exec python3 "$DENY_CLOCK" "$REAL_FLEETD" "$@"; fi
	exec "$REAL_FLEETD" "$@"' fleetd "$@"
EOF
chmod 0755 "$BROKEN/fleetd"
export REAL_FLEETD=$FLEETD
# broken_start NAME CGROUPS: a fleetd on such a host
broken_start() { CGROUPS=$2 FLEETD=$BROKEN/fleetd start_fleetd "$1" --libvirt-uri "$NOVIRT"; }
# The clock's state unreadable, as under fleetd's unit (ProtectClock=yes: systemd's seccomp filter
# refuses adjtimex, even to read): with timesyncd's mark, then without. x86_64 only (its numbers).
export DENY_CLOCK= TIMESYNC=
[ "$(uname -m)" = x86_64 ] && DENY_CLOCK=$FLEET_SRCDIR/tests/lib/deny-clock-read.py TIMESYNC=1
if broken_start nocg none; then
	out=$("$FLEETCTL" doctor); rc=$?
	is "$rc" 1 "no cgroups at all: exit 1"
	like "$(line cgroups)" "^FAIL cgroups +no usable cgroup hierarchy \(memory:none pids:none cpu:none; processes tracked by nothing" \
		"no cgroup hierarchy: FAIL, naming each controller" || diag "$out"
	like "$(line cgroups)" "fix: mount cgroup2 on /sys/fs/cgroup" "with the fix"
	like "$(line kvm)" "^WARN kvm +/dev/kvm is missing or unusable: guests run under TCG" \
		"/dev/kvm unusable (missing, or /dev/null in its place): WARN" || diag "$out"
	if [ -n "$DENY_CLOCK" ]; then
		like "$(line clock)" "^OK +clock +synchronised \(systemd-timesyncd says so; the kernel's own state is not readable under the unit's ProtectClock=yes\)" \
			"the clock unreadable, timesyncd says synchronised: OK, saying whose word it is" || diag "$out"
	fi
	stop_fleetd; ok $? "that fleetd stops"
	TIMESYNC=
	# KVM that ran no guest: fleetd remembers TCG in vms/virt-type (vm/channel.c's watchdog).
	echo qemu > "$STATE/vms/virt-type"
	if broken_start nocg freezer; then
		out=$("$FLEETCTL" doctor)
		like "$(line kvm)" "^WARN kvm +TCG fallback in force: a KVM guest never booted here \(remembered in $STATE/vms/virt-type\)" \
			"the TCG fallback in force: WARN, naming the file" || diag "$out"
		like "$(line kvm)" "fix: make KVM run nested guests .*then remove that file and restart fleetd" "with the fix"
		like "$(line cgroups)" "^WARN cgroups +memory:none pids:none cpu:none; processes tracked by freezer: without memory and pids" \
			"only the freezer: WARN, limits by rlimits only" || diag "$out"
		like "$(line cgroups)" "fix: enable the memory and pids controllers" "with the fix"
		if [ -n "$DENY_CLOCK" ]; then
			like "$(line clock)" "^WARN clock +cannot tell whether the clock is synchronised: fleetd's unit has ProtectClock=yes" \
				"the clock unreadable, no timesyncd: WARN, saying why" || diag "$out"
			like "$(line clock)" "fix: check the host's time service: timedatectl status" "with the fix"
		fi
		stop_fleetd; ok $? "that fleetd stops"
		DENY_CLOCK=
	else
		ok 1 "fleetd with only the v1 freezer starts (a kernel booted with cgroup_no_v1= has none)"
	fi
	if grep -q ' - cgroup cgroup .*memory' /proc/self/mountinfo; then
		if broken_start nofreezer memory,pids; then
			out=$("$FLEETCTL" doctor)
			like "$(line cgroups)" "^WARN cgroups +memory:v1 pids:v1 cpu:none; processes tracked by pids: no freezer" \
				"memory and pids without a freezer: WARN, no snapshot of a running agent" || diag "$out"
			like "$(line cgroups)" "fix: use cgroup v2 \(cgroup.freeze\) or mount the v1 freezer" "with the fix"
			stop_fleetd; ok $? "that fleetd stops"
		else
			ok 1 "fleetd with v1 memory and pids, no freezer, starts"
		fi
	else	# cgroup v2 holds memory and pids: no v1 hierarchy of them can be mounted
		diag "this host has no v1 memory hierarchy: the no-freezer case is not checked here"
	fi
else
	ok 1 "fleetd in a namespace without cgroups starts"
fi

done_testing

