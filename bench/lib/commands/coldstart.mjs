// Cold start, whole and per side: the first request to a fresh
// isolate, against the pass-through, js-do-claim and js-do-claim-kept (js-do-claim with the
// worker's guarantees, in plain JS). Each round starts every target in a new workerd process
// (new state directory) once or twice:
// - whole: one first attempt (a new key) to the fresh isolate, then 20 more first attempts
//   one at a time (warm);
// - split (every target with an object, so not the pass-through), in another fresh process:
//   - the Worker's side: a request the Worker answers alone, with no object and no origin
//     (a POST without `Idempotency-Key`: 400), first to the fresh isolate, then 20 more
//     (warm);
//   - the object's side: then, in that Worker now warm, the first first attempt (the first
//     object of the isolate, its first storage and its first origin fetch, and the Worker's
//     covered path that a 400 does not reach), then 20 more first attempts (warm, each
//     a new object too).
// Each side's cold cost is its first request minus its warm median. Reports per target,
// medians over the rounds with their spread (min–max and the middle half):
// - start: wall time until the worker answered `ready` (wrangler's DevEnv included) and the
//   workerd process's CPU by then (parsing, compiling and instantiating the script and Wasm);
// - first: the first request's latency, and minus the warm requests' median latency (what the
//   first request pays for lazy work: the isolate's first event, Wasm instantiation if
//   deferred, settings read once per isolate, JIT);
// - the workerd CPU of the first request alone (ticks of 10 ms, so coarse);
// - for every other target, its first − warm minus the worker's in the same round (each
//   side too): the median of those differences, and in how many rounds the target paid more.
//
//   node bench/bench.mjs cold [build dir=build] [rounds=5] [other build dir ...]
//        [--targets worker,worker-2,...] [--state disk|tmpfs] [--out FILE=target/bench/cold.json]
//   COLD_VARS='{"NAME":"value"}' adds `worker-vars`: the build with these variables too.
//
// Runs the built worker in ORIGIN_URL mode (as deployed), and the same build in route mode
// (`worker-route`: no TCP probe). Writes every round and the summary to the JSON file. Not
// part of `bench.mjs run`.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { writeConfig, startWorker, startBenchOrigin } from "../workers.mjs";
import { pool, send } from "../load.mjs";
import { execFileSync } from "node:child_process";
import { cpuMs, settle, othersCpuSnapshot, othersCpuBetween } from "../proc.mjs";
import { median, percentile, round } from "../stats.mjs";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");
// Flags first (`--targets a,b`, `--out FILE`), then the positional arguments.
const argv = process.argv.slice(2);
const flag = (name) => {
  const at = argv.indexOf(name);
  return at < 0 ? undefined : argv.splice(at, 2)[1];
};
const onlyTargets = flag("--targets")?.split(",");
const out = path.resolve(flag("--out") ?? path.join(ROOT, "target/bench/cold.json"));
// `--state tmpfs`: the objects' SQLite files in /dev/shm, so that the disk's own time (a new
// object's file created and synced, tens of ms on a busy virtio disk) is not in every warm
// first attempt, where it hides the object's cold cost in its spread.
const state = flag("--state") ?? "disk";
if (!["disk", "tmpfs"].includes(state)) throw new Error(`--state disk|tmpfs, not ${state}`);
const WORK = fs.mkdtempSync(path.join(state === "tmpfs" ? "/dev/shm" : os.tmpdir(), "idempotency-edge-cold-"));
const [buildArg = "build", roundsArg = "5", ...otherBuilds] = argv;
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
// COLD_VARS (JSON): one more target, `worker-vars`, the same build with these variables set
// too, e.g. '{"LOG_DECISIONS":"problems"}' for the cold cost of a first attempt's line.
if (process.env.COLD_VARS) {
  const vars = JSON.parse(process.env.COLD_VARS);
  console.log(`worker-vars: ${build} with ${JSON.stringify(vars)}`);
  configs["worker-vars"] = (file) => {
    builtWorker(file, "cold-worker-vars", originUrl);
    return writeConfig(file, { base: fs.readFileSync(file, "utf8"), main: path.join(build, "worker/shim.mjs"), vars });
  };
}
if (onlyTargets) {
  for (const name of Object.keys(configs)) if (!onlyTargets.includes(name)) delete configs[name];
  const unknown = onlyTargets.filter((name) => !(name in configs));
  if (unknown.length) throw new Error(`unknown targets ${unknown.join(", ")}; known: passthrough, js-do-claim, js-do-claim-kept, worker, worker-route, worker-vars (COLD_VARS), worker-2, ...`);
}
// The pass-through has no object: its first request is all Worker.
const split = (name) => name !== "passthrough";
const payment = (key) => ({
  method: "POST",
  path: "/v1/payments",
  headers: { "content-type": "application/json", authorization: "Bearer sk_test_bench", "idempotency-key": key },
  body: Buffer.from(JSON.stringify({ amount: 1999, currency: "eur", customer: "cus_bench_0001", metadata: { order: key.slice(-24) } })),
});

