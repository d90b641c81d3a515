// The runtime's WebCrypto calls (`runtime::origin_auth`, `runtime::identity`; sealing is
// `runtime::seal`'s, through `web-sys`), each a whole operation in one call: a digest, an
// origin request's MAC, a token's signature checked under its candidate keys. They decide
// nothing: which keys a token may verify under is the core's (`core::jwt`).
//
// A failure rejects with an `Error` whose message says which step failed and what
// WebCrypto said, as the Rust side's messages did before.
//
// A byte argument that comes from Rust is a view of the Wasm memory, which the Rust side may
// reuse (or grow, detaching the view) once the call has returned. So each function hands
// such bytes to WebCrypto (which reads them when it is called) before its first `await`, or
// copies them before that.

const subtle = () => crypto.subtle;

function messageOf(error) {
  return typeof error?.message === "string" ? error.message : "WebCrypto refused";
}

// Runs `step`, naming `what` in the message of what it throws or rejects with. `step` runs
// at once, in the caller's turn.
async function named(what, step) {
  try {
    return await step();
  } catch (error) {
    throw new Error(`${what}: ${messageOf(error)}`);
  }
}

// SHA-256 of a request body (`runtime::origin_auth`, RFC 9530's Content-Digest): `body` is
// JavaScript's own (an `ArrayBuffer` or a view), or null for none (the digest of no bytes).
export async function bodyDigest(body) {
  return new Uint8Array(await named("digesting", () => subtle().digest("SHA-256", body ?? new Uint8Array(0))));
}

// The HMAC-SHA-256 key of `ORIGIN_AUTH_SECRET`, imported once per isolate (the secret cannot
// change while it lives; the secret is kept beside its key all the same, so another never
// signs with it).
let originKey = null;

// The origin signature's MAC (`runtime::origin_auth`): HMAC-SHA-256 under `secret` of
// `canonicalHead` followed by the SHA-256 of `body` in lowercase hex (`core::origin_auth`'s
// canonical string, whose last line is that digest). `body` is JavaScript's own (an
// `ArrayBuffer` or a view), or null for none.
export async function originMac(secret, canonicalHead, body) {
  const digest = await named("digesting the body", () => subtle().digest("SHA-256", body ?? new Uint8Array(0)));
  const hex = Array.from(new Uint8Array(digest), (byte) => byte.toString(16).padStart(2, "0")).join("");
  let key = originKey?.secret === secret ? originKey.key : null;
  if (!key) {
    key = await named("importing ORIGIN_AUTH_SECRET", () =>
      subtle().importKey("raw", new TextEncoder().encode(secret), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]),
    );
    originKey = { secret, key };
  }
  const mac = await named("signing", () => subtle().sign("HMAC", key, new TextEncoder().encode(canonicalHead + hex)));
  return new Uint8Array(mac);
}

// A token's signature check (`runtime::identity`): the import and `verify` parameters of each
// JOSE algorithm the core accepts (`core::jwt::Algorithm`). ECDSA's signature is raw `r || s`,
// which is JWS's format too.
const JOSE = {
  RS256: [{ name: "RSASSA-PKCS1-v1_5", hash: "SHA-256" }, { name: "RSASSA-PKCS1-v1_5" }],
  ES256: [{ name: "ECDSA", namedCurve: "P-256" }, { name: "ECDSA", hash: "SHA-256" }],
  EdDSA: [{ name: "Ed25519" }, { name: "Ed25519" }],
  HS256: [{ name: "HMAC", hash: "SHA-256" }, { name: "HMAC" }],
};

// Imported verification keys, per isolate, by the key's public JWK (or "HS256" for the HS256
// secret): an import costs more than a check. Past 64 (rotation leaves old keys behind) the
// cache starts again.
const verifyKeys = new Map();
const MAX_VERIFY_KEYS = 64;

async function verifyKey(id, alg, format, keyData) {
  const cached = verifyKeys.get(id);
  if (cached) return cached;
  const key = await subtle().importKey(format, keyData, JOSE[alg][0], false, ["verify"]);
  if (verifyKeys.size >= MAX_VERIFY_KEYS) verifyKeys.clear();
  verifyKeys.set(id, key);
  return key;
}

// Whether `signature` over `data` verifies under one of `jwks` (minimal public JWKs as JSON
// texts, `core::jwt::Jwk::import_json`), for the JOSE algorithm `alg`. A key that cannot be
// imported is logged (its algorithm and WebCrypto's message) and skipped; any other error
// counts as a failed check. Never rejects.
export async function verifyUnderKeys(alg, jwks, signature, data) {
  [signature, data] = [signature.slice(), data.slice()];
  for (const jwk of jwks) {
    let key;
    try {
      key = await verifyKey(jwk, alg, "jwk", JSON.parse(jwk));
    } catch (error) {
      console.error(`jwks: a ${alg} key could not be imported: ${error?.message ?? "an error"}`);
      continue;
    }
    if (await checked(alg, key, signature, data)) return true;
  }
  return false;
}

// Whether the HS256 `signature` over `data` verifies under `secret`. Never rejects.
export async function verifyUnderSecret(secret, signature, data) {
  [secret, signature, data] = [secret.slice(), signature.slice(), data.slice()];
  let key;
  try {
    key = await verifyKey("HS256", "HS256", "raw", secret);
  } catch {
    return false;
  }
  return checked("HS256", key, signature, data);
}

async function checked(alg, key, signature, data) {
  try {
    return (await subtle().verify(JOSE[alg][1], key, signature, data)) === true;
  } catch {
    return false;
  }
}
