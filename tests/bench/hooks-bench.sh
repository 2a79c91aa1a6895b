#!/bin/bash
# Benchmark of the webhook listener (not part of make check; not a TAP test).
# Signed GitHub-style deliveries of 1 KiB (X-Hub-Signature-256 over the body,
# a new X-GitHub-Delivery per request, so none is a duplicate), from one load
# generator (Debian's wrk with tests/bench/hooks-bench.lua, one thread) at
# 8 and 64 connections, against, in the same run and on loopback only:
#
#   bare     tests/bench/bare-evhttp.c: libevent's evhttp answering 202 and
#            doing nothing (built here with cc and pkg-config libevent);
#   bare-close  the same answering "Connection: close", one request per
#            connection (the cost of connecting);
#   bare-durable  the same server appending each body to a file in the
#            state dir's file system and answering a batch only after one
#            fdatasync of it (group commit, no database, no checks): the
#            ceiling that this disk's sync latency sets for any receiver
#            that acknowledges only what is on disk, at N connections
#            about N / (one sync's time);
#   webhook  Debian's `webhook` tool (package webhook) with a hooks.json that
#            checks the same signature (a payload-hmac-sha256 trigger rule)
#            and runs /bin/true;
#   fleet    fleetd and its listener (--hooks-listen 127.0.0.1:0, a private
#            state dir and socket), a user agent subscribed to a github
#            route whose command is `true`: every 202 is a delivery and a
#            queued run committed to SQLite (synchronous=FULL, WAL);
#   fleet-norun  the same, but the agent's event filter (--events release)
#            does not take a push: each 202 is a stored delivery that queues
#            no run, so no run executes during the measurement (what the
#            listener and the durable store cost alone);
#   fleet-queued  the durable acknowledgement with a run queued: as fleet,
#            every 202 a delivery and its queued run committed, but no run
#            executes during the measurement. An agent's runs go one at a
#            time, and before the load a run triggered by hand (the agent's
#            command sleeps when FLEET_TRIGGER is manual, else is `true`)
#            holds the agent, so its webhook runs wait in the queue.
#
# Then the time from a delivery's 202 to its run starting: for a user agent,
# and for a running VM agent when a guest image built from this tree exists
# (tests/lib/image.sh; otherwise "skipped: no image"). The run's command
# prints the time (`date +%s%N`; in the guest, whose busybox date has no
# %N, `busybox adjtimex`'s tv_sec and tv_usec); the 202's time is taken
# when curl returns. A VM's clock is not the host's: its offset is measured
# just before each delivery by running the same command with `fleetctl exec`
# between two host timestamps, the tightest of three (the error is at most
# half that exchange's round trip, printed as "+-").
#
# With a guest image, everything runs in a private network + mount namespace
# with its own libvirtd (tests/lib/vmns.sh); loopback is then that
# namespace's. Everything it starts is stopped by PID; its agents, its
# listener's Unix user (if it made it) and its state are removed, also when
# it fails.
#
# Usage: tests/bench/hooks-bench.sh [--duration S] [--connections "8 64"]
#            [--samples N] [--no-vm] [--keep DIR]
#   --duration S      seconds each measured wrk run lasts (default 10; a
#                     2-second warm-up before each is not counted)
#   --samples N       deliveries for the 202-to-run-start figure (default 20
#                     for the user agent, N/2 for the VM)
# Env (as for make check): FLEET_SRCDIR, FLEET_BUILDDIR, FLEETD, FLEETCTL, AGENTD.
# Installs wrk and webhook with apt-get when missing (Debian packages only).
set -u

DURATION=10
CONNS="8 64"
SAMPLES=20
NO_VM=
KEEP=
while [ $# -gt 0 ]; do
	case $1 in
	--duration) DURATION=$2; shift 2 ;;
	--connections) CONNS=$2; shift 2 ;;
	--samples) SAMPLES=$2; shift 2 ;;
	--no-vm) NO_VM=1; shift ;;
	--keep) KEEP=$2; shift 2 ;;
	-h|--help) sed -n '2,53p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "hooks-bench: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done
for v in "$DURATION" "$SAMPLES" $CONNS; do
	case $v in ''|*[!0-9]*|0) echo "hooks-bench: --duration, --samples and --connections want positive numbers" >&2; exit 2 ;; esac
done

