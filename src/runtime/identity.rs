//! The scope's runtime half: reads the scope headers, fetches the JWKS, and has token
//! signatures checked by WebCrypto (`webcrypto.mjs`).
//!
//! `identify` is a covered request's identity as both modes compute it: scope, fingerprint
//! and object name.
//!
//! Every decision is the core's: which token, which claims, which keys, which scope
//! (`core::edge_rules::scope`, `core::primitives::jwt`); when to fetch `SCOPE_JWKS_URL`, how long its keys are
//! fresh, what a failed fetch or an unknown `kid` answers (`core::edge_rules::jwks_cache`); when a
//! verified token may be reused (`core::edge_rules::verified_tokens`). This file only carries out what
//! the core cannot: the JWKS fetch (its timeout and size bound: one call into `jwks.mjs`),
//! one fetch awaited by every request that waits for it (each through a promise of its own,
//! see `Fetch`), and the signature check (no RSA or EC code is compiled into the Wasm).
//!
//! Per isolate it keeps the core's JWKS cache and verified-token memo and the JWKS fetch
//! under way. The signature check is one call into `webcrypto.mjs`, which imports each key
//! once per isolate (an import costs more than a check) and tries the candidate keys in
//! the core's order.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use js_sys::{Array, Promise};
use wasm_bindgen::prelude::wasm_bindgen;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;

use super::now_ms;
use super::platform::{console_error, message_of, race, Context, Delay};
use crate::core::edge_rules::config::{Config, PathConfig};
use crate::core::edge_rules::headers::HeaderLines;
use crate::core::edge_rules::jwks_cache::{
    answer_status, Document, FetchRequest, JwksCache, KeyQuery, Lookup, FETCH_LOST_AFTER_MS, FETCH_TIMEOUT_MS,
};
use crate::core::edge_rules::scope::{self, caller_binding, ScopeConfig, ScopeLog, Start};
use crate::core::edge_rules::verified_tokens::VerifiedTokens;
use crate::core::formats::fingerprint::{
    bound_to_caller, fingerprint, object_name, Digest256, Payload, Scope,
};
use crate::core::formats::keyed_name::keyed_object_name;
use crate::core::primitives::jwt::{
    self, verification_id, Algorithm, Identity, Jwk, KeySet, Unverified, Validity,
};
use crate::core::primitives::key::IdempotencyKey;
use crate::core::vocabulary::problem::Problem;

/// Largest JWKS document read.
const MAX_JWKS_BYTES: usize = 256 * 1024;

#[wasm_bindgen(module = "/src/runtime/jwks.mjs")]
extern "C" {
    /// `[text, cacheControl, 200]` of the JWKS URL's 200 answer of at most `max_bytes`, or
    /// `[null, null, status]` of any other (a redirect is never followed), within
    /// `timeout_ms`; rejects with why it was of no use.
    #[wasm_bindgen(js_name = fetchJwks)]
    fn fetch_jwks_js(url: &str, timeout_ms: f64, max_bytes: f64) -> Promise;
}

#[wasm_bindgen(module = "/src/runtime/webcrypto.mjs")]
extern "C" {
    /// Whether `signature` over `data` verifies under one of `jwks` (their `import_json`
    /// texts), each imported once per isolate; resolves to a boolean, never rejects.
    #[wasm_bindgen(js_name = verifyUnderKeys)]
    fn verify_under_keys(alg: &str, jwks: &Array, signature: &[u8], data: &[u8]) -> Promise;
    /// The same for an HS256 signature under the configured secret.
    #[wasm_bindgen(js_name = verifyUnderSecret)]
    fn verify_under_secret(secret: &[u8], signature: &[u8], data: &[u8]) -> Promise;
}

/// The scope of a covered request, with its log form, or the 401 problem refusing it.
pub async fn scope(
    headers: &HeaderLines,
    config: &Config,
    policy: &PathConfig<'_>,
    keep_alive: Option<&Context>,
) -> std::result::Result<(Scope, ScopeLog), Problem> {
    match scope_start(headers, config, policy) {
        ScopeStart::Decided(scope, log) => Ok((scope, log)),
        ScopeStart::Refused(problem) => Err(problem),
        ScopeStart::Verify(token) => {
            let verified = token_identity(&token, &config.scope, policy.scope.claim, keep_alive).await;
            scope_finish(headers, config, verified)
        }
    }
}

/// What the scope headers alone decide (`core::edge_rules::scope::start`), with the token to verify
/// as its own text, so that the check can run while nothing else is borrowed.
pub enum ScopeStart {
    Decided(Scope, ScopeLog),
    Refused(Problem),
    Verify(String),
}

