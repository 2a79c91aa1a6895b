#!/bin/bash
# CPU per webhook delivery as instruction counts (not part of make check; not
# a TAP test). Unlike hooks-bench.sh's req/s and CPU time, Valgrind's
# callgrind counts (Ir) do not depend on the machine's load, so this can run
# on a shared host. fleetd and its fleet-hooksd run under callgrind while
# curl (--parallel-max 64) POSTs N signed 1 KiB GitHub-style deliveries, each
# with its own X-GitHub-Delivery; then the same with N2. Per delivery is
# (Ir at N2 - Ir at N) / (N2 - N): fleetd's and the listener's start-up and
# the set-up (agent, route) cancel out.
#
#   norun  the agent's filter (--events release) takes no push: each 202 is
#          a stored delivery that queues no run (hooks-bench's fleet-norun);
#   runs   a run of `true` per delivery (a user agent); the script waits
#          until every run has ended, so fleetd's side of each run (start,
#          sandbox launch, end, the health check after it) is in the count.
#   queued each delivery queues a run (the delivery and its queued run in the
#          commit before the 202, as in runs), but none executes: the
#          agent's runs go one at a time, and a run triggered by hand before
#          the deliveries (its command sleeps when FLEET_TRIGGER is manual)
#          is still running (hooks-bench's fleet-queued). The durable
#          acknowledgement path with a run queued, without the runs' cost.
#
# Only instructions in user space are counted: not the kernel's (syscalls,
# fsync, fork's page tables), nor the runs' own processes (not traced). Under
# valgrind fleetd is ~50x slower, so its timers (health and schedule ticks)
# fire more often per delivery than at full speed, most in the runs mode.
#
# A dev-only build: fleet-hooksd chroots to an empty directory and sets
# RLIMIT_FSIZE and RLIMIT_AS to 0 and a few MiB (listener/privsep.c), so
# callgrind could neither write its profile nor run in it. This script
# builds BUILD/daemon/fleet-hooksd.prof from the same objects with a copy of
# privsep.c that skips the chroot and those two limits (it still drops to
# the listener's user), and never installs it: the per-request code is the
# same. fleetd is copied beside it (it starts the fleet-hooksd next to its
# own executable), with a wrapper of that name that starts it under callgrind.
#
# Usage: tests/bench/hooks-callgrind.sh [--mode norun|runs|queued] [--n N] [--n2 N2] [--keep DIR]
#   defaults: norun and queued N=200, N2=2200; runs N=100, N2=400 (each run takes ~2 s under valgrind)
# Env (as for make check): FLEET_SRCDIR, FLEET_BUILDDIR. Needs root, valgrind, curl, jq, sqlite3, openssl.
# Prints: "fleetd Ir/delivery", "fleet-hooksd Ir/delivery", and with --keep the callgrind files
# (callgrind_annotate --inclusive=yes FILE shows where).
set -u

MODE=norun N= N2= KEEP=
while [ $# -gt 0 ]; do
	case $1 in
	--mode) MODE=$2; shift 2 ;;
	--n) N=$2; shift 2 ;;
	--n2) N2=$2; shift 2 ;;
	--keep) KEEP=$2; shift 2 ;;
	-h|--help) sed -n '2,41p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "hooks-callgrind: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done
case $MODE in
norun|queued) N=${N:-200} N2=${N2:-2200} ;;
runs) N=${N:-100} N2=${N2:-400} ;;
*) echo "hooks-callgrind: --mode norun, runs or queued" >&2; exit 2 ;;
esac
[ "$N2" -gt "$N" ] 2>/dev/null || { echo "hooks-callgrind: --n2 must be larger than --n" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "hooks-callgrind: needs root" >&2; exit 77; }
for c in valgrind callgrind_annotate curl jq sqlite3 openssl; do
	command -v $c >/dev/null || { echo "hooks-callgrind: needs $c" >&2; exit 77; }
