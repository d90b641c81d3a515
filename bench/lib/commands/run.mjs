// The performance benchmark: `node bench/bench.mjs run` (started by ./scripts/bench.sh, which
// sets up and builds first); see docs/performance.md for what it measures and the latest figures.
//
// In one run it starts, all on 127.0.0.1:
// - a fast origin (bench/origin.mjs, its own node process) that counts executions per key;
// - the worker (build/worker/shim.mjs, as built) in local workerd, with ORIGIN_URL;
// - the pass-through baseline (bench/targets/passthrough.mjs) in the same workerd version;
// - diagnostic steps between the two (bench/targets/ladder.mjs, and the worker in route
//   mode, which skips the TCP probe) to show where a first attempt's time goes.
// Every worker runs under wrangler's DevEnv with the inspector off and no build step, and
// load goes straight to the user worker's workerd socket (not through wrangler's proxy).
//
// - the latency a user feels: first attempts against an origin that answers in --origin-ms
//   (default 300), through every target and straight to the origin in the same round, at 1
//   and 16 connections; the added latency is (through the target) − (direct), per quantile.
//
// Options: --runs N (default 3), --quick (1 run, short phases), --no-ladder, --state tmpfs,
//          --origin-ms MS (default 300), --no-memory, --out FILE (default target/bench/latest.json).
// Environment: BENCH_SCALE (default 1) scales every duration and request count.
import { fork, execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import zlib from "node:zlib";
import { fileURLToPath } from "node:url";
import { writeConfig, startWorker } from "../workers.mjs";
import { pool, send, runLoad, quantiles } from "../load.mjs";
import { drawResult } from "../svg.mjs";
import { cpuMs, rssKiB, settle, othersCpuSnapshot, othersCpuBetween } from "../proc.mjs";
import { fixed, median, round } from "../stats.mjs";
import { latencySummary } from "../latency.mjs";
import { currentTargets } from "../targets.mjs";
import { sections, withoutNameSection, codeBreakdown, dataStrings, WASM_OPT_FEATURES } from "../wasm.mjs";
import { startProfiledWorker, summarizeProfile, varsOf } from "../profile.mjs";
import crypto from "node:crypto";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");
const OUT_DIR = path.join(ROOT, "target", "bench");
const args = process.argv.slice(2);
const flag = (name) => args.includes(name);
const option = (name, fallback) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : fallback;
};
const QUICK = flag("--quick");
// Only the memory-bound phases (duplicates with large bodies, a burst on a 5 MiB answer).
const MEMORY_ONLY = flag("--memory-only");
// Leaves out the profiles and the memory phases (a shorter run: figures per key that need
// the deferred CPU are then left out too).
const NO_MEMORY = flag("--no-memory");
const RUNS = Number(option("--runs", QUICK ? 1 : 3));
const LADDER = !flag("--no-ladder");
// Bursts per target: 10, to compare the max with the median.
const BURSTS = Number(option("--bursts", RUNS));
// Where workerd keeps the Durable Objects' SQLite files: "disk" (target/bench/state) or
// "tmpfs" (/dev/shm), to tell the runtime's cost from this machine's disk.
const STATE = option("--state", "disk");
const STATE_DIR = STATE === "tmpfs" ? path.join("/dev/shm", `idempotency-edge-bench-${process.pid}`) : path.join(ROOT, "target", "bench", "state");
// The origin's answer time in the latency phase: a payment API's, not loopback's.
const ORIGIN_MS = Number(option("--origin-ms", 300));
const OUT_FILE = path.resolve(option("--out", path.join(OUT_DIR, "latest.json")));
const SCALE = Number(process.env.BENCH_SCALE ?? 1) * (QUICK ? 0.4 : 1);
const ms = (x) => Math.round(x * SCALE);
const count = (x) => Math.max(1, Math.round(x * SCALE));

// Phase sizes for a 2-core machine: the whole run stays under about 10 minutes.
const PLAN = {
  firstC1Ms: ms(2500),
  firstC16Ms: ms(3000),
  replayMs: ms(2000),
  burstSize: 100,
  burstDelayMs: 300,
  mixedMs: ms(4000),
  mixedDelayMs: 10,
  mixedRetryShare: 0.1,
  memoryKeys: count(10_000),
  memoryKeysLadder: count(1_000),
  memoryIdleMs: ms(15_000),
  profileFirstMs: ms(3000),
  profileReplayMs: ms(2000),
  largeBodyBytes: 512 * 1024,
  duplicateCount: 200,
  duplicateBodyBytes: 1024 * 1024 - 64,
  largeAnswerBytes: 5 * 1024 * 1024,
  warmupMs: ms(1000),
  // Latency phase: at c1 a request takes the origin's time, so it is bounded by a count.
  latencyC1Requests: count(40),
  latencyC16Ms: ms(4000),
  time_limit_minutes: 25,
};

const RUN_ID = `b${Date.now().toString(36)}`;
// The built worker is copied here at the start, so a rebuild of build/ during the run (the
// build script runs whenever src/ changes) neither reloads a running target nor mixes builds.
const SNAPSHOT = path.join(OUT_DIR, "worker-snapshot");
let snapshotBuiltAt = null;
const log = (...parts) => console.error(`[bench ${new Date().toISOString().slice(11, 19)}]`, ...parts);

// --------------------------------------------------------------------------------------
// Machine

function machine() {
  const cpuinfo = fs.readFileSync("/proc/cpuinfo", "utf8");
  const model = cpuinfo.match(/^model name\s*:\s*(.*)$/m)?.[1] ?? "unknown";
  let workerd = "unknown";
  try {
    workerd = execFileSync(path.join(ROOT, "node_modules/.bin/workerd"), ["--version"], { encoding: "utf8" }).trim();
  } catch {}
  const wrangler = JSON.parse(fs.readFileSync(path.join(ROOT, "node_modules/wrangler/package.json"), "utf8")).version;
  return {
    nproc: os.availableParallelism?.() ?? os.cpus().length,
    memoryGiB: round(os.totalmem() / 2 ** 30, 1),
    cpuModel: model,
    kernel: os.release(),
    node: process.version,
    workerd,
    wrangler,
    loadavgAtStart: os.loadavg().map((x) => round(x, 2)),
  };
}

/** Busy CPU ms of the whole machine (all cores), from /proc/stat. */
function machineBusyMs() {
  const line = fs.readFileSync("/proc/stat", "utf8").split("\n")[0].trim().split(/\s+/).slice(1).map(Number);
  const [user, nice, system, , , irq, softirq, steal] = line;
  return ((user + nice + system + irq + softirq + (steal ?? 0)) * 1000) / 100;
}

// --------------------------------------------------------------------------------------
// Bundle

function gz(buf) {
  return zlib.gzipSync(buf, { level: 9 }).length;
}

function snapshotBuild() {
  snapshotBuiltAt = fs.statSync(path.join(ROOT, "build/index_bg.wasm")).mtime.toISOString();
  fs.rmSync(SNAPSHOT, { recursive: true, force: true });
  fs.mkdirSync(path.join(SNAPSHOT, "worker"), { recursive: true });
  for (const file of ["index_bg.wasm", "index.js", "worker/shim.mjs"]) {
    fs.copyFileSync(path.join(ROOT, "build", file), path.join(SNAPSHOT, file));
  }
  // scripts/build.sh strips the function names from build/ and keeps a named copy for the
  // breakdown by crate.
  const named = path.join(ROOT, "target/wasm-names/index_bg.wasm");
  if (fs.existsSync(named)) fs.copyFileSync(named, path.join(SNAPSHOT, "index_bg.named.wasm"));
}

