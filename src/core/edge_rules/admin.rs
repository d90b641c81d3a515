//! The admin API: which requests it answers, who may call it, and what it shows.
//!
//! Owns the paths, the token check and the record summary. The runtime only routes to the
//! object and carries out inspect or purge.
//!
//! 1. The API exists only when the `ADMIN_TOKEN` secret is set; otherwise its paths are
//!    ordinary traffic and pass to the origin like any other.
//! 2. It lives under a prefix that cannot collide with the origin's paths (default
//!    `/__idempotency/`, set with `ADMIN_PATH_PREFIX`).
//! 3. `GET {prefix}records/{object id}` inspects a record; `DELETE` purges it. Purging a
//!    record that exists (in flight, completed or unknown) needs `?force=true`: a purged
//!    completed or unknown key executes again on its next retry, which may charge twice.
//!    The object id is the one log lines print.
//! 4. Every call needs `Authorization: Bearer <token>`. The comparison takes the same time
//!    whatever the token, and a refused call learns nothing about the record. The token
//!    comes from the `ADMIN_TOKEN` secret and has at least [`MIN_TOKEN_BYTES`] bytes;
//!    a shorter one is an invalid configuration (500 on every request).
//! 5. Inspect shows no fingerprint unless asked with `?reveal=fingerprint`: the
//!    fingerprint of a low-entropy body (an amount) can be brute-forced offline.
//! 6. Every call, refused ones included, writes one audit line ([`audit_line`]): the
//!    operation, the object id, the outcome and the operator named by `X-Operator`, never
//!    the token.
//! 7. `POST {prefix}lookup` finds a record from what a customer can tell the operator: the
//!    key and who sent it (the credential, i.e. the first `SCOPE_HEADER`'s value; or a
//!    verified token's issuer, claim path and value; or anonymous; plus the further scope
//!    headers' values), in a JSON body ([`parse_lookup`]), never in the URL, where proxies
//!    log it. It answers with the record's inspect view, which names the object id and
//!    never the scope.

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::config::FaultInjection;
use crate::core::formats::fingerprint::{object_name, Scope, ScopeField};
use crate::core::formats::job::JobPhase;
use crate::core::formats::key_record::{InFlight, KeyRecord, UnknownReason};
use crate::core::formats::keyed_name::keyed_object_name;
use crate::core::primitives::jwt::{ClaimPath, ClaimValue, Identity};
use crate::core::primitives::key::parse_key;
use crate::core::primitives::time::Millis;
use crate::core::vocabulary::problem::{Problem, ProblemKind};

/// The secret that turns the admin API on.
pub const VAR_ADMIN_TOKEN: &str = "ADMIN_TOKEN";

/// The shortest admin token accepted: 32 bytes (256 bits when random).
pub const MIN_TOKEN_BYTES: usize = 32;

/// The header an operator names themselves with, for the audit line.
pub const OPERATOR_HEADER: &str = "x-operator";

/// The token's value checked: an empty value means no admin API; one under
/// [`MIN_TOKEN_BYTES`] is refused with a reason that never contains it.
pub fn check_token(value: &str) -> Result<Option<&str>, String> {
    match value.len() {
        0 => Ok(None),
        n if n < MIN_TOKEN_BYTES => Err(format!(
            "{VAR_ADMIN_TOKEN} is invalid: it must be at least {MIN_TOKEN_BYTES} bytes (it has {n}). Set it with `wrangler secret put {VAR_ADMIN_TOKEN}`, e.g. from `openssl rand -hex 32`."
        )),
        _ => Ok(Some(value)),
    }
}

/// The operator's name from `X-Operator`, made safe for a log line: printable ASCII
/// only, at most 64 characters; anything else is replaced by `?`.
pub fn operator_name(header: Option<&str>) -> Option<String> {
    let header = header?.trim();
    if header.is_empty() {
        return None;
    }
    Some(header.chars().take(64).map(|c| if c.is_ascii_graphic() || c == ' ' { c } else { '?' }).collect())
}

/// One audit line (JSON) for an admin call: `operation` is `inspect`, `reveal`, `purge`,
/// `purge-force` or `refused`; `outcome` the answer's status. No token, no record content.
pub fn audit_line(operation: &str, object_id: Option<&str>, operator: Option<&str>, status: u16) -> String {
    json!({
        "event": "admin-audit",
        "operation": operation,
        "object": object_id,
        "operator": operator_name(operator),
        "status": status,
    })
    .to_string()
}

/// What an admin call asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AdminCall {
    Inspect {
        object_id: String,
        /// `?reveal=fingerprint`: include the record's fingerprint.
        reveal_fingerprint: bool,
    },
    Purge {
        object_id: String,
        force: bool,
    },
    /// `POST {prefix}lookup`: the record of a (scope, key) given in the body.
    Lookup {
        reveal_fingerprint: bool,
    },
    /// Under the prefix, but no such endpoint (or a malformed object id).
    NotFound,
    /// A known path with a method it does not take.
    MethodNotAllowed,
}

