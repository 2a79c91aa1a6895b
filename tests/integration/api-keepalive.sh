#!/bin/bash
# HTTP/1.1 keep-alive on the control API (docs/api.md, "Connections"), with
# curl and a raw client on the socket: two requests on one connection;
# pipelined requests answered in order; Connection: close, HTTP/1.0 without
# keep-alive and an error answer close the connection after the answer
# (what was pipelined behind an error is not answered); HTTP/1.0 with
# keep-alive is kept; each request's line chooses its own body limit, also
# when it was pipelined; a kept connection idle past request_timeout is
# closed; a watch stream and then a hang-up; input pipelined behind a stream
# is not read past a watermark; fleetctl apply makes its calls on one
# connection.
. "$FLEET_SRCDIR/tests/lib/common.sh"

PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3) || skip_all "python3 not installed"
command -v jq >/dev/null || skip_all "jq not installed"
command -v strace >/dev/null || skip_all "strace not installed"

# ka.py SOCKET MODE: one raw HTTP/1.1 client; prints what it saw, one word per answer.
cat > "$TEST_TMP/ka.py" <<'PY'
import socket, sys
sock_path, mode = sys.argv[1], sys.argv[2]

class Conn:
    def __init__(self):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.settimeout(60)       # only so a broken fleetd cannot hang the test
        self.s.connect(sock_path)
        self.buf = b""
        self.eof = False

    def send(self, data):
        self.s.sendall(data)

    def fill(self):
        b = self.s.recv(65536)
        if not b:
            raise EOFError
        self.buf += b

    def line(self):
        while b"\r\n" not in self.buf:
            self.fill()
        l, self.buf = self.buf.split(b"\r\n", 1)
        return l.decode("latin-1")

    def take(self, n):
        while len(self.buf) < n:
            self.fill()
        d, self.buf = self.buf[:n], self.buf[n:]
        return d

    def response(self):
        """(status, headers, body) of one answer with a length; chunked: headers only."""
        status = int(self.line().split(" ")[1])
        headers = {}
        while True:
            l = self.line()
            if not l:
                break
            k, v = l.split(":", 1)
            headers[k.strip().lower()] = v.strip()
        if headers.get("transfer-encoding") == "chunked":
            return status, headers, None
        if "content-length" not in headers:   # HTTP/1.0 without keep-alive: the body ends at EOF
            try:
                while True:
                    self.fill()
            except EOFError:
                self.eof = True
            body, self.buf = self.buf, b""
            return status, headers, body
        return status, headers, self.take(int(headers.get("content-length", "0")))

    def chunk(self):
        n = int(self.line(), 16)
        d = self.take(n)
        self.line()
        return d

    def closed(self, timeout=30):
        """True when fleetd closes the connection (EOF) with nothing more sent, within timeout s."""
        if self.eof:
            return True
        self.s.settimeout(timeout)
        try:
            while not self.buf:
                self.fill()
            return False
        except EOFError:
            return True
        except OSError:
            return False

def get(path, extra=""):
    return ("GET %s HTTP/1.1\r\nHost: fleet\r\n%s\r\n" % (path, extra)).encode()

def post(path, body):
    return ("POST %s HTTP/1.1\r\nHost: fleet\r\nContent-Type: application/json\r\n"
            "Content-Length: %d\r\n\r\n" % (path, len(body))).encode() + body

def kind(body):
    doc = __import__("json").loads(body)
    return "status" if "api_connections" in doc else "agents" if "agents" in doc else doc.get("code", "?")

c = Conn()
out = []
if mode == "two":               # one request, its answer, then the next on the same connection
    for p in ("/v1/status", "/v1/agents"):
        c.send(get(p))
        st, h, b = c.response()
        out += [str(st), kind(b)]
elif mode == "pipeline":        # three requests sent at once: answered in order, the connection kept
    c.send(get("/v1/status") + get("/v1/agents") + get("/v1/status"))
    for _ in range(3):
        st, h, b = c.response()
        out += [str(st), kind(b)]
    c.send(get("/v1/agents"))
    st, h, b = c.response()
    out += ["then", str(st), kind(b)]
elif mode == "close":           # Connection: close
    c.send(get("/v1/status", "Connection: close\r\n"))
    st, h, b = c.response()
    out += [str(st), h.get("connection", "-"), "eof" if c.closed() else "open"]
elif mode == "http10":          # HTTP/1.0 without keep-alive
    c.send(b"GET /v1/status HTTP/1.0\r\n\r\n")
    st, h, b = c.response()
    out += [str(st), "eof" if c.closed() else "open"]