function bundle() {
  const files = ["build/index_bg.wasm", "build/index.js", "build/worker/shim.mjs"];
  const sizes = files.map((file) => {
    const buf = fs.readFileSync(path.join(SNAPSHOT, file.slice("build/".length)));
    return { file, raw: buf.length, gzip: gz(buf) };
  });
  const wasm = fs.readFileSync(path.join(SNAPSHOT, "index_bg.wasm"));
  const namedPath = path.join(SNAPSHOT, "index_bg.named.wasm");
  const named = fs.existsSync(namedPath) ? fs.readFileSync(namedPath) : wasm;
  const secs = sections(wasm).map((s) => ({ section: s.name, bytes: s.bytes }));
  const stripped = withoutNameSection(wasm);
  const whatIf = [{ variant: "name section removed", raw: stripped.length, gzip: gz(stripped) }];
  if (named !== wasm) whatIf.push({ variant: "build.sh's first -Oz pass, names kept (before the stripped pass)", raw: named.length, gzip: gz(named) });
  // Without a named copy (an older build), what one more wasm-opt -Oz pass would give.
  const wasmOpt = path.join(ROOT, "node_modules/.bin/wasm-opt");
  if (fs.existsSync(wasmOpt) && named === wasm) {
    const out = path.join(OUT_DIR, "whatif-Oz.wasm");
    try {
      execFileSync(wasmOpt, [path.join(SNAPSHOT, "index_bg.wasm"), "-o", out, "-Oz", ...WASM_OPT_FEATURES], { stdio: "ignore" });
      const oz = fs.readFileSync(out);
      whatIf.push({ variant: "wasm-opt -Oz, no name section", raw: oz.length, gzip: gz(oz) });
    } catch (error) {
      whatIf.push({ variant: "wasm-opt -Oz", error: String(error.message ?? error).slice(0, 200) });
    }
  }
  const code = codeBreakdown(named);
  const data = dataStrings(wasm);
  return {
    gzipLevel: 9,
    files: sizes,
    wasmSections: secs,
    whatIf,
    codeByCrate: code.crates.slice(0, 20),
    largestFunctions: code.largest.slice(0, 10),
    dataSection: { bytes: data.bytes, printableStringBytes: data.stringBytes },
  };
}

// --------------------------------------------------------------------------------------
// Origin

function startOrigin() {
  const child = fork(path.join(ROOT, "bench/origin.mjs"), [], { stdio: ["ignore", "inherit", "inherit", "ipc"] });
  let nextId = 1;
  const pending = new Map();
  return new Promise((resolve, reject) => {
    child.once("error", reject);
    child.on("message", (message) => {
      if (message.ready) {
        resolve({
          pid: child.pid,
          port: message.port,
          ask(command) {
            const id = nextId++;
            return new Promise((res) => {
              pending.set(id, res);
              child.send({ ...command, id });
            });
          },
          stop() {
            child.disconnect();
            child.kill();
          },
        });
      } else if (pending.has(message.id)) {
        pending.get(message.id)(message);
        pending.delete(message.id);
      }
    });
  });
}

// --------------------------------------------------------------------------------------
// Requests

function payment(key, extraHeaders = {}) {
  const body = Buffer.from(
    JSON.stringify({
      amount: 1999,
      currency: "eur",
      customer: "cus_bench_0001",
      description: "Benchmark payment",
      metadata: { order: key.slice(-24) },
    }),
  );
  return {
    method: "POST",
    path: "/v1/payments",
    headers: {
      "content-type": "application/json",
      authorization: "Bearer sk_test_bench",
      "idempotency-key": key,
      ...extraHeaders,
    },
    body,
  };
}

// --------------------------------------------------------------------------------------
// Targets

async function startTargets(origin, which, suffix = "") {
  const originUrl = `http://127.0.0.1:${origin.port}`;
  const wranglerToml = path.join(ROOT, "wrangler.toml");
  const compatibilityDate =
    fs.readFileSync(wranglerToml, "utf8").match(/^compatibility_date\s*=\s*"([^"]+)"/m)?.[1] ?? "2026-04-26";
  // One directory per instance: wrangler keeps its bundles in `.wrangler/tmp` beside the
  // config, and an instance that stops clears that directory under any other that shares
  // it (esbuild then prints "Could not resolve …/middleware-loader.entry.ts").
  const configDir = (name) => path.join(OUT_DIR, "configs", `${name}${suffix}`);
  const shim = path.join(SNAPSHOT, "worker/shim.mjs");
  const simple = (name, main, extra = "") =>
    `name = "${name}"\nmain = "${main}"\ncompatibility_date = "${compatibilityDate}"\n${extra}\n[vars]\n`;
  const ladderExtra =
    '[[durable_objects.bindings]]\nname = "LADDER"\nclass_name = "LadderObject"\n\n[[migrations]]\ntag = "v1"\nnew_sqlite_classes = ["LadderObject"]\n';
  const rustConfig = (name, vars) => {
    const file = path.join(configDir(name), "wrangler.toml");
    writeConfig(file, { from: wranglerToml, main: shim, vars });
    fs.writeFileSync(file, fs.readFileSync(file, "utf8").replace(/^name\s*=.*$/m, `name = "${name}"`));
    return file;
  };
  const defs = {
    passthrough: () =>
      writeConfig(path.join(configDir("passthrough"), "wrangler.toml"), {
        base: simple("bench-passthrough", "x"),
        main: path.join(ROOT, "bench/targets/passthrough.mjs"),
        vars: { ORIGIN_URL: originUrl },
      }),
    "js-do": () =>
      writeConfig(path.join(configDir("js-do"), "wrangler.toml"), {
        base: simple("bench-js-do", "x", ladderExtra),
        main: path.join(ROOT, "bench/targets/ladder.mjs"),
        vars: { ORIGIN_URL: originUrl, LADDER_MODE: "do" },
      }),
    "js-do-sql": () =>
      writeConfig(path.join(configDir("js-do-sql"), "wrangler.toml"), {
        base: simple("bench-js-do-sql", "x", ladderExtra),
        main: path.join(ROOT, "bench/targets/ladder.mjs"),
        vars: { ORIGIN_URL: originUrl, LADDER_MODE: "do-sql" },
      }),
    "js-do-claim": () =>
      writeConfig(path.join(configDir("js-do-claim"), "wrangler.toml"), {
        base: simple("bench-js-do-claim", "x", ladderExtra),
        main: path.join(ROOT, "bench/targets/ladder.mjs"),
        vars: { ORIGIN_URL: originUrl, LADDER_MODE: "do-claim" },
      }),
    // js-do-claim with the worker's guarantees, in plain JS (bench/targets/ladder.mjs).
    "js-do-claim-kept": () =>
      writeConfig(path.join(configDir("js-do-claim-kept"), "wrangler.toml"), {
        base: simple("bench-js-do-claim-kept", "x", ladderExtra),
        main: path.join(ROOT, "bench/targets/ladder.mjs"),
        vars: { ORIGIN_URL: originUrl, LADDER_MODE: "do-claim-kept" },
      }),
    // Route mode: ORIGIN_URL empty, the request's own URL (Host header) names the origin.
    // Same code path minus the TCP probe.
    "worker-route": () => rustConfig("bench-worker-route", { ORIGIN_URL: "" }),
    worker: () => rustConfig("bench-worker", { ORIGIN_URL: originUrl }),
  };
  const targets = {};
  for (const name of which) {
    if (name === "direct") {
      targets.direct = { name, host: "127.0.0.1", port: origin.port, pid: null };
      continue;
    }
    const started = Date.now();
    const t = await startWorker({
      name,
      config: defs[name](),
      persistDir: path.join(STATE_DIR, `${name}${suffix}`),
      registryDir: path.join(OUT_DIR, "registry"),
    });
    if (name === "worker-route") t.hostHeader = `127.0.0.1:${origin.port}`;
    targets[name] = t;
    log(`started ${name}${suffix}: workerd pid ${t.pid} on ${t.host}:${t.port} (${Date.now() - started} ms)`);
  }
  for (const t of Object.values(targets)) {
    t.agents = new Map();
    t.agent = (connections) => {
      if (!t.agents.has(connections)) t.agents.set(connections, pool(connections));
      return t.agents.get(connections);
    };
  }
  return targets;
}