/// The first half of [`scope`], without waiting: decided, refused, or a token to check
/// ([`token_identity`]) before [`scope_finish`].
pub fn scope_start(headers: &HeaderLines, config: &Config, policy: &PathConfig<'_>) -> ScopeStart {
    let values = header_values(headers, &config.scope.headers);
    let pairs = named_values(&config.scope.headers, &values);
    match scope::start(&config.scope, &policy.scope, &pairs) {
        Start::Decided(scope, log) => ScopeStart::Decided(scope, log),
        Start::Refused(problem) => ScopeStart::Refused(problem),
        Start::Verify(token) => ScopeStart::Verify(token.to_owned()),
    }
}

/// The second half of [`scope`]: the scope once the token's check says `verified`.
pub fn scope_finish(
    headers: &HeaderLines,
    config: &Config,
    verified: std::result::Result<Identity, Unverified>,
) -> std::result::Result<(Scope, ScopeLog), Problem> {
    let values = header_values(headers, &config.scope.headers);
    let pairs = named_values(&config.scope.headers, &values);
    scope::finish(&config.scope, &pairs, verified)
}

/// The identity `token` states once verified under the route's `claim`, or why it does not
/// verify (a route without a claim has no key to verify under).
pub async fn token_identity(
    token: &str,
    config: &ScopeConfig,
    claim: Option<&jwt::ClaimPath>,
    keep_alive: Option<&Context>,
) -> std::result::Result<Identity, Unverified> {
    match claim {
        Some(claim) => verify(token, config, claim, keep_alive).await,
        None => Err(Unverified::NoKey),
    }
}

/// The values of the headers `names`, in order (`None` for an absent one).
pub(super) fn header_values(headers: &HeaderLines, names: &[String]) -> Vec<Option<String>> {
    names.iter().map(|name| headers.get(name)).collect()
}

/// `names` beside their `values` as the core reads headers: (lowercase name, bytes if present).
pub(super) fn named_values<'a>(
    names: &'a [String],
    values: &'a [Option<String>],
) -> Vec<(&'a str, Option<&'a [u8]>)> {
    names
        .iter()
        .map(String::as_str)
        .zip(values.iter().map(|value| value.as_deref().map(str::as_bytes)))
        .collect()
}

/// Verifies `token` and returns the identity it states, or why it does not verify.
async fn verify(
    token: &str,
    config: &ScopeConfig,
    claim: &jwt::ClaimPath,
    keep_alive: Option<&Context>,
) -> std::result::Result<Identity, Unverified> {
    let id = verification_id(claim, token);
    if let Some(identity) = VERIFIED.with(|memo| memo.borrow_mut().recall(&id, now_ms())) {
        return Ok(identity);
    }
    let (token, identity) = jwt::prepare(token, &config.validation, claim, now_ms() / 1_000)?;
    let signing_input = token.signing_input;
    let check = if token.algorithm == Algorithm::Hs256 {
        let secret = config.hs256_secret.as_ref().ok_or(Unverified::NoKey)?;
        verify_under_secret(secret.bytes(), &token.signature, signing_input)
    } else {
        let keys = candidate_keys(config, token.algorithm, token.kid.as_deref(), keep_alive).await?;
        let texts: Array = keys.iter().map(|jwk| JsValue::from_str(&jwk.import_json)).collect();
        verify_under_keys(token.algorithm.jose_name(), &texts, &token.signature, signing_input)
    };
    // Never rejects: a key that cannot be imported is logged and skipped there.
    let verified = JsFuture::from(check).await.is_ok_and(|valid| valid.as_bool() == Some(true));
    if verified {
        let validity = Validity::of(&token.claims, &config.validation);
        VERIFIED.with(|memo| memo.borrow_mut().remember(id, identity.clone(), validity, now_ms()));
        Ok(identity)
    } else {
        Err(Unverified::Signature)
    }
}

/// The keys `token` may verify under, from the inline JWKS and the JWKS URL.
async fn candidate_keys(
    config: &ScopeConfig,
    algorithm: Algorithm,
    kid: Option<&str>,
    keep_alive: Option<&Context>,
) -> std::result::Result<Vec<Jwk>, Unverified> {
    let mut chosen: Vec<Jwk> = Vec::new();
    let mut failures: Vec<Unverified> = Vec::new();
    let mut take = |set: &KeySet, failures: &mut Vec<Unverified>| match jwt::candidates(set, algorithm, kid) {
        Ok(keys) => chosen.extend(keys.into_iter().cloned()),
        Err(reason) => failures.push(reason),
    };
    if let Some(inline) = &config.jwks {
        take(inline, &mut failures);
    }
    if let Some(url) = &config.jwks_url {
        match url_keys(url, kid, keep_alive).await {
            Ok(set) => take(&set, &mut failures),
            Err(reason) => failures.push(reason),
        }
    }
    if !chosen.is_empty() {
        return Ok(chosen);
    }
    // The most telling reason: no keys at all, then an unknown kid, then no key.
    let rank = |reason: &Unverified| match reason {
        Unverified::KeysUnavailable => 0,
        Unverified::UnknownKid => 1,
        _ => 2,
    };
    Err(failures.into_iter().min_by_key(rank).unwrap_or(Unverified::NoKey))
}

