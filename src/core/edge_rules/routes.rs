//! Per-route policy: the optional `IDEMPOTENCY_ROUTES` variable.
//!
//! Owns the route list's format, its validation and the choice of a route for a path. The
//! flat variables stay the defaults; a route overrides only what it names.
//!
//! Format: a JSON array, tried in order; the first route whose `pattern` matches the path
//! wins. A pattern is a path in which `*` stands for any run of characters (`/v1/charges*`,
//! `/v1/*/refunds`). Every other member is optional:
//!
//! | member | meaning |
//! |---|---|
//! | `methods` | covered methods among `POST`, `PUT`, `PATCH`, `DELETE` (default `POST`, `PATCH`) |
//! | `key` | `"required"` (default) or `"optional"`: without a key the request passes through |
//! | `ttl_seconds`, `duplicate_wait_seconds`, `origin_timeout_seconds` | timing overrides |
//! | `on_object_unavailable` | `"fail-closed"` (default, 503) or `"fail-open"` (forward unprotected) |
//! | `fingerprint_headers` | request headers that are part of the payload, e.g. `["Stripe-Version"]` |
//! | `fingerprint_ignore` | JSON Pointers (RFC 6901) removed from a JSON body before it is fingerprinted, e.g. `["/client_timestamp"]` (`core::formats::body_shape`) |
//! | `fingerprint_only` | JSON Pointers: only these parts of a JSON body are fingerprinted (not with `fingerprint_ignore`) |
//! | `key_header` | the header the key comes from (default `Idempotency-Key`), e.g. `"X-Idempotency-Key"` (`core::primitives::key`, rule 5); see [`parse_key_header`] |
//! | `scope_claim` | the JWT claim that names the caller on this route (`core::edge_rules::scope`); `""`: the credential hash |
//! | `anonymous` | `"allow"`: callers without the scope header share one scope here; `"deny"` (the default unless `ALLOW_ANONYMOUS`): 401 |
//! | `release_statuses` | origin statuses that mean "not executed" and release the key (default `[408, 409, 425, 429, 503]` less the route's `unknown_statuses`; `[]` for none) |
//! | `release_requires_header` | `true`: a release status releases only with `Idempotency-Released: true` from the origin, else the outcome is unknown (not with 401 or 403 in `release_statuses`: they always release) |
//! | `unknown_statuses` | origin statuses that leave the outcome unknown, e.g. `[502, 504]` for a gateway in front of the application (not 401 or 403: they always release the key) |
//! | `allow_method_override` | `true`: let `X-HTTP-Method-Override` and its kin through on uncovered methods (refused with 400 by default) |
//! | `origin_deduplicates` | `true` or `false`: overrides `ORIGIN_DEDUPLICATES` for this route |
//! | `async_accept` | `"off"` or `"prefer"`: overrides `ASYNC_ACCEPT` for this route (`core::key_rules::machine::async_job`) |
//! | `mode` | `"enforce"` or `"observe"`: overrides `MODE` for this route (see [`Mode`]) |
//! | `origin_service` | the `[[services]]` binding this route's origin is reached through |
//! | `reconcile_url` | a lookup for unknown outcomes, e.g. `"https://api.example/v1/charges?idempotency_key={key}"` (`core::key_rules::reconcile`; needs `STORAGE_ENCRYPTION_KEYS`) |
//! | `reconcile_not_found` | the lookup's status that means "never executed" (default 404; a 4xx other than 401, 403, 408, 409, 425, 429) |
//! | `rate_limit` | `false`: no rate limit on this route; a binding name (`"RATE_LIMITER_PAYOUTS"`): limit with that `[[ratelimits]]` binding instead of `RATE_LIMITER` (an unbound name is a 500) |
//!
//! Any other member, a wrong type or a value out of range is an error that says where
//! (`IDEMPOTENCY_ROUTES[1].ttl_seconds: …`), so a typo never disables protection silently.

use serde_json::{Map, Value};

use super::headers::{is_hop_by_hop, INTERNAL_PREFIX, METHOD_OVERRIDE_HEADERS};
use super::origin_auth::SIGNATURE_HEADER;
use crate::core::formats::body_shape::{BodyShape, JsonPointer, MAX_POINTERS};
use crate::core::key_rules::reconcile::ReconcileRoute;
use crate::core::primitives::jwt::ClaimPath;
use crate::core::primitives::key::KeyHeader;
use crate::core::primitives::names::{is_binding_name, is_header_name};
use crate::core::vocabulary::fault::{consequence, Fault, FaultAnswer, FaultSource, Stage};
use crate::core::vocabulary::key_terms::{
    Mode, MAX_DUPLICATE_WAIT_SECONDS, MAX_ORIGIN_TIMEOUT_SECONDS, MAX_TTL_SECONDS,
};
use crate::core::vocabulary::outcome_table::{StatusSet, AUTH_REFUSED};
use crate::core::vocabulary::problem::Problem;

/// Methods a route may cover: the unsafe ones. Safe methods need no key, and the runtime
/// forwards only standard methods from an object.
const COVERABLE_METHODS: [&str; 4] = ["POST", "PUT", "PATCH", "DELETE"];

/// The variable that holds the routes.
pub const VAR_ROUTES: &str = "IDEMPOTENCY_ROUTES";

/// Most routes accepted: every covered request walks the list.
const MAX_ROUTES: usize = 64;
/// Most fingerprint headers per route.
const MAX_FINGERPRINT_HEADERS: usize = 16;

/// What to do when the key's Durable Object cannot be reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unavailable {
    /// Answer 503; forward nothing.
    FailClosed,
    /// Forward to the origin without protection.
    FailOpen,
}