/** One first attempt and one retry per target: the harness talks to what it thinks. */
let checks = 0;
async function check(targets, origin) {
  checks += 1;
  for (const t of Object.values(targets)) {
    const key = `${RUN_ID}-check${checks}-${t.name}`;
    const first = await send(t.agent(1), t, payment(key));
    const second = await send(t.agent(1), t, payment(key));
    const counted = await origin.ask({ cmd: "count", key });
    const dedupes = t.name !== "direct" && t.name !== "passthrough" && t.name !== "js-do";
    const ok =
      first.status === 201 &&
      second.status === 201 &&
      (!dedupes || (second.replayed && counted.executions === 1));
    if (!ok) {
      throw new Error(
        `${t.name} does not answer as expected: first ${first.status}, retry ${second.status} replayed=${second.replayed}, origin executions ${counted.executions}`,
      );
    }
    // The worker and its guarantees in plain JS refuse the key with another payload, and
    // keep one caller's key apart from another's: the reference must keep what it prices.
    if (t.name === "worker" || t.name === "js-do-claim-kept") {
      const otherPayload = { ...payment(key), body: Buffer.from('{"amount":1}') };
      const reused = await send(t.agent(1), t, otherPayload);
      const otherCaller = await send(t.agent(1), t, payment(key, { authorization: "Bearer sk_test_other" }));
      const executions = (await origin.ask({ cmd: "count", key })).executions;
      if (reused.status !== 422 || otherCaller.status !== 201 || otherCaller.replayed || executions !== 2) {
        throw new Error(
          `${t.name} does not keep the guarantees: another payload ${reused.status}, another caller ${otherCaller.status} replayed=${otherCaller.replayed}, origin executions ${executions}`,
        );
      }
    }
  }
}

// --------------------------------------------------------------------------------------
// Measurement around a run: workerd CPU including the work left behind, origin and
// load-generator CPU.

async function measured(t, origin, requestsOf, fn) {
  const pids = t.pid ? [t.pid] : [];
  const cpu = () => pids.reduce((sum, pid) => sum + cpuMs(pid), 0);
  const w0 = cpu();
  const o0 = cpuMs(origin.pid);
  const s0 = process.cpuUsage();
  const result = await fn();
  const settleMs = pids.length ? await settle(pids) : 0;
  const w1 = cpu();
  const o1 = cpuMs(origin.pid);
  const s1 = process.cpuUsage(s0);
  const n = requestsOf(result);
  return {
    ...result,
    workerdCpuMs: pids.length ? w1 - w0 : null,
    cpuPerRequestMs: pids.length && n ? (w1 - w0) / n : null,
    originCpuPerRequestMs: n ? (o1 - o0) / n : null,
    loadgenCpuPerRequestMs: n ? (s1.user + s1.system) / 1000 / n : null,
    settleMs,
  };
}

const rotate = (list, by) => list.map((_, i) => list[(i + by) % list.length]);

function summarize(runs, fields) {
  const out = { runs: runs.length };
  for (const f of fields) out[f] = round(median(runs.map((r) => r[f])), 3);
  return out;
}

// --------------------------------------------------------------------------------------
// Phases

async function firstAttempts(targets, origin, order, round, connections, durationMs) {
  const results = {};
  for (const name of order) {
    const t = targets[name];
    const prefix = `${RUN_ID}-first-c${connections}-${name}-r${round}-`;
    results[name] = await measured(t, origin, (r) => r.requests, () =>
      runLoad({
        agent: t.agent(connections),
        target: t,
        connections,
        durationMs,
        makeRequest: (i) => payment(`${prefix}${i}`),
      }),
    );
    const r = results[name];
    log(
      `first c${connections} ${name.padEnd(12)} ${r.rps.toFixed(0).padStart(5)} req/s  p50 ${r.p50.toFixed(2)} ms  p99 ${r.p99.toFixed(2)} ms` +
        (r.cpuPerRequestMs != null ? `  cpu ${r.cpuPerRequestMs.toFixed(2)} ms/req` : "") +
        (r.errors ? `  errors ${r.errors} (${r.firstError})` : "") +
        (r.statuses[201] !== r.requests ? `  statuses ${JSON.stringify(r.statuses)}` : ""),
    );
  }
  return results;
}

// The latency a user feels in front of a slow origin: first attempts (new keys) whose
// origin answers in ORIGIN_MS, through each target and straight to the origin ("direct"), in
// one round. The added latency is computed per round from these (see latencySummary).
async function latencyRound(targets, origin, order, round, connections) {
  const results = {};
  for (const name of order) {
    const t = targets[name];
    const prefix = `${RUN_ID}-lat-c${connections}-${name}-r${round}-`;
    results[name] = await measured(t, origin, (r) => r.requests, () =>
      runLoad({
        agent: t.agent(connections),
        target: t,
        connections,
        ...(connections === 1 ? { maxRequests: PLAN.latencyC1Requests } : { durationMs: PLAN.latencyC16Ms }),
        makeRequest: (i) => payment(`${prefix}${i}`, { "x-bench-delay-ms": String(ORIGIN_MS) }),
      }),
    );
    const r = results[name];
    log(
      `latency c${connections} ${name.padEnd(16)} p50 ${r.p50.toFixed(2)} ms  p99 ${r.p99.toFixed(2)} ms  (${r.requests} requests, origin ${ORIGIN_MS} ms)` +
        (r.errors ? `  errors ${r.errors} (${r.firstError})` : "") +
        (r.statuses[201] !== r.requests ? `  statuses ${JSON.stringify(r.statuses)}` : ""),
    );
  }
  return results;
}

async function replays(targets, origin, order, round, connections, durationMs) {
  const results = {};
  for (const name of order) {
    const t = targets[name];
    const key = `${RUN_ID}-replay-c${connections}-${name}-r${round}`;
    const first = await send(t.agent(connections), t, payment(key));
    if (first.status !== 201) throw new Error(`${name}: first attempt of the replay key answered ${first.status}`);
    const request = payment(key);
    results[name] = await measured(t, origin, (r) => r.requests, () =>
      runLoad({ agent: t.agent(connections), target: t, connections, durationMs, makeRequest: () => request }),
    );
    const counted = await origin.ask({ cmd: "count", key });
    const r = results[name];
    r.executions = counted.executions;
    log(
      `replay c${connections} ${name.padEnd(11)} ${r.rps.toFixed(0).padStart(5)} req/s  p50 ${r.p50.toFixed(2)} ms  p99 ${r.p99.toFixed(2)} ms` +
        (r.cpuPerRequestMs != null ? `  cpu ${r.cpuPerRequestMs.toFixed(2)} ms/req` : "") +
        `  replayed ${r.replayed}/${r.requests}  executions ${r.executions}`,
    );
  }
  return results;
}

async function burst(t, origin, key, { size, delayMs, extraHeaders = {} }) {
  const agent = t.agent(size);
  const request = payment(key, { "x-bench-delay-ms": String(delayMs), ...extraHeaders });
  const started = performance.now();
  const startedWall = performance.timeOrigin + started;
  const answers = await Promise.all(
    Array.from({ length: size }, () => send(agent, t, request).catch((error) => ({ error: String(error.message) }))),
  );
  const ends = answers.filter((a) => !a.error).map((a) => a.end - started);
  const counted = await origin.ask({ cmd: "count", key });
  const statuses = {};
  for (const a of answers) statuses[a.status ?? "error"] = (statuses[a.status ?? "error"] ?? 0) + 1;
  return {
    executions: counted.executions,
    statuses,
    replayed: answers.filter((a) => a.replayed).length,
    errors: answers.filter((a) => a.error).length,
    firstResponseMs: Math.min(...ends),
    lastResponseMs: Math.max(...ends),
    lastMinusOriginMs: Math.max(...ends) - delayMs,
    spreadMs: Math.max(...ends) - Math.min(...ends),
    responseQuantiles: quantiles([...ends].sort((a, b) => a - b)),
    // When the (first) execution reached the origin, after the burst started.
    originReachedMs: counted.arrivedAt != null ? counted.arrivedAt - startedWall : null,
  };
}

