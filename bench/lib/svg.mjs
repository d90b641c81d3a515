// Draws a benchmark result (what `bench.mjs run` writes to target/bench/latest.json) as one
// SVG: the latency of each target for first attempts and replays (c1 and c16), the
// coalesced bursts, the targets tables and the guarantees' price. No dependencies: strings in, a string out.
//
// What each mark is, per run (runs are drawn one under the other, faint; the medians of
// the runs bold):
// - first attempts and replays: a box plot when the run kept its latency quantiles
//   (`latencyQuantiles`: whisker p1–p99.9, box p25–p75, tick at p50), else a line from p50
//   to p99 (results written before the quantiles were kept). Log scale in ms, one scale per
//   panel so that targets compare.
// - bursts: each request's response time after the burst started, as a box plot of
//   `responseQuantiles` when kept, else the first-to-last span; the dashed line is the
//   origin's delay, the diamond when the (first) execution reached the origin.
// - targets: each row with its measured value, goal, and whether it was met;
// - the guarantees' price: the worker against `js-do-claim-kept`, and it against
//   `js-do-claim`, per figure (ratios, nothing to meet).

const WIDTH = 1000;
const LABEL = 150; // the target names' column
const RIGHT = 190; // the medians' column
const ROW = 26;
const FONT = "font-family=\"ui-monospace, Menlo, Consolas, monospace\"";

const escape = (text) =>
  String(text).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
const num = (x) => (Number.isFinite(x) ? Math.round(x * 100) / 100 : 0);
const fmt = (x, digits = 2) => (Number.isFinite(x) ? x.toFixed(digits) : "–");
const finite = (values) => values.filter((x) => Number.isFinite(x) && x > 0);
const median = (values) => {
  const v = values.filter(Number.isFinite).sort((a, b) => a - b);
  if (v.length === 0) return NaN;
  const mid = Math.floor(v.length / 2);
  return v.length % 2 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
};

/** `[[q, ms], …]` as a lookup, or null when the run kept none. */
function quantilesOf(pairs) {
  if (!Array.isArray(pairs) || pairs.length === 0) return null;
  const map = new Map(pairs.map(([q, ms]) => [Number(q), ms]));
  const at = (q) => map.get(q);
  return [1, 25, 50, 75, 99.9].every((q) => Number.isFinite(at(q))) ? at : null;
}

/** A scale from [lo, hi] (ms) onto the plot's x range, logarithmic or linear. */
function scale(values, { log }) {
  const v = finite(values);
  let lo = v.length ? Math.min(...v) : 1;
  let hi = v.length ? Math.max(...v) : 10;
  if (log) {
    lo = 10 ** Math.floor(Math.log10(lo));
    hi = Math.max(10 ** Math.ceil(Math.log10(hi)), lo * 10);
  } else {
    lo = 0;
    hi = hi * 1.1 || 1;
  }
  const x0 = LABEL;
  const x1 = WIDTH - RIGHT;
  const at = log
    ? (ms) => x0 + ((Math.log10(Math.max(ms, lo)) - Math.log10(lo)) / (Math.log10(hi) - Math.log10(lo))) * (x1 - x0)
    : (ms) => x0 + (Math.max(ms, 0) / hi) * (x1 - x0);
  const ticks = [];
  if (log) {
    for (let t = lo; t <= hi * 1.0001; t *= 10) ticks.push(t);
  } else {
    const step = 10 ** Math.floor(Math.log10(hi / 2));
    for (let t = 0; t <= hi; t += step * (hi / step > 8 ? 2 : 1)) ticks.push(t);
  }
  return { at, ticks, x0, x1 };
}

function axis(out, sx, y, height) {
  for (const t of sx.ticks) {
    const x = num(sx.at(t));
    out.push(`<line x1="${x}" y1="${y}" x2="${x}" y2="${y + height}" stroke="#ddd"/>`);
    out.push(`<text x="${x}" y="${y + height + 12}" font-size="10" text-anchor="middle" fill="#666">${escape(t >= 1 ? t : t.toPrecision(1))}</text>`);
  }
  out.push(`<text x="${sx.x1}" y="${y + height + 24}" font-size="10" text-anchor="end" fill="#666">ms</text>`);
}