/// The end of one JWKS fetch, awaited by every request that waits for it: a JavaScript
/// promise, resolved once the fetch has reported to the cache (it never rejects).
///
/// A promise, because each waiter is a request of its own: workerd delivers a promise's
/// continuation to the request that awaited it, so each waiter resumes in its own context.
/// A Rust future shared between requests (`futures`' `Shared`) is polled only by whichever
/// request wakes it, and every other waiter, having no I/O of its own under way, is
/// cancelled by the runtime as hung: a 500 for each request that arrives while a new
/// isolate fetches its keys (the e2e test `tokens_arriving_during_the_jwks_fetch_…`). The
/// fetch runs as a task of its own (`future_to_promise`), so it goes on whoever waits or
/// stops waiting, held open by the starting request's `waitUntil` ([`awaited_fetch`]).
type Fetch = js_sys::Promise;

thread_local! {
    static VERIFIED: RefCell<VerifiedTokens> = RefCell::new(VerifiedTokens::default());
    static URL_KEYS: RefCell<JwksCache> = RefCell::new(JwksCache::default());
    /// The last fetch the cache handed out: the one under way while the cache has one.
    static URL_FETCH: RefCell<Option<Fetch>> = const { RefCell::new(None) };
}

/// The JWKS URL's keys for a token with this `kid`, as `core::edge_rules::jwks_cache` answers, after
/// the fetches it says to wait for; otherwise why there are none. A fetch this request
/// starts is kept running with `keep_alive`'s `waitUntil` (see [`awaited_fetch`]).
async fn url_keys(
    url: &str,
    kid: Option<&str>,
    keep_alive: Option<&Context>,
) -> std::result::Result<Rc<KeySet>, Unverified> {
    let mut query = KeyQuery::new(kid);
    loop {
        let now = now_ms();
        let (lookup, lost) = URL_KEYS.with(|cache| {
            let mut cache = cache.borrow_mut();
            let lookup = cache.lookup(&mut query, now);
            (lookup, cache.take_lost_fetch())
        });
        if lost {
            // Once per lost fetch: its own request can no longer say what became of it.
            console_error!(
                "jwks: the fetch of SCOPE_JWKS_URL did not end within {} s (its request was cut short?); \
                 given up: tokens use the last good keys, if any, until the next fetch in {} s",
                FETCH_LOST_AFTER_MS / 1_000,
                scope::JWKS_RETRY_SECONDS
            );
        }
        match lookup {
            Lookup::Found(keys) => return Ok(keys),
            Lookup::UnknownKid => return Err(Unverified::UnknownKid),
            Lookup::Unavailable => return Err(Unverified::KeysUnavailable),
            Lookup::Wait => match awaited_fetch(url, keep_alive) {
                // It never rejects. A fetch whose request was cancelled never ends, so the
                // wait stops when the cache gives it up (rule 6 of `core::edge_rules::jwks_cache`); its
                // timer is also this request's own I/O, so the runtime never takes the wait
                // for a hang. Either way the cache is asked again.
                Some(fetch) => {
                    let gave_up = Delay::from(Duration::from_millis(FETCH_LOST_AFTER_MS));
                    race(JsFuture::from(fetch), gave_up).await;
                }
                // Never: the cache waits only for a fetch it handed out, which is kept.
                None => return Err(Unverified::KeysUnavailable),
            },
        }
    }
}

/// The fetch a waiting lookup waits for: the one the cache hands out now, started here, or
/// the one under way. One started here runs in this request, which others may then wait
/// on: `keep_alive` (this request's context, when it has one to lend) holds it open until
/// the fetch ends, so that this request's client leaving does not cancel it for them.
fn awaited_fetch(url: &str, keep_alive: Option<&Context>) -> Option<Fetch> {
    URL_FETCH.with(|slot| {
        let mut slot = slot.borrow_mut();
        if let Some(request) = URL_KEYS.with(|cache| cache.borrow_mut().poll_fetch()) {
            let url = url.to_owned();
            let fetch = wasm_bindgen_futures::future_to_promise(async move {
                fetch_jwks(url, request).await;
                Ok(JsValue::UNDEFINED)
            });
            if let Some(ctx) = keep_alive {
                // Refused only outside a request; the fetch then runs as long as this one.
                ctx.keep_until(&fetch);
            }
            *slot = Some(fetch);
        }
        slot.clone()
    })
}

