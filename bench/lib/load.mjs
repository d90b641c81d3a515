// The load generator: node's own HTTP/1.1 client with keep-alive connections, N requests in
// flight at a time (one per connection), bounded by a duration and a request count.
import http from "node:http";
import { percentile, round } from "./stats.mjs";

/** The latency quantiles a load result keeps, so that bench/lib/svg.mjs can draw the
 * distribution and not only its p50 and p99. */
export const QUANTILES = [1, 5, 10, 25, 50, 75, 90, 95, 99, 99.9];

/** `[[q, ms], …]` of sorted `values`. */
export function quantiles(sorted) {
  return sorted.length ? QUANTILES.map((q) => [q, round(percentile(sorted, q), 3)]) : [];
}

/** A keep-alive connection pool of `connections` sockets for one target. */
export function pool(connections) {
  return new http.Agent({ keepAlive: true, maxSockets: connections, maxFreeSockets: connections, scheduling: "fifo" });
}

/**
 * Sends one request. `target` is { host, port, hostHeader? }; `request` is
 * { method, path, headers, body }. Resolves { status, replayed, ms, retried }.
 * A request that fails on a reused keep-alive socket before any answer (the server closed
 * it while idle) is sent again once, as HTTP clients do; `retried` says so.
 */
export function send(agent, target, request, retried = false) {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const headers = { ...request.headers, "content-length": request.body ? request.body.length : 0 };
    if (target.hostHeader) headers.host = target.hostHeader;
    const req = http.request(
      { agent, host: target.host, port: target.port, method: request.method, path: request.path, headers },
      (res) => {
        res.on("data", () => {});
        res.on("end", () =>
          resolve({
            status: res.statusCode,
            replayed: res.headers["idempotent-replayed"] === "true",
            ms: performance.now() - started,
            end: performance.now(),
            retried,
          }),
        );
        res.on("error", reject);
      },
    );
    req.on("error", (error) => {
      if (req.reusedSocket && !retried && (error.code === "ECONNRESET" || error.code === "EPIPE")) {
        send(agent, target, request, true).then(resolve, reject);
      } else {
        reject(error);
      }
    });
    if (request.body) req.end(request.body);
    else req.end();
  });
}

/**
 * Runs `connections` loops, each sending one request after another, until `durationMs` has
 * passed or `maxRequests` were sent. `makeRequest(i)` builds request number i.
 * `onResult(i, result)` sees every answer.
 */
export async function runLoad({ agent, target, connections, durationMs = Infinity, maxRequests = Infinity, makeRequest, onResult }) {
  const latencies = [];
  const statuses = {};
  let issued = 0;
  let errors = 0;
  let retries = 0;
  let replayed = 0;
  const firstError = [];
  const started = performance.now();
  const deadline = started + durationMs;
  let lastEnd = started;
  async function loop() {
    while (performance.now() < deadline && issued < maxRequests) {
      const i = issued++;
      try {
        const result = await send(agent, target, makeRequest(i));
        latencies.push(result.ms);
        statuses[result.status] = (statuses[result.status] ?? 0) + 1;
        if (result.replayed) replayed += 1;
        if (result.retried) retries += 1;
        lastEnd = Math.max(lastEnd, result.end);
        onResult?.(i, result);
      } catch (error) {
        errors += 1;
        if (firstError.length === 0) firstError.push(String(error?.message ?? error));
      }
    }
  }
  await Promise.all(Array.from({ length: connections }, loop));
  const elapsedMs = lastEnd - started;
  latencies.sort((a, b) => a - b);
  return {
    requests: latencies.length,
    errors,
    retries,
    replayed,
    statuses,
    firstError: firstError[0],
    elapsedMs,
    rps: latencies.length / (elapsedMs / 1000),
    p50: percentile(latencies, 50),
    p99: percentile(latencies, 99),
    latencyQuantiles: quantiles(latencies),
  };
}
