//! The Worker's rate limit for covered requests (`RATE_LIMITER`, a Workers Rate Limiting
//! binding, or the one a route names), checked before any object exists. Which keys are
//! limited is the core's (`core::scope::rate_limit_keys`); this file asks the binding.
//! The limiter guards against floods, not the idempotency promise: one that fails lets the
//! request on, and says so.

use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use web_sys::Response;

use super::platform::{console_error, Env, Result};
use super::{respond, settings};
use crate::core::config::RateLimiterChoice;
use crate::core::edge;
use crate::core::log::Trace;

/// The rate limit for a covered request, checked before any object exists: `None` to go
/// on, or the answer (429 when any of `limit_keys` is over the limit, or 500 when a route
/// names a binding that is not bound). The keys are `core::scope::rate_limit_keys`.
pub(super) async fn refusal(
    env: &Env,
    choice: Option<RateLimiterChoice<'_>>,
    limit_keys: &[String],
    trace: &Trace,
) -> Option<Result<Response>> {
    let binding = match choice? {
        RateLimiterChoice::Default => env.binding(settings::RATE_LIMITER_BINDING).ok()?,
        RateLimiterChoice::Named(name) => match env.binding(name) {
            Ok(binding) => binding,
            Err(_) => return Some(respond::refused(env, &edge::rate_limiter_unbound(name), trace)),
        },
    };
    let mut verdict = Ok(true);
    for key in limit_keys {
        verdict = limit(&binding, key).await;
        if verdict != Ok(true) {
            break;
        }
    }
    match verdict {
        Ok(true) => None,
        Ok(false) => Some(respond::refused(env, &edge::rate_limited(), trace)),
        // The limiter is a guard against floods, not a part of the idempotency promise: a
        // limiter that fails lets the request on, and says so.
        Err(error) => {
            console_error!(
                "rate limiter failed, request let through: {}",
                super::platform::Error::from(error)
            );
            None
        }
    }
}

/// `binding.limit({ key })`; whether the request is within the limit.
async fn limit(binding: &JsValue, key: &str) -> std::result::Result<bool, JsValue> {
    let call: js_sys::Function = js_sys::Reflect::get(binding, &JsValue::from_str("limit"))?.dyn_into()?;
    let options = js_sys::Object::new();
    js_sys::Reflect::set(&options, &JsValue::from_str("key"), &JsValue::from_str(key))?;
    let pending: js_sys::Promise = call.call1(binding, &options)?.dyn_into()?;
    let outcome = JsFuture::from(pending).await?;
    Ok(js_sys::Reflect::get(&outcome, &JsValue::from_str("success"))?.as_bool() == Some(true))
}
