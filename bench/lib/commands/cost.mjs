// `node bench/bench.mjs cost`: counts what a run of payments did and prices a million of
// them at Cloudflare's list prices (bench/lib/cost.mjs holds the prices, their sources and
// the arithmetic; bench/cost.test.mjs checks it).
//
// Per origin answer time (--origin-ms, default 300 and 1000) and per target (--targets,
// default the worker and js-do-claim-kept, its guarantees in plain JS), in a fresh workerd
// with its own state directory: N payments (--keys) with new keys, 4 at a time (--connections),
// each followed by R retries (--retries, default 1) answered from the stored answer. Counted:
// - Worker requests: the requests sent;
// - Worker CPU: the workerd process's CPU (/proc/<pid>/stat) from before the first request
//   until it is idle again. Locally the Worker and its objects share that process, so this
//   also holds the objects' CPU, which the platform bills as duration instead: an upper bound;
// - object requests: one per Worker request (the worker calls the key's object once per
//   request: tests/e2e/work_per_request.rs checks what can be seen of that from outside)
//   plus one per alarm the run left pending (each fires once, at the key's deletion);
// - object duration: per request, the client's latency through the worker, which contains
//   the object's call: an upper bound of the object's wall time (workerd reports none).
//   Beside it, for the worker, the object's own clock: each decision line's `edge_ms` (the
//   object's time from the request's arrival to its answer, less the origin's and a wait's;
//   docs/operations.md), read from the lines the worker writes during the run. It leaves out
//   what the platform adds around the object's handler, so it is a lower bound;
// - rows written: every row the objects' SQLite databases gained, changed or lost, read
//   from their WAL history under the state directory (bench/lib/rows_written.py); the
//   wholesale deletion at the end of a key's life (deleteAll) is shown apart, and the run
//   does not wait for it (the TTL is a day).
// The origin (bench/origin.mjs) counts executions: each key must have executed once.
import { execFile } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { promisify } from "node:util";
import { fileURLToPath } from "node:url";
import { writeConfig, startWorker, startBenchOrigin } from "../workers.mjs";
import { pool, send } from "../load.mjs";
import { cpuMs, settle } from "../proc.mjs";
import { perPayment, priceMillion, rowsOf, workerHoldsFetch } from "../cost.mjs";
import { percentile } from "../stats.mjs";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");
const OUT_DIR = path.join(ROOT, "target", "bench");
const args = process.argv.slice(2);
const option = (name, fallback) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : fallback;
};
const KEYS = Number(option("--keys", 200));
const RETRIES = Number(option("--retries", 1));
const ORIGIN_TIMES = String(option("--origin-ms", "300,1000")).split(",").map(Number);
const TARGETS = String(option("--targets", "worker,js-do-claim-kept")).split(",");
const OUT_FILE = path.resolve(option("--out", path.join(OUT_DIR, "cost.json")));
// Where the objects' SQLite files go: "disk" (target/bench/cost) or "tmpfs" (/dev/shm), to
// tell this machine's disk from the runtime's cost, as `bench.mjs run --state` does.
const STATE_ROOT = option("--state", "disk") === "tmpfs" ? path.join("/dev/shm", `idempotency-edge-cost-${process.pid}`) : path.join(OUT_DIR, "cost");
// A few payments at a time: the object's wall time is bounded by the client's latency,
// which queueing on a 2-core machine would inflate.
const CONNECTIONS = Math.min(Number(option("--connections", 4)), KEYS);
const RUN_ID = `c${Date.now().toString(36)}`;
const run = promisify(execFile);
const log = (...parts) => console.error(`[cost ${new Date().toISOString().slice(11, 19)}]`, ...parts);

function payment(key, originMs) {
  const body = Buffer.from(JSON.stringify({ amount: 1999, currency: "eur", customer: "cus_bench_0001", description: "Benchmark payment", metadata: { order: key.slice(-24) } }));
  return {
    method: "POST",
    path: "/v1/payments",
    headers: { "content-type": "application/json", authorization: "Bearer sk_test_bench", "idempotency-key": key, "x-bench-delay-ms": String(originMs) },
    body,
  };
}

function config(name, work, originUrl) {
  const file = path.join(work, "wrangler.toml");
  if (name === "worker") {
    return writeConfig(file, { from: path.join(ROOT, "wrangler.toml"), main: path.join(ROOT, "build/worker/shim.mjs"), vars: { ORIGIN_URL: originUrl } });
  }
  const date = fs.readFileSync(path.join(ROOT, "wrangler.toml"), "utf8").match(/^compatibility_date\s*=\s*"([^"]+)"/m)[1];
  return writeConfig(file, {
    base:
      `name = "bench-cost-${name}"\nmain = "x"\ncompatibility_date = "${date}"\n` +
      '[[durable_objects.bindings]]\nname = "LADDER"\nclass_name = "LadderObject"\n\n[[migrations]]\ntag = "v1"\nnew_sqlite_classes = ["LadderObject"]\n\n[vars]\n',
    main: path.join(ROOT, "bench/targets/ladder.mjs"),
    vars: { ORIGIN_URL: originUrl, LADDER_MODE: name.slice("js-".length) },
  });
}

