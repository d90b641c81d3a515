// The figures the README states, and the only place they are written from: a run's result
// (`node bench/bench.mjs run`, target/bench/latest.json) and a cost count (`node
// bench/bench.mjs cost`, target/bench/cost.json) reduced to docs/performance-summary.json by
// `node bench/bench.mjs summary`, and that file rendered as the README's performance lines.
// bench/summary.test.mjs checks that the README holds exactly what `readmeLines` renders from
// the committed file, so a figure in the README is always one a script produced.

export const README_START = "<!-- performance-summary: node bench/bench.mjs summary writes these lines -->";
export const README_END = "<!-- /performance-summary -->";

const ms = (x) => `${Number(x).toFixed(1)} ms`;
const usd = (x) => `$${Number(x).toFixed(2)}`;

/** The summary of one run and one cost count (both as their commands write them). */
export function summarize(run, cost, { date }) {
  const latency = run?.summary?.latency;
  if (!latency?.worker?.c1 || !latency?.worker?.c16) throw new Error("the run has no latency phase: run `node bench/bench.mjs run` (its latency phase is in every run)");
  const added = (name) =>
    latency[name] && {
      c1: { p50: round1(latency[name].c1.addedP50), p99: round1(latency[name].c1.addedP99) },
      c16: { p50: round1(latency[name].c16.addedP50), p99: round1(latency[name].c16.addedP99) },
    };
  const costs = {};
  for (const m of cost?.results ?? []) {
    costs[m.target] ??= {};
    costs[m.target][m.originMs] = { usd: round2(m.today.usd), rowsWrittenUsd: round2(m.today.lines.find((l) => l.item === "rows written")?.usd ?? 0) };
  }
  if (!costs.worker) throw new Error("the cost count has no worker line: run `node bench/bench.mjs cost`");
  return {
    date,
    commit: run.source?.commit ?? null,
    machine: `${run.machine?.nproc ?? "?"}-core machine, local workerd`,
    originMs: run.summary.latencyOriginMs,
    addedLatency: { worker: added("worker"), "js-do-claim-kept": added("js-do-claim-kept"), passthrough: added("passthrough") },
    costPerMillion: costs,
    costPayment: `a first attempt and ${cost.retries === 1 ? "one retry" : `${cost.retries} retries`}`,
  };
}

function round1(x) {
  return Math.round(x * 10) / 10;
}
function round2(x) {
  return Math.round(x * 100) / 100;
}

/** The README's performance lines (between the markers), from a summary. */
export function readmeLines(s) {
  const w = s.addedLatency.worker;
  const kept = s.addedLatency["js-do-claim-kept"];
  const times = Object.keys(s.costPerMillion.worker).map(Number).sort((a, b) => a - b);
  const cost = times.map((t) => `${usd(s.costPerMillion.worker[t].usd)} with an origin answering in ${t >= 1000 ? `${t / 1000} s` : `${t} ms`}`).join(", ");
  return [
    README_START,
    `**Performance** (${s.machine}, measured ${s.date} at \`${String(s.commit ?? "unknown").slice(0, 7)}\`; [how, and every figure](docs/performance.md)):`,
    `- Latency added to a first attempt in front of an origin answering in ${s.originMs} ms: p50 ${ms(w.c1.p50)}, p99 ${ms(w.c1.p99)} at one connection; p50 ${ms(w.c16.p50)}, p99 ${ms(w.c16.p99)} at 16.`,
    kept
      ? `- The same guarantees written in plain JavaScript add p50 ${ms(kept.c1.p50)}, p99 ${ms(kept.c1.p99)} at one connection (\`js-do-claim-kept\`, the benchmark's reference).`
      : `- (no plain-JavaScript reference in this run)`,
    `- Cost per million payments (${s.costPayment} each, Cloudflare list prices): ${cost}; ${usd(s.costPerMillion.worker[times[0]].rowsWrittenUsd)} of it is rows written.`,
    `- Replays are answered from the key's object without reaching the origin; \`node bench/bench.mjs run\` and \`cost\` reproduce these figures.`,
    README_END,
  ];
}

/** The block between the markers in a README's text, or null. */
export function readmeBlock(text) {
  const start = text.indexOf(README_START);
  const end = text.indexOf(README_END);
  if (start < 0 || end < start) return null;
  return text.slice(start, end + README_END.length).split("\n");
}

/** The README's text with the block replaced by `lines` (inserted before "**Read on:**" when absent). */
export function withReadmeBlock(text, lines) {
  const block = lines.join("\n");
  const start = text.indexOf(README_START);
  const end = text.indexOf(README_END);
  if (start >= 0 && end > start) return text.slice(0, start) + block + text.slice(end + README_END.length);
  const anchor = text.indexOf("**Read on:**");
  if (anchor < 0) throw new Error("README.md has no performance block and no **Read on:** line to put one before");
  return text.slice(0, anchor) + block + "\n\n" + text.slice(anchor);
}
