//! The Worker's own forwards to the origin, the ones no object protects: a pass-through
//! (any uncovered method), observe mode's forward, and a fail-open forward. Each is signed
//! like the object's (`ORIGIN_AUTH_SECRET`, as `Protection::Passed`), follows
//! `TRUSTED_CLIENT_IP`, goes through the route's service binding when it names one, and
//! answers 502 problem+json when the origin cannot be reached. Redirects go back to the
//! caller: following one would be a second request.
//!
//! On `web_sys`'s `Request` and `Response`: these forward the client's request and body
//! stream as they came, and `worker`'s conversions rebuild a `Response` at each crossing,
//! unwrapping the runtime's refusal of one (a panic, which resets the instance).

use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use web_sys::{AbortSignal, Headers, Request, RequestInit, RequestRedirect, Response};

use super::boundary::edited_copy;
use super::{body, origin_auth, respond, settings};
use crate::core::edge_rules::config::{Config, PathConfig};
use crate::core::edge_rules::edge;
use crate::core::edge_rules::headers::passed_edits;
use crate::core::edge_rules::origin_auth::Protection;
use crate::core::primitives::url::path_and_query;
use crate::core::vocabulary::trace::Trace;
use worker::{console_error, Env, Result};

/// Any uncovered method: to the origin as it is, body streamed, no key needed. When the
/// hop is signed, the body is read first (up to `MAX_BODY_BYTES`, 413 above) to digest it.
pub(super) async fn pass_through(
    req: Request,
    url: &str,
    env: &Env,
    config: &Config,
    policy: &PathConfig<'_>,
    trace: &Trace,
) -> Result<Response> {
    let settings = settings::get(env);
    let target = config.target_for(policy, url, &path_and_query(url));
    let signed = settings.origin_auth_secret.is_some();
    if !signed && !settings.trusted_client_ip && target == url {
        return origin_or_problem(answer(start_send(env, policy.origin_service, &req)).await);
    }
    let body = match req.body() {
        Some(_) if signed => {
            let declared = req.headers().get("content-length")?;
            match body::read_within(&req, declared.as_deref(), config.max_body_bytes).await? {
                Some((_, js_body)) => Some(js_body),
                None => return respond::refused(env, &edge::body_too_large(config.max_body_bytes), trace),
            }
        }
        // Unsigned, the body streams on as it came.
        stream => stream.map(JsValue::from),
    };
    let headers = client_headers(env, &req.headers())?;
    let sent =
        unprotected(env, policy, &req.method(), &target, &headers, (body.as_ref(), body.as_ref())).await;
    origin_or_problem(answer(sent).await)
}

/// A copy of the client's `headers` to forward, edited as `core::edge_rules::headers::passed_edits`
/// says (the client's claim time dropped, the forwarding headers under `TRUSTED_CLIENT_IP`).
pub(super) fn client_headers(env: &Env, headers: &Headers) -> Result<Headers> {
    let trusted_client_ip = settings::get(env).trusted_client_ip;
    let connecting_ip = if trusted_client_ip { headers.get("cf-connecting-ip")? } else { None };
    edited_copy(headers, &passed_edits(trusted_client_ip, connecting_ip.as_deref()))
}

/// Sends a forward the Worker makes itself (`Protection::Passed`: no object protects it),
/// `method` with `headers` and the first of `bodies` to `target`, signed onto `headers` over
/// the second (the body as read) when `ORIGIN_AUTH_SECRET` is set, the key line being the
/// route's key header. An error when it cannot be signed: it is then not sent.
pub(super) async fn unprotected(
    env: &Env,
    policy: &PathConfig<'_>,
    method: &str,
    target: &str,
    headers: &Headers,
    (body, signed_body): (Option<&JsValue>, Option<&JsValue>),
) -> Result<js_sys::Promise> {
    if let Some(signer) = settings::get(env).signer() {
        let key_header = policy.key_header.lowercase;
        let signed = origin_auth::sign_hop(
            signer,
            method,
            target,
            headers,
            key_header,
            Protection::Passed,
            signed_body,
        );
        let not_signed = |_| worker::Error::RustError("the hop to the origin could not be signed".into());
        origin_auth::apply(headers, &signed.await.map_err(not_signed)?)?;
    }
    start_send(env, policy.origin_service, &request(method, target, headers, body, None)?)
}

/// Sends `req` to the origin without waiting: through the named service binding, or the
/// global `fetch`. The request is on its way when this returns (`worker`'s `Fetch::send`
/// and `Fetcher::fetch_request` start it only when first polled).
pub(super) fn start_send(env: &Env, service: Option<&str>, req: &Request) -> Result<js_sys::Promise> {
    match service {
        Some(name) => {
            let service: worker::worker_sys::Fetcher = env.service(name)?.into_rpc();
            Ok(service.fetch(req)?)
        }
        None => {
            let global: web_sys::WorkerGlobalScope = js_sys::global().unchecked_into();
            Ok(global.fetch_with_request(req))
        }
    }
}

/// The answer to a request [`start_send`] sent, or why none came.
pub(super) async fn answer(sent: Result<js_sys::Promise>) -> Result<Response> {
    Ok(JsFuture::from(sent?).await?.dyn_into()?)
}

/// A pass-through answer, or 502 problem+json when the origin could not be reached. The
/// answer goes out as a new `Response` over the origin's body, status and headers, or as it
/// is when it carries a WebSocket (an upgrade).
pub(super) fn origin_or_problem(result: Result<Response>) -> Result<Response> {
    match result {
        Ok(response) if has_websocket(&response) => Ok(response),
        Ok(response) => respond::rewrapped(&response, &response.headers()),
        Err(error) => {
            // The forward failed before an answer: not sent, or sent and broken off. Said
            // here, or a 502 would come with no line at all.
            console_error!("a forward the Worker makes itself failed: {}", error);
            respond::problem(&edge::pass_through_unreachable())
        }
    }
}

pub(super) fn has_websocket(response: &Response) -> bool {
    js_sys::Reflect::get(response, &JsValue::from_str("webSocket"))
        .is_ok_and(|socket| !socket.is_null() && !socket.is_undefined())
}

/// `new Request(target, { method, headers, body, redirect: "manual", signal })`, without a
/// body for `None`: a proxy hands redirects to its caller. `web_sys`'s `RequestInit`:
/// `worker`'s has no abort signal, which a service binding's fetch needs on the request itself.
pub(super) fn request(
    method: &str,
    target: &str,
    headers: &Headers,
    body: Option<&JsValue>,
    signal: Option<&AbortSignal>,
) -> std::result::Result<Request, JsValue> {
    let init = RequestInit::new();
    init.set_method(method);
    init.set_headers(headers);
    init.set_redirect(RequestRedirect::Manual);
    if let Some(body) = body {
        init.set_body(body);
    }
    if signal.is_some() {
        init.set_signal(signal);
    }
    Request::new_with_str_and_init(target, &init)
}
