// What a million payments cost at Cloudflare's list prices, from what a run counted.
//
// Prices (USD, Workers Paid plan, beyond the plan's included usage: the marginal cost):
// - Workers Standard: $0.30 per million requests, $0.02 per million CPU milliseconds
//   (https://developers.cloudflare.com/workers/platform/pricing/; the same figures are
//   quoted on https://developers.cloudflare.com/workflows/reference/pricing/, "identical to
//   Workers Standard pricing").
// - Durable Objects: $0.15 per million requests (alarm invocations included), $12.50 per
//   million GB-s of duration (wall-clock time while active, billed at 128 MB per object);
//   SQLite storage: $1.00 per million rows written, $0.001 per million rows read
//   (https://developers.cloudflare.com/durable-objects/platform/pricing/).
// Read on 2026-12-07; check the pages before quoting a figure.
//
// Two accountings of the same counts:
// - "the object holds the origin fetch" (the worker today): the object makes the origin
//   call, so its duration includes the origin's whole answer time;
// - "the Worker holds the fetch" (a projection, not measured): the object only claims and
//   settles (one more object request per first attempt), the Worker forwards; the object's
//   duration loses the origin's time. Workers Standard bills CPU, not wall time, so the
//   Worker's waiting costs nothing.

export const PRICES = {
  workerRequestsPerMillion: 0.3,
  workerCpuPerMillionMs: 0.02,
  objectRequestsPerMillion: 0.15,
  objectGbSecondsPerMillion: 12.5,
  objectMemoryGb: 0.128,
  rowsWrittenPerMillion: 1.0,
  rowsReadPerMillion: 0.001,
};

/**
 * Per payment, from a run's totals: { payments, workerRequests, workerCpuMs, objectRequests,
 * objectWallMs, rowsWritten, rowsRead? , firstAttempts?, originMs? }.
 */
export function perPayment(totals) {
  if (!(totals.payments > 0)) throw new Error("a run with no payment has no cost per payment");
  const out = {};
  for (const [name, value] of Object.entries(totals)) {
    if (name === "payments" || name === "originMs") continue;
    out[name] = value / totals.payments;
  }
  out.originMs = totals.originMs;
  return out;
}

/** The projection of "the Worker holds the fetch" from per-payment counts measured today. */
export function workerHoldsFetch(per) {
  const first = per.firstAttempts ?? 1;
  return {
    ...per,
    objectRequests: per.objectRequests + first,
    objectWallMs: Math.max(0, per.objectWallMs - first * (per.originMs ?? 0)),
  };
}

/** The price of a million payments: { lines: [{ item, perPayment, unit, units, usd }], usd }. */
export function priceMillion(per, prices = PRICES) {
  const M = 1_000_000;
  const gbSeconds = (per.objectWallMs / 1000) * prices.objectMemoryGb;
  const lines = [
    { item: "Worker requests", perPayment: per.workerRequests, unit: "requests", units: per.workerRequests * M, usd: per.workerRequests * prices.workerRequestsPerMillion },
    { item: "Worker CPU", perPayment: per.workerCpuMs, unit: "CPU ms", units: per.workerCpuMs * M, usd: per.workerCpuMs * prices.workerCpuPerMillionMs },
    { item: "object requests", perPayment: per.objectRequests, unit: "requests", units: per.objectRequests * M, usd: per.objectRequests * prices.objectRequestsPerMillion },
    { item: "object duration", perPayment: gbSeconds, unit: "GB-s", units: gbSeconds * M, usd: gbSeconds * prices.objectGbSecondsPerMillion },
    { item: "rows written", perPayment: per.rowsWritten, unit: "rows", units: per.rowsWritten * M, usd: per.rowsWritten * prices.rowsWrittenPerMillion },
  ];
  if (per.rowsRead != null) {
    lines.push({ item: "rows read", perPayment: per.rowsRead, unit: "rows", units: per.rowsRead * M, usd: per.rowsRead * prices.rowsReadPerMillion });
  }
  return { lines, usd: lines.reduce((sum, line) => sum + line.usd, 0) };
}

/** Rows written from rows_written.py's objects: the tables the platform bills, live writes
 * apart from the wholesale deletion (`dropped:`) and miniflare's local-only table; `stored`
 * is the rows the objects hold now (what their deletion will remove). */
export function rowsOf(report) {
  const localOnly = new Set(report.local_only_tables ?? []);
  let live = 0;
  let dropped = 0;
  let incomplete = 0;
  let stored = 0;
  for (const object of report.objects ?? []) {
    if (!object.complete) incomplete += 1;
    for (const [table, n] of Object.entries(object.rows_now ?? {})) if (!localOnly.has(table)) stored += n;
    for (const [table, n] of Object.entries(object.rows_written ?? {})) {
      const name = table.replace(/^dropped:/, "");
      if (localOnly.has(name)) continue;
      if (table.startsWith("dropped:")) dropped += n;
      else live += n;
    }
  }
  return { live, dropped, stored, objects: report.objects?.length ?? 0, incomplete };
}