/// Longest `key_header` accepted.
const MAX_KEY_HEADER_NAME: usize = 64;

/// Headers that already mean something else to the worker, the platform or the origin hop,
/// and so cannot carry a route's key (lower case). Hop-by-hop headers, `cf-*` (set by
/// Cloudflare), the method-override headers and the worker's own are refused too.
const NOT_A_KEY_HEADER: [&str; 9] = [
    "host",
    "content-length",
    "content-type",
    "content-encoding",
    "cookie",
    "prefer",
    "forwarded",
    "x-forwarded-for",
    "x-real-ip",
];

/// A route's `key_header`, as configured and in lower case.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteKeyHeader {
    pub name: String,
    pub lowercase: String,
}

impl RouteKeyHeader {
    pub fn as_key_header(&self) -> KeyHeader<'_> {
        KeyHeader { name: &self.name, lowercase: &self.lowercase }
    }
}

/// Checks a route's `key_header`: a header name that nothing else gives a meaning to. The
/// key's value then follows `Idempotency-Key`'s grammar and limits (`core::primitives::key`).
pub fn parse_key_header(name: &str) -> Result<RouteKeyHeader, String> {
    if !is_header_name(name) || name.len() > MAX_KEY_HEADER_NAME {
        return Err(format!(
            "{} is not a header name of at most {MAX_KEY_HEADER_NAME} characters",
            Value::from(name)
        ));
    }
    let lowercase = name.to_ascii_lowercase();
    let taken = NOT_A_KEY_HEADER.contains(&lowercase.as_str())
        || METHOD_OVERRIDE_HEADERS.contains(&lowercase.as_str())
        || is_hop_by_hop(&lowercase, &[])
        || lowercase.starts_with("cf-")
        || lowercase.starts_with(INTERNAL_PREFIX)
        || lowercase == SIGNATURE_HEADER;
    if taken {
        return Err(format!("{name} already means something else to the worker, the platform or the origin hop; name the header your API takes keys in"));
    }
    Ok(RouteKeyHeader { name: name.to_owned(), lowercase })
}

/// How a call to a key's object failed, as far as the Worker can see.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectCallFailure {
    /// No stub could be made, or the call threw before it was sent.
    BeforeSend,
    /// The call's promise was rejected, with the platform error's `overloaded` and
    /// `remote` flags (kept for the log line; neither proves anything, see below).
    Rejected { overloaded: bool, remote: bool },
    /// An answer without the object's marker: the platform answered, perhaps after the
    /// object ran.
    UnmarkedAnswer,
}

/// Said in the operator's words, for the Worker's log line.
impl std::fmt::Display for ObjectCallFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ObjectCallFailure::BeforeSend => f.write_str("the call could not be made"),
            ObjectCallFailure::Rejected { overloaded, remote } => {
                write!(f, "the call was rejected, overloaded: {overloaded}, remote: {remote}")
            }
            ObjectCallFailure::UnmarkedAnswer => f.write_str("an answer without the object's mark"),
        }
    }
}

impl ObjectCallFailure {
    /// Whether the object provably never received the request: only when the call could
    /// not be made at all. Only then may a fail-open route forward it.
    ///
    /// A rejected call proves nothing, `overloaded` included. An object serves one key, so
    /// it is overloaded by duplicates of a key that is already running or done: failing
    /// open then would send every duplicate of a retry storm to the origin. And a running
    /// object that dies (a deploy, a limit, a lost machine) may already have sent its
    /// request on.
    pub fn provably_undelivered(self) -> bool {
        match self {
            ObjectCallFailure::BeforeSend => true,
            ObjectCallFailure::Rejected { .. } | ObjectCallFailure::UnmarkedAnswer => false,
        }
    }
}

/// What the Worker does when the call to a key's object failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AfterObjectFailure {
    /// Forward without protection: the route chose availability, and nothing can have
    /// been sent for this attempt.
    FailOpen,
    /// Answer with this problem (503 `storage-unavailable` with `Retry-After`); nothing
    /// is forwarded.
    Refuse(Problem),
}

/// The decision after a failed object call (rule: fail open only on a fail-open route,
/// and only when the call provably never left the Worker).
pub fn after_object_failure(failure: ObjectCallFailure, on_unavailable: Unavailable) -> AfterObjectFailure {
    // A fault of the object call (`core::vocabulary::fault`), before the claim only where provably so.
    let route_fails_open = on_unavailable == Unavailable::FailOpen;
    let stage = if failure.provably_undelivered() { Stage::BeforeClaim } else { Stage::AfterStep };
    let fault = Fault { source: FaultSource::ObjectCall { route_fails_open }, stage };
    match consequence(&fault).answer {
        FaultAnswer::FailOpen => AfterObjectFailure::FailOpen,
        FaultAnswer::Problem(problem) => AfterObjectFailure::Refuse(problem),
        FaultAnswer::Origin => AfterObjectFailure::Refuse(fault.problem()),
    }
}

impl AfterObjectFailure {
    /// The caller's answer when no fail-open forward is made: the refusal, or, for a
    /// fail-open decision whose forward is not at hand, 503 as for any object not reached.
    pub fn problem(self) -> Problem {
        match self {
            AfterObjectFailure::Refuse(problem) => problem,
            AfterObjectFailure::FailOpen => object_unreachable(),
        }
    }
}

