//! The Worker's rate limit for covered requests (`RATE_LIMITER`, a Workers Rate Limiting
//! binding, or the one a route names), checked before any object exists. Which keys are
//! limited, in which order, and what each answer means is the core's
//! (`core::edge_rules::scope::rate_limit_keys`, `after_limit`); this file
//! asks the binding (`worker`'s `RateLimiter`) about them in that order, and stops at the
//! first key over: the keys after it are not counted.
//! The limiter guards against floods, not the idempotency promise: one that fails lets the
//! request on, and says so.

use web_sys::Response;

use super::respond;
use crate::core::edge_rules::config::RateLimiterChoice;
use crate::core::edge_rules::edge;
use crate::core::edge_rules::env_names::RATE_LIMITER_BINDING;
use crate::core::edge_rules::scope::{after_limit, AfterLimit};
use crate::core::vocabulary::trace::Trace;
use worker::{console_error, Env, Result};

/// Asks the limiter `choice` names about `limit_keys` (`core::edge_rules::identify::Identified::
/// rate_limit_keys`), in order, up to the first key over: `None` to go on, or the answer
/// (429 over the limit; 500 when a route names a binding that is not bound).
pub(super) async fn check(
    env: &Env,
    choice: Option<RateLimiterChoice<'_>>,
    limit_keys: Vec<String>,
    trace: &Trace,
) -> Option<Result<Response>> {
    let limiter = match choice {
        None => return None,
        Some(RateLimiterChoice::Default) => env.rate_limiter(RATE_LIMITER_BINDING).ok()?,
        Some(RateLimiterChoice::Named(name)) => match env.rate_limiter(name) {
            Ok(limiter) => limiter,
            Err(_) => return Some(respond::refused(env, &edge::rate_limiter_unbound(name), trace)),
        },
    };
    for key in limit_keys {
        let answer = limiter.limit(key).await.map(|outcome| outcome.success);
        match after_limit(answer.map_err(|error| error.to_string())) {
            AfterLimit::Next => {}
            AfterLimit::Over => return Some(respond::refused(env, &edge::rate_limited(), trace)),
            AfterLimit::LetThrough(line) => {
                console_error!("{}", line);
                return None;
            }
        }
    }
    None
}
