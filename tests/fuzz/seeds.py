#!/usr/bin/env python3
"""Write the fuzz harnesses' seed corpora (tests/fuzz/corpus/NAME/seed-*) from
the inputs fleet's own tests use: the signed deliveries of test_hooks_verify.c,
the cron specs of test_cron.c, the fleetd.conf files of tests/integration/
config.sh, the names the unit tests try. Deterministic: rerun after changing
it and commit what it wrote. Crash regressions (crash-*) are never touched."""
import json, os, re, struct, sys

here = os.path.dirname(os.path.abspath(__file__))
src = os.path.normpath(os.path.join(here, "..", ".."))
corpus = os.path.join(here, "corpus")


def write(name, seeds):
    d = os.path.join(corpus, name)
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        if f.startswith("seed-"):
            os.unlink(os.path.join(d, f))
    for i, s in enumerate(seeds):
        with open(os.path.join(d, "seed-%02d" % i), "wb") as f:
            f.write(s if isinstance(s, bytes) else s.encode())


# ---- proto: frames both ways, as hooks/proto.h describes them ----
def frame(msg, tail=b""):
    j = json.dumps(msg, separators=(",", ":")).encode()
    return struct.pack(">II", len(j) + len(tail), len(j)) + j + tail

def binframe(part, tail=b""):
    return struct.pack(">II", len(part) + len(tail), len(part)) + part + tail

def s16(v):
    v = v.encode() if isinstance(v, str) else v
    return struct.pack(">H", len(v)) + v

def s32(v):
    v = v.encode() if isinstance(v, str) else v
    return struct.pack(">I", len(v)) + v

def delivery(seq, route, id, event=None, no_run=False, at=1764600000, headers=(), reply_body=None,
             reply_type=None, body=b"", extra=b""):
    flags = (1 if no_run else 0) | (2 if event is not None else 0) | \
        (4 if reply_body is not None else 0) | (8 if reply_type is not None else 0)
    part = bytes([1, flags]) + struct.pack(">QQ", seq, at) + s16(route) + s16(id)
    if event is not None:
        part += s16(event)
    part += struct.pack(">H", len(headers)) + b"".join(s16(n) + s16(v) for n, v in headers)
    if reply_body is not None:
        part += s32(reply_body)
    if reply_type is not None:
        part += s16(reply_type)
    return binframe(part + extra, body)

def answer(seq, status, body=None, ctype=None):
    part = bytes([2, (1 if body is not None else 0) | (2 if ctype is not None else 0)]) + struct.pack(">QH", seq, status)
    if body is not None:
        part += s32(body)
    if ctype is not None:
        part += s16(ctype)
    return binframe(part)

limits = {"max_connections": 512, "max_per_source": 64, "request_timeout": 10, "header_max": 32768}
route = {"name": "gh", "source": "github", "secrets": ["c2VjcmV0LXNlY3JldC1zZWNyZXQ="], "encoding": "hex",
         "datadog_auth": "header", "max_body": 1048576}
hmac = dict(route, name="alerts", source="hmac", header="X-Sig", prefix="sha256=", encoding="base64",
            secrets=["c2VjcmV0LXNlY3JldC1zZWNyZXQ=", "b2xkLXNlY3JldC1vbGQtc2VjcmV0"])
dd = dict(route, name="dd", source="datadog", header="X-Token", datadog_auth="basic", delivery_field="id")
tw = dict(route, name="phone", source="twilio", public_url="https://fleet.example.com/bots")
body = b'{"action":"opened","number":7}'
gh_delivery = delivery(1, "gh", "72d3162e-cc78-11e3", "pull_request.opened",
                       headers=[("X-GitHub-Event", "pull_request"), ("User-Agent", "GitHub-Hookshot/1\tx\"q\"")],
                       body=body)
slack = delivery(2, "sl", "Ev0PV52K21", no_run=True, reply_body="3eZbrw1aBm2r", reply_type="text/plain")
stats = {"t": "stats", "accepted": 3, "refused": [1, 2, 0, 0, 1, 0], "connections": 2, "dropped": 0,
         "sig_failed": [2, 0, 0, 0, 0, 0]}
write("proto", [
    frame({"t": "hello", "pid": 4242}),
    frame({"t": "routes", "limits": limits, "routes": [route, hmac, dd, tw]}),
    frame({"t": "routes", "limits": limits, "routes": []}),
    answer(1, 200, "ok\n", "text/plain"),
    answer(7, 503),
    gh_delivery,
    slack,
    frame(stats),
    frame({"t": "hello", "pid": 1}) + frame(stats) + gh_delivery,
    answer(1, 202, '{"status":"accepted"}', "application/json") + gh_delivery,
    frame({"t": "nope"}),
    struct.pack(">II", 0xffffffff, 2) + b"{}",
    delivery(3, "gh", "d-3", headers=[("X-H%d" % i, "v") for i in range(64)]),
    delivery(4, "gh", "d-4", extra=b"\0"),
])

