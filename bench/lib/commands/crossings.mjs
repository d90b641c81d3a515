// Counts the JS↔Wasm crossings of one replay and of one first attempt:
// every call from Wasm into wasm-bindgen's imports (Wasm→JS) and every call of a Wasm export
// (JS→Wasm, including `__wbindgen_malloc`, closure invokes and frees), per request.
//
//   node bench/bench.mjs wasm crossings [requests=20]
//
// It needs a build (`bash scripts/build.sh`): it runs wasm-bindgen again on cargo's output
// (target/wasm32-unknown-unknown/release/idempotency_edge.wasm) for readable glue, wraps the
// glue's imports and exports in counters, bundles that with src/entry.mjs the way
// scripts/build.sh does (unminified), and runs it with the shipped build/index_bg.wasm (the
// optimizer keeps every import and export name). The Worker and its object share one isolate
// locally, so both halves count. A request to `/__xing` answers the counts, `/__xing_reset`
// clears them; both exist only in this counting copy.
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { startCopyWithOrigin } from "../workers.mjs";
import { pool, send } from "../load.mjs";
import { profiledPayment as payment } from "../profile.mjs";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");
const requests = Number(process.argv[2] ?? 20);
const cargoWasm = path.join(process.env.CARGO_TARGET_DIR ?? path.join(ROOT, "target"), "wasm32-unknown-unknown/release/idempotency_edge.wasm");
for (const need of [cargoWasm, path.join(ROOT, "build/index_bg.wasm")]) {
  if (!fs.existsSync(need)) {
    console.error(`crossings: ${need} is missing; run \`bash scripts/build.sh\` first`);
    process.exit(2);
  }
}
// The counting glue is made from cargo's Wasm and runs with the shipped one: both must come
// from the same source, or the glue's import names (each carries a hash) miss the shipped
// Wasm's and workerd refuses the module with a LinkError that names neither file. The names
// are read as text from the binaries (Node 20 cannot compile this Wasm to ask it); cargo's
// also holds them in its name section, so only the shipped Wasm's must all be found there.
const wbgNames = (file) => new Set(fs.readFileSync(file, "latin1").match(/__wbg_\w+_[0-9a-f]{16}/g) ?? []);
const cargoNames = wbgNames(cargoWasm);
const unmatched = [...wbgNames(path.join(ROOT, "build/index_bg.wasm"))].filter((name) => !cargoNames.has(name));
if (unmatched.length) {
  console.error(`crossings: build/index_bg.wasm and cargo's Wasm come from different sources (${unmatched[0]} is not in cargo's); run \`FORCE_BUILD=1 bash scripts/build.sh\` first`);
  process.exit(2);
}
const work = fs.mkdtempSync(path.join(os.tmpdir(), "idempotency-edge-crossings-"));
const glue = path.join(work, "glue");
execFileSync("wasm-bindgen", [cargoWasm, "--out-dir", glue, "--out-name", "index", "--target", "module", "--no-typescript",
  "--experimental-reset-state-function", "--force-enable-abort-handler"]);

let js = fs.readFileSync(path.join(glue, "index.js"), "utf8");
const instantiate = "new WebAssembly.Instance(wasmModule, __wbg_get_imports())";
const exportsOf = "wasm = wasmInstance.exports;";
const count = (s) => js.split(s).length - 1;
if (count(instantiate) < 1 || count(exportsOf) < 1) throw new Error("crossings: wasm-bindgen's glue has an unexpected shape");
js = js.split(instantiate).join("new WebAssembly.Instance(wasmModule, __xImports(__wbg_get_imports()))");
js = js.split(exportsOf).join("wasm = __xExports(wasmInstance.exports);");
// A Wasm exports object is frozen, so the exports are copied into a plain object rather than
// proxied (a Proxy may not answer another function for a frozen property).
js = `const __X = (globalThis.__X = { imp: {}, exp: {} });
// A snippet's namespace object is read-only: each namespace is copied, not patched.
function __xImports(o) {
  for (const [name, ns] of Object.entries(o)) {
    const copy = {};
    for (const k of Object.keys(ns)) {
      const f = ns[k];
      copy[k] = typeof f === "function" ? function (...a) { __X.imp[k] = (__X.imp[k] || 0) + 1; return f.apply(this, a); } : f;
    }
    o[name] = copy;
  }
  return o;
}
function __xExports(ex) {
  const out = {};
  for (const k of Object.keys(ex)) {
    const f = ex[k];
    out[k] = typeof f === "function" ? (...a) => { __X.exp[k] = (__X.exp[k] || 0) + 1; return f(...a); } : f;
  }
  return out;
}
${js}`;
fs.writeFileSync(path.join(glue, "index.js"), js);

