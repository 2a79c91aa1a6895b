#!/bin/bash
# What a user agent sees of the host beyond files: daemons' sockets under
# /run, world-writable directories, uids of removed agents, the network, and
# whether the caller's --env can run code with privileges. Every attempt from
# inside the agent has a positive control: the same target works from the
# host (and for A's uid outside the sandbox), so only the sandbox stops it.
. "$FLEET_SRCDIR/tests/lib/common.sh"

[ "$(id -u)" = 0 ] || skip_all "needs root (user agents are Unix users)"
for t in perl socat gcc setpriv ip; do command -v $t >/dev/null || skip_all "$t missing"; done

U=usbx$(test_run_id) && A=$U-a C=$U-c	# agent names of this run (two checkouts at once never collide)
on_exit 'for n in $A $C; do userdel fleet-$n; groupdel fleet-$n; done'
user_fleetd_setup usbx
# One more world-writable directory, as a host may have (/var/crash, a PHP session dir): fleetd finds it at start.
WW=$(mktemp -d /var/lib/fleet-usbx-ww.XXXXXX); chmod 1777 "$WW"; on_exit "rm -rf '$WW'"
# The host's world-writable directories, as fleetd starts (others' tests may add some later).
ww=$( { find / /run /dev /dev/shm -xdev -type d -perm -0002 2>/dev/null; for d in /var/lock /var/run/lock /dev/mqueue; do
	[ -d "$d" ] && echo "$d"; done; } | grep -vE '^(/tmp|/var/tmp|/dev/shm)/' | sort -u)
user_fleetd_start || { ok 1 "fleetd starts"; done_testing; }
status=$(api GET /v1/status)
printf '%s' "${status% *}" | jq -e '.. | objects | select(has("user")) | .user | test("^available")' >/dev/null 2>&1 ||
	skip_all "this fleetd has no user backend"

"$FLEETCTL" create $A --backend user --memory 128 >/dev/null 2>&1; ok $? "create $A"
ua=$(id -u fleet-$A); HA=$STATE/users/$A

in_a() { "$FLEETCTL" exec $A -- sh -c "$1" </dev/null 2>&1; }
as_a_on_host() { setpriv --reuid="$ua" --regid="$ua" --clear-groups "$@"; }

# perl connect KIND=ADDR...: one line per target, "KIND=ADDR: connected" or the errno text.
PCONN='use Socket;
for my $t (@ARGV) {
	my ($k, $a) = split /=/, $t, 2; my ($d, $sa);
	if ($k eq "unix") { ($d, $sa) = (PF_UNIX, pack_sockaddr_un($a)) }
	elsif ($k eq "abstract") { ($d, $sa) = (PF_UNIX, pack_sockaddr_un("\0$a")) }
	else { my ($h, $p) = split /:/, $a; ($d, $sa) = (PF_INET, pack_sockaddr_in($p, inet_aton($h))) }
	socket(my $s, $d, SOCK_STREAM, 0) or die "socket: $!";
	print "$t: ", (connect($s, $sa) ? "connected" : "$!"), "\n";
}'
result_of() { printf '%s\n' "$1" | grep -F -- "$2: " | head -1 | sed 's/^[^ ]*: //'; }

# wait_listen PID ARGS...: until socat ARGS reaches the listener PID started (the host's own control).
wait_listen() {
	local pid=$1 i; shift
	for ((i = 0; i < 200; i++)); do
		kill -0 "$pid" 2>/dev/null || return 1
		socat -u "$@" - 2>/dev/null | grep -q hello && return 0
		sleep 0.05
	done
	return 1
}

# ---- item 3: no host daemon's socket ----
# A socket anyone may connect to, as libvirt's is with its default config (0777, polkit decides).
PLANT=/run/usbx-$$.sock
socat UNIX-LISTEN:$PLANT,mode=0777,fork SYSTEM:'echo run-hello' 2>/dev/null &
_pids+=($!); disown; on_exit "rm -f $PLANT"
wait_listen $! UNIX-CONNECT:$PLANT; ok $? "the host reaches a 0777 socket in /run (control)"
out=$(as_a_on_host perl -e "$PCONN" unix=$PLANT)
is "$(result_of "$out" unix=$PLANT)" connected "A's uid outside the sandbox reaches it too (so only the sandbox can stop A)"