elif mode == "http10ka":        # HTTP/1.0 with keep-alive: two answers on one connection
    for _ in range(2):
        c.send(b"GET /v1/status HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        st, h, b = c.response()
        out += [str(st), h.get("connection", "-")]
elif mode == "error":           # an error answer closes; what was pipelined behind it is not answered
    c.send(get("/v1/no-such-path") + get("/v1/status"))
    st, h, b = c.response()
    out += [str(st), kind(b), h.get("connection", "-"), "eof" if c.closed() else "open"]
elif mode == "limit":           # a GET (1 KiB limit) then a POST over max_body_bytes: the POST's own limit
    c.send(get("/v1/status"))
    st, h, b = c.response()
    out += [str(st)]
    c.send(post("/v1/agents", b'{"name":"' + b"x" * 5000 + b'"}'))
    st, h, b = c.response()
    out += [str(st), kind(b)]
elif mode == "limit-pipelined":  # the same, sent at once: the POST's line is read from the buffer
    c.send(get("/v1/status") + post("/v1/agents", b'{"name":"' + b"x" * 5000 + b'"}'))
    for _ in range(2):
        st, h, b = c.response()
        out += [str(st), kind(b)]
elif mode == "limit-get":       # a body over the GET's 1 KiB behind a first GET: refused (plain 413) and closed
    c.send(get("/v1/status") + ("GET /v1/status HTTP/1.1\r\nHost: fleet\r\nContent-Length: 4096\r\n\r\n").encode())
    st, h, b = c.response()
    out += [str(st)]
    st, h, b = c.response()
    out += [str(st), "eof" if c.closed() else "open"]
elif mode == "idle":            # answered, then nothing: closed at request_timeout
    c.send(get("/v1/status"))
    st, h, b = c.response()
    out += [str(st), "eof" if c.closed() else "open"]
elif mode == "watch":           # a watch stream, its first line, then the client hangs up
    c.send(get("/v1/watch"))
    st, h, b = c.response()
    out += [str(st), __import__("json").loads(c.chunk())["type"]]
elif mode == "watch-flood":     # bytes pipelined behind a watch stream: fleetd stops reading them
    c.send(get("/v1/watch"))
    st, h, b = c.response()
    out += [str(st), __import__("json").loads(c.chunk())["type"]]
    want, sent = 16 << 20, 0
    c.s.settimeout(3)           # a send making no progress for 3 s: fleetd is not reading
    try:
        while sent < want:
            sent += c.s.send(b"x" * min(65536, want - sent))
    except OSError:
        pass
    out += ["partial" if sent < want else "all", str(sent)]
print(" ".join(out))
PY
ka() { "$PY" "$TEST_TMP/ka.py" "$SOCK" "$@"; }
conns() { curl -sS --unix-socket "$SOCK" http://fleet/v1/status | jq .api_connections; }
# settled: fleetd has seen every earlier connection close (the status call's own is the one open).
settled() { for ((i = 0; i < 500; i++)); do [ "$(conns)" = 1 ] && return 0; sleep 0.02; done; return 1; }

start_fleetd keep --max-body-bytes 4096 --request-timeout 2 --log-level debug ||
	{ ok 1 "fleetd starts"; done_testing; }

# --- curl: two URLs, one connection ---
out=$(curl -sS --unix-socket "$SOCK" -o /dev/null -o /dev/null -w '%{http_code}:%{num_connects} ' \
	http://fleet/v1/status http://fleet/v1/agents)
is "$out" "200:1 200:0 " "curl's second request reuses the first one's connection (no new connect)"
out=$(curl -sS --unix-socket "$SOCK" -D - -o /dev/null http://fleet/v1/status | tr -d '\r' | grep -i '^connection:')
is "$out" "" "a 200 answer to HTTP/1.1 does not say Connection: close"

# --- the raw client ---
is "$(ka two)" "200 status 200 agents" "two requests, one after the other, on one connection"
is "$(ka pipeline)" "200 status 200 agents 200 status then 200 agents" \
	"three pipelined requests answered in order, and the connection kept for a fourth"
is "$(ka close)" "200 close eof" "Connection: close is honoured: the answer says so and the connection closes"
is "$(ka http10)" "200 eof" "HTTP/1.0 without keep-alive: closed after the answer"
is "$(ka http10ka)" "200 keep-alive 200 keep-alive" "HTTP/1.0 with Connection: keep-alive: kept"
is "$(ka error)" "404 not_found close eof" \
	"an error answer says Connection: close and closes; the request pipelined behind it is not answered"
is "$(ka limit)" "200 413 too_large" \
	"after a GET (1 KiB body limit), a POST on the same connection has its own limit (JSON 413 past max_body_bytes)"
is "$(ka limit-pipelined)" "200 status 413 too_large" "the same when the POST was pipelined behind the GET"
is "$(ka limit-get)" "200 413 eof" "a body over the limit of a second GET is refused (plain 413) and closes"
settled; ok $? "every connection is counted gone once closed"

# --- request_timeout (2 s here): an idle kept connection is closed ---
is "$(ka idle)" "200 eof" "a kept connection idle past request_timeout is closed (within 30 s)"
check "fleetd logs it at debug" -- grep -q "closed a kept connection idle" "$STATE/fleetd.log"

# --- a watch stream, then the client hangs up ---
is "$(ka watch)" "200 watching" "a watch stream starts on a connection"
settled; ok $? "its hang-up is seen: the connection is counted gone"
out=$(ka watch-flood)
like "$out" "^200 watching partial " "fleetd stops reading what is pipelined behind a stream (sent: ${out##* } of 16 MiB)"
settled; ok $? "and the connection is gone once the client hangs up"
check "fleetd still answers" -- curl -sSf --unix-socket "$SOCK" http://fleet/v1/status

# --- fleetctl apply: its lists and changes on one connection ---
printf 'version: 1\nagents: {}\n' > "$TEST_TMP/fleet.yaml"
before=$(grep -c "api: uid 0 " "$STATE/fleetd.log")
strace -f -qq -e trace=connect -o "$TEST_TMP/apply.strace" "$FLEETCTL" apply "$TEST_TMP/fleet.yaml" \
	> "$TEST_TMP/apply.out" 2>&1
ok $? "fleetctl apply of an empty fleet file" || sed 's/^/#   /' "$TEST_TMP/apply.out"
calls=$(($(grep -c "api: uid 0 " "$STATE/fleetd.log") - before))
connects=$(grep -c "connect(.*$SOCK" "$TEST_TMP/apply.strace")
ok $([ "$calls" -ge 3 ] && echo 0 || echo 1) "it made $calls API calls (three lists at least)"
is "$connects" 1 "on one connection to fleetd's socket"

stop_fleetd; ok $? "fleetd stops"
done_testing
