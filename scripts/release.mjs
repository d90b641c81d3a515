#!/usr/bin/env node
// The release and deploy story as commands (docs/deploy.md, "Releasing").
//
//   node scripts/release.mjs staging --url URL [checker options …]
//   node scripts/release.mjs production [--percent 10] [--watch-minutes 15] [--dataset idempotency_edge]
//
// Both upload the working tree as a new version tagged `v<version>` (the worker crate's
// version in Cargo.toml, whose CHANGELOG section says what it holds), with the commit as its
// message, then:
//
// staging     deploys it to 100 % of staging, runs the conformance check
//             (`idempotency-edge-check`, docs/deploy.md section 9) against --url with the
//             remaining options, and on a failure deploys the version it replaced to 100 %
//             again and exits 1.
// production  deploys it beside the version that serves now, at --percent % of requests;
//             then, once a minute for --watch-minutes, reads from Analytics Engine how many
//             requests each version answered and how many of them were 5xx. The new version
//             is rolled back (the current one deployed to 100 % again, exit 1) as soon as its
//             5xx share exceeds the current one's by more than --max-extra-error-share
//             (default 0.5 percentage points) over at least --min-requests (default 50)
//             requests; at the end it is promoted to 100 % when it answered at least
//             --min-requests, and otherwise left at --percent with exit 2 (not enough traffic
//             to decide: run again, or promote by hand).
//
// Rolling back is safe only across releases that read each other's stored records: the
// compatibility table in docs/deploy.md says which. The script refuses a production rollout
// when the new version's Cargo.toml says `release.min_rollback` is newer than the version
// that serves (see that table).
//
// Environment: CF_ACCOUNT_ID and CF_ANALYTICS_TOKEN (Account Analytics: Read) for the
// production watch; WRANGLER (default node_modules/.bin/wrangler), CHECKER (default
// target/release/idempotency-edge-check), AE_SQL_URL (default Cloudflare's SQL API for the
// account) and RELEASE_MINUTE_MS (default 60000) exist for tests and other setups.

