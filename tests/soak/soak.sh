#!/bin/bash
# Soak (#13): one fleetd (user agents) under a mixed, realistic load for N
# minutes, under AddressSanitizer or valgrind; then check that nothing was
# lost and nothing leaked.
#
# The load, round after round until the time is up: signed webhook
# deliveries posted with curl into fleet-hooksd (4 at a time), `fleetctl
# exec`, `trigger`, `secret set`, `memory put`, a snapshot and a restore,
# a create and a remove (create/delete churn; every third agent with a NAT
# network), and a cron schedule firing every minute; fleetd is restarted
# (SIGTERM, so each instance's leak check runs at its exit) during the first
# third of the run (at least once). At the end:
# - every acknowledged (2xx) delivery has exactly one event and one run;
#   every acknowledged trigger its run; no run is left queued or running;
#   every run ended succeeded (or interrupted by a restart);
# - fleetd's RSS and open fds do not grow: over the last fleetd (up from
#   the end of the first third to the end; sampled every 2 s), the mean of
#   the last third of its samples against the mean of its first third
#   (judged from 30 samples on: runs of 3 minutes or more; shorter ones
#   are all start-up and warm-up, printed only). A leak detector with a
#   generous bound (RSS x1.5, fds +8), not a speed target: figures printed;
# - --asan (fleetd built with --enable-asan): no ASan, UBSan or LSan report
#   from any fleetd instance (log_path, checked after each one's exit);
#   --valgrind: every fleetd instance ran under memcheck --leak-check=full:
#   ERROR SUMMARY 0 (definite and indirect leaks count as errors).
#
# Usage: tests/soak/soak.sh [--minutes N] [--asan|--valgrind] [--vm]
#   (FLEETD, FLEETCTL, FLEET_SRCDIR set as `make check` sets them; --asan
#   wants FLEETD from an ASan build: FLEET_BUILD_DIR=/work/asan bash
#   scripts/build.sh --enable-asan, then make -C /work/asan check
#   TESTS=tests/soak/suite.sh or this file with SOAK_MINUTES=N)
# --vm adds a VM agent (QEMU) to the load: an exec and a snapshot a round.
# Its own network and mount namespaces: the NAT agents it makes turn on
# forwarding (IPv4 and IPv6) and add fleet's nftables tables, which must not
# touch the host's own network.
. "$FLEET_SRCDIR/tests/lib/own-netns.sh"
. "$FLEET_SRCDIR/tests/lib/common.sh"

[ "$(id -u)" = 0 ] || skip_all "needs root (user agents are Unix users)"
own_netns_ready
MINUTES=${SOAK_MINUTES:-1} MODE=plain VM=0
while [ $# -gt 0 ]; do
	case $1 in
	--minutes) MINUTES=$2; shift 2 ;;
	--asan) MODE=asan; shift ;;
	--valgrind) MODE=valgrind; shift ;;
	--vm) VM=1; shift ;;
	*) fail_all "unknown argument '$1' (--minutes N, --asan, --valgrind, --vm)" ;;
	esac
done
. "$FLEET_SRCDIR/tests/lib/crash.sh"
RID=$(crash_run_id)
HOOKS_USER=sk$RID-hooks
. "$FLEET_SRCDIR/tests/lib/hooks.sh"
command -v nft >/dev/null || skip_all "nft not installed"
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3) || skip_all "python3 not installed"
case $MODE in
asan)
	ldd "$FLEETD" | grep -q libasan || fail_all "--asan: $FLEETD is not an ASan build (configure --enable-asan)"
	# Outside /tmp: a user agent's exec has a private /tmp, and fleetd's
	# children (agentd, fleet-init, fleet-hooksd: ASan too) report here.
	SAN_DIR=$(mktemp -d /var/lib/fleet-soak-san.XXXXXX); chmod 0777 "$SAN_DIR"
	on_exit "rm -rf '$SAN_DIR'"
	# quarantine_size_mb=4: ASan holds freed memory back (256 MiB by default), which
	# would show as RSS growth; leaks are LSan's to find.
	export ASAN_OPTIONS="log_path=$SAN_DIR/asan:detect_leaks=1:abort_on_error=0:quarantine_size_mb=4${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
	export UBSAN_OPTIONS="log_path=$SAN_DIR/ubsan:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
	;;
