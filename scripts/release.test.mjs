// Tests of scripts/release.mjs: its rules as functions, and both flows end to end against a
// stand-in for wrangler (a script that records its arguments and answers as wrangler 4.86
// prints), a stand-in for the conformance checker, and an Analytics Engine SQL endpoint on
// loopback that answers what each scenario says. Cloudflare's API is not reachable here, so
// what these tests prove is the script's decisions and the commands it gives, not the
// platform's answers to them.

import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { chmodSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { crateVersion, judge, minRollback, olderThan, watchQuery } from "./release.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const CURRENT = "11111111-1111-4111-8111-111111111111";
const FRESH = "22222222-2222-4222-8222-222222222222";

test("the watch query is the one docs/deploy.md shows (and the schema tests check)", () => {
  const doc = readFileSync(join(root, "docs/deploy.md"), "utf8");
  assert.ok(doc.includes("```sql\n" + watchQuery("idempotency_edge", 15) + "\n```"), "docs/deploy.md lacks the watch query");
});

test("the version and the rollback floor come from Cargo.toml", () => {
  const toml = '[package]\nname = "x"\nversion = "1.4.2"\n\n[package.metadata.release]\nmin_rollback = "1.3.0"\n\n[dependencies]\nversion = "9"\n';
  assert.equal(crateVersion(toml), "1.4.2");
  assert.equal(minRollback(toml), "1.3.0");
  assert.equal(minRollback('[package]\nversion = "1.0.0"\n'), undefined);
  assert.equal(crateVersion(readFileSync(join(root, "Cargo.toml"), "utf8")).split(".").length, 3);
  assert.ok(olderThan("1.2.9", "1.3.0") && olderThan("v0.9.0", "1.0.0"));
  assert.ok(!olderThan("1.3.0", "1.3.0") && !olderThan("1.10.0", "1.9.0"));
});

test("the judge rolls back on extra 5xx, promotes at the end, and never decides on too little traffic", () => {
  const limits = { minRequests: 50, maxExtraErrorShare: 0.005 };
  const rows = (fresh, freshErrors, base, baseErrors) => [
    { version: FRESH, requests: fresh, errors: freshErrors },
    { version: CURRENT, requests: base, errors: baseErrors },
  ];
  assert.equal(judge(rows(100, 5, 900, 9), FRESH, { ...limits, final: false }), "rollback", "5 % against 1 %");
  assert.equal(judge(rows(100, 1, 900, 9), FRESH, { ...limits, final: false }), "wait");
  assert.equal(judge(rows(100, 1, 900, 9), FRESH, { ...limits, final: true }), "promote");
  assert.equal(judge(rows(10, 5, 900, 0), FRESH, { ...limits, final: false }), "wait", "10 requests decide nothing");
  assert.equal(judge(rows(10, 0, 900, 0), FRESH, { ...limits, final: true }), "undecided");
  assert.equal(judge([], FRESH, { ...limits, final: true }), "undecided");
});

/// A stand-in wrangler: appends its arguments to `log` (one JSON array a line) and prints
/// what wrangler 4.86 prints for the commands the script gives.
function fakeWrangler(dir) {
  const log = join(dir, "wrangler.log");
  const bin = join(dir, "wrangler");
  writeFileSync(
    bin,
    `#!/usr/bin/env node
const fs = require("node:fs");
const args = process.argv.slice(2);
fs.appendFileSync(${JSON.stringify(log)}, JSON.stringify(args) + "\\n");
const is = (...words) => words.every((w, i) => args[i] === w);
if (is("deployments", "status")) console.log(JSON.stringify({ id: "d1", versions: [{ version_id: "${CURRENT}", percentage: 100 }] }));
else if (is("versions", "upload")) console.log("Uploaded idempotency-edge (1.00 sec)\\nWorker Version ID: ${FRESH}\\nVersion Preview URL: none");
else if (is("versions", "view")) console.log(JSON.stringify({ id: args[2], annotations: { "workers/tag": "v0.1.0" } }));
else if (is("versions", "deploy")) console.log("SUCCESS  Deployed");
else { console.error("unexpected: " + args.join(" ")); process.exit(2); }
`,
  );
  chmodSync(bin, 0o755);
  const calls = () =>
    readFileSync(log, "utf8")
      .trim()
      .split("\n")
      .map((line) => JSON.parse(line));
  return { bin, calls };
}

/// An Analytics Engine SQL endpoint on loopback: answers each query with `rows(n)` for the
/// n-th query, and checks the bearer token.
async function sqlEndpoint(rows) {
  let asked = 0;
  const server = createServer((req, res) => {
    let body = "";
    req.on("data", (chunk) => (body += chunk));
    req.on("end", () => {
      if (req.headers.authorization !== "Bearer test-token" || !body.includes("FROM idempotency_edge")) {
        res.writeHead(401).end("{}");
        return;
      }
      asked += 1;
      res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ data: rows(asked) }));
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { url: `http://127.0.0.1:${server.address().port}/sql`, close: () => server.close(), asked: () => asked };
}

function run(args, env) {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [join(root, "scripts/release.mjs"), ...args], {
      cwd: root,
      env: { ...process.env, RELEASE_MINUTE_MS: "20", CF_ANALYTICS_TOKEN: "test-token", ...env },
    });
    let output = "";
    child.stdout.on("data", (d) => (output += d));
    child.stderr.on("data", (d) => (output += d));
    child.on("close", (code) => resolve({ code, output }));
  });
}

