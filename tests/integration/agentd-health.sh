#!/bin/bash
# The guest's health service (agentd/health_server.h), run on the host:
# `agentd health-server` as root in a network namespace of this test's own
# (its loopback only), asked as fleetd asks through its SSH session
# ("health USER" on a connection). A user whose home takes a write is
# healthy; one whose home does not, root, an unknown user and a bad request
# are not; more requests than it serves at once all get their answer, and it
# leaves no zombie and no file behind; a second service on the port gives way.
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
is "$(ls -A "$T/home")" "" "the check leaves nothing in the home"
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
children() { ps -o pid= --ppid "$SERVER" | wc -l; }
wait_gone() { [ "$(children)" = 0 ]; }
for _ in $(seq 50); do wait_gone && break; sleep 0.1; done
is "$(children)" 0 "no child (nor zombie) of the service is left"

err=$(nsenter -t "$NS" -n "$AGENTD" health-server 2>&1); rc=$?
is "$rc" 1 "a second service on the same port exits"
like "$err" "cannot listen on 127.0.0.1:877" "and says why"
is "$(ask "health $U\n")" healthy "the first one serves on"
done_testing
