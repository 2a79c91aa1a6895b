# Shared helpers for integration tests: TAP output, a private fleetd per
# test on a temp state dir and socket, and cleanup of everything started.
# Source it; then call plan-less checks and finish with `done_testing`.

set -u
: "${FLEETD:?run through make check (FLEETD unset)}"
: "${FLEETCTL:?run through make check}"

TEST_TMP=$(mktemp -d /tmp/fleet-test.XXXXXX)
chmod 0755 "$TEST_TMP"
_tap_n=0
_tap_failed=0
_pids=()
_cleanups=()

ok() {	# ok COND-EXIT-STATUS DESCRIPTION; returns COND-EXIT-STATUS
	local status=$1; shift
	_tap_n=$((_tap_n + 1))
	if [ "$status" -eq 0 ]; then
		echo "ok $_tap_n - $*"
	else
		echo "not ok $_tap_n - $*"
		# "# TODO why" in DESCRIPTION: a known bug; TAP counts it as an expected failure
		case "$*" in *"# TODO"*) ;; *) _tap_failed=$((_tap_failed + 1)) ;; esac
	fi
	return "$status"	# so a test can add: ok $? "..." || diag "what went wrong"
}

check() {	# check DESCRIPTION -- COMMAND...: passes when COMMAND exits 0
	local desc=$1; shift; [ "$1" = "--" ] && shift
	"$@" >/dev/null 2>&1
	ok $? "$desc"
}

is() {	# is GOT WANT DESCRIPTION; returns 0 when equal, so `is ... || diag ...` works
	if [ "$1" = "$2" ]; then ok 0 "$3"; else ok 1 "$3"; echo "#   got:  '$1'"; echo "#   want: '$2'"; return 1; fi
}

like() {	# like TEXT PATTERN DESCRIPTION (grep -E); returns 0 on a match
	if printf '%s' "$1" | grep -qE -- "$2"; then ok 0 "$3"; else ok 1 "$3"; echo "#   '$1'"; echo "#   does not match /$2/"; return 1; fi
}

isnt_rc() { [ "$1" != 0 ]; }	# isnt_rc STATUS: true when a command failed, for ok/check
diag() { printf '# %s\n' "$@"; }

# Skip the whole file when a prerequisite is missing, except under CI=true,
# where a missing prerequisite is a failure: CI must never pass silently.
# Only before the first result: a skip plan after results is invalid TAP
# (the driver reports an error, or worse, the results before it are lost),
# so a late call is a failure of the test file, CI or not.
skip_all() {
	if [ "$_tap_n" -gt 0 ]; then
		echo "not ok $((_tap_n + 1)) - skip_all after $_tap_n results (check prerequisites first): $*"
		echo "1..$((_tap_n + 1))"
		exit 1
	fi
	if [ "${CI:-}" = true ]; then
		echo "not ok 1 - prerequisite missing under CI: $*"
		echo "1..1"
		exit 1
	fi
	echo "1..0 # SKIP $*"
	exit 0
}

# Fail the whole file: a prerequisite that must never be skipped is missing.
fail_all() {
	echo "not ok 1 - $*"
	echo "1..1"
	exit 1
}

# test_run_id: a short id of this run ([a-z0-9], 4 characters) for agent
# names, so two runs of the same test file at once (two checkouts on one
# host) never share an agent: user agents are host-wide Unix users
# fleet-NAME. From the test's temp dir.
test_run_id() { printf '%s' "$TEST_TMP" | cksum | awk '{ printf "%04x", $1 % 65536 }'; }

on_exit() { _cleanups+=("$*"); }

# _umount_under DIR: lazily unmount whatever is mounted below DIR, deepest
# first: the memory stores (loop-mounted images) of user agents whose fleetd
# is gone. Before an rm -rf, which would empty them and stop at each mount.
_umount_under() {
	local t
	findmnt -rn -o TARGET 2>/dev/null | awk -v d="${1%/}/" 'index($0, d) == 1' | sort -r |
		while read -r t; do umount -l "$t" 2>/dev/null; done
}