function boxOrLine(out, sx, y, run, { bold, colour }) {
  const q = quantilesOf(run.quantiles);
  const width = bold ? 2 : 1;
  const opacity = bold ? 1 : 0.45;
  const g = `stroke="${colour}" stroke-width="${width}" opacity="${opacity}"`;
  if (q) {
    out.push(`<line x1="${num(sx.at(q(1)))}" y1="${y}" x2="${num(sx.at(q(99.9)))}" y2="${y}" ${g}/>`);
    out.push(`<rect x="${num(sx.at(q(25)))}" y="${y - 4}" width="${num(Math.max(1, sx.at(q(75)) - sx.at(q(25))))}" height="8" fill="${colour}" fill-opacity="${bold ? 0.35 : 0.15}" ${g}/>`);
    out.push(`<line x1="${num(sx.at(q(50)))}" y1="${y - 5}" x2="${num(sx.at(q(50)))}" y2="${y + 5}" ${g}/>`);
    if (Number.isFinite(q(99))) out.push(`<circle cx="${num(sx.at(q(99)))}" cy="${y}" r="2.5" fill="${colour}" opacity="${opacity}"/>`);
  } else if (Number.isFinite(run.lo) && Number.isFinite(run.hi)) {
    out.push(`<line x1="${num(sx.at(run.lo))}" y1="${y}" x2="${num(sx.at(run.hi))}" y2="${y}" ${g}/>`);
    out.push(`<circle cx="${num(sx.at(run.lo))}" cy="${y}" r="3" fill="${colour}" opacity="${opacity}"/>`);
    out.push(`<circle cx="${num(sx.at(run.hi))}" cy="${y}" r="3" fill="white" ${g}/>`);
  }
}

const COLOURS = { worker: "#d9480f", passthrough: "#1971c2", direct: "#495057", "js-do-claim": "#2f9e44" };
const colourOf = (name) => COLOURS[name] ?? "#7048e8";

/**
 * One panel: a row per target, its runs as marks. `rows`: [{ name, runs: [{ lo, hi,
 * quantiles }], note }]. Returns the height used.
 */
function panel(out, y, title, rows, { log, extra }) {
  const values = rows.flatMap((r) => r.runs.flatMap((run) => [run.lo, run.hi, ...(run.quantiles ?? []).map((p) => p[1])]));
  if (extra) values.push(...extra.values);
  const sx = scale(values, { log });
  out.push(`<text x="10" y="${y + 14}" font-size="13" font-weight="bold">${escape(title)}</text>`);
  const top = y + 24;
  const height = rows.length * ROW;
  axis(out, sx, top, height);
  if (extra) extra.draw(out, sx, top, height);
  rows.forEach((row, i) => {
    const cy = top + i * ROW + ROW / 2;
    out.push(`<text x="${LABEL - 8}" y="${cy + 4}" font-size="11" text-anchor="end">${escape(row.name)}</text>`);
    const n = row.runs.length;
    row.runs.forEach((run, r) => {
      const dy = n > 1 ? -6 + (12 * r) / (n - 1) : 0;
      boxOrLine(out, sx, num(cy + dy), run, { bold: false, colour: colourOf(row.name) });
    });
    if (row.median) boxOrLine(out, sx, cy, row.median, { bold: true, colour: colourOf(row.name) });
    if (row.note) out.push(`<text x="${WIDTH - RIGHT + 10}" y="${cy + 4}" font-size="10" fill="#333">${escape(row.note)}</text>`);
  });
  return 24 + height + 34;
}

/** The rows of a load phase (`raw.first.c1`, …): one per target, its runs and their median. */
function loadRows(perRun) {
  if (!Array.isArray(perRun) || perRun.length === 0) return [];
  const names = [...new Set(perRun.flatMap((run) => Object.keys(run ?? {})))];
  return names.map((name) => {
    const runs = perRun.map((run) => run?.[name]).filter(Boolean);
    const marks = runs.map((r) => ({ lo: r.p50, hi: r.p99, quantiles: r.latencyQuantiles }));
    const p50 = median(runs.map((r) => r.p50));
    const p99 = median(runs.map((r) => r.p99));
    const rps = median(runs.map((r) => r.rps));
    return { name, runs: marks, median: { lo: p50, hi: p99 }, note: `p50 ${fmt(p50)}  p99 ${fmt(p99)}  ${fmt(rps, 0)}/s` };
  });
}