async function bursts(targets, origin, names, runs) {
  const perTarget = Object.fromEntries(names.map((n) => [n, []]));
  for (const name of names) {
    // Opens the 100 connections once, so the measured bursts reuse them.
    await burst(targets[name], origin, `${RUN_ID}-burst-warm-${name}`, { size: PLAN.burstSize, delayMs: PLAN.burstDelayMs });
  }
  for (let r = 0; r < runs; r++) {
    for (const name of rotate(names, r)) {
      const t = targets[name];
      const result = await measured(t, origin, () => PLAN.burstSize, () =>
        burst(t, origin, `${RUN_ID}-burst-${name}-r${r}`, { size: PLAN.burstSize, delayMs: PLAN.burstDelayMs }),
      );
      perTarget[name].push(result);
      log(
        `burst ${name.padEnd(12)} executions ${result.executions}  origin reached at ${result.originReachedMs?.toFixed(1)} ms  last ${result.lastResponseMs.toFixed(1)} ms (origin ${PLAN.burstDelayMs} ms + ${result.lastMinusOriginMs.toFixed(1)})  spread ${result.spreadMs.toFixed(1)} ms  replayed ${result.replayed}  ${JSON.stringify(result.statuses)}`,
      );
    }
  }
  return perTarget;
}

async function mixed(targets, origin, names, runs) {
  const perTarget = Object.fromEntries(names.map((n) => [n, []]));
  for (let r = 0; r < runs; r++) {
    for (const name of rotate(names, r)) {
      const t = targets[name];
      const prefix = `${RUN_ID}-mixed-${name}-r${r}-`;
      const recent = []; // the last 32 keys issued, some still in flight
      let newKeys = 0;
      let retries = 0;
      let seed = 12345 + r;
      const random = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
      let conflicts = 0;
      const result = await measured(t, origin, (x) => x.requests, () =>
        runLoad({
          agent: t.agent(16),
          target: t,
          connections: 16,
          durationMs: PLAN.mixedMs,
          makeRequest: () => {
            let key;
            if (recent.length && random() < PLAN.mixedRetryShare) {
              key = recent[Math.floor(random() * recent.length)];
              retries += 1;
            } else {
              key = `${prefix}${newKeys++}`;
              recent.push(key);
              if (recent.length > 32) recent.shift();
            }
            return payment(key, { "x-bench-delay-ms": String(PLAN.mixedDelayMs) });
          },
          onResult: (_, res) => {
            if (res.status === 409) conflicts += 1;
          },
        }),
      );
      const counted = await origin.ask({ cmd: "count", prefix });
      Object.assign(result, {
        newKeys,
        retries,
        conflicts409: conflicts,
        executions: counted.executions,
        keysExecuted: counted.distinctKeys,
        keysExecutedMoreThanOnce: counted.keysOverOne,
        executionsEqualDistinctKeys: counted.executions === newKeys && counted.keysOverOne === 0,
      });
      perTarget[name].push(result);
      log(
        `mixed ${name.padEnd(12)} ${result.rps.toFixed(0).padStart(5)} req/s  p99 ${result.p99.toFixed(1)} ms  keys ${newKeys} retries ${retries} replayed ${result.replayed}  executions ${result.executions} (keys >1: ${result.keysExecutedMoreThanOnce})  ${JSON.stringify(result.statuses)}`,
      );
    }
  }
  return perTarget;
}

async function memory(origin, names) {
  const targets = await startTargets(origin, names, "-mem");
  try {
    return await memoryOn(targets, origin, names);
  } finally {
    for (const t of Object.values(targets)) if (t.dispose) await t.dispose();
  }
}

async function memoryOn(targets, origin, names) {
  await check(targets, origin);
  const results = {};
  for (const name of names) {
    const t = targets[name];
    // Warm up (JIT, connections), then let it settle before the first reading.
    await runLoad({ agent: t.agent(16), target: t, connections: 16, maxRequests: 200, makeRequest: (i) => payment(`${RUN_ID}-memwarm-${name}-${i}`) });
    await settle([t.pid]);
    await new Promise((resolve) => setTimeout(resolve, 1000));
    const rssBeforeKiB = rssKiB(t.pid);
    const prefix = `${RUN_ID}-mem-${name}-`;
    const keys = name.startsWith("js-do") ? PLAN.memoryKeysLadder : PLAN.memoryKeys;
    const every = Math.max(1, Math.round(keys / 10));
    let answered = 0;
    const rssCurve = [{ keys: 0, rssKiB: rssBeforeKiB }];
    const run = await measured(t, origin, (r) => r.requests, () =>
      runLoad({
        agent: t.agent(16),
        target: t,
        connections: 16,
        maxRequests: keys,
        makeRequest: (i) => payment(`${prefix}${i}`),
        onResult: () => {
          answered += 1;
          if (answered % every === 0) rssCurve.push({ keys: answered, rssKiB: rssKiB(t.pid) });
        },
      }),
    );
    const rssAfterKiB = rssKiB(t.pid);
    const idleCpu0 = cpuMs(t.pid);
    const idleSamples = [];
    const idleStart = Date.now();
    while (Date.now() - idleStart < PLAN.memoryIdleMs) {
      await new Promise((resolve) => setTimeout(resolve, Math.min(5000, PLAN.memoryIdleMs)));
      idleSamples.push({ afterMs: Date.now() - idleStart, rssKiB: rssKiB(t.pid), cpuMs: cpuMs(t.pid) - idleCpu0 });
    }
    const counted = await origin.ask({ cmd: "count", prefix });
    results[name] = {
      keys: run.requests,
      errors: run.errors,
      statuses: run.statuses,
      rps: run.rps,
      p99: run.p99,
      cpuPerRequestMs: run.cpuPerRequestMs,
      executions: counted.executions,
      rssBeforeKiB,
      rssAfterKiB,
      rssAfterIdleKiB: idleSamples.at(-1)?.rssKiB ?? rssAfterKiB,
      growthPerKeyBytes: ((rssAfterKiB - rssBeforeKiB) * 1024) / Math.max(1, run.requests),
      growthAfterIdlePerKeyBytes: (((idleSamples.at(-1)?.rssKiB ?? rssAfterKiB) - rssBeforeKiB) * 1024) / Math.max(1, run.requests),
      rssCurve,
      deferredCpuAfterRunMs: idleSamples.at(-1)?.cpuMs ?? 0,
      deferredCpuPerKeyMs: (idleSamples.at(-1)?.cpuMs ?? 0) / Math.max(1, run.requests),
      idleSamples,
    };
    const m = results[name];
    log(
      `memory ${name.padEnd(12)} ${m.keys} keys at ${m.rps.toFixed(0)} req/s: RSS ${(m.rssBeforeKiB / 1024).toFixed(1)} -> ${(m.rssAfterKiB / 1024).toFixed(1)} MiB, after ${(PLAN.memoryIdleMs / 1000).toFixed(0)} s idle ${(m.rssAfterIdleKiB / 1024).toFixed(1)} MiB; cpu ${m.cpuPerRequestMs?.toFixed(2)} ms/key + ${m.deferredCpuPerKeyMs.toFixed(3)} ms/key later`,
    );
  }
  return results;
}

/**
 * Waiters share one stored body: 100 requests of one key with a large answer, twice, on a
 * fresh worker instance (so no eviction of earlier objects moves RSS meanwhile). Growth on
 * the second burst would be growth that survives the requests; growth on the first only is
 * the high-water mark of Wasm memory and the JS heap.
 */
