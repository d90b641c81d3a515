//! The scope's runtime half: reads the scope headers, fetches and caches the JWKS, imports
//! keys into WebCrypto once per isolate and checks signatures with `crypto.subtle`.
//!
//! Every decision is `core::scope`'s and `core::jwt`'s: which token, which claims, which
//! keys, which scope. This file only carries out the two things the core cannot: the JWKS
//! fetch and the signature check (no RSA or EC code is compiled into the Wasm).
//!
//! Per isolate it keeps:
//! - the tokens that verified, by a hash of token and claim path, for at most 10 minutes
//!   and never past their `exp` (checked again on every use): a client sends one access
//!   token many times, and a signature check is most of the cost of a verified scope;
//! - the imported `CryptoKey`s, by the key's public JWK (an import costs more than a check);
//! - the JWKS fetched from `SCOPE_JWKS_URL`, for its `Cache-Control` max-age (clamped to
//!   30 s … 1 day), or 10 minutes without one. Concurrent requests share one fetch.
//!   - A token whose `kid` is unknown refetches at most once per 30 s (key rotation).
//!   - A failed fetch (error, non-200, timeout, not a JWKS): the last good keys stay in
//!     use, or, without any, the keys are unavailable (`core::scope` refuses the token with
//!     503, never scopes it otherwise). The next try comes 30 s later, so an outage costs
//!     one timeout per 30 s, not one per request.
//!   - An unknown `kid` that cannot be refetched yet is reported as keys unavailable too.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use futures_util::future::{select, Either, FutureExt, LocalBoxFuture, Shared};
use js_sys::{Array, Object, Reflect};
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use web_sys::{CryptoKey, Headers, Request, RequestInit, Response, SubtleCrypto, WorkerGlobalScope};
use worker::{console_error, Delay, Result};

use super::now_ms;
use crate::core::config::{Config, Policy};
use crate::core::fingerprint::Scope;
use crate::core::jwt::{
    self, max_age_seconds, parse_jwks, verification_id, Algorithm, Identity, Jwk, JwksSource, KeySet,
    Unverified, Validity,
};
use crate::core::problem::Problem;
use crate::core::scope::{self, ScopeConfig, ScopeLog, Start, JWKS_RETRY_SECONDS};

/// How long one JWKS fetch may take before the token counts as unverified.
const JWKS_FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest JWKS document read.
const MAX_JWKS_BYTES: usize = 256 * 1024;
/// Keep a JWKS this long without a `Cache-Control` max-age.
const DEFAULT_JWKS_TTL_SECONDS: u64 = 600;
const MIN_JWKS_TTL_SECONDS: u64 = 30;
const MAX_JWKS_TTL_SECONDS: u64 = 86_400;
/// At most one refetch per this interval for an unknown `kid`, and no new fetch this long
/// after a failed one.
const REFETCH_INTERVAL_MS: u64 = JWKS_RETRY_SECONDS * 1_000;
/// Imported keys kept per isolate; past this the cache starts again (rotation leaves old
/// keys behind).
const MAX_CACHED_CRYPTO_KEYS: usize = 64;
/// How long a verified token is remembered (never past its `exp`): a key removed from the
/// JWKS stops verifying within the JWKS cache time plus this.
const VERIFIED_TOKEN_TTL_MS: u64 = 600_000;
/// Verified tokens remembered per isolate; past this the cache starts again.
const MAX_VERIFIED_TOKENS: usize = 1_024;

/// The scope of a covered request, with its log form, or the 401 problem refusing it.
pub async fn scope(
    headers: &Headers,
    config: &Config,
    policy: &Policy<'_>,
) -> Result<std::result::Result<(Scope, ScopeLog), Problem>> {
    let values = header_values(headers, &config.scope.headers)?;
    let pairs = named_values(&config.scope.headers, &values);
    Ok(match scope::start(&config.scope, &policy.scope, &pairs) {
        Start::Decided(scope, log) => Ok((scope, log)),
        Start::Refused(problem) => Err(problem),
        Start::Verify(token) => {
            let verified = match policy.scope.claim {
                Some(claim) => verify(token, &config.scope, claim).await,
                None => Err(Unverified::NoKey),
            };
            scope::finish(&config.scope, &pairs, verified)
        }
    })
}