targets=()
for s in /run/libvirt/libvirt-sock /run/libvirt/libvirt-sock-ro /run/dbus/system_bus_socket "$SOCK" $PLANT \
	$(find /run -xdev -type s 2>/dev/null | head -50); do
	[ -S "$s" ] || { diag "$s: not on this host"; continue; }
	case " ${targets[*]-} " in *" unix=$s "*) ;; *) targets+=("unix=$s") ;; esac
done
for s in /var/run/libvirt/libvirt-sock /var/run/dbus/system_bus_socket; do [ -S "$s" ] && targets+=("unix=$s"); done
out=$("$FLEETCTL" exec $A -- perl -e "$PCONN" "${targets[@]}" </dev/null 2>&1)
for t in "${targets[@]}"; do
	is "$(result_of "$out" "$t")" "No such file or directory" "A cannot reach host socket ${t#unix=}: it does not exist for A"
done
out=$(in_a 'stat -c "%n %U %a" /run /run/lock; stat -f -c %T /run')
is "$out" "$(printf '/run root 755\n/run/lock root 1777\ntmpfs')" "A's /run is a fresh root-owned tmpfs with a 1777 lock/"
out=$(in_a 'ls -A /run | tr "\n" " "; ls -A /var/run | tr "\n" " "; ls -A /var/lock | wc -l')
is "$out" "fleet lock fleet lock 0" "it holds only fleet/ (agentd) and an empty lock/, and /var/run and /var/lock lead there"

# ---- item 4: every world-writable directory is A's own ----
diag "world-writable directories of this host: $(echo $ww)"
MARK=usbx-mark-$$
for d in $ww; do on_exit "rm -f '$d/$MARK'"; done
out=$(in_a "for d in $(echo $ww); do touch \$d/$MARK 2>/dev/null && echo \$d: wrote; done")
like "$out" "/run/lock: wrote" "A can write in its /run/lock (control: the writes below happened)"
like "$out" "/tmp: wrote" "and in its /tmp"
like "$out" "$WW: wrote" "and in its own $WW"
for d in $ww; do
	[ -e "$d/$MARK" ]; is "$?" 1 "what A writes in $d stays in A's sandbox (not on the host's $d)"
done
in_a "echo left-behind > /run/lock/$MARK-left; echo left-behind > /var/lock/$MARK-left2" >/dev/null
[ -e /run/lock/$MARK-left ] || [ -e /run/lock/$MARK-left2 ]; is "$?" 1 "files A leaves in /run/lock or /var/lock are not the host's"
on_exit "rm -f /run/lock/$MARK-left /run/lock/$MARK-left2"

# ---- item 6: no host network ----
start_tcp() {	# start_tcp ADDR VAR: a TCP listener on ADDR, its port in VAR
	local addr=$1 try port pid
	for ((try = 0; try < 10; try++)); do
		port=$((20000 + RANDOM % 30000))
		socat TCP-LISTEN:$port,bind=$addr,reuseaddr,fork SYSTEM:'echo tcp-hello' 2>/dev/null &
		pid=$!
		if wait_listen $pid TCP:$addr:$port; then _pids+=($pid); disown $pid; printf -v "$2" %s $port; return 0; fi
		kill $pid 2>/dev/null; wait $pid 2>/dev/null
	done
	return 1
}
start_tcp 127.0.0.1 LPORT; ok $? "the host reaches a TCP service on its loopback (control, port ${LPORT-})"
ABS=usbx-abstract-$$
socat ABSTRACT-LISTEN:$ABS,fork SYSTEM:'echo abs-hello' 2>/dev/null &
_pids+=($!); disown
wait_listen $! ABSTRACT-CONNECT:$ABS; ok $? "the host reaches an abstract socket it opened (control)"
net_targets=("tcp=127.0.0.1:${LPORT-1}" "abstract=$ABS")
HADDR=$(ip -4 -o addr show scope global 2>/dev/null | awk '{ sub("/.*", "", $4); print $4; exit }')
if [ -n "$HADDR" ] && start_tcp "$HADDR" HPORT; then
	ok 0 "the host reaches a TCP service on its own address $HADDR (control)"
	net_targets+=("tcp=$HADDR:$HPORT")
else
	ok 0 "# SKIP no other host address to listen on"
fi
out=$(as_a_on_host perl -e "$PCONN" "${net_targets[@]}")
for t in "${net_targets[@]}"; do
	is "$(result_of "$out" "$t")" connected "A's uid outside the sandbox reaches $t (control)"
