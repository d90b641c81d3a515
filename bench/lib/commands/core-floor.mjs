// How small the Wasm would be if it held only the core's decisions: the shipped
// code with everything the runtime does taken out, and what the runtime calls into the core
// kept, measured rather than estimated from names.
//
//   node bench/bench.mjs wasm floor [top=25]
//
// It needs a build (`bash scripts/build.sh`). From the named copy of the Wasm
// (target/wasm-names/index_bg.wasm) it takes wasm-opt's call graph and finds every function of
// `crate::core` that a function of `crate::runtime` calls: the core's entry points, which a
// runtime outside the Wasm would call instead. It then drops every export but the memory and
// the allocator, exports those entry points, takes out of the indirect-call table whatever
// leads to the runtime, wasm-bindgen, js-sys, web-sys, the `worker` crate or `futures` (a
// trait object of theirs would keep their code), and optimises the result exactly as
// scripts/build.sh optimises the shipped Wasm. It prints the size of that Wasm beside the
// shipped one's, raw and `gzip -9`, and what it keeps, by crate.
//
// What it does not count, so the figure is a floor rather than a design's size: core code
// that the optimiser inlined into a runtime function (it leaves with that function), the
// glue the runtime would need to call the entry points from JavaScript (argument and result
// conversions, a few hundred bytes per entry point), and any decision still written in the
// runtime that a redesign would move into the core.
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import binaryen from "binaryen";
import { codeBreakdown, crateOf, WASM_OPT_FEATURES, WASM_OPT_SHIPPED } from "../wasm.mjs";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");
const top = Number(process.argv[2] ?? 25);
const named = path.join(ROOT, "target/wasm-names/index_bg.wasm");
const shipped = path.join(ROOT, "build/index_bg.wasm");
for (const need of [named, shipped]) {
  if (!fs.existsSync(need)) {
    console.error(`core-floor: ${need} is missing; run \`bash scripts/build.sh\` first`);
    process.exit(2);
  }
}
const wasmOpt = path.join(ROOT, "node_modules/.bin/wasm-opt");
const work = fs.mkdtempSync(path.join(os.tmpdir(), "idempotency-edge-core-floor-"));

