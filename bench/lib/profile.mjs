// A V8 CPU profile of the worker's isolate (the Worker and its Durable Objects share it),
// taken over workerd's own inspector socket with nothing else attached: Miniflare runs the
// built worker directly, without wrangler's inspector proxy (whose per-subrequest network
// events would distort the figures). Only the Profiler domain is enabled.
//
// The profile covers JavaScript and Wasm on the isolate's thread. Work the runtime does in
// C++ on behalf of a call (SQLite, sockets, HTTP) is charged to the calling API function
// (`exec`, `fetch`, ...) when it runs synchronously, and to "(program)" otherwise.
import fs from "node:fs";
import path from "node:path";
import { Miniflare } from "miniflare";
import WebSocket from "ws";
import { startBenchOrigin } from "./workers.mjs";

/** The [vars] of a wrangler.toml (string values only). */
export function varsOf(tomlText) {
  const vars = {};
  const section = tomlText.split(/^\[vars\]\s*$/m)[1] ?? "";
  for (const line of section.split("\n")) {
    if (/^\s*\[/.test(line)) break;
    const m = line.match(/^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"([^"]*)"/);
    if (m) vars[m[1]] = m[2];
  }
  return vars;
}

/** The built worker's Durable Object binding (wrangler.toml's). */
const KEY_OBJECTS = { IDEMPOTENCY_KEYS: { className: "KeyObject", useSQLite: true } };

/**
 * `root` holds the built worker: index.js, index_bg.wasm and worker/shim.mjs (or a ladder
 * target's script as worker/shim.mjs, with its own `durableObjects`).
 */
export async function startProfiledWorker({ root, name, vars, compatibilityDate, persistDir, durableObjects = KEY_OBJECTS }) {
  fs.rmSync(persistDir, { recursive: true, force: true });
  const mf = new Miniflare({
    host: "127.0.0.1",
    port: 0,
    inspectorPort: 0,
    durableObjectsPersist: persistDir,
    // The worker's own log lines are part of its cost, but not of this output.
    handleRuntimeStdio(stdout, stderr) {
      stdout.resume();
      stderr.resume();
    },
    workers: [
      {
        name,
        modules: true,
        scriptPath: path.join(root, "worker/shim.mjs"),
        modulesRoot: root,
        modulesRules: [
          { type: "ESModule", include: ["**/*.js", "**/*.mjs"] },
          { type: "CompiledWasm", include: ["**/*.wasm"] },
        ],
        compatibilityDate,
        durableObjects,
        bindings: vars,
      },
    ],
  });
  const url = await mf.ready;
  const inspector = await mf.getInspectorURL();
  const ws = new WebSocket(new URL(`/core:user:${name}`, inspector).href);
  await new Promise((resolve, reject) => {
    ws.once("open", resolve);
    ws.once("error", reject);
  });
  let nextId = 1;
  const pending = new Map();
  ws.on("message", (data) => {
    const message = JSON.parse(String(data));
    if (message.id && pending.has(message.id)) {
      pending.get(message.id)(message);
      pending.delete(message.id);
    }
  });
  const call = (method, params = {}) =>
    new Promise((resolve, reject) => {
      const id = nextId++;
      pending.set(id, (m) => (m.error ? reject(new Error(`${method}: ${m.error.message}`)) : resolve(m.result)));
      ws.send(JSON.stringify({ id, method, params }));
    });
  await call("Profiler.enable");
  await call("Profiler.setSamplingInterval", { interval: 200 });
  return {
    host: url.hostname,
    port: Number(url.port),
    async profile(fn) {
      await call("Profiler.start");
      const result = await fn();
      const { profile } = await call("Profiler.stop");
      return { result, profile };
    },
    async dispose() {
      ws.close();
      await mf.dispose();
    },
  };
}

function category(frame) {
  const { functionName: fn, url } = frame;
  if (fn === "(idle)") return "idle";
  if (fn === "(garbage collector)") return "garbage collector";
  if (fn === "(program)" || fn === "(root)") return "runtime, outside JS (program)";
  if (url.startsWith("wasm://")) return "Wasm (Rust)";
  if (url.endsWith("index.js") || url.includes("index.js")) return "JS glue (wasm-bindgen, index.js)";
  if (!url) return `runtime API: ${fn || "(anonymous)"}`;
  return `JS: ${path.basename(url)}`;
}

function shortWasmName(name) {
  return name.replace(/::h[0-9a-f]{16}$/, "").replace(/\[[0-9a-f]+\]/g, "");
}

/**
 * Self time per category and per function, in ms, excluding idle; and the runtime API
 * calls (frames without a script URL) charged to the nearest Rust function that called
 * them, which tells e.g. the object stub's `fetch` from the origin `fetch`.
 */
