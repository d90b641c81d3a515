//! The scope's runtime half: reads the scope headers, fetches the JWKS, and has token
//! signatures checked by WebCrypto (`web-sys`'s `SubtleCrypto`).
//!
//! `identify` is a covered request's identity as both modes compute it: scope, fingerprint
//! and object name.
//!
//! Every decision is the core's: which token, which claims, which keys, which scope
//! (`core::scope`, `core::jwt`); when to fetch `SCOPE_JWKS_URL`, how long its keys are
//! fresh, what a failed fetch or an unknown `kid` answers, whether an answer's body is read
//! (`core::edge_rules::jwks_cache`); when a verified token may be reused, whether a token is
//! checked under the HS256 secret or the JWKS keys, and how many imported keys are kept
//! (`core::edge_rules::verified_tokens`). This file only carries out what
//! the core cannot: the JWKS fetch (`worker`'s `Fetch`, under a timeout signal),
//! one fetch awaited by every request that waits for it (each through a promise of its own,
//! see `Fetch`), and the signature check (no RSA or EC code is compiled into the Wasm).
//!
//! Per isolate it keeps the core's JWKS cache and verified-token memo and the JWKS fetch
//! under way, and the verification keys WebCrypto imported (an import costs more than a
//! check); the candidate keys are tried in the core's order.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use web_sys::CryptoKey;

use super::now_ms;
use crate::core::edge_rules::identify::{header_values, identified, named_values, Arrived, Identified};
use crate::core::edge_rules::jwks_cache::{
    self, answer_head, document, Document, JwksCache, KeyQuery, FETCH_LOST_AFTER_MS, FETCH_TIMEOUT_MS,
};
use crate::core::edge_rules::scope::{self, ScopeConfig, Start};
use crate::core::edge_rules::verified_tokens::{ImportedKeys, KeySource, Verification, VerifiedTokens};
use crate::core::primitives::jwt::{self, Algorithm, Identity, Jwk, KeySet, Unverified};
use crate::core::vocabulary::problem::Problem;
use worker::console_error;
use worker::{Context, Delay};

/// WebCrypto's import and `verify` parameters of `algorithm` (`Algorithm::webcrypto_json`).
fn webcrypto_params(algorithm: Algorithm) -> (js_sys::Object, js_sys::Object) {
    let (import, check) = algorithm.webcrypto_json();
    let parsed = |json: String| {
        js_sys::JSON::parse(&json).map_or_else(|_| js_sys::Object::new(), JsCast::unchecked_into)
    };
    (parsed(import), parsed(check))
}

fn subtle() -> std::result::Result<web_sys::SubtleCrypto, JsValue> {
    Ok(js_sys::global().unchecked_into::<web_sys::WorkerGlobalScope>().crypto()?.subtle())
}

/// Whether `signature` over `data` verifies under the key `id` names, imported from
/// `key_data` (a JWK object, or the raw secret) once per isolate
/// (`core::edge_rules::verified_tokens::ImportedKeys`): `Err` when it cannot be imported;
/// any error of the check itself counts as a failed check.
async fn check_under(
    (id, format, key_data): (&str, &str, std::result::Result<JsValue, JsValue>),
    algorithm: Algorithm,
    signature: &[u8],
    data: &[u8],
) -> std::result::Result<bool, JsValue> {
    let key = match IMPORTED_KEYS.with(|keys| keys.borrow().get(id)) {
        Some(key) => key,
        None => {
            let usages = js_sys::Array::of1(&JsValue::from_str("verify"));
            let (params, key_data) = (webcrypto_params(algorithm).0, key_data?.unchecked_into());
            let imported = subtle()?.import_key_with_object(format, &key_data, &params, false, &usages)?;
            let key: CryptoKey = JsFuture::from(imported).await?.unchecked_into();
            IMPORTED_KEYS.with(|keys| keys.borrow_mut().keep(id, key.clone()));
            key
        }
    };
    let params = webcrypto_params(algorithm).1;
    // WebCrypto copies the bytes when called: the views of the Wasm memory are not kept.
    let check = async {
        JsFuture::from(
            subtle()?.verify_with_object_and_u8_array_and_u8_array(&params, &key, signature, data)?,
        )
        .await
    };
    Ok(check.await.is_ok_and(|valid| valid.as_bool() == Some(true)))
}

/// Whether `signature` over `data` verifies under one of `keys`. A key that cannot be
/// imported is logged (its algorithm and WebCrypto's message) and skipped.
async fn verify_under_keys(algorithm: Algorithm, keys: &[Jwk], signature: &[u8], data: &[u8]) -> bool {
    for jwk in keys {
        let key_data = js_sys::JSON::parse(&jwk.import_json);
        match check_under((&jwk.import_json, "jwk", key_data), algorithm, signature, data).await {
            Ok(true) => return true,
            Ok(false) => {}
            // A thrown string, or an error's (a `DOMException`'s) name and message.
            Err(error) => console_error!(
                "jwks: a {} key could not be imported: {}",
                algorithm.jose_name(),
                worker::Error::from(error)
            ),
        }
    }
    false
}

