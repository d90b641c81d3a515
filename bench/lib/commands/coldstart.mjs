// Cold start (issue 17): the first request to a fresh isolate, against the pass-through,
// js-do-claim and js-do-claim-kept (js-do-claim with the worker's guarantees, in plain JS).
// Each round starts every target in a new workerd process (new state directory), then
// sends one first attempt (a new key) and, after it, 20 more first attempts one at a
// time (warm). Reports per target, medians over the rounds:
// - start: wall time until the worker answered `ready` (wrangler's DevEnv included) and the
//   workerd process's CPU by then (parsing, compiling and instantiating the script and Wasm);
// - first: the first request's latency, and minus the warm requests' median latency (what the
//   first request pays for lazy work: the isolate's first event, Wasm instantiation if
//   deferred, settings read once per isolate, JIT);
// - the workerd CPU of the first request alone (ticks of 10 ms, so coarse);
// - for every other target, its first − warm minus the worker's in the same round: the
//   median of those differences, and in how many rounds the target paid more.
//
//   node bench/bench.mjs cold [build dir=build] [rounds=5] [other build dir ...]
//
// Runs the built worker in ORIGIN_URL mode (as deployed), and the same build in route mode
// (`worker-route`: no TCP probe). Not part of `bench.mjs run`.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { writeConfig, startWorker, startBenchOrigin } from "../workers.mjs";
import { pool, send } from "../load.mjs";
import { cpuMs, settle } from "../proc.mjs";
import { median } from "../stats.mjs";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");
const WORK = fs.mkdtempSync(path.join(os.tmpdir(), "idempotency-edge-cold-"));
const [buildArg = "build", roundsArg = "5", ...otherBuilds] = process.argv.slice(2);
const build = path.resolve(buildArg);
const rounds = Number(roundsArg);

const origin = await startBenchOrigin(ROOT);
const originUrl = `http://127.0.0.1:${origin.port}`;
const date = fs.readFileSync(path.join(ROOT, "wrangler.toml"), "utf8").match(/^compatibility_date\s*=\s*"([^"]+)"/m)[1];
const ladder = (mode) =>
  `name = "cold-${mode}"\nmain = "x"\ncompatibility_date = "${date}"\n` +
  '[[durable_objects.bindings]]\nname = "LADDER"\nclass_name = "LadderObject"\n\n[[migrations]]\ntag = "v1"\nnew_sqlite_classes = ["LadderObject"]\n';
// The built worker with wrangler.toml's settings, named `name`, in front of `originUrl`.
function builtWorker(file, name, originUrl, dir = build) {
  writeConfig(file, { from: path.join(ROOT, "wrangler.toml"), main: path.join(dir, "worker/shim.mjs"), vars: { ORIGIN_URL: originUrl } });
  fs.writeFileSync(file, fs.readFileSync(file, "utf8").replace(/^name\s*=.*$/m, `name = "${name}"`));
  return file;
}
const configs = {
  passthrough: (file) =>
    writeConfig(file, {
      base: `name = "cold-passthrough"\nmain = "x"\ncompatibility_date = "${date}"\n`,
      main: path.join(ROOT, "bench/targets/passthrough.mjs"),
      vars: { ORIGIN_URL: originUrl },
    }),
  "js-do-claim": (file) =>
    writeConfig(file, { base: ladder("do-claim"), main: path.join(ROOT, "bench/targets/ladder.mjs"), vars: { ORIGIN_URL: originUrl, LADDER_MODE: "do-claim" } }),
  // js-do-claim with the worker's guarantees in plain JS: the cold start a runtime without
  // Wasm would start from.
  "js-do-claim-kept": (file) =>
    writeConfig(file, {
      base: ladder("do-claim-kept"),
      main: path.join(ROOT, "bench/targets/ladder.mjs"),
      vars: { ORIGIN_URL: originUrl, LADDER_MODE: "do-claim-kept" },
    }),
  worker: (file) => builtWorker(file, "cold-worker", originUrl),
  // The same build in route mode (no ORIGIN_URL, the origin named by the Host header): no TCP
  // probe before the first forward, so no first use of `connect()` on the first request.
  "worker-route": (file) => builtWorker(file, "cold-worker-route", ""),
};
// Further builds to compare, each as deployed (ORIGIN_URL mode): worker-2, worker-3, ...
for (const [i, dir] of otherBuilds.entries()) {
  console.log(`worker-${i + 2}: ${path.resolve(dir)}`);
  configs[`worker-${i + 2}`] = (file) => builtWorker(file, `cold-worker-${i + 2}`, originUrl, path.resolve(dir));
}
const payment = (key) => ({
  method: "POST",
  path: "/v1/payments",
  headers: { "content-type": "application/json", authorization: "Bearer sk_test_bench", "idempotency-key": key },
  body: Buffer.from(JSON.stringify({ amount: 1999, currency: "eur", customer: "cus_bench_0001", metadata: { order: key.slice(-24) } })),
});

