// Plain-JS steps between the pass-through and the Rust worker, to show where a first
// attempt's time goes. Not an implementation of the worker: no fingerprint, no
// validation, no coalescing. `LADDER_MODE` picks the step:
//
//   "do"      the Worker reads the body and hands it to one new Durable Object per
//             Idempotency-Key, which forwards it to the origin. Nothing stored.
//   "do-sql"  the same, plus the Rust object's storage pattern: a SELECT on the first
//             request of the object's life (the table does not exist yet, so it throws),
//             CREATE TABLE IF NOT EXISTS + INSERT of the claim and an alarm before the
//             origin, INSERT of the outcome and an alarm after; replays answer from memory.
//   "do-claim" what hono-idempotency does on its hot path, with the object making the origin
//             call (the first reference, `js-do-claim`): the KV API of a SQLite-backed
//             object, a durable claim (`storage.put`) before the origin (the output gate
//             holds the fetch until it is confirmed), the outcome `put` after, one alarm at
//             expiry, and replays from the object (memory, else one `storage.get`).
//   "do-claim-mark", "do-claim-rpc"  `do-claim` with the object's answer told apart from
//             one the platform made, as the Rust worker must tell them apart (it never
//             fails open on an answer the object may have given): a header the Worker reads
//             and takes off, or an RPC method returning the answer beside the mark.
//   "do-claim-kept", "do-claim-kept-quiet"  `do-claim-mark` plus, written as cheaply as plain
//             JS can, the work the Rust worker keeps on every request for its guarantees: the
//             key's syntax checked, the body read within a limit, its fingerprint (method,
//             path, content type and the JSON body in canonical form, SHA-256), the caller's
//             scope (SHA-256 of its credential, remembered per isolate) in the object's
//             name, the end-to-end headers without hop-by-hop ones, one envelope header to
//             the object, and in the object the fingerprint compared (422 on another
//             payload) and one decision line logged (`-quiet`: no line, as
//             `LOG_DECISIONS=problems`); a first attempt also probes the origin with a TCP
//             connect and runs under a deadline. It measures what those guarantees cost at
//             JavaScript's speed, not a design to ship.
//   "do-claim-kept-lean", "do-claim-kept-quiet-lean"  the same guarantees placed otherwise:
//             the Worker checks the key, names the object and hands it the client's request
//             unread and uncopied; the object reads the body, takes the fingerprint, and
//             filters the headers only when it forwards. No envelope, no copy in the Worker.
import { DurableObject } from "cloudflare:workers";
import { connect } from "cloudflare:sockets";

export default {
  async fetch(req, env) {
    if (env.LADDER_MODE.startsWith("do-claim-kept")) return kept(req, env);
    const key = req.headers.get("idempotency-key");
    if (!key) return new Response("missing key", { status: 400 });
    const body = await req.arrayBuffer();
    const u = new URL(req.url);
    const stub = env.LADDER.get(env.LADDER.idFromName(key));
    const forwarded = new Request(env.ORIGIN_URL + u.pathname + u.search, { method: req.method, headers: req.headers, body });
    if (env.LADDER_MODE === "do-claim-rpc") {
      const [answer, mark] = await stub.claimCall(forwarded);
      if (mark !== MARK) return new Response("not the object", { status: 503 });
      return answer;
    }
    const answer = await stub.fetch(forwarded);
    if (env.LADDER_MODE !== "do-claim-mark") return answer;
    if (answer.headers.get(MARK_HEADER) !== MARK) return new Response("not the object", { status: 503 });
    const headers = new Headers(answer.headers);
    headers.delete(MARK_HEADER);
    return new Response(answer.body, { status: answer.status, headers });
  },
};

// "do-claim-mark" marks the object's answer with a header, which the Worker reads and takes
// off (a fetched answer's headers are immutable: a new Response); "do-claim-rpc" calls an
// RPC method that returns the answer beside the mark, with nothing to take off.
const MARK_HEADER = "x-ladder-mark";
const MARK = "1";