/// What the Worker does with an admin call, decided from its request line and its token
/// alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AdminPlan {
    /// Answer with this problem, reaching nothing; the audit line names the call `audited`,
    /// and the object it named (a call refused for its token says what it tried).
    Refuse { audited: &'static str, object_id: Option<String>, problem: Problem },
    /// Ask the key's object for `operation`: the object with `object_id`, or, for a lookup
    /// (`None`), the one its body names.
    Ask { object_id: Option<String>, operation: AdminOperation },
}

impl AdminPlan {
    /// The call as its audit line names it, and the object it names, if it names one.
    pub fn audited(&self) -> (&'static str, Option<&str>) {
        match self {
            AdminPlan::Refuse { audited, object_id, .. } => (audited, object_id.as_deref()),
            AdminPlan::Ask { object_id: None, .. } => ("lookup", None),
            AdminPlan::Ask { object_id: Some(object_id), operation } => (operation.name(), Some(object_id)),
        }
    }
}

/// Plans an admin call. The token (`authorization`, the request's header, against
/// `token`) is checked before anything else, so a refused call learns nothing about which
/// paths or records exist.
pub fn plan(
    prefix: &str,
    method: &str,
    path: &str,
    query: Option<&str>,
    authorization: Option<&str>,
    token: &str,
) -> AdminPlan {
    let call = parse_call(prefix, method, path, query);
    if !token_matches(authorization, token) {
        let object_id = match call {
            AdminCall::Inspect { object_id, .. } | AdminCall::Purge { object_id, .. } => Some(object_id),
            AdminCall::Lookup { .. } | AdminCall::NotFound | AdminCall::MethodNotAllowed => None,
        };
        return AdminPlan::Refuse { audited: "refused", object_id, problem: refusals::unauthorized() };
    }
    let ask = |object_id, operation| AdminPlan::Ask { object_id, operation };
    match call {
        AdminCall::Inspect { object_id, reveal_fingerprint } => {
            ask(Some(object_id), AdminOperation::Inspect { reveal_fingerprint })
        }
        AdminCall::Purge { object_id, force } => ask(Some(object_id), AdminOperation::Purge { force }),
        AdminCall::Lookup { reveal_fingerprint } => ask(None, AdminOperation::Inspect { reveal_fingerprint }),
        AdminCall::NotFound => AdminPlan::Refuse {
            audited: "not-found",
            object_id: None,
            problem: refusals::no_endpoint(prefix),
        },
        AdminCall::MethodNotAllowed => {
            let problem = refusals::method_not_allowed();
            AdminPlan::Refuse { audited: "method-not-allowed", object_id: None, problem }
        }
    }
}

/// What the key's object is asked to do for an admin call, named in the call's envelope.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdminOperation {
    Inspect { reveal_fingerprint: bool },
    Purge { force: bool },
}

impl AdminOperation {
    /// Its name in the envelope and the audit line.
    pub fn name(self) -> &'static str {
        match self {
            AdminOperation::Inspect { reveal_fingerprint: false } => "inspect",
            AdminOperation::Inspect { reveal_fingerprint: true } => "inspect-reveal",
            AdminOperation::Purge { force: false } => "purge",
            AdminOperation::Purge { force: true } => "purge-force",
        }
    }

    /// The operation a name stands for (`None`: no such operation, refused).
    pub fn parse(name: &str) -> Option<AdminOperation> {
        let all = [false, true].into_iter().flat_map(|flag| {
            [AdminOperation::Inspect { reveal_fingerprint: flag }, AdminOperation::Purge { force: flag }]
        });
        all.into_iter().find(|operation| operation.name() == name)
    }
}

/// Whether `path` is under the admin prefix.
pub fn is_admin_path(prefix: &str, path: &str) -> bool {
    path.starts_with(prefix) || path == prefix.trim_end_matches('/')
}

/// Parses an admin request. `query` is the URL's query without `?`.
pub fn parse_call(prefix: &str, method: &str, path: &str, query: Option<&str>) -> AdminCall {
    let Some(rest) = path.strip_prefix(prefix) else { return AdminCall::NotFound };
    if rest == "lookup" {
        let reveal_fingerprint = query.unwrap_or("").split('&').any(|pair| pair == "reveal=fingerprint");
        return match method {
            "POST" => AdminCall::Lookup { reveal_fingerprint },
            _ => AdminCall::MethodNotAllowed,
        };
    }
    let Some(object_id) = rest.strip_prefix("records/") else { return AdminCall::NotFound };
    let valid_id = object_id.len() == 64 && object_id.bytes().all(|b| b.is_ascii_hexdigit());
    if !valid_id {
        return AdminCall::NotFound;
    }
    let object_id = object_id.to_ascii_lowercase();
    let pairs = || query.unwrap_or("").split('&');
    let force = pairs().any(|pair| pair == "force=true" || pair == "force=1");
    let reveal_fingerprint = pairs().any(|pair| pair == "reveal=fingerprint");
    match method {
        "GET" => AdminCall::Inspect { object_id, reveal_fingerprint },
        "DELETE" => AdminCall::Purge { object_id, force },
        _ => AdminCall::MethodNotAllowed,
    }
}

