//! Where published outcomes go: the Queues producer bound as `OUTCOME_QUEUE`, when it is.
//! Which outcomes are published, and the message, are the core's (`core::edge_rules::outcome_events`);
//! this module only sends, beside the answer and never before it, and logs a send that
//! failed (`outcome-publish-failed`, with the object id), which is not retried.

use worker::{QueueContentType, RawMessageBuilder};

use super::now_ms;
use crate::core::edge_rules::log::event_line;
use crate::core::edge_rules::outcome_events::{publishes, OutcomeEvent, OUTCOME_QUEUE_BINDING};
use crate::core::vocabulary::decision::Decision;
use worker::{console_error, Env};

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
    let bound =
        js_sys::Reflect::get(env, &OUTCOME_QUEUE_BINDING.into()).is_ok_and(|value| !value.is_undefined());
    if !bound {
        return;
    }
    // A binding that is no queue fails like a queue that is down: logged, not retried.
    let queue = env.queue(OUTCOME_QUEUE_BINDING);
    let event = OutcomeEvent { object_id, decision, origin_status, asynchronous, at_ms: now_ms() };
    let message = event.message();
    let object = object_id.to_owned();
    wasm_bindgen_futures::spawn_local(async move {
        // The message is the core's JSON text, sent as the JSON value it spells.
        let sent = async {
            let body = RawMessageBuilder::new(js_sys::JSON::parse(&message)?);
            queue?.send_raw(body.build_with_content_type(QueueContentType::Json)).await
        };
        if let Err(error) = sent.await {
            console_error!("{} {}", event_line("outcome-publish-failed", &object, &[]), error);
        }
    });
}