/// The error line of the object `object` (its name's short hash, never the key) not
/// reached (`failure`, with the platform's `error`) in enforce mode: failing open, or
/// refused as unavailable.
pub fn unanswered_line(object: &str, failure: ObjectCallFailure, error: &str, failing_open: bool) -> String {
    match failing_open {
        true => {
            format!("object {object}: not reached ({error}); failing open, forwarding without protection")
        }
        false => format!("object {object}: unavailable ({failure}): {error}"),
    }
}

/// 503 `storage-unavailable` for a key whose object could not be reached.
pub fn object_unreachable() -> Problem {
    Fault { source: FaultSource::ObjectCall { route_fails_open: false }, stage: Stage::BeforeClaim }.problem()
}

/// One route: a pattern and the overrides it carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    pub pattern: String,
    /// Uppercase method names.
    pub methods: Option<Vec<String>>,
    pub key_required: Option<bool>,
    pub ttl_seconds: Option<u64>,
    pub duplicate_wait_seconds: Option<u64>,
    pub origin_timeout_seconds: Option<u64>,
    pub on_unavailable: Option<Unavailable>,
    /// Lowercase header names.
    pub fingerprint_headers: Option<Vec<String>>,
    /// What of a JSON body counts (`fingerprint_ignore` or `fingerprint_only`).
    pub body_shape: Option<BodyShape>,
    /// The header the key comes from; `None`: `Idempotency-Key`.
    pub key_header: Option<RouteKeyHeader>,
    /// `Some(None)`: `""`, the credential hash, whatever `SCOPE_JWT_CLAIM` says.
    pub scope_claim: Option<Option<ClaimPath>>,
    pub anonymous_allowed: Option<bool>,
    pub release_statuses: Option<StatusSet>,
    pub release_requires_header: Option<bool>,
    pub unknown_statuses: Option<StatusSet>,
    pub allow_method_override: Option<bool>,
    pub origin_deduplicates: Option<bool>,
    pub mode: Option<Mode>,
    /// A `[[services]]` binding name.
    pub origin_service: Option<String>,
    pub rate_limit: Option<RouteRateLimit>,
    /// `Some(true)`: `"prefer"` (`ASYNC_ACCEPT` for this route).
    pub async_accept: Option<bool>,
    /// The lookup for unknown outcomes (`reconcile_url`, `reconcile_not_found`).
    pub reconcile: Option<ReconcileRoute>,
}

/// A route's `rate_limit` member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RouteRateLimit {
    Off,
    /// A Workers Rate Limiting binding's name.
    Binding(String),
}

/// Parses `IDEMPOTENCY_ROUTES`. An empty value means no routes. The error says which route
/// and which member is wrong.
pub fn parse_routes(raw: &str) -> Result<Vec<Route>, String> {
    if raw.trim().is_empty() {
        return Ok(Vec::new());
    }
    let value = serde_json::from_str::<Value>(raw).map_err(|e| format!("not valid JSON ({e})"))?;
    let Value::Array(items) = value else {
        return Err("expected a JSON array of routes, tried in order".to_owned());
    };
    if items.len() > MAX_ROUTES {
        return Err(format!("at most {MAX_ROUTES} routes are allowed"));
    }
    items.iter().enumerate().map(|(i, item)| parse_route(i, item)).collect()
}

