#!/bin/bash
# The state dir's filesystem full (#13, docs/reliability.md "Disk full"):
# fleetd's state dir on a small tmpfs in the test's own mount namespace,
# filled to the last byte by a file the test writes. With it full, every
# kind of write fleet does (create, secret set, memory put, snapshot,
# trigger and its log, a webhook delivery, schedule add, set) either is
# refused with an error that says the disk is full and leaves nothing
# half-written, or succeeds and is really stored; reads keep being served.
# Then the filler goes and fleet recovers by itself (no restart): the same
# writes succeed, what was acknowledged before is all there, the database
# passes integrity_check and no temp file is left. Last, fleetd is killed
# (-9) mid-writes on a full disk, and the same holds after a restart.
if [ -z "${UDF_INNER:-}" ]; then
	if [ "$(id -u)" = 0 ] && command -v unshare >/dev/null; then
		exec unshare --mount -- env UDF_INNER=1 bash "$0" "$@"
	fi
fi
. "$FLEET_SRCDIR/tests/lib/common.sh"

[ "$(id -u)" = 0 ] || skip_all "needs root (user agents are Unix users)"
[ -n "${UDF_INNER:-}" ] || skip_all "unshare missing"
U=udf$(test_run_id)	# agent names and hooks_user of this run (two checkouts at once never collide)
HOOKS_USER=$U-hooks
. "$FLEET_SRCDIR/tests/lib/hooks.sh"

# The state dir is a tmpfs in this mount namespace only; at exit (after
# fleetd and the agents are gone) it is unmounted and its empty host
# directory removed. Registered first, so it runs last.
on_exit 'umount -l "$STATE/snapshots"; umount -l "$STATE/runs"; umount -l "$STATE"; rmdir "$STATE"'
user_fleetd_setup udf
mount --make-rprivate / 2>/dev/null
mount -t tmpfs -o size=48m,mode=0700 udf-state "$STATE" || fail_all "cannot mount a tmpfs on the state dir"
# The run logs (STATE/runs) and the user agents' snapshots (STATE/snapshots)
# on tmpfs of their own, so that a log's write or a home's copy can fail
# while the database still takes the rest (below); "full" fills all three.
for d in runs snapshots; do
	mkdir -m 0700 "$STATE/$d" && mount -t tmpfs -o size=8m,mode=0700 "udf-$d" "$STATE/$d" ||
		fail_all "cannot mount a tmpfs on the state dir's $d/"
done
FILLER=$STATE/filler
RFILLER=$STATE/runs/filler
SFILLER=$STATE/snapshots/filler

T0=$SECONDS
hooks_fleetd_start; ok $? "fleetd starts on a 48 MiB tmpfs, with its webhook listener"