// A request the Worker answers alone: a covered POST without a key (400 before any object).
const keyless = () => ({ ...payment("x"), headers: { "content-type": "application/json", authorization: "Bearer sk_test_bench" } });

const results = Object.fromEntries(Object.keys(configs).map((n) => [n, []]));
const id = Date.now().toString(36);
const others0 = othersCpuSnapshot();
const load0 = os.loadavg();
const started = Date.now();

// A fresh workerd for `name`: resolves the target with its start figures.
async function fresh(name, r, kind) {
  const file = configs[name](path.join(WORK, `${name}.toml`));
  const t0 = performance.now();
  const t = await startWorker({ name, config: file, persistDir: path.join(WORK, `state-${name}-${kind}-${r}`), registryDir: path.join(WORK, "registry") });
  const startMs = performance.now() - t0;
  await settle([t.pid]);
  if (name === "worker-route") t.hostHeader = `127.0.0.1:${origin.port}`;
  return { t, startMs, startCpu: cpuMs(t.pid) };
}

// One request to the target, then 20 more made by `next(i)`: the first's latency and CPU,
// the warm median, and the first minus it.
async function firstThenWarm(t, agent, first, next) {
  const c0 = cpuMs(t.pid);
  const answer = await send(agent, t, first);
  await settle([t.pid]);
  const firstCpu = cpuMs(t.pid) - c0;
  const warm = [];
  for (let i = 0; i < 20; i++) warm.push((await send(agent, t, next(i))).ms);
  const warmMs = median(warm);
  return { firstMs: answer.ms, warmMs, extraMs: answer.ms - warmMs, firstCpu, status: answer.status };
}

for (let r = 0; r < rounds; r++) {
  const names = Object.keys(configs);
  for (const name of names.map((_, i) => names[(i + r) % names.length])) {
    const { t, startMs, startCpu } = await fresh(name, r, "whole");
    const agent = pool(1);
    const whole = await firstThenWarm(t, agent, payment(`${id}-${name}-${r}-first`), (i) => payment(`${id}-${name}-${r}-warm-${i}`));
    agent.destroy();
    await t.dispose();
    const row = { round: r, startMs, startCpu, ...whole };
    let sides = "";
    if (split(name)) {
      const s = await fresh(name, r, "split");
      const agent = pool(1);
      const worker = await firstThenWarm(s.t, agent, keyless(), () => keyless());
      const object = await firstThenWarm(s.t, agent, payment(`${id}-${name}-${r}-obj-first`), (i) => payment(`${id}-${name}-${r}-obj-warm-${i}`));
      agent.destroy();
      await s.t.dispose();
      row.workerSide = worker;
      row.objectSide = object;
      sides = `  | Worker's side ${worker.firstMs.toFixed(2)} − ${worker.warmMs.toFixed(2)} = ${worker.extraMs.toFixed(2)} ms [${worker.status}]  object's side ${object.firstMs.toFixed(2)} − ${object.warmMs.toFixed(2)} = ${object.extraMs.toFixed(2)} ms [${object.status}]`;
    }
    results[name].push(row);
    console.log(
      `round ${r} ${name.padEnd(12)} start ${startMs.toFixed(0)} ms (workerd CPU ${startCpu} ms)  first ${whole.firstMs.toFixed(2)} ms [${whole.status}]  warm p50 ${whole.warmMs.toFixed(2)} ms  first CPU ${whole.firstCpu} ms${sides}`,
    );
  }
}