/// Whether the `Authorization` value carries the expected bearer token. Both sides are
/// hashed first, so the comparison neither stops early nor depends on the lengths.
pub fn token_matches(authorization: Option<&str>, expected: &str) -> bool {
    let presented = authorization.and_then(|value| value.strip_prefix("Bearer ")).unwrap_or("");
    let same = Sha256::digest(presented.as_bytes()).ct_eq(&Sha256::digest(expected.as_bytes()));
    bool::from(same) && !expected.is_empty() && !presented.is_empty()
}

/// The whole view an object answers an inspect call with: the record's [`summary`], the
/// duplicates waiting on the execution running now (`waiters`: `None` when none runs, so
/// an operator sees who waits, and that nobody is left waiting once it settles), and any
/// test-only fault injection left set (it degrades alarms, deletions or chunk writes, and
/// whoever looks at a record must see it).
pub fn inspection(
    object_id: &str,
    record: Option<&KeyRecord>,
    waiters: Option<usize>,
    now: Millis,
    reveal_fingerprint: bool,
    faults: &FaultInjection,
) -> Value {
    let mut view = summary(object_id, record, waiters.is_some(), now, reveal_fingerprint);
    view["waiters"] = waiters.unwrap_or(0).into();
    if faults.is_set() {
        view["fault_injection"] = json!({
            "alarm_failures": faults.alarm_failures,
            "delete_failures": faults.delete_failures,
            "chunk_write_failures": faults.chunk_write_failures,
            "panics_on_request": faults.panics_on_request,
        });
    }
    view
}

/// The inspect view of a record: state, times and, for a stored answer, its status and
/// size; the fingerprint only when `reveal_fingerprint`. Never the body or the headers.
pub fn summary(
    object_id: &str,
    record: Option<&KeyRecord>,
    live: bool,
    now: Millis,
    reveal_fingerprint: bool,
) -> Value {
    let Some(record) = record.filter(|record| !record.is_expired(now)) else {
        return json!({"object_id": object_id, "state": "absent"});
    };
    let mut view = json!({
        "object_id": object_id,
        "state": record.state_name(),
        "expires_at_ms": record.expires_at(),
    });
    if reveal_fingerprint {
        view["fingerprint"] = Value::from(record.fingerprint().to_hex());
    }
    match record {
        KeyRecord::InFlight(claim) => {
            view["created_at_ms"] = Value::from(claim.claimed_at);
            view["lease_until_ms"] = Value::from(claim.lease_until);
            view["executing_now"] = Value::from(live);
            view["attempts"] = Value::from(claim.origin_attempts);
            if let Some(job) = &claim.async_job {
                // Never the request itself: only that one is stored (sealed).
                let phase = match job.phase {
                    JobPhase::Waiting => "waiting",
                    JobPhase::Sending => "sending",
                    JobPhase::GaveUp => "gave-up",
                };
                view["async"] = json!({
                    "phase": phase,
                    "retry_at_ms": (job.phase == JobPhase::Waiting).then_some(job.next_attempt_at),
                    "deadline_ms": job.deadline,
                    "request_stored": !job.sealed_request.is_empty(),
                });
            }
        }
        KeyRecord::Completed(done) => {
            view["created_at_ms"] = Value::from(done.completed_at);
            match &done.sealed_answer {
                // Sealed: not even the status is known without opening it.
                Some(sealed) => {
                    view["sealed"] = Value::from(true);
                    if let Some(envelope) = crate::core::formats::seal::Envelope::decode(sealed) {
                        view["key_id"] = Value::from(envelope.key_id);
                    }
                }
                None => {
                    view["status"] = Value::from(done.response.status);
                    let body_bytes =
                        done.chunks.as_ref().map_or(done.response.body.len() as u64, |m| m.body_len);
                    view["body_bytes"] = Value::from(body_bytes);
                }
            }
            // A large answer stored in chunk rows (`core::formats::chunks`).
            if let Some(manifest) = &done.chunks {
                view["chunks"] = Value::from(manifest.count());
            }
        }
        KeyRecord::Unknown(unknown) => {
            view["created_at_ms"] = Value::from(unknown.since);
            view["attempts"] = Value::from(unknown.origin_attempts);
            let reason = match unknown.reason {
                UnknownReason::OriginTimeout => "origin-timeout",
                UnknownReason::ResetAfterSend => "reset-after-send",
                UnknownReason::ResponseTooLarge { .. } => "response-too-large",
            };
            view["reason"] = Value::from(reason);
        }
    }
    // A lookup for an unknown outcome (`core::key_rules::reconcile`): how often it said nothing, and
    // when the alarm asks next. Never the lookup itself (sealed: it holds the key).
    if let Some(reconciling) = record.reconciling() {
        view["reconcile"] = json!({
            "asked": reconciling.asked,
            "next_at_ms": matches!(record, KeyRecord::Unknown(_)).then_some(reconciling.next_at),
            "not_found_status": reconciling.not_found,
        });
    }
    view
}