KEY=udf-hmac-secret-0123456789abcdef
# --memory-quota 4: a user agent's store is an image allocated at its quota on this 48 MiB tmpfs
"$FLEETCTL" create $U-a --backend user --memory-quota 4 --command 'echo ran-$FLEET_RUN_ID' >/dev/null; ok $? "create agent $U-a"
"$FLEETCTL" start $U-a >/dev/null; ok $? "start it"
printf '%s' "$KEY" | "$FLEETCTL" hook add $U-a --source hmac --route udf-h --header X-Udf-Sig >/dev/null
ok $? "a webhook route for $U-a"
printf 'before' | "$FLEETCTL" secret set $U-a TOKEN >/dev/null; ok $? "secret set"
head -c 200000 /dev/urandom >"$TEST_TMP/blob"
"$FLEETCTL" memory $U-a put blob <"$TEST_TMP/blob"; ok $? "memory put of 200 kB"
printf 'v1' | "$FLEETCTL" memory $U-a put small; ok $? "memory put of a small value"
"$FLEETCTL" snapshot $U-a s-before >/dev/null; ok $? "snapshot s-before"
"$FLEETCTL" trigger $U-a --wait >"$TEST_TMP/run1.out" 2>&1; ok $? "a run succeeds"
RUN1=$("$FLEETCTL" --json runs $U-a | jq -r 'max_by(.id).id')
like "$(cat "$TEST_TMP/run1.out")" "ran-$RUN1" "its log"
"$FLEETCTL" schedule add $U-a '0 3 * * *' >/dev/null; ok $? "schedule add"
# deliver ID: a signed delivery to udf-h with body {"n":ID}; prints the status.
deliver() { printf '{"n":"%s"}' "$1" >"$TEST_TMP/d.json"; post /hooks/udf-h "$TEST_TMP/d.json" -H "X-Udf-Sig: $(hmac_hex "$KEY" "$TEST_TMP/d.json")"; }
is "$(deliver d-before)" 202 "a webhook delivery is accepted (202)"
d_before_run=$(runs_of udf-h "$(sha256sum <"$TEST_TMP/d.json" | cut -d' ' -f1)")
d_before_run=${d_before_run#$U-a:}
[ -n "$d_before_run" ] && run_wait $U-a "$d_before_run" >/dev/null
ok $? "its run ends"

# what_is_there: a summary of everything acknowledged, for before/after comparisons.
what_is_there() {
	"$FLEETCTL" --json list | jq -r '[.[].name] | sort | join(",")'
	"$FLEETCTL" --json secret ls $U-a | jq -r '[.[].key] | join(",")'
	"$FLEETCTL" --json memory $U-a ls | jq -r '[.keys[] | .key + "=" + (.size|tostring)] | join(",")'
	"$FLEETCTL" --json snapshots $U-a | jq -r '[.[].name] | sort | join(",")'
	"$FLEETCTL" --json runs $U-a --limit 100 | jq -r '[.[].id] | sort | join(",")'
	"$FLEETCTL" --json schedule ls $U-a | jq -r 'length'
	db_q "SELECT count(*) FROM events"
}
# leftovers: temp files anywhere in the state dir (a half-written write's remains).
leftovers() {
	find "$STATE" \( -name '*.tmp' -o -name '*.new' -o -name '.put-*' -o -name '*-journal' \
		-o -name '.#*' -o -name '*.partial' \) -print 2>/dev/null | sed "s|^$STATE/||" | sort | tr '\n' ' '
}
full_msg='[Nn]o space|disk (is )?full|filesystem (is )?full'

# fill_fs FILE: FILE's filesystem full to its last byte (root has no reserve on tmpfs).
fill_fs() {
	dd if=/dev/zero of="$1" bs=1M 2>/dev/null
	dd if=/dev/zero of="$1.small" bs=4k 2>/dev/null
	dd if=/dev/zero of="$1.tiny" bs=512 2>/dev/null
	[ "$(df --output=avail -B1 "$(dirname "$1")" | tail -1 | tr -d ' ')" -lt 4096 ]
}
unfill_fs() { rm -f "$1" "$1.small" "$1.tiny"; }
fill() { fill_fs "$FILLER" && fill_fs "$RFILLER" && fill_fs "$SFILLER"; }
unfill() { unfill_fs "$FILLER"; unfill_fs "$RFILLER"; unfill_fs "$SFILLER"; }

BEFORE=$(what_is_there)
is "$(leftovers)" "" "no temp files before the fault"

# ---------------- the disk is full ----------------
fill; ok $? "the state dir's filesystem is full ($(df -h --output=used,size "$STATE" | tail -1 | xargs))"

# refused_or_stored RC OUT WHAT STORED-CHECK...: the write either failed with a
# message that says the disk is full and STORED-CHECK fails (nothing kept), or
# it succeeded and STORED-CHECK passes (it really is stored).
refused_or_stored() {
	local rc=$1 out=$2 what=$3; shift 3
	if [ "$rc" -ne 0 ]; then
		diag "$what on a full disk: $out"
		like "$out" "$full_msg" "$what on a full disk: refused, saying the disk is full"
		if "$@" >/dev/null 2>&1; then ok 1 "$what: refused, and nothing of it is kept"; else ok 0 "$what: refused, and nothing of it is kept"; fi
	else
		diag "$what succeeded on a full disk (it fitted in space already allocated)"
		check "$what: acknowledged, and it really is stored" -- "$@"
	fi
}

out=$("$FLEETCTL" create $U-b --backend user --memory-quota 4 --command 'echo b' 2>&1); rc=$?
created_b() { "$FLEETCTL" show $U-b && [ -d "$STATE/users/$U-b" ] && getent passwd fleet-$U-b; }
half_b() { "$FLEETCTL" show $U-b || [ -e "$STATE/users/$U-b" ] || getent passwd fleet-$U-b; }
if [ $rc -ne 0 ]; then
	diag "create on a full disk: $out"
	like "$out" "$full_msg" "create on a full disk: refused, saying the disk is full"
	half_b >/dev/null 2>&1; ok $((!$?)) "create: nothing of the agent is left (row, home, Unix user)"
else
	diag "create succeeded on a full disk"
	created_b >/dev/null 2>&1; ok $? "create: acknowledged, and the agent is complete"
fi
B_CREATED=$rc

out=$(printf 'during' | "$FLEETCTL" secret set $U-a TOKEN2 2>&1)
refused_or_stored $? "$out" "secret set" sh -c "'$FLEETCTL' --json secret ls $U-a | jq -e 'any(.[]; .key == \"TOKEN2\")'"

out=$("$FLEETCTL" memory $U-a put big <"$TEST_TMP/blob" 2>&1)
refused_or_stored $? "$out" "memory put" sh -c "'$FLEETCTL' memory $U-a get big | cmp -s - '$TEST_TMP/blob'"

out=$("$FLEETCTL" snapshot $U-a s-during 2>&1)
refused_or_stored $? "$out" "snapshot" sh -c "'$FLEETCTL' --json snapshots $U-a | jq -e 'any(.[]; .name == \"s-during\")'"

last_run=$("$FLEETCTL" --json runs $U-a | jq -r 'max_by(.id).id')
out=$("$FLEETCTL" trigger $U-a --wait 2>&1); rc=$?
RUN_D=$("$FLEETCTL" --json runs $U-a | jq -r 'max_by(.id).id')
if [ "$RUN_D" != "$last_run" ]; then
	st=$(run_wait $U-a "$RUN_D")
	diag "trigger on a full disk: rc $rc, run $RUN_D $st: $out"
	if [ "$st" = succeeded ]; then
		like "$("$FLEETCTL" logs $U-a "$RUN_D" 2>&1)" "ran-$RUN_D" "a run that succeeded on a full disk has its whole log"
	else
		like "$("$FLEETCTL" --json runs $U-a "$RUN_D" | jq -r '.error // .reason // .detail // ""')$out" "$full_msg" \
			"a run that cannot log on a full disk fails, saying the disk is full"
	fi
else
	diag "trigger on a full disk: $out"
	like "$out" "$full_msg" "trigger on a full disk: refused, saying the disk is full"
fi

before=$(db_counts)
st=$(deliver d-during)
case $st in
2*) diag "a delivery on a full disk was accepted ($st)"
	# (the body is a BLOB, and LIKE matches no BLOB: compare its text)
	is "$(db_q "SELECT count(*) FROM events WHERE CAST(body AS TEXT) LIKE '%d-during%'")" 1 "a delivery accepted on a full disk is stored" ;;
