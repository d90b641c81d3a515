// A V8 CPU profile of a fresh isolate's first request: what the first request
// pays that a warm one does not. Starts the worker (named copy of the Wasm, as
// `bench.mjs profile named` does) in a new workerd, profiles its first request, then one warm
// request (a new key, after 20 others), and prints both: busy time and the top functions by
// self time, in ms.
//
//   node bench/bench.mjs profile cold [build dir=build] [wasm=target/wasm-names/index_bg.wasm] [top=25]
//
// The profiler samples every 50 µs here, and an attached profiler changes what it measures a
// little (V8 logs every function it compiles); compare the two profiles with each other, not
// with `bench.mjs cold`'s figures.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { pool, send } from "../load.mjs";
import { profiledPayment as payment, startNamedWorker, summarizeProfile } from "../profile.mjs";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");
const [buildArg = "build", wasmArg = "target/wasm-names/index_bg.wasm", topArg = "25"] = process.argv.slice(2);
const { worker: w, stop } = await startNamedWorker({ rootDir: ROOT, build: buildArg, wasm: wasmArg, name: "bench-profile-cold" });
const id = Date.now().toString(36);
const agent = pool(1);
const first = await w.profile(() => send(agent, w, payment(`${id}-cold`)));
for (let i = 0; i < 20; i++) await send(agent, w, payment(`${id}-warmup-${i}`));
const warm = await w.profile(() => send(agent, w, payment(`${id}-warm`)));
for (const [name, { profile }] of Object.entries({ first, warm })) {
  fs.mkdirSync(path.join(ROOT, "target/bench"), { recursive: true });
  fs.writeFileSync(path.join(ROOT, `target/bench/profile-cold-${name}.cpuprofile`), JSON.stringify(profile));
  const s = summarizeProfile(profile, Number(topArg));
  console.log(`\n## ${name} request: isolate busy ${s.busyMs} ms`);
  console.log("| category | ms |\n|---|--:|");
  for (const c of s.categories.slice(0, 10)) console.log(`| ${c.name} | ${c.ms} |`);
  console.log("| function (self time) | ms |\n|---|--:|");
  for (const f of s.functions) console.log(`| ${f.name.slice(0, 110).replace(/\|/g, "\\|")} | ${f.ms} |`);
  console.log("| runtime API call ← caller | ms |\n|---|--:|");
  for (const f of s.runtimeApiByRustCaller.slice(0, 10)) console.log(`| ${f.name.slice(0, 110).replace(/\|/g, "\\|")} | ${f.ms} |`);
}
await stop();
process.exit(0);