async function largeBodyBursts(origin) {
  const targets = await startTargets(origin, ["worker"], "-largebody");
  const t = targets.worker;
  try {
    await check(targets, origin);
    await burst(t, origin, `${RUN_ID}-largebody-warm`, { size: PLAN.burstSize, delayMs: 50 });
    await settle([t.pid]);
    const bursts = [];
    const rssStartKiB = rssKiB(t.pid);
    for (let i = 0; i < 3; i++) {
      const before = rssKiB(t.pid);
      const result = await burst(t, origin, `${RUN_ID}-largebody-${i}`, {
        size: PLAN.burstSize,
        delayMs: PLAN.burstDelayMs,
        extraHeaders: { "x-bench-response-bytes": String(PLAN.largeBodyBytes) },
      });
      await settle([t.pid]);
      await new Promise((resolve) => setTimeout(resolve, 3000));
      const after = rssKiB(t.pid);
      bursts.push({ executions: result.executions, statuses: result.statuses, rssBeforeKiB: before, rssAfter3sKiB: after, growthMiB: (after - before) / 1024, growthInBodies: ((after - before) * 1024) / PLAN.largeBodyBytes });
      log(`memory large-body burst ${i + 1}: ${PLAN.burstSize} requests, one ${PLAN.largeBodyBytes / 1024} KiB answer: RSS ${(before / 1024).toFixed(1)} -> ${(after / 1024).toFixed(1)} MiB 3 s later (${bursts[i].growthInBodies.toFixed(1)} bodies), executions ${result.executions}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 10_000));
    const rssEndKiB = rssKiB(t.pid);
    log(`memory large-body bursts: RSS ${(rssStartKiB / 1024).toFixed(1)} MiB before, ${(rssEndKiB / 1024).toFixed(1)} MiB 10 s after the last`);
    return { bodyBytes: PLAN.largeBodyBytes, requests: PLAN.burstSize, rssStartKiB, rssEndKiB, bursts };
  } finally {
    await t.dispose();
  }
}

/**
 * Memory under duplicates: 200 concurrent requests of one key, each with a 1 MiB
 * body, while the origin holds the first for 1 s. RSS of the worker's workerd before, at the
 * peak (sampled every 50 ms) and 3 s after, on a fresh instance. (The burst on an answer of
 * 5 MiB that was measured here is `largeAnswerMemory`: it is stored now.)
 */
async function duplicateMemory(origin) {
  const targets = await startTargets(origin, ["worker"], "-dupmem");
  const t = targets.worker;
  try {
    await check(targets, origin);
    const sampleWhile = async (work) => {
      let peak = rssKiB(t.pid);
      const timer = setInterval(() => {
        peak = Math.max(peak, rssKiB(t.pid));
      }, 50);
      try {
        const result = await work();
        return { result, peakKiB: peak };
      } finally {
        clearInterval(timer);
      }
    };
    const out = {};
    {
      const key = `${RUN_ID}-dupbodies`;
      const blob = "m".repeat(PLAN.duplicateBodyBytes - 32);
      const body = Buffer.from(JSON.stringify({ amount: 1, blob }));
      const request = { ...payment(key, { "x-bench-delay-ms": "1000" }), body };
      const agent = t.agent(PLAN.duplicateCount);
      const before = rssKiB(t.pid);
      const { result: answers, peakKiB } = await sampleWhile(() =>
        Promise.all(
          Array.from({ length: PLAN.duplicateCount }, () =>
            send(agent, t, request).catch((error) => ({ error: String(error.message) })),
          ),
        ),
      );
      await settle([t.pid]);
      await new Promise((resolve) => setTimeout(resolve, 3000));
      const after = rssKiB(t.pid);
      const counted = await origin.ask({ cmd: "count", key });
      const statuses = {};
      for (const a of answers) statuses[a.status ?? "error"] = (statuses[a.status ?? "error"] ?? 0) + 1;
      out.duplicateBodies = { requests: PLAN.duplicateCount, bodyBytes: body.length, executions: counted.executions, statuses, rssBeforeKiB: before, rssPeakKiB: peakKiB, rssAfter3sKiB: after };
      log(`memory duplicates: ${PLAN.duplicateCount} x ${(body.length / 1048576).toFixed(2)} MiB bodies of one key: RSS ${(before / 1024).toFixed(1)} -> peak ${(peakKiB / 1024).toFixed(1)} -> ${(after / 1024).toFixed(1)} MiB 3 s later; executions ${counted.executions}; statuses ${JSON.stringify(statuses)}`);
    }
    return out;
  } finally {
    await t.dispose();
  }
}

/**
 * Large answers, on a fresh instance: one 5 MiB answer, over one SQLite row and so
 * stored in 1 MiB chunk rows. A burst of 100 while the origin holds the first 300 ms (99 wait
 * on it and share its one prepared copy), then a burst of 100 replays of the stored answer
 * (each streamed from the chunk rows). RSS of the worker's workerd before, at the peak
 * (sampled every 50 ms) and 3 s after each burst.
 */
async function largeAnswerMemory(origin) {
  const targets = await startTargets(origin, ["worker"], "-largeanswer");
  const t = targets.worker;
  try {
    await check(targets, origin);
    const sampleWhile = async (work) => {
      let peak = rssKiB(t.pid);
      const timer = setInterval(() => {
        peak = Math.max(peak, rssKiB(t.pid));
      }, 50);
      try {
        const result = await work();
        return { result, peakKiB: peak };
      } finally {
        clearInterval(timer);
      }
    };
    {
      // One 5 MiB answer (over one SQLite row, so stored in 1 MiB chunk rows):
      // a burst of 100 while the origin holds the first 300 ms (99 wait on it and share the
      // one prepared copy), then a burst of 100 replays of the stored answer (each streamed
      // from the chunk rows).
      const key = `${RUN_ID}-largeanswer`;
      const phase = async (name) => {
        const before = rssKiB(t.pid);
        const { result, peakKiB } = await sampleWhile(() =>
          burst(t, origin, key, {
            size: PLAN.burstSize,
            delayMs: PLAN.burstDelayMs,
            extraHeaders: { "x-bench-response-bytes": String(PLAN.largeAnswerBytes) },
          }),
        );
        await settle([t.pid]);
        await new Promise((resolve) => setTimeout(resolve, 3000));
        const after = rssKiB(t.pid);
        log(`memory large answer, ${name}: ${PLAN.burstSize} requests, one ${PLAN.largeAnswerBytes / 1048576} MiB answer: RSS ${(before / 1024).toFixed(1)} -> peak ${(peakKiB / 1024).toFixed(1)} -> ${(after / 1024).toFixed(1)} MiB 3 s later; executions ${result.executions}; replayed ${result.replayed}; statuses ${JSON.stringify(result.statuses)}`);
        return { requests: PLAN.burstSize, answerBytes: PLAN.largeAnswerBytes, executions: result.executions, replayed: result.replayed, statuses: result.statuses, rssBeforeKiB: before, rssPeakKiB: peakKiB, rssAfter3sKiB: after };
      };
      return { waiters: await phase("waiters"), replays: await phase("replays from chunks") };
    }
  } finally {
    await t.dispose();
  }
}

/**
 * V8 CPU profiles of the worker's isolate (first attempts and replays at c16), to say where
 * the time goes. The profiler slows the worker down, so only the shares count.
 */
async function profiles(origin) {
  const wranglerToml = fs.readFileSync(path.join(ROOT, "wrangler.toml"), "utf8");
  const compatibilityDate = wranglerToml.match(/^compatibility_date\s*=\s*"([^"]+)"/m)?.[1] ?? "2026-04-26";
  const vars = { ...varsOf(wranglerToml), ORIGIN_URL: `http://127.0.0.1:${origin.port}` };
  const w = await startProfiledWorker({
    root: SNAPSHOT,
    name: "bench-profile",
    vars,
    compatibilityDate,
    persistDir: path.join(STATE_DIR, "profile"),
  });
  try {
    const agent = pool(16);
    await runLoad({ agent, target: w, connections: 16, durationMs: PLAN.warmupMs, makeRequest: (i) => payment(`${RUN_ID}-profwarm-${i}`) });
    const out = {};
    const first = await w.profile(() =>
      runLoad({ agent, target: w, connections: 16, durationMs: PLAN.profileFirstMs, makeRequest: (i) => payment(`${RUN_ID}-prof-${i}`) }),
    );
    const replayKey = `${RUN_ID}-profreplay`;
    await send(agent, w, payment(replayKey));
    const replayRequest = payment(replayKey);
    const replay = await w.profile(() =>
      runLoad({ agent, target: w, connections: 16, durationMs: PLAN.profileReplayMs, makeRequest: () => replayRequest }),
    );
    for (const [name, { result, profile }] of Object.entries({ first, replay })) {
      const file = path.join(OUT_DIR, `profile-${name}.cpuprofile`);
      fs.writeFileSync(file, JSON.stringify(profile));
      const summary = summarizeProfile(profile);
      out[name] = {
        requests: result.requests,
        rpsWhileProfiling: round(result.rps, 1),
        busyMsPerRequest: round(summary.busyMs / Math.max(1, result.requests), 3),
        file: path.relative(ROOT, file),
        ...summary,
      };
      log(`profile ${name}: ${result.requests} requests, isolate busy ${out[name].busyMsPerRequest} ms/request while profiled; top: ${summary.runtimeApiByRustCaller.slice(0, 2).map((x) => `${x.share}% ${x.name}`).join("; ")}`);
    }
    return out;
  } finally {
    await w.dispose();
  }
}

function sourceState() {
  const git = (...a) => {
    try {
      return execFileSync("git", a, { cwd: ROOT, encoding: "utf8" }).trim();
    } catch {
      return null;
    }
  };
  const wasm = fs.readFileSync(path.join(SNAPSHOT, "index_bg.wasm"));
  return {
    commit: git("rev-parse", "HEAD"),
    uncommittedSourceChanges: (git("status", "--porcelain", "--", "src", "Cargo.toml", "Cargo.lock", "wrangler.toml") ?? "")
      .split("\n")
      .filter(Boolean),
    wasmSha256: crypto.createHash("sha256").update(wasm).digest("hex").slice(0, 16),
    wasmBuiltAt: snapshotBuiltAt,
  };
}

// --------------------------------------------------------------------------------------
// Report

function pad(s, n) {
  s = String(s);
  return s.length >= n ? s : s + " ".repeat(n - s.length);
}
function lpad(s, n) {
  s = String(s);
  return s.length >= n ? s : " ".repeat(n - s.length) + s;
}
function table(header, rows) {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => String(r[i] ?? "").length)));
  const line = (cells) => "| " + cells.map((c, i) => (i === 0 ? pad(c ?? "", widths[i]) : lpad(c ?? "", widths[i]))).join(" | ") + " |";
  const sep = "|" + widths.map((w, i) => (i === 0 ? "-".repeat(w + 2) : "-".repeat(w + 1) + ":")).join("|") + "|";
  return [line(header), sep, ...rows.map(line)].join("\n");
}
const f = fixed;