/** rows_written.py over `persist`, carrying on from `stateFile`. */
async function rows(persist, stateFile) {
  const { stdout } = await run("python3", [path.join(ROOT, "bench/lib/rows_written.py"), persist, "--state", stateFile], { maxBuffer: 64 << 20 });
  return JSON.parse(stdout);
}

async function measure(name, originMs, origin) {
  const work = path.join(STATE_ROOT, `${name}-${originMs}`);
  fs.rmSync(work, { recursive: true, force: true });
  const persist = path.join(work, "state");
  const stateFile = path.join(work, "rows.json");
  // The worker's decision lines reach this process through wrangler's logger (console.log),
  // kept here for their `edge_ms` and not printed.
  const lines = [];
  const consoleLog = console.log;
  const ownLines = name === "worker";
  if (ownLines) console.log = (...parts) => lines.push(parts.map(String).join(" "));
  let t;
  try {
    t = await startWorker({ name, config: config(name, work, `http://127.0.0.1:${origin.port}`), persistDir: persist, logLevel: ownLines ? "log" : "error" });
    const agent = pool(CONNECTIONS);
    // Warm the isolate (its compile and first-request costs are not a payment's), then
    // count from the rows that warm-up left.
    for (let i = 0; i < 4; i++) await send(agent, t, payment(`${RUN_ID}-warm-${name}-${originMs}-${i}`, 0));
    await settle([t.pid]);
    const measuredFrom = lines.length;
    const base = rowsOf(await rows(persist, stateFile));
    const alarms0 = (await rows(persist, stateFile)).alarms;
    const cpu0 = cpuMs(t.pid);
    const prefix = `${RUN_ID}-${name}-${originMs}-`;
    let next = 0;
    let firstWallMs = 0;
    let retryWallMs = 0;
    let firstAttempts = 0;
    const problems = [];
    // The objects' WAL is read while the run goes on: workerd folds it into the database
    // when an object has been idle a few seconds, and the history would be lost.
    let polling = Promise.resolve();
    const poller = setInterval(() => (polling = polling.then(() => rows(persist, stateFile)).catch(() => {})), 2000);
    await Promise.all(
      Array.from({ length: CONNECTIONS }, async () => {
        while (next < KEYS) {
          const key = `${prefix}${next++}`;
          const first = await send(agent, t, payment(key, originMs));
          firstWallMs += first.ms;
          firstAttempts += 1;
          if (first.status !== 201 || first.replayed) problems.push(`first attempt ${first.status}`);
          for (let r = 0; r < RETRIES; r++) {
            const retry = await send(agent, t, payment(key, originMs));
            retryWallMs += retry.ms;
            if (retry.status !== 201 || !retry.replayed) problems.push(`retry ${retry.status} replayed=${retry.replayed}`);
          }
        }
      }),
    );
    clearInterval(poller);
    await polling;
    await settle([t.pid]);
    const cpu = cpuMs(t.pid) - cpu0;
    const report = await rows(persist, stateFile);
    const counted = rowsOf(report);
    const executions = await origin.ask({ cmd: "count", prefix });
    if (executions.executions !== KEYS || executions.keysOverOne) problems.push(`origin executions ${executions.executions} for ${KEYS} keys`);
    const requests = KEYS * (1 + RETRIES);
    const totals = {
      payments: KEYS,
      firstAttempts,
      originMs,
      workerRequests: requests,
      workerCpuMs: cpu,
      objectRequests: requests + (report.alarms - alarms0),
      objectWallMs: firstWallMs + retryWallMs,
      rowsWritten: counted.live - base.live,
    };
    return {
      target: name,
      originMs,
      totals,
      objectOwnMs: ownLines ? objectOwnMs(lines.slice(measuredFrom)) : null,
      // What each key's deletion will remove (deleteAll drops the object's database whole).
      rowsDroppedAtDeletionPerKey: report.objects.length ? counted.stored / report.objects.length : 0,
      storedRowsPerKey: KEYS ? (counted.live - base.live) / KEYS : 0,
      pendingAlarms: report.alarms - alarms0,
      objectsWithIncompleteHistory: counted.incomplete,
      problems: [...new Set(problems)],
    };
  } finally {
    try {
      await t?.dispose();
    } finally {
      console.log = consoleLog;
    }
  }
}

/**
 * The object's own time beyond the origin (`edge_ms`) in the worker's decision lines, for
 * first attempts (`executed`) and replays (`replayed`): { n, p50, p90, p99, max } each.
 * `lines` are the measured stretch's (the warm-up's come before it).
 */
