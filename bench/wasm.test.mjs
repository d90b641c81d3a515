// The benchmark's copies of scripts/build.sh's wasm-opt settings (bench/lib/wasm.mjs) against
// build.sh itself: a tool that measured a Wasm optimised otherwise than the shipped one would
// report figures for a Wasm nobody ships.
import assert from "node:assert/strict";
import fs from "node:fs";
import test from "node:test";
import { WASM_OPT_FEATURES, WASM_OPT_SHIPPED } from "./lib/wasm.mjs";

const buildSh = fs.readFileSync(new URL("../scripts/build.sh", import.meta.url), "utf8");

/** The words of a bash array assignment `name=(...)` in build.sh. */
function bashArray(name) {
  const match = buildSh.match(new RegExp(`^${name}=\\(([^)]*)\\)`, "m"));
  assert.ok(match, `scripts/build.sh assigns ${name}=(...)`);
  return match[1].split(/\s+/).filter(Boolean);
}

test("the features are build.sh's", () => {
  assert.deepEqual(WASM_OPT_FEATURES, bashArray("features"));
});

test("the shipped optimisation is build.sh's", () => {
  assert.deepEqual(WASM_OPT_SHIPPED, [...bashArray("assume"), "-Oz", ...bashArray("inline")]);
  // Both of build.sh's wasm-opt runs use them, in that order.
  const runs = buildSh.split("\n").filter((line) => line.startsWith('"$wasm_opt"'));
  assert.equal(runs.length, 2);
  for (const run of runs) assert.match(run, /"\$\{features\[@\]\}" "\$\{assume\[@\]\}" -Oz "\$\{inline\[@\]\}"/);
});
