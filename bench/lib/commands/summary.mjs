// `node bench/bench.mjs summary [--run FILE] [--cost FILE] [--date YYYY-MM-DD] [--write]`:
// reduces a run's result and a cost count to docs/performance-summary.json and prints the
// README's performance lines; with --write, writes both the file and the README's block.
// The README's figures come from here only (bench/summary.test.mjs checks them).
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { readmeLines, summarize, withReadmeBlock } from "../summary.mjs";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");
const args = process.argv.slice(2);
const option = (name, fallback) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : fallback;
};
const runFile = option("--run", path.join(ROOT, "target/bench/latest.json"));
const costFile = option("--cost", path.join(ROOT, "target/bench/cost.json"));
const date = option("--date", new Date().toISOString().slice(0, 10));
for (const [file, command] of [[runFile, "run"], [costFile, "cost"]]) {
  if (!fs.existsSync(file)) {
    console.error(`summary: ${file} is missing; run \`node bench/bench.mjs ${command}\` first`);
    process.exit(2);
  }
}
const summary = summarize(JSON.parse(fs.readFileSync(runFile, "utf8")), JSON.parse(fs.readFileSync(costFile, "utf8")), { date });
const lines = readmeLines(summary);
console.log(lines.join("\n"));
if (args.includes("--write")) {
  fs.writeFileSync(path.join(ROOT, "docs/performance-summary.json"), JSON.stringify(summary, null, 2) + "\n");
  const readme = path.join(ROOT, "README.md");
  fs.writeFileSync(readme, withReadmeBlock(fs.readFileSync(readme, "utf8"), lines));
  console.log("\nwrote docs/performance-summary.json and README.md's performance lines");
}
