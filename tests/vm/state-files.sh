#!/bin/bash
# The files fleetd keeps for VM agents, as a user of the host and as a
# guest could attack them: fleetd started from a shell (umask 022) leaves
# nothing in its state dir that others may read or write (walked, with the
# exceptions listed); a user agent cannot read a VM agent's disk, seed or
# console; vms/NAME is root's; a symlink or FIFO put at console.log neither
# leaks a root-only file through `fleetctl console` nor hangs fleetd, and is
# not followed by virtlogd at the next boot; and a guest that prints without
# end keeps its console files within the cap even when virtlogd never rotates,
# and a stopped agent's are brought within it when fleetd starts.
. "$FLEET_SRCDIR/tests/lib/common.sh"

. "$FLEET_SRCDIR/tests/lib/vmfleet.sh"
vmfleet_setup --tcg

V=sfv U=sfu$(test_run_id)	# U becomes a host-wide Unix user: named from the run (two checkouts at once never collide)
CAP=$((1 << 20))		# vm_console_max_bytes for this test (default 8 MiB): a TCG guest's serial port is slow
UMIN=$((4800000 + ($$ % 500) * 100)); UMAX=$((UMIN + 99))

# The state dir outside /tmp: a user agent's exec has a private /tmp, which
# would hide it and make the reads below fail for the wrong reason.
S=$(mktemp -d /var/lib/fleet-sf.XXXXXX); on_exit "_umount_under '$S'; rm -rf '$S'"	# users/: a mount of fleetd's
mv "$STATE"/* "$S"/; STATE=$S
on_exit "timeout 120 '$FLEETCTL' rm --force $U; timeout 120 '$FLEETCTL' rm --force $V; userdel fleet-$U; groupdel fleet-$U"

# A host whose virtlogd never rotates (max_size = 0): fleet must cap the console itself.
echo 'max_size = 0' >> "$VMNS_DIR/etc/libvirt/virtlogd.conf"
vlpid=$(vmns_exec cat /run/virtlogd.pid)
kill -TERM "$vlpid"; wait_for 20 bash -c "! kill -0 $vlpid"
vmns_exec virtlogd -d; ok $? "virtlogd restarted with max_size = 0"

umask 022			# as a user starting fleetd from a shell
fleetd_ns_start --user-uid-min "$UMIN" --user-uid-max "$UMAX" --vm-console-max-bytes $CAP; ok $? "fleetd starts (umask 022)"
"$FLEETCTL" create $V --backend vm --memory 256 >/dev/null; ok $? "create VM agent $V"
"$FLEETCTL" create $U --backend user >/dev/null; ok $? "create user agent $U"
"$FLEETCTL" start $V >/dev/null; ok $? "start $V"
D=$STATE/vms/$V
fails() { ! "$@"; }

# --- nothing for others ---------------------------------------------------------------
# path (relative to the state dir) -> why others may have access to it
declare -A allowed=(
	[.]="the state dir is 0711: user agents traverse it to their homes"
	[vms]="0711: QEMU (libvirt-qemu) traverses it to its disks"
	[vms/$V]="0711: likewise"
	[users]="0711: user agents traverse it to their own home"
	[images]="the shared guest image, installed by the operator (here the test), no secrets"
	[images/vmlinuz]="likewise" [images/initramfs.img]="likewise" [images/base.qcow2]="likewise"
	[vms/virt-type]="written by the test harness (vmfleet_setup --tcg); fleetd writes it 0600"
	[keys/$V/client.pub]="a public key, in root's 0700 keys/" [keys/$V/host.pub]="likewise"
)
bad=
while read -r mode type rel; do
	[ -n "${allowed[$rel]+x}" ] && continue
	case $rel in users/$U/*) continue ;; esac	# the agent's own files, behind its 0700 home
	perm=$((8#$mode))
	# The image store (images.c): copies of the same public guest image (Debian
	# packages and agentd, no secret: keys live in each agent's seed), which
	# QEMU reads; readable by others, but never writable.
	case $rel in images/sha256 | images/sha256/*) (( perm & 2 )) && bad+=" $rel($mode)"; continue ;; esac
	if [ "$type" = s ]; then
		(( perm & 2 )) && bad+=" $rel($mode)"	# connecting needs w; r means nothing on a socket
	elif (( perm & 7 )); then
		bad+=" $rel($mode)"
	fi
done < <(find "$STATE" -printf '%m %y %P\n' | sed 's/ $/ ./')
is "${bad:-none}" none "no file or dir in the state dir is open to others beyond the listed exceptions"
is "$(stat -c '%a %U' "$D")" "711 root" "vms/$V is root's after provisioning (QEMU cannot plant links there)"
is "$(stat -c '%a' "$D/disk.qcow2") $(stat -c '%a' "$D/seed.img")" "600 600" "disk and seed are 0600"

# --- from inside the user agent ----------------------------------------------------------
"$FLEETCTL" exec $U -- stat -c %s "$D/disk.qcow2" >/dev/null 2>&1
ok $? "$U sees the path of $V's disk (so a failed read below is the file's mode)"
for f in disk.qcow2 seed.img console.log; do
	check "$U cannot read $V's $f" -- fails "$FLEETCTL" exec $U -- cat "$D/$f"
done
check "$U cannot write $V's console log" -- fails "$FLEETCTL" exec $U -- sh -c "echo x >> '$D/console.log'"
check "$U cannot list $V's directory" -- fails "$FLEETCTL" exec $U -- ls "$D"

# --- a symlink or FIFO at console.log --------------------------------------------------------
marker="root-only-$RANDOM$RANDOM"
echo "$marker" > "$TEST_TMP/root-only"; chmod 0600 "$TEST_TMP/root-only"
mv "$D/console.log" "$D/console.log.real"	# virtlogd keeps writing the real one
ln -s "$TEST_TMP/root-only" "$D/console.log"
out=$(timeout 60 "$FLEETCTL" console $V 2>&1); rc=$?
[ "$rc" = 124 ] && diag "fleetctl console hung"
ok $([[ "$out" != *"$marker"* ]] && echo 0 || echo 1) "fleetctl console does not follow a symlink at console.log"
rm "$D/console.log"; mkfifo "$D/console.log"
timeout 60 "$FLEETCTL" console $V >/dev/null 2>&1; rc=$?
ok $([ "$rc" != 124 ] && echo 0 || echo 1) "fleetctl console returns with a FIFO at console.log"
out=$(curl -sS -m 30 --unix-socket "$SOCK" -w ' %{http_code}' http://fleet/v1/status 2>&1)
if ! is "${out##* }" 200 "fleetd still answers"; then
	# Its loop is stuck in open() of the FIFO: every later call would hang too.
	diag "fleetd hangs; stopping it and the test here"
	kill -9 "$FLEETD_PID"
	done_testing
fi
rm "$D/console.log"; mv "$D/console.log.real" "$D/console.log"
like "$("$FLEETCTL" console $V)" "Linux version" "fleetctl console reads the real log again"

# --- the console cap ---------------------------------------------------------------------------
end="end-of-flood-$RANDOM"
# 3 times the cap, a line of progress on stdout per 256 KiB so the exec stream never idles.
"$FLEETCTL" exec --root $V -- sh -c "i=0; while [ \$i -lt 12 ]; do head -c 262144 /dev/zero | tr '\\0' x > /dev/ttyS0; echo \$i; i=\$((i+1)); done; echo $end > /dev/ttyS0" >/dev/null
ok $? "the guest prints 3 MiB to its serial console"
console_total() { find "$D" -maxdepth 1 -name 'console.log*' -type f -printf '%s\n' | awk '{ t += $1 } END { print t + 0 }'; }
within_cap() { [ "$(console_total)" -le "$CAP" ]; }
wait_for 120 within_cap
total=$(console_total)
ok $([ "$total" -le "$CAP" ] && echo 0 || echo 1) "the console files stay within the cap of $CAP bytes in total ($total)"
diag "console files: $(ls -l "$D" | grep console | awk '{ print $5, $9 }' | tr '\n' ' ')"
like "$("$FLEETCTL" console $V | tail -c 4096)" "$end" "fleetctl console still shows the latest output"
"$FLEETCTL" exec --root $V -- sh -c "echo after-trim-$end > /dev/ttyS0"
wait_for 30 bash -c "'$FLEETCTL' console $V | tail -c 4096 | grep -q after-trim-$end"
ok $? "and what the guest prints after a trim"

# --- a planted link at the next boot ------------------------------------------------------------
"$FLEETCTL" stop $V >/dev/null; ok $? "stop $V"
echo "$marker" > "$TEST_TMP/victim"; chmod 0600 "$TEST_TMP/victim"
rm -f "$D/console.log"; ln -s "$TEST_TMP/victim" "$D/console.log"
"$FLEETCTL" start $V >/dev/null; ok $? "start $V over a symlinked console.log"
is "$(cat "$TEST_TMP/victim")" "$marker" "the guest's output did not go through the symlink"
check "console.log is a regular file again" -- test -f "$D/console.log" -a ! -L "$D/console.log"

# --- a stopped guest's console at fleetd's start ---------------------------------------------------
# Only a running guest's console grows, so only those are capped every 5 s; what lies over the cap
# beside a stopped one (files from before, a cap lowered since) is trimmed once when fleetd starts.
"$FLEETCTL" stop $V >/dev/null; ok $? "stop $V again"
stop_fleetd; ok $? "fleetd stops"
head -c $((2 * CAP)) /dev/zero | tr '\0' y > "$D/console.log.3"
ok $([ "$(console_total)" -gt "$CAP" ] && echo 0 || echo 1) "$V's console files are over the cap while fleetd is down"
fleetd_ns_start --user-uid-min "$UMIN" --user-uid-max "$UMAX" --vm-console-max-bytes $CAP; ok $? "fleetd starts again"
wait_for 120 within_cap
total=$(console_total)
ok $([ "$total" -le "$CAP" ] && echo 0 || echo 1) "a stopped agent's console files are brought within the cap ($total)"

done_testing
