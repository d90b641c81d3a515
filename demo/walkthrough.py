#!/usr/bin/env python3
"""A scripted walkthrough against a running demo (./scripts/demo.sh in another terminal).

Runs, against the live worker on loopback:
  1. a first charge, then a retry of it (replayed);
  2. ten concurrent duplicates of a new charge (one execution);
  3. a reply lost to a client that gives up, then the retry (replayed);
  4. the same key with another amount (422 key-reused);
  5. a reply the origin drops after charging (502 outcome-unknown, never re-sent), then
     the retry, which gets the charge the origin's lookup found (reconciled);
  6. the ledger, showing one charge per key.

Every run tells the same story: the demo origin drops a reply only when asked (step 5 asks
with X-Demo-Drop-Reply). Only the latencies differ, and the charge ids when the demo
origin has charged before. (Started with DEMO_DROP_RATE above 0, the origin also drops
replies at random; a step that meets one shows 502 outcome-unknown instead of the charge.)

It prints one line per request: status, whether it was replayed, and the latency. The
ledger lists the charges of this run's keys.
Usage: python3 demo/walkthrough.py [worker base URL, default http://127.0.0.1:8787]
"""
import concurrent.futures
import http.client
import json
import sys
import time
import urllib.parse
import uuid

BASE = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8787"
# Keys are scoped by caller, so every charge names one (an opaque demo API key; without it
# the worker answers 401 missing-credential).
CREDENTIAL = "Bearer sk_test_demo"
TARGET = urllib.parse.urlparse(BASE)
if TARGET.hostname not in ("127.0.0.1", "localhost", "::1"):
    sys.exit("the walkthrough only talks to a worker on loopback")


# wrangler dev's own proxy, in front of the local worker, sometimes answers a request it
# could not hand on (seen once, on a loaded 2-core machine) with this 503 instead of the
# worker's answer. Retrying with the same key is what the worker makes safe, and what any
# client of it should do with a 503; the walkthrough does it so that its story is the
# worker's, not the dev proxy's.
DEV_PROXY_RESTART = b"Your worker restarted mid-request"


def charge(key, amount, timeout=60.0, drop=False):
    """POST /v1/charges with this key; returns (status, replayed, latency ms, body) or raises.
    A 503 from wrangler dev's proxy (DEV_PROXY_RESTART) is retried with the same key."""
    for _ in range(3):
        result = charge_once(key, amount, timeout, drop)
        if not (result[0] == 503 and result[3].startswith(DEV_PROXY_RESTART)):
            break
    return result


def charge_once(key, amount, timeout, drop):
    conn = http.client.HTTPConnection(TARGET.hostname, TARGET.port or 80, timeout=timeout)
    body = json.dumps({"amount": amount, "currency": "eur"})
    headers = {"Idempotency-Key": key, "Content-Type": "application/json", "Authorization": CREDENTIAL}
    if drop:
        headers["X-Demo-Drop-Reply"] = "1"
    started = time.monotonic()
    try:
        conn.request("POST", "/v1/charges", body=body, headers=headers)
        response = conn.getresponse()
        payload = response.read()
        elapsed = (time.monotonic() - started) * 1000
        replayed = response.getheader("Idempotent-Replayed") == "true"
        reconciled = response.getheader("Idempotency-Reconciled") == "true"
        return response.status, replayed, elapsed, payload, reconciled
    finally:
        conn.close()


def show(label, result):
    status, replayed, elapsed, payload, reconciled = result
    try:
        parsed = json.loads(payload)
        summary = parsed.get("id") or parsed.get("type", "")
    except ValueError:
        summary = payload[:60]
    if reconciled:
        summary = "%s (reconciled)" % summary
    print("  %-28s %d  replayed=%-5s %7.1f ms  %s" % (label, status, str(replayed).lower(), elapsed, summary))


KEYS = []


def new_key(name):
    """A fresh key for this run (remembered, to find this run's charges in the ledger)."""
    key = "%s-%s" % (name, uuid.uuid4().hex[:12])
    KEYS.append(key)
    return key


def main():
    print("1. A first charge, then a retry with the same key")
    key = new_key("order-1-charge")
    show("first attempt", charge(key, 1000))
    show("retry", charge(key, 1000))

    print("2. Ten concurrent duplicates of a new charge")
    key = new_key("order-2-charge")
    with concurrent.futures.ThreadPoolExecutor(max_workers=10) as pool:
        results = list(pool.map(lambda _: charge(key, 2500), range(10)))
    for i, result in enumerate(sorted(results, key=lambda r: r[1])):
        show("duplicate %d" % (i + 1), result)
    bodies = {r[3] for r in results}
    print("  -> %d distinct answer(s) for 10 requests" % len(bodies))

    print("3. A reply lost to a client that gives up, then the retry")
    key = new_key("order-3-charge")
    started = time.monotonic()
    try:
        charge(key, 4200, timeout=0.2)
        print("  the origin answered before the client gave up; the retry below replays it")
    except OSError:
        print("  %-28s ---  client gave up       %7.1f ms  (the worker still completes the charge)"
              % ("first attempt", (time.monotonic() - started) * 1000))
    show("retry", charge(key, 4200))

    print("4. The same key with a different amount")
    show("mismatched payload", charge(key, 9999))

    print("5. The origin charges, then drops its reply")
    key = new_key("order-5-charge")
    show("first attempt", charge(key, 5100, drop=True))
    show("retry", charge(key, 5100, drop=True))

    print("6. The ledger: one charge per key")
    conn = http.client.HTTPConnection(TARGET.hostname, TARGET.port or 80, timeout=30)
    conn.request("GET", "/v1/ledger")
    ledger = json.loads(conn.getresponse().read())
    conn.close()
    ours = [entry for entry in ledger["charges"] if entry.get("idempotency_key") in KEYS]
    for entry in ours:
        print("  %s  %6d %s" % (entry["id"], entry["amount"], entry["currency"]))
    print("  %d charge(s) for %d keys, %d cents in all"
          % (len(ours), len(KEYS), sum(entry["amount"] for entry in ours)))


if __name__ == "__main__":
    main()
