// The benchmark's one command: `node bench/bench.mjs COMMAND [arguments]`. Each command's
// code is a module of bench/lib/commands/, started here with the arguments after its name;
// `node bench/bench.mjs help COMMAND` (or COMMAND --help) prints what it does and takes.
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const HERE = path.dirname(fileURLToPath(import.meta.url));

// name -> [module, one-line summary, usage]. A command with sub-commands maps them instead.
export const COMMANDS = {
  run: [
    "run.mjs",
    "the full benchmark: first attempts, replays, bursts, mixed traffic, the latency added in front of a slow origin, profiles, memory, bundle; writes target/bench/latest.json and .svg",
    "run [--quick] [--runs N] [--bursts N] [--no-ladder] [--state disk|tmpfs] [--origin-ms MS] [--memory-only | --no-memory] [--out FILE]\n" +
      "  --origin-ms MS   the origin's answer time in the latency phase (default 300)\n" +
      "  --no-memory      leave out the profiles and the memory phases (a shorter run)\n" +
      "  every full run has direct, passthrough, js-do-claim, js-do-claim-kept and the worker;\n" +
      "  BENCH_SCALE scales every duration and request count. ./scripts/bench.sh builds first, then runs this.",
  ],
  ab: [
    "ab.mjs",
    "an A/B of two builds (or a build against a ladder target), interleaved round by round, both orders",
    "ab DIR_A DIR_B [replay|first|burst] [rounds=6] [connections=16] [ms=2000]\n" +
      "  DIR_A/DIR_B: build directories (index.js, index_bg.wasm, worker/shim.mjs) or ladder targets\n" +
      "  (js-do-claim, js-do-claim-kept, ...). AB_VARS_A/AB_VARS_B, AB_JWT, AB_BODY: see bench/lib/commands/ab.mjs.",
  ],
  cold: [
    "coldstart.mjs",
    "cold start: a fresh isolate's first request minus the warm p50, whole and per side (the Worker's, the object's), against the pass-through and the plain-JS references; writes target/bench/cold.json",
    "cold [build dir=build] [rounds=5] [other build dir ...] [--targets worker,worker-2,...] [--state disk|tmpfs] [--out FILE]",
  ],
  cost: [
    "cost.mjs",
    "counts what a run of payments did (Worker requests and CPU, object requests, rows written, object duration) and prices a million payments at list prices",
    "cost [--keys N=200] [--origin-ms 300,1000] [--targets worker,js-do-claim-kept] [--retries R=1] [--connections C=4] [--state disk|tmpfs] [--out FILE]\n" +
      "  --keys N         payments (new keys) per target and origin time\n" +
      "  --retries R      retries per payment, each answered from the stored answer\n" +
      "  --origin-ms LIST origin answer times to price the object's duration at",
  ],
  summary: [
    "summary.mjs",
    "reduces a run's result and a cost count to docs/performance-summary.json and the README's performance lines",
    "summary [--run target/bench/latest.json] [--cost target/bench/cost.json] [--date YYYY-MM-DD] [--write]\n" +
      "  --write   write docs/performance-summary.json and the README's block (bench/summary.test.mjs checks they agree)",
  ],
  profile: {
    named: [
      "profile-named.mjs",
      "V8 CPU profiles of first attempts and replays with Rust function names (or of a ladder target)",
      "profile named [build dir=build] [wasm=target/wasm-names/index_bg.wasm] [top=30]\n  profile named js-do-claim [ignored] [top=30]",
    ],
    cold: [
      "profile-cold.mjs",
      "a V8 CPU profile of a fresh isolate's first request against a warm one",
      "profile cold [build dir=build] [wasm=target/wasm-names/index_bg.wasm] [top=25]",
    ],
  },
  wasm: {
    floor: [
      "core-floor.mjs",
      "how small the Wasm would be holding only the core's decisions (no worker started)",
      "wasm floor [top=25]",
    ],
    crossings: [
      "crossings.mjs",
      "JavaScript<->Wasm crossings per replay and per first attempt",
      "wasm crossings [requests=20]",
    ],
    "first-code": [
      "first-request-code.mjs",
      "which Wasm functions a fresh isolate's first request runs, and their bytes",
      "wasm first-code [top=30]",
    ],
  },
};

function help(name) {
  const lines = ["usage: node bench/bench.mjs COMMAND [arguments]   (node bench/bench.mjs help COMMAND)", ""];
  const entries = name ? [[name, COMMANDS[name]]] : Object.entries(COMMANDS);
  for (const [command, spec] of entries) {
    const subs = Array.isArray(spec) ? [[null, spec]] : Object.entries(spec);
    for (const [sub, [, summary, usage]] of subs) {
      lines.push(`  ${command}${sub ? ` ${sub}` : ""}: ${summary}`);
      if (name) lines.push(`    ${usage.replace(/\n/g, "\n    ")}`, "");
    }
  }
  if (!name) lines.push("", "Every command needs a build (bash scripts/build.sh) and starts its workers in local workerd on 127.0.0.1.");
  return lines.join("\n");
}

/** The module and arguments for argv (after `bench.mjs`), or { help } to print. */
export function resolve(argv) {
  const [name, ...rest] = argv;
  if (!name || name === "help" || name === "--help" || name === "-h") {
    const about = rest[0];
    return { help: help(about in COMMANDS ? about : undefined), ok: !about || about in COMMANDS };
  }
  const spec = COMMANDS[name];
  if (!spec) return { help: `unknown command ${JSON.stringify(name)}\n\n${help()}`, ok: false };
  let entry = spec;
  let args = rest;
  if (!Array.isArray(spec)) {
    const sub = rest[0];
    if (!(sub in spec)) return { help: help(name), ok: sub === "--help" || sub === "-h" };
    entry = spec[sub];
    args = rest.slice(1);
  }
  if (args.includes("--help") || args.includes("-h")) return { help: help(name), ok: true };
  return { module: path.join(HERE, "lib/commands", entry[0]), args };
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const target = resolve(process.argv.slice(2));
  if (target.help) {
    (target.ok ? console.log : console.error)(target.help);
    process.exit(target.ok ? 0 : 2);
  }
  // Each command reads its own arguments from process.argv, as when it was a script.
  process.argv = [process.argv[0], target.module, ...target.args];
  await import(pathToFileURL(target.module).href);
}
