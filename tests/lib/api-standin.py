#!/usr/bin/env python3
"""A stand-in for a web API (GitHub's, Slack's) for the examples' tests.

api-standin.py ADDR PORT LOG: answers every POST 201 with a small JSON body
and appends one JSON line per request to LOG: the path, the Authorization
header and the body as received. Tests start it inside a network namespace
they made themselves; it never talks to anything. Stops on SIGTERM.
"""
import http.server
import json
import sys


class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(min(length, 1 << 20)).decode("utf-8", "replace")
        with open(self.server.log, "a") as f:
            f.write(json.dumps({"path": self.path,
                                "authorization": self.headers.get("Authorization"),
                                "body": body}) + "\n")
        answer = b'{"ok": true, "id": 1}'
        self.send_response(201)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, fmt, *args):
        pass


def main():
    addr, port, log = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    server = http.server.HTTPServer((addr, port), Handler)
    server.log = log
    server.serve_forever()


if __name__ == "__main__":
    main()