// A list of per-round values, as the summary keeps it: median, min, max, middle half.
function spread(values) {
  const v = values.filter(Number.isFinite).sort((a, b) => a - b);
  return { median: round(median(v)), min: round(v[0]), p25: round(percentile(v, 25)), p75: round(percentile(v, 75)), max: round(v[v.length - 1]), n: v.length };
}
const pick = (rs, side, key) => rs.map((x) => (side ? x[side]?.[key] : x[key])).filter((x) => x !== undefined);
const summary = {};
for (const [name, rs] of Object.entries(results)) {
  summary[name] = {
    startMs: spread(pick(rs, null, "startMs")),
    startCpuMs: spread(pick(rs, null, "startCpu")),
    firstMs: spread(pick(rs, null, "firstMs")),
    warmMs: spread(pick(rs, null, "warmMs")),
    coldMs: spread(pick(rs, null, "extraMs")),
    firstCpuMs: spread(pick(rs, null, "firstCpu")),
  };
  if (split(name)) {
    for (const side of ["workerSide", "objectSide"]) {
      summary[name][side] = {
        firstMs: spread(pick(rs, side, "firstMs")),
        warmMs: spread(pick(rs, side, "warmMs")),
        coldMs: spread(pick(rs, side, "extraMs")),
        firstCpuMs: spread(pick(rs, side, "firstCpu")),
        statuses: [...new Set(pick(rs, side, "status"))],
      };
    }
  }
}
const range = (s) => `${s.median.toFixed(2)} (${s.min.toFixed(1)}–${s.max.toFixed(1)})`;
console.log("\nmedians over rounds (min–max)");
console.log("| target | start, wall ms | workerd CPU at ready, ms | first request ms | warm p50 ms | first − warm ms | first request CPU ms | Worker's side: first − warm ms | object's side: first − warm ms |");
console.log("|---|--:|--:|--:|--:|--:|--:|--:|--:|");
for (const [name, s] of Object.entries(summary)) {
  const side = (k) => (s[k] ? range(s[k].coldMs) : "—");
  console.log(`| ${name} | ${s.startMs.median.toFixed(0)} | ${s.startCpuMs.median.toFixed(0)} | ${s.firstMs.median.toFixed(2)} | ${s.warmMs.median.toFixed(2)} | ${range(s.coldMs)} | ${s.firstCpuMs.median.toFixed(0)} | ${side("workerSide")} | ${side("objectSide")} |`);
}
// Each round's targets ran back to back, so a round's difference is steadier than the
// difference of two medians when the rounds themselves spread widely (25 to 85 ms seen).
const paired = {};
if (results.worker) {
  console.log("\npaired with `worker`, round by round: first − warm of the target minus the worker's");
  console.log("| target | whole: median of the differences, ms | rounds where the target paid more | Worker's side | object's side |");
  console.log("|---|--:|--:|--:|--:|");
  const diffs = (name, side) => {
    const mine = new Map(results.worker.map((x) => [x.round, side ? x[side]?.extraMs : x.extraMs]));
    const d = results[name]
      .map((x) => [x.round, side ? x[side]?.extraMs : x.extraMs])
      .filter(([round, v]) => v !== undefined && mine.get(round) !== undefined)
      .map(([round, v]) => v - mine.get(round));
    return { medianMs: round(median(d)), targetPaidMore: d.filter((x) => x > 0).length, rounds: d.length, differences: d.map((x) => round(x)) };
  };
  for (const name of Object.keys(results)) {
    if (name === "worker") continue;
    paired[name] = { whole: diffs(name, null) };
    if (split(name)) for (const side of ["workerSide", "objectSide"]) paired[name][side] = diffs(name, side);
    const cell = (p) => (p ? `${p.medianMs.toFixed(2)} (${p.targetPaidMore} of ${p.rounds} more)` : "—");
    const p = paired[name];
    console.log(`| ${name} | ${p.whole.medianMs.toFixed(2)} | ${p.whole.targetPaidMore} of ${p.whole.rounds} | ${cell(p.workerSide)} | ${cell(p.objectSide)} |`);
  }
}
const git = (...a) => {
  try {
    return execFileSync("git", ["-C", ROOT, ...a], { encoding: "utf8" }).trim();
  } catch {
    return null;
  }
};
const result = {
  command: `node bench/bench.mjs cold ${process.argv.slice(2).join(" ")}`,
  date: new Date(started).toISOString(),
  seconds: Math.round((Date.now() - started) / 1000),
  machine: {
    nproc: os.cpus().length,
    loadavgBefore: load0.map((x) => round(x)),
    loadavgAfter: os.loadavg().map((x) => round(x)),
    otherProcessesCpu: othersCpuBetween(others0, othersCpuSnapshot()),
  },
  source: { commit: git("rev-parse", "--short", "HEAD"), srcChanged: Boolean(git("status", "--porcelain", "src")) },
  plan: { rounds, state, builds: { worker: build, ...Object.fromEntries(otherBuilds.map((dir, i) => [`worker-${i + 2}`, path.resolve(dir)])) }, targets: Object.keys(configs) },
  raw: results,
  summary,
  pairedWithWorker: paired,
};
fs.mkdirSync(path.dirname(out), { recursive: true });
fs.writeFileSync(out, JSON.stringify(result, null, 2) + "\n");
console.log(`\nmachine: load average ${result.machine.loadavgBefore.join(", ")} before, ${result.machine.loadavgAfter.join(", ")} after; other processes used ${result.machine.otherProcessesCpu.seconds} s of CPU in ${result.seconds} s`);
console.log(`wrote ${out}`);
origin.stop();
fs.rmSync(WORK, { recursive: true, force: true });
process.exit(0);
