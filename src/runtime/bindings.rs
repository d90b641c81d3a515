//! The platform calls the runtime needs that `worker` (workers-rs 0.8.7) does not bind, each
//! bound here with `wasm-bindgen` on `worker`'s own types: the Worker's (a namespace's
//! jurisdiction) and the Durable Object's (its storage's synchronous key-value API and
//! `transactionSync`). Owns no decision.
//!
//! Not bound here, but below `worker`'s API: the Worker's call to a key's object is
//! `worker_sys`'s stub `fetch` (`runtime::object_call`), because `Stub::fetch_with_request`
//! answers a call that threw before it was sent and one the platform rejected as one error,
//! without the rejection's `overloaded` and `remote` flags (no upstream issue found).

use js_sys::Uint8Array;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use worker::{ObjectNamespace, Storage};

#[wasm_bindgen]
extern "C" {
    /// A Durable Object namespace, as the calls below see it.
    type DurableObjectNamespace;

    /// `namespace.jurisdiction(name)`: workers-rs binds jurisdictions only for new unique
    /// ids (`unique_id_with_jurisdiction`), not the namespace restricted to one, which named
    /// objects need (no upstream issue found).
    #[wasm_bindgen(method, catch, js_name = jurisdiction)]
    fn jurisdiction_js(this: &DurableObjectNamespace, name: &str) -> Result<JsValue, JsValue>;
}

/// `namespace` restricted to the jurisdiction `name` (`"eu"`, `"fedramp"`).
pub fn jurisdiction(namespace: &ObjectNamespace, name: &str) -> Result<ObjectNamespace, JsValue> {
    let raw: &DurableObjectNamespace = AsRef::<JsValue>::as_ref(namespace).unchecked_ref();
    Ok(raw.jurisdiction_js(name)?.unchecked_into())
}

#[wasm_bindgen]
extern "C" {
    /// A Durable Object's storage, as the calls below see it (`Storage::as_raw`).
    type RawStorage;

    /// `storage.kv`: workers-rs 0.8.7 binds only the asynchronous key-value API, whose
    /// `put` returns a promise; the synchronous one of SQLite-backed objects (the record's
    /// store, written in the caller's turn) is the open PR workers-rs#978.
    #[wasm_bindgen(method, getter)]
    fn kv(this: &RawStorage) -> SyncKv;

    /// `storage.transactionSync(callback)`: workers-rs 0.8.7 binds only the asynchronous
    /// `transaction` of the key-value API (no upstream issue found), and its SQL `exec`
    /// refuses `BEGIN` (cloudflare-docs#18288), so a synchronous transaction has no other way
    /// in. Committed when `callback` returns, rolled back (and the exception rethrown) when it
    /// throws.
    #[wasm_bindgen(method, catch, js_name = transactionSync)]
    fn transaction_sync_js(
        this: &RawStorage,
        callback: &mut dyn FnMut() -> Result<JsValue, JsValue>,
    ) -> Result<JsValue, JsValue>;

    /// A SQLite-backed object's synchronous key-value API: its values live in the object's
    /// own database (a table workerd creates for itself, `_cf_KV`), written in the caller's
    /// turn like SQL, so the output gate holds an outgoing fetch until they are durable.
    #[wasm_bindgen(extends = js_sys::Object)]
    #[derive(Clone)]
    pub type SyncKv;

    /// The value stored under `key` (structured-cloned), or `undefined`.
    #[wasm_bindgen(method, catch)]
    pub fn get(this: &SyncKv, key: &str) -> Result<JsValue, JsValue>;

    #[wasm_bindgen(method, catch)]
    pub fn put(this: &SyncKv, key: &str, value: &Uint8Array) -> Result<(), JsValue>;

    /// Whether a value was deleted.
    #[wasm_bindgen(method, catch)]
    pub fn delete(this: &SyncKv, key: &str) -> Result<bool, JsValue>;
}

fn raw(storage: &Storage) -> &RawStorage {
    AsRef::<JsValue>::as_ref(storage.as_raw()).unchecked_ref()
}

/// The synchronous key-value API of `storage` (`storage.kv`).
pub fn sync_kv(storage: &Storage) -> SyncKv {
    raw(storage).kv()
}

/// Runs `callback` in one synchronous transaction of `storage` (`transactionSync`).
pub fn transaction_sync(
    storage: &Storage,
    callback: &mut impl FnMut() -> Result<JsValue, JsValue>,
) -> Result<JsValue, JsValue> {
    raw(storage).transaction_sync_js(callback)
}
