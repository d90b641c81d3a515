// The origin attempt's I/O (`runtime::origin`), awaited in JavaScript: the TCP probe before
// a first forward, and the exchange (the request sent, the answer's head, its body up to a
// cap) under one deadline. Each reports what happened under its own name (a string, with
// its values after it in an array); what each name means, sent or not, is decided in the
// core (`core::policy::OriginVerdict::of_report`).
import { connect } from "cloudflare:sockets";
import { headerLines, readUpTo } from "./boundary.mjs";

// What a TCP connect to `address` ("host:port") showed within `waitMs`: "opened";
// "refused", or failed before a connection existed (no byte was sent); "no-connection" in
// that time. It sends no byte and never rejects. The socket is closed at once, a connect
// given up on included (closed as soon as it opens, so a late connection does not linger
// at the origin).
export async function probe(address, waitMs) {
  let socket;
  let opened;
  try {
    socket = connect(address);
    opened = socket.opened.then(
      () => "opened",
      () => "refused",
    );
  } catch {
    return "refused";
  }
  let timer;
  const late = new Promise((resolve) => {
    timer = setTimeout(() => resolve("no-connection"), waitMs);
  });
  const shown = await Promise.race([opened, late]);
  clearTimeout(timer);
  if (shown !== "refused") {
    try {
      socket.close().catch(() => {});
    } catch {
      // Closing is best effort: nothing was sent on it.
    }
  }
  return shown;
}

// Sends `request` (through `service`, a service binding, when given) and reads the answer's
// head, all within `timeoutMs`, after which `controller` aborts it. Resolves to one of:
// - ["head", status, headerText, finish]: the head (`headerLines`); `finish(cap)` reads the
//   body within the same deadline and resolves to ["whole", parts] (all of it, at most `cap`
//   bytes), ["over-cap", stream] (past the cap: what was read, then the rest, never
//   buffered), ["broke-off", error] or ["late"] (the deadline passed). `finish` is null when
//   there is no body.
// - ["threw", error]: the fetch threw or was rejected (it may have been sent);
// - ["late"]: the deadline passed;
// - ["not-a-response"]: what came back is not a `Response`;
// - ["head-unreadable", status, error]: the head came and could not be read.
// It never rejects.
export async function exchange(request, service, controller, timeoutMs) {
  let timer;
  const late = new Promise((resolve) => {
    timer = setTimeout(() => {
      controller.abort();
      resolve(["late"]);
    }, timeoutMs);
  });
  const end = (outcome) => {
    clearTimeout(timer);
    return outcome;
  };
  const head = await Promise.race([headOf(request, service), late]);
  if (head[0] !== "head") return end(head);
  const [, status, text, response] = head;
  if (!response.body) return end(["head", status, text, null]);
  const finish = async (cap) => {
    const read = readUpTo(response.body, cap, false).then(
      ([parts, rest]) => (parts !== null ? ["whole", parts] : ["over-cap", rest]),
      (error) => ["broke-off", error],
    );
    const body = await Promise.race([read, late.then(() => ["late"])]);
    return end(body);
  };
  return ["head", status, text, finish];
}

async function headOf(request, service) {
  let response;
  try {
    response = await (service ? service.fetch(request) : fetch(request));
  } catch (error) {
    return ["threw", error];
  }
  if (!(response instanceof Response)) return ["not-a-response"];
  try {
    return ["head", response.status, headerLines(response.headers), response];
  } catch (error) {
    return ["head-unreadable", response.status, error];
  }
}