done
FLEET_SRCDIR=${FLEET_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
FLEET_BUILDDIR=${FLEET_BUILDDIR:-$PWD}
B=$FLEET_BUILDDIR
die() { echo "hooks-callgrind: $*" >&2; exit 1; }
for x in daemon/fleetd daemon/fleet-init ctl/fleetctl listener/daemon_fleet_hooksd-main.o; do
	[ -e "$B/$x" ] || die "not built: $B/$x (run from the build directory)"
done
exec 9>/run/lock/fleet-hooks-callgrind.lock && flock -n 9 || die "another hooks-callgrind.sh is running"

W=$(mktemp -d /tmp/fleet-hkcg.XXXXXX) || exit 1
chmod 0755 "$W"
HU=fleet-hkcg AG=hkcgsink UMIN=4740000	# an agent NAME has the Unix user fleet-NAME
HU_EXISTED=$(getent passwd "$HU" >/dev/null && echo yes)
FPID= STATE=
FC() { timeout 300 "$B/ctl/fleetctl" "$@"; }
cleanup() {
	set +e
	if [ -n "$FPID" ] && kill -0 "$FPID" 2>/dev/null; then
		FC rm --force "$AG" >/dev/null 2>&1	# if it was made: its user and processes go with it
		kill -TERM "$FPID"
		for _ in $(seq 300); do kill -0 "$FPID" 2>/dev/null || break; sleep 0.2; done
		kill -KILL "$FPID" 2>/dev/null
	fi
	[ -n "$HU_EXISTED" ] || ! getent passwd "$HU" >/dev/null || userdel "$HU" 2>/dev/null
	[ -z "$KEEP" ] || { mkdir -p "$KEEP" && cp -r "$W"/run-* "$KEEP/" 2>/dev/null; }
	[ -z "$STATE" ] || { umount -l "$STATE/users" "$STATE/netns" 2>/dev/null; rm -rf "$STATE"; }	# mounts of their own
	rm -rf "$W"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The profiling listener: privsep.c without the chroot and the FSIZE/AS limits.
sed -e 's|if (chroot(root) < 0)|if (0)|' \
    -e 's|limit(RLIMIT_FSIZE, "RLIMIT_FSIZE", 0) < 0 \|\||0 \|\||' \
    -e 's|if (limit(RLIMIT_AS, "RLIMIT_AS", PRIVSEP_AS_MAX) < 0)|if (0)|' \
    "$FLEET_SRCDIR/listener/privsep.c" > "$W/privsep-prof.c"
[ "$(grep -c 'if (0)' "$W/privsep-prof.c")" = 2 ] && ! grep -q 'RLIMIT_FSIZE", 0)' "$W/privsep-prof.c" ||
	die "listener/privsep.c changed: update the edits of this script"
(cd "$B" && gcc -DHAVE_CONFIG_H -include ./autoconfig.h -std=c11 -D_GNU_SOURCE -I. -I"$FLEET_SRCDIR" \
	$(pkg-config --cflags libevent jansson libcrypto) -g -O2 -c "$W/privsep-prof.c" -o "$W/privsep-prof.o" &&
	gcc -g -O2 -o "$W/fleet-hooksd.prof" listener/daemon_fleet_hooksd-main.o "$W/privsep-prof.o" \
		listener/daemon_fleet_hooksd-conn.o listener/daemon_fleet_hooksd-http.o listener/daemon_fleet_hooksd-link.o \
		hooks/libhooks.a model/libmodel.a common/libfleetcommon.a -levent -ljansson -lcrypto) ||
	die "cannot build the profiling listener"

SECRET=0123456789abcdef0123456789abcdef
head='{"ref":"refs/heads/main","before":"6113728f27ae82c7b1a177c8d03f9e96e0adf246","after":"59b20b8d5c6ff8d09518454d4dd8b7b30f095ab5","repository":{"id":17273051,"full_name":"octo-org/octo-repo","private":true},"pusher":{"name":"octocat"},"commits":[{"id":"59b20b8d5c6ff8d09518454d4dd8b7b30f095ab5","message":"'
tail='"}]}'
{ printf '%s' "$head"; head -c $((1024 - ${#head} - ${#tail})) /dev/zero | tr '\0' 'x'; printf '%s' "$tail"; } > "$W/body.json"
SIG=sha256=$(openssl dgst -sha256 -hmac "$SECRET" -r < "$W/body.json" | cut -d' ' -f1)

# one_run COUNT: everything started, COUNT deliveries, everything stopped; leaves $W/run-COUNT/{fleetd,hooksd}.out
one_run() {
	local count=$1 R=$W/run-$1 L A0 A1 left cmd=true st
	mkdir -p "$R/bin" "$R/out" && chmod 0755 "$R" "$R/bin" && chmod 0777 "$R/out"
	cp "$B/daemon/fleetd" "$B/daemon/fleet-init" "$R/bin/" && cp "$W/fleet-hooksd.prof" "$R/bin/fleet-hooksd.real"
	printf '#!/bin/sh\nexec valgrind --vgdb=no --tool=callgrind --callgrind-out-file=%s/out/hooksd.%%p %s/bin/fleet-hooksd.real "$@"\n' \
		"$R" "$R" > "$R/bin/fleet-hooksd"
	chmod 0755 "$R/bin/fleet-hooksd"
	STATE=$(mktemp -d /var/lib/fleet-hkcg.XXXXXX) || exit 1
	export FLEET_SOCKET=$R/fleetd.sock
	: > "$R/none.conf"
	valgrind --vgdb=no --tool=callgrind --callgrind-out-file="$R/out/fleetd.%p" "$R/bin/fleetd" --foreground \
		--state-dir "$STATE" --socket "$FLEET_SOCKET" --config "$R/none.conf" --hooks-listen 127.0.0.1:0 \
		--hooks-user "$HU" --user-uid-min $UMIN --user-uid-max $((UMIN + 999)) 2>"$R/fleetd.err" &
	FPID=$!
	for _ in $(seq 600); do [ "$(FC --json status 2>/dev/null | jq -r '.hooks.state')" = up ] && break; sleep 0.2; done
	L=$(FC --json status | jq -r '.hooks.listen // empty')
	[ -n "$L" ] || die "fleetd's listener did not come up: $(grep -v '^==' "$R/fleetd.err" | tail -3)"
	# The listener's profile file was made as root before it dropped to $HU: its to write at exit.
	chown "$HU" "$R"/out/hooksd.* || die "no profile file of the listener"
	local ev=()
	[ "$MODE" = norun ] && ev=(--events release)
	# queued: a webhook's run would be `true`; the one triggered by hand sleeps (a week, its --run-timeout).
	[ "$MODE" = queued ] && cmd='case $FLEET_TRIGGER in manual) exec sleep 604800 ;; esac; true'
	FC create "$AG" --backend user --memory 128 --command "$cmd" --max-queued 100000 --restart never \
		--health-interval 0 --run-timeout 604800 >/dev/null || die "fleetctl create failed"
	printf '%s\n' "$SECRET" | FC hook add "$AG" --source github --route "$AG" "${ev[@]}" >/dev/null ||
		die "fleetctl hook add failed"
	FC start "$AG" >/dev/null || die "fleetctl start failed"
	if [ "$MODE" = queued ]; then
		FC trigger "$AG" >/dev/null || die "fleetctl trigger failed"
		for _ in $(seq 600); do
			st=$(FC --json runs "$AG" --limit 1 | jq -r '.[0].state')
			[ "$st" = running ] && break
			sleep 0.2
		done
		[ "$st" = running ] || die "the run triggered by hand is $st, not running"
	fi
	A0=$(FC --json status | jq -r '.hooks.accepted')
	for i in $(seq "$count"); do
		printf 'url = "http://%s/hooks/%s"\nheader = "Content-Type: application/json"\n' "$L" "$AG"
		printf 'header = "X-GitHub-Event: push"\nheader = "X-GitHub-Delivery: cg-%s-%d"\n' "$count" "$i"
		printf 'header = "X-Hub-Signature-256: %s"\ndata-binary = "@%s"\n' "$SIG" "$W/body.json"
		printf 'output = "/dev/null"\nwrite-out = "%%{http_code}\\n"\n'
		[ "$i" -lt "$count" ] && echo next
	done > "$R/curl.cfg"
	curl -s --no-progress-meter --parallel --parallel-max 64 -K "$R/curl.cfg" > "$R/codes" 2>&1
	[ "$(grep -c '^202$' "$R/codes")" = "$count" ] || die "not every delivery got 202: $(sort "$R/codes" | uniq -c | tr '\n' ' ')"
	if [ "$MODE" = runs ]; then
		for _ in $(seq 3600); do
			left=$(sqlite3 -readonly "file:$STATE/fleet.db?mode=ro" \
				"SELECT count(*) FROM runs WHERE state NOT IN ('succeeded', 'failed')" 2>/dev/null)
			[ "$left" = 0 ] && break
			sleep 1
		done
		[ "$left" = 0 ] || die "runs still not ended after an hour"
	elif [ "$MODE" = queued ]; then
		left=$(sqlite3 -readonly "file:$STATE/fleet.db?mode=ro" "SELECT count(*) FROM runs WHERE state = 'queued'")
		[ "$left" = "$count" ] || die "$left runs queued, not $count"
	fi
	A1=$(FC --json status | jq -r '.hooks.accepted')
	[ $((A1 - A0)) = "$count" ] || die "fleetd stored $((A1 - A0)) deliveries, not $count"
	# Stopped, then removed by a fleetd not under callgrind: the removal's cost grows with COUNT (its rows).
	# (queued: not stopped; the end of the run held by hand would let the next one start the environment again.)
	[ "$MODE" = queued ] || FC stop "$AG" >/dev/null 2>&1
	kill -TERM "$FPID"
	for _ in $(seq 600); do kill -0 "$FPID" 2>/dev/null || break; sleep 0.2; done
	"$B/daemon/fleetd" --foreground --state-dir "$STATE" --socket "$FLEET_SOCKET" --config "$R/none.conf" \
		--hooks-user "$HU" --user-uid-min $UMIN --user-uid-max $((UMIN + 999)) 2>"$R/fleetd-rm.err" &
	FPID=$!
	for _ in $(seq 300); do FC status >/dev/null 2>&1 && break; sleep 0.2; done
	FC rm --force "$AG" >/dev/null || echo "hooks-callgrind: fleetctl rm --force $AG failed" >&2
	kill -TERM "$FPID"
	for _ in $(seq 300); do kill -0 "$FPID" 2>/dev/null || break; sleep 0.2; done
	FPID=
	umount -l "$STATE/users" "$STATE/netns" 2>/dev/null
	rm -rf "$STATE"
	STATE=
	for p in fleetd hooksd; do
		callgrind_annotate "$R"/out/$p.* 2>/dev/null | sed -n 's/^ *\([0-9,]*\) .*PROGRAM TOTALS.*/\1/p' | tr -d , > "$R/$p.total"
		[ -s "$R/$p.total" ] || die "no callgrind total for $p"
	done
}

one_run "$N"
one_run "$N2"
for p in fleetd hooksd; do
	a=$(cat "$W/run-$N/$p.total") b=$(cat "$W/run-$N2/$p.total")
	echo "$MODE $([ $p = hooksd ] && echo fleet-hooksd || echo fleetd) Ir/delivery $(( (b - a) / (N2 - N) ))"
done
