// The benchmark's origin: a fast HTTP/1.1 server on loopback, run as a child process of
// `bench.mjs run` (so it gets its own event loop and its CPU can be read from /proc).
//
// - Every request counts as one execution of its Idempotency-Key (requests without a key
//   are counted too, under no key).
// - Answers after the delay given by `--delay-ms N` (or BENCH_ORIGIN_DELAY_MS; default 0),
//   the time a real payment API takes; `x-bench-delay-ms: N` on a request overrides it (the
//   coalesced burst and the latency phase use 300);
//   `x-bench-response-bytes: N` answers N bytes instead of the small JSON body.
// - Answers 201 with a small JSON body, like a payment API creating a charge.
// - Keep-alive, no request or header timeouts that would cut a benchmark short.
//
// Control is over the IPC channel that child_process.fork opens:
//   { cmd: "count", prefix }  -> { executions, distinctKeys, keysOverOne, maxPerKey }
//   { cmd: "count", key }     -> the same for one key, plus arrivedAt (wall-clock ms of its
//                                first request, to compare with the load generator's clock)
//   { cmd: "reset" }          -> forget every key
import http from "node:http";

const executions = new Map(); // key -> number of executions
const firstArrival = new Map(); // key -> wall-clock ms (fractional) when its first request arrived
const wallNow = () => performance.timeOrigin + performance.now();
let total = 0;
let sequence = 0;

const delayArg = process.argv.indexOf("--delay-ms");
const DEFAULT_DELAY_MS = Number(delayArg >= 0 ? process.argv[delayArg + 1] : process.env.BENCH_ORIGIN_DELAY_MS ?? 0);

const server = http.createServer({ keepAliveTimeout: 120_000, requestTimeout: 0, headersTimeout: 0 }, (req, res) => {
  const arrived = wallNow();
  const chunks = [];
  req.on("data", (chunk) => chunks.push(chunk));
  req.on("end", () => {
    total += 1;
    const key = req.headers["idempotency-key"] ?? "";
    executions.set(key, (executions.get(key) ?? 0) + 1);
    if (!firstArrival.has(key)) firstArrival.set(key, arrived);
    const id = ++sequence;
    const padding = Number(req.headers["x-bench-response-bytes"] ?? 0);
    const body = padding > 0
      ? Buffer.alloc(padding, 0x61)
      : Buffer.from(
          JSON.stringify({ id: `pay_${id}`, object: "payment", status: "succeeded", received_bytes: Buffer.concat(chunks).length }),
        );
    const answer = () => {
      res.writeHead(201, { "content-type": "application/json", "content-length": body.length, "x-request-id": `req_${id}` });
      res.end(body);
    };
    const delay = Number(req.headers["x-bench-delay-ms"] ?? DEFAULT_DELAY_MS);
    if (delay > 0) setTimeout(answer, delay);
    else answer();
  });
});
server.keepAliveTimeout = 120_000;

process.on("message", (message) => {
  if (message.cmd === "count") {
    let count = 0;
    let distinctKeys = 0;
    let keysOverOne = 0;
    let maxPerKey = 0;
    for (const [key, n] of executions) {
      if (message.key !== undefined ? key !== message.key : !key.startsWith(message.prefix)) continue;
      count += n;
      distinctKeys += 1;
      if (n > 1) keysOverOne += 1;
      maxPerKey = Math.max(maxPerKey, n);
    }
    const arrivedAt = message.key !== undefined ? firstArrival.get(message.key) ?? null : null;
    process.send({ id: message.id, executions: count, distinctKeys, keysOverOne, maxPerKey, total, arrivedAt });
  } else if (message.cmd === "reset") {
    executions.clear();
    firstArrival.clear();
    process.send({ id: message.id, ok: true });
  }
});
process.on("disconnect", () => process.exit(0));

server.listen(0, "127.0.0.1", () => {
  process.send({ ready: true, port: server.address().port });
});
