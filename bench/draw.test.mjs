// The SVG writer against a result shaped as `bench.mjs run` writes it, without running the
// benchmark: node --test bench/draw.test.mjs (no dependencies; node's own test runner).
import test from "node:test";
import assert from "node:assert/strict";
import { drawResult } from "./lib/svg.mjs";
import { quantiles } from "./lib/load.mjs";

// A load result: with its quantiles (from this release on) or without (older results).
function load(p50, p99, withQuantiles) {
  const sorted = Array.from({ length: 1000 }, (_, i) => p50 * 0.5 + ((p99 - p50 * 0.5) * i) / 999);
  return { rps: 1000 / p50, p50, p99, requests: 1000, ...(withQuantiles ? { latencyQuantiles: quantiles(sorted) } : {}) };
}

function phase(targets, runs) {
  return Array.from({ length: runs }, (_, r) =>
    Object.fromEntries(Object.entries(targets).map(([name, [p50, p99]]) => [name, load(p50 * (1 + r / 10), p99, r === 0)])),
  );
}

function burstRun(first, last, reached, withQuantiles) {
  const ends = Array.from({ length: 100 }, (_, i) => first + ((last - first) * i) / 99);
  return {
    executions: 1,
    firstResponseMs: first,
    lastResponseMs: last,
    originReachedMs: reached,
    statuses: { 201: 100 },
    ...(withQuantiles ? { responseQuantiles: quantiles(ends) } : {}),
  };
}

const first = { direct: [0.4, 1.2], passthrough: [1.1, 3.5], "js-do-claim": [4.2, 12], worker: [4.8, 14] };
const result = {
  runId: "test-run",
  startedAt: "2026-12-03T05:44:00.000Z",
  plan: { runs: 2, burstSize: 100, burstDelayMs: 300 },
  machine: { nproc: 2, cpuModel: "test <cpu> & co" },
  source: { commit: "abc1234" },
  raw: {
    first: { c1: phase(first, 2), c16: phase(first, 2) },
    replay: { c1: phase({ "js-do-claim": [1.5, 4], worker: [1.2, 3.1] }, 2), c16: phase({ worker: [2, 6] }, 2) },
    burst: { passthrough: [burstRun(301, 330, 1, true), burstRun(302, 340, 2, false)], worker: [burstRun(305, 322, 3, true)] },
    latency: { c1: phase({ direct: [301, 305], worker: [303.5, 312] }, 2), c16: phase({ direct: [302, 310], worker: [306, 330] }, 2) },
  },
  summary: {
    latencyOriginMs: 300,
    latency: {
      worker: { c1: { addedP50: 2.5, addedP99: 7 }, c16: { addedP50: 4, addedP99: 20 } },
      direct: { c1: { p50: 301, p99: 305 }, c16: { p50: 302, p99: 310 } },
    },
    targets: [
      { name: "replays c16 p99, against js-do-claim-kept", measured: "0.84×", goal: "≤ 1.2×", met: true },
      { name: "replay CPU c16, against js-do-claim-kept", measured: "1.22×", goal: "≤ 1.05×", met: false },
    ],
    guarantees: [{ name: "replay CPU ms/req c16", workerToKept: "1.16×", keptToClaim: "1.34×" }],
  },
};

/** Every opened element is closed, in order: the SVG is well-formed as far as tags go. */
function assertBalanced(svg) {
  const stack = [];
  for (const [, close, name, selfClosing] of svg.matchAll(/<(\/?)([a-zA-Z]+)[^>]*?(\/?)>/g)) {
    if (selfClosing) continue;
    if (close) assert.equal(stack.pop(), name, `</${name}> closes ${stack.at(-1)}`);
    else stack.push(name);
  }
  assert.deepEqual(stack, []);
}

test("a full result draws every target, phase, burst and target row", () => {
  const svg = drawResult(result);
  assert.match(svg, /^<svg xmlns="http:\/\/www.w3.org\/2000\/svg" width="1000" height="\d+"/);
  assertBalanced(svg);
  for (const name of Object.keys(first)) assert.ok(svg.includes(`>${name}</text>`), name);
  for (const title of ["Latency added over calling the origin directly", "origin answering in 300 ms", "+2.5 ms", "+20.0 ms", "First attempts", "1 connection", "16 connections", "Replays", "Coalesced bursts", "origin delay 300 ms", "Targets (against the direct call and js-do-claim-kept)", "The guarantees"]) {
    assert.ok(svg.includes(title), title);
  }
  assert.ok(svg.includes("replays c16 p99, against js-do-claim-kept") && svg.includes("✓") && svg.includes("✗"));
  assert.ok(svg.includes(">1.16×</text>") && svg.includes(">1.34×</text>"));
  // Text is escaped, and no number went missing on the way.
  assert.ok(svg.includes("test &lt;cpu&gt; &amp; co"));
  assert.doesNotMatch(svg, /NaN|undefined|Infinity/);
  // Runs with quantiles are box plots (rect), runs without are p50–p99 lines with dots.
  assert.ok((svg.match(/<rect /g) ?? []).length > 10);
  assert.ok((svg.match(/<circle /g) ?? []).length > 10);
});

test("a result with sections missing (a --memory-only run, an aborted one) still draws", () => {
  for (const partial of [{}, { runId: "m", raw: { memory: {} } }, { ...result, raw: { burst: result.raw.burst }, summary: {} }]) {
    const svg = drawResult(partial);
    assertBalanced(svg);
    assert.doesNotMatch(svg, /NaN|undefined|Infinity/);
  }
});
