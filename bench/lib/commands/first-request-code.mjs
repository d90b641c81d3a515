// Which Wasm functions a fresh isolate runs by the end of its first request, and
// how many bytes of code that is: V8 compiles a Wasm function whole on its first call, so this
// is the code a cold start compiles. Measured, interleaved, the cold start moves with it
// (docs/decisions/0004-wasm-size-on-a-stable-toolchain.md).
//
//   node bench/bench.mjs wasm first-code [top=30]
//
// It needs a build (`bash scripts/build.sh`): it instruments the named copy of the Wasm
// (target/wasm-names/index_bg.wasm) with Binaryen's `--log-execution` (a call to an imported
// `log_execution(id)` at the start of every function and loop), serves the shipped glue with
// that import added, starts the worker against bench/origin.mjs, sends one first attempt
// (a payment with a new key) and then asks the counting copy (`/__exec`, which exists only
// there) which ids ran. An id is mapped to its function by reading the instrumented code:
// each function body starts with `i32.const id; call log_execution`.
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { startCopyWithOrigin } from "../workers.mjs";
import { pool, send } from "../load.mjs";
import { profiledPayment as payment } from "../profile.mjs";
import { codeBreakdown, reader, sections, WASM_OPT_FEATURES } from "../wasm.mjs";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");
const top = Number(process.argv[2] ?? 30);
const named = path.join(ROOT, "target/wasm-names/index_bg.wasm");
for (const need of [named, path.join(ROOT, "build/index.js")]) {
  if (!fs.existsSync(need)) {
    console.error(`first-request-code: ${need} is missing; run \`bash scripts/build.sh\` first`);
    process.exit(2);
  }
}
const work = fs.mkdtempSync(path.join(os.tmpdir(), "idempotency-edge-first-code-"));
const build = path.join(work, "build");
fs.mkdirSync(path.join(build, "worker"), { recursive: true });
const instrumented = path.join(build, "index_bg.wasm");
execFileSync(path.join(ROOT, "node_modules/.bin/wasm-opt"), [named, ...WASM_OPT_FEATURES, "--log-execution", "--debuginfo", "-o", instrumented]);

// id -> function index, from the instrumented code section.
function idsOf(buf) {
  const code = sections(buf).find((s) => s.name === "code");
  const r = reader(buf, code.body);
  const count = r.u32();
  const byId = new Map();
  for (let i = 0; i < count; i++) {
    const size = r.u32();
    const end = r.pos + size;
    const groups = r.u32();
    for (let g = 0; g < groups; g++) {
      r.u32();
      const type = r.byte();
      if (type === 0x63 || type === 0x64) r.s32();
    }
    // `i32.const id` (0x41), then `call log_execution` (0x10).
    if (r.byte() === 0x41) {
      const id = r.s32();
      if (r.byte() === 0x10) byId.set(id, i);
    }
    r.pos = end;
  }
  return byId;
}
const byId = idsOf(fs.readFileSync(instrumented));
const original = codeBreakdown(fs.readFileSync(named)).all;

let js = fs.readFileSync(path.join(ROOT, "build/index.js"), "utf8");
// esbuild's short names may hold a `$`, which `\w` does not match.
const instance = /new WebAssembly\.Instance\(([\w$]+),([\w$]+)\(\)\)/g;
if (!instance.test(js)) throw new Error("first-request-code: the glue has an unexpected shape (no instantiation)");
js = js.replace(instance, (_, module, imports) => `new WebAssembly.Instance(${module},__logExecution(${imports}()))`);
const workerFetch = /fetch\(([\w$]+)\)\{return ([\w$]+)\(\),/;
if (!workerFetch.test(js)) throw new Error("first-request-code: the glue has an unexpected shape (no Worker fetch)");
js = js.replace(workerFetch, (whole, request) =>
  `fetch(${request}){if(new URL(${request}.url).pathname==="/__exec")return new Response(JSON.stringify([...globalThis.__ran]));` +
  whole.slice(`fetch(${request}){`.length));
js = `globalThis.__ran = new Set();
function __logExecution(imports) {
  imports["./index_bg.js"].log_execution = (id) => globalThis.__ran.add(id);
  return imports;
}
${js}`;
fs.writeFileSync(path.join(build, "index.js"), js);
fs.writeFileSync(path.join(build, "worker/shim.mjs"), "export * from '../index.js';\nexport { default } from '../index.js';\n");

const { worker, stop } = await startCopyWithOrigin({ rootDir: ROOT, build, name: "first-request-code", work });
const agent = pool(1);
const answer = await send(agent, worker, payment(`first-code-${Date.now().toString(36)}`));
const ran = JSON.parse(await (await fetch(`http://${worker.host}:${worker.port}/__exec`)).text());
await stop();
fs.rmSync(work, { recursive: true, force: true });

const functions = new Map();
for (const id of ran) {
  const index = byId.get(id);
  if (index !== undefined) functions.set(index, original[index]);
}
const list = [...functions.values()].sort((a, b) => b.bytes - a.bytes);
const total = list.reduce((sum, f) => sum + f.bytes, 0);
const all = original.reduce((sum, f) => sum + f.bytes, 0);
console.log(`first request: ${answer.status}; ${list.length} of ${original.length} functions ran, ` +
  `${total} of ${all} code bytes (${((100 * total) / all).toFixed(1)} %)`);
console.log("| function (ran by the end of the first request) | bytes |\n|---|--:|");
for (const f of list.slice(0, top)) console.log(`| ${f.name.replace(/::h[0-9a-f]{16}$/, "").slice(0, 110).replace(/\|/g, "\\|")} | ${f.bytes} |`);
process.exit(0);