valgrind)
	command -v valgrind >/dev/null || skip_all "valgrind not installed"
	ldd "$FLEETD" | grep -q libasan && fail_all "--valgrind: $FLEETD is an ASan build (valgrind cannot run it)"
	SAN_DIR=$(mktemp -d /var/lib/fleet-soak-vg.XXXXXX)
	on_exit "rm -rf '$SAN_DIR'"
	# fleetd detaches (forks): valgrind follows the fork, %p names each process's log.
	cat > "$TEST_TMP/fleetd-vg" <<EOF
#!/bin/sh
exec valgrind --tool=memcheck --leak-check=full --errors-for-leak-kinds=definite,indirect \\
	--show-leak-kinds=definite,indirect --num-callers=30 --log-file='$SAN_DIR/vg.%p' '$FLEETD' "\$@"
EOF
	chmod 0755 "$TEST_TMP/fleetd-vg"
	FLEETD=$TEST_TMP/fleetd-vg
	;;
esac
diag "soak: $MINUTES minutes, $MODE, run id $RID${VM:+, vm $VM}"

KEY=sk-hmac-secret-0123456789abcdef
BASE=sk$RID-base SNAP=sk$RID-snap
user_fleetd_setup "sk$RID"
START_ARGS=(--max-concurrent-runs 2 --hooks-request-timeout 60)
INSTANCES=0 SAN_CLEAN=0

