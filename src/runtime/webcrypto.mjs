// The runtime's WebCrypto calls (`runtime::seal`), each a whole operation in one call: a
// key derived and cached, a nonce drawn and a value sealed, a value opened, a digest. Rust
// awaits one promise where it used to chain one per WebCrypto step, which is code its
// futures no longer carry (issue 23). They decide nothing: which key, which salt and info,
// which associated data and the envelope's layout are the Rust side's (`core::seal`).
//
// A failure rejects with an `Error` whose message says which step failed and what
// WebCrypto said, as the Rust side's messages did before.
//
// A byte argument that comes from Rust is a view of the Wasm memory, which the Rust side may
// reuse (or grow, detaching the view) once the call has returned: each function copies
// those before its first `await`.

const subtle = () => crypto.subtle;

// Runs `step`, naming `what` in the message of what it throws or rejects with.
async function named(what, step) {
  try {
    return await step();
  } catch (error) {
    const message = typeof error?.message === "string" ? error.message : "WebCrypto refused";
    throw new Error(`${what}: ${message}`);
  }
}

// The AES-256-GCM key derived with HKDF-SHA-256 from `secret` with `salt` and `info`, made
// once per `cache` (a `Map` of one object's derived keys: its scope, or its id, never
// changes, so a ring key and the HKDF info name the key), ring key (`keyId`) and `info`.
export async function derivedKey(cache, keyId, secret, salt, info) {
  [secret, salt, info] = [secret.slice(), salt.slice(), info.slice()];
  const name = `${keyId}\n${String.fromCharCode(...info)}`;
  const cached = cache.get(name);
  if (cached) return cached;
  const base = await named("importing a storage key", () =>
    subtle().importKey("raw", secret, "HKDF", false, ["deriveKey"]),
  );
  const key = await named("deriving a storage key", () =>
    subtle().deriveKey({ name: "HKDF", hash: "SHA-256", salt, info }, base, { name: "AES-GCM", length: 256 }, false, [
      "encrypt",
      "decrypt",
    ]),
  );
  cache.set(name, key);
  return key;
}

// `plaintext` sealed bound to `aad` under the key `derivedKey` makes of the other arguments:
// a nonce of `nonceLength` bytes drawn here, followed by the ciphertext and its tag.
export async function seal(cache, keyId, secret, salt, info, nonceLength, aad, plaintext) {
  [aad, plaintext] = [aad.slice(), plaintext.slice()];
  const key = await derivedKey(cache, keyId, secret, salt, info);
  const nonce = await named("drawing a nonce", () => crypto.getRandomValues(new Uint8Array(nonceLength)));
  const sealed = await named("sealing", () =>
    subtle().encrypt({ name: "AES-GCM", iv: nonce, additionalData: aad }, key, plaintext),
  );
  const out = new Uint8Array(nonceLength + sealed.byteLength);
  out.set(nonce);
  out.set(new Uint8Array(sealed), nonceLength);
  return out;
}

// `ciphertext` opened with `nonce`, bound to `aad`, under the key `derivedKey` makes of the
// other arguments; rejects on any changed byte.
export async function open(cache, keyId, secret, salt, info, nonce, aad, ciphertext) {
  [nonce, aad, ciphertext] = [nonce.slice(), aad.slice(), ciphertext.slice()];
  return openWith(await derivedKey(cache, keyId, secret, salt, info), nonce, aad, ciphertext);
}

// `ciphertext` (a view of JavaScript's own bytes) opened with `key` and `nonce`, bound to
// `aad`; rejects on any changed byte.
export async function openWith(key, nonce, aad, ciphertext) {
  [nonce, aad] = [nonce.slice(), aad.slice()];
  const plain = await named("opening (a changed byte or the wrong key)", () =>
    subtle().decrypt({ name: "AES-GCM", iv: nonce, additionalData: aad }, key, ciphertext),
  );
  return new Uint8Array(plain);
}

// SHA-256 of `bytes` (a view of JavaScript's own bytes), 32 bytes.
export async function sha256(bytes) {
  return new Uint8Array(await named("digesting", () => subtle().digest("SHA-256", bytes)));
}

