//! Where published outcomes go: the Queues producer bound as `OUTCOME_QUEUE`, when it is.
//! Which outcomes are published, and the message, are the core's (`core::edge_rules::outcome_events`);
//! this module only sends, beside the answer and never before it, and logs a send that
//! failed (`outcome-publish-failed`, with the object id), which is not retried.

use wasm_bindgen::{JsCast, JsValue};

use super::now_ms;
use super::platform::{console_error, Env};
use crate::core::edge_rules::log::event_line;
use crate::core::edge_rules::outcome_events::{publishes, OutcomeEvent, OUTCOME_QUEUE_BINDING};
use crate::core::vocabulary::decision::Decision;

/// Publishes the outcome `decision` of the key whose object is `object_id`, when the
/// binding exists and the core says this outcome is published.
pub fn publish(
    env: &Env,
    object_id: &str,
    decision: Decision,
    origin_status: Option<u16>,
    asynchronous: bool,
) {
    if !publishes(decision, asynchronous) {
        return;
    }
    let Ok(queue) = env.binding(OUTCOME_QUEUE_BINDING) else { return };
    let event = OutcomeEvent { object_id, decision, origin_status, asynchronous, at_ms: now_ms() };
    let message = event.message();
    let object = object_id.to_owned();
    wasm_bindgen_futures::spawn_local(async move {
        if let Err(error) = send(&queue, &message).await {
            let error = super::platform::Error::from(error);
            console_error!("{} {}", event_line("outcome-publish-failed", &object, &[]), error);
        }
    });
}

/// `queue.send(message)` on a Queues producer binding, the message as a JSON value.
async fn send(queue: &JsValue, message: &str) -> std::result::Result<JsValue, JsValue> {
    let body = js_sys::JSON::parse(message)?;
    let send: js_sys::Function = js_sys::Reflect::get(queue, &JsValue::from_str("send"))?.dyn_into()?;
    let sent: js_sys::Promise = send.call1(queue, &body)?.dyn_into()?;
    wasm_bindgen_futures::JsFuture::from(sent).await
}