const results = Object.fromEntries(Object.keys(configs).map((n) => [n, []]));
const id = Date.now().toString(36);
for (let r = 0; r < rounds; r++) {
  const names = Object.keys(configs);
  for (const name of names.map((_, i) => names[(i + r) % names.length])) {
    const file = configs[name](path.join(WORK, `${name}.toml`));
    const t0 = performance.now();
    const t = await startWorker({ name, config: file, persistDir: path.join(WORK, `state-${name}-${r}`), registryDir: path.join(WORK, "registry") });
    const startMs = performance.now() - t0;
    await settle([t.pid]);
    const startCpu = cpuMs(t.pid);
    if (name === "worker-route") t.hostHeader = `127.0.0.1:${origin.port}`;
    const agent = pool(1);
    const c0 = cpuMs(t.pid);
    const first = await send(agent, t, payment(`${id}-${name}-${r}-first`));
    await settle([t.pid]);
    const firstCpu = cpuMs(t.pid) - c0;
    const warm = [];
    for (let i = 0; i < 20; i++) warm.push((await send(agent, t, payment(`${id}-${name}-${r}-warm-${i}`))).ms);
    agent.destroy();
    await t.dispose();
    const w = median(warm);
    results[name].push({ round: r, startMs, startCpu, firstMs: first.ms, warmMs: w, extraMs: first.ms - w, firstCpu, status: first.status });
    console.log(
      `round ${r} ${name.padEnd(12)} start ${startMs.toFixed(0)} ms (workerd CPU ${startCpu} ms)  first ${first.ms.toFixed(2)} ms [${first.status}]  warm p50 ${w.toFixed(2)} ms  first CPU ${firstCpu} ms`,
    );
  }
}
console.log("\nmedians over rounds");
console.log("| target | start, wall ms | workerd CPU at ready, ms | first request ms | warm p50 ms | first − warm ms | first request CPU ms |");
console.log("|---|--:|--:|--:|--:|--:|--:|");
for (const [name, rs] of Object.entries(results)) {
  const m = (k) => median(rs.map((x) => x[k]));
  console.log(`| ${name} | ${m("startMs").toFixed(0)} | ${m("startCpu").toFixed(0)} | ${m("firstMs").toFixed(2)} | ${m("warmMs").toFixed(2)} | ${m("extraMs").toFixed(2)} | ${m("firstCpu").toFixed(0)} |`);
}
// Each round's targets ran back to back, so a round's difference is steadier than the
// difference of two medians when the rounds themselves spread widely (25 to 85 ms seen).
console.log("\npaired with `worker`, round by round: first − warm of the target minus the worker's");
console.log("| target | median of the differences, ms | rounds where the target paid more |");
console.log("|---|--:|--:|");
const workerByRound = new Map(results.worker.map((x) => [x.round, x.extraMs]));
for (const [name, rs] of Object.entries(results)) {
  if (name === "worker") continue;
  const diffs = rs.filter((x) => workerByRound.has(x.round)).map((x) => x.extraMs - workerByRound.get(x.round));
  console.log(`| ${name} | ${median(diffs).toFixed(2)} | ${diffs.filter((d) => d > 0).length} of ${diffs.length} |`);
}
origin.stop();
fs.rmSync(WORK, { recursive: true, force: true });
process.exit(0);
