// The full run's targets table: each row is met exactly when its figure is within its goal,
// and a run without the memory phase says its CPU per key leaves the deferred work out.
import test from "node:test";
import assert from "node:assert/strict";
import { currentTargets, GOALS } from "./lib/targets.mjs";

const lat = (addedP50, addedP99, wall) => ({ addedP50, addedP99, objectWallOverOriginP50Max: wall });
const summary = (worker) => ({
  latency: {
    worker,
    "js-do-claim": { c1: lat(4.3, 22.6, 8), c16: lat(6.4, 42.8, 9) },
    "js-do-claim-kept": { c1: lat(7.6, 30.6, 9), c16: lat(10, 51.8, 12) },
  },
  burst: { worker: { executionsPerRun: [1, 1, 1], statusesPerRun: [{ 201: 100 }, { 201: 100 }, { 201: 100 }], lastMinusOriginMs: 46 } },
  mixed: { worker: { allRunsExecutionsEqualKeys: true } },
});
const toKept = { replayC16Cpu: 1.22, replayC16P99: 0.84, firstC1P50: 1.05, firstCpuPerKey: 1.3 };
const perKey = (name) => (name === "worker" ? 2.6 : 2.0);
const byName = (rows) => Object.fromEntries(rows.map((row) => [row.name, row]));

test("each row is met exactly when its figure is within the goal", () => {
  const rows = byName(currentTargets(summary({ c1: lat(8.3, 18.7, 15), c16: lat(14.4, 95.4, 20) }), toKept, { wasmGz: 299_169, withDeferred: true, perKey }));
  const met = (prefix) => Object.values(rows).find((row) => row.name.startsWith(prefix)).met;
  assert.equal(met("latency added at 1 connection, p50"), false);
  assert.equal(met("latency added at 1 connection, below"), false);
  assert.equal(met("object wall time"), false);
  assert.equal(met("replay CPU"), false);
  assert.equal(met("first attempts c1 p50"), true, "at the goal is within it");
  assert.equal(met("replays c16 p99"), true);
  assert.equal(met("first-attempt CPU per key (deferred work included)"), false);
  assert.equal(met("burst of duplicates"), true);
  assert.equal(met("mixed traffic"), true);
  assert.equal(met("Wasm"), true);
  assert.equal(rows["first-attempt CPU per key (deferred work included), against js-do-claim-kept"].measured, "2.60 / 2.00 ms = 1.30×");
});

test("a worker within every latency goal and below both references meets those rows", () => {
  const rows = currentTargets(summary({ c1: lat(2.5, 9, 2), c16: lat(3, 10, 3) }), toKept, { wasmGz: 1, withDeferred: false, perKey });
  for (const row of rows.filter((row) => row.name.startsWith("latency") || row.name.startsWith("object wall"))) {
    assert.equal(row.met, true, row.name);
  }
  assert.ok(rows.some((row) => row.name.includes("deferred work not measured")));
});

test("a burst with a 409 or a second execution, or a Wasm over the limit, is not met", () => {
  const s = summary({ c1: lat(2.5, 9, 2), c16: lat(3, 10, 3) });
  s.burst.worker.statusesPerRun[1] = { 201: 1, 409: 99 };
  let rows = byName(currentTargets(s, null, { wasmGz: GOALS.wasmGzipBytes + 1, withDeferred: false, perKey }));
  assert.equal(rows["burst of duplicates: 1 execution, every duplicate answered"].met, false);
  assert.equal(rows["Wasm, gzip -9"].met, false);
  s.burst.worker.statusesPerRun[1] = { 201: 100 };
  s.burst.worker.executionsPerRun = [1, 2, 1];
  rows = byName(currentTargets(s, null, { wasmGz: 1, withDeferred: false, perKey }));
  assert.equal(rows["burst of duplicates: 1 execution, every duplicate answered"].met, false);
});

test("mixed traffic that does not match says whether a key ran twice or requests were refused", () => {
  const s = summary({ c1: lat(2.5, 9, 2), c16: lat(3, 10, 3) });
  s.mixed.worker = { allRunsExecutionsEqualKeys: false, keysExecutedMoreThanOnceMax: 0, statusesPerRun: [{ 201: 10 }, { 201: 5, 503: 4 }] };
  const row = currentTargets(s, null, { wasmGz: 1, withDeferred: false, perKey }).find((r) => r.name.startsWith("mixed"));
  assert.equal(row.met, false);
  assert.equal(row.measured, "false: 0 keys executed twice; refused per run: none / 4 × 503");
});