*) is "$st" 503 "a delivery on a full disk: 503"
	like "$(cat "$HOOK_RESP")" "$full_msg|try again|unavailable" "its body says why"
	is "$(db_counts)" "$before" "and it stored nothing" ;;
esac

out=$("$FLEETCTL" schedule add $U-a '0 4 * * *' 2>&1)
refused_or_stored $? "$out" "schedule add" sh -c "'$FLEETCTL' --json schedule ls $U-a | jq -e 'any(.[]; .cron == \"0 4 * * *\")'"

out=$("$FLEETCTL" set $U-a --command 'echo changed-$FLEET_RUN_ID' 2>&1)
refused_or_stored $? "$out" "set --command" sh -c "'$FLEETCTL' show $U-a | grep -q changed-"

# The API's status for the two writes whose own limits are also "full" (a run
# queue's --max-queued, 64 schedules): the disk's is 507 no_space, not theirs.
out=$(api POST /v1/agents/$U-a/runs); st=${out##* }
case $st in 2*) diag "POST runs on a full disk was accepted: $out" ;;
*) is "$st" 507 "POST /v1/agents/$U-a/runs on a full disk: 507 (not 429 queue_full)"
	like "$out" '"no_space"' "code no_space" ;;
esac
out=$(api POST /v1/agents/$U-a/schedules '{"cron": "0 6 * * *"}'); st=${out##* }
case $st in 2*) diag "POST schedules on a full disk was accepted: $out" ;;
*) is "$st" 507 "POST /v1/agents/$U-a/schedules on a full disk: 507 (not 409 limit)"
	like "$out" '"no_space"' "code no_space" ;;
