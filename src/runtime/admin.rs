//! The admin API's edge half: checks the token, parses the call and hands it to the
//! object named by the id. The object inspects or purges (see `object`). The rules are in
//! `core::admin`.

use worker::{Env, Headers, Request, RequestInit, Response, Result};

use super::entry::{answered_by_object, key_namespace};
use super::{internal, respond};
use crate::core::admin::{parse_call, token_matches, AdminCall};
use crate::core::config::Config;
use crate::core::problem::{Problem, ProblemKind};
use crate::core::url::path_and_query_parts;

/// The admin token, when the `ADMIN_TOKEN` secret (or, in local development, variable) is
/// set and not empty. Without it the admin API does not exist.
pub fn token(env: &Env) -> Option<String> {
    let value = env
        .secret("ADMIN_TOKEN")
        .map(|s| s.to_string())
        .or_else(|_| env.var("ADMIN_TOKEN").map(|v| v.to_string()));
    value.ok().filter(|token| !token.is_empty())
}

/// Answers one admin call.
pub async fn call(req: Request, env: &Env, config: &Config, token: &str) -> Result<Response> {
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
    let url = req.inner().url();
    let (path, query) = path_and_query_parts(&url);
    let (object_id, operation) = match parse_call(prefix, &req.inner().method(), path, query) {
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
    let headers = Headers::new();
    headers.set(internal::ADMIN, operation)?;
    let mut init = RequestInit::new();
    init.with_headers(headers);
    let to_object = Request::new_with_init("https://admin.invalid/", &init)?;
    let namespace = key_namespace(env, config.jurisdiction.as_deref())?;
    let stub = namespace.id_from_string(&object_id)?.get_stub()?;
    match stub.fetch_with_request(to_object).await.and_then(answered_by_object) {
        Ok(response) => Ok(response),
        Err(_) => respond::problem(
            &Problem::new(ProblemKind::StorageUnavailable, "The record's object could not be reached.")
                .with_retry_after(1),
        ),
    }
}
