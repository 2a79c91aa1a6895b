#!/bin/bash
# The control API's bounds, with a raw client on the socket: a caller not
# allowed is answered 403 at connect and none of its request is read; each
# route has its own body limit, checked from Content-Length before the body
# is read (exec still takes a large stdin); connections are capped; a client
# must send its whole request within request_timeout (slowloris).
. "$FLEET_SRCDIR/tests/lib/common.sh"
U=lim$(test_run_id)	# agent names of this run (two checkouts at once never collide)

# The system's python3: uid nobody cannot run one from root's home (pyenv).
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3) || skip_all "python3 not installed"

# raw.py SOCKET MODE ...: one raw HTTP client; prints the answer's status line
# (or "closed" if the connection ended without one), and for 'body' the bytes
# of the body that went out first.
cat > "$TEST_TMP/raw.py" <<'PY'
import socket, sys, time
sock_path, mode, args = sys.argv[1], sys.argv[2], sys.argv[3:]

def connect():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(60)        # only so a broken fleetd cannot hang the test
    s.connect(sock_path)
    return s

def answer(s):
    data = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
    except OSError:
        pass
    line = data.split(b"\r\n", 1)[0].decode("ascii", "replace")
    return line if line else "closed"

def send(s, data):
    try:
        s.sendall(data)
        return True
    except OSError:
        return False

if mode == "idle":                  # connect, send nothing, end the request side
    s = connect()
    s.shutdown(socket.SHUT_WR)
    print(answer(s))
elif mode == "headers":             # METHOD PATH LENGTH: headers only, no body
    s = connect()
    send(s, ("%s %s HTTP/1.1\r\nHost: fleet\r\nContent-Type: application/json\r\n"
             "Content-Length: %s\r\n\r\n" % (args[0], args[1], args[2])).encode())
    s.shutdown(socket.SHUT_WR)
    print(answer(s))
elif mode == "body":                # PATH LENGTH: headers, then as much of the body as goes out
    s = connect()
    n = int(args[1])
    sent = 0
    if send(s, ("POST %s HTTP/1.1\r\nHost: fleet\r\nContent-Type: application/json\r\n"
                "Content-Length: %d\r\n\r\n" % (args[0], n)).encode()):
        s.settimeout(20)
        chunk = b"x" * 65536
        while sent < n and send(s, chunk[:min(65536, n - sent)]):
            sent += min(65536, n - sent)
    s.settimeout(60)
    print(answer(s), sent)
elif mode == "slow":                # PATH DELAY: the request one byte at a time
    s = connect()
    for c in ("GET %s HTTP/1.0\r\n\r\n" % args[0]).encode():
        if not send(s, bytes([c])):
            break
        time.sleep(float(args[1]))
    print(answer(s))
elif mode == "hold":                # N: N idle connections, then one more asks for /v1/status
    held = [connect() for _ in range(int(args[0]))]
    time.sleep(0.5)                 # not a bound: lets fleetd see them before the extra one
    s = connect()
    send(s, b"GET /v1/status HTTP/1.1\r\nHost: fleet\r\nConnection: close\r\n\r\n")
    print(answer(s))
    for h in held:
        h.close()
PY
chmod 0644 "$TEST_TMP/raw.py"
raw() { "$PY" "$TEST_TMP/raw.py" "$SOCK" "$@"; }

start_fleetd limits --max-body-bytes 4096 --max-connections 4 || { ok 1 "fleetd starts"; done_testing; }

