//! The admin API, both halves. The Worker's checks the token, parses the call and hands it
//! to the object named by the id; the object's (`KeyObject::admin`) inspects or purges the
//! record. The rules are in `core::edge_rules::admin`. Every call, a refused one too, writes one audit line
//! (`core::edge_rules::admin::audit_line`) naming the operator from `X-Operator`, never the token.

use serde_json::json;
use web_sys::{Request, Response};

use super::now_ms;
use super::object::KeyObject;
use super::object_call::{call_object, envelope_request, key_namespace};
use super::{respond, settings};
use crate::core::edge_rules::admin;
use crate::core::edge_rules::admin::{
    audit_line, parse_call, parse_lookup, refusals, token_matches, AdminCall, MAX_LOOKUP_BYTES,
    OPERATOR_HEADER,
};
use crate::core::edge_rules::config::Config;
use crate::core::edge_rules::log::event_line;
use crate::core::edge_rules::wire::ToObject;
use crate::core::formats::key_record::KeyRecord;
use crate::core::key_rules::machine::KeyRecordChange;
use crate::core::primitives::url::path_and_query_parts;
use crate::core::vocabulary::fault::{Fault, Stage, StorageOperation};
use worker::{console_error, console_log, Env, Result};

/// Answers one admin call, and writes its audit line.
pub async fn call(req: Request, url: &str, env: &Env, config: &Config, token: &str) -> Result<Response> {
    let operator = req.headers().get(OPERATOR_HEADER).ok().flatten();
    let (operation, object_id, response) = answer(req, url, env, config, token).await;
    let status = response.as_ref().map_or(500, Response::status);
    console_log!("{}", audit_line(operation, object_id.as_deref(), operator.as_deref(), status));
    response
}

/// The call's answer, with what the audit line needs: the operation and the object id.
async fn answer(
    req: Request,
    url: &str,
    env: &Env,
    config: &Config,
    token: &str,
) -> (&'static str, Option<String>, Result<Response>) {
    let (path, query) = path_and_query_parts(url);
    let method = req.method();
    // Named for the audit line before the token is checked, so refused calls say what they
    // tried.
    let (attempted, attempted_id) = match parse_call(&config.admin_prefix, &method, path, query) {
        AdminCall::Inspect { object_id, .. } => ("inspect", Some(object_id)),
        AdminCall::Purge { object_id, .. } => ("purge", Some(object_id)),
        AdminCall::Lookup { .. } => ("lookup", None),
        AdminCall::NotFound | AdminCall::MethodNotAllowed => ("unknown", None),
    };
    let response = respond_to(req, url, env, config, token).await;
    match response {
        // A lookup's object id is known once its body was read.
        Ok((operation, found, response)) => (operation, found.or(attempted_id), Ok(response)),
        Err(error) => (attempted, attempted_id, Err(error)),
    }
}