function report(result) {
  const s = result.summary;
  const out = [];
  out.push(`\nidempotency-edge benchmark ${result.runId}  (${result.machine.nproc} cores, ${result.machine.cpuModel}, node ${result.machine.node}, workerd ${result.machine.workerd})`);
  out.push(`medians of ${RUNS} run(s), target order rotated per run; CPU = workerd utime+stime per request, including work until it is idle`);
  const oc = result.machine.otherProcessesCpu;
  if (oc) out.push(`machine: ${result.machine.busyCoresAverage} of ${result.machine.nproc} cores busy on average; other processes used ${oc.seconds} CPU s during the run (${oc.top.map((x) => `${x.comm} ${x.seconds}`).join(", ")})\n`);
  out.push("First attempts (new key each request, origin delay 0)");
  out.push(
    table(
      ["target", "c1 req/s", "c1 p50 ms", "c1 p99 ms", "c16 req/s", "c16 p50 ms", "c16 p99 ms", "CPU ms/req c16"],
      Object.entries(s.first).map(([name, v]) => [
        name, f(v.c1.rps, 0), f(v.c1.p50), f(v.c1.p99), f(v.c16.rps, 0), f(v.c16.p50), f(v.c16.p99), f(v.c16.cpuPerRequestMs),
      ]),
    ),
  );
  if (s.latency) {
    out.push(`\nLatency added over calling the origin directly (first attempts, origin answering in ${s.latencyOriginMs} ms; median over runs of (target − direct) per quantile)`);
    out.push(
      table(
        ["target", "c1 p50 ms", "c1 p99 ms", "c1 added p50", "c1 added p99", "c16 p50 ms", "c16 p99 ms", "c16 added p50", "c16 added p99", "object wall − origin ≤ (c1 p50)"],
        Object.entries(s.latency).map(([name, v]) =>
          name === "direct"
            ? [name, f(v.c1.p50), f(v.c1.p99), "–", "–", f(v.c16.p50), f(v.c16.p99), "–", "–", "–"]
            : [name, f(v.c1.p50), f(v.c1.p99), f(v.c1.addedP50), f(v.c1.addedP99), f(v.c16.p50), f(v.c16.p99), f(v.c16.addedP50), f(v.c16.addedP99), name === "passthrough" ? "n/a" : f(v.c1.objectWallOverOriginP50Max)],
        ),
      ),
    );
  }
  out.push("\nReplays (one completed key, sent again and again)");
  out.push(
    table(
      ["target", "c1 req/s", "c1 p50 ms", "c1 p99 ms", "c16 req/s", "c16 p50 ms", "c16 p99 ms", "CPU ms/req c16"],
      Object.entries(s.replay).map(([name, v]) => [
        name, f(v.c1.rps, 0), f(v.c1.p50), f(v.c1.p99), f(v.c16.rps, 0), f(v.c16.p50), f(v.c16.p99), f(v.c16.cpuPerRequestMs),
      ]),
    ),
  );
  out.push(`\nCoalesced burst (${PLAN.burstSize} concurrent requests, one key, origin delay ${PLAN.burstDelayMs} ms)`);
  out.push(
    table(
      ["target", "executions", "last response − origin ms", "origin reached after ms", "first→last spread ms", "replayed", "CPU ms/req"],
      Object.entries(s.burst).map(([name, v]) => [name, f(v.executions, 0), f(v.lastMinusOriginMs, 1), f(v.originReachedMs, 1), f(v.spreadMs, 1), f(v.replayed, 0), f(v.cpuPerRequestMs)]),
    ),
  );
  out.push(`\nMixed traffic (c16, ${Math.round(PLAN.mixedRetryShare * 100)}% retries of the last 32 keys, origin delay ${PLAN.mixedDelayMs} ms)`);
  out.push(
    table(
      ["target", "req/s", "p50 ms", "p99 ms", "new keys", "retries", "executions", "executions = keys", "CPU ms/req"],
      Object.entries(s.mixed).map(([name, v]) => [
        name, f(v.rps, 0), f(v.p50), f(v.p99), f(v.newKeys, 0), f(v.retries, 0), f(v.executions, 0),
        name === "worker" ? String(v.allRunsExecutionsEqualKeys) : "n/a", f(v.cpuPerRequestMs),
      ]),
    ),
  );
  if (s.memory) {
    out.push(`\nMemory (workerd RSS, ${PLAN.memoryKeys} new keys at c16 (js-do-sql: ${PLAN.memoryKeysLadder}), fresh instances)`);
    out.push(
      table(
        ["target", "keys", "before MiB", "after MiB", `after ${PLAN.memoryIdleMs / 1000} s idle MiB`, "KiB/key kept", "CPU ms/key", "later CPU ms/key"],
        Object.entries(s.memory)
          .filter(([name]) => !["largeBodyBurst", "duplicates", "largeAnswer"].includes(name))
          .map(([name, v]) => [
            name, f(v.keys, 0), f(v.rssBeforeKiB / 1024, 1), f(v.rssAfterKiB / 1024, 1), f(v.rssAfterIdleKiB / 1024, 1),
            f(v.growthAfterIdlePerKeyBytes / 1024, 2), f(v.cpuPerRequestMs), f(v.deferredCpuPerKeyMs, 3),
          ]),
      ),
    );
    const la = s.memory.largeAnswer;
    if (la) {
      out.push(
        `large answer (${la.waiters.requests} requests for one ${la.waiters.answerBytes / 1048576} MiB answer, stored in chunks), worker RSS before → peak → 3 s later: ` +
          ["waiters", "replays"].map((k) => `${k} ${f(la[k].rssBeforeKiB / 1024, 1)} → ${f(la[k].rssPeakKiB / 1024, 1)} → ${f(la[k].rssAfter3sKiB / 1024, 1)} MiB (${la[k].executions} execution, ${la[k].replayed} replayed)`).join("; "),
      );
    }
    const lb = s.memory.largeBodyBurst;
    if (lb) {
      out.push(
        `large-body bursts (${lb.requests} requests for one ${lb.bodyBytes / 1024} KiB answer), worker RSS growth 3 s later: ` +
          lb.bursts.map((b, i) => `#${i + 1} +${f(b.growthMiB, 1)} MiB (${f(b.growthInBodies, 1)} bodies, ${b.executions} execution)`).join(", ") +
          `; ${f(lb.rssStartKiB / 1024, 1)} → ${f(lb.rssEndKiB / 1024, 1)} MiB 10 s after the last (fresh instance)`,
      );
    }
  }
  if (s.profiles) {
    for (const [name, p] of Object.entries(s.profiles)) {
      out.push(`\nWhere the worker isolate's time goes, ${name === "first" ? "first attempts" : "replays"} c16 (V8 profile, self time share; ${p.requests} requests)`);
      out.push(table(["category", "share %"], p.categories.slice(0, 8).map((c) => [c.name, f(c.share, 1)])));
      out.push(table(["runtime API call ← glue ← Rust caller", "share %"], p.runtimeApiByRustCaller.slice(0, 6).map((c) => [c.name, f(c.share, 1)])));
    }
  }
  out.push("\nBundle (gzip -9)");
  out.push(table(["file", "raw bytes", "gzip bytes"], result.bundle.files.map((x) => [x.file, x.raw, x.gzip])));
  for (const w of result.bundle.whatIf) out.push(`  what if: ${w.variant}: ${w.raw ?? "–"} raw, ${w.gzip ?? "–"} gzip ${w.error ?? ""}`);
  out.push(`\nTargets (the worker against the direct call and js-do-claim-kept, same run; ratios are medians of per-run ratios; cold start and cost: \`bench cold\`, \`bench cost\`)`);
  out.push(
    table(
      ["target", "measured", "goal", "met"],
      s.targets.map((x) => [x.name, x.measured, x.goal, x.met ? "yes" : "NO"]),
    ),
  );
  if (s.guarantees) {
    out.push("\nThe guarantees' price (js-do-claim-kept: js-do-claim with the worker's guarantees, in plain JS; median of per-run ratios)");
    out.push(table(["figure", "worker / js-do-claim-kept", "js-do-claim-kept / js-do-claim"], s.guarantees.map((x) => [x.name, x.workerToKept, x.keptToClaim])));
  }
  return out.join("\n");
}

