#!/usr/bin/env python3
"""A small demo payment origin for idempotency-edge, on loopback only.

POST /v1/charges  charges the ledger (slowly, on purpose) and answers 201 with the charge.
GET  /v1/charges?idempotency_key=K
                  the lookup: 200 with the charge this caller (its Authorization) made under
                  key K at or after the claim's time (Idempotency-Claimed-At), 404 when
                  there is none; both marked Idempotency-Lookup, as the worker requires of
                  a lookup's own verdicts. The worker's route option reconcile_url points
                  here (scripts/demo.sh sets it).
GET  /v1/ledger   lists every charge, so you can see one charge per key.

It drops a reply only when asked: a request with "X-Demo-Drop-Reply: 1" is charged and
then its connection is reset instead of answered, like a payment processor that crashes
after acting. The worker cannot know whether that charge happened: it answers 502
outcome-unknown, never sends the key again, and asks the lookup instead; a retry gets the
charge the lookup found. To see such failures at random as well, set DEMO_DROP_RATE (a share
from 0 to 1; default 0, so every run tells the same story).

It logs one line per execution, so a prevented duplicate is visible: the worker answers the
retry, and no new line appears here.
"""
import json
import os
import random
import socket
import struct
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DELAY_SECONDS = float(os.environ.get("DEMO_DELAY_MS", "700")) / 1000
DROP_RATE = float(os.environ.get("DEMO_DROP_RATE", "0"))
if not 0 <= DROP_RATE <= 1:
    sys.exit("DEMO_DROP_RATE must be a share from 0 to 1, got %r" % DROP_RATE)
LEDGER = []
# Who made each charge (its Authorization), so that a lookup answers a caller only about its
# own keys; kept out of the ledger's listing.
CALLERS = {}
# When each charge was made (Unix milliseconds), for the lookup's claim time.
CREATED_MS = {}
# How far the edge's clock may be ahead of this one: a charge this much before the claim's
# time still counts as the claim's.
CLOCK_SKEW_MS = 60_000
LOCK = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _send(self, status, payload, headers=()):
        body = json.dumps(payload, indent=2).encode() + b"\n"
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        if url.path == "/v1/charges":
            key = urllib.parse.parse_qs(url.query).get("idempotency_key", [None])[0]
            caller = self.headers.get("Authorization")
            try:
                claimed_at = int(self.headers.get("Idempotency-Claimed-At", ""))
            except ValueError:
                self._send(400, {"error": "expected Idempotency-Claimed-At in Unix milliseconds"})
                return
            with LOCK:
                found = [c for c in LEDGER if c["idempotency_key"] == key and CALLERS.get(c["id"]) == caller
                         and CREATED_MS[c["id"]] + CLOCK_SKEW_MS >= claimed_at]
            if key is not None and found:
                print("origin: lookup found charge %s" % found[-1]["id"], file=sys.stderr, flush=True)
                self._send(200, found[-1], [("Idempotency-Lookup", "executed")])
            else:
                self._send(404, {"error": "no charge under this key for this caller"},
                           [("Idempotency-Lookup", "not-executed")])
        elif self.path.startswith("/v1/ledger"):
            with LOCK:
                self._send(200, {"charges": LEDGER, "total_cents": sum(c["amount"] for c in LEDGER)})
        else:
            self._send(200, {"service": "demo payment origin", "try": "POST /v1/charges"})

    def do_POST(self):
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length)
        if not self.path.startswith("/v1/charges"):
            self._send(404, {"error": "not found"})
            return
        try:
            request = json.loads(raw or b"{}")
            amount = int(request["amount"])
        except (ValueError, KeyError, TypeError):
            self._send(400, {"error": "expected a JSON body with an integer amount"})
            return
        time.sleep(DELAY_SECONDS)  # a slow payment processor
        with LOCK:
            charge = {"id": "ch_%04d" % (len(LEDGER) + 1), "amount": amount,
                      "currency": request.get("currency", "eur"), "created": int(time.time()),
                      "idempotency_key": self.headers.get("Idempotency-Key")}
            LEDGER.append(charge)
            CALLERS[charge["id"]] = self.headers.get("Authorization")
            CREATED_MS[charge["id"]] = int(time.time() * 1000)
        print("origin: executed charge %s for %d" % (charge["id"], amount), file=sys.stderr, flush=True)
        if self.headers.get("X-Demo-Drop-Reply") == "1" or (DROP_RATE > 0 and random.random() < DROP_RATE):
            print("origin: dropped the reply to charge %s" % charge["id"], file=sys.stderr, flush=True)
            # A reset, not a clean close: the caller sees the connection break.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True
            return
        self._send(201, charge)

    def log_message(self, *args):
        pass


def main():
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 8788
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print("origin: demo payment origin on http://127.0.0.1:%d" % port, file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