# fleetd_pid_alive: the pid in the lock file is our fleetd (under valgrind its comm is memcheck's)
fleetd_alive() { [ -n "${FLEETD_PID:-}" ] && kill -0 "$FLEETD_PID" 2>/dev/null; }
soak_start() {
	hooks_fleetd_start "${START_ARGS[@]}" || return 1
	INSTANCES=$((INSTANCES + 1))
}
# soak_stop: SIGTERM, wait for the exit (valgrind's leak check takes a while), then
# the sanitizer's verdict on that instance.
soak_stop() {
	local i pid=$FLEETD_PID
	kill -TERM "$pid" || return 1
	for ((i = 0; i < 3000; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	kill -0 "$pid" 2>/dev/null && { diag "fleetd $pid still runs 300 s after SIGTERM"; return 1; }
	for ((i = 0; i < 300; i++)); do kill -0 "${HOOKS_PID:-0}" 2>/dev/null || break; sleep 0.1; done
	san_verdict "$pid"
}
# san_verdict PID: ok when the sanitizer found nothing in fleetd PID (and, under
# ASan, in any process so far: the listener, agentd, fleet-init report too).
san_verdict() {
	local pid=$1 f bad=
	case $MODE in
	asan)
		for f in "$SAN_DIR"/*; do [ -s "$f" ] && bad+=" $f"; done
		if [ -z "$bad" ]; then ok 0 "fleetd $pid: no ASan, UBSan or LSan report (instance $INSTANCES)"
		else ok 1 "fleetd $pid: no ASan, UBSan or LSan report (instance $INSTANCES)"; head -n 60 $bad | sed 's/^/#   /'; return 1; fi
		;;
	valgrind)
		f=$SAN_DIR/vg.$pid
		if grep -q 'ERROR SUMMARY: 0 errors' "$f" 2>/dev/null; then
			ok 0 "fleetd $pid: valgrind memcheck clean ($(grep -o 'definitely lost: [0-9,]* bytes' "$f" | head -1), $(grep -o 'in use at exit: [0-9,]* bytes' "$f" | head -1))"
		else
			ok 1 "fleetd $pid: valgrind memcheck clean"; sed 's/^/#   /' "$f" 2>/dev/null | head -n 120; return 1
		fi
		;;
	*) return 0 ;;
	esac
}

soak_start; ok $? "fleetd starts with its listener ($MODE)" || done_testing
"$FLEETCTL" create "$BASE" --backend user --command 'echo run $FLEET_RUN_ID' --max-queued 100000 >/dev/null
ok $? "agent $BASE (runs, deliveries, secrets, memory, schedules, execs)"
"$FLEETCTL" create "$SNAP" --backend user --command true --snapshot-keep 4 >/dev/null
ok $? "agent $SNAP (snapshots and restores, 4 kept)"
printf '%s' "$KEY" | "$FLEETCTL" hook add "$BASE" --source hmac --route "sk$RID-h" --header X-Sk-Sig >/dev/null
ok $? "an hmac route for $BASE"
"$FLEETCTL" schedule add "$BASE" '* * * * *' >/dev/null; ok $? "a cron schedule firing every minute"
if [ "$VM" = 1 ]; then
	"$FLEETCTL" create "sk$RID-vm" --backend vm --network none --health-interval 0 >/dev/null &&
		"$FLEETCTL" start "sk$RID-vm" >/dev/null
	ok $? "a VM agent runs (fleetd's default image and libvirt)"
fi
printf '{}' > "$TEST_TMP/empty.json"
deadline=$((SECONDS + 60))
while [ "$(post "/hooks/sk$RID-h" "$TEST_TMP/empty.json")" = 404 ] && [ $SECONDS -lt $deadline ]; do sleep 0.2; done

J=$TEST_TMP/j; mkdir -p "$J"
TRIGGERS=() ERRORS=() ROUNDS=0 EXECS=0 SNAPS=0 RESTORES=0 CREATES=0 REMOVES=0 SECRETS=0 PUTS=0
DELIV_ACK=0 DELIV_OTHER=0 RESTARTS=0
SAMPLES=$TEST_TMP/samples	# one line a sample: SECONDS FLEETD_PID RSS_KB FDS DB_BYTES
: > "$SAMPLES"
# A sampler beside the load, every 2 s, of whichever fleetd holds the state dir.
sampler() {
	local pid rss fds
	while sleep 2; do
		pid=$(head -1 "$STATE/fleetd.lock" 2>/dev/null) || continue
		rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status" 2>/dev/null) && [ -n "$rss" ] || continue
		fds=$(find "/proc/$pid/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
		echo "$SECONDS $pid $rss $fds $(( $(stat -c %s "$STATE/fleet.db") + $(stat -c %s "$STATE/fleet.db-wal" 2>/dev/null || echo 0) ))" >> "$SAMPLES"
	done
}
sampler & SAMPLER=$!; _pids+=("$SAMPLER")
# step WHAT COMMAND...: one call of the load; a failure is recorded (and fails the run at the end)
step() {
	local what=$1; shift
	"$@" >"$TEST_TMP/step.out" 2>&1 && return 0
	ERRORS+=("round $ROUNDS: $what: $(head -c 300 "$TEST_TMP/step.out" | tr '\n' ' ')")
	return 1
}

END=$((SECONDS + MINUTES * 60)) THIRD=$((MINUTES * 20))
START=$SECONDS LAST_RESTART=$SECONDS PREV_SNAP= LIVE=
while [ $SECONDS -lt $END ]; do
	ROUNDS=$((ROUNDS + 1)) r=$ROUNDS
	rm -rf "$J/d"; crash_make_set "$J/d" 8 "$KEY"
	crash_send_start "$J/d" 8 "$HOOKS_URL/hooks/sk$RID-h" X-Sk-Sig 4
	out=$("$FLEETCTL" exec "$BASE" -- sh -c "echo exec-$r" 2>&1)
	[ "$out" = "exec-$r" ] && EXECS=$((EXECS + 1)) || ERRORS+=("round $r: exec printed '$out'")
	step trigger "$FLEETCTL" --json trigger "$BASE" && TRIGGERS+=("$(jq -r .id "$TEST_TMP/step.out")")
	head -c $((16 + r % 200)) /dev/urandom | base64 -w0 > "$TEST_TMP/secret"
	step "secret set" "$FLEETCTL" secret set "$BASE" "S_$((r % 20))" < "$TEST_TMP/secret" && SECRETS=$((SECRETS + 1))
	printf 'value %d %s' "$r" "$(head -c 64 /dev/urandom | base64 -w0)" > "$TEST_TMP/mem"
	if step "memory put" "$FLEETCTL" memory "$BASE" put "k-$((r % 10))" < "$TEST_TMP/mem"; then
		PUTS=$((PUTS + 1))
		got=$("$FLEETCTL" memory "$BASE" get "k-$((r % 10))" 2>&1)
		[ "$got" = "$(cat "$TEST_TMP/mem")" ] || ERRORS+=("round $r: memory get read back '$got'")
	fi
	step snapshot "$FLEETCTL" snapshot "$SNAP" "s$r" && SNAPS=$((SNAPS + 1))
	if [ -n "$PREV_SNAP" ] && ((r % 2 == 0)); then
		step restore "$FLEETCTL" restore "$SNAP" "$PREV_SNAP" && RESTORES=$((RESTORES + 1))
	fi
	PREV_SNAP=s$r
	if ((r % 3 == 1)); then step create "$FLEETCTL" create "sk$RID-c$r" --backend user --network nat --command true
	else step create "$FLEETCTL" create "sk$RID-c$r" --backend user --command true; fi && CREATES=$((CREATES + 1))
	if [ -n "$LIVE" ]; then step rm "$FLEETCTL" rm --force "$LIVE" && REMOVES=$((REMOVES + 1)); fi
	LIVE=sk$RID-c$r
	if [ "$VM" = 1 ]; then
		step "vm exec" "$FLEETCTL" exec "sk$RID-vm" -- true
		step "vm snapshot" "$FLEETCTL" snapshot "sk$RID-vm" "v$r" && "$FLEETCTL" snapshot rm "sk$RID-vm" "v$r" >/dev/null
	fi
	wait "$CRASH_SEND_PID"
	for ((i = 1; i <= 8; i++)); do
		case $(cat "$J/d/$i.st" 2>/dev/null) in
		2??) DELIV_ACK=$((DELIV_ACK + 1)); cat "$J/d/$i.id" >> "$J/acked" ;;
		*) DELIV_OTHER=$((DELIV_OTHER + 1)) ;;
		esac
	done
	# restarts during the first third only (at least one), about every 20 s (each checked by the sanitizer)
	if { [ $((SECONDS - START)) -lt "$THIRD" ] || [ "$RESTARTS" = 0 ]; } && [ $((SECONDS - LAST_RESTART)) -ge 20 ]; then
		soak_stop || ERRORS+=("round $r: the stop of fleetd")
		soak_start || { ok 1 "fleetd restarts (round $r)"; break; }
		RESTARTS=$((RESTARTS + 1)) LAST_RESTART=$SECONDS
	fi
done
ELAPSED=$((SECONDS - START))
kill "$SAMPLER"
diag "load: $ROUNDS rounds in $ELAPSED s: $EXECS execs, ${#TRIGGERS[@]} triggers, $SECRETS secret sets, $PUTS memory puts," \
	"$SNAPS snapshots, $RESTORES restores, $CREATES creates, $REMOVES removes, $RESTARTS restarts;" \
	"deliveries $DELIV_ACK acknowledged, $DELIV_OTHER not"
is "${ERRORS[*]:-}" "" "every call of the load succeeded"
ok $((DELIV_OTHER != 0)) "every delivery was acknowledged ($DELIV_ACK)"

# --- nothing lost ---
# Runs queued last are still running: wait for the queue to drain (a generous bound, not a speed target).
for ((i = 0; i < 3000; i++)); do
	[ "$(db_q "SELECT count(*) FROM runs WHERE state IN ('queued', 'running')")" = 0 ] && break
	sleep 0.2
done
is "$(db_q "SELECT count(*) FROM runs WHERE state IN ('queued', 'running')")" 0 "no run is left queued or running"
declare -A stored=()
while read -r id n; do stored[$id]=$n; done < <(db_q "SELECT e.delivery_id, count(r.id) FROM events e
	LEFT JOIN runs r ON r.event_id = e.id WHERE e.route = 'sk$RID-h' AND e.outcome IS NOT 'duplicate' GROUP BY e.id" | tr '|' ' ')
bad=0
while read -r id; do [ "${stored[$id]:-}" = 1 ] || bad=$((bad + 1)); done < <(cat "$J/acked" 2>/dev/null)
is "$bad" 0 "every acknowledged delivery ($DELIV_ACK) has exactly one event and one run"
is "$(db_q "SELECT count(*) FROM (SELECT delivery_id FROM events WHERE route = 'sk$RID-h' GROUP BY delivery_id HAVING count(*) > 1)")" 0 \
	"no delivery stored twice"
runs_now=$(db_q "SELECT id FROM runs WHERE agent_id = (SELECT id FROM agents WHERE name = '$BASE')")
missing=0
for id in "${TRIGGERS[@]}"; do grep -qx -- "$id" <<<"$runs_now" || missing=$((missing + 1)); done
is "$missing" 0 "every acknowledged trigger's run is there (${#TRIGGERS[@]})"
states=$(db_q "SELECT state || ' ' || count(*) FROM runs GROUP BY state" | tr '\n' ',')
diag "runs by state: $states cron runs: $(db_q "SELECT count(*) FROM runs r JOIN events e ON r.event_id = e.id WHERE e.source = 'cron'")"
is "$(db_q "SELECT count(*) FROM runs WHERE state NOT IN ('succeeded', 'interrupted')")" 0 "every run succeeded (or was interrupted by a restart)"
is "$(crash_half_states)" "" "no agent is left half-made, half-removed, missing or bad"
is "$(sqlite3 -readonly "$STATE/fleet.db" 'PRAGMA integrity_check')" ok "integrity_check of the database"

# --- nothing grows: the last fleetd's samples, first third against last third ---
growth=$("$PY" - "$SAMPLES" "$FLEETD_PID" <<'PYEOF'
import sys
rows = [l.split() for l in open(sys.argv[1])]
last = [r for r in rows if r[1] == sys.argv[2]]
if len(last) < 30:	# under a minute of it: its start-up and warm-up would be all it shows
    print("few"); sys.exit()
k = len(last) // 3
mean = lambda xs: sum(xs) / len(xs)
rss1, rss3 = mean([int(r[2]) for r in last[:k]]), mean([int(r[2]) for r in last[-k:]])
fd1, fd3 = mean([int(r[3]) for r in last[:k]]), mean([int(r[3]) for r in last[-k:]])
db1, db3 = int(last[0][4]), int(last[-1][4])
print("%.3f %.1f %d %d %.1f %.1f %d %d %d" % (rss3 / rss1, fd3 - fd1, rss1, rss3, fd1, fd3, db1, db3, len(last)))
PYEOF
)
if [ "$growth" = few ]; then
	diag "too few samples of the last fleetd (under 30) to judge growth: --minutes 3 or more gives them"
else
	read -r rss_ratio fd_delta rss1 rss3 fd1 fd3 db1 db3 n <<<"$growth"
	diag "last fleetd, $n samples: RSS $rss1 -> $rss3 kB (x$rss_ratio), fds $fd1 -> $fd3, database $db1 -> $db3 bytes"
	ok "$(awk -v r="$rss_ratio" 'BEGIN { print (r <= 1.5) ? 0 : 1 }')" "fleetd's RSS does not grow (last third / first third x$rss_ratio <= 1.5)"
	ok "$(awk -v d="$fd_delta" 'BEGIN { print (d <= 8) ? 0 : 1 }')" "fleetd's open fds do not grow (last third - first third $fd_delta <= 8)"
fi
echo "# samples (seconds fleetd_pid rss_kB fds db_bytes), the last 40:"; sed 's/^/#   /' "$SAMPLES" | tail -n 40

# --- the sanitizer, on the last instance (the agents removed first: all of fleetd's paths ran) ---
for a in $("$FLEETCTL" --json list | jq -r '.[].name'); do "$FLEETCTL" rm --force "$a" >/dev/null || diag "rm $a failed"; done
soak_stop; ok $? "the last fleetd stops (SIGTERM) and the sanitizer is satisfied"
done_testing
