//! The admin API's edge half: checks the token, parses the call and hands it to the
//! object named by the id. The object inspects or purges (see `object`). The rules are in
//! `core::admin`.

use worker::web_sys::{Headers, Request, RequestInit, Response};
use worker::{Env, Result};

use super::entry::{call_object, key_namespace};
use super::{internal, respond};
use crate::core::admin::{parse_call, token_matches, AdminCall};
use crate::core::config::Config;
use crate::core::problem::{Problem, ProblemKind};
use crate::core::url::path_and_query_parts;

/// Answers one admin call.
pub async fn call(req: Request, url: &str, env: &Env, config: &Config, token: &str) -> Result<Response> {
    let prefix = config.admin_prefix.as_str();
    // The token is checked before anything else, so a refused call learns nothing about
    // which paths or records exist.
    if !token_matches(req.headers().get("authorization")?.as_deref(), token) {
        let response = respond::problem(&Problem::new(
            ProblemKind::Unauthorized,
            "Send Authorization: Bearer <ADMIN_TOKEN>.",
        ))?;
        response.headers().set("www-authenticate", "Bearer")?;
        return Ok(response);
    }
    let (path, query) = path_and_query_parts(url);
    let (object_id, operation) = match parse_call(prefix, &req.method(), path, query) {
        AdminCall::Inspect { object_id } => (object_id, "inspect"),
        AdminCall::Purge { object_id, force: false } => (object_id, "purge"),
        AdminCall::Purge { object_id, force: true } => (object_id, "purge-force"),
        AdminCall::NotFound => {
            return respond::problem(&Problem::new(
                ProblemKind::NotFound,
                format!("Admin endpoints: GET or DELETE {prefix}records/<object id (64 hex digits)>."),
            ))
        }
        AdminCall::MethodNotAllowed => {
            return respond::problem(&Problem::new(
                ProblemKind::MethodNotAllowed,
                "Use GET to inspect, DELETE to purge.",
            ))
        }
    };
    let headers = Headers::new()?;
    headers.set(internal::ADMIN, operation)?;
    let init = RequestInit::new();
    init.set_headers(&headers);
    let to_object = Request::new_with_str_and_init("https://admin.invalid/", &init)?;
    let namespace = key_namespace(env, config.jurisdiction.as_deref())?;
    // 64 hex digits that this namespace never issued are no object id: not found, rather
    // than the runtime's exception (a bare 500).
    let Ok(stub) = namespace.id_from_string(&object_id).and_then(|id| id.get_stub()) else {
        return respond::problem(&Problem::new(ProblemKind::NotFound, "No object has this id."));
    };
    match call_object(stub, &to_object).await {
        Ok(response) => Ok(response),
        Err(_) => respond::problem(
            &Problem::new(ProblemKind::StorageUnavailable, "The record's object could not be reached.")
                .with_retry_after(1),
        ),
    }
}
