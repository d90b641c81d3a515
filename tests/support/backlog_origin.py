#!/usr/bin/env python3
"""A payment origin with a small listen backlog, on loopback: Python's http.server as many
origins run it (ThreadingHTTPServer, HTTP/1.0, one connection per request), with the
accept queue set explicitly (request_queue_size, which defaults to 5).

Usage: backlog_origin.py BACKLOG. It binds 127.0.0.1 on a free port and prints that port as
its first line on stdout.

POST (any path)  counts one execution for its Idempotency-Key (quotes stripped), sleeps
                 x-test-delay-ms, then answers 201 with a JSON body unique to the
                 execution and `x-origin-execution: N`.
GET /__executions  the executions per key so far, as a JSON object.
GET (other)      200 with `x-origin-execution: 0` (the harness's readiness check).

When its accept queue is full, the kernel drops new SYNs and the client sends them again
after 1 s, then 3 s, 7 s: that is what the storm test puts the worker's TCP probe through.
"""
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
EXECUTIONS = {}
SERIAL = [0]


class Handler(BaseHTTPRequestHandler):
    def _send(self, status, payload, execution):
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.send_header("x-origin-execution", str(execution))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path.startswith("/__executions"):
            with LOCK:
                self._send(200, dict(EXECUTIONS), 0)
        else:
            self._send(200, {"origin": "backlog"}, 0)

    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length") or 0))
        key = (self.headers.get("idempotency-key") or "").strip('"')
        with LOCK:
            SERIAL[0] += 1
            serial = SERIAL[0]
            EXECUTIONS[key] = EXECUTIONS.get(key, 0) + 1
        time.sleep(int(self.headers.get("x-test-delay-ms") or 0) / 1000)
        self._send(201, {"id": "ch_%06d" % serial, "key": key}, serial)

    def log_message(self, *args):
        pass


def main():
    backlog = int(sys.argv[1])
    server_class = type("Server", (ThreadingHTTPServer,), {"request_queue_size": backlog, "daemon_threads": True})
    server = server_class(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
