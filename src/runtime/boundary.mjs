// The few JavaScript helpers the Rust runtime calls through wasm-bindgen
// (`runtime::boundary`): each does in one call what would otherwise cross the JS↔Wasm
// boundary once per header (a lookup, an iterator step, a delete, each with its string
// copied). They decide nothing; the Rust side says which names and what to do.

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
export function responseWithout(response, name) {
  const headers = new Headers(response.headers);
  headers.delete(name);
  return new Response(response.body, { status: response.status, headers });
}
