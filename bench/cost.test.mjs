// The cost script's arithmetic (bench/lib/cost.mjs), against figures worked by hand.
import test from "node:test";
import assert from "node:assert/strict";
import { PRICES, perPayment, priceMillion, rowsOf, workerHoldsFetch } from "./lib/cost.mjs";

const close = (actual, expected, what) => assert.ok(Math.abs(actual - expected) < 1e-9, `${what}: ${actual} ≠ ${expected}`);

test("a million payments at list prices, line by line", () => {
  // 100 payments: 200 Worker requests (a first attempt and a retry each), 500 ms of CPU,
  // 300 object requests (two calls and an alarm each), 30.5 s of object wall time, 300 rows.
  const per = perPayment({ payments: 100, workerRequests: 200, workerCpuMs: 500, objectRequests: 300, objectWallMs: 30_500, rowsWritten: 300, originMs: 300 });
  const { lines, usd } = priceMillion(per);
  const by = Object.fromEntries(lines.map((l) => [l.item, l]));
  close(by["Worker requests"].usd, 2 * 0.3, "requests: 2 per payment, 2 M at $0.30/M");
  close(by["Worker CPU"].usd, 5 * 0.02, "CPU: 5 ms per payment, 5 M ms at $0.02/M");
  close(by["object requests"].usd, 3 * 0.15, "object requests: 3 M at $0.15/M");
  // 305 ms per payment at 128 MB = 0.03904 GB-s; a million of them 39,040 GB-s at $12.50/M.
  close(by["object duration"].units, 39_040, "GB-s per million payments");
  close(by["object duration"].usd, 0.488, "duration: 39,040 GB-s at $12.50 per million");
  close(by["rows written"].usd, 3, "rows: 3 M at $1.00/M");
  close(usd, 0.6 + 0.1 + 0.45 + 0.488 + 3, "the total is the sum of the lines");
});

test("the object's duration dominates in front of a slow origin, and moves with who holds the fetch", () => {
  const today = perPayment({ payments: 1, workerRequests: 1, workerCpuMs: 4, objectRequests: 2, objectWallMs: 1003, rowsWritten: 3, firstAttempts: 1, originMs: 1000 });
  const projected = workerHoldsFetch(today);
  close(projected.objectWallMs, 3, "only the object's own 3 ms remain");
  close(projected.objectRequests, 3, "one more object request: the settle");
  const a = priceMillion(today).usd;
  const b = priceMillion(projected).usd;
  // 1.003 s × 0.128 GB × $12.50/M GB-s × 1 M = $1.6048; 0.003 s → $0.0048; a request $0.15.
  close(a - b, 1.6048 - 0.0048 - 0.15, "the difference is the origin's time less one object request");
});

test("rows written count the billed tables, the deletion apart, miniflare's table never", () => {
  const report = {
    local_only_tables: ["__miniflare_do_name"],
    objects: [
      { complete: true, rows_written: { __miniflare_do_name: 1, _cf_KV: 2, _cf_METADATA: 1, "dropped:_cf_KV": 1, "dropped:__miniflare_do_name": 1 }, rows_now: {} },
      { complete: false, rows_written: { _cf_KV: 1 }, rows_now: { __miniflare_do_name: 1, _cf_KV: 1 } },
    ],
  };
  assert.deepEqual(rowsOf(report), { live: 4, dropped: 1, stored: 1, objects: 2, incomplete: 1 });
});

test("no payment, no price: a run that counted nothing is refused", () => {
  assert.throws(() => perPayment({ payments: 0, workerRequests: 0 }), /no payment/);
  assert.equal(PRICES.objectMemoryGb, 0.128, "duration is billed at 128 MB per object");
});
