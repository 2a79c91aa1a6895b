#!/bin/bash
# The guest's health service (agentd/health_server.h), run on the host:
# `agentd health-server` as root in a network namespace of this test's own
# (its loopback only), asked as fleetd asks through its SSH session
# ("health USER" on a connection). A user whose home takes a write is
# healthy; one whose home does not, root, an unknown user and a bad request
# are not; more requests than it serves at once all get their answer, and it
# leaves no zombie and no file but its kept one (what an agent puts at that
# name is left alone); a second service on the port gives way.
. "$FLEET_SRCDIR/tests/lib/common.sh"

[ "$(id -u)" = 0 ] || skip_all "needs root (the service drops privileges)"
for c in unshare nsenter useradd; do command -v $c >/dev/null || skip_all "$c not installed"; done
T=$TEST_TMP
U=flthc$$
chmod 0711 "$T"
mkdir "$T/home"
useradd -M -N -g nogroup -d "$T/home" -s /usr/sbin/nologin "$U" || fail_all "useradd $U"
on_exit "userdel $U"
chown "$U" "$T/home" && chmod 0700 "$T/home"

# A network namespace of our own, held by a sleep; the service and every client enter it.
unshare -n sleep 100000 &
NS=$!
_pids+=("$NS")
wait_ns() { [ "$(readlink /proc/$NS/ns/net)" != "$(readlink /proc/self/ns/net)" ]; }
for _ in $(seq 50); do wait_ns && break; sleep 0.1; done
nsenter -t "$NS" -n ip link set lo up 2>/dev/null || nsenter -t "$NS" -n ifconfig lo up 2>/dev/null
nsenter -t "$NS" -n "$AGENTD" health-server &
SERVER=$!
_pids+=("$SERVER")

# ask REQUEST: what the service answers a connection that sends REQUEST (printf's %b).
ask() {
	nsenter -t "$NS" -n timeout 20 bash -c 'exec 3<>/dev/tcp/127.0.0.1/877 || exit 1; printf "%b" "$1" >&3; cat <&3' _ "$1"
}
listening() { nsenter -t "$NS" -n bash -c 'exec 3<>/dev/tcp/127.0.0.1/877' 2>/dev/null; }
for _ in $(seq 50); do listening && break; sleep 0.1; done

is "$(ask "health $U\n")" healthy "a user whose home takes a write is healthy"
# The write is synced through a kept file (agentd/health.h): the first check makes it, later
# ones overwrite it in place; nothing else is left.
is "$(ls -A "$T/home")" .fleet-health "the check leaves only its kept file in the home"
is "$(stat -c '%U %a %s %h' "$T/home/.fleet-health")" "$U 600 3 1" "the user's, 0600, three bytes, one link"
ino=$(stat -c %i "$T/home/.fleet-health")
is "$(ask "health $U\n")" healthy "a second check is healthy"
is "$(stat -c %i "$T/home/.fleet-health"; ls -A "$T/home")" "$ino
.fleet-health" "and wrote the same kept file, nothing else"
# The home is the agent's: what it puts at the kept file's name is never written through nor
# followed, and the check still syncs a write (a new file's, as the first check does).
# kept_case WHAT CMD: with .fleet-health made by CMD (bash), the check passes and leaves it as it was.
kept_case() {
	local before after
	rm -rf "$T/home/.fleet-health" "$T/home/target"
	H=$T/home bash -ec "$2"
	before=$(stat -c '%F %s %i %U' "$T/home/.fleet-health"; cat "$T/home/target" 2>/dev/null)
	is "$(ask "health $U\n")" healthy "$1 at the kept file's name: healthy"
	after=$(stat -c '%F %s %i %U' "$T/home/.fleet-health"; cat "$T/home/target" 2>/dev/null)
	is "$after" "$before" "$1: left as it was"
	is "$(ls -A "$T/home" | grep -c '^\.fleet-health\.')" 0 "$1: no new file left behind"
}
kept_case "a link to the user's file" "echo data > \$H/target; chown $U \$H/target; ln -s target \$H/.fleet-health"
kept_case "a FIFO" "mkfifo \$H/.fleet-health; chown $U \$H/.fleet-health"
kept_case "a file of more than a few bytes" "seq 100 > \$H/.fleet-health; chown $U \$H/.fleet-health"
kept_case "root's file" "echo ok > \$H/.fleet-health"
kept_case "a second link to a file" "echo ok > \$H/target; chown $U \$H/target; ln \$H/target \$H/.fleet-health"
rm -rf "$T/home/.fleet-health" "$T/home/target"
is "$(ask "health $U\n")" healthy "with the name free again the check makes its kept file"
is "$(ls -A "$T/home")" .fleet-health "and leaves only it"
chmod 0500 "$T/home"
like "$(ask "health $U\n")" "^unhealthy: cannot write to the home: Permission denied$" \
	"a home that takes no write is unhealthy, and the answer says why"
chmod 0700 "$T/home"
is "$(ask "health root\n")" "agentd: health service: checks run as a user, not as root" "root is not checked"
like "$(ask "health nosuch$$\n")" "no user 'nosuch$$'" "an unknown user is not healthy"
for req in 'hello\n' 'health ../etc\n' 'health \n' "health $U $U\n" "health $(printf 'a%.0s' $(seq 56))"; do
	is "$(ask "$req")" "agentd: health service: the request is not 'health USER'" "a bad request ('$req') is refused"
done

# More at once than it serves (HEALTH_SERVER_MAX): the rest wait their turn.
clients=()
for i in $(seq 10); do ask "health $U\n" > "$T/answer.$i" & clients+=($!); done
wait "${clients[@]}"
is "$(cat "$T"/answer.* | sort | uniq -c | awk '{print $1, $2}')" "10 healthy" "ten requests at once: ten answers, all healthy"
# One child waits ahead for the next connection (agentd/health_server.h); no other is left.
children() { ps -o pid= --ppid "$SERVER" | wc -l; }
wait_gone() { [ "$(children)" = 1 ]; }
for _ in $(seq 50); do wait_gone && break; sleep 0.1; done
is "$(children)" 1 "no child of the service is left but the one waiting ahead"
is "$(ps -o stat= --ppid "$SERVER" | grep -c Z)" 0 "and that one is no zombie"

err=$(nsenter -t "$NS" -n "$AGENTD" health-server 2>&1); rc=$?
is "$rc" 1 "a second service on the same port exits"
like "$err" "cannot listen on 127.0.0.1:877" "and says why"
is "$(ask "health $U\n")" healthy "the first one serves on"

# The child waiting ahead ends with the service: a killed service leaves nothing listening.
spare=$(ps -o pid= --ppid "$SERVER" | tr -d ' ')
ok $([ -n "$spare" ] && echo 0 || echo 1) "a child waits ahead ($spare)"
kill "$SERVER"
spare_gone() { [ ! -e "/proc/$spare" ] || [ "$(awk '{print $3}' "/proc/$spare/stat" 2>/dev/null)" = Z ]; }
for _ in $(seq 50); do spare_gone && break; sleep 0.1; done
ok $(spare_gone && echo 0 || echo 1) "killing the service ends the child waiting ahead"
ok $(listening && echo 1 || echo 0) "and nothing listens on its port"
done_testing