// --------------------------------------------------------------------------------------

async function main() {
  const watchdog = setTimeout(() => {
    log(`over the ${PLAN.time_limit_minutes} minute limit; stopping`);
    process.exit(2);
  }, PLAN.time_limit_minutes * 60_000);
  watchdog.unref();
  fs.mkdirSync(OUT_DIR, { recursive: true });
  fs.rmSync(STATE_DIR, { recursive: true, force: true });
  const startedAt = Date.now();
  snapshotBuild();
  const result = { runId: RUN_ID, startedAt: new Date(startedAt).toISOString(), plan: { ...PLAN, runs: RUNS, scale: SCALE, state: STATE, stateDir: STATE_DIR }, machine: machine(), source: sourceState() };
  const busy0 = machineBusyMs();
  const others0 = othersCpuSnapshot();
  const self0 = process.cpuUsage();

  log("bundle sizes");
  result.bundle = bundle();

  const origin = await startOrigin();
  log(`origin on 127.0.0.1:${origin.port} (pid ${origin.pid})`);
  const cleanup = [];
  const stopAll = async () => {
    for (const fn of cleanup.splice(0)) {
      try {
        await fn();
      } catch {}
    }
  };
  process.on("SIGINT", async () => {
    await stopAll();
    process.exit(130);
  });
  cleanup.push(() => origin.stop());

  if (MEMORY_ONLY) {
    try {
      result.raw = { memory: { duplicates: await duplicateMemory(origin), largeAnswer: await largeAnswerMemory(origin) } };
      fs.writeFileSync(OUT_FILE, JSON.stringify(result, null, 2));
      log(`wrote ${OUT_FILE}`);
    } finally {
      await stopAll();
    }
    return;
  }

  const firstNames = ["direct", "passthrough", ...(LADDER ? ["js-do", "js-do-sql", "worker-route"] : []), "js-do-claim", "js-do-claim-kept", "worker"];
  // The latency a user feels: this worker, the plain-JS references (js-do-claim is
  // hono-idempotency's hot path, js-do-claim-kept the worker's guarantees) and the
  // pass-through, each against the direct call in the same round.
  const latencyNames = ["direct", "passthrough", "js-do-claim", "js-do-claim-kept", "worker"];
  const replayNames = [...(LADDER ? ["js-do-sql", "worker-route"] : []), "js-do-claim", "js-do-claim-kept", "worker"];
  let targets;
  try {
    targets = await startTargets(origin, firstNames);
    for (const t of Object.values(targets)) if (t.dispose) cleanup.unshift(() => t.dispose());
    await check(targets, origin);

    log("warm-up");
    for (const name of firstNames) {
      const t = targets[name];
      await runLoad({ agent: t.agent(16), target: t, connections: 16, durationMs: PLAN.warmupMs, makeRequest: (i) => payment(`${RUN_ID}-warm-${name}-${i}`) });
      await runLoad({ agent: t.agent(1), target: t, connections: 1, durationMs: PLAN.warmupMs / 4, makeRequest: (i) => payment(`${RUN_ID}-warm1-${name}-${i}`) });
      if (t.pid) await settle([t.pid]);
    }

    const raw = { first: { c1: [], c16: [] }, replay: { c1: [], c16: [] }, latency: { c1: [], c16: [] } };
    for (let r = 0; r < RUNS; r++) {
      log(`run ${r + 1} of ${RUNS}`);
      raw.first.c1.push(await firstAttempts(targets, origin, rotate(firstNames, r), r, 1, PLAN.firstC1Ms));
      raw.first.c16.push(await firstAttempts(targets, origin, rotate(firstNames, r + 1), r, 16, PLAN.firstC16Ms));
      raw.replay.c1.push(await replays(targets, origin, rotate(replayNames, r), r, 1, PLAN.replayMs));
      raw.replay.c16.push(await replays(targets, origin, rotate(replayNames, r + 1), r, 16, PLAN.replayMs));
      raw.latency.c1.push(await latencyRound(targets, origin, rotate(latencyNames, r), r, 1));
      raw.latency.c16.push(await latencyRound(targets, origin, rotate(latencyNames, r + 1), r, 16));
    }
    log("coalesced bursts");
    raw.burst = await bursts(targets, origin, ["direct", "passthrough", "js-do-claim", "worker"], BURSTS);
    log("mixed traffic");
    raw.mixed = await mixed(targets, origin, ["passthrough", "worker"], RUNS);
    for (const t of Object.values(targets)) if (t.dispose) await t.dispose();
    cleanup.splice(0, cleanup.length - 1);

    if (!NO_MEMORY) {
      log("CPU profiles of the worker's isolate");
      raw.profiles = await profiles(origin);

      log("memory (fresh instances)");
      raw.memory = await memory(origin, ["passthrough", ...(LADDER ? ["js-do-sql"] : []), "js-do-claim", "js-do-claim-kept", "worker"]);
      raw.memory.largeBodyBurst = await largeBodyBursts(origin);
      raw.memory.duplicates = await duplicateMemory(origin);
      raw.memory.largeAnswer = await largeAnswerMemory(origin);
    }
    result.raw = raw;

    // Summary
    const fields = ["rps", "p50", "p99", "cpuPerRequestMs", "originCpuPerRequestMs", "loadgenCpuPerRequestMs", "errors", "requests"];
    const s = { first: {}, replay: {}, burst: {}, mixed: {} };
    for (const name of firstNames) {
      s.first[name] = {
        c1: summarize(raw.first.c1.map((x) => x[name]), fields),
        c16: summarize(raw.first.c16.map((x) => x[name]), fields),
      };
    }
    for (const name of replayNames) {
      s.replay[name] = {
        c1: summarize(raw.replay.c1.map((x) => x[name]), [...fields, "executions"]),
        c16: summarize(raw.replay.c16.map((x) => x[name]), [...fields, "executions"]),
      };
    }
    for (const [name, runs] of Object.entries(raw.burst)) {
      s.burst[name] = {
        ...summarize(runs, ["lastMinusOriginMs", "spreadMs", "originReachedMs", "firstResponseMs", "lastResponseMs", "replayed", "cpuPerRequestMs"]),
        executions: Math.max(...runs.map((x) => x.executions)),
        executionsPerRun: runs.map((x) => x.executions),
        lastMinusOriginMaxMs: Math.max(...runs.map((x) => x.lastMinusOriginMs)),
        lastResponseMaxMs: Math.max(...runs.map((x) => x.lastResponseMs)),
        lastResponsePerRunMs: runs.map((x) => round(x.lastResponseMs, 1)),
        statusesPerRun: runs.map((x) => x.statuses),
      };
    }
    for (const [name, runs] of Object.entries(raw.mixed)) {
      s.mixed[name] = {
        ...summarize(runs, ["rps", "p50", "p99", "newKeys", "retries", "executions", "replayed", "conflicts409", "cpuPerRequestMs"]),
        allRunsExecutionsEqualKeys: runs.every((x) => x.executionsEqualDistinctKeys),
        keysExecutedMoreThanOnceMax: Math.max(...runs.map((x) => x.keysExecutedMoreThanOnce)),
        statusesPerRun: runs.map((x) => x.statuses),
      };
    }
    s.memory = raw.memory;
    s.profiles = raw.profiles;
    s.latency = latencySummary(raw.latency, ORIGIN_MS);
    s.latencyOriginMs = ORIGIN_MS;

    // Ratios: per run (same round), then the median.
    const perRun = (get) => median(Array.from({ length: RUNS }, (_, r) => get(r)));
    const ratio = {
      firstC16Rps: perRun((r) => raw.first.c16[r].worker.rps / raw.first.c16[r].passthrough.rps),
      firstC1P50: perRun((r) => raw.first.c1[r].worker.p50 / raw.first.c1[r].passthrough.p50),
      firstC1Rps: perRun((r) => raw.first.c1[r].worker.rps / raw.first.c1[r].passthrough.rps),
      replayC16Rps: perRun((r) => raw.replay.c16[r].worker.rps / raw.first.c16[r].passthrough.rps),
      replayC1Rps: perRun((r) => raw.replay.c1[r].worker.rps / raw.first.c1[r].passthrough.rps),
      mixedRps: perRun((r) => raw.mixed.worker[r].rps / raw.mixed.passthrough[r].rps),
      firstC16Cpu: perRun((r) => raw.first.c16[r].worker.cpuPerRequestMs / raw.first.c16[r].passthrough.cpuPerRequestMs),
      replayC16Cpu: perRun((r) => raw.replay.c16[r].worker.cpuPerRequestMs / raw.first.c16[r].passthrough.cpuPerRequestMs),
    };
    s.ratios = Object.fromEntries(Object.entries(ratio).map(([k, v]) => [k, round(v, 3)]));
    const wasmGz = result.bundle.files.find((x) => x.file.endsWith(".wasm")).gzip;
    // CPU per key: first attempts at c16 (until idle), plus the memory phase's deferred CPU per
    // key when it ran (`--no-memory` leaves the deferred work out, and the row says so).
    const deferred = (name) => s.memory?.[name]?.deferredCpuPerKeyMs;
    const withDeferred = ["worker", "js-do-claim-kept", "js-do-claim"].every((name) => Number.isFinite(deferred(name)));
    const perKey = (name) => s.first[name].c16.cpuPerRequestMs + (withDeferred ? deferred(name) : 0);
    // Target `a` against target `b`, same run: the median of per-run ratios, and CPU per key.
    const ratios = (a, b) => {
      const at = (r, phase, c, name) => raw[phase][c][r][name];
      return {
        firstC16Rps: perRun((r) => at(r, "first", "c16", a).rps / at(r, "first", "c16", b).rps),
        firstC1P50: perRun((r) => at(r, "first", "c1", a).p50 / at(r, "first", "c1", b).p50),
        replayC16Rps: perRun((r) => at(r, "replay", "c16", a).rps / at(r, "replay", "c16", b).rps),
        replayC16P99: perRun((r) => at(r, "replay", "c16", a).p99 / at(r, "replay", "c16", b).p99),
        replayC16Cpu: perRun((r) => at(r, "replay", "c16", a).cpuPerRequestMs / at(r, "replay", "c16", b).cpuPerRequestMs),
        firstCpuPerKey: perKey(a) / perKey(b),
      };
    };
    // What the worker's guarantees cost, whatever the language: js-do-claim-kept is
    // js-do-claim plus the work the worker keeps on every request (the key checked, the
    // fingerprint, the scope, the headers filtered, the envelope, the mark, the probe before
    // a first forward, a decision line), in plain JS: the worker against it (which the
    // targets are set against), and it against js-do-claim.
    const workerToKept = ratios("worker", "js-do-claim-kept");
    const keptToClaim = ratios("js-do-claim-kept", "js-do-claim");
    const rounded = (r) => Object.fromEntries(Object.entries(r).map(([k, v]) => [k, round(v, 3)]));
    s.ratiosGuarantees = { workerToKept: rounded(workerToKept), keptToClaim: rounded(keptToClaim) };
    s.targets = currentTargets(s, workerToKept, { wasmGz, withDeferred, perKey });
    s.guarantees = [
      ["replays c16 req/s", "replayC16Rps"],
      ["replay CPU ms/req c16", "replayC16Cpu"],
      ["first attempts c16 req/s", "firstC16Rps"],
      ["first attempts c1 p50", "firstC1P50"],
      [withDeferred ? "CPU per key incl. deferred" : "CPU per key c16 (deferred not measured)", "firstCpuPerKey"],
      ["replays c16 p99", "replayC16P99"],
    ].map(([name, k]) => ({ name, workerToKept: `${f(workerToKept[k], 2)}×`, keptToClaim: `${f(keptToClaim[k], 2)}×` }));
    result.summary = s;
  } finally {
    await stopAll();
    fs.rmSync(STATE_DIR, { recursive: true, force: true });
  }
  const self1 = process.cpuUsage(self0);
  result.machine.loadavgAtEnd = os.loadavg().map((x) => round(x, 2));
  const busyMs = machineBusyMs() - busy0;
  result.durationSeconds = round((Date.now() - startedAt) / 1000, 1);
  result.machine.busyCoresAverage = round(busyMs / (Date.now() - startedAt), 2);
  result.machine.loadgenCpuSeconds = round((self1.user + self1.system) / 1e6, 1);
  // Other sessions share this machine; their CPU during the run (processes alive at the end).
  result.machine.otherProcessesCpu = othersCpuBetween(others0, othersCpuSnapshot());
  const text = report(result);
  result.table = text;
  fs.mkdirSync(path.dirname(OUT_FILE), { recursive: true });
  fs.writeFileSync(OUT_FILE, JSON.stringify(result, null, 2));
  writeSvg(result);
  console.log(text);
  console.log(`\nresult: ${path.relative(process.cwd(), OUT_FILE)}  (${result.durationSeconds} s)`);
}

// The picture of the run, beside the JSON (latest.json -> latest.svg). A drawing that fails
// costs the picture, never the figures: they are written already.
function writeSvg(result) {
  const file = OUT_FILE.replace(/\.json$/, "") + ".svg";
  try {
    fs.writeFileSync(file, drawResult(result));
    console.log(`picture: ${path.relative(process.cwd(), file)}`);
  } catch (error) {
    console.error(`drawing ${file} failed: ${error?.stack ?? error}`);
  }
}

main().then(
  () => process.exit(0),
  (error) => {
    console.error(error);
    process.exit(1);
  },
);
