// The runtime's WebCrypto calls (`runtime::seal`, `runtime::origin_auth`), each a whole
// operation in one call: a key derived and cached, a nonce drawn and a value sealed, a value
// opened, a digest, an origin request's MAC. Rust awaits one promise where it used to chain
// one per WebCrypto step, which is code its futures no longer carry. They decide nothing:
// which key, which salt and info, which associated data and the envelope's layout are the
// Rust side's (`core::seal`). (A token's signature check is `runtime::identity`'s, through
// `web-sys`.)
//
// A failure rejects with an `Error` whose message says which step failed and what
// WebCrypto said, as the Rust side's messages did before.
//
// A byte argument that comes from Rust is a view of the Wasm memory, which the Rust side may
// reuse (or grow, detaching the view) once the call has returned. So each function hands
// such bytes to WebCrypto (which reads them when it is called) before its first `await`, or,
// when it must await first (a key not yet derived), copies them before that.

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

// The name of a derived key in its object's cache: one object's scope (or id) never changes,
// so a ring key and the HKDF info name it.
function keyName(keyId, info) {
  return `${keyId}\n${String.fromCharCode(...info)}`;
}

// The AES-256-GCM key derived with HKDF-SHA-256 from `secret` with `salt` and `info`, made
// once per `cache` (a `Map` of one object's derived keys), ring key (`keyId`) and `info`.
export async function derivedKey(cache, keyId, secret, salt, info) {
  const name = keyName(keyId, info);
  const cached = cache.get(name);
  if (cached) return cached;
  [secret, salt, info] = [secret.slice(), salt.slice(), info.slice()];
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
// a nonce of `nonceLength` bytes drawn here, followed by the ciphertext and its tag. With the
// key at hand the bytes are sealed where they are; only a key still to derive makes it copy
// them first.
export async function seal(cache, keyId, secret, salt, info, nonceLength, aad, plaintext) {
  let key = cache.get(keyName(keyId, info));
  if (!key) {
    [aad, plaintext] = [aad.slice(), plaintext.slice()];
    key = await derivedKey(cache, keyId, secret, salt, info);
  }
  let nonce;
  try {
    nonce = crypto.getRandomValues(new Uint8Array(nonceLength));
  } catch (error) {
    throw new Error(`drawing a nonce: ${messageOf(error)}`);
  }
  const sealed = await named("sealing", () =>
    subtle().encrypt({ name: "AES-GCM", iv: nonce, additionalData: aad }, key, plaintext),
  );
  const out = new Uint8Array(nonceLength + sealed.byteLength);
  out.set(nonce);
  out.set(new Uint8Array(sealed), nonceLength);
  return out;
}

// `ciphertext` opened with `nonce`, bound to `aad`, under the key `derivedKey` makes of the
// other arguments; rejects on any changed byte. Copies as `seal` does.
export async function open(cache, keyId, secret, salt, info, nonce, aad, ciphertext) {
  let key = cache.get(keyName(keyId, info));
  if (!key) {
    [nonce, aad, ciphertext] = [nonce.slice(), aad.slice(), ciphertext.slice()];
    key = await derivedKey(cache, keyId, secret, salt, info);
  }
  return openWith(key, nonce, aad, ciphertext);
}

// `ciphertext` opened with `key` and `nonce`, bound to `aad`; rejects on any changed byte.
export async function openWith(key, nonce, aad, ciphertext) {
  const plain = await named("opening (a changed byte or the wrong key)", () =>
    subtle().decrypt({ name: "AES-GCM", iv: nonce, additionalData: aad }, key, ciphertext),
  );
  return new Uint8Array(plain);
}

// SHA-256 of `bytes` (a view of JavaScript's own bytes), 32 bytes.
export async function sha256(bytes) {
  return new Uint8Array(await named("digesting", () => subtle().digest("SHA-256", bytes)));
}