function burstRows(burst) {
  return Object.entries(burst ?? {}).map(([name, runs]) => ({
    name,
    runs: runs.map((r) => ({ lo: r.firstResponseMs, hi: r.lastResponseMs, quantiles: r.responseQuantiles, reached: r.originReachedMs })),
    note: `last ${fmt(median(runs.map((r) => r.lastResponseMs)), 1)} ms, exec ${Math.max(...runs.map((r) => r.executions ?? 0))}`,
  }));
}

function targetsTable(out, y, title, rows) {
  out.push(`<text x="10" y="${y + 14}" font-size="13" font-weight="bold">${escape(title)}</text>`);
  let cy = y + 34;
  for (const row of rows) {
    const met = row.met === true;
    out.push(`<text x="20" y="${cy}" font-size="11" fill="${met ? "#2b8a3e" : "#c92a2a"}">${met ? "✓" : "✗"}</text>`);
    out.push(`<text x="40" y="${cy}" font-size="11">${escape(row.name)}</text>`);
    out.push(`<text x="${WIDTH - 330}" y="${cy}" font-size="11">${escape(row.measured)}</text>`);
    out.push(`<text x="${WIDTH - 130}" y="${cy}" font-size="11" fill="#666">${escape(row.goal)}</text>`);
    cy += 18;
  }
  return 34 + rows.length * 18 + 16;
}

// The guarantees' price: two ratios per figure, nothing to meet.
function ratiosTable(out, y, title, columns, rows) {
  out.push(`<text x="10" y="${y + 14}" font-size="13" font-weight="bold">${escape(title)}</text>`);
  let cy = y + 34;
  out.push(`<text x="${WIDTH - 430}" y="${cy}" font-size="11" fill="#666">${escape(columns[0])}</text>`);
  out.push(`<text x="${WIDTH - 220}" y="${cy}" font-size="11" fill="#666">${escape(columns[1])}</text>`);
  cy += 18;
  for (const row of rows) {
    out.push(`<text x="40" y="${cy}" font-size="11">${escape(row.name)}</text>`);
    out.push(`<text x="${WIDTH - 430}" y="${cy}" font-size="11">${escape(row.workerToKept)}</text>`);
    out.push(`<text x="${WIDTH - 220}" y="${cy}" font-size="11">${escape(row.keptToClaim)}</text>`);
    cy += 18;
  }
  return 52 + rows.length * 18 + 16;
}

// The latency a user feels: per target, what it adds over calling the origin directly.
function addedTable(out, y, title, latency) {
  const columns = ["1 conn. p50", "1 conn. p99", "16 conn. p50", "16 conn. p99"];
  const rows = Object.entries(latency).filter(([name, v]) => name !== "direct" && v?.c1 && v?.c16);
  out.push(`<text x="10" y="${y + 14}" font-size="13" font-weight="bold">${escape(title)}</text>`);
  let cy = y + 34;
  columns.forEach((c, i) => out.push(`<text x="${LABEL + 60 + i * 150}" y="${cy}" font-size="11" fill="#666">${escape(c)}</text>`));
  cy += 18;
  for (const [name, v] of rows) {
    out.push(`<text x="20" y="${cy}" font-size="11" fill="${colourOf(name)}">${escape(name)}</text>`);
    [v.c1.addedP50, v.c1.addedP99, v.c16.addedP50, v.c16.addedP99].forEach((x, i) =>
      out.push(`<text x="${LABEL + 60 + i * 150}" y="${cy}" font-size="11">${escape(Number.isFinite(x) ? `${x < 0 ? "−" : "+"}${fmt(Math.abs(x), 1)} ms` : "–")}</text>`),
    );
    cy += 18;
  }
  return 52 + rows.length * 18 + 16;
}