function objectOwnMs(lines) {
  const by = { executed: [], replayed: [] };
  for (const line of lines) {
    if (!line.startsWith('{"event":"idempotency"')) continue;
    const fields = JSON.parse(line);
    if (fields.decision in by && Number.isFinite(fields.edge_ms)) by[fields.decision].push(fields.edge_ms);
  }
  const summary = (values) => {
    const sorted = values.sort((a, b) => a - b);
    return { n: sorted.length, p50: percentile(sorted, 50), p90: percentile(sorted, 90), p99: percentile(sorted, 99), max: sorted.at(-1) ?? null };
  };
  return { first: summary(by.executed), replay: summary(by.replayed) };
}

const usd = (x) => `$${x < 1 ? x.toFixed(4) : x.toFixed(2)}`;
const num = (x, d = 2) => (x == null ? "–" : Number(x).toFixed(d));

function table(header, rows) {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => String(r[i]).length)));
  const line = (r) => r.map((c, i) => String(c).padEnd(widths[i])).join("  ");
  return [line(header), widths.map((w) => "-".repeat(w)).join("  "), ...rows.map(line)].join("\n");
}

async function main() {
  fs.mkdirSync(OUT_DIR, { recursive: true });
  const origin = await startBenchOrigin(ROOT);
  const results = [];
  try {
    for (const originMs of ORIGIN_TIMES) {
      for (const name of TARGETS) {
        log(`${name}, origin ${originMs} ms: ${KEYS} payments, ${RETRIES} retr${RETRIES === 1 ? "y" : "ies"} each`);
        const m = await measure(name, originMs, origin);
        const per = perPayment(m.totals);
        m.perPayment = per;
        m.today = priceMillion(per);
        m.workerHoldsFetch = priceMillion(workerHoldsFetch(per));
        results.push(m);
        if (m.problems.length) log(`  problems: ${m.problems.join("; ")}`);
      }
    }
  } finally {
    origin.stop();
    if (STATE_ROOT.startsWith("/dev/shm/")) fs.rmSync(STATE_ROOT, { recursive: true, force: true });
  }
  const out = [];
  out.push(`\nCost of a million payments at list prices (marginal, beyond the plan's included usage; ${KEYS} payments per line, each a first attempt and ${RETRIES} retr${RETRIES === 1 ? "y" : "ies"})`);
  out.push("Counted per payment (object wall time and Worker CPU are upper bounds: see bench/lib/commands/cost.mjs)");
  out.push(
    table(
      ["target", "origin ms", "Worker req", "Worker CPU ms", "object req", "object wall ms", "rows written", "rows at deletion", "problems"],
      results.map((m) => [m.target, m.originMs, num(m.perPayment.workerRequests), num(m.perPayment.workerCpuMs), num(m.perPayment.objectRequests), num(m.perPayment.objectWallMs, 1), num(m.perPayment.rowsWritten), num(m.rowsDroppedAtDeletionPerKey), m.problems.length ? m.problems.join("; ") : "none"]),
    ),
  );
  const own = results.filter((m) => m.objectOwnMs);
  if (own.length) {
    out.push("\nThe object's own time beyond the origin (edge_ms of its decision lines, ms; a lower bound of its wall time beyond the origin)");
    out.push(
      table(
        ["target", "origin ms", "first attempts n", "p50", "p90", "p99", "max", "replays n", "p50", "p99"],
        own.map(({ target, originMs, objectOwnMs: { first, replay } }) => [target, originMs, first.n, first.p50, first.p90, first.p99, first.max, replay.n, replay.p50, replay.p99]),
      ),
    );
  }
  out.push("\nPrice per million payments, USD");
  out.push(
    table(
      ["target", "origin ms", "Worker req", "Worker CPU", "object req", "object duration", "rows written", "total (object holds the fetch, today)", "total (Worker holds the fetch, projected)"],
      results.map((m) => {
        const by = Object.fromEntries(m.today.lines.map((l) => [l.item, l.usd]));
        return [m.target, m.originMs, usd(by["Worker requests"]), usd(by["Worker CPU"]), usd(by["object requests"]), usd(by["object duration"]), usd(by["rows written"]), usd(m.today.usd), usd(m.workerHoldsFetch.usd)];
      }),
    ),
  );
  const text = out.join("\n");
  fs.writeFileSync(OUT_FILE, JSON.stringify({ runId: RUN_ID, keys: KEYS, retries: RETRIES, results, table: text }, null, 2));
  console.log(text);
  console.log(`\nresult: ${path.relative(process.cwd(), OUT_FILE)}`);
}

main().then(
  () => process.exit(0),
  (error) => {
    console.error(error);
    process.exit(1);
  },
);
