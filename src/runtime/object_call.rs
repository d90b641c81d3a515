//! The Worker's call to a key's object: the namespace (in the configured jurisdiction),
//! the stub, the call (`stub.fetch`), and whether the answer is the object's own. Only an answer that
//! carries the object's mark (`core::edge_rules::wire::ANSWERED_HEADER`) is one the object gave; any
//! other failure is classified (`core::edge_rules::routes::ObjectCallFailure`) for the core to decide
//! between failing open and 503.

use std::cell::{Cell, OnceCell};

use js_sys::Reflect;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use web_sys::{Headers, Request, Response};

use worker::{ObjectNamespace, Stub};

use super::boundary::edited_copy;
use super::{bindings, forward, respond};
use crate::core::edge_rules::routes::ObjectCallFailure;
use crate::core::edge_rules::wire::{Answered, ANSWERED_HEADER, ENVELOPE_HEADER};
use worker::{Env, Error, Result};

/// The Durable Object namespace binding (wrangler.toml).
pub(super) const OBJECT_BINDING: &str = "IDEMPOTENCY_KEYS";

thread_local! {
    static NAMESPACE: OnceCell<ObjectNamespace> = const { OnceCell::new() };
}

/// The key objects' namespace, restricted to the configured jurisdiction if any
/// (`env.IDEMPOTENCY_KEYS.jurisdiction("eu")`), looked up once per isolate (bindings, like
/// variables, cannot change while an isolate lives). A failed lookup is not kept: it is
/// tried again next time.
pub(super) fn key_namespace(env: &Env, jurisdiction: Option<&str>) -> Result<ObjectNamespace> {
    if let Some(namespace) = NAMESPACE.with(|cell| cell.get().cloned()) {
        return Ok(namespace);
    }
    let mut namespace = env.durable_object(OBJECT_BINDING)?;
    if let Some(jurisdiction) = jurisdiction {
        namespace = bindings::jurisdiction(&namespace, jurisdiction)?;
    }
    NAMESPACE.with(|cell| {
        let _ = cell.set(namespace.clone());
    });
    Ok(namespace)
}

/// Sends `req` to the object behind `stub` and takes its answer and the mark the object put
/// on it (observe mode's verdict): only an answer that carries the mark is the object's. A
/// call that throws before it is sent, or that the platform refuses as `overloaded` (queued
/// and never run), was not delivered; any other failure may have come after the object
/// sent the request on. Every call the Worker makes to a key's object is made here, and
/// counted in `calls`: the request's calls so far, which its line says (`object_calls`).
pub(super) async fn call_object(
    calls: &Cell<u32>,
    stub: Stub,
    req: &Request,
) -> std::result::Result<(Response, Answered), (ObjectCallFailure, String)> {
    calls.set(calls.get().saturating_add(1));
    let stub: worker::worker_sys::DurableObject = stub.into_rpc();
    // `worker`'s `Stub::fetch_with_request` answers both failures as one error: whether the
    // call was sent, and the rejection's flags, are what the core decides on.
    let pending = stub
        .fetch_with_request(req)
        .map_err(|error| (ObjectCallFailure::BeforeSend, Error::from(error).to_string()))?;
    let answer = JsFuture::from(pending).await.map_err(|error| {
        let flag =
            |name: &str| Reflect::get(&error, &name.into()).ok().and_then(|v| v.as_bool()) == Some(true);
        let failure = ObjectCallFailure::Rejected { overloaded: flag("overloaded"), remote: flag("remote") };
        (failure, Error::from(error).to_string())
    })?;
    // The platform answered, perhaps after the object ran.
    let unmarked = |why: String| (ObjectCallFailure::UnmarkedAnswer, why);
    let response: Response = answer.dyn_into().map_err(|_| unmarked("not a Response".into()))?;
    let headers = response.headers();
    let Some(mark) = headers.get(ANSWERED_HEADER).ok().flatten() else {
        return Err(unmarked(format!("the object did not answer (the platform said {})", response.status())));
    };
    // The mark's presence is what proves the object answered. Its verdict matters to observe
    // mode only; a value it cannot read (a live answer keeps the origin's own header of this
    // name, should it send one) is a plain mark, never a reason to refuse an answer the
    // object gave.
    let answered = Answered::decode(&mark).unwrap_or(Answered::Plain);
    // Rewrapped without the mark: a fetched answer's headers are immutable.
    let rewrapped = edited_copy(&headers, &[(ANSWERED_HEADER, None)])
        .and_then(|copy| respond::rewrapped(&response, &copy))
        .map_err(|error| unmarked(format!("the object's answer could not be rewrapped: {error}")))?;
    Ok((rewrapped, answered))
}

/// A call that carries only an envelope (`core::edge_rules::wire`) and, perhaps, a body: `method` to
/// `target` (the object reads only the envelope and the body).
pub(super) fn envelope_request(
    target: &str,
    method: &str,
    envelope: &str,
    body: Option<&JsValue>,
) -> Result<Request> {
    let headers = Headers::new()?;
    headers.set(ENVELOPE_HEADER, envelope)?;
    Ok(forward::request(method, target, &headers, body, None)?)
}

/// Observe mode's call to the key's object named `name`: the envelope (and the origin's
/// body, with an outcome), POSTed to `target`, counted in `calls`; the mark the object put
/// on its answer.
pub(super) async fn call_named(
    calls: &Cell<u32>,
    env: &Env,
    jurisdiction: Option<&str>,
    name: &str,
    target: &str,
    envelope: String,
    body: Option<JsValue>,
) -> std::result::Result<Answered, (ObjectCallFailure, String)> {
    let before = |error: Error| (ObjectCallFailure::BeforeSend, error.to_string());
    let request = envelope_request(target, "POST", &envelope, body.as_ref()).map_err(before)?;
    let namespace = key_namespace(env, jurisdiction).map_err(before)?;
    call_key(calls, &namespace, name, &request).await.map(|(_, answered)| answered)
}

/// The call to the key's object named `name`, in either mode, counted in `calls`: its
/// answer and mark, or the failure (a stub that could not be made was never sent anything,
/// nor counted).
pub(super) async fn call_key(
    calls: &Cell<u32>,
    namespace: &ObjectNamespace,
    name: &str,
    req: &Request,
) -> std::result::Result<(Response, Answered), (ObjectCallFailure, String)> {
    let stub =
        namespace.get_by_name(name).map_err(|error| (ObjectCallFailure::BeforeSend, error.to_string()))?;
    call_object(calls, stub, req).await
}
