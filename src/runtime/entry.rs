//! The Worker's fetch handler: the edge in front of the origin.
//!
//! Owns the request's way to its key's object. For a covered request (POST, PATCH) it:
//! 1. loads the configuration (an invalid variable is a 500 naming it; nothing forwarded);
//! 2. parses the `Idempotency-Key` (400 when missing or malformed);
//! 3. reads the body up to `MAX_BODY_BYTES`, counting a streamed body as it arrives and
//!    never trusting `Content-Length` alone (413 above it);
//! 4. computes the scope, the object name and the fingerprint;
//! 5. hands the object the origin URL, the end-to-end headers, the body bytes, the
//!    fingerprint and the timing, so the object repeats none of this work.
//!
//! Rejections in steps 1–3 happen before any object exists. Any other method passes
//! through to the origin untouched. If the object cannot be reached, the answer is 503 and
//! nothing is forwarded unprotected.

use futures_util::StreamExt;
use wasm_bindgen::{JsCast, JsValue};
use worker::web_sys;
use worker::{
    console_error, event, ByteStream, Context, Env, Fetch, Headers, Method, ObjectNamespace, Request,
    RequestInit, Response, Result,
};

use super::{admin, internal, respond};
use crate::core::admin::is_admin_path;
use crate::core::config::{encode_timing, Config, Policy, ALL_VARS};
use crate::core::fingerprint::{fingerprint, object_name, Payload, Scope};
use crate::core::headers::{connection_tokens, forward_to_origin};
use crate::core::key::{parse_key_fields, IdempotencyKey, KeyError};
use crate::core::problem::{Problem, ProblemKind};
use crate::core::routes::Unavailable;
use crate::core::url::{path_and_query, path_and_query_parts};

/// The Durable Object namespace binding (wrangler.toml).
pub(super) const OBJECT_BINDING: &str = "IDEMPOTENCY_KEYS";

#[event(fetch)]
async fn fetch(req: Request, env: Env, _ctx: Context) -> Result<Response> {
    let config = match load_config(&env) {
        Ok(config) => config,
        Err(problem) => return respond::refused(&env, &problem),
    };
    let url = req.inner().url();
    let (path, _) = path_and_query_parts(&url);
    if let Some(token) = admin::token(&env) {
        if is_admin_path(&config.admin_prefix, path) {
            return admin::call(req, &env, &config, &token).await;
        }
    }
    let policy = config.policy_for(path);
    if policy.covers(&req.inner().method()) {
        covered(req, &env, &config, &policy).await
    } else {
        pass_through(req, &config).await
    }
}