# ---- verify: [source][flags] path \n headers \n\n body (see fuzz_verify.c) ----
SRC = {"github": 0, "slack": 1, "twilio": 2, "datadog": 3, "standard": 4, "hmac": 5}
def req(source, flags, path, headers, body):
    return bytes([SRC[source], flags]) + path.encode() + b"\n" + \
        b"".join(("%s: %s\n" % h).encode() for h in headers) + b"\n" + body.encode()
gh = '{"action":"opened","number":7,"pull_request":{"title":"x"}}'
sl = ('{"token":"t","type":"event_callback","event_id":"Ev0PV52K21",'
      '"event":{"type":"app_mention","text":"<@U1> triage INC-4"}}')
chal = '{"token":"Jhj5dZrVaK7Z","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}'
twb = "To=%2B18005551212&From=%2B12349013030&CallSid=CA1234567890ABCDE&Digits=1234&Caller=%2B12349013030&Body=hello+world%21"
ddb = '{"id":"7318926413","title":"[Triggered] CPU high","alert_type":"error"}'
stb = '{"type":"invoice.paid","timestamp":"2026-12-01T14:40:00Z","data":{"id":1}}'
write("verify", [
    req("github", 1, "/hooks/gh", [("X-GitHub-Event", "pull_request"), ("X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958")], gh),
    req("github", 1, "/hooks/gh", [("X-GitHub-Event", "ping"), ("X-GitHub-Delivery", "d-1")], '{"zen":"x","hook_id":1}'),
    req("github", 0, "/hooks/gh", [("X-Hub-Signature-256", "sha256=" + "0" * 64), ("X-GitHub-Event", "push"), ("X-GitHub-Delivery", "d")], gh),
    req("slack", 1, "/hooks/sl", [("X-Slack-Request-Timestamp", "1764600000")], sl),
    req("slack", 9, "/hooks/sl", [("X-Slack-Request-Timestamp", "1764600000")], chal),
    req("slack", 0, "/hooks/sl", [("X-Slack-Signature", "v0=" + "a" * 64), ("X-Slack-Request-Timestamp", "1764599000")], sl),
    req("twilio", 1, "/hooks/phone?foo=1&bar=2", [("Content-Type", "application/x-www-form-urlencoded")], twb),
    req("twilio", 1, "/hooks/phone", [("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")], "MessageSid=SM1&Body=hi%20there&Body=again"),
    req("twilio", 0, "/hooks/phone", [("X-Twilio-Signature", "AAAAAAAAAAAAAAAAAAAAAAAAAAA="), ("Content-Type", "application/x-www-form-urlencoded")], "CallSid=%zz"),
    req("datadog", 1, "/hooks/dd", [("Content-Type", "application/json")], ddb),
    req("datadog", 5, "/hooks/dd", [], '{"id":7318926413}'),
    req("datadog", 4, "/hooks/dd", [("Authorization", "Basic dXNlcjpwYXNz")], ddb),
    req("standard", 1, "/hooks/st", [("webhook-id", "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W"), ("webhook-timestamp", "1764600000")], stb),
    req("standard", 0, "/hooks/st", [("webhook-id", "msg_1"), ("webhook-timestamp", "1764600000"), ("webhook-signature", "v2,x v1,AAAA v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=")], stb),
    req("hmac", 1, "/hooks/alerts", [], "not json at all: the generic source never parses the body\n"),
    req("hmac", 1 | 2 | 16, "/hooks/alerts", [], "{}"),
    req("hmac", 0 | 16, "/hooks/alerts", [("X-Signature", "sha256=zz")], "{}"),
])

# ---- cron: every quoted spec in test_cron.c and test_cron_due.c, as the tests try them ----
specs = set()
for f in ("tests/unit/test_cron.c", "tests/unit/test_cron_due.c"):
    with open(os.path.join(src, f), errors="replace") as fh:
        text = fh.read()
    for m in re.finditer(r'"((?:[^"\\\n]|\\.)*)"', text):
        s = m.group(1).replace("\\t", "\t")
        if len(s) <= 128 and re.fullmatch(r"@[a-z]*|[*0-9][*0-9a-zA-Z,/-]*([ \t]+[*0-9a-zA-Z,/-]+){3,5}", s):
            specs.add(s)
write("cron", sorted(specs)[:50] + ["@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly", "@reboot", "30 2 29 2 *", "0 0 31 4 *"])