/// The refusals of the admin API, written once here: no token or a wrong one (with
/// `WWW-Authenticate: Bearer`), a path that is no endpoint, a method other than GET or
/// DELETE, an object id the namespace never issued, an object that cannot be reached, an
/// operation the object does not know, and a purge refused without `force`.
/// The most bytes a lookup's body may have.
pub const MAX_LOOKUP_BYTES: usize = 16 * 1024;

/// Who sent a key, as an operator can learn it from the customer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LookupScope {
    /// The first `SCOPE_HEADER`'s value, exactly as the client sent it.
    Credential(String),
    /// A verified token's scope: its issuer (`iss`, if any), the claim's path and value.
    Claim {
        issuer: Option<String>,
        path: String,
        value: ClaimValue,
    },
    Anonymous,
}

/// A lookup's body: `{"key": "...", "credential": "Bearer …"}`, or `"claim": {"issuer":
/// "…", "path": "sub", "value": "user_42"}` (a number as a JSON number), or
/// `"anonymous": true`; and `"scope_headers": {"x-tenant": "acme"}` for the further
/// `SCOPE_HEADER`s (absent ones left out). Returns the key's object name (as the Worker
/// names it, keyed with `OBJECT_NAME_KEY` when set). Every way it can be wrong is a 400
/// that says which.
pub fn parse_lookup(
    body: &[u8],
    scope_headers: &[String],
    name_key: Option<&[u8]>,
) -> Result<String, Problem> {
    let bad = |detail: &str| Problem::new(ProblemKind::InvalidLookup, detail.to_owned());
    if body.len() > MAX_LOOKUP_BYTES {
        return Err(bad("The lookup's body is over 16 KiB."));
    }
    let value = serde_json::from_slice::<Value>(body).map_err(|_| bad("The lookup's body is not JSON."))?;
    let key = value["key"].as_str().ok_or_else(|| bad("Name the key: \"key\": \"…\"."))?;
    let key = parse_key(key.as_bytes()).map_err(|_| bad("\"key\" is not a valid Idempotency-Key."))?;
    let scope = match (&value["credential"], &value["claim"], &value["anonymous"]) {
        (Value::String(credential), Value::Null, Value::Null) => LookupScope::Credential(credential.clone()),
        (Value::Null, Value::Object(claim), Value::Null) => {
            let issuer = match &claim.get("issuer") {
                None | Some(Value::Null) => None,
                Some(Value::String(issuer)) => Some(issuer.clone()),
                Some(_) => return Err(bad("\"claim.issuer\" must be a string.")),
            };
            let path =
                claim.get("path").and_then(Value::as_str).ok_or_else(|| bad("Name \"claim.path\"."))?;
            let value = match claim.get("value") {
                Some(Value::String(text)) => ClaimValue::String(text.clone()),
                Some(Value::Number(number)) => ClaimValue::Number(number.to_string()),
                _ => return Err(bad("\"claim.value\" must be a string or a number.")),
            };
            LookupScope::Claim { issuer, path: path.to_owned(), value }
        }
        (Value::Null, Value::Null, Value::Bool(true)) => LookupScope::Anonymous,
        _ => {
            return Err(bad(
                "Say who sent the key: exactly one of \"credential\", \"claim\" or \"anonymous\": true.",
            ))
        }
    };
    let extras_given = match &value["scope_headers"] {
        Value::Null => Map::new(),
        Value::Object(map) => map.clone(),
        _ => return Err(bad("\"scope_headers\" must be an object of header names and values.")),
    };
    let extra_names = scope_headers.iter().skip(1);
    for name in extras_given.keys() {
        if !extra_names.clone().any(|known| known.eq_ignore_ascii_case(name)) {
            return Err(bad("\"scope_headers\" names a header that is not a further SCOPE_HEADER."));
        }
    }
    let values: Vec<(String, Option<String>)> = extra_names
        .map(|name| {
            let given = extras_given.iter().find(|(given, _)| given.eq_ignore_ascii_case(name));
            (name.clone(), given.and_then(|(_, value)| value.as_str()).map(str::to_owned))
        })
        .collect();
    let extras: Vec<ScopeField<'_>> = values
        .iter()
        .map(|(name, value)| ScopeField { name, value: value.as_deref().map(str::as_bytes) })
        .collect();
    let scope = match scope {
        LookupScope::Credential(credential) => Scope::credential(credential.as_bytes(), &extras),
        LookupScope::Claim { issuer, path, value } => {
            let claim_path =
                ClaimPath::parse(&path).map_err(|_| bad("\"claim.path\" is not a claim path."))?;
            Scope::claim(&Identity { issuer, claim_path, value }, &extras)
        }
        LookupScope::Anonymous => Scope::anonymous(&extras),
    };
    Ok(keyed_object_name(name_key, object_name(scope, key.as_str())))
}