esac

# Reads go on.
check "list is served on a full disk" -- "$FLEETCTL" list
check "show is served" -- "$FLEETCTL" show $U-a
check "status is served" -- "$FLEETCTL" status
check "runs is served" -- "$FLEETCTL" runs $U-a
like "$("$FLEETCTL" logs $U-a "$RUN1" 2>&1)" "ran-$RUN1" "logs of an older run are served"
is "$(hooks_json state)" up "the webhook listener is still up"
is "$(cat "/proc/$FLEETD_PID/comm" 2>/dev/null)" fleetd "fleetd is still running"

# ---------------- the space comes back: recovery without a restart ----------------
unfill
DURING=$(what_is_there)
printf 'after' | "$FLEETCTL" secret set $U-a TOKEN3 >/dev/null; ok $? "secret set succeeds again"
"$FLEETCTL" memory $U-a put big2 <"$TEST_TMP/blob"; ok $? "memory put succeeds again"
"$FLEETCTL" snapshot $U-a s-after >/dev/null; ok $? "snapshot succeeds again"
"$FLEETCTL" trigger $U-a --wait >"$TEST_TMP/run3.out" 2>&1; ok $? "a run succeeds again"
is "$(deliver d-after)" 202 "a webhook delivery is accepted again"
"$FLEETCTL" schedule add $U-a '0 5 * * *' >/dev/null; ok $? "schedule add succeeds again"
"$FLEETCTL" set $U-a --command 'echo again-$FLEET_RUN_ID' >/dev/null; ok $? "set succeeds again"
if [ "$B_CREATED" -ne 0 ]; then
	"$FLEETCTL" create $U-b --backend user --memory-quota 4 --command 'echo b' >/dev/null; ok $? "create succeeds again"
fi
is "$(cat "/proc/$FLEETD_PID/comm" 2>/dev/null)" fleetd "with the same fleetd (no restart)"