/** wasm-opt's call graph of `file`: caller name -> callee names, and every function's name. */
function callGraph(file) {
  const dot = execFileSync(wasmOpt, [file, ...WASM_OPT_FEATURES, "--print-call-graph", "-o", "/dev/null"], {
    maxBuffer: 256 << 20,
  }).toString();
  const calls = new Map();
  const functions = new Set();
  for (const line of dot.split("\n")) {
    const edge = line.match(/^\s*"(.*)" -> "(.*)"; \/\/ call$/);
    if (edge) {
      if (!calls.has(edge[1])) calls.set(edge[1], []);
      calls.get(edge[1]).push(edge[2]);
      continue;
    }
    const node = line.match(/^\s*"(.*)" \[style=/);
    if (node) functions.add(node[1]);
  }
  return { calls, functions };
}

const inCore = (name) => name.includes("idempotency_edge::core::") && !name.includes("idempotency_edge::runtime::");
const inRuntime = (name) => name.includes("idempotency_edge::runtime::");
// What a trait object in the table can lead back to: the runtime and the crates it alone uses.
const runtimeSide = (name) =>
  inRuntime(name) ||
  /\b(worker|worker_sys|js_sys|web_sys|wasm_bindgen|wasm_bindgen_futures|futures_util|futures_channel|futures_core|wasm_streams|serde_wasm_bindgen|serde_json|matchit)(\[[0-9a-f]+\])?::/.test(name);

const graph = callGraph(named);
const entryPoints = new Set();
for (const [caller, callees] of graph.calls) {
  if (!inRuntime(caller)) continue;
  for (const callee of callees) if (inCore(callee)) entryPoints.add(callee);
}
if (entryPoints.size === 0) {
  // Renamed modules, or a named build without names: the floor would be an empty module.
  console.error("core-floor: no function of crate::runtime calls one of crate::core in the named build");
  process.exit(1);
}

// A table entry belongs to the runtime when it, or anything it calls, does: a vtable shim's
// own name does not say whose closure it calls. The core calls nothing of the runtime's, so
// none of its own entries is dropped.
const reaching = new Map();
function reachesRuntime(name) {
  if (reaching.has(name)) return reaching.get(name);
  const seen = new Set([name]);
  const pending = [name];
  let found = false;
  while (pending.length && !found) {
    const next = pending.pop();
    if (runtimeSide(next)) found = true;
    for (const callee of graph.calls.get(next) ?? []) {
      if (!seen.has(callee)) {
        seen.add(callee);
        pending.push(callee);
      }
    }
  }
  reaching.set(name, found);
  return found;
}

binaryen.setDebugInfo(true);
const module = binaryen.readBinary(fs.readFileSync(named));
module.setFeatures(binaryen.Features.All);
const keepExports = new Set(["memory", "__wbindgen_malloc", "__wbindgen_realloc", "__wbindgen_free"]);
const exports = [];
for (let i = 0; i < module.getNumExports(); i++) exports.push(binaryen.getExportInfo(module.getExportByIndex(i)).name);
for (const name of exports) if (!keepExports.has(name)) module.removeExport(name);
let index = 0;
for (const name of entryPoints) module.addFunctionExport(name, `core_entry_${index++}`);
let tableKept = 0;
let tableTotal = 0;
for (let i = module.getNumElementSegments() - 1; i >= 0; i--) {
  const segment = binaryen.getElementSegmentInfo(module.getElementSegmentByIndex(i));
  const keptEntries = segment.data.filter((name) => !reachesRuntime(name));
  tableTotal += segment.data.length;
  tableKept += keptEntries.length;
  if (keptEntries.length === segment.data.length) continue;
  // Same length and offset, the runtime's entries pointing at one kept function instead.
  const standIn = keptEntries[0] ?? [...entryPoints][0];
  const data = segment.data.map((name) => (reachesRuntime(name) ? standIn : name));
  const offset = binaryen.getExpressionInfo(segment.offset);
  module.removeElementSegment(segment.name);
  module.addActiveElementSegment(segment.table, segment.name, data, module.i32.const(offset.value));
}
const edited = path.join(work, "edited.wasm");
fs.writeFileSync(edited, module.emitBinary());
module.dispose();
const floorNamed = path.join(work, "floor-named.wasm");
const floor = path.join(work, "floor.wasm");
execFileSync(wasmOpt, [edited, "-o", floorNamed, ...WASM_OPT_FEATURES, ...WASM_OPT_SHIPPED, "--debuginfo"]);
execFileSync(wasmOpt, [floorNamed, "-o", floor, ...WASM_OPT_FEATURES, ...WASM_OPT_SHIPPED, "--strip-debug", "--strip-producers"]);

// `gzip -9` itself, as the target reads it (node's zlib at level 9 writes about
// 0.7 % more for the same bytes).
const size = (file) => ({ raw: fs.statSync(file).size, gzip: execFileSync("gzip", ["-9", "-c", file], { maxBuffer: 64 << 20 }).length });
const now = size(shipped);
const only = size(floor);
console.log(`core entry points the runtime calls: ${entryPoints.size}; table entries kept ${tableKept} of ${tableTotal}`);
console.log("| Wasm | raw | gzip -9 |\n|---|--:|--:|");
console.log(`| shipped (build/index_bg.wasm) | ${now.raw} | ${now.gzip} |`);
console.log(`| the core as the runtime calls it | ${only.raw} | ${only.gzip} |`);

// What the floor keeps, by crate: its functions (by name, from its own call graph) at their
// size in the named build.
const sizes = new Map(codeBreakdown(fs.readFileSync(named)).all.map((f) => [f.name, f.bytes]));
const kept = callGraph(floorNamed).functions;
const byCrate = new Map();
let keptBytes = 0;
for (const name of kept) {
  const bytes = sizes.get(name) ?? 0;
  keptBytes += bytes;
  const crate = inCore(name) ? "idempotency_edge::core" : crateOf(name);
  byCrate.set(crate, (byCrate.get(crate) ?? 0) + bytes);
}
console.log(`\nkept: ${kept.size} functions, ${keptBytes} bytes of code at their size in the named build`);
console.log("| crate | bytes |\n|---|--:|");
for (const [crate, bytes] of [...byCrate].sort((a, b) => b[1] - a[1]).slice(0, top)) console.log(`| ${crate} | ${bytes} |`);
fs.rmSync(work, { recursive: true, force: true });