/** The SVG for `result`, as `bench.mjs run` writes it. Sections the result lacks are left out. */
export function drawResult(result) {
  const out = [];
  const raw = result?.raw ?? {};
  const summary = result?.summary ?? {};
  let y = 10;
  const source = result?.source ?? {};
  const machine = result?.machine ?? {};
  out.push(`<text x="10" y="${y + 16}" font-size="15" font-weight="bold">idempotency-edge benchmark ${escape(result?.runId ?? "")}</text>`);
  out.push(
    `<text x="10" y="${y + 34}" font-size="11" fill="#666">${escape(
      [result?.startedAt, source.commit && `commit ${String(source.commit).slice(0, 12)}`, machine.nproc && `${machine.nproc} cores`, machine.cpuModel, `${result?.plan?.runs ?? "?"} run(s)`]
        .filter(Boolean)
        .join("  ·  "),
    )}</text>`,
  );
  out.push(
    `<text x="10" y="${y + 50}" font-size="10" fill="#666">${escape(
      "each run faint, the runs' median bold · box p25–p75, whiskers p1–p99.9, tick p50, dot p99 · a line with two dots: p50 and p99 (a run that kept no quantiles)",
    )}</text>`,
  );
  y += 64;
  // First what a user feels: the latency in front of an origin that takes its time.
  const originMs = summary.latencyOriginMs ?? result?.plan?.originMs;
  if (summary.latency && Object.keys(summary.latency).length) {
    y += addedTable(out, y, `Latency added over calling the origin directly (origin answering in ${originMs ?? "?"} ms; median over runs of target − direct)`, summary.latency);
  }
  for (const c of ["c1", "c16"]) {
    const rows = loadRows(raw.latency?.[c]);
    if (rows.length) y += panel(out, y, `First attempts in front of an origin answering in ${originMs ?? "?"} ms, ${c === "c1" ? "1 connection" : "16 connections"}: latency`, rows, { log: true });
  }
  for (const [phase, label] of [["first", "First attempts (a new key each request)"], ["replay", "Replays (one completed key, again and again)"]]) {
    for (const c of ["c1", "c16"]) {
      const rows = loadRows(raw[phase]?.[c]);
      if (rows.length) y += panel(out, y, `${label}, ${c === "c1" ? "1 connection" : "16 connections"}: latency`, rows, { log: true });
    }
  }
  const bursts = burstRows(raw.burst);
  if (bursts.length) {
    const delay = result?.plan?.burstDelayMs;
    const size = result?.plan?.burstSize;
    y += panel(out, y, `Coalesced bursts (${size ?? "?"} concurrent requests, one key, origin delay ${delay ?? "?"} ms): response times`, bursts, {
      log: false,
      extra: {
        values: [delay, ...bursts.flatMap((b) => b.runs.map((r) => r.reached))],
        draw(o, sx, top, height) {
          if (Number.isFinite(delay)) {
            o.push(`<line x1="${num(sx.at(delay))}" y1="${top}" x2="${num(sx.at(delay))}" y2="${top + height}" stroke="#868e96" stroke-dasharray="4 3"/>`);
          }
          bursts.forEach((b, i) => {
            b.runs.forEach((r, k) => {
              if (!Number.isFinite(r.reached)) return;
              const n = b.runs.length;
              const cy = top + i * ROW + ROW / 2 + (n > 1 ? -6 + (12 * k) / (n - 1) : 0);
              const x = sx.at(r.reached);
              o.push(`<path d="M${num(x)} ${num(cy - 4)} l4 4 l-4 4 l-4 -4 z" fill="#868e96"/>`);
            });
          });
        },
      },
    });
  }
  if (Array.isArray(summary.targets) && summary.targets.length) {
    y += targetsTable(out, y, "Targets (against the direct call and js-do-claim-kept)", summary.targets);
  }
  if (Array.isArray(summary.guarantees) && summary.guarantees.length) {
    const title = "The guarantees' price (js-do-claim-kept: js-do-claim with the worker's guarantees, in plain JS)";
    y += ratiosTable(out, y, title, ["worker / js-do-claim-kept", "js-do-claim-kept / js-do-claim"], summary.guarantees);
  }
  const height = Math.ceil(y + 10);
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${height}" viewBox="0 0 ${WIDTH} ${height}" ${FONT}>`,
    `<rect width="${WIDTH}" height="${height}" fill="white"/>`,
    ...out,
    "</svg>",
    "",
  ].join("\n");
}