const deploys = (calls) => calls.filter((c) => c[0] === "versions" && c[1] === "deploy").map((c) => c.slice(2, c.indexOf("--env")));

test("production: a healthy version goes to the percentage, then to 100 %", async () => {
  const dir = mkdtempSync(join(tmpdir(), "release-"));
  const wrangler = fakeWrangler(dir);
  const sql = await sqlEndpoint(() => [
    { version: FRESH, requests: 120, errors: 1 },
    { version: CURRENT, requests: 1000, errors: 8 },
  ]);
  const { code, output } = await run(["production", "--percent", "10", "--watch-minutes", "3", "--min-requests", "100"], {
    WRANGLER: wrangler.bin,
    AE_SQL_URL: sql.url,
  });
  sql.close();
  assert.equal(code, 0, output);
  const upload = wrangler.calls().find((c) => c[1] === "upload");
  assert.deepEqual(upload.slice(0, 5), ["versions", "upload", "--env", "production", "--tag"]);
  assert.match(upload[5], /^v\d+\.\d+\.\d+$/);
  assert.deepEqual(deploys(wrangler.calls()), [[`${FRESH}@10%`, `${CURRENT}@90%`], [`${FRESH}@100%`]]);
  assert.equal(sql.asked(), 3, "watched every minute until the end");
});

test("production: extra 5xx roll back at once to the version that served", async () => {
  const dir = mkdtempSync(join(tmpdir(), "release-"));
  const wrangler = fakeWrangler(dir);
  const sql = await sqlEndpoint((n) => [
    { version: FRESH, requests: 60 * n, errors: n === 1 ? 0 : 6 * n },
    { version: CURRENT, requests: 600 * n, errors: 0 },
  ]);
  const { code, output } = await run(["production", "--watch-minutes", "5"], { WRANGLER: wrangler.bin, AE_SQL_URL: sql.url });
  sql.close();
  assert.equal(code, 1, output);
  assert.deepEqual(deploys(wrangler.calls()), [[`${FRESH}@10%`, `${CURRENT}@90%`], [`${CURRENT}@100%`]]);
  assert.equal(sql.asked(), 2, "rolled back at the second minute, without waiting for the end");
});

test("production: too little traffic decides nothing and leaves the split", async () => {
  const dir = mkdtempSync(join(tmpdir(), "release-"));
  const wrangler = fakeWrangler(dir);
  const sql = await sqlEndpoint(() => [{ version: FRESH, requests: 3, errors: 3 }]);
  const { code, output } = await run(["production", "--watch-minutes", "2"], { WRANGLER: wrangler.bin, AE_SQL_URL: sql.url });
  sql.close();
  assert.equal(code, 2, output);
  assert.deepEqual(deploys(wrangler.calls()), [[`${FRESH}@10%`, `${CURRENT}@90%`]]);
});

test("staging: a failed conformance check rolls staging back; a passed one keeps the version", async () => {
  for (const [checkerExit, expected] of [
    [1, [[`${FRESH}@100%`], [`${CURRENT}@100%`]]],
    [0, [[`${FRESH}@100%`]]],
  ]) {
    const dir = mkdtempSync(join(tmpdir(), "release-"));
    const wrangler = fakeWrangler(dir);
    const checker = join(dir, "checker");
    const seen = join(dir, "checker.args");
    writeFileSync(checker, `#!/bin/sh\necho "$@" > ${seen}\nexit ${checkerExit}\n`);
    chmodSync(checker, 0o755);
    const { code, output } = await run(["staging", "--url", "http://127.0.0.1:9/v1/charges", "--credential-env", "TEST_API_KEY"], {
      WRANGLER: wrangler.bin,
      CHECKER: checker,
    });
    assert.equal(code, checkerExit, output);
    assert.deepEqual(deploys(wrangler.calls()), expected);
    assert.equal(readFileSync(seen, "utf8").trim(), "--url http://127.0.0.1:9/v1/charges --credential-env TEST_API_KEY");
  }
});

test("a missing analytics token stops before anything is deployed", async () => {
  const dir = mkdtempSync(join(tmpdir(), "release-"));
  const wrangler = fakeWrangler(dir);
  const { code, output } = await run(["production"], { WRANGLER: wrangler.bin, CF_ANALYTICS_TOKEN: "", CF_ACCOUNT_ID: "" });
  assert.equal(code, 1, output);
  assert.match(output, /CF_ANALYTICS_TOKEN/);
  assert.deepEqual(deploys(safeCalls(wrangler)), []);
});

function safeCalls(wrangler) {
  try {
    return wrangler.calls();
  } catch {
    return [];
  }
}
