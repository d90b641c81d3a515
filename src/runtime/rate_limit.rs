//! The Worker's rate limit for covered requests (`RATE_LIMITER`, a Workers Rate Limiting
//! binding, or the one a route names), checked before any object exists. Which keys are
//! limited, and in which order, is the core's (`core::edge_rules::scope::rate_limit_keys`); this file
//! asks the binding about them in that order, in one JavaScript call (`boundary.mjs`'s
//! `withinLimits`, which stops at the first key over: the keys after it are not counted).
//! The limiter guards against floods, not the idempotency promise: one that fails lets the
//! request on, and says so.

use js_sys::Promise;
use wasm_bindgen::{JsCast, JsValue};
use web_sys::Response;

use super::boundary;
use super::platform::{console_error, Env, Result};
use super::{respond, settings};
use crate::core::edge_rules::config::RateLimiterChoice;
use crate::core::edge_rules::edge;
use crate::core::vocabulary::trace::Trace;

/// What the rate limit makes of a covered request before the limiter answers.
pub(super) enum Limit {
    /// No limiter applies: go on.
    Free,
    /// The answer at once: 500 when a route names a binding that is not bound.
    Refused(Result<Response>),
    /// The limiter was asked about every one of the keys; its verdict goes to [`refusal`].
    Asked(Promise),
}

/// Asks the limiter `choice` names about `limit_keys` (`core::edge_rules::scope::rate_limit_keys`).
pub(super) fn ask(
    env: &Env,
    choice: Option<RateLimiterChoice<'_>>,
    limit_keys: &[String],
    trace: &Trace,
) -> Limit {
    let binding = match choice {
        None => return Limit::Free,
        Some(RateLimiterChoice::Default) => match env.binding(settings::RATE_LIMITER_BINDING) {
            Ok(binding) => binding,
            Err(_) => return Limit::Free,
        },
        Some(RateLimiterChoice::Named(name)) => match env.binding(name) {
            Ok(binding) => binding,
            Err(_) => return Limit::Refused(respond::refused(env, &edge::rate_limiter_unbound(name), trace)),
        },
    };
    let keys: String = limit_keys.iter().flat_map(|key| [key.as_str(), "\n"]).collect();
    Limit::Asked(boundary::within_limits(&binding, &keys))
}

/// The answer the limiter's `verdict` (as `withinLimits` resolves) makes: `None` to go on,
/// or 429 when a key is over its limit.
pub(super) fn refusal(env: &Env, verdict: JsValue, trace: &Trace) -> Option<Result<Response>> {
    match verdict.as_bool() {
        Some(true) => None,
        Some(false) => Some(respond::refused(env, &edge::rate_limited(), trace)),
        // The limiter is a guard against floods, not a part of the idempotency promise: a
        // limiter that fails lets the request on, and says so.
        None => {
            let thrown =
                verdict.dyn_into::<js_sys::Array>().map_or(JsValue::UNDEFINED, |failed| failed.get(0));
            console_error!(
                "rate limiter failed, request let through: {}",
                super::platform::Error::from(thrown)
            );
            None
        }
    }
}
