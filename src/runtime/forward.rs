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
use web_sys::{Headers, Request, RequestInit, RequestRedirect, Response};

use super::{body, origin_auth, respond, settings};
use crate::core::edge_rules::config::{Config, PathConfig};
use crate::core::edge_rules::edge;
use crate::core::edge_rules::headers::client_ip_headers;
use crate::core::edge_rules::origin_auth::Protection;
use crate::core::primitives::url::path_and_query;
use crate::core::vocabulary::trace::Trace;
use worker::{Env, Result};

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
    let untouched = settings.origin_auth_secret.is_none() && !settings.trusted_client_ip;
    if untouched && target == url {
        return origin_or_problem(send(env, policy.origin_service, &req).await);
    }
    // `new Request(url, request)`: the same method, headers and body stream, another URL.
    let init: &RequestInit = req.unchecked_ref();
    let mut forwarded = Request::new_with_str_and_init(&target, init)?;
    if settings.trusted_client_ip {
        replace_client_ip(&forwarded.headers())?;
    }
    if settings.origin_auth_secret.is_some() {
        let body = match forwarded.body() {
            None => None,
            Some(_) => {
                let declared = forwarded.headers().get("content-length")?;
                match body::read_within(&forwarded, declared.as_deref(), config.max_body_bytes).await? {
                    Some((_, js_body)) => Some(js_body),
                    None => {
                        return respond::refused(env, &edge::body_too_large(config.max_body_bytes), trace)
                    }
                }
            }
        };
        let (method, headers) = (forwarded.method(), forwarded.headers());
        if let Err(error) = sign_passed(env, policy, &method, &target, &headers, body.as_ref()).await {
            return origin_or_problem(Err(error));
        }
        let init = request_init(&method, &headers, body.as_ref(), forwarded.redirect());
        forwarded = Request::new_with_str_and_init(&target, &init)?;
    }
    origin_or_problem(send(env, policy.origin_service, &forwarded).await)
}

/// Signs a forward the Worker makes itself (`Protection::Passed`: no object protects it)
/// onto `headers`, when `ORIGIN_AUTH_SECRET` is set: the key line is the route's key header.
/// An error when it cannot be signed: the forward is then not sent.
pub(super) async fn sign_passed(
    env: &Env,
    policy: &PathConfig<'_>,
    method: &str,
    target: &str,
    headers: &Headers,
    body: Option<&JsValue>,
) -> Result<()> {
    let Some(signer) = settings::get(env).signer() else { return Ok(()) };
    let key_header = policy.key_header.lowercase;
    let signed = origin_auth::sign_hop(signer, method, target, headers, key_header, Protection::Passed, body);
    let signature = signed.await.map_err(|_| not_signed())?;
    origin_auth::apply(headers, &signature)?;
    Ok(())
}

/// A forward whose signature could not be made: it is not sent (502, as for an origin that
/// could not be reached).
pub(super) fn not_signed() -> worker::Error {
    worker::Error::RustError("the hop to the origin could not be signed".into())
}

/// A fail-open forward: the route chose availability over protection, and the object
/// provably never had the request (`core::edge_rules::routes::after_object_failure`), so nothing was
/// sent for this attempt. `headers` are the request's end-to-end headers (the client IP
/// rule applied); the hop is signed as `Passed`.
pub(super) async fn fail_open(
    env: &Env,
    policy: &PathConfig<'_>,
    method: &str,
    target: &str,
    headers: &Headers,
    body: &JsValue,
) -> Result<Response> {
    if let Err(error) = sign_passed(env, policy, method, target, headers, Some(body)).await {
        return origin_or_problem(Err(error));
    }
    let init = request_init(method, headers, Some(body), RequestRedirect::Manual);
    let forwarded = Request::new_with_str_and_init(target, &init)?;
    origin_or_problem(send(env, policy.origin_service, &forwarded).await)
}

/// `TRUSTED_CLIENT_IP`: the forwarding headers set as `core::edge_rules::headers::client_ip_headers`
/// says, from the connecting IP.
pub(super) fn replace_client_ip(headers: &Headers) -> Result<()> {
    for (name, value) in client_ip_headers(headers.get("cf-connecting-ip")?.as_deref()) {
        match value {
            Some(value) => headers.set(name, &value)?,
            None => headers.delete(name)?,
        }
    }
    Ok(())
}

/// Sends `req` to the origin: through the named service binding, or the global `fetch`.
pub(super) async fn send(env: &Env, service: Option<&str>, req: &Request) -> Result<Response> {
    Ok(JsFuture::from(start_send(env, service, req)?).await?.dyn_into()?)
}

/// [`send`] without waiting: the request is on its way when this returns (`worker`'s
/// `Fetch::send` and `Fetcher::fetch_request` start it only when first polled).
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

/// A pass-through answer, or 502 problem+json when the origin could not be reached. The
/// answer goes out as a new `Response` over the origin's body, status and headers, or as it
/// is when it carries a WebSocket (an upgrade).
pub(super) fn origin_or_problem(result: Result<Response>) -> Result<Response> {
    match result {
        Ok(response) if has_websocket(&response) => Ok(response),
        Ok(response) => respond::rewrapped(&response, &response.headers()),
        Err(_) => respond::problem(&edge::pass_through_unreachable()),
    }
}

pub(super) fn has_websocket(response: &Response) -> bool {
    js_sys::Reflect::get(response, &JsValue::from_str("webSocket"))
        .is_ok_and(|socket| !socket.is_null() && !socket.is_undefined())
}

/// `new Request(target, { method, headers, body, redirect: "manual" })`: the request as it
/// came, with the body that was read (or none).
pub(super) fn as_it_came(req: &Request, target: &str, body: Option<&JsValue>) -> Result<Request> {
    // A proxy hands redirects to its caller.
    let init = request_init(&req.method(), &req.headers(), body, RequestRedirect::Manual);
    Ok(Request::new_with_str_and_init(target, &init)?)
}

/// `{ method, headers, body, redirect }`, without a body for `None`.
pub(super) fn request_init(
    method: &str,
    headers: &Headers,
    body: Option<&JsValue>,
    redirect: RequestRedirect,
) -> RequestInit {
    let init = RequestInit::new();
    init.set_method(method);
    init.set_headers(headers);
    init.set_redirect(redirect);
    if let Some(body) = body {
        init.set_body(body);
    }
    init
}