/// Verifies `token` and returns the identity it states, or why it does not verify: the
/// memo and the key source are `core::edge_rules::verified_tokens`'s, the check WebCrypto's.
async fn verify(
    token: &str,
    config: &ScopeConfig,
    claim: &jwt::ClaimPath,
    keep_alive: Option<&Context>,
) -> std::result::Result<Identity, Unverified> {
    let pending = match VERIFIED.with(|memo| memo.borrow_mut().begin(token, config, claim, now_ms()))? {
        Verification::Recalled(identity) => return Ok(identity),
        Verification::Check(pending) => pending,
    };
    let (algorithm, signature, data) =
        (pending.algorithm(), &pending.token.signature, pending.token.signing_input);
    let verified = match pending.keys {
        KeySource::Secret(secret) => {
            // One HS256 secret per isolate: imported once, under that name.
            let raw = Ok(js_sys::Uint8Array::from(secret).into());
            check_under(("HS256", "raw", raw), algorithm, signature, data).await.unwrap_or(false)
        }
        KeySource::Jwks => {
            // The inline JWKS's and the URL's, as `core::edge_rules::jwks_cache::candidate_keys` chooses.
            let kid = pending.token.kid.as_deref();
            let url = match &config.jwks_url {
                Some(url) => Some(url_keys(url, kid, keep_alive).await),
                None => None,
            };
            let url = url.as_ref().map(|keys| keys.as_deref().map_err(|reason| *reason));
            let keys = jwks_cache::candidate_keys(config.jwks.as_ref(), url, algorithm, kid)?;
            verify_under_keys(algorithm, &keys, signature, data).await
        }
    };
    VERIFIED.with(|memo| memo.borrow_mut().end(pending, verified, &config.validation, now_ms()))
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
    static IMPORTED_KEYS: RefCell<ImportedKeys<CryptoKey>> = RefCell::new(ImportedKeys::default());
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
            console_error!("{}", jwks_cache::lost_fetch_line());
        }
        match lookup.keys() {
            Some(keys) => return keys,
            None => match awaited_fetch(url, keep_alive) {
                // It never rejects. A fetch whose request was cancelled never ends, so the
                // wait stops when the cache gives it up (rule 6 of `core::edge_rules::jwks_cache`); its
                // timer is also this request's own I/O, so the runtime never takes the wait
                // for a hang. Either way the cache is asked again.
                Some(fetch) => {
                    let gave_up = Delay::from(Duration::from_millis(FETCH_LOST_AFTER_MS));
                    futures_util::future::select(JsFuture::from(fetch), gave_up).await;
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
            // Reports to the cache, once; why the answer was of no use is logged (the URL is
            // configuration, not a secret; the body is never logged).
            let fetch = wasm_bindgen_futures::future_to_promise(async move {
                let fetched = get_jwks(&url).await;
                let handled =
                    URL_KEYS.with(|cache| cache.borrow_mut().handle_fetched(now_ms(), request, fetched));
                if let Err(why) = handled {
                    console_error!("{}", jwks_cache::failed_fetch_line(&why));
                }
                Ok(JsValue::UNDEFINED)
            });
            if let Some(ctx) = keep_alive {
                // Refused only outside a request; the fetch then runs as long as this one.
                let _ = ctx.as_ref().wait_until(&fetch);
            }
            *slot = Some(fetch);
        }
        slot.clone()
    })
}

/// `url`'s 200 answer as the document its size and text make (`core::edge_rules::jwks_cache::
/// document`), all of it within `FETCH_TIMEOUT_MS` (`worker`'s `Fetch` under a timeout signal, which
/// also ends the body's read); or why it is of no use, never the body's content. A
/// redirect is never followed (`core::edge_rules::jwks_cache`, rule 7): whether the body is read
/// is the core's (`answer_head`), and a body not read is let go.
async fn get_jwks(url: &str) -> std::result::Result<Document, String> {
    let timeout = web_sys::AbortSignal::timeout_with_u32(FETCH_TIMEOUT_MS as u32);
    let failed = |error: worker::Error| jwks_cache::fetch_failed(timeout.aborted(), &error.to_string());
    let headers = worker::Headers::new();
    headers.set("accept", jwks_cache::ACCEPT).map_err(failed)?;
    let mut init = worker::RequestInit::new();
    init.with_headers(headers).with_redirect(worker::RequestRedirect::Manual);
    let request = worker::Request::new_with_init(url, &init).map_err(failed)?;
    let signal = worker::AbortSignal::from(timeout.clone());
    let mut response = worker::Fetch::Request(request).send_with_signal(&signal).await.map_err(failed)?;
    let length = response.headers().get("content-length").ok().flatten();
    if let Err(why) = answer_head(response.status_code(), length.as_deref()) {
        if let worker::ResponseBody::Stream(body) = response.body() {
            let _ = body.cancel();
        }
        return Err(why);
    }
    let cache_control = response.headers().get("cache-control").ok().flatten();
    document(response.bytes().await.map_err(failed)?, cache_control)
}

/// Identifies a covered request, the same way in enforce and observe mode so that both
/// reach the same object: the caller's scope (a 401 problem when the
/// request may not be scoped), the payload fingerprint and the object name (keyed with
/// `OBJECT_NAME_KEY` when set).
pub async fn identify(
    request: Arrived<'_>,
    keep_alive: Option<&Context>,
) -> std::result::Result<Identified, Problem> {
    let config = request.config;
    // What the scope headers decide (`core::edge_rules::scope::start`), after a token's
    // check, for the route's claim, when they name one.
    let values = header_values(request.headers, &config.scope.headers);
    let pairs = named_values(&config.scope.headers, &values);
    let (scope, scope_log) = match scope::start(&config.scope, &request.policy.scope, &pairs) {
        Start::Decided(scope, log) => (scope, log),
        Start::Refused(problem) => return Err(problem),
        Start::Verify(token, claim) => {
            let verified = verify(token, &config.scope, claim, keep_alive).await;
            scope::finish(&config.scope, &pairs, verified)?
        }
    };
    Ok(identified(&request, scope, scope_log))
}