pub mod refusals {
    use crate::core::vocabulary::problem::{Problem, ProblemKind};

    pub fn unauthorized() -> Problem {
        Problem::new(ProblemKind::Unauthorized, "Send Authorization: Bearer <ADMIN_TOKEN>.")
    }

    pub fn no_endpoint(prefix: &str) -> Problem {
        Problem::new(
            ProblemKind::NotFound,
            format!("Admin endpoints: GET or DELETE {prefix}records/<object id (64 hex digits)>."),
        )
    }

    pub fn method_not_allowed() -> Problem {
        Problem::new(ProblemKind::MethodNotAllowed, "Use GET to inspect, DELETE to purge, POST to look up.")
    }

    pub fn no_such_object() -> Problem {
        Problem::new(ProblemKind::NotFound, "No object has this id.")
    }

    pub fn object_unreachable() -> Problem {
        Problem::new(ProblemKind::StorageUnavailable, "The record's object could not be reached.")
            .with_retry_after(1)
    }

    pub fn unknown_operation() -> Problem {
        Problem::new(ProblemKind::NotFound, "Unknown admin operation.")
    }

    /// A purge refused without `force` (`super::purge_refusal` says why).
    pub fn purge_refused(why: &'static str) -> Problem {
        Problem::new(ProblemKind::InProgress, why)
    }
}

/// Why a purge is refused without `force`, or `None` when it may go ahead: a record in
/// flight (its execution may still be running), completed or unknown (the next retry would
/// execute again) needs it. An absent or expired record does not.
pub fn purge_refusal(
    record: Option<&KeyRecord>,
    live: bool,
    now: Millis,
    force: bool,
) -> Option<&'static str> {
    if force {
        return None;
    }
    match record.filter(|record| !record.is_expired(now)) {
        // An asynchronous job between attempts, none of which can have executed: purging it
        // cancels it (and its alarm), and nothing can run twice.
        Some(KeyRecord::InFlight(InFlight { async_job: Some(job), .. }))
            if job.phase != JobPhase::Sending && !job.unknown_seen && !live =>
        {
            None
        }
        Some(KeyRecord::InFlight(_)) => Some("The record is in flight: its execution may still be running. Add ?force=true to purge it anyway."),
        Some(KeyRecord::Completed(_)) => Some("The record holds a completed outcome: once purged, the next retry with this key executes again (a second charge). Add ?force=true to purge it anyway."),
        Some(KeyRecord::Unknown(_)) => Some("The record holds an outcome that is unknown: the request may have executed, and once purged the next retry executes again. Reconcile with the origin first, then add ?force=true."),
        None if live => Some("An execution is running in this object. Add ?force=true to purge anyway."),
        None => None,
    }
}

/// What the key's object does for an admin call (`runtime::admin`'s object half), on its
/// record as read, with its live execution's waiters (`None`: none runs).
#[derive(Clone, Debug, PartialEq)]
pub enum AtObject {
    /// Answer with this view ([`inspection`]).
    Show(Value),
    /// Answer with this problem: an unknown operation, or a purge refused ([`purge_refusal`]).
    Refuse(Problem),
    /// Delete the record, then answer [`purged`]. `cancel_alarm`: a job's alarm goes with
    /// it, so that it never fires on nothing.
    Purge { force: bool, cancel_alarm: bool },
}

/// What the object named by `object_id` does for `operation` ([`AtObject`]).
pub fn at_object(
    operation: &str,
    object_id: &str,
    record: Option<&KeyRecord>,
    waiters: Option<usize>,
    now: Millis,
    faults: &FaultInjection,
) -> AtObject {
    match AdminOperation::parse(operation) {
        Some(AdminOperation::Inspect { reveal_fingerprint }) => {
            AtObject::Show(inspection(object_id, record, waiters, now, reveal_fingerprint, faults))
        }
        Some(AdminOperation::Purge { force }) => match purge_refusal(record, waiters.is_some(), now, force) {
            Some(why) => AtObject::Refuse(refusals::purge_refused(why)),
            None => AtObject::Purge { force, cancel_alarm: record.and_then(KeyRecord::async_job).is_some() },
        },
        None => AtObject::Refuse(refusals::unknown_operation()),
    }
}

