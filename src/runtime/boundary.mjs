// The few JavaScript helpers the Rust runtime calls through wasm-bindgen
// (`runtime::boundary`): each does in one call what would otherwise cross the JS↔Wasm
// boundary once per header (a lookup, an iterator step, a delete, each with its string
// copied), or awaits in JavaScript what a Rust future would await step by step. They
// decide nothing; the Rust side says which names and what to do, and what came of it means.

// Every header as `name\nvalue\n`, in the order `Headers` iterates them (lowercase names,
// repeated lines joined with ", ", each Set-Cookie on its own). A value cannot hold a line
// feed (HTTP ends a header line there, and `Headers` refuses one), so the text needs no
// escapes; should one ever appear, this throws rather than let it read as another header.
export function headerLines(headers) {
  let text = "";
  for (const [name, value] of headers) {
    if (name.includes("\n") || value.includes("\n")) throw new TypeError("a header holds a line feed");
    text += name + "\n" + value + "\n";
  }
  return text;
}

// A copy of `headers` without the names listed in `refused` (`name\n` each).
export function headersWithout(headers, refused) {
  const copy = new Headers(headers);
  for (const name of refused.split("\n")) if (name) copy.delete(name);
  return copy;
}

// `new Response(response.body, { status, headers })` with the header `name` left out: an
// answer's headers as fetched are immutable.
function responseWithout(response, name) {
  const headers = new Headers(response.headers);
  headers.delete(name);
  return new Response(response.body, { status: response.status, headers });
}

// A byte stream of `count` parts pulled one at a time, part `i` the Uint8Array that `read(i)`
// resolves to (a replay's chunk rows). A rejected read errors the stream, so a reader never
// sees it end short; nothing is read ahead of the reader (a high-water mark of 0).
export function pulledStream(count, read) {
  let next = 0;
  return new ReadableStream(
    {
      async pull(controller) {
        if (next < count) controller.enqueue(await read(next++));
        if (next >= count) controller.close();
      },
    },
    { highWaterMark: 0 },
  );
}

// Reads `stream` (a request's body in observe mode, an origin's answer) until it ends or
// passes `limit` bytes. Returns [parts, forward]: within the limit, the chunks read (the Rust
// side copies them into one buffer, so no second whole copy is made here) and, when
// `forwardWhole`, a stream of the same chunks to send on (else null); past it, null and a
// stream of the chunks read so far followed by the rest, which is never buffered. A failed
// read rejects.
export async function readUpTo(stream, limit, forwardWhole) {
  const reader = stream.getReader();
  const parts = [];
  let total = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return [parts, forwardWhole ? partsThen(parts, null) : null];
    parts.push(value);
    total += value.byteLength;
    if (total > limit) return [null, partsThen(parts, reader)];
  }
}

// Reads `stream` and keeps nothing, until it ends or more than `limit` bytes have passed. A
// failed read ends the draining too (nothing is left to wait for): it never rejects.
export async function drain(stream, limit) {
  try {
    const reader = stream.getReader();
    for (let total = 0; total <= limit; ) {
      const { done, value } = await reader.read();
      if (done) return;
      total += value.byteLength;
    }
  } catch {
    // Nothing more to read.
  }
}

// A stream of `parts`, then of what `rest` (a reader, or null) still reads.
function partsThen(parts, rest) {
  let next = 0;
  return new ReadableStream(
    {
      async pull(controller) {
        if (next < parts.length) return controller.enqueue(parts[next++]);
        const { done, value } = rest ? await rest.read() : { done: true };
        if (done) controller.close();
        else controller.enqueue(value);
      },
      cancel(reason) {
        return rest?.cancel(reason);
      },
    },
    { highWaterMark: 0 },
  );
}

// The Worker's call to a key's object (`runtime::object_call`): `stub.fetch(request)` and
// what came of it, for the Rust side to classify (`core::routes::ObjectCallFailure`):
// - [0, error]: the call threw before it was sent;
// - [1, error, overloaded, remote]: the platform rejected it, with its two flags;
// - [2, why]: something answered that is not the object (no `Response`, or no `mark`);
// - [3, response, mark]: the object's answer, rewrapped without the header `mark` (a
//   fetched answer's headers are immutable), and that header's value.
// It never rejects.
export async function callObject(stub, request, mark) {
  let pending;
  try {
    pending = stub.fetch(request);
  } catch (error) {
    return [0, error];
  }
  let response;
  try {
    response = await pending;
  } catch (error) {
    return [1, error, error?.overloaded === true, error?.remote === true];
  }
  if (!(response instanceof Response)) return [2, "not a Response"];
  const value = response.headers.get(mark);
  if (value === null) return [2, `the object did not answer (the platform said ${response.status})`];
  try {
    return [3, responseWithout(response, mark), value];
  } catch (error) {
    return [2, `the object's answer could not be rewrapped: ${error?.message ?? error}`];
  }
}

// A request's body read whole up to `limit` bytes (`runtime::entry::Covered`): [bytes,
// toSend], where `bytes` is a Uint8Array for the Rust side to copy once and `toSend` the
// same bytes as a value to send on; null when the body is larger; [error] when it could not
// be read. With `declared` (the request has a numeric `Content-Length`, which is then its
// length: HTTP framing) it is read in one `arrayBuffer()`; otherwise it is counted as it
// streams in, and past the limit the rest is read and thrown away up to `drainLimit` bytes
// beyond it. It never rejects.
export async function readWithin(request, declared, limit, drainLimit) {
  try {
    if (!request.body) {
      const none = new Uint8Array(0);
      return [none, none];
    }
    if (declared) {
      const buffer = await request.arrayBuffer();
      return [new Uint8Array(buffer), buffer];
    }
    const [parts, rest] = await readUpTo(request.body, limit, false);
    if (parts === null) {
      await drain(rest, limit + drainLimit);
      return null;
    }
    const bytes = joined(parts);
    return [bytes, bytes];
  } catch (error) {
    return [error];
  }
}

// The request body read to its end and dropped (the runtime drops a connection whose body is
// left unread): with `whole` in one `arrayBuffer()` (a body the Rust side knows to be small:
// one call rather than a read per chunk), otherwise chunk by chunk up to `limit` bytes. It
// never rejects.
export async function drainRequest(request, whole, limit) {
  if (whole) {
    try {
      await request.arrayBuffer();
      return;
    } catch {
      // Read as a stream below, as far as it goes.
    }
  }
  if (request.body) await drain(request.body, limit);
}

// `parts` (Uint8Arrays) as one.
function joined(parts) {
  if (parts.length === 1) return parts[0];
  const whole = new Uint8Array(parts.reduce((total, part) => total + part.byteLength, 0));
  let at = 0;
  for (const part of parts) {
    whole.set(part, at);
    at += part.byteLength;
  }
  return whole;
}