fn load_config(env: &Env) -> std::result::Result<Config, Problem> {
    let values: Vec<(&'static str, Option<String>)> =
        ALL_VARS.iter().map(|&name| (name, env.var(name).ok().map(|v| v.to_string()))).collect();
    Config::from_vars(|name| values.iter().find(|(n, _)| *n == name).and_then(|(_, v)| v.as_deref()))
        .map_err(|error| Problem::new(ProblemKind::InvalidConfig, error.detail()))
}

/// Any uncovered method: to the origin as it is, body streamed, no key needed.
async fn pass_through(req: Request, config: &Config) -> Result<Response> {
    let url = req.inner().url();
    let target = config.origin_target(&url, &path_and_query(&url));
    if target == url {
        return origin_or_problem(Fetch::Request(req).send().await);
    }
    // `new Request(url, request)`: the same method, headers and body stream, another URL.
    let init: &web_sys::RequestInit = req.inner().unchecked_ref();
    let forwarded = web_sys::Request::new_with_str_and_init(&target, init)?;
    origin_or_problem(Fetch::Request(forwarded.into()).send().await)
}

/// A pass-through answer, or 502 problem+json when the origin could not be reached.
fn origin_or_problem(result: Result<Response>) -> Result<Response> {
    result.or_else(|_| {
        respond::problem(&Problem::new(
            ProblemKind::OriginUnreachable,
            "The origin could not be reached. This method is passed through without idempotency protection.",
        ))
    })
}

async fn covered(mut req: Request, env: &Env, config: &Config, policy: &Policy<'_>) -> Result<Response> {
    let key = match idempotency_key(req.headers()) {
        Ok(key) => key,
        // A route may make the key optional: without one, the request is not protected.
        Err(KeyError::Missing) if !policy.key_required => return pass_through(req, config).await,
        Err(error) => {
            let kind =
                if error == KeyError::Missing { ProblemKind::MissingKey } else { ProblemKind::InvalidKey };
            discard_body(&mut req).await;
            return respond::refused(env, &Problem::new(kind, error.detail()));
        }
    };
    let body = match read_body(&mut req, config.max_body_bytes).await? {
        Some(body) => body,
        None => {
            return respond::refused(
                env,
                &Problem::new(
                    ProblemKind::BodyTooLarge,
                    format!("The request body is larger than {} bytes.", config.max_body_bytes),
                ),
            )
        }
    };

    let url = req.inner().url();
    let path_and_query = path_and_query(&url);
    let headers = req.headers();
    let scope_value = headers.get(&config.scope_header)?;
    let scope = Scope::from_header(scope_value.as_deref().map(str::as_bytes));
    let content_type = headers.get("content-type")?;
    let method = req.inner().method();
    let extra_values: Vec<Option<String>> =
        policy.fingerprint_headers.iter().map(|name| headers.get(name).ok().flatten()).collect();
    let extra_headers: Vec<(&str, Option<&str>)> = policy
        .fingerprint_headers
        .iter()
        .map(String::as_str)
        .zip(extra_values.iter().map(Option::as_deref))
        .collect();
    let payload = Payload {
        method: &method,
        path_and_query: &path_and_query,
        content_type: content_type.as_deref(),
        extra_headers: &extra_headers,
        body: &body,
    };
    let fingerprint = fingerprint(&payload);
    let name = object_name(scope, key.as_str());

    let outgoing = Headers::new();
    let tokens = connection_tokens(headers.get("connection")?.as_deref());
    for (name, value) in headers.entries() {
        if forward_to_origin(&name, &tokens) {
            outgoing.append(&name, &value)?;
        }
    }
    // The target and the end-to-end headers, kept for a fail-open forward.
    let target = config.origin_target(&url, &path_and_query);
    // One JavaScript copy of the body serves the object call and a fail-open forward.
    let body = js_sys::Uint8Array::from(body.as_slice());
    let unprotected = (policy.on_unavailable == Unavailable::FailOpen)
        .then(|| (target.clone(), Method::from(method.clone()), copy_headers(&outgoing)));
    outgoing.set(internal::FINGERPRINT, &fingerprint.to_hex())?;
    outgoing.set(internal::TIMING, &encode_timing(&policy.timing))?;
    if config.origin_url.is_some() {
        outgoing.set(internal::PROBE_ORIGIN, "1")?;
    }
    let mut init = RequestInit::new();
    init.with_method(Method::from(method.clone()))
        .with_headers(outgoing)
        .with_body(Some(body.clone().into()));
    // The object's request URL is where the first attempt goes.
    let to_object = Request::new_with_init(&target, &init)?;

    let namespace = key_namespace(env, config.jurisdiction.as_deref());
    let reached = match namespace.and_then(|ns| ns.id_from_name(&name)?.get_stub()) {
        Ok(stub) => stub.fetch_with_request(to_object).await.and_then(answered_by_object),
        Err(error) => Err(error),
    };
    match reached {
        Ok(response) => Ok(response),
        Err(error) => {
            // The object name is a hash: safe to log, unlike the key or the credential.
            console_error!("object {}: unavailable: {}", &name[..16], error);
            if let Some((target, method, headers)) = unprotected {
                // The route chose availability over protection: forward without a claim.
                console_error!("object {}: failing open, forwarding without protection", &name[..16]);
                let mut init = RequestInit::new();
                init.with_method(method).with_headers(headers).with_body(Some(body.into()));
                let forwarded = Request::new_with_init(&target, &init)?;
                return origin_or_problem(Fetch::Request(forwarded).send().await);
            }
            respond::refused(
                env,
                &Problem::new(
                    ProblemKind::StorageUnavailable,
                    "The idempotency record for this key could not be reached, so the request was not forwarded. Retry with the same key.",
                )
                .with_retry_after(1),
            )
        }
    }
}

/// The object's answer without its marker, or an error when the answer did not come from
/// the object at all (the platform answered for an object it could not run).
/// The key objects' namespace, restricted to the configured jurisdiction if any (as
/// `env.IDEMPOTENCY_KEYS.jurisdiction("eu")` in JavaScript; workers-rs has no wrapper).
pub(super) fn key_namespace(env: &Env, jurisdiction: Option<&str>) -> Result<ObjectNamespace> {
    let namespace = env.durable_object(OBJECT_BINDING)?;
    let Some(jurisdiction) = jurisdiction else { return Ok(namespace) };
    let raw = JsValue::from(namespace);
    let restrict: js_sys::Function =
        js_sys::Reflect::get(&raw, &JsValue::from("jurisdiction"))?.dyn_into()?;
    Ok(restrict.call1(&raw, &JsValue::from(jurisdiction))?.unchecked_into())
}

pub(super) fn answered_by_object(response: Response) -> Result<Response> {
    if !response.headers().has(internal::ANSWERED)? {
        return Err(worker::Error::RustError(format!(
            "the object did not answer (the platform said {})",
            response.status_code()
        )));
    }
    let headers = Headers::new();
    for (name, value) in response.headers().entries() {
        if !name.eq_ignore_ascii_case(internal::ANSWERED) {
            headers.append(&name, &value)?;
        }
    }
    Ok(response.with_headers(headers))
}

fn copy_headers(headers: &Headers) -> Headers {
    let copy = Headers::new();
    for (name, value) in headers.entries() {
        let _ = copy.append(&name, &value);
    }
    copy
}

fn idempotency_key(headers: &Headers) -> std::result::Result<IdempotencyKey, KeyError> {
    // workerd joins repeated header lines with ", "; the parser treats a top-level comma
    // as a second value.
    let value = headers.get("idempotency-key").map_err(|_| KeyError::NotPrintableAscii)?;
    parse_key_fields(value.as_deref().map(str::as_bytes))
}

/// The body, or `None` when it is larger than `limit`. `Content-Length` can only make the
/// answer come sooner; the bytes are counted as they stream in either way.
async fn read_body(req: &mut Request, limit: u64) -> Result<Option<Vec<u8>>> {
    let declared = req.headers().get("content-length")?.and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit) {
        return Ok(None);
    }
    if req.inner().body().is_none() {
        return Ok(Some(Vec::new()));
    }
    let mut stream = req.stream()?;
    let mut body = Vec::with_capacity(declared.unwrap_or(0).min(limit) as usize);
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        if (body.len() + chunk.len()) as u64 > limit {
            drop(body);
            drain(&mut stream).await;
            return Ok(None);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Some(body))
}

/// Most bytes read and thrown away after a rejection. Answering before the request body is
/// consumed makes workerd drop the connection (a proxy in front then fails the next request
/// on it), so the rest is read, but not without end.
const DRAIN_LIMIT_BYTES: usize = 8 * 1024 * 1024;

/// Reads and discards a rejected request's body, up to [`DRAIN_LIMIT_BYTES`].
async fn discard_body(req: &mut Request) {
    if req.inner().body().is_none() {
        return;
    }
    if let Ok(mut stream) = req.stream() {
        drain(&mut stream).await;
    }
}

async fn drain(stream: &mut ByteStream) {
    let mut drained = 0usize;
    while let Some(Ok(chunk)) = stream.next().await {
        drained += chunk.len();
        if drained > DRAIN_LIMIT_BYTES {
            break;
        }
    }
}
