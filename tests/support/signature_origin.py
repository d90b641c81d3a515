"""A payment origin that verifies the edge's RFC 9421 signature with an independent
implementation, Python's `http-message-signatures` (scripts/setup.sh installs it under
.tools/python), as docs/operations.md tells an origin in Python to. It keeps the key exactly
as its header carried it, answers 404 to a path it does not serve, and refuses (401) any
request whose signature does not verify, whose Content-Digest is not its body's, or whose
nonce it has seen.

  POST /v1/...                  a charge: 201 with its id (the key's first), or the stored
                                one for a key it has charged; `x-test-stall-ms: N` charges,
                                then holds the reply N ms and closes (a lost reply)
  GET  /v1/lookup?idempotency_key=K
                                the lookup: only signed `protected`; 200 marked
                                `Idempotency-Lookup: executed` with the charge, or 404 marked
                                `not-executed`
  GET  /__verdicts              what it concluded of every request (not signed: the test's)

Prints its port on the first line of stdout, and exits when its stdin closes (the test
process that started it ended, however it ended). Usage: signature_origin.py SECRET
"""

import base64
import datetime
import hashlib
import json
import os
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

from http_message_signatures import HTTPMessageVerifier, algorithms
from http_message_signatures.resolvers import MappingKeyResolver

SECRET = sys.argv[1].encode()
KEY_ID = "idempotency-edge"
REQUIRED = ("@method", "@target-uri", "content-digest", "idempotency-edge-protection")

verifier = HTTPMessageVerifier(
    signature_algorithm=algorithms.HMAC_SHA256,
    key_resolver=MappingKeyResolver(public_keys={KEY_ID: SECRET}, private_keys={}),
)
# The edge and this origin share a clock within a few seconds here.
verifier.max_clock_skew = datetime.timedelta(seconds=300)

lock = threading.Lock()
nonces = set()
ledger = {}
verdicts = []
serial = [0]


class Message:
    def __init__(self, method, url, headers):
        self.method, self.url, self.headers = method, url, headers


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, body, headers=()):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        # What the test harness reads as "the origin answered" (its readiness probe).
        self.send_header("x-origin-execution", "0")
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def verified(self, body):
        """(protection, None) when the edge's signature verifies, else (None, why)."""
        url = "http://" + self.headers.get("host", "") + self.path
        headers = {name: value for name, value in self.headers.items()}
        try:
            results = verifier.verify(
                Message(self.command, url, headers),
                expect_tag=KEY_ID,
                require_components=REQUIRED,
                body=body,
                max_age=datetime.timedelta(seconds=300),
            )
        except Exception as error:  # every refusal is one answer: 401
            return None, f"{type(error).__name__}: {error}"
        params = results[0].parameters
        with lock:
            if params.get("nonce") in nonces:
                return None, "nonce seen before"
            nonces.add(params.get("nonce"))
        covered = [str(c).strip('"') for c in results[0].covered_components]
        key_header = "idempotency-key"
        if key_header in {name.lower() for name in headers} and key_header not in covered:
            return None, "the key is not covered"
        return headers.get("Idempotency-Edge-Protection") or headers.get("idempotency-edge-protection"), None

    def record(self, protection, why, key):
        with lock:
            verdicts.append({"method": self.command, "path": self.path, "ok": why is None,
                             "why": why, "protection": protection, "key": key})

    def body(self):
        length = int(self.headers.get("content-length") or 0)
        return self.rfile.read(length) if length else b""

    def do_GET(self):
        if self.path == "/__verdicts":
            with lock:
                return self.reply(200, verdicts)
        body = self.body()
        split = urlsplit(self.path)
        key = unquote(parse_qs(split.query).get("idempotency_key", [""])[0])
        protection, why = self.verified(body)
        self.record(protection, why, key)
        if why is not None:
            return self.reply(401, {"error": why})
        if split.path != "/v1/lookup":
            return self.reply(404, {"error": "no such path"})
        if protection != "protected":
            return self.reply(403, {"error": "a lookup must come from the edge's object"})
        with lock:
            charge = ledger.get(key)
        if charge is None:
            return self.reply(404, {"error": "no such charge"}, [("Idempotency-Lookup", "not-executed")])
        return self.reply(200, charge, [("Idempotency-Lookup", "executed")])

    def do_POST(self):
        body = self.body()
        key = self.headers.get("idempotency-key")
        protection, why = self.verified(body)
        self.record(protection, why, key)
        if why is not None:
            return self.reply(401, {"error": why})
        if not self.path.startswith("/v1/"):
            return self.reply(404, {"error": "no such path"})
        with lock:
            charge = ledger.get(key) if key else None
            if charge is None:
                serial[0] += 1
                charge = {"id": f"ch_{serial[0]:04}", "key": key}
                if key:
                    ledger[key] = charge
        stall = int(self.headers.get("x-test-stall-ms") or 0)
        if stall:
            time.sleep(stall / 1000)
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.reply(201, charge)


def exit_with_the_test_process():
    sys.stdin.read()
    os._exit(0)


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
threading.Thread(target=exit_with_the_test_process, daemon=True).start()
server.serve_forever()