export function summarizeProfile(profile, top = 25) {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const self = new Map();
  for (let i = 0; i < profile.samples.length; i++) {
    const id = profile.samples[i];
    const dt = (profile.timeDeltas[i] ?? 0) / 1000;
    self.set(id, (self.get(id) ?? 0) + dt);
  }
  // The nearest glue function (index.js) and the nearest Rust function that is not a
  // trampoline or the executor, above a runtime API frame.
  const callers = (id) => {
    let glue = null;
    for (let p = parent.get(id), hops = 0; p !== undefined && hops < 80; p = parent.get(p), hops++) {
      const f = byId.get(p).callFrame;
      if (!glue && f.url && !f.url.startsWith("wasm://")) glue = f.functionName || "(anonymous)";
      if (f.url.startsWith("wasm://") && !/^(js-to-wasm|wasm-to-js)|future_to_promise|wasm_bindgen::|js_sys::futures/.test(f.functionName)) {
        return `${glue ?? "-"} ← ${shortWasmName(f.functionName)}`;
      }
    }
    return `${glue ?? "-"} ← (no Rust caller)`;
  };
  const categories = {};
  const functions = {};
  const apiCalls = {};
  let busy = 0;
  for (const [id, ms] of self) {
    const frame = byId.get(id).callFrame;
    const cat = category(frame);
    if (cat === "idle") continue;
    busy += ms;
    categories[cat] = (categories[cat] ?? 0) + ms;
    const label = frame.url.startsWith("wasm://")
      ? shortWasmName(frame.functionName)
      : !frame.url
        ? frame.functionName || "(anonymous)"
        : `${frame.functionName || "(anonymous)"} (${path.basename(frame.url)})`;
    functions[label] = (functions[label] ?? 0) + ms;
    if (cat.startsWith("runtime API")) {
      const call = `${frame.functionName || "(anonymous)"} ← ${callers(id)}`;
      apiCalls[call] = (apiCalls[call] ?? 0) + ms;
    }
  }
  const sorted = (o, n = Infinity) =>
    Object.entries(o)
      .sort((a, b) => b[1] - a[1])
      .slice(0, n)
      .map(([name, ms]) => ({ name, ms: Math.round(ms * 10) / 10, share: Math.round((ms / busy) * 1000) / 10 }));
  return {
    busyMs: Math.round(busy),
    categories: sorted(categories, 15),
    functions: sorted(functions, top),
    runtimeApiByRustCaller: sorted(apiCalls, 15),
  };
}

/**
 * The named copy of the Wasm (`wasm`, from scripts/build.sh's target/wasm-names/) in a copy
 * of `build`, run by a profiled worker against `bench/origin.mjs` with wrangler.toml's
 * [vars]: what `bench.mjs profile named` and `profile cold` profile. `stop()` ends
 * the worker and the origin and removes the copy.
 */
export async function startNamedWorker({ rootDir, build, wasm, name }) {
  return startInCopy({
    rootDir,
    name,
    fill(root) {
      fs.cpSync(path.resolve(build), root, { recursive: true });
      fs.copyFileSync(path.resolve(wasm), path.join(root, "index_bg.wasm"));
    },
    vars: (wranglerToml, originUrl) => ({ ...varsOf(wranglerToml), ORIGIN_URL: originUrl }),
  });
}

/**
 * A ladder target of bench/targets/ladder.mjs (`target` as `bench.mjs ab` names it, e.g.
 * `js-do-claim`), profiled the same way as the built worker, against `bench/origin.mjs`: the
 * best peer's design side by side with the worker in one profiler's terms. `stop()` as for
 * [`startNamedWorker`].
 */
export async function startLadderWorker({ rootDir, target, name }) {
  return startInCopy({
    rootDir,
    name,
    fill(root) {
      fs.mkdirSync(path.join(root, "worker"), { recursive: true });
      fs.copyFileSync(path.join(rootDir, "bench/targets/ladder.mjs"), path.join(root, "worker/shim.mjs"));
    },
    vars: (_, originUrl) => ({ ORIGIN_URL: originUrl, LADDER_MODE: target.slice("js-".length) }),
    durableObjects: { LADDER: { className: "LadderObject", useSQLite: true } },
  });
}

/**
 * A profiled worker whose script `fill(root)` writes into a fresh temporary directory, with
 * wrangler.toml's compatibility date and `vars(wranglerToml, originUrl)`, against a new
 * `bench/origin.mjs`. `stop()` ends the worker and the origin and removes the directory.
 */
async function startInCopy({ rootDir, name, fill, vars, durableObjects }) {
  const os = await import("node:os");
  const work = fs.mkdtempSync(path.join(os.tmpdir(), `idempotency-edge-${name}-`));
  const root = path.join(work, "root");
  fill(root);
  const origin = await startBenchOrigin(rootDir);
  const wranglerToml = fs.readFileSync(path.join(rootDir, "wrangler.toml"), "utf8");
  const compatibilityDate = wranglerToml.match(/^compatibility_date\s*=\s*"([^"]+)"/m)[1];
  const worker = await startProfiledWorker({
    root,
    name,
    vars: vars(wranglerToml, `http://127.0.0.1:${origin.port}`),
    compatibilityDate,
    persistDir: path.join(work, "state"),
    durableObjects,
  });
  return {
    worker,
    async stop() {
      await worker.dispose();
      origin.stop();
      fs.rmSync(work, { recursive: true, force: true });
    },
  };
}

/** The payment both profilers send: a first attempt, or a replay when `key` repeats. */
export function profiledPayment(key) {
  return {
    method: "POST",
    path: "/v1/payments",
    headers: { "content-type": "application/json", authorization: "Bearer sk_test_bench", "idempotency-key": key },
    body: Buffer.from(
      JSON.stringify({ amount: 1999, currency: "eur", customer: "cus_bench_0001", description: "Benchmark payment", metadata: { order: key.slice(-24) } }),
    ),
  };
}
