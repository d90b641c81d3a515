//! The platform calls the Worker needs that `worker` (workers-rs 0.8.7) does not bind, each
//! bound here with `wasm-bindgen` on `worker`'s own types. Owns no decision.

use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use worker::ObjectNamespace;

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
