"""Raw HTTP clients for the webhook listener's tests (#11), where curl cannot
send what is needed: malformed requests (duplicate Content-Length, bad chunked
encoding) and hostile clients (slowloris, half-open, endless chunked bodies).
Loopback only: the tests pass 127.0.0.x addresses.

  hookraw.py send HOST PORT FILE
      sends FILE's bytes as they are, prints the answer's status line
      ("closed" if the connection ended without one).
  hookraw.py session HOST PORT FILE...
      on ONE connection, for each FILE: sends its bytes as they are and
      reads one whole answer (its head and the body its Content-Length
      says), printing "STATUS close" (the answer said Connection: close)
      or "STATUS keep" ("closed" if the connection ended first). Then,
      after the last, waits (at most 60 s) and prints "eof" when the
      listener closes the connection without another byte, or "more
      STATUSLINE" when anything else comes (a request it should not have
      served).
  hookraw.py partial HOST PORT FILE SENTFILE GOFILE
      sends the first half of FILE's bytes, creates SENTFILE, waits for
      GOFILE (at most 60 s), sends the rest; prints the status line as send.
  hookraw.py hostile HOST PORT MAX_SECONDS STOPFILE STALE_S PATH SRC_PREFIX N_SRC SLOW HALF CHUNKED KIB
      until STOPFILE exists (at most MAX_SECONDS), from the N_SRC source
      addresses SRC_PREFIX.2 .. (each one its own "client"), keeps SLOW
      slowloris connections (headers trickled, a byte every 0.5 s), HALF
      half-open ones (connect, send nothing) and CHUNKED endless chunked
      bodies (KIB KiB of chunks every 0.5 s) per source open, reconnecting
      (a few per tick) when the listener closes one. Prints one JSON line:
      per kind, connections opened, refused at connect, closed by the
      listener, and how many were still open at the end though older than
      STALE_S (the listener's deadline must have closed them).
"""
import errno
import json
import os
import selectors
import socket
import sys
import time


def status_line(s):
    data = b""
    try:
        while b"\r\n" not in data:
            b = s.recv(4096)
            if not b:
                break
            data += b
    except OSError:
        pass
    line = data.split(b"\r\n", 1)[0].decode("ascii", "replace")
    return line if line else "closed"


def send(host, port, path):
    with open(path, "rb") as f:
        req = f.read()
    s = socket.create_connection((host, int(port)), timeout=60)
    try:
        s.sendall(req)
    except OSError:
        pass
    print(status_line(s))


