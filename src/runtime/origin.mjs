// The origin attempt's I/O (`runtime::origin`), awaited in JavaScript: the TCP probe before
// a first forward, and the exchange (the request sent, the answer's head, its body up to a
// cap) under one deadline. Each reports what happened as a plain array; what it means (sent
// or not, an outcome or an unknown) is decided in Rust and the core (`core::vocabulary::outcome_table`).
import { connect } from "cloudflare:sockets";
import { headerLines, readUpTo } from "./boundary.mjs";

// What a TCP connect to `address` ("host:port") showed within `waitMs`: 0 opened; 1
// refused, or failed before a connection existed (no byte was sent); 2 not connected in
// that time. It sends no byte and never rejects. The socket is closed at once, a connect
// given up on included (closed as soon as it opens, so a late connection does not linger
// at the origin).
export async function probe(address, waitMs) {
  let socket;
  let opened;
  try {
    socket = connect(address);
    opened = socket.opened.then(
      () => 0,
      () => 1,
    );
  } catch {
    return 1;
  }
  let timer;
  const late = new Promise((resolve) => {
    timer = setTimeout(() => resolve(2), waitMs);
  });
  const shown = await Promise.race([opened, late]);
  clearTimeout(timer);
  if (shown !== 1) {
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
// - [0, status, headerText, finish]: the head (`headerLines`); `finish(cap)` reads the body
//   within the same deadline and resolves to [0, parts] (all of it, at most `cap` bytes),
//   [1, stream] (past the cap: what was read, then the rest, never buffered), [2, error]
//   (it broke off) or [3] (the deadline passed). `finish` is null when there is no body.
// - [1, error]: the fetch threw or was rejected (it may have been sent);
// - [2]: the deadline passed;
// - [3]: what came back is not a `Response`;
// - [4, status, error]: the head came and could not be read.
// It never rejects.
export async function exchange(request, service, controller, timeoutMs) {
  let timer;
  const late = new Promise((resolve) => {
    timer = setTimeout(() => {
      controller.abort();
      resolve([2]);
    }, timeoutMs);
  });
  const end = (outcome) => {
    clearTimeout(timer);
    return outcome;
  };
  const head = await Promise.race([headOf(request, service), late]);
  if (head[0] !== 0) return end(head);
  const [, status, text, response] = head;
  if (!response.body) return end([0, status, text, null]);
  const finish = async (cap) => {
    const read = readUpTo(response.body, cap, false).then(
      ([parts, rest]) => (parts !== null ? [0, parts] : [1, rest]),
      (error) => [2, error],
    );
    const body = await Promise.race([read, late.then(() => [3])]);
    return end(body);
  };
  return [0, status, text, finish];
}

async function headOf(request, service) {
  let response;
  try {
    response = await (service ? service.fetch(request) : fetch(request));
  } catch (error) {
    return [1, error];
  }
  if (!(response instanceof Response)) return [3];
  try {
    return [0, response.status, headerLines(response.headers), response];
  } catch (error) {
    return [4, response.status, error];
  }
}
