//! The admin API, both halves. The Worker's checks the token, parses the call and hands it
//! to the object named by the id; the object's (`KeyObject::admin`) inspects or purges the
//! record. The rules are in `core::edge_rules::admin`. Every call, a refused one too, writes one audit line
//! (`core::edge_rules::admin::audit_line`) naming the operator from `X-Operator`, never the token.

use web_sys::{Request, Response};

use super::now_ms;
use super::object::KeyObject;
use super::object_call::{call_object, envelope_request, key_namespace};
use super::{respond, settings};
use crate::core::edge_rules::admin;
use crate::core::edge_rules::admin::{
    audit_line, parse_lookup, refusals, AdminOperation, AdminPlan, AtObject, MAX_LOOKUP_BYTES,
    OPERATOR_HEADER,
};
use crate::core::edge_rules::config::Config;
use crate::core::edge_rules::log::event_line;
use crate::core::edge_rules::wire::ToObject;
use crate::core::key_rules::key_state::Fence;
use crate::core::key_rules::machine::KeyRecordChange;
use crate::core::primitives::url::path_and_query_parts;
use crate::core::vocabulary::fault::{Fault, Stage, StorageOperation};
use worker::{console_log, Env, Result};

/// Answers one admin call as the core plans it (`core::edge_rules::admin::plan`), and
/// writes its audit line.
pub async fn call(req: Request, url: &str, env: &Env, config: &Config, token: &str) -> Result<Response> {
    let headers = req.headers();
    let operator = headers.get(OPERATOR_HEADER).ok().flatten();
    let authorization = headers.get("authorization").ok().flatten();
    let (path, query) = path_and_query_parts(url);
    let plan = admin::plan(&config.admin_prefix, &req.method(), path, query, authorization.as_deref(), token);
    let (mut audited, named) = plan.audited();
    let mut object_id = named.map(str::to_owned);
    let response = match plan {
        AdminPlan::Refuse { problem, .. } => respond::problem(&problem),
        AdminPlan::Ask { object_id: named, operation } => {
            // What the call came to names it (a lookup's object id is known once its body
            // was read); a failure leaves what it asked for.
            ask(&req, env, config, named, operation).await.map(|(came_to, reached, response)| {
                (audited, object_id) = (came_to, reached);
                response
            })
        }
    };
    let status = response.as_ref().map_or(500, Response::status);
    console_log!("{}", audit_line(audited, object_id.as_deref(), operator.as_deref(), status));
    response
}

/// Asks the object with `object_id` (or, for a lookup, the one its body names) for
/// `operation`: the operation or refusal the audit line names, the object id it reached,
/// if any, and the answer.
async fn ask(
    req: &Request,
    env: &Env,
    config: &Config,
    object_id: Option<String>,
    operation: AdminOperation,
) -> Result<(&'static str, Option<String>, Response)> {
    let namespace = key_namespace(env, config.jurisdiction.as_deref())?;
    let object_id = match object_id {
        Some(object_id) => object_id,
        None => {
            // The object is named from the body as the Worker names it; its id is what the
            // answer and the audit line show, never the scope.
            let body = read_lookup(req).await?;
            let name_key = settings::get(env).object_name_key.clone();
            match parse_lookup(&body, &config.scope.headers, name_key.as_deref()) {
                Ok(name) => namespace.id_from_name(&name)?.to_string(),
                Err(problem) => return respond::problem(&problem).map(|r| ("lookup", None, r)),
            }
        }
    };
    let envelope = ToObject::Admin(operation.name().to_owned()).encode();
    let to_object = envelope_request("https://admin.invalid/", "GET", &envelope, None)?;
    // 64 hex digits that this namespace never issued are no object id: not found, rather
    // than the runtime's exception (a bare 500).
    let Ok(stub) = namespace.id_from_string(&object_id).and_then(|id| id.get_stub()) else {
        return respond::problem(&refusals::no_such_object()).map(|r| ("not-found", None, r));
    };
    let response = match call_object(&Default::default(), stub, &to_object).await {
        Ok((response, _)) => Ok(response),
        Err(_) => respond::problem(&refusals::object_unreachable()),
    };
    response.map(|r| (operation.name(), Some(object_id), r))
}

/// A lookup's body, at most `MAX_LOOKUP_BYTES` copied into Wasm memory (one more, so that
/// the core refuses a longer one): the rest stays in JavaScript's buffer, which is
/// collected, where Wasm memory, once grown, is kept for the isolate's life.
async fn read_lookup(req: &Request) -> Result<Vec<u8>> {
    let buffer = wasm_bindgen_futures::JsFuture::from(req.array_buffer()?).await?;
    let bytes = js_sys::Uint8Array::new(&buffer);
    let len = bytes.length().min(MAX_LOOKUP_BYTES as u32 + 1);
    Ok(bytes.subarray(0, len).to_vec())
}

impl KeyObject {
    /// Inspects or purges the record for the admin API (`core::edge_rules::admin` has the rules).
    pub(super) async fn admin(&self, operation: &str) -> Result<Response> {
        let now = now_ms();
        self.key.borrow_mut().expire_observed(now);
        let object_id = self.object_id().to_owned();
        let record = match self.record() {
            Ok(record) => record,
            Err(error) => {
                let fault = Fault::storage(error.operation(), Stage::BeforeClaim);
                return respond::problem(&self.logged(fault, "admin's read of the record", &error));
            }
        };
        let waiters = self.key.borrow().live().map(|live| live.waiters);
        let faults = settings::get(&self.env).fault_injection;
        match admin::at_object(operation, &object_id, record.as_ref(), waiters, now, &faults) {
            AtObject::Show(view) => respond::json(&view),
            AtObject::Refuse(problem) => respond::problem(&problem),
            AtObject::Purge { force, cancel_alarm } => {
                match self.apply(&KeyRecordChange::Delete, Fence::Claim).await {
                    Ok(()) if cancel_alarm && !self.store.delete_alarm().await => {
                        // The record is deleted; only its alarm is left to fire on nothing.
                        let fault = Fault::storage(StorageOperation::Alarm, Stage::AfterStep);
                        let detail = "the record is purged, its alarm left in place";
                        respond::problem(&self.logged(fault, "cancelling the job's alarm", detail))
                    }
                    Ok(()) => {
                        console_log!("{}", event_line("admin-purge", &object_id, &[("forced", force)]));
                        respond::json(&admin::purged(&object_id))
                    }
                    Err(error) => {
                        let fault = Fault::storage(StorageOperation::Delete, Stage::BeforeClaim);
                        respond::problem(&self.logged(fault, "purge", &error))
                    }
                }
            }
        }
    }
}
