// The README's performance lines are what `node bench/bench.mjs summary` renders from the
// committed docs/performance-summary.json: no figure in the README is typed by hand.
import test from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import { readmeBlock, readmeLines, summarize, withReadmeBlock } from "./lib/summary.mjs";

const read = (p) => fs.readFileSync(new URL(`../${p}`, import.meta.url), "utf8");

test("the README's performance lines are the committed summary's, rendered", () => {
  const summary = JSON.parse(read("docs/performance-summary.json"));
  const block = readmeBlock(read("README.md"));
  assert.ok(block, "README.md has no performance block; run `node bench/bench.mjs summary --write`");
  assert.deepEqual(block, readmeLines(summary), "README.md's performance lines differ from docs/performance-summary.json: run `node bench/bench.mjs summary --write`");
});

test("a summary is made from a run's latency phase and a cost count, and refuses either missing", () => {
  const lat = (p50, p99) => ({ addedP50: p50, addedP99: p99 });
  const run = {
    source: { commit: "0123456789abcdef" },
    machine: { nproc: 2 },
    summary: { latencyOriginMs: 300, latency: { worker: { c1: lat(8.94, 32.8), c16: lat(39.6, 105.6) }, "js-do-claim-kept": { c1: lat(7, 23.1), c16: lat(30.9, 78.7) } } },
  };
  const line = (target, originMs, total, rows) => ({ target, originMs, today: { usd: total, lines: [{ item: "rows written", usd: rows }] } });
  const cost = { retries: 1, results: [line("worker", 1000, 5.914, 3), line("worker", 300, 4.821, 3)] };
  const s = summarize(run, cost, { date: "2026-12-07" });
  assert.deepEqual(s.addedLatency.worker, { c1: { p50: 8.9, p99: 32.8 }, c16: { p50: 39.6, p99: 105.6 } });
  const lines = readmeLines(s);
  assert.match(lines[2], /p50 8\.9 ms, p99 32\.8 ms at one connection; p50 39\.6 ms, p99 105\.6 ms at 16/);
  assert.match(lines[4], /\$4\.82 with an origin answering in 300 ms, \$5\.91 with an origin answering in 1 s; \$3\.00 of it/);
  assert.match(lines[1], /`0123456`/);
  assert.throws(() => summarize({ summary: {} }, cost, { date: "x" }), /latency phase/);
  assert.throws(() => summarize(run, { results: [] }, { date: "x" }), /worker line/);
  const readme = "# t\n\n**Read on:** x\n";
  const once = withReadmeBlock(readme, lines);
  assert.deepEqual(readmeBlock(once), lines);
  assert.equal(withReadmeBlock(once, lines), once, "writing twice changes nothing");
});
