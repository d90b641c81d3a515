// The benchmark's current targets, checked against one full run's summary: the latency a
// user feels in front of a slow origin, the object's wall time, and the worker against the
// same guarantees in plain JavaScript (`js-do-claim-kept`). Cold start and cost per payment
// have their own commands (`bench cold`, `bench cost`). Pure: figures in, rows out.

import { fixed as f } from "./stats.mjs";

const ms = (x) => `${f(x)} ms`;
const times = (x) => `${f(x)}×`;

export const GOALS = {
  addedP50Ms: 3,
  addedP99Ms: 10,
  objectWallOverOriginMs: 3,
  cpuToKept: 1.05,
  c1P50ToKept: 1.05,
  replayC16P99ToKept: 1.2,
  wasmGzipBytes: 300_000,
};

/**
 * The rows of the targets table: `{ name, measured, goal, met }`.
 * `s`: the run's summary (`latency`, `burst`, `mixed`); `toKept`: the worker against
 * `js-do-claim-kept`, medians of per-run ratios (`replayC16Cpu`, `replayC16P99`, `firstC1P50`,
 * `firstCpuPerKey`); `wasmGz`: the Wasm's gzip -9 bytes; `withDeferred`: whether CPU per key
 * includes the work deferred past the phase (the memory phase ran); `perKey(name)`: that CPU.
 */
export function currentTargets(s, toKept, { wasmGz, withDeferred, perKey }) {
  const rows = [];
  const lat = s.latency ?? {};
  const worker = lat.worker;
  const references = ["js-do-claim", "js-do-claim-kept"].filter((name) => lat[name]);
  for (const c of ["c1", "c16"]) {
    const w = worker?.[c];
    if (!w) continue;
    const conns = c === "c1" ? "1 connection" : "16 connections";
    rows.push({
      name: `latency added at ${conns}, p50 ≤ ${GOALS.addedP50Ms} ms and p99 ≤ ${GOALS.addedP99Ms} ms`,
      measured: `p50 ${ms(w.addedP50)}, p99 ${ms(w.addedP99)}`,
      goal: `≤ ${GOALS.addedP50Ms} / ≤ ${GOALS.addedP99Ms} ms`,
      met: w.addedP50 <= GOALS.addedP50Ms && w.addedP99 <= GOALS.addedP99Ms,
    });
    const below = (q) => references.every((name) => w[q] < lat[name][c][q]);
    rows.push({
      name: `latency added at ${conns}, below ${references.join(" and ")}`,
      measured: ["addedP50", "addedP99"]
        .map((q) => `${q === "addedP50" ? "p50" : "p99"} ${f(w[q], 1)} vs ${references.map((name) => f(lat[name][c][q], 1)).join(", ")}`)
        .join("; "),
      goal: "below each",
      met: references.length > 0 && below("addedP50") && below("addedP99"),
    });
  }
  if (worker?.c1) {
    // An upper bound from outside (the client's latency less the origin's time): it proves
    // the goal when it is within it, and shows nothing when it is not.
    rows.push({
      name: `object wall time per first attempt ≤ origin + ${GOALS.objectWallOverOriginMs} ms (upper bound: c1 p50 − origin)`,
      measured: `≤ origin + ${ms(worker.c1.objectWallOverOriginP50Max)}`,
      goal: `≤ + ${GOALS.objectWallOverOriginMs} ms`,
      met: worker.c1.objectWallOverOriginP50Max <= GOALS.objectWallOverOriginMs,
    });
  }
  if (toKept) {
    rows.push(
      { name: "replay CPU c16, against js-do-claim-kept", measured: times(toKept.replayC16Cpu), goal: `≤ ${GOALS.cpuToKept}×`, met: toKept.replayC16Cpu <= GOALS.cpuToKept },
      {
        name: withDeferred
          ? "first-attempt CPU per key (deferred work included), against js-do-claim-kept"
          : "first-attempt CPU per key c16 (deferred work not measured: --no-memory), against js-do-claim-kept",
        measured: `${f(perKey("worker"))} / ${f(perKey("js-do-claim-kept"))} ms = ${times(toKept.firstCpuPerKey)}`,
        goal: `≤ ${GOALS.cpuToKept}×`,
        met: toKept.firstCpuPerKey <= GOALS.cpuToKept,
      },
      { name: "first attempts c1 p50, against js-do-claim-kept", measured: times(toKept.firstC1P50), goal: `≤ ${GOALS.c1P50ToKept}×`, met: toKept.firstC1P50 <= GOALS.c1P50ToKept },
      { name: "replays c16 p99, against js-do-claim-kept", measured: times(toKept.replayC16P99), goal: `≤ ${GOALS.replayC16P99ToKept}×`, met: toKept.replayC16P99 <= GOALS.replayC16P99ToKept },
    );
  }
  const burst = s.burst?.worker;
  if (burst) {
    const answered = burst.statusesPerRun.every((statuses) => !statuses["409"] && Object.keys(statuses).every((code) => code.startsWith("2")));
    rows.push({
      name: "burst of duplicates: 1 execution, every duplicate answered",
      measured: `${burst.executionsPerRun.join(", ")} execution(s); ${answered ? "all answered" : "some refused"}, last +${f(burst.lastMinusOriginMs, 1)} ms`,
      goal: "1, all answered",
      met: burst.executionsPerRun.every((e) => e === 1) && answered,
    });
  }
  const mixed = s.mixed?.worker;
  if (mixed) {
    // Where they differ, whether a key ran twice or requests were refused (a refusal
    // executes nothing) tells a broken guarantee from a failure that failed closed.
    const refused = (mixed.statusesPerRun ?? []).map((statuses) =>
      Object.entries(statuses).filter(([code]) => !code.startsWith("2")).map(([code, n]) => `${n} × ${code}`).join(", "),
    );
    const detail = mixed.allRunsExecutionsEqualKeys
      ? ""
      : `: ${mixed.keysExecutedMoreThanOnceMax ?? "?"} keys executed twice; refused per run: ${refused.map((x) => x || "none").join(" / ")}`;
    rows.push({
      name: "mixed traffic: executions = distinct keys",
      measured: `${mixed.allRunsExecutionsEqualKeys}${detail}`,
      goal: "true",
      met: mixed.allRunsExecutionsEqualKeys,
    });
  }
  if (Number.isFinite(wasmGz)) {
    rows.push({ name: "Wasm, gzip -9", measured: `${(wasmGz / 1000).toFixed(1)} KB`, goal: `≤ ${GOALS.wasmGzipBytes / 1000} KB`, met: wasmGz <= GOALS.wasmGzipBytes });
  }
  return rows;
}