# ---- names: what the name tests and the hostile API tests send ----
write("names", ["ab", "agent-1", "a" * 32, "a" * 33, "-x", "UPPER", "snap.2026-12-01_x", "..", "a..b", ".hidden",
                "notes.md", "PATH=/bin", "1X=y", "push,pull_request.opened", "pull_request", "X-Hub-Signature-256",
                "UTC", "Europe/Paris", "America/Argentina/Buenos_Aires", "../../../etc/shadow", "Etc/GMT+5",
                "/etc/passwd", "posixrules", "gh_hook-1", "a/b", "x" * 200])

# ---- config: fleetd.conf files as tests/integration/config.sh writes them, and one of every key ----
write("config", [
    "# a comment\nstate_dir = /tmp/from-file\nlog_level = notice\n\nmax_body_bytes = 4096\n",
    "sokcet = /tmp/x\nlog_level = shouty\nwhat is this\n",
    "max_body_bytes = 2048\n", "max_body_bytes = 8192\nnonsense here\n", "log_file = /elsewhere.log\n",
    "state_dir = /var/lib/fleet\nsocket = /run/fleet/fleetd.sock\nlog_level = debug\nuser_uid_min = 200000\n"
    "user_uid_max = 300000\nlibvirt_uri = qemu:///system\nimage_dir = /var/lib/fleet/images\nvm_boot_timeout = 120\n"
    "max_connections = 64\nrequest_timeout = 30\nvm_console_max_bytes = 1048576\nrestart_backoff_ms = 1000\n"
    "restart_backoff_max_ms = 60000\nhooks_public_url = https://fleet.example.com/bots\nevents_keep_days = 30\n"
    "max_concurrent_runs = 4\nhooks_listen = 127.0.0.1:8470\nhooks_user = fleet-hooks\nhooks_max_connections = 512\n"
    "hooks_max_per_source = 64\nhooks_request_timeout = 10\nhooks_header_max_bytes = 32768\n"
    "user_nat_subnet = 10.77.0.0/16\n",
    "hooks_listen = none\nuser_uid_min = 300000\nuser_uid_max = 200000\n",
    "state_dir = relative\n", "log_level = info\nlog_level = err\n", "vm_boot_timeout = 99999999999999999999\n",
    "hooks_listen = [::1]:8470\n", "\tmax_connections\t=\t7\t\r\n", "user_nat_subnet = 10.77.0.0/33\n",
])
# ---- memory: archives as `fleetctl memory export` makes them (tar, optionally gzip'd), and the hostile
# ones tests/integration/user-memory.sh and test_agentd_memory.c refuse ----
import gzip, io, tarfile
def tar(entries, gz=False):
    buf = io.BytesIO()
    out = gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) if gz else buf
    with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as t:
        for name, kind, data in entries:
            ti = tarfile.TarInfo(name)
            ti.mtime = 1764600000
            ti.mode = 0o600
            if kind == "dir":
                ti.type, ti.mode = tarfile.DIRTYPE, 0o700
                t.addfile(ti)
            elif kind in ("sym", "hard"):
                ti.type = tarfile.SYMTYPE if kind == "sym" else tarfile.LNKTYPE
                ti.linkname = data
                t.addfile(ti)
            elif kind == "fifo":
                ti.type = tarfile.FIFOTYPE
                t.addfile(ti)
            else:
                ti.size = len(data)
                if kind == "suid":
                    ti.mode = 0o4755
                t.addfile(ti, io.BytesIO(data))
    if gz:
        out.close()
    data = buf.getvalue()
    return data if gz else data.rstrip(b"\0") + b"\0" * 1024
write("memory", [
    tar([("notes.md", "file", b"# notes\nremember the deploy key rotates on Fridays\n"), ("todo", "file", b"x")]),
    tar([("notes.md", "file", b"hello\n")], gz=True),
    tar([("dir", "dir", None), ("dir/sub", "dir", None), ("dir/sub/f", "file", b"deep")]),
    tar([("./", "dir", None), ("./a", "file", b"a")]),
    tar([("link", "sym", "/etc/shadow")]),
    tar([("a", "file", b"a"), ("b", "hard", "a")]),
    tar([("../escape", "file", b"x")]),
    tar([("/abs", "file", b"x")]),
    tar([("fifo", "fifo", None)]),
    tar([("setuid", "suid", b"#!/bin/sh\n")]),
    tar([("a", "file", b"1"), ("a", "file", b"2")]),
    tar([("f", "file", b"x"), ("f/g", "file", b"y")]),
    tar([("/".join(["d"] * 40) + "/f", "file", b"deep")]),
    b"not a tar archive at all",
])
# ---- api: request paths (the routes of api/routes.c, with the names the API tests send) and
# JSON bodies from tests/integration/*.sh ----
bodies = set()
for f in sorted(os.listdir(os.path.join(src, "tests/integration"))):
    if f.endswith(".sh"):
        with open(os.path.join(src, "tests/integration", f), errors="replace") as fh:
            for m in re.finditer(r"'(\{\"[^'\n]*\})'", fh.read()):
                if "%" not in m.group(1):
                    bodies.add(m.group(1))