/// The answer to a purge that was carried out.
pub fn purged(object_id: &str) -> Value {
    json!({"object_id": object_id, "purged": true})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_admin_operation_is_named_as_the_envelope_and_the_audit_line_say() {
        for operation in [
            AdminOperation::Inspect { reveal_fingerprint: false },
            AdminOperation::Inspect { reveal_fingerprint: true },
            AdminOperation::Purge { force: false },
            AdminOperation::Purge { force: true },
        ] {
            assert_eq!(AdminOperation::parse(operation.name()), Some(operation));
        }
        assert_eq!(AdminOperation::Purge { force: true }.name(), "purge-force");
        assert_eq!(AdminOperation::parse("drop"), None);
    }

    #[test]
    fn an_admin_call_is_planned_token_first_and_audited_by_what_it_asks() {
        let id = "a".repeat(64);
        let path = format!("/admin/records/{id}");
        let bearer = Some("Bearer s3cret");
        let refused = plan("/admin/", "GET", "/admin/nothing", None, Some("Bearer wrong"), "s3cret");
        let AdminPlan::Refuse { audited: "refused", problem, .. } = &refused else { panic!("{refused:?}") };
        assert_eq!(problem.status(), 401, "not even the path is judged without the token");
        let tried = plan("/admin/", "DELETE", &path, None, None, "s3cret");
        assert_eq!(tried.audited(), ("refused", Some(id.as_str())), "a refused call says what it tried");
        let stored = crate::core::key_rules::machine::problem_response(problem);
        assert!(stored.headers.iter().any(|(name, value)| name == "www-authenticate" && value == "Bearer"));
        let purge = plan("/admin/", "DELETE", &path, Some("force=true"), bearer, "s3cret");
        assert_eq!(purge.audited(), ("purge-force", Some(id.as_str())));
        let inspect = plan("/admin/", "GET", &path, Some("reveal=fingerprint"), bearer, "s3cret");
        assert_eq!(
            inspect,
            AdminPlan::Ask {
                object_id: Some(id.clone()),
                operation: AdminOperation::Inspect { reveal_fingerprint: true }
            }
        );
        let lookup = plan("/admin/", "POST", "/admin/lookup", None, bearer, "s3cret");
        assert_eq!(lookup.audited(), ("lookup", None));
        let missing = plan("/admin/", "GET", "/admin/nothing", None, bearer, "s3cret");
        assert_eq!(missing.audited(), ("not-found", None));
        let wrong_method = plan("/admin/", "PATCH", &path, None, bearer, "s3cret");
        assert_eq!(wrong_method.audited(), ("method-not-allowed", None));
    }
    use crate::core::formats::fingerprint::Digest256;
    use crate::core::formats::key_record::{AttemptId, Completed, InFlight, StoredResponse};
    use std::sync::Arc;

    /// The runtime hands over at most one byte past the cap: the core refuses such a body.
    #[test]
    fn a_lookup_body_over_its_cap_is_refused_whatever_it_holds() {
        let body =
            format!(r#"{{"key":"order-1","anonymous":true,"pad":"{}"}}"#, " ".repeat(MAX_LOOKUP_BYTES));
        let refused = parse_lookup(body.as_bytes(), &[], None).unwrap_err();
        assert_eq!((refused.kind, refused.status()), (ProblemKind::InvalidLookup, 400));
        let fits = br#"{"key":"order-1","anonymous":true}"#;
        assert!(parse_lookup(fits, &[], None).is_ok());
    }

    /// The lookup finds the object the Worker named for the same caller and key, for each
    /// kind of scope, and says what is wrong with a body that cannot.
    #[test]
    fn a_lookup_names_the_object_the_worker_named() {
        let headers = vec!["authorization".to_owned(), "x-tenant".to_owned()];
        let tenant = ScopeField { name: "x-tenant", value: Some(b"acme") };
        let no_tenant = ScopeField { name: "x-tenant", value: None };
        let body = br#"{"key":"order-1","credential":"Bearer alice","scope_headers":{"X-Tenant":"acme"}}"#;
        let expected = object_name(Scope::credential(b"Bearer alice", &[tenant]), "order-1");
        assert_eq!(parse_lookup(body, &headers, None), Ok(expected.clone()));
        // Keyed with OBJECT_NAME_KEY as the Worker keys it.
        assert_eq!(parse_lookup(body, &headers, Some(b"k")), Ok(keyed_object_name(Some(b"k"), expected)));
        let body = br#"{"key":"order-1","claim":{"issuer":"https://id.example","path":"sub","value":42}}"#;
        let identity = Identity {
            issuer: Some("https://id.example".into()),
            claim_path: ClaimPath::parse("sub").unwrap(),
            value: ClaimValue::Number("42".into()),
        };
        let expected = object_name(Scope::claim(&identity, &[no_tenant]), "order-1");
        assert_eq!(parse_lookup(body, &headers, None), Ok(expected));
        let expected = object_name(Scope::anonymous(&[no_tenant]), "order-1");
        assert_eq!(parse_lookup(br#"{"key":"order-1","anonymous":true}"#, &headers, None), Ok(expected));
        for bad in [
            &br#"not json"#[..],
            br#"{"credential":"Bearer alice"}"#,
            br#"{"key":"","credential":"Bearer alice"}"#,
            br#"{"key":"k","credential":"a","anonymous":true}"#,
            br#"{"key":"k"}"#,
            br#"{"key":"k","credential":"a","scope_headers":{"x-other":"1"}}"#,
            br#"{"key":"k","claim":{"path":"sub","value":true}}"#,
        ] {
            let problem = parse_lookup(bad, &headers, None).unwrap_err();
            assert_eq!((problem.kind, problem.status()), (ProblemKind::InvalidLookup, 400), "{bad:?}");
        }
        assert_eq!(
            parse_call("/p/", "POST", "/p/lookup", None),
            AdminCall::Lookup { reveal_fingerprint: false }
        );
        assert_eq!(parse_call("/p/", "GET", "/p/lookup", None), AdminCall::MethodNotAllowed);
    }

    const ID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn calls_are_parsed() {
        let p = crate::core::edge_rules::config::DEFAULT_ADMIN_PREFIX;
        assert_eq!(
            parse_call(p, "GET", &format!("/__idempotency/records/{ID}"), None),
            AdminCall::Inspect { object_id: ID.into(), reveal_fingerprint: false }
        );
        assert_eq!(
            parse_call(p, "GET", &format!("/__idempotency/records/{ID}"), Some("reveal=fingerprint")),
            AdminCall::Inspect { object_id: ID.into(), reveal_fingerprint: true }
        );
        assert_eq!(
            parse_call(p, "DELETE", &format!("/__idempotency/records/{ID}"), Some("force=true")),
            AdminCall::Purge { object_id: ID.into(), force: true }
        );
        assert_eq!(
            parse_call(p, "DELETE", &format!("/__idempotency/records/{ID}"), None),
            AdminCall::Purge { object_id: ID.into(), force: false }
        );
        assert_eq!(
            parse_call(p, "POST", &format!("/__idempotency/records/{ID}"), None),
            AdminCall::MethodNotAllowed
        );
        assert_eq!(parse_call(p, "GET", "/__idempotency/records/xyz", None), AdminCall::NotFound);
        assert_eq!(parse_call(p, "GET", "/__idempotency/other", None), AdminCall::NotFound);
        assert!(is_admin_path(p, "/__idempotency/records/x"));
        assert!(is_admin_path(p, "/__idempotency"));
        assert!(!is_admin_path(p, "/v1/charges"));
    }

    #[test]
    fn tokens_are_compared_whole() {
        assert!(token_matches(Some("Bearer s3cret"), "s3cret"));
        assert!(!token_matches(Some("Bearer s3cre"), "s3cret"));
        assert!(!token_matches(Some("Bearer s3cretX"), "s3cret"));
        assert!(!token_matches(Some("s3cret"), "s3cret"));
        assert!(!token_matches(None, "s3cret"));
        assert!(!token_matches(Some("Bearer "), ""));
    }

    #[test]
    fn summaries_show_no_body() {
        let done = KeyRecord::Completed(Completed {
            attempt: AttemptId(1),
            fingerprint: Digest256([7; 32]),
            completed_at: 10,
            expires_at: 1_000,
            response: Arc::new(StoredResponse {
                status: 201,
                headers: vec![],
                body: b"secret body".to_vec(),
            }),
            sealed_answer: None,
            sealed_bound: false,
            chunks: None,
        });
        let view = summary(ID, Some(&done), false, 20, false);
        assert_eq!(view["state"], "completed");
        assert_eq!(view["status"], 201);
        assert_eq!(view["body_bytes"], 11);
        assert!(!view.to_string().contains("secret body"));
        assert!(view.get("fingerprint").is_none(), "no fingerprint unless asked: {view}");
        let revealed = summary(ID, Some(&done), false, 20, true);
        assert_eq!(revealed["fingerprint"], Digest256([7; 32]).to_hex());
        assert_eq!(summary(ID, Some(&done), false, 1_000, false)["state"], "absent");
        assert_eq!(summary(ID, None, false, 0, false)["state"], "absent");
        // The object's whole view: waiters always, fault injection only when set.
        let quiet = inspection(ID, Some(&done), None, 20, false, &FaultInjection::default());
        assert_eq!((quiet["waiters"].clone(), quiet.get("fault_injection")), (Value::from(0u64), None));
        let faults = FaultInjection { delete_failures: 2, ..FaultInjection::default() };
        let degraded = inspection(ID, None, Some(3), 0, false, &faults);
        assert_eq!(degraded["waiters"], 3);
        assert_eq!(degraded["fault_injection"]["delete_failures"], 2);
        assert!(purge_refusal(Some(&done), false, 20, false).is_some(), "a completed record needs force");
        assert_eq!(purge_refusal(Some(&done), false, 20, true), None);
        assert_eq!(purge_refusal(Some(&done), false, 1_000, false), None, "an expired one does not");
        // What the object does for each call, as the envelope names it.
        let faults = FaultInjection::default();
        let at = |operation, record, waiters| at_object(operation, ID, record, waiters, 20, &faults);
        assert_eq!(at("inspect", Some(&done), None), AtObject::Show(quiet));
        assert!(
            matches!(at("purge", Some(&done), None), AtObject::Refuse(p) if p.kind == ProblemKind::InProgress)
        );
        assert_eq!(
            at("purge-force", Some(&done), None),
            AtObject::Purge { force: true, cancel_alarm: false }
        );
        assert!(matches!(at("purge", None, Some(1)), AtObject::Refuse(_)), "an execution runs");
        assert_eq!(at("purge", None, None), AtObject::Purge { force: false, cancel_alarm: false });
        assert!(matches!(at("drop", None, None), AtObject::Refuse(p) if p.kind == ProblemKind::NotFound));
        assert_eq!(purged(ID), json!({"object_id": ID, "purged": true}));
    }

    #[test]
    fn short_tokens_are_refused_without_echoing_them() {
        let error = check_token("e2e-admin-token-7f3a").unwrap_err();
        assert!(error.contains("ADMIN_TOKEN") && error.contains("32") && !error.contains("e2e-admin-token"));
        assert_eq!(check_token(""), Ok(None));
        let long = "t".repeat(32);
        assert_eq!(check_token(&long), Ok(Some(long.as_str())));
    }

    #[test]
    fn audit_lines_name_the_operator_and_never_the_token() {
        let line = audit_line("purge-force", Some(ID), Some("alice@example.com"), 200);
        let json: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(json["event"], "admin-audit");
        assert_eq!(json["operation"], "purge-force");
        assert_eq!(json["operator"], "alice@example.com");
        assert_eq!(json["object"], ID);
        assert_eq!(json["status"], 200);
        let hostile = audit_line("inspect", None, Some("eve\n{\"x\":1}\u{7}"), 401);
        assert!(!hostile.contains('\u{7}') && serde_json::from_str::<serde_json::Value>(&hostile).is_ok());
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&audit_line("inspect", None, None, 401)).unwrap()
                ["operator"],
            serde_json::Value::Null
        );
        assert_eq!(operator_name(Some(&"a".repeat(100))).unwrap().len(), 64);
    }

    #[test]
    fn in_flight_records_need_force() {
        let claim = KeyRecord::InFlight(InFlight {
            reconcile: None,
            attempt: AttemptId(1),
            fingerprint: Digest256([7; 32]),
            origin_attempts: 1,
            claimed_at: 0,
            lease_until: 100,
            expires_at: 1_000,
            async_job: None,
        });
        assert!(purge_refusal(Some(&claim), true, 50, false).is_some());
        assert!(purge_refusal(Some(&claim), true, 50, true).is_none());
        assert!(purge_refusal(Some(&claim), false, 1_000, false).is_none());
        assert!(purge_refusal(None, false, 0, false).is_none());
        assert!(purge_refusal(None, true, 0, false).is_some());
        // A job waiting for its next send is purged without force, and its alarm with it.
        let job = crate::core::formats::job::AsyncJob {
            phase: JobPhase::Waiting,
            deadline: 1_000,
            next_attempt_at: 500,
            max_backoff_ms: 100,
            unknown_seen: false,
            probe_origin: false,
            max_sends: 3,
            request_bound: true,
            policy: Box::new(crate::core::format_fixtures::policy()),
            sealed_request: vec![1],
        };
        let KeyRecord::InFlight(claim) = claim else { unreachable!() };
        let waiting = KeyRecord::InFlight(InFlight { async_job: Some(job), ..claim });
        let faults = FaultInjection::default();
        let purge = at_object("purge", ID, Some(&waiting), None, 50, &faults);
        assert_eq!(purge, AtObject::Purge { force: false, cancel_alarm: true });
    }
}
