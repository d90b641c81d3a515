// Drops from the Wasm the exports that only wasm-bindgen classes no JavaScript can ever hold
// would call (issue 23, size). Run by scripts/build.sh between wasm-bindgen and wasm-opt:
//
//   node scripts/dead-exports.mjs GLUE.js ENTRY.mjs IN.wasm OUT.wasm
//
// It prints which classes it found dead; DEAD_EXPORTS_LIST=1 also prints each export dropped.
// tests/dead_exports.rs holds it to these rules on a made-up glue and module.
//
// Every `#[wasm_bindgen]` struct of every linked crate is exported, whether or not anything
// makes one: `worker` brings `ContainerStartupOptions`, `MinifyConfig` and `R2Range`, and
// `wasm-streams` its stream adapters, with the code behind their methods (about 9 KB). The
// exports are roots, so neither the linker nor wasm-opt can drop that code.
//
// JavaScript holds an instance of such a class only through its glue: `X.__wrap(ptr)`, which
// wasm-bindgen writes where Rust hands one to JavaScript, or a `constructor` (or any `static`
// member, which needs no instance). A class whose glue has none of these, and which the entry
// never names, can never have an instance, so no method of it ever runs and its exports are
// dead. Its glue stays as wasm-bindgen wrote it; only the Wasm loses the class's own exports
// (named after it), and wasm-opt then the code only they reached. Anything else that names one of those exports (outside its
// class and its finalization registry) keeps it. The decision is made anew on every build, so
// a class that becomes live after an update of a crate keeps its exports.
import fs from "node:fs";
import { reader, sections } from "../bench/lib/wasm.mjs";

const [gluePath, entryPath, inPath, outPath] = process.argv.slice(2);
if (!outPath) {
  console.error("usage: node scripts/dead-exports.mjs GLUE.js ENTRY.mjs IN.wasm OUT.wasm");
  process.exit(2);
}
const glue = fs.readFileSync(gluePath, "utf8");
const entry = fs.readFileSync(entryPath, "utf8");

/** The classes of the glue that can never have an instance, each with the exports it calls. */
function deadClasses() {
  const dead = [];
  // wasm-bindgen writes each class from `class X {` at the start of a line to the first
  // line that is only `}`.
  for (const match of glue.matchAll(/^(?:export )?class (\w+) \{\n([\s\S]*?)\n\}\n/gm)) {
    const [whole, name, body] = match;
    const live = /\bconstructor\(|\bstatic\s|__wrap\(/.test(body) || new RegExp(`\\b${name}\\b`).test(entry);
    if (live) continue;
    // Its own exports only, which wasm-bindgen names after it; shared ones (`__wbindgen_free`
    // and the like) stay whatever calls them.
    const own = new RegExp(`^(?:__wbg_(?:get_|set_)?)?${name.toLowerCase()}_`);
    const calls = new Set([...body.matchAll(/\bwasm\.(\w+)\(/g)].map((m) => m[1]).filter((n) => own.test(n)));
    dead.push({ name, start: match.index, end: match.index + whole.length, calls });
  }
  return dead;
}

/** Whether `name` is called anywhere but inside a dead class and its finalization registry. */
function calledElsewhere(name, dead) {
  for (const use of glue.matchAll(new RegExp(`\\bwasm\\.${name}\\b`, "g"))) {
    const inDeadClass = dead.some((c) => use.index >= c.start && use.index < c.end);
    const line = glue.slice(glue.lastIndexOf("\n", use.index) + 1, glue.indexOf("\n", use.index));
    const registryOfDead = /FinalizationRegistry|if \(instance === __wbg_instance_id\)/.test(line) &&
      dead.some((c) => name === `__wbg_${c.name.toLowerCase()}_free`);
    if (!inDeadClass && !registryOfDead) return true;
  }
  return false;
}

const dead = deadClasses();
const drop = new Set();
for (const c of dead) for (const name of c.calls) if (!calledElsewhere(name, dead)) drop.add(name);

const wasm = fs.readFileSync(inPath);
const exportSection = sections(wasm).find((s) => s.name === "export");
const r = reader(wasm, exportSection.body);
const count = r.u32();
const kept = [];
const dropped = [];
for (let i = 0; i < count; i++) {
  const start = r.pos;
  const name = r.name();
  r.byte();
  r.u32();
  if (drop.has(name)) dropped.push(name);
  else kept.push(wasm.subarray(start, r.pos));
}
const missing = [...drop].filter((name) => !dropped.includes(name));
if (missing.length) {
  console.error(`dead-exports: the glue calls exports the Wasm does not have: ${missing.join(", ")}`);
  process.exit(1);
}

function leb128(value) {
  const bytes = [];
  do {
    let byte = value & 0x7f;
    value >>>= 7;
    if (value) byte |= 0x80;
    bytes.push(byte);
  } while (value);
  return Buffer.from(bytes);
}
const body = Buffer.concat([leb128(kept.length), ...kept]);
fs.writeFileSync(
  outPath,
  Buffer.concat([
    wasm.subarray(0, exportSection.start),
    Buffer.from([exportSection.id]),
    leb128(body.length),
    body,
    wasm.subarray(exportSection.end),
  ]),
);
if (process.env.DEAD_EXPORTS_LIST) console.log(dropped.join("\n"));
console.log(
  `dead-exports: ${dropped.length} exports of ${dead.map((c) => c.name).join(", ") || "no class"} dropped`,
);
