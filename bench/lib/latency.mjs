// The latency a user feels in front of a slow origin, from a run's latency rounds (one
// load result per target per round, "direct" among them: the origin called without any
// worker in between, in the same round).
import { median, round } from "./stats.mjs";

/**
 * Per target and connection count: the medians over rounds of p50 and p99, and of the added
 * latency, (target − direct) per round. The object's wall time per first attempt is bounded
 * from outside: its call nests inside the Worker's request, and the origin takes ORIGIN_MS of
 * it, so (object wall − origin time) ≤ (latency through the target − ORIGIN_MS); workerd
 * reports no object wall time of its own locally.
 */
export function latencySummary(rounds, originMs) {
  const out = {};
  for (const c of ["c1", "c16"]) {
    for (const name of Object.keys(rounds[c][0] ?? {})) {
      if (name === "direct") continue;
      const per = (get) => round(median(rounds[c].map(get)), 3);
      out[name] ??= {};
      out[name][c] = {
        p50: per((r) => r[name].p50),
        p99: per((r) => r[name].p99),
        addedP50: per((r) => r[name].p50 - r.direct.p50),
        addedP99: per((r) => r[name].p99 - r.direct.p99),
        objectWallOverOriginP50Max: per((r) => r[name].p50 - originMs),
        requests: per((r) => r[name].requests),
        errors: Math.max(...rounds[c].map((r) => r[name].errors)),
      };
    }
    out.direct ??= {};
    out.direct[c] = { p50: round(median(rounds[c].map((r) => r.direct.p50)), 3), p99: round(median(rounds[c].map((r) => r.direct.p99)), 3) };
  }
  return out;
}
