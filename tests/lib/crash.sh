# Shared by the crash-consistency drivers (tests/integration/ and tests/vm/)
# and the soak (tests/soak/soak.sh): run ids, argument parsing, the worker
# journal, signed delivery sets, set comparisons, the database as a kill left
# it. Source tests/lib/common.sh first.

# crash_run_id: test_run_id (tests/lib/common.sh), for agent names.
crash_run_id() { test_run_id; }

# crash_args CYCLES_DEFAULT "$@": --cycles N / --seed S (or CRASH_CYCLES,
# CRASH_SEED given before); sets CYCLES and SEED, seeds $RANDOM.
crash_args() {
	CYCLES=$1; shift
	SEED=${CRASH_SEED:-$(( $(date +%s) % 100000 ))}
	while [ $# -gt 0 ]; do
		case $1 in
		--cycles) CYCLES=$2; shift 2 ;;
		--seed) SEED=$2; shift 2 ;;
		*) fail_all "unknown argument '$1' (--cycles N, --seed S)" ;;
		esac
	done
	RANDOM=$SEED
}

# crash_workers_lib TIMEOUT: prints the start of a workers' file: rec FILE
# WORDS... (one journal line; each worker its own file, in order) and fc
# (fleetctl with a timeout, errors silenced).
crash_workers_lib() {
	cat <<EOF
rec() { local f=\$1; shift; printf '%s\n' "\$*" >> "\$f"; }
fc() { timeout $1 "\$FLEETCTL" "\$@" 2>/dev/null; }
EOF
}

# crash_make_set DIR N KEY: signed deliveries DIR/I.json with DIR/I.sig
# (HMAC-SHA256 hex under KEY) and DIR/I.id (the body's SHA-256: hmac routes
# use it as the delivery id), I = 1..N, each body unique. One python3 for all:
# a few hundred openssl processes cost seconds on a loaded box.
crash_make_set() {
	"${PY:-python3}" - "$1" "$2" "$3" <<'PYEOF'
import hashlib, hmac, os, sys
d, n, key = sys.argv[1], int(sys.argv[2]), sys.argv[3].encode()
os.makedirs(d, exist_ok=True)
nonce = os.urandom(8).hex()
for i in range(1, n + 1):
    body = ('{"n":%d,"nonce":"%s"}' % (i, nonce)).encode()
    for ext, data in (("json", body), ("sig", hmac.new(key, body, hashlib.sha256).hexdigest().encode()),
                      ("id", hashlib.sha256(body).hexdigest().encode())):
        with open("%s/%d.%s" % (d, i, ext), "wb") as f:
            f.write(data)
PYEOF
}

# crash_send_start DIR N URL HEADER [PARALLEL]: start posting DIR/1..N with
# curl in the background, PARALLEL (default 4) at a time, the signature in
# header HEADER; sets CRASH_SEND_PID (xargs: kill it to send no more, wait
# for it to have all answers). Each status lands in DIR/I.st (absent: never
# answered, or never sent).
crash_send_start() {
	local dir=$1 n=$2 url=$3 header=$4 par=${5:-4}
	seq 1 "$n" | xargs -P "$par" -I{} sh -c '
		d=$1 u=$2 h=$3 i=$4
		curl -s -o /dev/null -w "%{http_code}" --max-time 60 -X POST -H "Content-Type: application/json" \
			-H "$h: $(cat "$d/$i.sig")" --data-binary "@$d/$i.json" "$u" > "$d/$i.st.tmp" &&
			mv "$d/$i.st.tmp" "$d/$i.st"' sh "$dir" "$url" "$header" {} &
	CRASH_SEND_PID=$!
	_pids+=("$CRASH_SEND_PID")
}

# set_diff A B: "" when the sorted lists (one item a line) agree, else the
# items in one only, on one line.
set_diff() { diff <(printf '%s\n' "$1" | sed '/^$/d') <(printf '%s\n' "$2" | sed '/^$/d') | sed -n 's/^[<>] //p' | tr '\n' ' '; }

# crash_db_copy: copy fleet.db and its WAL as a kill left them (before a
# restart can repair anything) to $TEST_TMP/copy; prints the copy's path.
crash_db_copy() {
	local copy=$TEST_TMP/copy
	rm -rf "$copy"; mkdir "$copy"
	cp "$STATE/fleet.db" "$copy/"; [ -e "$STATE/fleet.db-wal" ] && cp "$STATE/fleet.db-wal" "$copy/"
	printf '%s\n' "$copy/fleet.db"
}

# crash_wait_restored AGENT TRIES: a restore the kill cut off is finished at
# fleetd's start (docs/user-backend.md, docs/vm-backend.md); wait for it,
# at most TRIES × 0.2 s.
crash_wait_restored() {
	local i
	for ((i = 0; i < $2; i++)); do
		[ "$("$FLEETCTL" --json show "$1" | jq -r '.snapshots.restoring')" = null ] && return 0
		sleep 0.2
	done
	return 1
}

# crash_half_states: agents left half-made, half-removed, missing or bad ("" if none)
crash_half_states() {
	"$FLEETCTL" --json list | jq -r '.[] | select(.state == "provisioning" or .state == "removing" or .state == "missing" or .state == "bad") | "\(.name) \(.state)"' | tr '\n' ' '
}