/// The values of the headers `names`, in order (`None` for an absent one).
pub(super) fn header_values(headers: &Headers, names: &[String]) -> Result<Vec<Option<String>>> {
    Ok(names.iter().map(|name| headers.get(name)).collect::<std::result::Result<Vec<_>, _>>()?)
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
) -> std::result::Result<Identity, Unverified> {
    let id = verification_id(claim, token);
    if let Some(identity) = remembered(&id) {
        return Ok(identity);
    }
    let (token, identity) = jwt::prepare(token, &config.validation, claim, now_ms() / 1_000)?;
    let verified = if token.algorithm == Algorithm::Hs256 {
        let secret = config.hs256_secret.as_ref().ok_or(Unverified::NoKey)?;
        match hmac_key(secret.bytes()).await {
            Some(key) => check(Algorithm::Hs256, &key, &token.signature, token.signing_input).await,
            None => false,
        }
    } else {
        let keys = candidate_keys(config, token.algorithm, token.kid.as_deref()).await?;
        let mut any = false;
        for jwk in &keys {
            if let Some(key) = public_key(jwk).await {
                if check(token.algorithm, &key, &token.signature, token.signing_input).await {
                    any = true;
                    break;
                }
            }
        }
        any
    };
    if verified {
        remember(id, &identity, Validity::of(&token.claims, &config.validation));
        Ok(identity)
    } else {
        Err(Unverified::Signature)
    }
}

/// A token that verified, and until when that may be reused.
struct VerifiedToken {
    identity: Identity,
    validity: Validity,
    remembered_until_ms: u64,
}

thread_local! {
    static VERIFIED: RefCell<HashMap<[u8; 32], VerifiedToken>> = RefCell::new(HashMap::new());
}

/// The identity of a token that verified before, while its `exp`/`nbf` still hold.
fn remembered(id: &[u8; 32]) -> Option<Identity> {
    let now = now_ms();
    VERIFIED.with(|cell| {
        let mut verified = cell.borrow_mut();
        let entry = verified.get(id)?;
        if now < entry.remembered_until_ms && entry.validity.contains(now / 1_000) {
            return Some(entry.identity.clone());
        }
        verified.remove(id);
        None
    })
}

fn remember(id: [u8; 32], identity: &Identity, validity: Validity) {
    let remembered_until_ms = now_ms() + VERIFIED_TOKEN_TTL_MS;
    VERIFIED.with(|cell| {
        let mut verified = cell.borrow_mut();
        if verified.len() >= MAX_VERIFIED_TOKENS {
            verified.clear();
        }
        verified.insert(id, VerifiedToken { identity: identity.clone(), validity, remembered_until_ms });
    });
}