import { execFileSync, spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");

/// The query the production watch runs, per version: requests and 5xx answers over the last
/// `minutes` minutes, weighted by the sampling. docs/deploy.md shows it (and the
/// metrics-schema tests check it against the columns the worker writes).
export function watchQuery(dataset, minutes) {
  return `SELECT
    blob10 AS version,
    sum(_sample_interval) AS requests,
    sumIf(_sample_interval, double1 >= 500) AS errors
FROM ${dataset}
WHERE timestamp > NOW() - INTERVAL '${minutes}' MINUTE
GROUP BY version`;
}

/// The release's version: the worker crate's, from Cargo.toml.
export function crateVersion(cargoToml) {
  const pkg = cargoToml.split(/^\[/m).find((section) => section.startsWith("package]"));
  const match = pkg && pkg.match(/^version\s*=\s*"([^"]+)"/m);
  if (!match) throw new Error("Cargo.toml: no [package] version");
  return match[1];
}

/// The oldest release this one may be rolled back to (`[package.metadata.release]
/// min_rollback`), or undefined when any may.
export function minRollback(cargoToml) {
  const section = cargoToml.split(/^\[/m).find((s) => s.startsWith("package.metadata.release]"));
  const match = section && section.match(/^min_rollback\s*=\s*"([^"]+)"/m);
  return match ? match[1] : undefined;
}

/// Whether semver `a` is older than `b` (numeric major.minor.patch).
export function olderThan(a, b) {
  const parts = (v) => v.replace(/^v/, "").split(/[.+-]/).slice(0, 3).map(Number);
  const [x, y] = [parts(a), parts(b)];
  for (let i = 0; i < 3; i++) if (x[i] !== y[i]) return x[i] < y[i];
  return false;
}

/// The decision after one look: "rollback", "promote", "wait" (or "undecided" at the end).
export function judge(rows, candidate, { minRequests, maxExtraErrorShare, final }) {
  const of = (id) => rows.find((row) => row.version === id) ?? { requests: 0, errors: 0 };
  const fresh = of(candidate);
  const others = rows.filter((row) => row.version !== candidate);
  const baseRequests = others.reduce((n, row) => n + Number(row.requests), 0);
  const baseErrors = others.reduce((n, row) => n + Number(row.errors), 0);
  const share = (errors, requests) => (requests > 0 ? errors / requests : 0);
  const extra = share(Number(fresh.errors), Number(fresh.requests)) - share(baseErrors, baseRequests);
  if (Number(fresh.requests) >= minRequests && extra > maxExtraErrorShare) return "rollback";
  if (!final) return "wait";
  return Number(fresh.requests) >= minRequests ? "promote" : "undecided";
}

function parseArgs(argv) {
  const [command, ...rest] = argv;
  const options = { passThrough: [] };
  for (let i = 0; i < rest.length; i++) {
    const [flag, value] = [rest[i], rest[i + 1]];
    const take = (name, parse = String) => {
      if (value === undefined) throw new Error(`${flag} needs a value`);
      options[name] = parse(value);
      i++;
    };
    switch (flag) {
      case "--percent": take("percent", Number); break;
      case "--watch-minutes": take("watchMinutes", Number); break;
      case "--min-requests": take("minRequests", Number); break;
      case "--max-extra-error-share": take("maxExtraErrorShare", (v) => Number(v) / 100); break;
      case "--dataset": take("dataset"); break;
      default: options.passThrough.push(flag);
    }
  }
  return { command, options };
}

function wrangler(args) {
  const bin = process.env.WRANGLER ?? join(root, "node_modules/.bin/wrangler");
  const run = spawnSync(bin, args, { cwd: root, encoding: "utf8", env: { ...process.env, WRANGLER_SEND_METRICS: "false" } });
  if (run.status !== 0) {
    throw new Error(`wrangler ${args.join(" ")} failed (${run.status}):\n${run.stdout}${run.stderr}`);
  }
  return run.stdout;
}

/// The versions serving `env` now: [{ version_id, percentage }].
function serving(env) {
  const status = JSON.parse(wrangler(["deployments", "status", "--env", env, "--json"]));
  return status.versions ?? [];
}

/// The release tag of a version (`workers/tag`), without its `v`; "" when it has none.
function tagOf(env, id) {
  const view = JSON.parse(wrangler(["versions", "view", id, "--env", env, "--json"]));
  return (view.annotations?.["workers/tag"] ?? "").replace(/^v/, "");
}

function upload(env, version) {
  let message = "";
  try {
    message = execFileSync("git", ["rev-parse", "--short", "HEAD"], { cwd: root, encoding: "utf8" }).trim();
  } catch {
    message = "uncommitted";
  }
  const out = wrangler(["versions", "upload", "--env", env, "--tag", `v${version}`, "--message", `v${version} ${message}`]);
  const id = out.match(/Worker Version ID:\s*([0-9a-f-]{36})/i);
  if (!id) throw new Error(`wrangler versions upload printed no version id:\n${out}`);
  return id[1];
}

function deploy(env, split) {
  const specs = split.map(([id, percent]) => `${id}@${percent}%`);
  wrangler(["versions", "deploy", ...specs, "--env", env, "--yes"]);
  console.log(`[release] ${env}: ${specs.join(" ")}`);
}

function requireAnalytics() {
  if (!process.env.CF_ANALYTICS_TOKEN || (!process.env.CF_ACCOUNT_ID && !process.env.AE_SQL_URL)) {
    throw new Error("the production watch needs CF_ACCOUNT_ID and CF_ANALYTICS_TOKEN (Account Analytics: Read); nothing was deployed");
  }
}

async function query(sql) {
  const account = process.env.CF_ACCOUNT_ID;
  const token = process.env.CF_ANALYTICS_TOKEN;
  const url = process.env.AE_SQL_URL ?? `https://api.cloudflare.com/client/v4/accounts/${account}/analytics_engine/sql`;
  const answer = await fetch(url, { method: "POST", headers: { Authorization: `Bearer ${token}` }, body: sql });
  if (!answer.ok) throw new Error(`the Analytics Engine SQL API answered ${answer.status}`);
  return (await answer.json()).data ?? [];
}

async function staging(options) {
  const version = crateVersion(readFileSync(join(root, "Cargo.toml"), "utf8"));
  const before = serving("staging");
  const id = upload("staging", version);
  deploy("staging", [[id, 100]]);
  const checker = process.env.CHECKER ?? join(root, "target/release/idempotency-edge-check");
  const check = spawnSync(checker, options.passThrough, { cwd: root, stdio: "inherit" });
  if (check.status === 0) {
    console.log(`[release] staging: v${version} (${id}) passed the conformance check`);
    return 0;
  }
  console.error(`[release] staging: the conformance check failed (${check.status}); rolling back`);
  if (before.length) deploy("staging", before.map((v) => [v.version_id, v.percentage]));
  return 1;
}

async function production(options) {
  const cargoToml = readFileSync(join(root, "Cargo.toml"), "utf8");
  const version = crateVersion(cargoToml);
  const percent = options.percent ?? 10;
  const minutes = options.watchMinutes ?? 15;
  const limits = { minRequests: options.minRequests ?? 50, maxExtraErrorShare: options.maxExtraErrorShare ?? 0.005 };
  const dataset = options.dataset ?? "idempotency_edge";
  if (!(percent > 0 && percent < 100)) throw new Error("--percent: expected a number between 0 and 100");
  requireAnalytics();
  const before = serving("production");
  const current = before.find((v) => v.percentage === 100) ?? before[0];
  if (!current) throw new Error("production serves no version yet: deploy the first one with `npx wrangler deploy --env production`");
  const floor = minRollback(cargoToml);
  const currentTag = floor ? tagOf("production", current.version_id) : "";
  if (floor && (!currentTag || olderThan(currentTag, floor))) {
    throw new Error(`v${version} cannot be rolled back to ${currentTag ? `v${currentTag}` : "the untagged version that serves"} (min_rollback ${floor}): first release a version from ${floor} on (docs/deploy.md, compatibility table)`);
  }
  const id = upload("production", version);
  deploy("production", [[id, percent], [current.version_id, 100 - percent]]);
  const minute = Number(process.env.RELEASE_MINUTE_MS ?? 60_000);
  for (let elapsed = 1; elapsed <= minutes; elapsed++) {
    await new Promise((resolve) => setTimeout(resolve, minute));
    const rows = await query(watchQuery(dataset, elapsed));
    const verdict = judge(rows, id, { ...limits, final: elapsed === minutes });
    const fresh = rows.find((row) => row.version === id) ?? { requests: 0, errors: 0 };
    console.log(`[release] production, minute ${elapsed}: v${version} answered ${fresh.requests}, ${fresh.errors} of them 5xx: ${verdict}`);
    if (verdict === "rollback") {
      deploy("production", [[current.version_id, 100]]);
      console.error(`[release] production: v${version} rolled back`);
      return 1;
    }
    if (verdict === "promote") {
      deploy("production", [[id, 100]]);
      console.log(`[release] production: v${version} (${id}) promoted to 100 %`);
      return 0;
    }
    if (verdict === "undecided") {
      console.error(`[release] production: too little traffic to decide; v${version} stays at ${percent} %`);
      return 2;
    }
  }
  return 2;
}

async function main() {
  const { command, options } = parseArgs(process.argv.slice(2));
  switch (command) {
    case "staging": return staging(options);
    case "production": return production(options);
    default:
      console.error("usage: node scripts/release.mjs staging --url URL [checker options] | production [--percent P] [--watch-minutes M]");
      return 64;
  }
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  main().then(
    (code) => process.exit(code),
    (error) => {
      console.error(`[release] ${error.message}`);
      process.exit(1);
    },
  );
}