fn parse_route(index: usize, item: &Value) -> Result<Route, String> {
    let at = |member: &str| format!("[{index}].{member}");
    let Value::Object(members) = item else {
        return Err(format!("[{index}]: expected an object with a \"pattern\""));
    };
    const KNOWN: [&str; 24] = [
        "pattern",
        "methods",
        "key",
        "key_header",
        "ttl_seconds",
        "duplicate_wait_seconds",
        "origin_timeout_seconds",
        "on_object_unavailable",
        "fingerprint_headers",
        "fingerprint_ignore",
        "fingerprint_only",
        "scope_claim",
        "anonymous",
        "release_statuses",
        "release_requires_header",
        "unknown_statuses",
        "allow_method_override",
        "origin_deduplicates",
        "mode",
        "origin_service",
        "rate_limit",
        "async_accept",
        "reconcile_url",
        "reconcile_not_found",
    ];
    if let Some(unknown) = members.keys().find(|name| !KNOWN.contains(&name.as_str())) {
        return Err(format!("{}: unknown member (known: {})", at(unknown), KNOWN.join(", ")));
    }
    let pattern = match members.get("pattern") {
        Some(Value::String(p)) if p.starts_with('/') || p == "*" => p.clone(),
        _ => return Err(format!("{}: expected a path pattern starting with \"/\"", at("pattern"))),
    };
    let methods = string_list(members, "methods", &at)?
        .map(|list| {
            list.into_iter()
                .map(|m| {
                    let upper = m.to_ascii_uppercase();
                    if COVERABLE_METHODS.contains(&upper.as_str()) {
                        Ok(upper)
                    } else {
                        Err(format!(
                            "{}: {} cannot be covered (use {})",
                            at("methods"),
                            Value::from(m.as_str()),
                            COVERABLE_METHODS.join(", ")
                        ))
                    }
                })
                .collect::<Result<Vec<_>, _>>()
        })
        .transpose()?;
    let key_required = match members.get("key") {
        None => None,
        Some(Value::String(s)) if s == "required" => Some(true),
        Some(Value::String(s)) if s == "optional" => Some(false),
        Some(_) => return Err(format!("{}: expected \"required\" or \"optional\"", at("key"))),
    };
    let on_unavailable = match members.get("on_object_unavailable") {
        None => None,
        Some(Value::String(s)) if s == "fail-closed" => Some(Unavailable::FailClosed),
        Some(Value::String(s)) if s == "fail-open" => Some(Unavailable::FailOpen),
        Some(_) => {
            return Err(format!("{}: expected \"fail-closed\" or \"fail-open\"", at("on_object_unavailable")))
        }
    };
    let fingerprint_headers = string_list(members, "fingerprint_headers", &at)?
        .map(|list| {
            if list.len() > MAX_FINGERPRINT_HEADERS {
                return Err(format!(
                    "{}: at most {MAX_FINGERPRINT_HEADERS} headers",
                    at("fingerprint_headers")
                ));
            }
            list.into_iter()
                .map(|name| {
                    if !is_header_name(&name) {
                        Err(format!(
                            "{}: {} is not a header name",
                            at("fingerprint_headers"),
                            Value::from(name.as_str())
                        ))
                    } else {
                        Ok(name.to_ascii_lowercase())
                    }
                })
                .collect::<Result<Vec<_>, _>>()
        })
        .transpose()?;
    let body_shape = body_shape(members, &at)?;
    let key_header = match members.get("key_header") {
        None => None,
        Some(Value::String(name)) => {
            Some(parse_key_header(name).map_err(|why| format!("{}: {why}", at("key_header")))?)
        }
        Some(_) => return Err(format!("{}: expected a header name", at("key_header"))),
    };
    let mode = match members.get("mode") {
        None => None,
        Some(Value::String(s)) if s == "enforce" => Some(Mode::Enforce),
        Some(Value::String(s)) if s == "observe" => Some(Mode::Observe),
        Some(_) => return Err(format!("{}: expected \"enforce\" or \"observe\"", at("mode"))),
    };
    let origin_service = match members.get("origin_service") {
        None => None,
        Some(Value::String(s)) if is_binding_name(s) => Some(s.clone()),
        Some(_) => {
            return Err(format!(
                "{}: expected the name of a [[services]] binding (letters, digits and _)",
                at("origin_service")
            ))
        }
    };
    let scope_claim = match members.get("scope_claim") {
        None => None,
        Some(Value::String(s)) if s.trim().is_empty() => Some(None),
        Some(Value::String(s)) => {
            Some(Some(ClaimPath::parse(s).map_err(|e| format!("{}: {e}", at("scope_claim")))?))
        }
        Some(_) => {
            return Err(format!("{}: expected a claim name, a dotted path or \"\"", at("scope_claim")))
        }
    };
    let anonymous_allowed = match members.get("anonymous") {
        None => None,
        Some(Value::String(s)) if s == "allow" => Some(true),
        Some(Value::String(s)) if s == "deny" => Some(false),
        Some(_) => return Err(format!("{}: expected \"allow\" or \"deny\"", at("anonymous"))),
    };
    let release_statuses = statuses(members, "release_statuses", &at)?;
    let unknown_statuses = statuses(members, "unknown_statuses", &at)?;
    // Only statuses the operator listed in both can contradict each other: the default
    // release statuses give way to the route's unknown ones (`Config::policy_for`).
    let listed_in_both = match (release_statuses, unknown_statuses) {
        (Some(release), Some(unknown)) => unknown.intersects(&release),
        _ => false,
    };
    if listed_in_both {
        return Err(format!(
            "{}: a status cannot both release the key and leave the outcome unknown (check release_statuses)",
            at("unknown_statuses")
        ));
    }
    // 401 and 403 always release the key (`core::vocabulary::outcome_table`): a route that says otherwise
    // would be overridden in silence, so it is refused instead.
    let refused = StatusSet::of(&AUTH_REFUSED).unwrap_or_default();
    if unknown_statuses.is_some_and(|unknown| unknown.intersects(&refused)) {
        return Err(format!(
            "{}: route \"{pattern}\": 401 and 403 always release the key (the origin refused the caller, so nothing was executed, and a held key would let whoever sent junk first squat it); remove them",
            at("unknown_statuses")
        ));
    }
    let requires_header = flag(members, "release_requires_header", &at)?;
    if requires_header == Some(true) && release_statuses.is_some_and(|release| release.intersects(&refused)) {
        return Err(format!(
            "{}: route \"{pattern}\": 401 and 403 release the key without Idempotency-Released, whatever release_requires_header says; remove them from release_statuses",
            at("release_requires_header")
        ));
    }
    Ok(Route {
        pattern,
        methods,
        key_required,
        ttl_seconds: seconds(members, "ttl_seconds", 1, MAX_TTL_SECONDS, &at)?,
        duplicate_wait_seconds: seconds(
            members,
            "duplicate_wait_seconds",
            0,
            MAX_DUPLICATE_WAIT_SECONDS,
            &at,
        )?,
        origin_timeout_seconds: seconds(
            members,
            "origin_timeout_seconds",
            1,
            MAX_ORIGIN_TIMEOUT_SECONDS,
            &at,
        )?,
        on_unavailable,
        fingerprint_headers,
        body_shape,
        key_header,
        scope_claim,
        anonymous_allowed,
        release_statuses,
        release_requires_header: requires_header,
        unknown_statuses,
        allow_method_override: flag(members, "allow_method_override", &at)?,
        origin_deduplicates: flag(members, "origin_deduplicates", &at)?,
        mode,
        origin_service,
        rate_limit: match members.get("rate_limit") {
            None => None,
            Some(Value::Bool(false)) => Some(RouteRateLimit::Off),
            Some(Value::String(name)) if is_binding_name(name) => Some(RouteRateLimit::Binding(name.clone())),
            Some(_) => return Err(format!("{}: expected false or a binding name", at("rate_limit"))),
        },
        async_accept: match members.get("async_accept") {
            None => None,
            Some(Value::String(s)) if s == "off" => Some(false),
            Some(Value::String(s)) if s == "prefer" => Some(true),
            Some(_) => return Err(format!("{}: expected \"off\" or \"prefer\"", at("async_accept"))),
        },
        reconcile: match (members.get("reconcile_url"), members.get("reconcile_not_found")) {
            (None, None) => None,
            (None, Some(_)) => {
                return Err(format!("{}: only with a reconcile_url", at("reconcile_not_found")))
            }
            (Some(Value::String(template)), status) => {
                let status =
                    match status {
                        None => None,
                        Some(value) => Some(value.as_u64().ok_or_else(|| {
                            format!("{}: expected an HTTP status", at("reconcile_not_found"))
                        })?),
                    };
                Some(
                    ReconcileRoute::parse(template, status)
                        .map_err(|why| format!("{}: {why}", at("reconcile_url")))?,
                )
            }
            (Some(_), _) => {
                return Err(format!("{}: expected a URL template with {{key}}", at("reconcile_url")))
            }
        },
    })
}

