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
//             call (issue 17's reference, `js-do-claim`): the KV API of a SQLite-backed
//             object, a durable claim (`storage.put`) before the origin (the output gate
//             holds the fetch until it is confirmed), the outcome `put` after, one alarm at
//             expiry, and replays from the object (memory, else one `storage.get`).
//   "do-claim-mark", "do-claim-rpc"  `do-claim` with the object's answer told apart from
//             one the platform made, as the Rust worker must tell them apart (it never
//             fails open on an answer the object may have given): a header the Worker reads
//             and takes off, or an RPC method returning the answer beside the mark.
import { DurableObject } from "cloudflare:workers";

export default {
  async fetch(req, env) {
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

export class LadderObject extends DurableObject {
  loaded = false;
  record = null; // { status, headers, body }

  async fetch(req) {
    const mode = this.env.LADDER_MODE;
    if (mode === "do-claim") return this.claim(req);
    if (mode === "do-claim-mark") return this.claim(req, true);
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

  async alarm() {
    await this.ctx.storage.deleteAll();
  }
}