paths = ["/v1/agents", "/v1/agents/ua-1", "/v1/agents/ua-1/snapshots/s%2e1", "/v1/agents/ua-1/memory/notes.md",
         "/v1/agents/%2e%2e/exec", "/v1/agents/a%00b/start", "/v1/hooks/gh/subscribers/ua-1",
         "/v1/agents/ua-1/runs/12/log?follow=1", "/v1/agents/ua-1/secrets/API_KEY",
         "/v1/agents/ua-1/secrets/API_KEY/compare", "/v1/agents//stop"]
write("api", ["%s\n%s" % (paths[i % len(paths)], b) for i, b in enumerate(sorted(bodies)[:50])] + [p + "\n" for p in paths])
# ---- listener: raw client bytes as tests/unit/test_listener.c and hooks-hostile.sh send them ----
# byte 0: flags (1: the harness signs the body for both routes), byte 1: split seed (0: one write)
def http(method, path, headers, body=b"", version="HTTP/1.1"):
    head = "%s %s %s\r\n" % (method, path, version) + "".join("%s: %s\r\n" % h for h in headers) + "\r\n"
    return head.encode() + body

gh_body = b'{"action":"opened","number":7}'
gh_hdrs = [("Host", "hooks.example.com"), ("X-GitHub-Event", "pull_request"),
           ("X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958"), ("Content-Type", "application/json"),
           ("Content-Length", str(len(gh_body)))]
hm_body = b"alert: disk full on db-1\n"
hm_hdrs = [("Host", "hooks.example.com"), ("Content-Length", str(len(hm_body)))]
chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(gh_body), gh_body)
listener = [
    b"\x01\x00" + http("POST", "/hooks/gh", gh_hdrs, gh_body),
    b"\x01\x07" + http("POST", "/hooks/gh", gh_hdrs, gh_body),
    b"\x01\x00" + http("POST", "/hooks/hm", hm_hdrs, hm_body),
    b"\x01\x00" + http("POST", "/hooks/hm?x=1", hm_hdrs + [("Connection", "keep-alive")], hm_body, "HTTP/1.0"),
    # two on one connection: the second after the first's 202
    b"\x01\x00" + http("POST", "/hooks/hm", hm_hdrs, hm_body) + http("POST", "/hooks/hm", hm_hdrs, hm_body),
    b"\x01\x00" + http("POST", "/hooks/gh", gh_hdrs[:-1] + [("Transfer-Encoding", "chunked")], chunked),
    b"\x01\x00" + http("POST", "/hooks/hm", hm_hdrs + [("Expect", "100-continue")], hm_body),
    b"\x00\x00" + http("POST", "/hooks/gh", gh_hdrs + [("X-Hub-Signature-256", "sha256=" + "0" * 64)], gh_body),
    b"\x00\x00" + http("GET", "/hooks/gh", [("Host", "x")]),
    b"\x00\x00" + http("POST", "/hooks/nope", hm_hdrs, hm_body),
    b"\x00\x00" + http("POST", "/hooks/../etc", hm_hdrs, hm_body),
    b"\x01\x00" + http("POST", "/hooks/hm", [("Content-Length", "5000")], b"x" * 5000),
    b"\x01\x00" + http("POST", "/hooks/hm", [("Content-Length", "+25")], hm_body),
    b"\x01\x00" + http("POST", "/hooks/hm", [("Content-Length", "25"), ("Content-Length", "25")], hm_body),
    b"\x01\x00" + http("POST", "/hooks/hm", [("Content-Length", "25"), ("Transfer-Encoding", "chunked")], hm_body),
    b"\x01\x00" + http("POST", "/hooks/hm", [("Transfer-Encoding", "gzip")], hm_body),
    b"\x01\x00" + http("POST", "/hooks/hm", hm_hdrs[:1] + [("Content-Length", "10")], hm_body),
    b"\x00\x03" + b"POST /hooks/hm HTTP/1.1\r\nHost: a\r\n" + b"X-Flood: y\r\n" * 200 + b"\r\n",
    b"\x00\x00" + b"\xff\xfe garbage\r\n\r\n",
    b"\x01\x00" + http("POST", "/hooks/gh", gh_hdrs[:1] + [("X-GitHub-Event", "ping"),
                      ("X-GitHub-Delivery", "1"), ("Content-Length", "2")], b"{}"),
]
write("listener", listener)

print("seeds written under", corpus)
