// A/B of two builds of the worker: the same phase against both, interleaved round by round
// (order alternating), medians of the rounds. Small differences drown in this machine's
// noise when two full benchmark runs are compared; interleaving in one process shows them.
//
//   node bench/bench.mjs ab DIR_A DIR_B [replay|first|burst] [rounds=6] [connections=16] [ms=2000]
//
// DIR_A or DIR_B may also name a ladder target (`js-do-claim`, `js-do-claim-mark`,
// `js-do-claim-rpc`, `js-do-claim-kept`, `js-do-claim-kept-quiet`, `js-do-claim-kept-lean`,
// `js-do-claim-kept-quiet-lean`, `js-do-sql`, `js-do`) to set the worker against plain JS in
// the same process. DIR_A and DIR_B are otherwise build directories (index.js, index_bg.wasm, worker/shim.mjs), e.g. a
// copy of build/ from two commits. Prints per build: median req/s, median p50 and median
// workerd CPU per request, and each round's p99. For `burst` (100 concurrent requests for one new key, origin
// delay 300 ms) the p50 column is the last response − 300 ms and the CPU column the first
// response − 300 ms. Set AB_BODY=524288 for a 512 KiB answer in the burst.
// AB_JWT=a, b or both: that target scopes keys by a verified claim (SCOPE_JWT_CLAIM=sub, an
// inline JWKS with one P-256 key made here) and every request carries one ES256 token for
// one subject, as a client reusing its access token does; the others send an opaque key.
// With AB_JWT_FRESH=1 every request carries a new token (a new `jti`), so none is found in
// the worker's cache of verified tokens: the cost of a signature check every time.
// AB_JWT_ALG=HS256 signs with an HMAC secret (SCOPE_JWT_HS256_SECRET) instead of ES256.
// AB_VARS_A / AB_VARS_B: extra variables for one side, as JSON, e.g. the same build twice with
// AB_VARS_B='{"LOG_DECISIONS":"problems"}' to measure the cost of the decision log lines.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { writeConfig, startWorker, startBenchOrigin } from "../workers.mjs";
import { pool, send, runLoad } from "../load.mjs";
import { cpuMs, settle } from "../proc.mjs";
import crypto from "node:crypto";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");
const WORK = fs.mkdtempSync(path.join(os.tmpdir(), "idempotency-edge-ab-"));
const [dirA, dirB, phase = "replay", roundsArg = "6", connArg = "16", msArg = "2000"] = process.argv.slice(2);
if (!dirA || !dirB) {
  console.error("usage: node bench/bench.mjs ab DIR_A DIR_B [replay|first|burst] [rounds] [connections] [ms]");
  process.exit(2);
}
const rounds = Number(roundsArg);
const conns = Number(connArg);
const durationMs = Number(msArg);


// An ES256 key, its JWKS and one token (sub acct_bench, valid for an hour).
function jwtScope() {
  const { privateKey, publicKey } = crypto.generateKeyPairSync("ec", { namedCurve: "P-256" });
  const b64 = (x) => Buffer.from(x).toString("base64url");
  const jwk = { ...publicKey.export({ format: "jwk" }), kid: "bench-1" };
  const exp = Math.floor(Date.now() / 1000) + 3600;
  let jti = 0;
  const hs256 = process.env.AB_JWT_ALG === "HS256";
  const secret = crypto.randomBytes(32).toString("hex");
  const mint = () => {
    const claims = { sub: "acct_bench", exp, jti: String(jti++) };
    const header = hs256 ? { alg: "HS256" } : { alg: "ES256", kid: "bench-1" };
    const input = `${b64(JSON.stringify(header))}.${b64(JSON.stringify(claims))}`;
    const signature = hs256
      ? crypto.createHmac("sha256", secret).update(input).digest()
      : crypto.sign("sha256", Buffer.from(input), { key: privateKey, dsaEncoding: "ieee-p1363" });
    return `Bearer ${input}.${b64(signature)}`;
  };
  const reused = mint();
  return {
    vars: { SCOPE_JWT_CLAIM: "sub", ...(hs256 ? { SCOPE_JWT_HS256_SECRET: secret } : { SCOPE_JWKS: JSON.stringify({ keys: [jwk] }) }) },
    authorization: () => (process.env.AB_JWT_FRESH ? mint() : reused),
  };
}
const JWT = jwtScope();
const usesJwt = (name) => ["both", name].includes(process.env.AB_JWT);

const payment = (key, extra = {}, name = "a") => ({
  method: "POST",
  path: "/v1/payments",
  headers: {
    "content-type": "application/json",
    authorization: usesJwt(name) ? JWT.authorization() : "Bearer sk_test_bench",
    "idempotency-key": key,
    ...extra,
  },
  body: Buffer.from(
    JSON.stringify({ amount: 1999, currency: "eur", customer: "cus_bench_0001", description: "Benchmark payment", metadata: { order: key.slice(-24) } }),
  ),
});

