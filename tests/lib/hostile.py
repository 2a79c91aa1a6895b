#!/usr/bin/env python3
"""Hostile HTTP clients for tests/integration/hostile-clients.sh (#13).

hostile.py TARGET MODE CONNS STOPFILE [PATH] [SOURCES]

TARGET is unix:SOCKET or tcp:HOST:PORT. CONNS connections are kept open at
once in MODE (each reopened after the server closes it, 0.2 s later) until
STOPFILE exists; then all are closed and a JSON summary goes to stdout:
opened, closed_by_server (the server ended it first), connect_failed,
bytes_sent, open_peak (connections open at once, at most).

Modes:
  idle      connect, send nothing
  halfopen  send half a request line, then shut the sending side (SHUT_WR)
  slowloris a request head one byte every 2 s, never finished
  headers   a request line, then 100000 small header lines, then one of 1 MiB
  chunked   POST with Transfer-Encoding: chunked, 4 KiB chunks without end
  bigbody   PUT with a Content-Length of $HOSTILE_LENGTH bytes (default 1 GiB)
            the route accepts, a JSON array sent as fast as it goes, never closed
  jsonchunk POST with a chunked JSON body that never ends ("[[[[...")

PATH (default /) is the request path; SOURCES N (tcp only) spreads the
connections over the source addresses 127.0.0.2 .. 127.0.0.N+1 (the
listener caps connections per source). The test's own RLIMIT_NOFILE is
raised to its hard limit so thousands of connections fit.
"""
import asyncio
import json
import os
import resource
import socket
import sys

target, mode, conns, stopfile = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
path = sys.argv[5] if len(sys.argv) > 5 else "/"
sources = int(sys.argv[6]) if len(sys.argv) > 6 else 0

soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

st = {"opened": 0, "closed_by_server": 0, "connect_failed": 0, "bytes_sent": 0, "open_peak": 0}
open_now = 0
stopping = False


def head(extra, method="POST"):
    return ("%s %s HTTP/1.1\r\nHost: fleet\r\nContent-Type: application/json\r\n%s" % (method, path, extra)).encode()


async def connect(i):
    if target.startswith("unix:"):
        return await asyncio.open_unix_connection(target[5:])
    host, port = target[4:].rsplit(":", 1)
    src = ("127.0.0.%d" % (2 + i % sources), 0) if sources else None
    return await asyncio.open_connection(host, int(port), local_addr=src)


async def send(w, data):
    w.write(data)
    st["bytes_sent"] += len(data)
    await w.drain()


async def attack(w):
    """Write as the mode says; returns only when the server stops it (by an exception)."""
    if mode == "idle":
        await asyncio.sleep(3600)
    elif mode == "halfopen":
        await send(w, b"POST " + path.encode())
        w.write_eof()
        await asyncio.sleep(3600)
    elif mode == "slowloris":
        for c in head("X-Slow: ") + b"x" * 100000:
            await send(w, bytes([c]))
            await asyncio.sleep(2)
    elif mode == "headers":
        await send(w, head(""))
        for n in range(100000):
            await send(w, b"X-Flood-%d: %d\r\n" % (n, n))
        await send(w, b"X-Huge: " + b"h" * (1 << 20) + b"\r\n")
        await asyncio.sleep(3600)
    elif mode == "chunked":
        await send(w, head("Transfer-Encoding: chunked\r\n\r\n"))
        chunk = b"1000\r\n" + b"c" * 4096 + b"\r\n"
        while True:
            await send(w, chunk)
    elif mode == "bigbody":
        n = int(os.environ.get("HOSTILE_LENGTH", 1 << 30))
        await send(w, head("Content-Length: %d\r\n\r\n" % n, "PUT") + b"[")
        while True:
            await send(w, b"0," * 32768)
    elif mode == "jsonchunk":
        await send(w, head("Transfer-Encoding: chunked\r\n\r\n"))
        while True:
            await send(w, b"1000\r\n" + b"[" * 4096 + b"\r\n")
    else:
        raise SystemExit("unknown mode " + mode)


async def drain_reads(r):
    """Read (and drop) whatever the server answers; returns at its EOF."""
    while await r.read(65536):
        pass


async def one(i):
    global open_now
    while not stopping:
        try:
            r, w = await connect(i)
        except OSError:
            st["connect_failed"] += 1
            await asyncio.sleep(0.2)
            continue
        st["opened"] += 1
        open_now += 1
        st["open_peak"] = max(st["open_peak"], open_now)
        reader = asyncio.ensure_future(drain_reads(r))
        writer = asyncio.ensure_future(attack(w))
        try:
            done, _ = await asyncio.wait([reader, writer], return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                t.exception()   # retrieved: a reset is how the server ends it
            if not stopping:
                st["closed_by_server"] += 1
        except asyncio.CancelledError:
            pass
        finally:
            for t in (reader, writer):
                t.cancel()
            w.transport.abort()
            open_now -= 1
        await asyncio.sleep(0.2)


async def main():
    global stopping
    tasks = []
    for i in range(conns):
        tasks.append(asyncio.ensure_future(one(i)))
        if i % 100 == 99:
            await asyncio.sleep(0.05)   # not a bound: lets the server accept as they come
    while not os.path.exists(stopfile):
        await asyncio.sleep(0.2)
    stopping = True
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


asyncio.run(main())
print(json.dumps(st))
