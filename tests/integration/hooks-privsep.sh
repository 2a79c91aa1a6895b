#!/bin/bash
# The webhook listener's privilege separation (#11), read from /proc of the
# running child: it runs as hooks_user (not root) with no capabilities at
# all, no_new_privs, its root the empty listener-root directory, no core, no
# new processes and bounded memory and fds; it holds no descriptor of the
# state dir or the database. As its uid and gid (setpriv, outside its
# chroot: stronger than the chroot, where the paths do not even exist) the
# database cannot be opened and the control socket cannot be connected to.
. "$FLEET_SRCDIR/tests/lib/common.sh"

[ "$(id -u)" = 0 ] || skip_all "needs root (fleetd drops the listener's privileges)"
command -v setpriv >/dev/null || skip_all "setpriv not installed"
PY=/usr/bin/python3	# the system's: pyenv shims are not for every user
[ -x "$PY" ] || skip_all "/usr/bin/python3 not installed"
U=uhp$(test_run_id)	# agent names and hooks_user of this run (two checkouts at once never collide)
HOOKS_USER=$U-hooks	# this test's hooks_user: fleetd creates it
. "$FLEET_SRCDIR/tests/lib/hooks.sh"

user_fleetd_setup uhp
hooks_fleetd_start; ok $? "fleetd starts with its listener (pid $HOOKS_PID)"
P=/proc/$HOOKS_PID
is "$(cat "$P/comm")" fleet-hooksd "the listener is fleet-hooksd"
is "$(awk '/^PPid:/ { print $2 }' "$P/status")" "$FLEETD_PID" "a child of fleetd"

# --- its user: hooks_user, made by fleetd as a system user without a login ---
uid=$(id -u "$HOOKS_USER" 2>/dev/null); gid=$(id -g "$HOOKS_USER" 2>/dev/null)
ok $([ -n "$uid" ] && [ "$uid" != 0 ] && echo 0 || echo 1) "fleetd made hooks_user $HOOKS_USER (uid $uid)"
like "$(getent passwd "$HOOKS_USER" | cut -d: -f7)" 'nologin|/bin/false' "with no login shell"
is "$(awk '/^Uid:/ { print $2, $3, $4, $5 }' "$P/status")" "$uid $uid $uid $uid" "real, effective, saved and fs uid: $HOOKS_USER's"
is "$(awk '/^Gid:/ { print $2, $3, $4, $5 }' "$P/status")" "$gid $gid $gid $gid" "and its gids"
is "$(awk '/^Groups:/ { print $2 }' "$P/status")" "" "no supplementary groups"

# --- no capabilities, no_new_privs ---
for c in CapEff CapPrm CapInh CapAmb; do
	is "$(awk -v c="$c:" '$1 == c { print $2 }' "$P/status")" 0000000000000000 "$c is empty"
done
is "$(awk '/^NoNewPrivs:/ { print $2 }' "$P/status")" 1 "NoNewPrivs is set"

# --- its root: the empty, root-owned listener-root ---
root=$(readlink "$P/root")
is "$root" "$STATE/listener-root" "its root directory is STATE/listener-root"
is "$(stat -c '%u %g %a %F' "$STATE/listener-root")" "0 0 555 directory" "a root-owned 0555 directory"
is "$(ls -A "$P/root/" | wc -l)" 0 "empty, as the listener sees it"
is "$(readlink "$P/cwd")" "$STATE/listener-root" "its working directory is that root"

# --- its limits ---
lim() { awk -v n="$1" 'index($0, n) == 1 { print $(NF - 2), $(NF - 1) }' "$P/limits"; }
is "$(lim 'Max core file size')" "0 0" "no core file"
is "$(lim 'Max file size')" "0 0" "no file may grow"
np=$(lim 'Max processes')	# counted per uid: the listener itself is one, so 0 or 1 both mean no fork
ok $([ "${np% *}" != unlimited ] && [ "${np% *}" -le 1 ] && [ "${np#* }" -le 1 ] && echo 0 || echo 1) "no new process ($np)"
as=$(lim 'Max address space'); fds=$(lim 'Max open files')
ok $([ "${as%% *}" != unlimited ] && echo 0 || echo 1) "a bounded address space ($as)"
ok $([ "${fds%% *}" != unlimited ] && [ "${fds%% *}" -le 66048 ] && echo 0 || echo 1) "a bounded fd count ($fds)"

# --- its descriptors: none on the state dir or the database ---
fdl=$(ls -l "$P/fd/" | awk 'NR > 1 { print $NF }')
diag "its fds: $(tr '\n' ' ' <<<"$fdl")"
is "$(grep -c "fleet.db" <<<"$fdl")" 0 "no fd open on the database"
is "$(grep -cF "$STATE" <<<"$fdl")" 0 "none anywhere in the state dir"
is "$(grep -cF "$SOCK" <<<"$fdl")" 0 "none on the control socket's path"
is "$(grep '^/' <<<"$fdl" | grep -vx '/dev/null' | wc -l)" 0 "no file but /dev/null"
is "$(readlink "$P/fd/0")" /dev/null "stdin is /dev/null"
like "$(readlink "$P/fd/3")" '^socket:' "fd 3: its socketpair to fleetd"
like "$(readlink "$P/fd/4")" '^socket:' "fd 4: the listening socket"

# --- as its uid: no database, no control socket ---
asuser() { setpriv --reuid="$uid" --regid="$gid" --clear-groups --no-new-privs "$@"; }
asuser true; ok $? "(setpriv can run a command as $HOOKS_USER)"
out=$(asuser cat "$STATE/fleet.db" 2>&1 >/dev/null); is $? 1 "as $HOOKS_USER the database cannot be read"
like "$out" "Permission denied" "(permission denied)"
out=$(asuser "$PY" -c 'import sys; open(sys.argv[1], "r+b")' "$STATE/fleet.db" 2>&1); ok $([ $? != 0 ] && echo 0 || echo 1) \
	"nor opened for writing"
out=$(asuser "$PY" -c '
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect(sys.argv[1])
except OSError as e:
    print("refused:", e.strerror); sys.exit(0)
s.sendall(b"GET /v1/status HTTP/1.0\r\n\r\n")
print(s.recv(100).split(b"\r\n")[0].decode())
' "$SOCK" 2>&1)
like "$out" '^refused: |^HTTP/1\.[01] 403' "as $HOOKS_USER the control socket cannot be used ($out)"
out=$(asuser ls "$STATE" 2>&1); ok $([ $? != 0 ] && echo 0 || echo 1) "nor the state dir listed"

# --- and it still serves: privsep did not stop it ---
printf '{}' > "$TEST_TMP/empty.json"
is "$(post /hooks/uhp-nosuch "$TEST_TMP/empty.json")" 404 "the listener answers (404 for no route)"
like "$("$FLEETCTL" status)" "webhooks: up on $HOOKS_ADDR" "fleetctl status: webhooks up"

done_testing