const origin = await startBenchOrigin(ROOT);
const targets = {};
for (const [name, dir] of [["a", dirA], ["b", dirB]]) {
  const file = path.join(WORK, `${name}.toml`);
  if (dir.startsWith("js-do")) {
    // A ladder target instead of a build (bench/targets/ladder.mjs), e.g. js-do-claim.
    const date = fs.readFileSync(path.join(ROOT, "wrangler.toml"), "utf8").match(/^compatibility_date\s*=\s*"([^"]+)"/m)[1];
    writeConfig(file, {
      base:
        `name = "ab-${name}"\nmain = "x"\ncompatibility_date = "${date}"\n` +
        '[[durable_objects.bindings]]\nname = "LADDER"\nclass_name = "LadderObject"\n\n[[migrations]]\ntag = "v1"\nnew_sqlite_classes = ["LadderObject"]\n',
      main: path.join(ROOT, "bench/targets/ladder.mjs"),
      vars: { ORIGIN_URL: `http://127.0.0.1:${origin.port}`, LADDER_MODE: dir.slice("js-".length) },
    });
    targets[name] = await startWorker({ name, config: file, persistDir: path.join(WORK, `state-${name}`), registryDir: path.join(WORK, "registry") });
    targets[name].agent = pool(conns);
    continue;
  }
  writeConfig(file, {
    from: path.join(ROOT, "wrangler.toml"),
    main: path.join(path.resolve(dir), "worker/shim.mjs"),
    vars: {
      ORIGIN_URL: `http://127.0.0.1:${origin.port}`,
      ...(usesJwt(name) ? JWT.vars : {}),
      ...JSON.parse(process.env[`AB_VARS_${name.toUpperCase()}`] || "{}"),
    },
  });
  fs.writeFileSync(file, fs.readFileSync(file, "utf8").replace(/^name\s*=.*$/m, `name = "ab-${name}"`));
  targets[name] = await startWorker({ name, config: file, persistDir: path.join(WORK, `state-${name}`), registryDir: path.join(WORK, "registry") });
  targets[name].agent = pool(conns);
}

const results = { a: [], b: [] };
// Answers by status, per target: a target that fails fast would otherwise look fast.
const answered = { a: {}, b: {} };
const id = Date.now().toString(36);
// Round -1 warms both up and is not counted.
for (let r = -1; r < rounds; r++) {
  for (const name of r % 2 ? ["a", "b"] : ["b", "a"]) {
    const t = targets[name];
    const key = `${id}-${name}-${r}`;
    if (phase === "burst") {
      const agent = pool(100);
      const extra = { "x-bench-delay-ms": "300", ...(process.env.AB_BODY ? { "x-bench-response-bytes": process.env.AB_BODY } : {}) };
      await settle([t.pid]);
      const started = performance.now();
      const answers = await Promise.all(Array.from({ length: 100 }, () => send(agent, t, payment(key, extra, name))));
      agent.destroy();
      const ends = answers.map((a) => a.end - started - 300);
      if (r >= 0) results[name].push({ rps: 0, p50: Math.max(...ends), cpu: Math.min(...ends) });
      continue;
    }
    if (phase === "replay") await send(t.agent, t, payment(key, {}, name));
    await settle([t.pid]);
    const cpu0 = cpuMs(t.pid);
    const self0 = process.cpuUsage();
    const out = await runLoad({
      agent: t.agent,
      target: t,
      connections: conns,
      durationMs,
      makeRequest: (i) => payment(phase === "replay" ? key : `${key}-${i}`, {}, name),
    });
    await settle([t.pid]);
    // This process: the load generator and wrangler's DevEnv, which receives the worker's log
    // lines (console.log) from workerd; the lines' cost outside the isolate shows here.
    const self = process.cpuUsage(self0);
    if (r >= 0) results[name].push({ rps: out.rps, p50: out.p50, p99: out.p99, cpu: (cpuMs(t.pid) - cpu0) / out.requests, node: (self.user + self.system) / 1000 / out.requests });
    for (const [status, count] of Object.entries(out.statuses)) answered[name][status] = (answered[name][status] ?? 0) + count;
  }
}

const median = (xs) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)];
for (const [name, dir] of [["a", dirA], ["b", dirB]]) {
  const rs = results[name];
  console.log(
    `${name.toUpperCase()} ${dir}: req/s ${median(rs.map((x) => x.rps)).toFixed(0)}  p50 ${median(rs.map((x) => x.p50)).toFixed(2)} ms  ` +
      `CPU ${median(rs.map((x) => x.cpu)).toFixed(3)} ms/req  (rounds: ${rs.map((x) => x.cpu.toFixed(2)).join(" ")})` +
      (rs[0]?.p99 != null ? `  p99 median ${median(rs.map((x) => x.p99)).toFixed(1)} ms (rounds: ${rs.map((x) => x.p99.toFixed(0)).join(" ")})` : "") +
      (rs[0]?.node != null ? `  node (load + log receiver) ${median(rs.map((x) => x.node)).toFixed(3)} ms/req` : ""),
  );
  const statuses = Object.entries(answered[name]);
  if (statuses.length) {
    const failed = statuses.filter(([status]) => !status.startsWith("2"));
    console.log(`  answers: ${statuses.map(([status, count]) => `${count} × ${status}`).join(", ")}${failed.length ? "  ← NOT ALL 2xx: these figures are not of the path measured" : ""}`);
  }
}
for (const t of Object.values(targets)) await t.dispose();
origin.stop();
fs.rmSync(WORK, { recursive: true, force: true });
process.exit(0);
