//! What the environment says, read once per isolate.
//!
//! Variables and secrets cannot change while an isolate lives (a new deploy or a changed
//! variable starts new isolates), so the Worker and the objects read them the first time
//! and keep the result, an invalid configuration included.

use std::cell::OnceCell;
use std::rc::Rc;

use wasm_bindgen::{JsCast, JsValue};
use worker::{console_error, Env};

use crate::core::admin::{check_token, VAR_ADMIN_TOKEN};
use crate::core::config::{
    Config, FaultInjection, ALL_VARS, VAR_ALARM_FAULT_INJECTION, VAR_CHUNK_WRITE_FAULT_INJECTION,
    VAR_DELETE_FAULT_INJECTION,
};
use crate::core::env_names::find_misspelt;
use crate::core::keyed_name::{check_name_key, VAR_OBJECT_NAME_KEY};
use crate::core::log_decisions::{LogDecisions, VAR_LOG_DECISIONS};
use crate::core::origin_auth::{check_secret, VAR_ORIGIN_AUTH_SECRET};
use crate::core::problem::{Problem, ProblemKind};
use crate::core::scope::{SCOPE_VARS, VAR_JWT_HS256_SECRET};
use crate::core::seal::{
    parse_allow_unsealed, KeyRing, VAR_STORAGE_ALLOW_UNSEALED, VAR_STORAGE_ENCRYPTION_KEYS,
};

/// The optional Analytics Engine binding.
pub const METRICS_BINDING: &str = "IDEMPOTENCY_METRICS";

pub struct Settings {
    /// The configuration, or the 500 problem naming the invalid variable.
    pub config: Result<Config, Problem>,
    /// The admin token, when the `ADMIN_TOKEN` secret is set and not empty. Without it the
    /// admin API does not exist.
    pub admin_token: Option<String>,
    /// The first problem with the environment beyond `config`: a misspelt variable, or a
    /// secret that is too short (`ADMIN_TOKEN`, `ORIGIN_AUTH_SECRET`, `OBJECT_NAME_KEY`),
    /// or `TRUSTED_CLIENT_IP` not `true`/`false`. Every request is then a 500 naming it.
    pub refusal: Option<Problem>,
    /// `ORIGIN_AUTH_SECRET`: sign every origin request (`core::origin_auth`).
    pub origin_auth_secret: Option<String>,
    /// `OBJECT_NAME_KEY`: key the object names (`core::keyed_name`).
    pub object_name_key: Option<Vec<u8>>,
    /// `TRUSTED_CLIENT_IP`: replace client-sent forwarding headers with `CF-Connecting-IP`.
    pub trusted_client_ip: bool,
    /// The `*_FAULT_INJECTION` variables: how many alarm runs, record deletions and chunk
    /// writes of each object instance fail on purpose (tests only; unset in production,
    /// and logged on every isolate start when set).
    pub fault_injection: FaultInjection,
    /// Whether the Analytics Engine dataset is bound.
    pub metrics_bound: bool,
    /// `LOG_DECISIONS`: which decision lines are written (`core::log_decisions`).
    pub log_decisions: LogDecisions,
    /// The key ring that seals stored answers (`STORAGE_ENCRYPTION_KEYS`), when set; an
    /// invalid value is a 500 problem naming the secret (never its value).
    pub storage_keys: Result<Option<KeyRing>, Problem>,
    /// `STORAGE_ALLOW_UNSEALED` (`core::seal`, rule 4).
    pub storage_allow_unsealed: bool,
}

thread_local! {
    static SETTINGS: OnceCell<Rc<Settings>> = const { OnceCell::new() };
}

/// The settings, read from `env` on the isolate's first call.
pub fn get(env: &Env) -> Rc<Settings> {
    SETTINGS.with(|cell| cell.get_or_init(|| Rc::new(load(env))).clone())
}

/// The Rate Limiting binding.
pub const RATE_LIMITER_BINDING: &str = "RATE_LIMITER";