# Everything acknowledged before the fault is still there (each line of BEFORE
# is a prefix-or-subset of now: compare the parts that cannot have changed).
NOW=$(what_is_there)
has_all() {	# has_all OLD NEW: every comma item of each OLD line is in NEW's line
	local i old new
	for i in 1 2 3 4 5; do
		old=$(sed -n "${i}p" <<<"$1"); new=$(sed -n "${i}p" <<<"$2")
		for x in ${old//,/ }; do [[ ",$new," == *",$x,"* ]] || { diag "line $i: '$x' is missing from '$new'"; return 1; }; done
	done
}
has_all "$BEFORE" "$NOW"; ok $? "everything acknowledged before the fault is there (agents, secrets, memory, snapshots, runs)"
has_all "$DURING" "$NOW"; ok $? "and everything acknowledged during it"
cmp -s <("$FLEETCTL" memory $U-a get blob) "$TEST_TMP/blob"; ok $? "the memory value from before, byte for byte"
is "$(db_q 'PRAGMA integrity_check')" ok "the database's integrity_check is ok"
is "$(leftovers)" "" "no temp files left in the state dir"

# ---------------- a run whose log cannot be written ----------------
# Only the run logs' filesystem full: the run starts and ends in the database,
# but its output cannot all go to its log. It must not read as a success with
# a log cut short and nothing saying so.
"$FLEETCTL" create $U-c --backend user --memory-quota 4 --command 'head -c 300000 /dev/zero | tr "\0" x; echo; echo end-$FLEET_RUN_ID' >/dev/null
ok $? "create agent $U-c (its runs write 300 kB)"
fill_fs "$RFILLER"; ok $? "the run logs' filesystem is full"
"$FLEETCTL" trigger $U-c >/dev/null; ok $? "trigger $U-c (the database has room)"
RUN_C=$("$FLEETCTL" --json runs $U-c | jq -r 'max_by(.id).id')
st=$(run_wait $U-c "$RUN_C")
if [ "$st" = succeeded ]; then
	like "$("$FLEETCTL" logs $U-c "$RUN_C" 2>/dev/null | tail -1)" "end-$RUN_C" "a run that succeeded has its whole log"
else
	is "$st" failed "a run whose log could not be written whole fails"
	like "$("$FLEETCTL" --json runs $U-c "$RUN_C" | jq -r '.error // ""')" "$full_msg" "and its error says the disk is full"
fi
unfill_fs "$RFILLER"
"$FLEETCTL" trigger $U-c --wait >"$TEST_TMP/runc.out" 2>&1; ok $? "with room again, a run of $U-c succeeds"
like "$(cat "$TEST_TMP/runc.out")" "end-[0-9]+" "with its whole log"

# ---------------- a snapshot whose copy cannot be written ----------------
# Only the snapshots' filesystem full: the snapshot's record fits in the
# database, the copy of the home does not.
fill_fs "$SFILLER"; ok $? "the snapshots' filesystem is full"
out=$("$FLEETCTL" snapshot $U-a s-copy 2>&1)
refused_or_stored $? "$out" "a snapshot whose copy cannot be written" \
	sh -c "'$FLEETCTL' --json snapshots $U-a | jq -e 'any(.[]; .name == \"s-copy\")'"
is "$(leftovers)" "" "no half copy left"
unfill_fs "$SFILLER"
"$FLEETCTL" snapshot $U-a s-copy >/dev/null; ok $? "with room again, the same snapshot succeeds"

# ---------------- kill -9 mid-writes on a full disk, then restart ----------------
fill; ok $? "the filesystem is full again"
(	for i in $(seq 40); do
		printf 'k%s' "$i" | "$FLEETCTL" secret set $U-a "K$i" >/dev/null 2>&1
		"$FLEETCTL" memory $U-a put "k$i" <"$TEST_TMP/blob" >/dev/null 2>&1
		"$FLEETCTL" snapshot $U-a "s-k$i" >/dev/null 2>&1
		"$FLEETCTL" trigger $U-a >/dev/null 2>&1
		deliver "d-k$i" >/dev/null 2>&1
	done ) &
writer=$!
sleep 2
BEFORE_KILL=$(what_is_there)
kill -9 "$FLEETD_PID"; ok $? "kill -9 fleetd mid-writes"
wait "$writer"
_hooks_kill_left
unfill
hooks_fleetd_start; ok $? "fleetd restarts on the freed filesystem"
for a in $("$FLEETCTL" --json runs $U-a --limit 100 | jq -r '.[] | select(.state == "queued" or .state == "running") | .id'); do
	run_wait $U-a "$a" >/dev/null
done
AFTER_KILL=$(what_is_there)
has_all "$NOW" "$AFTER_KILL"; ok $? "everything acknowledged before the kill is there"
is "$(db_q 'PRAGMA integrity_check')" ok "integrity_check after the kill is ok"
"$FLEETCTL" trigger $U-a --wait >/dev/null 2>&1; ok $? "a run succeeds after the restart"
is "$(deliver d-last)" 202 "and a webhook delivery"
is "$(leftovers)" "" "no temp files left in the state dir after the restart"

diag "took $((SECONDS - T0)) s"
done_testing