FLEET_SRCDIR=${FLEET_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
FLEET_BUILDDIR=${FLEET_BUILDDIR:-$PWD}
FLEETD=${FLEETD:-$FLEET_BUILDDIR/daemon/fleetd}
FLEETCTL=${FLEETCTL:-$FLEET_BUILDDIR/ctl/fleetctl}
AGENTD=${AGENTD:-$FLEET_BUILDDIR/agentd/agentd}
export FLEET_SRCDIR FLEET_BUILDDIR FLEETD FLEETCTL AGENTD

die() { echo "hooks-bench: $*" >&2; exit 1; }
log() { echo "# $*" >&2; }
[ "$(id -u)" = 0 ] || { echo "hooks-bench: needs root" >&2; exit 77; }
for x in "$FLEETD" "$FLEETCTL"; do [ -x "$x" ] || die "not built: $x (set FLEETD, FLEETCTL)"; done
[ -x "$(dirname "$FLEETD")/fleet-hooksd" ] || die "no fleet-hooksd beside $FLEETD (build the listener)"

# The load generator and the webhook tool: Debian packages, installed if missing.
missing=()
command -v wrk >/dev/null || missing+=(wrk)
command -v webhook >/dev/null || missing+=(webhook)
pkg-config --exists libevent 2>/dev/null || missing+=(libevent-dev)
for c in cc curl openssl jq; do command -v $c >/dev/null || missing+=("$c"); done
if [ ${#missing[@]} -gt 0 ]; then
	log "installing ${missing[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]/#cc/gcc}" >/dev/null ||
		die "apt-get install ${missing[*]} failed (apt-get update first?)"
fi

# One run at a time: agents' Unix users (fleet-hkb-*), the uid range and the
# listener's user are fixed names, and a second run's cleanup would take them.
exec 9>/run/lock/fleet-hooks-bench.lock || die "cannot open /run/lock/fleet-hooks-bench.lock"
flock -n 9 || die "another hooks-bench.sh is running on this host"

BT=$(mktemp -d /tmp/fleet-hooks-bench.XXXXXX) || exit 1
chmod 0755 "$BT"
STATE=$(mktemp -d /var/lib/fleet-hkbench.XXXXXX) || exit 1
DURABLE=$STATE.bare-durable	# bare-durable's file: on the file system of fleet's state
SOCK=$BT/fleetd.sock
export FLEET_SOCKET=$SOCK
HOOKS_USER=fleet-hkbench
HOOKS_USER_EXISTED=$(getent passwd "$HOOKS_USER" >/dev/null && echo yes)
UMIN=4720000 UMAX=4729999
FLEETD_PID=
PIDS=()		# servers and generators this script started
NS=()		# the command prefix that enters the namespace (empty: the host's)
VMNS_PID=
: > "$BT/none.conf"

stop_pid() {	# stop_pid PID: TERM, wait up to 10 s, then KILL
	local pid=$1 i
	kill -TERM "$pid" 2>/dev/null || return 0
	for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
	kill -KILL "$pid" 2>/dev/null
}
bench_cleanup() {
	set +e
	local p a
	for p in "${PIDS[@]}"; do stop_pid "$p"; done
	if [ -n "$FLEETD_PID" ] && kill -0 "$FLEETD_PID" 2>/dev/null; then
		for a in $(timeout 30 "$FLEETCTL" --json list 2>/dev/null | jq -r '.[].name' 2>/dev/null); do
			timeout 300 "$FLEETCTL" rm --force "$a" >/dev/null 2>&1 || log "fleetctl rm --force $a failed"
		done
		stop_pid "$FLEETD_PID"
	fi
	[ -n "$HOOKS_USER_EXISTED" ] || ! getent passwd "$HOOKS_USER" >/dev/null || userdel "$HOOKS_USER" 2>/dev/null ||
		log "could not remove the user $HOOKS_USER"
	if [ -n "$KEEP" ]; then
		mkdir -p "$KEEP" && cp "$STATE/fleetd.log" "$BT"/*.out "$BT"/*.log "$KEEP/" 2>/dev/null
	fi
	[ -z "$VMNS_PID" ] || vmns_stop
	umount -l "$STATE/users" "$STATE/netns" 2>/dev/null	# mounts of their own (fleetd's account_own_mount)
	rm -rf "$BT" "$STATE" "$DURABLE"
}
trap bench_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

now_us() { local t=$EPOCHREALTIME; echo "${t/./}"; }
median() { sort -n | awk '{a[NR]=$1} END {if (NR == 0) print ""; else print (NR % 2) ? a[(NR+1)/2] : int((a[NR/2]+a[NR/2+1])/2)}'; }
pct() { sort -n | awk -v p="$1" '{a[NR]=$1} END {if (NR == 0) {print ""; exit} i=int(NR*p/100+0.999); if (i<1) i=1; print a[i]}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a != "" && b > 0) printf "%.2f", a / b; else print "n/a" }'; }
ms() { awk -v n="$1" 'BEGIN { if (n == "") print "-"; else printf "%.1f", n / 1000 }'; }
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<" $2"; }	# field KEY "RESULT k=v ..."

# --- what every target gets: one 1 KiB body, its signature, the secret -------------------------

SECRET=$(openssl rand -hex 32)
# A push event's shape, padded to exactly 1024 bytes.
head='{"ref":"refs/heads/main","before":"6113728f27ae82c7b1a177c8d03f9e96e0adf246","after":"59b20b8d5c6ff8d09518454d4dd8b7b30f095ab5","repository":{"id":17273051,"full_name":"octo-org/octo-repo","private":true},"pusher":{"name":"octocat"},"commits":[{"id":"59b20b8d5c6ff8d09518454d4dd8b7b30f095ab5","message":"'
tail='"}]}'
pad=$((1024 - ${#head} - ${#tail}))
{ printf '%s' "$head"; head -c "$pad" /dev/zero | tr '\0' 'x'; printf '%s' "$tail"; } > "$BT/body.json"
[ "$(stat -c %s "$BT/body.json")" = 1024 ] && jq -e . "$BT/body.json" >/dev/null || die "the 1 KiB body is wrong"
SIG=sha256=$(openssl dgst -sha256 -hmac "$SECRET" -r < "$BT/body.json" | cut -d' ' -f1)
RUNID=$(basename "$BT" | tr -dc 'a-zA-Z0-9')

# --- the VM part needs a guest image built from this tree (and a private libvirtd) -------------

VM_NOTE=
if [ -n "$NO_VM" ]; then
	VM_NOTE="skipped: --no-vm"
else
	. "$FLEET_SRCDIR/tests/lib/image.sh"
	if [ -x "$AGENTD" ] && [ -x "$IMAGE_DROPBEAR" ] && _image_fresh; then
		. "$FLEET_SRCDIR/tests/lib/vmns.sh"
		vmns_start || die "cannot start a private libvirtd"
		trap bench_cleanup EXIT		# vmns_start chained its own; ours calls vmns_stop in order
		NS=(nsenter -t "$VMNS_PID" -m -n --)
		mkdir -p "$STATE/images" "$STATE/vms"
		cp "$IMG/vmlinuz" "$IMG/initramfs.img" "$IMG/base.qcow2" "$STATE/images/"
		echo qemu > "$STATE/vms/virt-type"	# TCG: no usable /dev/kvm here
	else
		VM_NOTE="skipped: no image"
	fi
fi

# --- the three servers ------------------------------------------------------------------------

cc -O2 -Wall -Wextra -o "$BT/bare-evhttp" "$FLEET_SRCDIR/tests/bench/bare-evhttp.c" \
	$(pkg-config --cflags --libs libevent) || die "cannot build bare-evhttp"
"${NS[@]}" "$BT/bare-evhttp" "$BT/bare.port" 2>"$BT/bare.log" &
PIDS+=($!)
"${NS[@]}" "$BT/bare-evhttp" --close "$BT/bare-close.port" 2>"$BT/bare-close.log" &
PIDS+=($!)
"${NS[@]}" "$BT/bare-evhttp" --durable "$DURABLE" "$BT/bare-durable.port" 2>"$BT/bare-durable.log" &
PIDS+=($!)
for f in bare bare-close bare-durable; do
	for _ in $(seq 100); do [ -s "$BT/$f.port" ] && break; sleep 0.05; done
	[ -s "$BT/$f.port" ] || die "bare-evhttp did not start: $(cat "$BT/$f.log")"
done
BARE_URL=http://127.0.0.1:$(cat "$BT/bare.port")/hooks/bench
BARE_CLOSE_URL=http://127.0.0.1:$(cat "$BT/bare-close.port")/hooks/bench
BARE_DURABLE_URL=http://127.0.0.1:$(cat "$BT/bare-durable.port")/hooks/bench

# webhook cannot take port 0: a port nothing listens on (in the namespace), above the ephemeral range.
free_port() {
	local p
	for _ in $(seq 50); do
		p=$((61000 + RANDOM % 4000))
		[ -z "$("${NS[@]}" ss -Hltn "sport = :$p")" ] && { echo "$p"; return 0; }
	done
	return 1
}
WH_PORT=$(free_port) || die "no free port"
jq -n --arg s "$SECRET" '[{id: "bench", "execute-command": "/bin/true", "response-message": "accepted",
	"success-http-response-code": 202, "http-methods": ["POST"],
	"trigger-rule": {match: {type: "payload-hmac-sha256", secret: $s,
		parameter: {source: "header", name: "X-Hub-Signature-256"}}}}]' > "$BT/hooks.json"
"${NS[@]}" webhook -hooks "$BT/hooks.json" -ip 127.0.0.1 -port "$WH_PORT" -nopanic >"$BT/webhook.log" 2>&1 &
WH_PID=$!
PIDS+=($WH_PID)
WH_URL=http://127.0.0.1:$WH_PORT/hooks/bench

"${NS[@]}" "$FLEETD" --state-dir "$STATE" --socket "$SOCK" --config "$BT/none.conf" \
	--hooks-listen 127.0.0.1:0 --hooks-user "$HOOKS_USER" \
	--user-uid-min "$UMIN" --user-uid-max "$UMAX" 2>"$BT/fleetd.err" ||
	die "fleetd did not start: $(cat "$BT/fleetd.err")"
FLEETD_PID=$(head -1 "$STATE/fleetd.lock")
FC() { timeout 300 "$FLEETCTL" "$@"; }
for _ in $(seq 300); do
	[ "$(FC --json status 2>/dev/null | jq -r '.hooks.state')" = up ] && break
	sleep 0.1
done
HOOKS_LISTEN=$(FC --json status | jq -r '.hooks.listen // empty')
[ "$(FC --json status | jq -r '.hooks.state')" = up ] && [ -n "$HOOKS_LISTEN" ] ||
	die "fleetd's listener is not up: $(FC status 2>&1 | grep webhooks:)"
log "fleetd $FLEETD_PID, listener on $HOOKS_LISTEN${NS:+ (in the private namespace)}"

# A user agent per measured run (fleet_sink NAME [--events LIST]): command
# `true` (or $SINK_COMMAND), room for every delivery in its queue, the
# environment already up; its route is NAME.
fleet_sink() {
	local name=$1
	shift
	FC create "$name" --backend user --memory 128 --command "${SINK_COMMAND:-true}" --max-queued 100000 \
		--restart never --health-interval 0 --run-timeout 604800 >/dev/null || die "fleetctl create $name failed"
	printf '%s\n' "$SECRET" | FC hook add "$name" --source github --route "$name" "$@" >/dev/null ||
		die "fleetctl hook add $name failed"
	FC start "$name" >/dev/null || die "fleetctl start $name failed"
}

for _ in $(seq 100); do
	"${NS[@]}" curl -s -o /dev/null -X POST "$WH_URL" 2>/dev/null && break
	sleep 0.05
done
# Every target must take the signed delivery, and the webhook tool refuse a forged one.
check_target() {	# check_target NAME URL SIG WANT
	local code
	code=$("${NS[@]}" curl -s --max-time 60 -o "$BT/check.out" -w '%{http_code}' -H 'Content-Type: application/json' \
		-H 'X-GitHub-Event: push' -H "X-GitHub-Delivery: check-$RANDOM$RANDOM" -H "X-Hub-Signature-256: $3" \
		--data-binary @"$BT/body.json" "$2")
	[ "$code" = "$4" ] || die "$1 answered $code to a check delivery, not $4: $(head -c 300 "$BT/check.out")"
}
BADSIG=sha256=$(printf '%064d' 0)
check_target bare "$BARE_URL" "$SIG" 202
check_target bare-close "$BARE_CLOSE_URL" "$SIG" 202
check_target bare-durable "$BARE_DURABLE_URL" "$SIG" 202
check_target webhook "$WH_URL" "$SIG" 202
check_target webhook "$WH_URL" "$BADSIG" 500	# webhook's answer to a rule that does not match
fleet_sink hkb-check
check_target fleet "http://$HOOKS_LISTEN/hooks/hkb-check" "$SIG" 202
check_target fleet "http://$HOOKS_LISTEN/hooks/hkb-check" "$BADSIG" 401
FC rm --force hkb-check >/dev/null

# --- throughput and latency -------------------------------------------------------------------

# load TARGET CONNS URL: a 2 s warm-up, then DURATION seconds measured;
# leaves the RESULT line in $BT/TARGET-CONNS.out.
load() {
	local target=$1 c=$2 url=$3 out=$BT/$1-$2.out
	"${NS[@]}" wrk -t 1 -c "$c" -d 2s --timeout 10s -s "$FLEET_SRCDIR/tests/bench/hooks-bench.lua" "$url" \
		-- "$RUNID-w$c" "$BT/body.json" "$SIG" > "$BT/$target-$c.warm" 2>&1
	cpu_begin
	"${NS[@]}" wrk -t 1 -c "$c" -d "${DURATION}s" --timeout 10s -s "$FLEET_SRCDIR/tests/bench/hooks-bench.lua" "$url" \
		-- "$RUNID-m$c" "$BT/body.json" "$SIG" > "$out" 2>&1 || die "wrk against $target failed: $(tail -3 "$out")"
	cpu_end "$target" "$c"
	grep -q '^RESULT ' "$out" || die "wrk against $target printed no result: $(tail -3 "$out")"
	log "$target, $c connections: $(grep '^RESULT ' "$out" | cut -d' ' -f2-)"
}

# CPU time (utime + stime, clock ticks, without children) of a PID.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
# Runs of AGENT that have ended, all of them (`fleetctl runs` shows the newest
# only, which a queue of tens of thousands fills with queued runs): read from
# fleetd's database, read-only (WAL: no lock that fleetd would wait on).
runs_ended() {
	sqlite3 -readonly "file:$STATE/fleet.db?mode=ro" \
		"SELECT count(*) FROM runs JOIN agents ON agents.id = runs.agent_id
		 WHERE agents.name = '$1' AND runs.state IN ('succeeded', 'failed')" 2>/dev/null || echo 0
}
# fleet_load TARGET CONNS URL AGENT: load() that also takes fleetd's and
# fleet-hooksd's CPU over the measured part, the deliveries stored
# (hooks.accepted) and the runs AGENT finished meanwhile, into
# $BT/TARGET-CONNS.cpu as "deliveries runs fleetd_us hooksd_us". The robust
# figure on a busy host: rates swing 2-4x, CPU per delivery much less.
fleet_load() {
	CPU_AGENT=$4 load "$1" "$2" "$3"
}
cpu_begin() {
	[ -n "${CPU_AGENT:-}" ] || return 0
	HPID=$(FC --json status | jq -r '.hooks.pid')
	R0=$(runs_ended "$CPU_AGENT"); A0=$(FC --json status | jq -r '.hooks.accepted')
	F0=$(cpu_ticks "$FLEETD_PID"); H0=$(cpu_ticks "$HPID")
}
cpu_end() {	# cpu_end TARGET CONNS
	[ -n "${CPU_AGENT:-}" ] || return 0
	local f1 h1 a1 r1 tck fu hu
	f1=$(cpu_ticks "$FLEETD_PID"); h1=$(cpu_ticks "$HPID")
	a1=$(FC --json status | jq -r '.hooks.accepted'); r1=$(runs_ended "$CPU_AGENT")
	tck=$(getconf CLK_TCK)
	fu=$(( (f1 - F0) * 1000000 / tck )) hu=$(( (h1 - H0) * 1000000 / tck ))
	echo "$((a1 - A0)) $((r1 - R0)) $fu $hu" > "$BT/$1-$2.cpu"
	log "$1, $2 connections: $((a1 - A0)) deliveries stored, $((r1 - R0)) runs ended; CPU fleetd $((fu / 1000)) ms, fleet-hooksd $((hu / 1000)) ms"
}

# webhook_drain: wait (up to 5 min) until the webhook tool has started the
# commands of every request it answered: its CPU time stands still for 1 s.
webhook_drain() {
	local prev=-1 cur i
	for ((i = 0; i < 300; i++)); do
		cur=$(awk '{print $14 + $15 + $16 + $17}' "/proc/$WH_PID/stat" 2>/dev/null) || return 0
		[ "$cur" = "$prev" ] && return 0
		prev=$cur
		sleep 1
	done
	log "webhook still busy after 5 min"
}

t_start=$SECONDS
for c in $CONNS; do
	load bare "$c" "$BARE_URL"
	load bare-close "$c" "$BARE_CLOSE_URL"
	load bare-durable "$c" "$BARE_DURABLE_URL"
	fleet_sink "hkb-s$c"
	fleet_load fleet "$c" "http://$HOOKS_LISTEN/hooks/hkb-s$c" "hkb-s$c"
	FC --json events --route "hkb-s$c" --limit 1 > "$BT/fleet-$c.events" 2>/dev/null
	# Its queued runs would run (and take CPU) during the next measurement.
	t0=$(now_us)
	queued=$(FC --json runs "hkb-s$c" --limit 1 | jq -r '.[0].id // 0')
	FC rm --force "hkb-s$c" >/dev/null || die "fleetctl rm --force hkb-s$c failed"
	log "removed hkb-s$c (newest run id $queued) in $(ms $(( $(now_us) - t0 ))) ms"
	fleet_sink "hkb-n$c" --events release
	fleet_load fleet-norun "$c" "http://$HOOKS_LISTEN/hooks/hkb-n$c" "hkb-n$c"
	FC rm --force "hkb-n$c" >/dev/null || die "fleetctl rm --force hkb-n$c failed"
	# fleet-queued: a run by hand holds the agent (it sleeps); every delivery's run waits behind it.
	SINK_COMMAND='case $FLEET_TRIGGER in manual) exec sleep 604800 ;; esac; true' fleet_sink "hkb-q$c"
	FC trigger "hkb-q$c" >/dev/null || die "fleetctl trigger hkb-q$c failed"
	for _ in $(seq 300); do
		st=$(FC --json runs "hkb-q$c" --limit 1 | jq -r '.[0].state')
		[ "$st" = running ] && break
		sleep 0.1
	done
	[ "$st" = running ] || die "hkb-q$c: the run triggered by hand is $st, not running"
	fleet_load fleet-queued "$c" "http://$HOOKS_LISTEN/hooks/hkb-q$c" "hkb-q$c"
	st=$(FC --json runs "hkb-q$c" --limit 1 | jq -r '.[0].state')
	[ "$st" = queued ] || die "hkb-q$c: its newest run is $st, not queued"
	FC rm --force "hkb-q$c" >/dev/null || die "fleetctl rm --force hkb-q$c failed"
	# Last: webhook answers before its command has run and keeps starting
	# /bin/true for its backlog long after the load ends, which would eat
	# the CPUs of whatever is measured next.
	load webhook "$c" "$WH_URL"
	webhook_drain
done

# --- from a delivery's 202 to its run starting -----------------------------------------------

# run_latency AGENT N FILE [vm]: N deliveries, one at a time, to AGENT's route;
# appends "from_202_us from_send_us offset_error_us" per sample to FILE
# (from_send: from just before curl started, so it includes the delivery's
# own trip and the 202's).
run_latency() {
	local agent=$1 n=$2 file=$3 vm=${4:-} i prev code tsend t202 id st g off err t0 t1 best
	: > "$file"
	for ((i = 1; i <= n; i++)); do
		off=0 err=0
		if [ -n "$vm" ]; then	# the guest's clock against the host's: the tightest of 3 exchanges
			best=
			for _ in 1 2 3; do
				t0=$(now_us); g=$(FC exec "$agent" --no-stdin -- sh -c "$GUEST_NOW"); t1=$(now_us)
				[[ "$g" =~ ^[0-9]+$ ]] || continue
				if [ -z "$best" ] || [ $((t1 - t0)) -lt "$best" ]; then
					best=$((t1 - t0)); off=$((g / 1000 - (t0 + t1) / 2)); err=$(((t1 - t0) / 2))
				fi
			done
			[ -n "$best" ] || die "$agent: date in the guest failed"
		fi
		prev=$(FC --json runs "$agent" --limit 1 | jq -r '.[0].id // 0')
		tsend=$(now_us)
		code=$("${NS[@]}" curl -s --max-time 60 -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' \
			-H 'X-GitHub-Event: push' -H "X-GitHub-Delivery: $RUNID-lat-$agent-$i" \
			-H "X-Hub-Signature-256: $SIG" --data-binary @"$BT/body.json" "http://$HOOKS_LISTEN/hooks/$agent")
		t202=$(now_us)
		[ "$code" = 202 ] || die "$agent: delivery $i answered $code"
		for _ in $(seq 3000); do	# until its run has ended (5 min at most)
			read -r id st < <(FC --json runs "$agent" --limit 1 | jq -r '.[0] | "\(.id) \(.state)"')
			[ "$id" -gt "$prev" ] 2>/dev/null && case $st in succeeded|failed|timed-out|cancelled|interrupted) true ;; *) false ;; esac && break
			sleep 0.1
		done
		[ "$st" = succeeded ] || die "$agent: run $id is $st"
		g=$(FC --json runs "$agent" "$id" | jq -r '.log' | tr -dc 0-9)
		[ -n "$g" ] || die "$agent: run $id printed no time"
		echo "$((g / 1000 - off - t202)) $((g / 1000 - off - tsend)) $err" >> "$file"
	done
}
summarize_latency() {	# FILE COLUMN: "p50, p90, min, max" of that column
	local f=$1 k=$2
	printf 'p50 %s ms, p90 %s ms, min %s ms, max %s ms' "$(ms "$(cut -d' ' -f"$k" "$f" | median)")" \
		"$(ms "$(cut -d' ' -f"$k" "$f" | pct 90)")" "$(ms "$(cut -d' ' -f"$k" "$f" | sort -n | head -1)")" \
		"$(ms "$(cut -d' ' -f"$k" "$f" | sort -n | tail -1)")"
}

FC create hkb-lat --backend user --memory 128 --command 'date +%s%N' --restart never --health-interval 0 >/dev/null ||
	die "fleetctl create hkb-lat failed"
printf '%s\n' "$SECRET" | FC hook add hkb-lat --source github --route hkb-lat >/dev/null || die "hook add hkb-lat failed"
FC start hkb-lat >/dev/null || die "fleetctl start hkb-lat failed"
run_latency hkb-lat "$SAMPLES" "$BT/lat-user.out"
USER_LAT="from the 202: $(summarize_latency "$BT/lat-user.out" 1)
                         from sending: $(summarize_latency "$BT/lat-user.out" 2) (n=$(wc -l < "$BT/lat-user.out"))"
FC rm --force hkb-lat >/dev/null

# The guest's wall clock in ns (µs resolution): its busybox date has no %N.
GUEST_NOW='busybox adjtimex | busybox awk '"'"'/tv_sec/ {s = $2} /tv_usec/ {u = $2} END {printf "%d%06d000\n", s, u}'"'"
VM_LAT=$VM_NOTE
if [ -z "$VM_NOTE" ]; then
	FC create hkb-vm --backend vm --memory 256 --network none --command "$GUEST_NOW" --restart never \
		--health-interval 0 >/dev/null || die "fleetctl create hkb-vm failed"
	printf '%s\n' "$SECRET" | FC hook add hkb-vm --source github --route hkb-vm >/dev/null || die "hook add hkb-vm failed"
	t0=$SECONDS
	FC start hkb-vm >/dev/null || die "fleetctl start hkb-vm failed"
	log "hkb-vm booted in $((SECONDS - t0)) s"
	for _ in 1 2 3; do FC exec hkb-vm --no-stdin -- true >/dev/null 2>&1; done
	# In a subshell: a failure here leaves the figures above to print.
	if ! ( run_latency hkb-vm $(( (SAMPLES + 1) / 2 )) "$BT/lat-vm.out" vm ); then
		VM_LAT="failed (see above)"
	else
		VM_LAT="from the 202: $(summarize_latency "$BT/lat-vm.out" 1)
                         from sending: $(summarize_latency "$BT/lat-vm.out" 2) (n=$(wc -l < "$BT/lat-vm.out"))
                         guest clock offset known to +-$(ms "$(cut -d' ' -f3 "$BT/lat-vm.out" | median)") ms (median)"
	fi
	FC rm --force hkb-vm >/dev/null
fi

# --- the table --------------------------------------------------------------------------------

get() { field "$3" "$(grep '^RESULT ' "$BT/$1-$2.out")"; }	# get TARGET CONNS KEY
cat <<EOF

webhook listener benchmark, $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs, $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg)
wrk $(wrk -v 2>&1 | head -1 | cut -d' ' -f2), 1 thread, ${DURATION} s per run after a 2 s warm-up; 1 KiB signed GitHub push deliveries,
a new X-GitHub-Delivery each; webhook $(webhook -version 2>&1 | awk '{print $NF}'); loopback${NS:+ in a private network namespace}
EOF
printf '\n%-6s %-12s %10s %9s %9s %9s %9s   %s\n' conns target "req/s" "p50 ms" "p99 ms" "max ms" non-2xx "answers"
for c in $CONNS; do
	for t in bare bare-close bare-durable webhook fleet fleet-norun fleet-queued; do
		printf '%-6s %-12s %10s %9s %9s %9s %9s   2xx %s, 429 %s, 503 %s, other %s, socket errors %s\n' "$c" "$t" \
			"$(get $t "$c" rate)" "$(ms "$(get $t "$c" p50_us)")" "$(ms "$(get $t "$c" p99_us)")" \
			"$(ms "$(get $t "$c" max_us)")" "$(get $t "$c" err_status)" "$(get $t "$c" s2xx)" "$(get $t "$c" s429)" \
			"$(get $t "$c" s503)" "$(get $t "$c" sother)" \
			"$(( $(get $t "$c" err_connect) + $(get $t "$c" err_read) + $(get $t "$c" err_write) + $(get $t "$c" err_timeout) ))"
	done
done
printf '\n%-6s %12s %18s %14s %18s %19s %16s %18s\n' conns fleet/bare fleet/bare-close fleet/webhook fleet-norun/bare \
	fleet-queued/bare "p99 fleet/bare" "p99 fleet/webhook"
for c in $CONNS; do
	printf '%-6s %12s %18s %14s %18s %19s %16s %18s\n' "$c" "$(ratio "$(get fleet "$c" rate)" "$(get bare "$c" rate)")" \
		"$(ratio "$(get fleet "$c" rate)" "$(get bare-close "$c" rate)")" \
		"$(ratio "$(get fleet "$c" rate)" "$(get webhook "$c" rate)")" \
		"$(ratio "$(get fleet-norun "$c" rate)" "$(get bare "$c" rate)")" \
		"$(ratio "$(get fleet-queued "$c" rate)" "$(get bare "$c" rate)")" \
		"$(ratio "$(get fleet "$c" p99_us)" "$(get bare "$c" p99_us)")" \
		"$(ratio "$(get fleet "$c" p99_us)" "$(get webhook "$c" p99_us)")"
done
printf '\n%-6s %20s %26s %26s %20s\n' conns bare-durable/bare fleet-queued/bare-durable fleet-norun/bare-durable fleet/bare-durable
for c in $CONNS; do
	printf '%-6s %20s %26s %26s %20s\n' "$c" "$(ratio "$(get bare-durable "$c" rate)" "$(get bare "$c" rate)")" \
		"$(ratio "$(get fleet-queued "$c" rate)" "$(get bare-durable "$c" rate)")" \
		"$(ratio "$(get fleet-norun "$c" rate)" "$(get bare-durable "$c" rate)")" \
		"$(ratio "$(get fleet "$c" rate)" "$(get bare-durable "$c" rate)")"
done
printf '\n%-6s %-12s %11s %12s %17s %21s %24s\n' conns target deliveries "runs ended" "fleetd us/deliv" "fleet-hooksd us/deliv" "fleetd ms/run (derived)"
for c in $CONNS; do
	read -r nd nr nf nh < "$BT/fleet-norun-$c.cpu"
	base=$(awk -v d="$nd" -v f="$nf" 'BEGIN { print (d > 0 ? f / d : 0) }')
	for t in fleet fleet-norun fleet-queued; do
		read -r d r f h < "$BT/$t-$c.cpu"
		# a run's own cost: fleetd's CPU less what the same deliveries cost without runs
		printf '%-6s %-12s %11s %12s %17s %21s %24s\n' "$c" "$t" "$d" "$r" \
			"$(awk -v d="$d" -v f="$f" 'BEGIN { printf "%.0f", (d > 0 ? f / d : 0) }')" \
			"$(awk -v d="$d" -v h="$h" 'BEGIN { printf "%.0f", (d > 0 ? h / d : 0) }')" \
			"$(awk -v d="$d" -v r="$r" -v f="$f" -v b="$base" -v t="$t" 'BEGIN { if (t == "fleet" && r > 0) printf "%.2f", (f - d * b) / r / 1000; else print "-" }')"
	done
done
last=${CONNS##* }
printf '\ntargets (issue #11) at %s connections: fleet >= 0.5x bare: %s (%s; fleet-queued %s, %s); fleet >= 10x webhook: %s (%s)\n' "$last" \
	"$(awk -v r="$(ratio "$(get fleet "$last" rate)" "$(get bare "$last" rate)")" 'BEGIN { print (r != "n/a" && r >= 0.5) ? "met" : "NOT met" }')" \
	"$(ratio "$(get fleet "$last" rate)" "$(get bare "$last" rate)")" \
	"$(awk -v r="$(ratio "$(get fleet-queued "$last" rate)" "$(get bare "$last" rate)")" 'BEGIN { print (r != "n/a" && r >= 0.5) ? "met" : "NOT met" }')" \
	"$(ratio "$(get fleet-queued "$last" rate)" "$(get bare "$last" rate)")" \
	"$(awk -v r="$(ratio "$(get fleet "$last" rate)" "$(get webhook "$last" rate)")" 'BEGIN { print (r != "n/a" && r >= 10) ? "met" : "NOT met" }')" \
	"$(ratio "$(get fleet "$last" rate)" "$(get webhook "$last" rate)")"
printf '\nto the run starting (its command'"'"'s first instruction), one delivery at a time:\n'
printf '  user agent (running): %s\n' "$USER_LAT"
printf '  VM agent (running):   %s\n' "$VM_LAT"
printf 'whole run: %d s\n' $((SECONDS - t_start))