fn load(env: &Env) -> Settings {
    let invalid = |detail: String| Problem::new(ProblemKind::InvalidConfig, detail);
    let mut refusal = misspelt_variable(env).map(|m| invalid(m.detail()));
    let mut first = |problem: Problem| {
        if refusal.is_none() {
            refusal = Some(problem);
        }
    };
    let admin_token = match check_token(&secret(env, VAR_ADMIN_TOKEN).unwrap_or_default()) {
        Ok(token) => token.map(str::to_owned),
        Err(reason) => {
            first(invalid(reason));
            None
        }
    };
    let origin_auth_secret = secret(env, VAR_ORIGIN_AUTH_SECRET).filter(|s| !s.is_empty());
    if let Some(Err(reason)) = origin_auth_secret.as_deref().map(check_secret) {
        first(invalid(reason));
    }
    let object_name_key = secret(env, VAR_OBJECT_NAME_KEY).filter(|s| !s.is_empty());
    if let Some(Err(reason)) = object_name_key.as_deref().map(check_name_key) {
        first(invalid(reason));
    }
    let trusted_client_ip = match secret(env, "TRUSTED_CLIENT_IP").as_deref().map(str::trim) {
        None | Some("") | Some("false") => false,
        Some("true") => true,
        Some(_) => {
            first(invalid("TRUSTED_CLIENT_IP is invalid: expected true or false".to_owned()));
            false
        }
    };
    let log_decisions =
        LogDecisions::parse(secret(env, VAR_LOG_DECISIONS).as_deref()).unwrap_or_else(|reason| {
            first(invalid(reason));
            LogDecisions::All
        });
    let values: Vec<(&'static str, Option<String>)> =
        [VAR_ALARM_FAULT_INJECTION, VAR_DELETE_FAULT_INJECTION, VAR_CHUNK_WRITE_FAULT_INJECTION]
            .into_iter()
            .map(|name| (name, secret(env, name)))
            .collect();
    let lookup = |name: &'static str| values.iter().find(|(n, _)| *n == name).and_then(|(_, v)| v.as_deref());
    let fault_injection = FaultInjection::from_vars(lookup).unwrap_or_else(|error| {
        first(invalid(error.detail()));
        FaultInjection::default()
    });
    // Once per isolate (settings are loaded once): test-only failures are never silent.
    if let Some(line) = fault_injection.line() {
        console_error!("{}", line);
    }
    let config = load_config(env);
    let storage_keys = storage_keys(env);
    let storage_allow_unsealed = parse_allow_unsealed(secret(env, VAR_STORAGE_ALLOW_UNSEALED).as_deref())
        .unwrap_or_else(|reason| {
            first(invalid(reason));
            false
        });
    // A stored request holds the caller's credentials: never stored unsealed.
    if matches!((&config, &storage_keys), (Ok(config), Ok(None)) if config.accepts_async()) {
        first(invalid(format!(
            "ASYNC_ACCEPT is prefer (or a route's async_accept is), which stores requests, credentials included: set the secret {VAR_STORAGE_ENCRYPTION_KEYS} so that they are sealed."
        )));
    }
    Settings {
        config,
        admin_token,
        refusal,
        origin_auth_secret,
        object_name_key: object_name_key.map(String::into_bytes),
        trusted_client_ip,
        fault_injection,
        metrics_bound: metrics_bound(env),
        log_decisions,
        storage_keys,
        storage_allow_unsealed,
    }
}

/// A secret's (or variable's) value. Both are plain strings in the runtime: what makes a
/// secret is how it was set (`wrangler secret put`), which docs/deploy.md requires for the
/// admin token and the keys, and which a host test checks wrangler.toml against.
fn secret(env: &Env, name: &str) -> Option<String> {
    env.secret(name).map(|s| s.to_string()).ok()
}

/// A binding of any kind, when the environment has it.
pub fn binding(env: &Env, name: &str) -> Option<JsValue> {
    js_sys::Reflect::get(AsRef::<JsValue>::as_ref(env), &JsValue::from_str(name))
        .ok()
        .filter(|v| !v.is_undefined())
}

/// A name in the environment that looks like a misspelt variable (`core::env_names`).
/// workers-rs cannot list the environment; `Object.keys(env)` can.
fn misspelt_variable(env: &Env) -> Option<crate::core::env_names::Misspelt> {
    let object: &js_sys::Object = AsRef::<JsValue>::as_ref(env).unchecked_ref();
    let keys = js_sys::Object::keys(object);
    let mut names: Vec<String> = keys.iter().filter_map(|key| key.as_string()).collect();
    names.sort();
    find_misspelt(names.iter().map(String::as_str))
}

fn load_config(env: &Env) -> Result<Config, Problem> {
    let values: Vec<(&'static str, Option<String>)> = ALL_VARS
        .iter()
        .chain(SCOPE_VARS.iter())
        .map(|&name| {
            // The HS256 key is a secret in production, a `--var` in local development.
            let value = if name == VAR_JWT_HS256_SECRET {
                env.secret(name).map(|s| s.to_string()).or_else(|_| env.var(name).map(|v| v.to_string()))
            } else {
                env.var(name).map(|v| v.to_string())
            };
            (name, value.ok())
        })
        .collect();
    Config::from_vars(|name| values.iter().find(|(n, _)| *n == name).and_then(|(_, v)| v.as_deref()))
        .map_err(|error| Problem::new(ProblemKind::InvalidConfig, error.detail()))
}

fn storage_keys(env: &Env) -> Result<Option<KeyRing>, Problem> {
    let value = env
        .secret(VAR_STORAGE_ENCRYPTION_KEYS)
        .map(|s| s.to_string())
        .or_else(|_| env.var(VAR_STORAGE_ENCRYPTION_KEYS).map(|v| v.to_string()));
    match value.ok().filter(|raw| !raw.trim().is_empty()) {
        None => Ok(None),
        Some(raw) => KeyRing::parse(&raw).map(Some).map_err(|reason| {
            Problem::new(
                ProblemKind::InvalidConfig,
                format!("{VAR_STORAGE_ENCRYPTION_KEYS} is invalid: {reason}"),
            )
        }),
    }
}

fn metrics_bound(env: &Env) -> bool {
    env.analytics_engine(METRICS_BINDING).is_ok()
}
