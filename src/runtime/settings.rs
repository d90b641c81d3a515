//! What the environment says, read once per isolate.
//!
//! Variables and secrets cannot change while an isolate lives (a new deploy or a changed
//! variable starts new isolates), so the Worker and the objects read them the first time
//! and keep the result, an invalid configuration included. Every decision about them is
//! the core's (`core::edge_rules::settings`): this module only hands it what the environment holds.

use std::cell::OnceCell;
use std::rc::Rc;

use wasm_bindgen::{JsCast, JsValue};

use worker::{console_error, Env};

use crate::core::edge_rules::env_names::{variable_names, VERSION_BINDING};
use crate::core::edge_rules::metrics_schema::BINDING as METRICS_BINDING;
use crate::core::edge_rules::settings::Settings;

thread_local! {
    // Leaked once per isolate (per Wasm instance), so that a request's state can borrow
    // its configuration across the awaits JavaScript makes (`runtime::entry::Covered`).
    static SETTINGS: OnceCell<&'static Settings> = const { OnceCell::new() };
    static VERSION: OnceCell<Option<Rc<str>>> = const { OnceCell::new() };
}

/// The worker's version, as the version-metadata binding names it (its `id`), read once
/// per isolate; `None` where the binding is not declared.
pub fn worker_version(env: &Env) -> Option<Rc<str>> {
    VERSION.with(|cell| {
        cell.get_or_init(|| {
            let metadata = env.get_binding::<worker::WorkerVersionMetadata>(VERSION_BINDING).ok()?;
            // Read as a value, not through worker's `id()`: that getter traps the instance on
            // a binding of this name without a string `id` (a `[vars]` table, say), and this
            // runs for every request's line.
            let id = js_sys::Reflect::get(metadata.as_ref(), &"id".into()).ok()?.as_string()?;
            Some(Rc::from(id))
        })
        .clone()
    })
}

/// The settings, read from `env` on the isolate's first call.
pub fn get(env: &Env) -> &'static Settings {
    SETTINGS.with(|cell| *cell.get_or_init(|| Box::leak(Box::new(load(env)))))
}

fn load(env: &Env) -> Settings {
    // Each value as a string, or (flagged) the JSON text of any other value: a `[vars]`
    // number, boolean, array or table, which wrangler binds as itself
    // (`IDEMPOTENCY_TTL_SECONDS = 86400`). So not `worker`'s `env.var`, which refuses
    // anything but a string.
    let held: Vec<(&str, String, bool)> = variable_names()
        .filter_map(|name| {
            let value = js_sys::Reflect::get(env, &JsValue::from_str(name)).ok();
            let value = value.filter(|value| !value.is_undefined())?;
            match value.as_string() {
                Some(text) => Some((name, text, false)),
                None => Some((name, js_sys::JSON::stringify(&value).ok()?.as_string()?, true)),
            }
        })
        .collect();
    // Every name the environment holds, for the core's misspelling check: `Object.keys(env)`.
    let object: &js_sys::Object = AsRef::<JsValue>::as_ref(env).unchecked_ref();
    let names = js_sys::Object::keys(object).iter().filter_map(|key| key.as_string()).collect();
    let metrics_bound = env.analytics_engine(METRICS_BINDING).is_ok();
    let settings = Settings::from_held(&held, names, metrics_bound);
    // Once per isolate (settings are loaded once): test-only failures are never silent.
    if let Some(line) = settings.fault_injection.line() {
        console_error!("{}", line);
    }
    settings
}
