#!/bin/bash
# fleetd's life cycle: detaching, foreground logging, the state dir lock,
# the socket guard, clean shutdown on SIGTERM and SIGINT, help and version.
. "$FLEET_SRCDIR/tests/lib/common.sh"

start_fleetd one || { ok 1 "fleetd starts"; done_testing; }
check "detached fleetd answers as soon as the start command returns" -- "$FLEETCTL" status
is "$(head -1 "$STATE/fleetd.lock")" "$FLEETD_PID" "lock file holds the daemon's pid"
like "$(cat "$STATE/fleetd.log")" "^<[0-9]>fleetd: " "log lines carry syslog priority prefixes"

err=$("$FLEETD" --state-dir "$STATE" --socket "$TEST_TMP/other.sock" --config "$TEST_TMP/none.conf" 2>&1); rc=$?
is "$rc" 1 "a second fleetd on the same state dir exits 1"
like "$err" "state directory $STATE is in use by another fleetd \(pid $FLEETD_PID\)" "with a clear error naming the pid"
check "the first fleetd is unharmed" -- "$FLEETCTL" status

err=$("$FLEETD" --state-dir "$TEST_TMP/two" --socket "$SOCK" --config "$TEST_TMP/none.conf" 2>&1); rc=$?
is "$rc" 1 "a second fleetd on a live socket exits 1"
like "$err" "is served by another running process" "and does not steal the socket"
check "the first fleetd still owns its socket" -- "$FLEETCTL" status

stop_fleetd TERM; ok $? "SIGTERM stops fleetd"
check "the socket is removed on clean shutdown" -- test ! -e "$SOCK"
like "$(tail -1 "$STATE/fleetd.log")" "stopped" "shutdown is logged"

# Foreground: logs to stderr, SIGINT stops it with exit 0.
"$FLEETD" --foreground --state-dir "$TEST_TMP/fg" --socket "$TEST_TMP/fg.sock" --config "$TEST_TMP/none.conf" \
	--log-level debug 2>"$TEST_TMP/fg.err" &
fg=$!; _pids+=("$fg")
for ((i = 0; i < 500; i++)); do [ -S "$TEST_TMP/fg.sock" ] && break; sleep 0.01; done
check "foreground fleetd serves its socket" -- "$FLEETCTL" -s "$TEST_TMP/fg.sock" status
kill -INT "$fg"; wait "$fg"; rc=$?
is "$rc" 0 "SIGINT stops the foreground fleetd with exit 0"
like "$(cat "$TEST_TMP/fg.err")" "^<7>fleetd: api: uid 0 GET /v1/status" "foreground logs to stderr, debug at <7>"
like "$(cat "$TEST_TMP/fg.err")" "<5>fleetd: received SIGINT, shutting down" "SIGINT is logged at notice"

# A stale socket left by kill -9 is taken over; the stale lock is free.
start_fleetd three
stop_fleetd KILL
check "kill -9 leaves the socket file behind" -- test -S "$SOCK"
start_fleetd three; ok $? "a new fleetd replaces the stale socket"
stop_fleetd

# Help, version, usage errors.
help=$("$FLEETD" --help); ok $? "--help exits 0"
for opt in --foreground --config --check-config --state-dir --socket --socket-group --log-level --log-file --max-body-bytes --user-uid-min --user-uid-max --libvirt-uri --image-dir; do
	like "$help" "  $opt( |$)" "--help documents $opt"
done
like "$("$FLEETD" --version)" "^fleetd [0-9]+\.[0-9]+\.[0-9]+$" "--version"
"$FLEETD" --bogus >/dev/null 2>&1; is "$?" 2 "an unknown option exits 2"
"$FLEETD" extra >/dev/null 2>&1; is "$?" 2 "a stray argument exits 2"
err=$("$FLEETD" --state-dir relative 2>&1); is "$?" 2 "a relative --state-dir exits 2"
like "$err" "--state-dir 'relative' must be an absolute path" "and says why"

# agentd builds and answers.
like "$("$AGENTD" --version)" "^agentd [0-9]" "agentd --version"
like "$("$AGENTD" --help)" "relay \[--port NAME\]" "agentd --help lists its commands"
"$AGENTD" frob >/dev/null 2>&1; is "$?" 2 "agentd with an unknown command exits 2"
is "$("$AGENTD" run-as nobody -- id -un)" nobody "agentd run-as drops to the user"
is "$("$AGENTD" run-as nobody -- id -G)" "$(id -g nobody)" "with no supplementary groups"
is "$("$AGENTD" run-as nobody -- sh -c 'echo $HOME $USER')" "$(getent passwd nobody | cut -d: -f6) nobody" "and its HOME and USER"
err=$("$AGENTD" run-as no-such-user -- true 2>&1); is "$?" 126 "run-as an unknown user exits 126"
is "$err" "agentd: run-as: no user 'no-such-user' in /etc/passwd" "and says so (no NSS crash in the static agentd)"
# A user with supplementary groups gets /etc/group's, as a login does (common/users.h).
groupadd "fltdg$$" && on_exit "groupdel fltdg$$"
if useradd -M -N -g nogroup -G "fltdg$$" -s /usr/sbin/nologin "fltd$$"; then
	on_exit "userdel fltd$$"
	is "$("$AGENTD" run-as "fltd$$" -- id -G)" "$(id -G "fltd$$")" "run-as: a user's supplementary groups, as id(1) lists them"
	like " $("$AGENTD" run-as "fltd$$" -- id -G) " " $(getent group "fltdg$$" | cut -d: -f3) " "  the new group among them"
else
	ok 0 "useradd works"
fi
"$AGENTD" run-as nobody -- /no/such/program 2>/dev/null; is "$?" 127 "run-as a missing program exits 127"
is "$(FLEET_LEAK=x "$AGENTD" run-as nobody --env A=1 --env 'B=x y' -- sh -c 'echo "$A|$B|${FLEET_LEAK-unset}"')" \
	"1|x y|unset" "run-as: --env reaches the command, its caller's environment does not"
is "$("$AGENTD" run-as nobody --env HOME=/elsewhere -- sh -c 'echo $HOME')" /elsewhere "--env is applied last"
is "$("$AGENTD" run-as nobody -- sh -c 'echo $$ $(cut -d" " -f6 /proc/$$/stat)' | awk '{print ($1 == $2)}')" 1 \
	"run-as: the command leads its own session"
"$AGENTD" run-as nobody --env 1A=x -- true 2>/dev/null; is "$?" 2 "run-as: a bad --env name exits 2"
"$AGENTD" run-as nobody --env A=1 2>/dev/null; is "$?" 2 "run-as: no -- CMD exits 2"

done_testing
