// The JWKS fetch (`runtime::identity`) as one call: `SCOPE_JWKS_URL` fetched within a time
// and a size bound, its 200 answer's text and `Cache-Control` returned. Rust awaits one
// promise; when to fetch, what the keys are and how long they stay fresh are the core's
// (`core::jwks_cache`, `core::jwt`).
//
// It rejects with an `Error` whose message says why the fetch was of no use (never the
// body's content): the size, the encoding, the time, or what `fetch` threw. A redirect is
// never followed (`core::jwks_cache`, rule 7): the 3xx itself comes back, unread, and what
// a status means is the core's (`jwks_cache::answer_status`).

// [text, cacheControl or null, 200] of `url`'s 200 answer, of at most `maxBytes` of UTF-8,
// all of it within `timeoutMs`; [null, null, status] for any other status, body unread.
export async function fetchJwks(url, timeoutMs, maxBytes) {
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${Math.floor(timeoutMs / 1000)} s`)), timeoutMs);
  });
  try {
    return await Promise.race([fetched(url, maxBytes), late]);
  } finally {
    clearTimeout(timer);
  }
}

async function fetched(url, maxBytes) {
  const tooLarge = () => new Error(`larger than ${maxBytes} bytes`);
  let response;
  try {
    response = await fetch(url, {
      headers: { accept: "application/jwk-set+json, application/json" },
      // workerd knows "follow" and "manual" only: the 3xx itself comes back, never followed.
      redirect: "manual",
    });
  } catch (error) {
    throw new Error(messageOf(error));
  }
  if (response.status !== 200) {
    // Of no use, whatever it says: its connection is let go unread.
    response.body?.cancel().catch(() => {});
    return [null, null, response.status];
  }
  const declared = response.headers.get("content-length")?.trim();
  if (declared && /^\d+$/.test(declared) && Number(declared) > maxBytes) throw tooLarge();
  const cacheControl = response.headers.get("cache-control");
  let bytes;
  try {
    bytes = await response.arrayBuffer();
  } catch (error) {
    throw new Error(messageOf(error));
  }
  if (bytes.byteLength > maxBytes) throw tooLarge();
  let text;
  try {
    text = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(bytes);
  } catch {
    throw new Error("not UTF-8");
  }
  return [text, cacheControl, 200];
}

function messageOf(error) {
  return typeof error?.message === "string" ? error.message : "an error";
}