/// Fetches the JWKS and reports it to the cache, once; why it was of no use is logged.
async fn fetch_jwks(url: String, request: FetchRequest) {
    let fetched = JsFuture::from(fetch_jwks_js(&url, FETCH_TIMEOUT_MS as f64, MAX_JWKS_BYTES as f64))
        .await
        .map_err(message)
        .and_then(|answer| {
            let answer: Array = answer.unchecked_into();
            // A status is a whole number below 1000: exact as an f64.
            let status = answer.get(2).as_f64().map_or(0, |status| status as u16);
            answer_status(status)?;
            Ok(Document {
                text: answer.get(0).as_string().unwrap_or_default(),
                cache_control: answer.get(1).as_string(),
            })
        });
    let handled = URL_KEYS.with(|cache| cache.borrow_mut().handle_fetched(now_ms(), request, fetched));
    if let Err(why) = handled {
        // The URL is configuration, not a secret; the body is never logged.
        console_error!(
            "jwks: fetching SCOPE_JWKS_URL failed ({}); tokens are unverified until it succeeds",
            why
        );
    }
}

/// What a failed fetch threw, as its message alone (the line around it names the fetch).
fn message(error: JsValue) -> String {
    message_of(&error).unwrap_or_else(|| "an error".to_owned())
}

/// Who a covered request belongs to and what it asks for: its fingerprint, its object's
/// name, the scope's key salt, the scope for the log line, and the key's binding to the
/// caller's replay credential (`core::edge_rules::scope`, rule 5), which the rate limit counts by.
pub struct Identified {
    pub fingerprint: Digest256,
    pub name: String,
    pub scope_salt: Digest256,
    pub scope_log: ScopeLog,
    pub binding: Option<Digest256>,
}

/// Identifies a covered request, the same way in enforce and observe mode so that both
/// reach the same object: the caller's scope (a 401 problem when the
/// request may not be scoped), the payload fingerprint and the object name (keyed with
/// `OBJECT_NAME_KEY` when set).
#[allow(clippy::too_many_arguments)]
pub async fn identify(
    headers: &HeaderLines,
    method: &str,
    path_and_query: &str,
    key: &IdempotencyKey,
    config: &Config,
    policy: &PathConfig<'_>,
    body: &[u8],
    name_key: Option<&[u8]>,
    keep_alive: Option<&Context>,
) -> std::result::Result<Identified, Problem> {
    let (scope, scope_log) = self::scope(headers, config, policy, keep_alive).await?;
    let request = Arrived { headers, method, path_and_query, key, config, policy, body, name_key };
    Ok(identified(&request, scope, scope_log))
}

/// What [`identified`] reads of a covered request besides its scope.
pub struct Arrived<'a> {
    pub headers: &'a HeaderLines,
    pub method: &'a str,
    pub path_and_query: &'a str,
    pub key: &'a IdempotencyKey,
    pub config: &'a Config,
    pub policy: &'a PathConfig<'a>,
    pub body: &'a [u8],
    pub name_key: Option<&'a [u8]>,
}

/// [`identify`] once the scope is known: the fingerprint and the object's name.
pub fn identified(request: &Arrived<'_>, scope: Scope, scope_log: ScopeLog) -> Identified {
    let Arrived { headers, method, path_and_query, key, config, policy, body, name_key } = *request;
    let scope_salt = scope.key_salt();
    let content_type = headers.get("content-type");
    let extra_values: Vec<Option<String>> =
        policy.fingerprint_headers.iter().map(|name| headers.get(name)).collect();
    let extra_headers: Vec<(&str, Option<&str>)> = policy
        .fingerprint_headers
        .iter()
        .map(String::as_str)
        .zip(extra_values.iter().map(Option::as_deref))
        .collect();
    let payload = Payload {
        method,
        path_and_query,
        content_type: content_type.as_deref(),
        extra_headers: &extra_headers,
        body,
        body_shape: policy.body_shape,
    };
    // Rule 5 of `core::edge_rules::scope`: a replay goes only to the original's credential. The values
    // are read only where a binding can apply (never with the default scope).
    let binding = if config.scope.binds_replays() {
        let values = header_values(headers, &config.scope.replay_headers);
        let replay = named_values(&config.scope.replay_headers, &values);
        caller_binding(&config.scope, scope_log.kind, &replay)
    } else {
        None
    };
    Identified {
        fingerprint: bound_to_caller(fingerprint(&payload), binding),
        name: keyed_object_name(name_key, object_name(scope, key.as_str())),
        scope_salt,
        scope_log,
        binding,
    }
}