/// The keys `token` may verify under, from the inline JWKS and the JWKS URL. An unknown
/// `kid` refetches the URL (at most once per 30 s).
async fn candidate_keys(
    config: &ScopeConfig,
    algorithm: Algorithm,
    kid: Option<&str>,
) -> std::result::Result<Vec<Jwk>, Unverified> {
    let mut chosen: Vec<Jwk> = Vec::new();
    let mut failures: Vec<Unverified> = Vec::new();
    let mut take = |set: &KeySet, failures: &mut Vec<Unverified>| match jwt::candidates(set, algorithm, kid) {
        Ok(keys) => {
            chosen.extend(keys.into_iter().cloned());
            true
        }
        Err(reason) => {
            failures.push(reason);
            false
        }
    };
    if let Some(inline) = &config.jwks {
        take(inline, &mut failures);
    }
    if let Some(url) = &config.jwks_url {
        match url_keys(url, false).await {
            Some(set) => {
                if !take(&set, &mut failures) && failures.last() == Some(&Unverified::UnknownKid) {
                    failures.pop();
                    match url_keys(url, true).await {
                        Some(fresh) => {
                            take(&fresh, &mut failures);
                        }
                        // No refetch yet (the throttle) or a failed one: the kid may be a
                        // new key, so the token is not refused as unknown (`core::scope`).
                        None => failures.push(Unverified::KeysUnavailable),
                    }
                }
            }
            None => failures.push(Unverified::KeysUnavailable),
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

/// What this isolate knows of the JWKS URL's keys.
#[derive(Default)]
struct UrlCache {
    keys: Option<Rc<KeySet>>,
    fresh_until_ms: u64,
    /// No new fetch before this (after a failure).
    quiet_until_ms: u64,
    last_kid_refetch_ms: Option<u64>,
    fetching: Option<Fetch>,
}

/// One fetch, shared by every request that needs it: the keys and their max-age, or `None`.
type Fetch = Shared<LocalBoxFuture<'static, Option<(Rc<KeySet>, Option<u64>)>>>;

thread_local! {
    static URL_CACHE: RefCell<UrlCache> = RefCell::new(UrlCache::default());
    static CRYPTO_KEYS: RefCell<HashMap<String, CryptoKey>> = RefCell::new(HashMap::new());
}

/// The JWKS URL's keys: cached while fresh; fetched when stale (or, with
/// `unknown_kid`, refetched if the last such refetch is 30 s old). `None` when no keys
/// are at hand, and with `unknown_kid` when no refetch was made or it failed.
async fn url_keys(url: &str, unknown_kid: bool) -> Option<Rc<KeySet>> {
    let now = now_ms();
    let fetch = URL_CACHE.with(|cell| {
        let mut cache = cell.borrow_mut();
        if unknown_kid {
            if cache.last_kid_refetch_ms.is_some_and(|at| now < at + REFETCH_INTERVAL_MS) {
                return Err(None);
            }
            cache.last_kid_refetch_ms = Some(now);
        } else {
            let fresh = cache.keys.is_some() && now < cache.fresh_until_ms;
            // Shortly after a failed fetch: the last good keys (or none), without waiting.
            let quiet = now < cache.quiet_until_ms && cache.fetching.is_none();
            if fresh || quiet {
                return Err(cache.keys.clone());
            }
        }
        let fetch =
            cache.fetching.get_or_insert_with(|| fetch_jwks(url.to_owned()).boxed_local().shared()).clone();
        Ok(fetch)
    });
    let fetch = match fetch {
        Ok(fetch) => fetch,
        Err(keys) => return keys,
    };
    let fetched = fetch.clone().await;
    URL_CACHE.with(|cell| {
        let mut cache = cell.borrow_mut();
        // The first waiter to wake records the result; the others find it in place.
        if cache.fetching.as_ref().is_some_and(|f| f.ptr_eq(&fetch)) {
            cache.fetching = None;
            let done = now_ms();
            match &fetched {
                Some((keys, max_age)) => {
                    let ttl = max_age
                        .unwrap_or(DEFAULT_JWKS_TTL_SECONDS)
                        .clamp(MIN_JWKS_TTL_SECONDS, MAX_JWKS_TTL_SECONDS);
                    cache.keys = Some(keys.clone());
                    cache.fresh_until_ms = done + ttl * 1_000;
                    cache.quiet_until_ms = 0;
                }
                None => cache.quiet_until_ms = done + REFETCH_INTERVAL_MS,
            }
        }
        match &fetched {
            Some((keys, _)) => Some(keys.clone()),
            // A refetch for an unknown kid that failed has nothing new to offer.
            None if unknown_kid => None,
            None => cache.keys.clone(),
        }
    })
}

/// Fetches and parses the JWKS; `None` (logged) on any failure.
async fn fetch_jwks(url: String) -> Option<(Rc<KeySet>, Option<u64>)> {
    let fetched = select(Box::pin(fetch_jwks_text(&url)), Delay::from(JWKS_FETCH_TIMEOUT)).await;
    let result = match fetched {
        Either::Left((result, _)) => result,
        Either::Right(_) => Err(format!("no answer within {} s", JWKS_FETCH_TIMEOUT.as_secs())),
    };
    let parsed = result.and_then(|(text, cache_control)| {
        let keys = parse_jwks(&text, JwksSource::Fetched).map_err(|e| format!("not a usable JWKS: {e}"))?;
        Ok((Rc::new(keys), cache_control.as_deref().and_then(max_age_seconds)))
    });
    match parsed {
        Ok(keys) => Some(keys),
        Err(why) => {
            // The URL is configuration, not a secret; the body is never logged.
            console_error!(
                "jwks: fetching SCOPE_JWKS_URL failed ({}); tokens are unverified until it succeeds",
                why
            );
            None
        }
    }
}

async fn fetch_jwks_text(url: &str) -> std::result::Result<(String, Option<String>), String> {
    let init = RequestInit::new();
    init.set_method("GET");
    let headers = Headers::new().map_err(describe)?;
    headers.set("accept", "application/jwk-set+json, application/json").map_err(describe)?;
    init.set_headers(&headers);
    let request = Request::new_with_str_and_init(url, &init).map_err(describe)?;
    let global: WorkerGlobalScope = js_sys::global().unchecked_into();
    let response: Response =
        JsFuture::from(global.fetch_with_request(&request)).await.map_err(describe)?.unchecked_into();
    if response.status() != 200 {
        return Err(format!("HTTP {}", response.status()));
    }
    let declared =
        response.headers().get("content-length").ok().flatten().and_then(|v| v.trim().parse::<usize>().ok());
    if declared.is_some_and(|length| length > MAX_JWKS_BYTES) {
        return Err(format!("larger than {MAX_JWKS_BYTES} bytes"));
    }
    let cache_control = response.headers().get("cache-control").ok().flatten();
    let buffer = JsFuture::from(response.array_buffer().map_err(describe)?).await.map_err(describe)?;
    let bytes = js_sys::Uint8Array::new(&buffer).to_vec();
    if bytes.len() > MAX_JWKS_BYTES {
        return Err(format!("larger than {MAX_JWKS_BYTES} bytes"));
    }
    let text = String::from_utf8(bytes).map_err(|_| "not UTF-8".to_owned())?;
    Ok((text, cache_control))
}

fn describe(error: JsValue) -> String {
    // Never `String::from(JsString)`: it panics on a value that is not a string.
    error
        .as_string()
        .or_else(|| Reflect::get(&error, &JsValue::from_str("message")).ok().and_then(|m| m.as_string()))
        .unwrap_or_else(|| "an error".to_owned())
}

fn subtle() -> Option<SubtleCrypto> {
    let global: WorkerGlobalScope = js_sys::global().unchecked_into();
    global.crypto().ok().map(|crypto| crypto.subtle())
}

/// `{ name, … }` for WebCrypto.
fn algorithm(members: &[(&str, &str)]) -> Object {
    let object = Object::new();
    for (name, value) in members {
        let _ = Reflect::set(&object, &JsValue::from_str(name), &JsValue::from_str(value));
    }
    object
}

/// The import parameters of a key of this algorithm.
fn import_parameters(alg: Algorithm) -> Object {
    match alg {
        Algorithm::Rs256 => algorithm(&[("name", "RSASSA-PKCS1-v1_5"), ("hash", "SHA-256")]),
        Algorithm::Es256 => algorithm(&[("name", "ECDSA"), ("namedCurve", "P-256")]),
        Algorithm::EdDsa => algorithm(&[("name", "Ed25519")]),
        Algorithm::Hs256 => algorithm(&[("name", "HMAC"), ("hash", "SHA-256")]),
    }
}

/// The `verify` parameters. ECDSA's signature is raw `r || s`, which is JWS's format too.
fn verify_parameters(alg: Algorithm) -> Object {
    match alg {
        Algorithm::Rs256 => algorithm(&[("name", "RSASSA-PKCS1-v1_5")]),
        Algorithm::Es256 => algorithm(&[("name", "ECDSA"), ("hash", "SHA-256")]),
        Algorithm::EdDsa => algorithm(&[("name", "Ed25519")]),
        Algorithm::Hs256 => algorithm(&[("name", "HMAC")]),
    }
}

fn cached_key(id: &str) -> Option<CryptoKey> {
    CRYPTO_KEYS.with(|keys| keys.borrow().get(id).cloned())
}

fn cache_key(id: String, key: &CryptoKey) {
    CRYPTO_KEYS.with(|keys| {
        let mut keys = keys.borrow_mut();
        if keys.len() >= MAX_CACHED_CRYPTO_KEYS {
            keys.clear();
        }
        keys.insert(id, key.clone());
    });
}

/// The `CryptoKey` of a JWKS key, imported once per isolate.
async fn public_key(jwk: &Jwk) -> Option<CryptoKey> {
    if let Some(key) = cached_key(&jwk.import_json) {
        return Some(key);
    }
    let key_data: Object = js_sys::JSON::parse(&jwk.import_json).ok()?.unchecked_into();
    let usages = Array::of1(&JsValue::from_str("verify"));
    let promise =
        subtle()?.import_key_with_object("jwk", &key_data, &import_parameters(jwk.algorithm), false, &usages);
    match promise {
        Ok(promise) => match JsFuture::from(promise).await {
            Ok(key) => {
                let key: CryptoKey = key.unchecked_into();
                cache_key(jwk.import_json.clone(), &key);
                Some(key)
            }
            Err(error) => {
                console_error!(
                    "jwks: a {} key could not be imported: {}",
                    jwk.algorithm.jose_name(),
                    describe(error)
                );
                None
            }
        },
        Err(error) => {
            console_error!(
                "jwks: a {} key could not be imported: {}",
                jwk.algorithm.jose_name(),
                describe(error)
            );
            None
        }
    }
}

/// The HS256 secret as a `CryptoKey`, imported once per isolate.
async fn hmac_key(secret: &[u8]) -> Option<CryptoKey> {
    const ID: &str = "hs256-secret";
    if let Some(key) = cached_key(ID) {
        return Some(key);
    }
    let raw: Object = js_sys::Uint8Array::from(secret).into();
    let usages = Array::of1(&JsValue::from_str("verify"));
    let promise = subtle()?
        .import_key_with_object("raw", &raw, &import_parameters(Algorithm::Hs256), false, &usages)
        .ok()?;
    let key: CryptoKey = JsFuture::from(promise).await.ok()?.unchecked_into();
    cache_key(ID.to_owned(), &key);
    Some(key)
}

/// One WebCrypto `verify`; any error counts as a failed check.
async fn check(alg: Algorithm, key: &CryptoKey, signature: &[u8], data: &[u8]) -> bool {
    let Some(subtle) = subtle() else { return false };
    match subtle.verify_with_object_and_u8_array_and_u8_array(&verify_parameters(alg), key, signature, data) {
        Ok(promise) => JsFuture::from(promise).await.is_ok_and(|valid| valid.as_bool() == Some(true)),
        Err(_) => false,
    }
}
