//! The Worker's call to a key's object: the namespace (in the configured jurisdiction),
//! the stub, the call, and whether the answer is the object's own. Only an answer that
//! carries the object's mark (`core::edge_rules::wire::ANSWERED_HEADER`) is one the object gave; any
//! other failure is classified (`core::edge_rules::routes::ObjectCallFailure`) for the core to decide
//! between failing open and 503.

use std::cell::{Cell, OnceCell};

use wasm_bindgen::{JsCast, JsValue};
use web_sys::{Headers, Request, RequestInit, Response};

use worker::{ObjectNamespace, Stub};

use super::platform::{Error, Result};
use super::{bindings, boundary};
use crate::core::edge_rules::routes::ObjectCallFailure;
use crate::core::edge_rules::wire::{Answered, ANSWERED_HEADER, ENVELOPE_HEADER};
use worker::Env;

/// The Durable Object namespace binding (wrangler.toml).
pub(super) const OBJECT_BINDING: &str = "IDEMPOTENCY_KEYS";

/// The key objects' namespace, restricted to the configured jurisdiction if any
/// (`env.IDEMPOTENCY_KEYS.jurisdiction("eu")`).
pub(super) fn key_namespace(env: &Env, jurisdiction: Option<&str>) -> Result<ObjectNamespace> {
    let namespace = env.durable_object(OBJECT_BINDING)?;
    let Some(jurisdiction) = jurisdiction else { return Ok(namespace) };
    Ok(bindings::jurisdiction(&namespace, jurisdiction)?)
}

thread_local! {
    static NAMESPACE: OnceCell<ObjectNamespace> = const { OnceCell::new() };
}

/// [`key_namespace`], looked up once per isolate (bindings, like variables, cannot change
/// while an isolate lives). A failed lookup is not kept: it is tried again next time.
pub(super) fn cached_key_namespace(env: &Env, jurisdiction: Option<&str>) -> Result<ObjectNamespace> {
    if let Some(namespace) = NAMESPACE.with(|cell| cell.get().cloned()) {
        return Ok(namespace);
    }
    let namespace = key_namespace(env, jurisdiction)?;
    NAMESPACE.with(|cell| {
        let _ = cell.set(namespace.clone());
    });
    Ok(namespace)
}

/// The calls to keys' objects the Worker made for one request (its line's `object_calls`),
/// counted where every call is made ([`call_object_marked`]).
#[derive(Default)]
pub(super) struct ObjectCalls(Cell<u32>);

impl ObjectCalls {
    /// How many calls were made so far (sent, whatever came of them).
    pub(super) fn made(&self) -> u32 {
        self.0.get()
    }
}

/// Sends `req` to the object behind `stub` and takes its answer: only one that carries the
/// object's mark is the object's. A call that throws before it is sent, or that the
/// platform refuses as `overloaded` (queued and never run), was not delivered; any other
/// failure may have come after the object sent the request on. (An admin call: no line
/// counts it.)
pub(super) async fn call_object(
    stub: Stub,
    req: &Request,
) -> std::result::Result<Response, (ObjectCallFailure, String)> {
    call_object_marked(&ObjectCalls::default(), stub, req).await.map(|(response, _)| response)
}

/// [`call_object`], counted in `calls`, with the mark the object put on its answer
/// (observe mode's verdict). Every call the Worker makes to a key's object is made here.
pub(super) async fn call_object_marked(
    calls: &ObjectCalls,
    stub: Stub,
    req: &Request,
) -> std::result::Result<(Response, Answered), (ObjectCallFailure, String)> {
    calls.0.set(calls.0.get().saturating_add(1));
    classify(&boundary::call_object(&stub.into_rpc(), req, ANSWERED_HEADER).await)
}

/// What came of a call to a key's object, as `boundary.mjs`'s `callObject` reports it
/// (`outcome`, called with the mark [`ANSWERED_HEADER`]): the object's answer with its
/// mark, or the failure for the core to classify. The call and its answer's mark are read
/// in one JavaScript call; what they mean is decided here.
pub(super) fn classify(
    outcome: &js_sys::Array,
) -> std::result::Result<(Response, Answered), (ObjectCallFailure, String)> {
    let described = |at: u32| Error::from(outcome.get(at)).to_string();
    match outcome.get(0).as_f64() {
        Some(0.0) => Err((ObjectCallFailure::BeforeSend, described(1))),
        Some(1.0) => {
            let flag = |at: u32| outcome.get(at).as_bool() == Some(true);
            Err((ObjectCallFailure::Rejected { overloaded: flag(2), remote: flag(3) }, described(1)))
        }
        Some(3.0) => {
            // The mark's presence is what proves the object answered. Its verdict matters
            // to observe mode only; a value it cannot read (a live answer keeps the
            // origin's own header of this name, should it send one) is a plain mark, never
            // a reason to refuse an answer the object gave.
            let mark = outcome.get(2).as_string().unwrap_or_default();
            let answered = Answered::decode(&mark).unwrap_or(Answered::Plain);
            Ok((outcome.get(1).unchecked_into(), answered))
        }
        // The platform answered, perhaps after the object ran.
        _ => Err((ObjectCallFailure::UnmarkedAnswer, outcome.get(1).as_string().unwrap_or_default())),
    }
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
    let init = RequestInit::new();
    init.set_method(method);
    init.set_headers(&headers);
    if let Some(body) = body {
        init.set_body(body);
    }
    Ok(Request::new_with_str_and_init(target, &init)?)
}

/// Observe mode's call to the key's object named `name`: the envelope (and the origin's
/// body, with an outcome), POSTed to `target`, counted in `calls`; the mark the object put
/// on its answer.
pub(super) async fn call_named(
    calls: &ObjectCalls,
    env: &Env,
    jurisdiction: Option<&str>,
    name: &str,
    target: &str,
    envelope: String,
    body: Option<JsValue>,
) -> std::result::Result<Answered, (ObjectCallFailure, String)> {
    let before = |error: Error| (ObjectCallFailure::BeforeSend, error.to_string());
    let request = envelope_request(target, "POST", &envelope, body.as_ref()).map_err(before)?;
    let namespace = cached_key_namespace(env, jurisdiction).map_err(before)?;
    let stub = namespace.get_by_name(name).map_err(|error| before(error.into()))?;
    call_object_marked(calls, stub, &request).await.map(|(_, answered)| answered)
}
