// V8 CPU profiles of the worker's isolate with Rust function names: the same
// profiles as `bench.mjs run` takes (first attempts and replays at c16, over workerd's own
// inspector), but of the named copy of the Wasm that scripts/build.sh keeps in
// target/wasm-names/ (the shipped Wasm has no `name` section, so its frames are only
// `wasm-function[N]`). The named copy is the shipped code before the final -Oz pass.
//
//   node bench/bench.mjs profile named [build dir=build] [wasm=target/wasm-names/index_bg.wasm] [top=30]
//   node bench/bench.mjs profile named js-do-claim [ignored] [top=30]
//
// Prints, per phase, the isolate's busy time per request, the share (and ms per request) by
// category and the top functions by self time. Writes
// target/bench/profile-named-{first,replay}.cpuprofile. In place of a build directory, a
// ladder target as `bench.mjs ab` names it (`js-do-claim`, `js-do`, ...) is profiled the same
// way, so that the worker and the best peer's design can be read in one profiler's terms;
// its profiles go to target/bench/profile-named-TARGET-{first,replay}.cpuprofile. An
// attached profiler inflates small functions and moves the platform's own time between
// frames from run to run (the object call's `fetch` read 1.7 to 3.2 ms per first attempt
// across targets that differ only in their storage calls): compare categories of our own
// code, not the platform's, and measure a change with `bench.mjs ab`.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { pool, send, runLoad } from "../load.mjs";
import { profiledPayment as payment, startLadderWorker, startNamedWorker, summarizeProfile } from "../profile.mjs";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");
const [buildArg = "build", wasmArg = "target/wasm-names/index_bg.wasm", topArg = "30"] = process.argv.slice(2);
const ladder = buildArg.startsWith("js-do");
const { worker: w, stop } = ladder
  ? await startLadderWorker({ rootDir: ROOT, target: buildArg, name: "bench-profile-ladder" })
  : await startNamedWorker({ rootDir: ROOT, build: buildArg, wasm: wasmArg, name: "bench-profile-named" });
const id = Date.now().toString(36);
const agent = pool(16);
await runLoad({ agent, target: w, connections: 16, durationMs: 2000, makeRequest: (i) => payment(`${id}-warm-${i}`) });
const first = await w.profile(() => runLoad({ agent, target: w, connections: 16, durationMs: 3000, makeRequest: (i) => payment(`${id}-first-${i}`) }));
await send(agent, w, payment(`${id}-replay`));
const replayRequest = payment(`${id}-replay`);
const replay = await w.profile(() => runLoad({ agent, target: w, connections: 16, durationMs: 3000, makeRequest: () => replayRequest }));
for (const [name, { result, profile }] of Object.entries({ first, replay })) {
  fs.mkdirSync(path.join(ROOT, "target/bench"), { recursive: true });
  const file = ladder ? `profile-named-${buildArg}-${name}.cpuprofile` : `profile-named-${name}.cpuprofile`;
  fs.writeFileSync(path.join(ROOT, "target/bench", file), JSON.stringify(profile));
  const s = summarizeProfile(profile, Number(topArg));
  console.log(`\n## ${name}: ${result.requests} requests, isolate busy ${(s.busyMs / result.requests).toFixed(3)} ms/request`);
  console.log("| category | share % | ms per request |\n|---|--:|--:|");
  for (const c of s.categories.slice(0, 12)) console.log(`| ${c.name} | ${c.share} | ${(c.ms / result.requests).toFixed(3)} |`);
  console.log("| function (self time) | share % |\n|---|--:|");
  for (const f of s.functions) console.log(`| ${f.name.slice(0, 110).replace(/\|/g, "\\|")} | ${f.share} |`);
}
await stop();
process.exit(0);
