//! What the environment says, read once per isolate.
//!
//! Variables and secrets cannot change while an isolate lives (a new deploy or a changed
//! variable starts new isolates), so the Worker and the objects read them the first time
//! and keep the result, an invalid configuration included.

use std::cell::OnceCell;
use std::rc::Rc;

use worker::Env;

use crate::core::config::{Config, ALL_VARS};
use crate::core::problem::{Problem, ProblemKind};
use crate::core::scope::{SCOPE_VARS, VAR_JWT_HS256_SECRET};
use crate::core::seal::{KeyRing, VAR_STORAGE_ENCRYPTION_KEYS};

/// The optional Analytics Engine binding.
pub const METRICS_BINDING: &str = "IDEMPOTENCY_METRICS";

pub struct Settings {
    /// The configuration, or the 500 problem naming the invalid variable.
    pub config: Result<Config, Problem>,
    /// The admin token, when the `ADMIN_TOKEN` secret (or, in local development, variable)
    /// is set and not empty. Without it the admin API does not exist.
    pub admin_token: Option<String>,
    /// Whether the Analytics Engine dataset is bound.
    pub metrics_bound: bool,
    /// The key ring that seals stored answers (`STORAGE_ENCRYPTION_KEYS`), when set; an
    /// invalid value is a 500 problem naming the secret (never its value).
    pub storage_keys: Result<Option<KeyRing>, Problem>,
}

thread_local! {
    static SETTINGS: OnceCell<Rc<Settings>> = const { OnceCell::new() };
}

/// The settings, read from `env` on the isolate's first call.
pub fn get(env: &Env) -> Rc<Settings> {
    SETTINGS.with(|cell| cell.get_or_init(|| Rc::new(load(env))).clone())
}

fn load(env: &Env) -> Settings {
    Settings {
        config: load_config(env),
        admin_token: admin_token(env),
        metrics_bound: metrics_bound(env),
        storage_keys: storage_keys(env),
    }
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

fn admin_token(env: &Env) -> Option<String> {
    let value = env
        .secret("ADMIN_TOKEN")
        .map(|s| s.to_string())
        .or_else(|_| env.var("ADMIN_TOKEN").map(|v| v.to_string()));
    value.ok().filter(|token| !token.is_empty())
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