const DAY_MS = 86_400_000;

// "do-claim-kept": the Worker's side.
const KEY_SYNTAX = /^[\x20-\x7e]{1,255}$/;
const HOP_BY_HOP = ["connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade"];
const ENVELOPE_HEADER = "x-ladder-envelope";
const MAX_BODY_BYTES = 1_048_576;
const encoder = new TextEncoder();
const decoder = new TextDecoder();

function problem(status, type) {
  const body = JSON.stringify({ type, title: type, status });
  return new Response(body, { status, headers: { "content-type": "application/problem+json" } });
}

function hex(buffer) {
  let text = "";
  for (const byte of new Uint8Array(buffer)) text += byte.toString(16).padStart(2, "0");
  return text;
}

function canonicalJson(value) {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`;
  if (value && typeof value === "object") {
    const keys = Object.keys(value).sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(value[k])}`).join(",")}}`;
  }
  return JSON.stringify(value);
}

// The caller's scope, its credential's SHA-256, remembered for the isolate's recent callers
// (as the worker remembers verified tokens): a client reusing its credential pays no digest.
const scopes = new Map();
async function scopeOf(credential) {
  let scope = scopes.get(credential);
  if (scope === undefined) {
    scope = hex(await crypto.subtle.digest("SHA-256", encoder.encode(credential)));
    if (scopes.size >= 1024) scopes.delete(scopes.keys().next().value);
    scopes.set(credential, scope);
  }
  return scope;
}

// "do-claim-kept-lean": the Worker's side, which reads no body and copies nothing.
async function keptLean(req, env) {
  const key = req.headers.get("idempotency-key");
  if (!key || !KEY_SYNTAX.test(key)) return problem(400, "invalid-idempotency-key");
  const declared = Number(req.headers.get("content-length") ?? 0);
  if (declared > MAX_BODY_BYTES) return problem(413, "body-too-large");
  const scopeHex = await scopeOf(req.headers.get("authorization") ?? "");
  return answerOf(env.LADDER.get(env.LADDER.idFromName(`${scopeHex}:${key}`)), req);
}

// The fingerprint: method, path and query, content type, and the body (a JSON body in
// canonical form), under SHA-256, in hex.
async function fingerprintOf(method, pathAndQuery, contentTypeHeader, body) {
  const contentType = (contentTypeHeader ?? "").trim().toLowerCase();
  let form = "raw";
  let shaped = new Uint8Array(body);
  if (contentType.startsWith("application/json")) {
    try {
      shaped = encoder.encode(canonicalJson(JSON.parse(decoder.decode(body))));
      form = "json";
    } catch {
      // not JSON: counted whole
    }
  }
  const head = encoder.encode(`${method}\n${pathAndQuery}\n${contentType}\n${form}\n`);
  const fields = new Uint8Array(head.length + shaped.length);
  fields.set(head);
  fields.set(shaped, head.length);
  return hex(await crypto.subtle.digest("SHA-256", fields));
}

// The object's answer, its mark checked and taken off; 503 for an answer the object did not
// give (the call threw, or the platform answered).
async function answerOf(stub, request) {
  let answer;
  try {
    answer = await stub.fetch(request);
  } catch {
    return problem(503, "object-unavailable");
  }
  if (answer.headers.get(MARK_HEADER) !== MARK) return problem(503, "object-unavailable");
  const answerHeaders = new Headers(answer.headers);
  answerHeaders.delete(MARK_HEADER);
  return new Response(answer.body, { status: answer.status, headers: answerHeaders });
}

async function kept(req, env) {
  if (env.LADDER_MODE.includes("lean")) return keptLean(req, env);
  const key = req.headers.get("idempotency-key");
  if (!key || !KEY_SYNTAX.test(key)) return problem(400, "invalid-idempotency-key");
  const requestId = req.headers.get("cf-ray") ?? crypto.randomUUID();
  const declared = Number(req.headers.get("content-length") ?? 0);
  if (declared > MAX_BODY_BYTES) return problem(413, "body-too-large");
  const body = await req.arrayBuffer();
  if (body.byteLength > MAX_BODY_BYTES) return problem(413, "body-too-large");
  const u = new URL(req.url);
  const fingerprint = await fingerprintOf(req.method, u.pathname + u.search, req.headers.get("content-type"), body);
  const scopeHex = await scopeOf(req.headers.get("authorization") ?? "");
  const stub = env.LADDER.get(env.LADDER.idFromName(`${scopeHex}:${key}`));
  const headers = new Headers(req.headers);
  for (const name of HOP_BY_HOP) headers.delete(name);
  headers.set(ENVELOPE_HEADER, `1;${fingerprint};${scopeHex.slice(0, 16)};${requestId}`);
  return answerOf(stub, new Request(env.ORIGIN_URL + u.pathname + u.search, { method: req.method, headers, body, redirect: "manual" }));
}

export class LadderObject extends DurableObject {
  loaded = false;
  record = null; // { status, headers, body }

  async fetch(req) {
    const mode = this.env.LADDER_MODE;
    if (mode === "do-claim") return this.claim(req);
    if (mode === "do-claim-mark") return this.claim(req, true);
    if (mode.startsWith("do-claim-kept")) return this.keptClaim(req, !mode.includes("quiet"));
    if (mode === "do-sql") {
      if (!this.loaded) {
        try {
          const rows = this.ctx.storage.sql.exec("SELECT record FROM r WHERE id = 1").toArray();
          if (rows.length) this.record = JSON.parse(new TextDecoder().decode(rows[0].record));
        } catch {
          // no such table: no record
        }
        this.loaded = true;
      }
      if (this.record) {
        await req.arrayBuffer();
        const headers = new Headers(this.record.headers);
        headers.set("idempotent-replayed", "true");
        return new Response(this.record.body, { status: this.record.status, headers });
      }
      const sql = this.ctx.storage.sql;
      sql.exec("CREATE TABLE IF NOT EXISTS r (id INTEGER PRIMARY KEY CHECK (id = 1), record BLOB NOT NULL)");
      sql.exec("INSERT OR REPLACE INTO r (id, record) VALUES (1, ?)", new TextEncoder().encode('{"inflight":true}'));
      const body = await req.arrayBuffer();
      await this.ctx.storage.setAlarm(Date.now() + DAY_MS);
      const answer = await fetch(req.url, { method: req.method, headers: req.headers, body, redirect: "manual" });
      const answerBody = await answer.arrayBuffer();
      const record = { status: answer.status, headers: [...answer.headers], body: new Uint8Array(answerBody) };
      sql.exec(
        "INSERT OR REPLACE INTO r (id, record) VALUES (1, ?)",
        new TextEncoder().encode(JSON.stringify({ ...record, body: [...record.body] })),
      );
      await this.ctx.storage.setAlarm(Date.now() + DAY_MS);
      this.record = record;
      return new Response(answerBody, { status: answer.status, headers: answer.headers });
    }
    const body = await req.arrayBuffer();
    return fetch(req.url, { method: req.method, headers: req.headers, body, redirect: "manual" });
  }

  async claimCall(req) {
    return [await this.claim(req), MARK];
  }

  async claim(req, marked = false) {
    if (!this.loaded) {
      this.record = (await this.ctx.storage.get("record")) ?? null;
      this.loaded = true;
    }
    const body = await req.arrayBuffer();
    if (this.record?.status) {
      const headers = new Headers(this.record.headers);
      headers.set("idempotent-replayed", "true");
      if (marked) headers.set(MARK_HEADER, MARK);
      return new Response(this.record.body, { status: this.record.status, headers });
    }
    if (this.record) return new Response("in progress", { status: 409, headers: { "retry-after": "1", ...(marked && { [MARK_HEADER]: MARK }) } });
    this.record = { inflight: true };
    await this.ctx.storage.put("record", this.record);
    this.ctx.storage.setAlarm(Date.now() + DAY_MS);
    const answer = await fetch(req.url, { method: req.method, headers: req.headers, body, redirect: "manual" });
    const answerBody = await answer.arrayBuffer();
    this.record = { status: answer.status, headers: [...answer.headers], body: answerBody };
    this.ctx.storage.put("record", this.record);
    if (!marked) return new Response(answerBody, { status: answer.status, headers: answer.headers });
    const headers = new Headers(answer.headers);
    headers.set(MARK_HEADER, MARK);
    return new Response(answerBody, { status: answer.status, headers });
  }

  // "do-claim-kept": the object's side (the fingerprint compared, one decision line).
  async keptClaim(req, logs) {
    if (!this.loaded) {
      this.record = (await this.ctx.storage.get("record")) ?? null;
      this.loaded = true;
    }
    const lean = this.env.LADDER_MODE.includes("lean");
    // Lean: no envelope; the fingerprint is taken here, from the body read below.
    let [version, fingerprint, scope, requestId] = lean ? ["1"] : (req.headers.get(ENVELOPE_HEADER) ?? "").split(";");
    if (version !== "1") return this.keptAnswer(problem(503, "envelope-unreadable"));
    const body = await req.arrayBuffer();
    if (body.byteLength > MAX_BODY_BYTES) return this.keptAnswer(problem(413, "body-too-large"));
    let originUrl = req.url;
    if (lean) {
      const u = new URL(req.url);
      fingerprint = await fingerprintOf(req.method, u.pathname + u.search, req.headers.get("content-type"), body);
      originUrl = this.env.ORIGIN_URL + u.pathname + u.search;
    }
    const line = (decision, status) => {
      if (logs) console.log(JSON.stringify({ decision, status, object: this.ctx.id.toString().slice(0, 16), scope, request: requestId }));
    };
    if (this.record?.status) {
      if (this.record.fingerprint !== fingerprint) {
        line("rejected", 422);
        return this.keptAnswer(problem(422, "key-reused"));
      }
      const headers = new Headers(this.record.headers);
      headers.set("idempotent-replayed", "true");
      headers.set(MARK_HEADER, MARK);
      line("replayed", this.record.status);
      return new Response(this.record.body, { status: this.record.status, headers });
    }
    if (this.record) return this.keptAnswer(new Response("in progress", { status: 409, headers: { "retry-after": "1" } }));
    this.record = { inflight: true, fingerprint };
    await this.ctx.storage.put("record", this.record);
    this.ctx.storage.setAlarm(Date.now() + DAY_MS);
    // The TCP probe before the first forward (a refused connect proves nothing was sent),
    // then the exchange under the origin's deadline.
    const target = new URL(originUrl);
    const socket = connect(`${target.hostname}:${target.port}`);
    await socket.opened;
    socket.close().catch(() => {});
    const forwardHeaders = new Headers(req.headers);
    forwardHeaders.delete(ENVELOPE_HEADER);
    if (lean) for (const name of HOP_BY_HOP) forwardHeaders.delete(name);
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(), 30_000);
    const answer = await fetch(originUrl, { method: req.method, headers: forwardHeaders, body, redirect: "manual", signal: controller.signal });
    const answerBody = await answer.arrayBuffer();
    clearTimeout(timer);
    this.record = { status: answer.status, headers: [...answer.headers], body: answerBody, fingerprint };
    this.ctx.storage.put("record", this.record);
    line("executed", answer.status);
    const headers = new Headers(answer.headers);
    headers.set(MARK_HEADER, MARK);
    return new Response(answerBody, { status: answer.status, headers });
  }

  keptAnswer(response) {
    response.headers.set(MARK_HEADER, MARK);
    return response;
  }

  async alarm() {
    await this.ctx.storage.deleteAll();
  }
}
