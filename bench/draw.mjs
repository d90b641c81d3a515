// Draws a benchmark result as SVG: node bench/draw.mjs [RESULT.json [OUT.svg]].
// Defaults: target/bench/latest.json, and the same name with .svg beside it. `bench.mjs run`
// draws its own result at the end of a run; this redraws an existing one (an older result
// without latency quantiles is drawn from its p50 and p99).
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { drawResult } from "./lib/svg.mjs";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const input = path.resolve(process.argv[2] ?? path.join(ROOT, "target", "bench", "latest.json"));
const output = path.resolve(process.argv[3] ?? input.replace(/\.json$/, "") + ".svg");
fs.writeFileSync(output, drawResult(JSON.parse(fs.readFileSync(input, "utf8"))));
console.log(`wrote ${path.relative(process.cwd(), output)}`);