# --- a caller that is not allowed: answered at connect, never read ---
if id nobody >/dev/null 2>&1 && command -v setpriv >/dev/null; then
	chmod 0666 "$SOCK"	# a mistake in permissions: fleetd must still keep others out
	nobody() { setpriv --reuid=nobody --regid=nogroup --clear-groups "$PY" "$TEST_TMP/raw.py" "$SOCK" "$@"; }
	like "$(nobody idle)" "^HTTP/1.1 403" "uid nobody is answered 403 at connect, before sending a byte"
	out=$(nobody body /v1/agents $((10 << 20)))
	like "$out" "^HTTP/1.1 403 " "uid nobody sending a 10 MiB body is answered 403"
	sent=${out##* }
	ok $([ "$sent" -lt $((10 << 20)) ] && echo 0 || echo 1) \
		"and fleetd never reads the body: $sent of 10485760 bytes went out before the connection closed"
	chmod 0660 "$SOCK"
	like "$(grep 'refused uid' "$STATE/fleetd.log" 2>/dev/null | head -1)" "at connect" "fleetd logs the refusal at connect"
	out=$(api GET '/v1/audit?limit=100')
	is "$(printf '%s' "${out% *}" | jq '[.entries[] | select(.action == "api.connect" and .outcome == "refused")] | length > 0')" true \
		"the refusal is audited (at most one record per 10 s)"
else
	skip_all "needs user nobody and setpriv"
fi

# --- per-route body limits, from Content-Length, before the body ---
like "$(raw headers POST /v1/agents $((1 << 20)))" "^HTTP/1.1 413" \
	"a 1 MiB body to POST /v1/agents is refused (413) from its headers, without the body"
like "$(raw headers GET /v1/status $((1 << 20)))" "^HTTP/1.1 413" "a 1 MiB body to GET /v1/status too"
like "$(raw headers DELETE /v1/agents/nobody-here 2048)" "^HTTP/1.1 413" "a 2 kB body to a route without a body too"
like "$(raw headers POST /v1/agents/$U-x/exec $((8 << 20)))" "^closed$" \
	"an 8 MiB body to exec is not refused: fleetd waits for it"
out=$(api POST /v1/agents "$(printf '{"name":"b","command":"%s"}' "$(head -c 5000 /dev/zero | tr '\0' x)")")
is "$(printf '%s' "${out% *}" | jq -r .code) ${out##* }" "too_large 413" \
	"a body a little over max_body_bytes still gets the JSON 413"
if [ "$(id -u)" = 0 ]; then
	export FLEET_SOCKET=$SOCK
	"$FLEETCTL" create $U-x --backend user >/dev/null; ok $? "create user agent $U-x"
	"$FLEETCTL" start $U-x >/dev/null; ok $? "start it"
	out=$(head -c $((3 << 20)) /dev/zero | "$FLEETCTL" exec $U-x -- wc -c)
	is "$out" $((3 << 20)) "exec still takes a 3 MiB stdin"
	# A streaming exec whose client goes away: fleetd still cancels it (and counts the close, below).
	"$FLEETCTL" exec $U-x -- sleep 120 & xpid=$!
	for ((i = 0; i < 1000; i++)); do grep -q "exec sleep by uid" "$STATE/fleetd.log" && break; sleep 0.02; done
	kill "$xpid"; wait "$xpid" 2>/dev/null
	for ((i = 0; i < 1000; i++)); do grep -q "exec client went away" "$STATE/fleetd.log" && break; sleep 0.02; done
	check "an exec whose client goes away is cancelled" -- grep -q "$U-x': exec client went away" "$STATE/fleetd.log"
	"$FLEETCTL" rm --force $U-x >/dev/null; ok $? "remove $U-x"
fi

# --- the connection cap (max_connections = 4) ---
# only_this_one: fleetd has seen every earlier connection close (the status call is the one open).
only_this_one() { [ "$(curl -sS --unix-socket "$SOCK" http://fleet/v1/status | jq .api_connections)" = 1 ]; }
settled() { for ((i = 0; i < 500; i++)); do only_this_one && return 0; sleep 0.02; done; return 1; }
settled; ok $? "before: one connection open, the status call's own"
is "$(raw hold 4)" "HTTP/1.1 503 Service Unavailable" "with 4 connections open, a fifth is answered 503"
settled; ok $? "once they close, fleetd counts them gone"
check "and answers again" -- curl -sSf --unix-socket "$SOCK" http://fleet/v1/status
is "$(raw hold 3)" "HTTP/1.1 200 OK" "with 3 open, a fourth is served"
settled; ok $? "and every connection is counted gone once closed (no leak in the count)"
stop_fleetd; ok $? "fleetd stops"

# --- slowloris: the whole request within request_timeout ---
start_fleetd slow --request-timeout 2 || { ok 1 "fleetd starts"; done_testing; }
is "$(raw slow /v1/status 0.5)" closed \
	"a client sending its request a byte every 0.5 s (past request_timeout 2) is disconnected"
like "$(grep 'did not send its whole request' "$STATE/fleetd.log" 2>/dev/null | head -1)" "request_timeout" "fleetd logs why"
is "$(raw slow /v1/status 0)" "HTTP/1.0 200 OK" "a client sending the same request at once is answered"

done_testing