_cleanup() {
	local i
	for ((i = ${#_cleanups[@]} - 1; i >= 0; i--)); do eval "${_cleanups[$i]}" >/dev/null 2>&1 || true; done
	for pid in "${_pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
	_umount_under "$TEST_TMP"
	rm -rf "$TEST_TMP"
}
trap _cleanup EXIT

done_testing() {
	echo "1..$_tap_n"
	[ "$_tap_failed" -eq 0 ]
	exit $?
}

# User agents are real Unix users and test files run in parallel: each file
# gets its own uid range, and every agent a test's fleetd still has at exit
# is removed (rm --force) before fleetd is killed.
_uid_base=$(( 3000000 + ($(printf '%s' "$0" | cksum | cut -d' ' -f1) % 900) * 1000 ))
_agents_cleanup_registered=
_remove_agents() {
	local sock a u
	for sock in "${_sockets[@]}"; do
		for a in $("$FLEETCTL" -s "$sock" --json list 2>/dev/null | jq -r '.[].name' 2>/dev/null); do
			"$FLEETCTL" -s "$sock" rm --force "$a" >/dev/null 2>&1
		done
	done
	# Safety net for agents of a fleetd that was already stopped (or could not
	# start): only users whose home lies in this test's own temp dir or state
	# dirs, their processes by PID, then those left in their cgroups (the
	# sandbox's init runs as root).
	local d cg
	for d in "$TEST_TMP" "${_state_dirs[@]}"; do
		for u in $(getent passwd | awk -F: -v d="$d/" 'index($6, d) == 1 { print $1 }'); do
			ps -o pid= -u "$u" 2>/dev/null | xargs -r kill -9 2>/dev/null
			for cg in /sys/fs/cgroup/*/fleet/"${u#fleet-}" /sys/fs/cgroup/fleet/"${u#fleet-}"; do
				[ -f "$cg/cgroup.procs" ] && xargs -r kill -9 < "$cg/cgroup.procs" 2>/dev/null
			done
			sleep 0.2
			userdel "$u" 2>/dev/null
			groupdel "$u" 2>/dev/null
			# and its cgroups (empty now: rmdir removes nothing else), in every hierarchy
			find /sys/fs/cgroup -maxdepth 7 -type d -path "*/fleet/${u#fleet-}" -exec rmdir {} + 2>/dev/null
		done
	done
}
_state_dirs=()
_sockets=()

# start_fleetd NAME [ARGS...]: start a detached fleetd with state in
# $TEST_TMP/NAME and socket $TEST_TMP/NAME.sock. fleetd returns only once its
# socket is ready, so no sleeping. Sets SOCK, STATE and FLEETD_PID.
start_fleetd() {
	local name=$1; shift
	STATE=$TEST_TMP/$name
	SOCK=$TEST_TMP/$name.sock
	local uids=(--user-uid-min "$_uid_base" --user-uid-max "$((_uid_base + 999))")
	case " $* " in *" --user-uid-min "*) uids=() ;; esac
	if [ -z "$_agents_cleanup_registered" ]; then
		on_exit _remove_agents
		_agents_cleanup_registered=1
	fi
	_sockets+=("$SOCK")
	"$FLEETD" --state-dir "$STATE" --socket "$SOCK" --config "$TEST_TMP/none.conf" "${uids[@]}" \
		$(_hooks_listen_default "$@") "$@" \
		2>"$TEST_TMP/$name.start.err" || {
		diag "fleetd failed to start:"; sed 's/^/#   /' "$TEST_TMP/$name.start.err"; return 1; }
	FLEETD_PID=$(head -1 "$STATE/fleetd.lock")
	_pids+=("$FLEETD_PID")
	export FLEET_SOCKET=$SOCK
}
# The config file of every test's fleetd: no webhook listener, so parallel
# tests never fight over 127.0.0.1:8470 (nor make its user); a test that
# wants one passes its own --hooks-listen (the command line wins).
echo "hooks_listen = none" > "$TEST_TMP/none.conf"
# _hooks_listen_default ARGS...: "--hooks-listen none" unless ARGS give one.
_hooks_listen_default() {
	case " $* " in *" --hooks-listen "*) ;; *) echo "--hooks-listen none" ;; esac
}

# user_fleetd_setup TAG: a state dir and socket for a fleetd serving user
# agents, outside /tmp (each exec has a private /tmp); removed on exit.
# Then user_fleetd_start (again after a kill, to restart it on the same state).
user_fleetd_setup() {
	STATE=$(mktemp -d "/var/lib/fleet-$1.XXXXXX"); SOCKDIR=$(mktemp -d "/run/fleet-$1.XXXXXX")
	_state_dirs+=("$STATE")
	on_exit "_umount_under '$STATE'; rm -rf '$STATE' '$SOCKDIR'"
	chmod 0755 "$SOCKDIR"
	SOCK=$SOCKDIR/fleetd.sock
	export FLEET_SOCKET=$SOCK
	on_exit _remove_agents
}
user_fleetd_start() {
	"$FLEETD" --state-dir "$STATE" --socket "$SOCK" --config "$TEST_TMP/none.conf" \
		--user-uid-min "$_uid_base" --user-uid-max "$((_uid_base + 999))" $(_hooks_listen_default "$@") "$@" \
		2>>"$TEST_TMP/start.err" || {
		diag "fleetd failed to start:"; sed 's/^/#   /' "$TEST_TMP/start.err"; return 1; }
	FLEETD_PID=$(head -1 "$STATE/fleetd.lock"); _pids+=("$FLEETD_PID"); _sockets+=("$SOCK")
}

# user_fleetd_kill_restart [ARGS...]: kill -9 the current fleetd, wait until its
# pid is really gone (stop_fleetd KILL), and start it again on the same state
# (user_fleetd_start ARGS). Fails when fleetd had already exited, or does not start.
user_fleetd_kill_restart() {
	stop_fleetd KILL || return 1
	user_fleetd_start "$@"
}

# wait_agent_state NAME STATE: until `fleetctl show NAME` says STATE, at most
# about 5 minutes; fails past that (the test's assertion follows).
wait_agent_state() {
	local i
	for ((i = 0; i < 6000; i++)); do
		[ "$("$FLEETCTL" --json show "$1" | jq -r .state)" = "$2" ] && return 0
		sleep 0.05
	done
	return 1
}

# spare_of AGENT: the pid of the agent's waiting spare (named fleet-spare, in its cgroup), if one waits.
spare_of() {
	local p
	for p in /proc/[0-9]*; do
		[ "$(cat $p/comm 2>/dev/null)" = fleet-spare ] || continue
		grep -q '^State:[[:space:]]*Z' $p/status 2>/dev/null && continue
		grep -qE ":/fleet/$1\$" $p/cgroup 2>/dev/null && echo ${p#/proc/}
	done
}
# wait_spare AGENT: until a spare waits (it is made after an exec, on fleetd's loop); prints its pid.
wait_spare() {
	local i s
	for ((i = 0; i < 500; i++)); do
		s=$(spare_of "$1"); [ -n "$s" ] && { echo "$s"; return 0; }
		sleep 0.01
	done
	return 1
}
# keeper_of AGENT: the user agent's keeper, the live sandbox init (fleet-init,
# root) in its cgroup, whoever its parent (fleetd, or init after fleetd died).
keeper_of() {
	local p
	for p in /proc/[0-9]*; do
		[ "$(cat $p/comm 2>/dev/null)" = fleet-init ] || continue
		# A dead one stays a zombie until whoever inherited it (not fleetd) reaps it: not a sandbox.
		grep -q '^State:[[:space:]]*Z' $p/status 2>/dev/null && continue
		grep -qE ":/fleet/$1\$" $p/cgroup 2>/dev/null && echo ${p#/proc/}
	done
}

# stop_fleetd [SIGNAL]: stop the current fleetd and wait for it to exit.
# Fails when fleetd had already exited before the signal (it crashed, or
# something else stopped it: a test must not count that as "stopped"), or
# when it is still there after 60 s.
stop_fleetd() {
	local sig=${1:-TERM} i
	# The comm check: a dead fleetd's pid may belong to someone else by now.
	if [ "$(cat "/proc/${FLEETD_PID:-none}/comm" 2>/dev/null)" != fleetd ] ||
		! kill -"$sig" "$FLEETD_PID" 2>/dev/null; then
		diag "stop_fleetd: fleetd (pid ${FLEETD_PID:-none}) had already exited"
		return 1
	fi
	for ((i = 0; i < 6000; i++)); do
		kill -0 "$FLEETD_PID" 2>/dev/null || return 0
		sleep 0.01
	done
	diag "stop_fleetd: fleetd (pid $FLEETD_PID) still runs 60 s after SIG$sig"
	return 1
}

# run_wait AGENT RUN [MAX_S]: until the run has ended (at most MAX_S, 120 s
# unless told: a VM run under TCG wants more); prints its final state, or the
# last one seen and fails.
run_wait() {
	local deadline=$((SECONDS + ${3:-120})) st
	while st=$("$FLEETCTL" --json runs "$1" "$2" 2>/dev/null | jq -r .state); do
		case $st in succeeded | failed | timed-out | cancelled | interrupted) echo "$st"; return 0 ;; esac
		[ $SECONDS -ge $deadline ] && break
		sleep 0.2
	done
	echo "${st:-unknown}"
	return 1
}

# api METHOD PATH [BODY]: curl the control API; prints "BODY STATUS", so
# ${out##* } is the status and ${out% *} the body.
api() {
	local method=$1 path=$2 body=${3-}
	if [ $# -ge 3 ]; then
		curl -sS --unix-socket "$SOCK" -X "$method" -H 'Content-Type: application/json' \
			--data-binary "$body" -w ' %{http_code}' "http://fleet$path"
	else
		curl -sS --unix-socket "$SOCK" -X "$method" -w ' %{http_code}' "http://fleet$path"
	fi
}