let entry = fs.readFileSync(path.join(ROOT, "src/entry.mjs"), "utf8");
const workerFetch = "  fetch(request) {\n    resetAfterTrap();";
if (entry.split(workerFetch).length !== 2) throw new Error("crossings: src/entry.mjs has an unexpected shape");
entry = entry.replace(workerFetch, `  fetch(request) {
    const counting = new URL(request.url).pathname;
    if (counting === "/__xing") return new Response(JSON.stringify(globalThis.__X));
    if (counting === "/__xing_reset") { globalThis.__X.imp = {}; globalThis.__X.exp = {}; return new Response("ok"); }
    resetAfterTrap();`);
fs.writeFileSync(path.join(glue, "entry.mjs"), entry);

const build = path.join(work, "build");
fs.mkdirSync(path.join(build, "worker"), { recursive: true });
const esbuild = path.join(ROOT, "node_modules/.bin/esbuild");
execFileSync(esbuild, [path.join(glue, "entry.mjs"), "--bundle", "--format=esm", "--log-level=warning",
  "--external:./index_bg.wasm", "--external:cloudflare:*", `--outfile=${path.join(glue, "bundle.js")}`]);
fs.writeFileSync(path.join(build, "index.js"), fs.readFileSync(path.join(glue, "bundle.js"), "utf8").replace(/import source /g, "import "));
fs.copyFileSync(path.join(ROOT, "build/index_bg.wasm"), path.join(build, "index_bg.wasm"));
fs.writeFileSync(path.join(build, "worker/shim.mjs"), "export * from '../index.js';\nexport { default } from '../index.js';\n");

const { worker, stop } = await startCopyWithOrigin({ rootDir: ROOT, build, name: "crossings", work });
const agent = pool(1);
const get = async (p) => (await fetch(`http://${worker.host}:${worker.port}${p}`)).text();

async function perRequest(makeRequest) {
  await get("/__xing_reset");
  for (let i = 0; i < requests; i++) {
    const r = await send(agent, worker, makeRequest(i));
    if (r.status !== 200 && r.status !== 201) throw new Error(`crossings: the worker answered ${r.status}`);
  }
  const { imp, exp } = JSON.parse(await get("/__xing"));
  const per = (o) => Object.fromEntries(Object.entries(o).map(([k, v]) => [k, v / requests]).sort((a, b) => b[1] - a[1]));
  const sum = (o) => Object.values(o).reduce((a, b) => a + b, 0) / requests;
  return { wasmToJs: sum(imp), jsToWasm: sum(exp), imports: per(imp), exports: per(exp) };
}

const id = Date.now().toString(36);
for (let i = 0; i < 5; i++) await send(agent, worker, payment(`${id}-warm-${i}`));
await send(agent, worker, payment(`${id}-replay`));
const replay = await perRequest(() => payment(`${id}-replay`));
const first = await perRequest((i) => payment(`${id}-first-${i}`));
for (const [name, c] of Object.entries({ replay, first })) {
  console.log(`\n## ${name}: ${c.wasmToJs + c.jsToWasm} crossings per request (${c.wasmToJs} Wasm→JS, ${c.jsToWasm} JS→Wasm)`);
  console.log("| Wasm→JS import | per request |\n|---|--:|");
  for (const [k, v] of Object.entries(c.imports)) console.log(`| ${k} | ${v} |`);
  console.log("| JS→Wasm export | per request |\n|---|--:|");
  for (const [k, v] of Object.entries(c.exports)) console.log(`| ${k} | ${v} |`);
}
await stop();
fs.rmSync(work, { recursive: true, force: true });
process.exit(0);