done
out=$("$FLEETCTL" exec $A -- perl -e "$PCONN" "${net_targets[@]}" </dev/null 2>&1)
is "$(result_of "$out" "${net_targets[0]}")" "Connection refused" "A cannot reach the host's loopback service: its 127.0.0.1 is its own"
is "$(result_of "$out" "${net_targets[1]}")" "Connection refused" "A cannot reach the host's abstract socket"
[ ${#net_targets[@]} -gt 2 ] &&
	is "$(result_of "$out" "${net_targets[2]}")" "Network is unreachable" "A cannot reach the host's other address"
out=$(in_a 'sed 1,2d /proc/net/dev | cut -d: -f1 | tr -d " "; sed 1d /proc/net/route | wc -l')
is "$out" "$(printf 'lo\n0')" "A's network has only lo and no route at all (no metadata service, no host)"
out=$(in_a "socat TCP-LISTEN:${LPORT-1},bind=127.0.0.1,reuseaddr SYSTEM:'echo own-hello' & for i in \$(seq 100); do
	r=\$(socat -u TCP:127.0.0.1:${LPORT-1} - 2>/dev/null) && [ -n \"\$r\" ] && break; sleep 0.05; done; echo \$r")
is "$out" "own-hello" "A's own loopback works (lo is up), on the very port the host uses"

# ---- item 1: the caller's environment never reaches a privileged process ----
cat > "$TEST_TMP/preload.c" <<'EOF'
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
/* Records who loaded it: the effective uid of every process that ran this constructor. */
__attribute__((constructor)) static void record(void)
{
	char line[96];
	int fd = open(LOG, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600), n;

	if (fd < 0)
		return;
	n = snprintf(line, sizeof(line), "euid=%u\n", (unsigned)geteuid());
	if (write(fd, line, (size_t)n) < 0)
		n = 0;
	close(fd);
}
EOF
gcc -shared -fPIC -DLOG="\"$HA/preload.log\"" -o "$TEST_TMP/preload.so" "$TEST_TMP/preload.c"; ok $? "build a preload library"
"$FLEETCTL" exec $A -- sh -c 'cat > preload.so' <"$TEST_TMP/preload.so"
cmp -s "$TEST_TMP/preload.so" "$HA/preload.so"; ok $? "A planted it in its home"
out=$("$FLEETCTL" exec $A --env LD_PRELOAD="$HA/preload.so" -- id -u </dev/null 2>&1); is "$out" "$ua" "exec with LD_PRELOAD runs"
"$FLEETCTL" exec $A --env LD_PRELOAD="$HA/preload.so" -- su -c true root </dev/null >/dev/null 2>&1
"$FLEETCTL" exec $A --env LD_PRELOAD="$HA/preload.so" --env LD_LIBRARY_PATH="$HA" -- true </dev/null >/dev/null 2>&1
"$FLEETCTL" start $A >/dev/null 2>&1
"$FLEETCTL" exec $A --env LD_PRELOAD="$HA/preload.so" -- true </dev/null >/dev/null 2>&1
"$FLEETCTL" stop $A >/dev/null 2>&1
log=$(cat "$HA/preload.log" 2>/dev/null)
diag "preload.log: $(echo $log)"
ok $(($(printf '%s\n' "$log" | grep -c "^euid=$ua\$") >= 3 ? 0 : 1)) "the library loaded in A's commands, as A's uid (control: it loads)"
is "$(printf '%s\n' "$log" | grep -v "^euid=$ua\$" | grep -c .)" 0 "it never ran with any other uid (root included; a set-uid su run with it stays A's and ignores it)"
grep -q preload.so /proc/"$FLEETD_PID"/maps; is "$?" 1 "fleetd itself never loaded it"

# ---- uids are never reused ----
"$FLEETCTL" rm --force $A >/dev/null 2>&1; ok $? "rm $A"
"$FLEETCTL" create $C --backend user >/dev/null 2>&1; ok $? "create $C after it"
uc=$(id -u fleet-$C 2>/dev/null)
ok $((uc > ua ? 0 : 1)) "$C gets a new uid ($uc), never $A's ($ua)"
is "$(cat "$STATE/user-uid-next")" "$((uc + 1))" "the high-water mark is recorded in the state dir"
is "$(stat -c '%U %a' "$STATE/user-uid-next")" "root 600" "root's, 0600"
"$FLEETCTL" rm $C >/dev/null 2>&1; ok $? "rm $C"

done_testing