/// `fingerprint_ignore` or `fingerprint_only` (not both): a list of JSON Pointers, each
/// checked, the error naming the pointer. An empty `fingerprint_ignore` shapes nothing; an
/// empty `fingerprint_only` would count nothing of the body, and is refused.
fn body_shape(
    members: &Map<String, Value>,
    at: &dyn Fn(&str) -> String,
) -> Result<Option<BodyShape>, String> {
    let pointers = |name: &str| -> Result<Option<Vec<JsonPointer>>, String> {
        let Some(list) = string_list(members, name, at)? else { return Ok(None) };
        if list.len() > MAX_POINTERS {
            return Err(format!("{}: at most {MAX_POINTERS} pointers", at(name)));
        }
        list.iter()
            .enumerate()
            .map(|(i, text)| {
                JsonPointer::parse(text).map_err(|why| {
                    format!(
                        "{}[{i}]: {} is not a JSON Pointer to a field: {why}",
                        at(name),
                        Value::from(text.as_str())
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    };
    match (pointers("fingerprint_ignore")?, pointers("fingerprint_only")?) {
        (Some(_), Some(_)) => Err(format!(
            "{}: set fingerprint_ignore or fingerprint_only, not both (one names what does not count, the other all that does)",
            at("fingerprint_only")
        )),
        (Some(ignore), None) if ignore.is_empty() => Ok(None),
        (Some(ignore), None) => Ok(Some(BodyShape::Ignore(ignore))),
        (None, Some(only)) if only.is_empty() => Err(format!(
            "{}: an empty list would count nothing of the body, so every body would be one payload",
            at("fingerprint_only")
        )),
        (None, Some(only)) => Ok(Some(BodyShape::Only(only))),
        (None, None) => Ok(None),
    }
}

/// A list of origin statuses from 400 to 599. A 2xx never releases a key nor is it ever
/// unknown: the origin said that it executed.
fn statuses(
    members: &Map<String, Value>,
    name: &str,
    at: &dyn Fn(&str) -> String,
) -> Result<Option<StatusSet>, String> {
    let Some(value) = members.get(name) else { return Ok(None) };
    let invalid = || format!("{}: expected an array of HTTP statuses from 400 to 599", at(name));
    let Value::Array(items) = value else { return Err(invalid()) };
    let numbers = items
        .iter()
        .map(|item| item.as_u64().and_then(|n| u16::try_from(n).ok()).ok_or_else(invalid))
        .collect::<Result<Vec<u16>, _>>()?;
    StatusSet::of(&numbers).map(Some).ok_or_else(invalid)
}

fn flag(
    members: &Map<String, Value>,
    name: &str,
    at: &dyn Fn(&str) -> String,
) -> Result<Option<bool>, String> {
    match members.get(name) {
        None => Ok(None),
        Some(Value::Bool(value)) => Ok(Some(*value)),
        Some(_) => Err(format!("{}: expected true or false", at(name))),
    }
}

fn string_list(
    members: &Map<String, Value>,
    name: &str,
    at: &dyn Fn(&str) -> String,
) -> Result<Option<Vec<String>>, String> {
    match members.get(name) {
        None => Ok(None),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| match item {
                Value::String(s) => Ok(s.clone()),
                _ => Err(format!("{}: expected an array of strings", at(name))),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        Some(_) => Err(format!("{}: expected an array of strings", at(name))),
    }
}

fn seconds(
    members: &Map<String, Value>,
    name: &str,
    min: u64,
    max: u64,
    at: &dyn Fn(&str) -> String,
) -> Result<Option<u64>, String> {
    match members.get(name) {
        None => Ok(None),
        Some(value) => match value.as_u64() {
            Some(n) if (min..=max).contains(&n) => Ok(Some(n)),
            _ => Err(format!("{}: expected a whole number from {min} to {max}", at(name))),
        },
    }
}

/// Whether `path` matches `pattern`, where `*` stands for any run of characters.
pub fn pattern_matches(pattern: &str, path: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = path.strip_prefix(first) else { return false };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else { return rest.is_empty() };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_provably_undelivered_call_may_fail_open() {
        use ObjectCallFailure::*;
        let rows = [
            (BeforeSend, true),
            // An overloaded object serves a key whose duplicates already run or ran.
            (Rejected { overloaded: true, remote: false }, false),
            (Rejected { overloaded: true, remote: true }, false),
            (Rejected { overloaded: false, remote: false }, false),
            (Rejected { overloaded: false, remote: true }, false),
            (UnmarkedAnswer, false),
        ];
        for (failure, expected) in rows {
            assert_eq!(failure.provably_undelivered(), expected, "{failure:?}");
            let open = after_object_failure(failure, Unavailable::FailOpen);
            assert_eq!(open == AfterObjectFailure::FailOpen, expected, "{failure:?}");
            match after_object_failure(failure, Unavailable::FailClosed) {
                AfterObjectFailure::Refuse(problem) => {
                    assert_eq!(problem.status(), 503);
                    assert_eq!(problem.retry_after, Some(1));
                }
                AfterObjectFailure::FailOpen => panic!("a fail-closed route failed open: {failure:?}"),
            }
        }
    }

    #[test]
    fn an_unanswered_object_is_logged_by_its_short_name_and_refused_with_503() {
        let failure = ObjectCallFailure::BeforeSend;
        assert_eq!(
            unanswered_line("0123abcd", failure, "no stub", true),
            "object 0123abcd: not reached (no stub); failing open, forwarding without protection"
        );
        assert_eq!(
            unanswered_line("0123abcd", ObjectCallFailure::UnmarkedAnswer, "reset", false),
            "object 0123abcd: unavailable (an answer without the object's mark): reset"
        );
        // A fail-open decision without its forward at hand is answered as fail-closed.
        let problem = AfterObjectFailure::FailOpen.problem();
        assert_eq!((problem.status(), problem.retry_after), (503, Some(1)));
        assert_eq!(problem, object_unreachable());
        let refused = after_object_failure(failure, Unavailable::FailClosed);
        assert_eq!(refused.clone().problem(), object_unreachable());
    }

    #[test]
    fn patterns() {
        assert!(pattern_matches("/v1/charges", "/v1/charges"));
        assert!(!pattern_matches("/v1/charges", "/v1/charges/1"));
        assert!(pattern_matches("/v1/charges*", "/v1/charges/1"));
        assert!(pattern_matches("/v1/*/refunds", "/v1/ch_1/refunds"));
        assert!(!pattern_matches("/v1/*/refunds", "/v1/ch_1/refunds/x"));
        assert!(pattern_matches("*", "/anything"));
        assert!(pattern_matches("/a*b*c", "/aXbYc"));
        assert!(!pattern_matches("/a*b*c", "/aXcYb"));
        assert!(!pattern_matches("/ab*ba", "/aba"));
    }

    #[test]
    fn a_full_route_is_parsed() {
        let routes = parse_routes(
            r#"[{"pattern":"/v1/charges*","methods":["post"],"key":"optional","ttl_seconds":60,
                "duplicate_wait_seconds":0,"origin_timeout_seconds":5,"on_object_unavailable":"fail-open",
                "fingerprint_headers":["Stripe-Version"]},{"pattern":"/v1/*"}]"#,
        )
        .unwrap();
        assert_eq!(routes.len(), 2);
        let first = &routes[0];
        assert_eq!(first.methods.as_deref(), Some(&["POST".to_owned()][..]));
        assert_eq!(first.key_required, Some(false));
        assert_eq!(first.ttl_seconds, Some(60));
        assert_eq!(first.duplicate_wait_seconds, Some(0));
        assert_eq!(first.origin_timeout_seconds, Some(5));
        assert_eq!(first.on_unavailable, Some(Unavailable::FailOpen));
        assert_eq!(first.fingerprint_headers.as_deref(), Some(&["stripe-version".to_owned()][..]));
        assert_eq!(routes[1].methods, None);
        assert_eq!(routes[1].release_statuses, None);
        assert_eq!(parse_routes("  ").unwrap(), vec![]);
    }

    #[test]
    fn fingerprint_shapes_are_parsed() {
        let routes = parse_routes(
            r#"[{"pattern":"/a","fingerprint_ignore":["/client_ts","/meta/sent~1at"]},
                {"pattern":"/b","fingerprint_only":["/amount","/currency"]},
                {"pattern":"/c","fingerprint_ignore":[]},
                {"pattern":"/d"}]"#,
        )
        .unwrap();
        let texts = |shape: &Option<BodyShape>| match shape {
            Some(BodyShape::Ignore(p)) => ("ignore", p.iter().map(|p| p.as_str().to_owned()).collect()),
            Some(BodyShape::Only(p)) => ("only", p.iter().map(|p| p.as_str().to_owned()).collect()),
            None => ("none", Vec::<String>::new()),
        };
        assert_eq!(
            texts(&routes[0].body_shape),
            ("ignore", vec!["/client_ts".into(), "/meta/sent~1at".into()])
        );
        assert_eq!(texts(&routes[1].body_shape), ("only", vec!["/amount".into(), "/currency".into()]));
        assert_eq!(routes[2].body_shape, None, "an empty ignore list shapes nothing");
        assert_eq!(routes[3].body_shape, None);
    }

    #[test]
    fn invalid_fingerprint_shapes_name_the_route_and_the_pointer() {
        let cases = [
            (r#"{"fingerprint_ignore":["/ok","client_ts"]}"#, "[0].fingerprint_ignore[1]: \"client_ts\""),
            (r#"{"fingerprint_ignore":["/a~2b"]}"#, "[0].fingerprint_ignore[0]: \"/a~2b\""),
            (r#"{"fingerprint_ignore":[""]}"#, "[0].fingerprint_ignore[0]: \"\""),
            (r##"{"fingerprint_only":["#/amount"]}"##, "[0].fingerprint_only[0]: \"#/amount\""),
            (r#"{"fingerprint_only":[]}"#, "[0].fingerprint_only: an empty list"),
            (r#"{"fingerprint_only":"/amount"}"#, "[0].fingerprint_only: expected an array of strings"),
            (r#"{"fingerprint_ignore":[1]}"#, "[0].fingerprint_ignore: expected an array of strings"),
            (r#"{"fingerprint_ignore":["/a"],"fingerprint_only":["/b"]}"#, "not both"),
        ];
        for (route, expected) in cases {
            let raw = format!(r#"[{{"pattern":"/a",{}}}]"#, &route[1..route.len() - 1]);
            let error = parse_routes(&raw).expect_err(&raw);
            assert!(error.contains(expected), "{raw}: {error}");
        }
        let many: Vec<String> = (0..=MAX_POINTERS).map(|i| format!("\"/f{i}\"")).collect();
        let error =
            parse_routes(&format!(r#"[{{"pattern":"/a","fingerprint_ignore":[{}]}}]"#, many.join(",")));
        assert!(error.unwrap_err().contains("at most"));
    }

    #[test]
    fn reconcile_urls_are_parsed_and_checked() {
        let routes = parse_routes(
            r#"[{"pattern":"/a","reconcile_url":"https://o.example/v1/ops/{key}","reconcile_not_found":410},
                {"pattern":"/b","reconcile_url":"http://127.0.0.1:8788/v1/charges?idempotency_key={key}"},
                {"pattern":"/c"}]"#,
        )
        .unwrap();
        let route = |i: usize| routes[i].reconcile.as_ref();
        assert_eq!(
            route(0).map(|r| (r.url_for("k"), r.not_found)),
            Some(("https://o.example/v1/ops/k".into(), 410))
        );
        assert_eq!(route(1).map(|r| r.not_found), Some(404));
        assert_eq!(route(2), None);
        for (route, expected) in [
            (r#"{"reconcile_url":"https://o.example/v1/ops"}"#, "[0].reconcile_url: expected {key}"),
            (r#"{"reconcile_url":"/v1/ops/{key}"}"#, "[0].reconcile_url: expected an absolute"),
            (r#"{"reconcile_url":42}"#, "[0].reconcile_url: expected a URL template"),
            (r#"{"reconcile_url":"https://o/{key}","reconcile_not_found":200}"#, "reconcile_not_found"),
            // What an origin answers "while in doubt" can never mean "never executed".
            (r#"{"reconcile_url":"https://o/{key}","reconcile_not_found":409}"#, "reconcile_not_found"),
            (r#"{"reconcile_url":"https://o/{key}","reconcile_not_found":425}"#, "reconcile_not_found"),
            (r#"{"reconcile_url":"https://o/{key}","reconcile_not_found":"404"}"#, "reconcile_not_found"),
            (r#"{"reconcile_not_found":404}"#, "[0].reconcile_not_found: only with a reconcile_url"),
        ] {
            let raw = format!(r#"[{{"pattern":"/a",{}}}]"#, &route[1..route.len() - 1]);
            let error = parse_routes(&raw).expect_err(&raw);
            assert!(error.contains(expected), "{raw}: {error}");
        }
    }

    #[test]
    fn key_headers_are_parsed() {
        let routes = parse_routes(
            r#"[{"pattern":"/a","key_header":"X-Idempotency-Key"},{"pattern":"/b","key_header":"PayPal-Request-Id"},
                {"pattern":"/c"}]"#,
        )
        .unwrap();
        let header = |i: usize| routes[i].key_header.as_ref().map(RouteKeyHeader::as_key_header);
        assert_eq!(header(0), Some(KeyHeader { name: "X-Idempotency-Key", lowercase: "x-idempotency-key" }));
        assert_eq!(header(1), Some(KeyHeader { name: "PayPal-Request-Id", lowercase: "paypal-request-id" }));
        assert_eq!(header(2), None);
        for taken in [
            "Host",
            "Content-Type",
            "Connection",
            "Transfer-Encoding",
            "CF-Connecting-IP",
            "X-Idempotency-Edge-Envelope",
            "Idempotency-Edge-Signature",
            "X-HTTP-Method-Override",
            "Prefer",
            "X-Forwarded-For",
        ] {
            let error = parse_routes(&format!(r#"[{{"pattern":"/a","key_header":"{taken}"}}]"#)).unwrap_err();
            assert!(error.contains("[0].key_header: ") && error.contains(taken), "{taken}: {error}");
        }
        for bad in [
            "\"\"",
            "\"X Request\"",
            "\"X-Request-Id:\"",
            "1",
            "[\"X-Request-Id\"]",
            &format!("\"{}\"", "x".repeat(65)),
        ] {
            let error = parse_routes(&format!(r#"[{{"pattern":"/a","key_header":{bad}}}]"#)).unwrap_err();
            assert!(error.contains("[0].key_header: "), "{bad}: {error}");
        }
    }

    #[test]
    fn rate_limits_per_route() {
        let routes = parse_routes(
            r#"[{"pattern":"/a","rate_limit":false},{"pattern":"/b","rate_limit":"RL_PAYOUTS"}]"#,
        )
        .unwrap();
        assert_eq!(routes[0].rate_limit, Some(RouteRateLimit::Off));
        assert_eq!(routes[1].rate_limit, Some(RouteRateLimit::Binding("RL_PAYOUTS".into())));
        for bad in ["true", "\"\"", "\"a b\"", "3"] {
            let error = parse_routes(&format!(r#"[{{"pattern":"/a","rate_limit":{bad}}}]"#)).unwrap_err();
            assert!(error.contains("[0].rate_limit"), "{bad}: {error}");
        }
    }

    #[test]
    fn outcome_options_are_parsed() {
        let routes = parse_routes(
            r#"[{"pattern":"/a","release_statuses":[429],"unknown_statuses":[502,504],
                 "release_requires_header":true,"allow_method_override":true},
                {"pattern":"/b","release_statuses":[],"unknown_statuses":[503]}]"#,
        )
        .unwrap();
        assert_eq!(routes[0].release_statuses, StatusSet::of(&[429]));
        assert_eq!(routes[0].unknown_statuses, StatusSet::of(&[502, 504]));
        assert_eq!(routes[0].release_requires_header, Some(true));
        assert_eq!(routes[0].allow_method_override, Some(true));
        assert_eq!(routes[0].rate_limit, None);
        // With no release statuses, 503 may be called unknown.
        assert_eq!(routes[1].release_statuses, StatusSet::of(&[]));
        assert_eq!(routes[1].unknown_statuses, StatusSet::of(&[503]));
        // So it may with the default release statuses, which give way to it; only a status
        // the operator listed in both is a contradiction.
        let defaulted = parse_routes(r#"[{"pattern":"/a","unknown_statuses":[503]}]"#).unwrap();
        assert_eq!(defaulted[0].release_statuses, None);
        let both = parse_routes(r#"[{"pattern":"/a","release_statuses":[503],"unknown_statuses":[503]}]"#);
        assert!(both.unwrap_err().contains("[0].unknown_statuses"));
    }

    #[test]
    fn rollout_options_are_parsed() {
        let routes = parse_routes(
            r#"[{"pattern":"/a","mode":"observe","origin_service":"PAYMENTS_API"},{"pattern":"/b","mode":"enforce"}]"#,
        )
        .unwrap();
        assert_eq!(routes[0].mode, Some(Mode::Observe));
        assert_eq!(routes[0].origin_service.as_deref(), Some("PAYMENTS_API"));
        assert_eq!(routes[1].mode, Some(Mode::Enforce));
        assert_eq!(routes[1].origin_service, None);
    }

    #[test]
    fn binding_names() {
        for good in ["A", "_a", "PAYMENTS_API", "api2"] {
            assert!(is_binding_name(good), "{good}");
        }
        for bad in ["", "2api", "pay-api", "a,b", "a b", &"x".repeat(65)] {
            assert!(!is_binding_name(bad), "{bad}");
        }
    }

    #[test]
    fn errors_say_where() {
        let cases = [
            ("{", "not valid JSON"),
            ("{}", "expected a JSON array"),
            ("[1]", "[0]: expected an object"),
            (r#"[{"methods":["POST"]}]"#, "[0].pattern"),
            (r#"[{"pattern":"/a"},{"pattern":"/b","ttl_seconds":0}]"#, "[1].ttl_seconds"),
            (r#"[{"pattern":"/a","ttl_seconds":"60"}]"#, "[0].ttl_seconds"),
            (r#"[{"pattern":"/a","key":"maybe"}]"#, "[0].key"),
            (r#"[{"pattern":"/a","methods":["PO ST"]}]"#, "[0].methods"),
            (r#"[{"pattern":"/a","methods":["GET"]}]"#, "[0].methods"),
            (r#"[{"pattern":"/a","fingerprint_headers":["bad header"]}]"#, "[0].fingerprint_headers"),
            (r#"[{"pattern":"/a","on_object_unavailable":"open"}]"#, "[0].on_object_unavailable"),
            (r#"[{"pattern":"/a","ttl":60}]"#, "[0].ttl: unknown member"),
            (r#"[{"pattern":"/a","scope_claim":1}]"#, "[0].scope_claim"),
            (r#"[{"pattern":"/a","scope_claim":"org..id"}]"#, "[0].scope_claim"),
            (r#"[{"pattern":"/a","anonymous":"yes"}]"#, "[0].anonymous"),
            (r#"[{"pattern":"/a","release_statuses":[200]}]"#, "[0].release_statuses"),
            (r#"[{"pattern":"/a","release_statuses":[600]}]"#, "[0].release_statuses"),
            (r#"[{"pattern":"/a","release_statuses":"503"}]"#, "[0].release_statuses"),
            (r#"[{"pattern":"/a","release_statuses":[503.5]}]"#, "[0].release_statuses"),
            (
                r#"[{"pattern":"/a","release_statuses":[502],"unknown_statuses":[502]}]"#,
                "[0].unknown_statuses",
            ),
            (r#"[{"pattern":"/a","release_requires_header":"yes"}]"#, "[0].release_requires_header"),
            // What a route says is what happens: 401 and 403 always release the key.
            (r#"[{"pattern":"/a","unknown_statuses":[502,401]}]"#, "[0].unknown_statuses: route \"/a\""),
            (r#"[{"pattern":"/a","release_statuses":[],"unknown_statuses":[403]}]"#, "[0].unknown_statuses"),
            (
                r#"[{"pattern":"/b","release_statuses":[503,403],"release_requires_header":true}]"#,
                "[0].release_requires_header: route \"/b\"",
            ),
            (r#"[{"pattern":"/a","allow_method_override":1}]"#, "[0].allow_method_override"),
            (r#"[{"pattern":"/a","mode":"report-only"}]"#, "[0].mode"),
            (r#"[{"pattern":"/a","mode":true}]"#, "[0].mode"),
            (r#"[{"pattern":"/a","origin_service":"pay-api"}]"#, "[0].origin_service"),
            (r#"[{"pattern":"/a","origin_service":"1API"}]"#, "[0].origin_service"),
            (r#"[{"pattern":"/a","origin_service":""}]"#, "[0].origin_service"),
        ];
        for (raw, expected) in cases {
            let err = parse_routes(raw).expect_err(raw);
            assert!(err.contains(expected), "{raw}: {err}");
        }
    }
}