def partial(host, port, path, sentfile, gofile):
    with open(path, "rb") as f:
        req = f.read()
    s = socket.create_connection((host, int(port)), timeout=60)
    s.sendall(req[:len(req) // 2])
    open(sentfile, "w").close()
    end = time.monotonic() + 60
    while not os.path.exists(gofile) and time.monotonic() < end:
        time.sleep(0.05)
    try:
        s.sendall(req[len(req) // 2:])
    except OSError:
        pass
    print(status_line(s))


class Answers:
    """Whole HTTP answers read off one socket, in order (bytes past one are kept for the next)."""

    def __init__(self, sock):
        self.sock, self.buf = sock, b""

    def _more(self):
        try:
            b = self.sock.recv(65536)
        except OSError:
            b = b""
        self.buf += b
        return bool(b)

    def next(self):
        while b"\r\n\r\n" not in self.buf:
            if not self._more():
                return None
        head, rest = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        fields = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            fields[name.strip().lower()] = value.strip()
        need = int(fields.get("content-length", "0"))
        while len(rest) < need:
            if not self._more():
                break
            rest = self.buf.split(b"\r\n\r\n", 1)[1]
        self.buf = rest[need:]
        return lines[0].split(" ")[1] if len(lines[0].split(" ")) > 1 else "?", \
            fields.get("connection", "").lower() == "close"


def session(host, port, *paths):
    s = socket.create_connection((host, int(port)), timeout=60)
    answers = Answers(s)
    for path in paths:
        with open(path, "rb") as f:
            req = f.read()
        try:
            s.sendall(req)
        except OSError:
            pass
        got = answers.next()
        if got is None:
            print("closed")
            return
        print(got[0], "close" if got[1] else "keep")
    if answers.buf or answers._more():
        print("more", answers.buf.split(b"\r\n", 1)[0].decode("latin-1"))
    else:
        print("eof")


class Conn:
    def __init__(self, kind, sock, opened, head):
        self.kind, self.sock, self.opened, self.head = kind, sock, opened, head
        self.pos = 0
        self.out = b""


def hostile(host, port, seconds, stopfile, stale_s, path, prefix, n_src, slow, half, chunked, kib):
    port, seconds, stale_s = int(port), float(seconds), float(stale_s)
    want = {"slow": int(slow), "half": int(half), "chunked": int(chunked)}
    stats = {k: {"opened": 0, "refused": 0, "closed_by_listener": 0, "stale_open": 0} for k in want}
    # HOOKRAW_HEADER: one more header line (a signature header, so that no
    # early check refuses the request before the listener's limits must act).
    extra = os.environ.get("HOOKRAW_HEADER", "X-Nothing: 0")
    heads = {
        "slow": ("POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%s\r\n"
                 "X-Slow: " % (path, extra)).encode() + b"a" * 100000,
        "half": b"",
        "chunked": ("POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%s\r\n"
                    "Transfer-Encoding: chunked\r\n\r\n" % (path, extra)).encode(),
    }
    sel = selectors.DefaultSelector()
    conns = {}          # (src, kind) -> list of Conn
    start = time.monotonic()
    last_tick = 0.0

    def open_one(src, kind):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.bind((src, 0))
            s.connect_ex((host, port))
        except OSError:
            s.close()
            stats[kind]["refused"] += 1
            return
        c = Conn(kind, s, time.monotonic(), heads[kind])
        conns.setdefault((src, kind), []).append(c)
        sel.register(s, selectors.EVENT_READ, c)
        stats[kind]["opened"] += 1

    def drop(c, by_listener):
        sel.unregister(c.sock)
        c.sock.close()
        for lst in conns.values():
            if c in lst:
                lst.remove(c)
        if by_listener:
            stats[c.kind]["closed_by_listener"] += 1

    srcs = ["%s.%d" % (prefix, 2 + i) for i in range(int(n_src))]
    chunk = b"400\r\n" + b"x" * 1024 + b"\r\n"
    per_tick = chunk * int(kib)
    while time.monotonic() - start < seconds and not os.path.exists(stopfile):
        now = time.monotonic()
        if now - last_tick >= 0.5:
            # Top up: a few new connections per source and kind per tick, a
            # steady pressure rather than a connect storm on a shared machine.
            for src in srcs:
                for kind, n in want.items():
                    have = len(conns.get((src, kind), []))
                    for _ in range(max(0, min(n - have, 8))):
                        open_one(src, kind)
        for key, _ in sel.select(timeout=0.1):
            c = key.data
            try:
                b = c.sock.recv(65536)
            except OSError:
                b = b""
            if not b:
                drop(c, True)
            # An answer (408, 413, 429, 503 ...) is followed by the close; keep reading until it.
        if now - last_tick >= 0.5:
            last_tick = now
            for lst in list(conns.values()):
                for c in list(lst):
                    try:
                        if c.kind == "slow" and c.pos < len(c.head):
                            n = 1 if c.pos >= 60 else 60    # the request line at once, then a byte a tick
                            c.pos += c.sock.send(c.head[c.pos:c.pos + n])
                        elif c.kind == "chunked":
                            # Whole chunks only: what did not go out waits for the next tick.
                            if not c.out:
                                c.out = (c.head if c.pos == 0 else b"") + per_tick
                                c.pos = 1
                            c.out = c.out[c.sock.send(c.out):]
                    except (BlockingIOError, InterruptedError):
                        pass
                    except OSError as e:
                        if e.errno not in (errno.ENOTCONN, errno.EINPROGRESS):   # still connecting
                            drop(c, True)
    end = time.monotonic()
    for lst in conns.values():
        for c in lst:
            if end - c.opened > stale_s:
                stats[c.kind]["stale_open"] += 1
            c.sock.close()
    print(json.dumps(stats))


if __name__ == "__main__":
    if sys.argv[1] == "send":
        send(*sys.argv[2:5])
    elif sys.argv[1] == "partial":
        partial(*sys.argv[2:7])
    elif sys.argv[1] == "session":
        session(*sys.argv[2:])
    elif sys.argv[1] == "hostile":
        hostile(*sys.argv[2:14])
    else:
        sys.exit("usage: hookraw.py send|hostile ...")