/// The call's operation, the object id it reached (if any) and its answer.
async fn respond_to(
    req: Request,
    url: &str,
    env: &Env,
    config: &Config,
    token: &str,
) -> Result<(&'static str, Option<String>, Response)> {
    let prefix = config.admin_prefix.as_str();
    // The token is checked before anything else, so a refused call learns nothing about
    // which paths or records exist.
    if !token_matches(req.headers().get("authorization")?.as_deref(), token) {
        let response = respond::problem(&refusals::unauthorized())?;
        response.headers().set("www-authenticate", "Bearer")?;
        return Ok(("refused", None, response));
    }
    let (path, query) = path_and_query_parts(url);
    let (object_id, operation) = match parse_call(prefix, &req.method(), path, query) {
        AdminCall::Inspect { object_id, reveal_fingerprint: false } => (object_id, "inspect"),
        AdminCall::Inspect { object_id, reveal_fingerprint: true } => (object_id, "inspect-reveal"),
        AdminCall::Purge { object_id, force: false } => (object_id, "purge"),
        AdminCall::Purge { object_id, force: true } => (object_id, "purge-force"),
        AdminCall::Lookup { reveal_fingerprint } => {
            // The object is named from the body as the Worker names it; its id is what the
            // answer and the audit line show, never the scope.
            let body = read_lookup(&req).await?;
            let name_key = settings::get(env).object_name_key.clone();
            let name = match parse_lookup(&body, &config.scope.headers, name_key.as_deref()) {
                Ok(name) => name,
                Err(problem) => return respond::problem(&problem).map(|r| ("lookup", None, r)),
            };
            let namespace = key_namespace(env, config.jurisdiction.as_deref())?;
            let object_id = namespace.id_from_name(&name)?.to_string();
            (object_id, if reveal_fingerprint { "inspect-reveal" } else { "inspect" })
        }
        AdminCall::NotFound => {
            let response = respond::problem(&refusals::no_endpoint(prefix));
            return response.map(|r| ("not-found", None, r));
        }
        AdminCall::MethodNotAllowed => {
            let response = respond::problem(&refusals::method_not_allowed());
            return response.map(|r| ("method-not-allowed", None, r));
        }
    };
    let envelope = ToObject::Admin(operation.to_owned()).encode();
    let to_object = envelope_request("https://admin.invalid/", "GET", &envelope, None)?;
    let namespace = key_namespace(env, config.jurisdiction.as_deref())?;
    // 64 hex digits that this namespace never issued are no object id: not found, rather
    // than the runtime's exception (a bare 500).
    let Ok(stub) = namespace.id_from_string(&object_id).and_then(|id| id.get_stub()) else {
        let response = respond::problem(&refusals::no_such_object());
        return response.map(|r| ("not-found", None, r));
    };
    let response = match call_object(stub, &to_object).await {
        Ok(response) => Ok(response),
        Err(_) => respond::problem(&refusals::object_unreachable()),
    };
    response.map(|r| (operation, Some(object_id), r))
}

/// A lookup's body, at most `MAX_LOOKUP_BYTES` (one more is read, so that the core
/// refuses a longer one).
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
        self.expire_observed(now);
        let object_id = self.object_id().to_owned();
        let record = match self.record() {
            Ok(record) => record,
            Err(error) => {
                let fault = Fault::storage(error.operation(), Stage::BeforeClaim);
                console_error!(
                    "{}",
                    fault.source.log_line(&self.subject(), "admin's read of the record", &error)
                );
                return respond::problem(&fault.problem());
            }
        };
        let waiters = self.key.borrow().live().map(|live| live.waiters);
        let live = waiters.is_some();
        let response = match operation {
            "inspect" | "inspect-reveal" => {
                let reveal = operation == "inspect-reveal";
                let faults = settings::get(&self.env).fault_injection;
                respond::json(&admin::inspection(&object_id, record.as_ref(), waiters, now, reveal, &faults))
            }
            "purge" | "purge-force" => {
                let force = operation == "purge-force";
                if let Some(refusal) = admin::purge_refusal(record.as_ref(), live, now, force) {
                    respond::problem(&admin::refusals::purge_refused(refusal))
                } else {
                    let job = record.as_ref().and_then(KeyRecord::async_job).is_some();
                    match self.apply(&KeyRecordChange::Delete).await {
                        // A pending job's alarm is cancelled with it.
                        Ok(()) if job && !self.store.delete_alarm().await => {
                            // The record is deleted; only its alarm is left to fire on nothing.
                            let fault = Fault::storage(StorageOperation::Alarm, Stage::AfterStep);
                            let subject = self.subject();
                            let detail = "the record is purged, its alarm left in place";
                            console_error!(
                                "{}",
                                fault.source.log_line(&subject, "cancelling the job's alarm", detail)
                            );
                            respond::problem(&fault.problem())
                        }
                        Ok(()) => {
                            console_log!("{}", event_line("admin-purge", &object_id, &[("forced", force)]));
                            respond::json(&json!({"object_id": object_id, "purged": true}))
                        }
                        Err(error) => {
                            let fault = Fault::storage(StorageOperation::Delete, Stage::BeforeClaim);
                            console_error!("{}", fault.source.log_line(&self.subject(), "purge", &error));
                            respond::problem(&fault.problem())
                        }
                    }
                }
            }
            _ => respond::problem(&admin::refusals::unknown_operation()),
        };
        response
    }
}
