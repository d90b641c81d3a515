//! Configuration: the wrangler `[vars]`, parsed and validated.
//!
//! Owns the variable names, their defaults and their limits. It sees only strings; the
//! runtime looks the variables up and passes them in.
//!
//! An invalid value is a [`ConfigError`] naming the variable. The worker then answers 500
//! problem+json and forwards nothing: a typo must never turn protection off silently.

use super::routes::{
    parse_routes, pattern_matches, Route, RouteKeyHeader, RouteRateLimit, Unavailable, VAR_ROUTES,
};
use super::scope::{ScopeConfig, ScopeRule};
use crate::core::formats::body_shape::BodyShape;
use crate::core::key_rules::machine::async_job::{AsyncConfig, VAR_ASYNC_DEADLINE_SECONDS};
use crate::core::key_rules::reconcile::ReconcileRoute;
use crate::core::primitives::key::{KeyHeader, IDEMPOTENCY_KEY};
use crate::core::primitives::names::is_binding_name;
use crate::core::vocabulary::config_error::ConfigError;
use crate::core::vocabulary::key_terms::Mode;
use crate::core::vocabulary::key_terms::{
    KeyTerms, MAX_DUPLICATE_WAIT_SECONDS, MAX_ORIGIN_TIMEOUT_SECONDS, MAX_TTL_SECONDS,
};
use crate::core::vocabulary::key_terms::{
    Timing, WaiterLimits, DEFAULT_WAITERS_PER_KEY, DEFAULT_WAITING_BYTES, MAX_WAITERS_PER_KEY,
};
use crate::core::vocabulary::outcome_table::OutcomeTable;

/// The variables, as the runtime should look them up.
pub const VAR_ORIGIN_URL: &str = "ORIGIN_URL";
pub const VAR_TTL_SECONDS: &str = "IDEMPOTENCY_TTL_SECONDS";
pub const VAR_DUPLICATE_WAIT_SECONDS: &str = "DUPLICATE_WAIT_SECONDS";
pub const VAR_ORIGIN_TIMEOUT_SECONDS: &str = "ORIGIN_TIMEOUT_SECONDS";
pub const VAR_MAX_BODY_BYTES: &str = "MAX_BODY_BYTES";
pub const VAR_ADMIN_PATH_PREFIX: &str = "ADMIN_PATH_PREFIX";
pub const VAR_JURISDICTION: &str = "DURABLE_OBJECT_JURISDICTION";
pub const VAR_MAX_WAITERS_PER_KEY: &str = "MAX_WAITERS_PER_KEY";
pub const VAR_MAX_WAITING_BYTES: &str = "MAX_WAITING_BYTES";
pub const VAR_MAX_STORED_RESPONSE_BYTES: &str = "MAX_STORED_RESPONSE_BYTES";
pub const VAR_ORIGIN_DEDUPLICATES: &str = "ORIGIN_DEDUPLICATES";
pub const VAR_MAX_ORIGIN_ATTEMPTS: &str = "MAX_ORIGIN_ATTEMPTS";
pub const VAR_MODE: &str = "MODE";
pub const VAR_ORIGIN_SERVICE: &str = "ORIGIN_SERVICE";

/// The default prefix of the admin API (`core::edge_rules::admin`).
pub const DEFAULT_ADMIN_PREFIX: &str = "/__idempotency/";

/// The Worker buffers the body in memory (128 MB per isolate); keep well below that.
const MAX_MAX_BODY_BYTES: u64 = 32 * 1024 * 1024;
/// The waiters of one key may bring in at most this many body bytes, whatever is set.
const MAX_MAX_WAITING_BYTES: u64 = 64 * 1024 * 1024;
/// One key is never sent to the origin more often than this, whatever is set.
const MAX_MAX_ORIGIN_ATTEMPTS: u64 = 100;
/// The most `MAX_STORED_RESPONSE_BYTES` may be set to. An answer over one SQLite row is
/// stored in chunks (`core::formats::chunks`), but the whole answer is in memory while it is stored,
/// and an isolate has 128 MB.
pub const MAX_MAX_STORED_RESPONSE_BYTES: u64 =
    crate::core::vocabulary::key_terms::MAX_STORED_RESPONSE_BYTES as u64;
/// The largest answer stored for replay unless configured otherwise.
pub const DEFAULT_MAX_STORED_RESPONSE_BYTES: u64 = 16 * 1024 * 1024;

/// The validated configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Base URL without a trailing slash; `None` forwards to the request's own URL.
    pub origin_url: Option<String>,
    pub timing: Timing,
    pub max_body_bytes: u64,
    /// Who a key belongs to: the scope headers, claim and keys (`core::edge_rules::scope`).
    pub scope: ScopeConfig,
    /// Per-route overrides, tried in order (`IDEMPOTENCY_ROUTES`).
    pub routes: Vec<Route>,
    /// Where the admin API lives (when `ADMIN_TOKEN` is set); starts and ends with `/`.
    pub admin_prefix: String,
    /// Where the key objects (and so the stored responses) must live, e.g. `eu` for EU
    /// data residency; `None`: anywhere.
    pub jurisdiction: Option<String>,
    pub limits: WaiterLimits,
    /// Largest origin answer (body plus headers) that is read into memory and stored for
    /// replay; a larger one is streamed to its caller and the key is held unknown.
    pub max_stored_response_bytes: u64,
    /// The origin honours `Idempotency-Key` itself (`ORIGIN_DEDUPLICATES`).
    pub origin_deduplicates: bool,
    /// How many times one key may be sent to such an origin.
    pub max_origin_attempts: u16,
    /// `enforce` (the default) or `observe` (`MODE`): see [`Mode`].
    pub mode: Mode,
    /// The `[[services]]` binding the origin is reached through (`ORIGIN_SERVICE`), instead
    /// of a URL.
    pub origin_service: Option<String>,
    /// Asynchronous acceptance (`ASYNC_*`, `core::key_rules::machine::async_job`). Its deadline is the one set,
    /// or the default; [`Config::policy_for`] derives each policy's own.
    pub async_accept: AsyncConfig,
    /// `ASYNC_DEADLINE_SECONDS` was set: it must then fit every TTL where asynchronous
    /// acceptance is on. Unset, each policy's deadline is the default or its TTL, whichever
    /// is shorter, so a short TTL never makes the default invalid.
    pub async_deadline_set: bool,
}

/// The configuration in effect for one request path: the flat variables, overridden by
/// the first matching route.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathConfig<'a> {
    /// The pattern of the route that matched, if any (log lines name it).
    pub route: Option<&'a str>,
    /// Covered methods; `None` means the default, `POST` and `PATCH`.
    pub methods: Option<&'a [String]>,
    pub key_required: bool,
    pub timing: Timing,
    pub on_unavailable: Unavailable,
    /// Lowercase names of request headers that are part of the payload.
    pub fingerprint_headers: &'a [String],
    /// What of a JSON body is part of the payload (`None`: all of it).
    pub body_shape: Option<&'a BodyShape>,
    /// The header the key comes from (`Idempotency-Key` unless the route names another).
    pub key_header: KeyHeader<'a>,
    /// The claim that names the caller, and whether anonymous callers are let in.
    pub scope: ScopeRule<'a>,
    /// How the origin's answers are classified.
    pub outcome: OutcomeTable,
    /// Method-override headers may pass on uncovered methods.
    pub allow_method_override: bool,
    /// `Some(n)`: the origin deduplicates by key, and an unknown outcome may be sent again
    /// until the key was sent `n` times (see `core::key_rules::machine`, rule 7).
    pub max_origin_attempts: Option<u16>,
    /// Enforce the rules, or only observe and log what enforcing would have done.
    pub mode: Mode,
    /// The service binding the origin is reached through; `None`: a URL.
    pub origin_service: Option<&'a str>,
    /// The rate-limiting binding for this path: `RATE_LIMITER` (applied when bound) unless
    /// a route names another (which must be bound) or turns it off (`None`).
    pub rate_limiter: Option<RateLimiterChoice<'a>>,
    /// `Some`: a request that prefers `respond-async` is accepted as a job.
    pub async_accept: Option<AsyncConfig>,
    /// `Some`: an unknown outcome is looked up at the origin (`core::key_rules::reconcile`).
    pub reconcile: Option<&'a ReconcileRoute>,
}

/// Which Workers Rate Limiting binding limits a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RateLimiterChoice<'a> {
    /// `RATE_LIMITER`, when it is bound; no limit when it is not.
    Default,
    /// A route's own binding: unbound is a configuration error.
    Named(&'a str),
}

impl PathConfig<'_> {
    /// Whether requests with this method are deduplicated.
    pub fn covers(&self, method: &str) -> bool {
        match self.methods {
            Some(methods) => methods.iter().any(|m| m.eq_ignore_ascii_case(method)),
            None => PathConfig::default_covers(method),
        }
    }

    fn default_covers(method: &str) -> bool {
        method.eq_ignore_ascii_case("POST") || method.eq_ignore_ascii_case("PATCH")
    }
}

impl Config {
    /// The headers a request on `policy` is keyed, scoped and bound by: the route's key
    /// header, then `SCOPE_HEADER`'s and `REPLAY_CREDENTIAL_HEADERS`' (lowercase, once
    /// each). A client's `Connection` never takes them off the forward (`core::edge_rules::headers`,
    /// rule 4).
    pub fn end_to_end_headers<'c>(&'c self, policy: &PathConfig<'c>) -> Vec<&'c str> {
        let mut names = vec![policy.key_header.lowercase];
        for name in self.scope.headers.iter().chain(&self.scope.replay_headers) {
            if !names.contains(&name.as_str()) {
                names.push(name);
            }
        }
        names
    }

    /// Parses the variables; `lookup` returns a variable's value, `None` when unset (then
    /// the default applies).
    pub fn from_vars<'a>(lookup: impl Fn(&'static str) -> Option<&'a str>) -> Result<Config, ConfigError> {
        let origin_url = parse_origin_url(lookup(VAR_ORIGIN_URL).unwrap_or(""))?;
        let ttl = parse_number(VAR_TTL_SECONDS, lookup(VAR_TTL_SECONDS), 86_400, 1, MAX_TTL_SECONDS)?;
        let wait = parse_number(
            VAR_DUPLICATE_WAIT_SECONDS,
            lookup(VAR_DUPLICATE_WAIT_SECONDS),
            10,
            0,
            MAX_DUPLICATE_WAIT_SECONDS,
        )?;
        let timeout = parse_number(
            VAR_ORIGIN_TIMEOUT_SECONDS,
            lookup(VAR_ORIGIN_TIMEOUT_SECONDS),
            30,
            1,
            MAX_ORIGIN_TIMEOUT_SECONDS,
        )?;
        let max_body_bytes =
            parse_number(VAR_MAX_BODY_BYTES, lookup(VAR_MAX_BODY_BYTES), 1_048_576, 0, MAX_MAX_BODY_BYTES)?;
        let scope = ScopeConfig::from_vars(&lookup)?;
        let routes = parse_routes(lookup(VAR_ROUTES).unwrap_or(""))
            .map_err(|reason| ConfigError::new(VAR_ROUTES, reason))?;
        let route_claims: Vec<_> =
            routes.iter().map(|r| r.scope_claim.as_ref().and_then(Option::as_ref)).collect();
        scope.check_route_claims(&route_claims)?;
        // A key read from a credential header would make the credential the key (and put it
        // in the origin signature's key line).
        for (i, route) in routes.iter().enumerate() {
            let Some(header) = &route.key_header else { continue };
            if scope.headers.contains(&header.lowercase) || scope.replay_headers.contains(&header.lowercase) {
                return Err(ConfigError::new(
                    VAR_ROUTES,
                    format!("[{i}].key_header: {} identifies the caller (SCOPE_HEADER or REPLAY_CREDENTIAL_HEADERS), so it cannot carry the key", header.name),
                ));
            }
        }
        let admin_prefix = parse_admin_prefix(lookup(VAR_ADMIN_PATH_PREFIX))?;
        let jurisdiction = match lookup(VAR_JURISDICTION).map(str::trim).unwrap_or("") {
            "" => None,
            known @ ("eu" | "fedramp") => Some(known.to_owned()),
            _ => return Err(ConfigError::new(VAR_JURISDICTION, "expected eu, fedramp or empty")),
        };
        let max_waiters = parse_number(
            VAR_MAX_WAITERS_PER_KEY,
            lookup(VAR_MAX_WAITERS_PER_KEY),
            DEFAULT_WAITERS_PER_KEY as u64,
            0,
            MAX_WAITERS_PER_KEY as u64,
        )?;
        let max_waiting_bytes = parse_number(
            VAR_MAX_WAITING_BYTES,
            lookup(VAR_MAX_WAITING_BYTES),
            DEFAULT_WAITING_BYTES,
            0,
            MAX_MAX_WAITING_BYTES,
        )?;
        let max_stored_response_bytes = parse_number(
            VAR_MAX_STORED_RESPONSE_BYTES,
            lookup(VAR_MAX_STORED_RESPONSE_BYTES),
            DEFAULT_MAX_STORED_RESPONSE_BYTES,
            0,
            MAX_MAX_STORED_RESPONSE_BYTES,
        )?;
        let origin_deduplicates = match lookup(VAR_ORIGIN_DEDUPLICATES).map(str::trim).unwrap_or("") {
            "" | "false" => false,
            "true" => true,
            _ => return Err(ConfigError::new(VAR_ORIGIN_DEDUPLICATES, "expected true or false")),
        };
        // A re-send to an origin that deduplicates carries the retry's body, which a shaped
        // fingerprint lets differ from the first attempt's in the fields it leaves out: the
        // origin would see another request under the same key (`core::key_rules::machine`, rule 7).
        for (i, route) in routes.iter().enumerate() {
            if route.body_shape.is_some() && route.origin_deduplicates.unwrap_or(origin_deduplicates) {
                return Err(ConfigError::new(
                    VAR_ROUTES,
                    format!(
                        "[{i}] ({}): fingerprint_ignore or fingerprint_only cannot be combined with an origin that deduplicates (origin_deduplicates or ORIGIN_DEDUPLICATES): a re-send would carry the retry's body, not the first attempt's",
                        route.pattern
                    ),
                ));
            }
        }
        let max_origin_attempts = parse_number(
            VAR_MAX_ORIGIN_ATTEMPTS,
            lookup(VAR_MAX_ORIGIN_ATTEMPTS),
            5,
            1,
            MAX_MAX_ORIGIN_ATTEMPTS,
        )? as u16;
        let mode = match lookup(VAR_MODE).map(str::trim).unwrap_or("") {
            "" | "enforce" => Mode::Enforce,
            "observe" => Mode::Observe,
            _ => return Err(ConfigError::new(VAR_MODE, "expected enforce or observe")),
        };
        let origin_service = match lookup(VAR_ORIGIN_SERVICE).map(str::trim).unwrap_or("") {
            "" => None,
            name if !is_binding_name(name) => {
                return Err(ConfigError::new(
                    VAR_ORIGIN_SERVICE,
                    "expected the name of a [[services]] binding (letters, digits and _)",
                ))
            }
            _ if origin_url.is_some() => {
                return Err(ConfigError::new(
                    VAR_ORIGIN_SERVICE,
                    "set either ORIGIN_URL or ORIGIN_SERVICE, not both",
                ))
            }
            name => Some(name.to_owned()),
        };
        let async_accept = AsyncConfig { max_sends: max_origin_attempts, ..AsyncConfig::from_vars(&lookup)? };
        // Wherever a job may run, it must end before its record can expire. Only a deadline
        // the operator set can fail this: the default is derived from each TTL.
        let async_deadline_set = lookup(VAR_ASYNC_DEADLINE_SECONDS).is_some();
        let ttl_ms = ttl * 1_000;
        if async_deadline_set {
            for route in &routes {
                if route.async_accept.unwrap_or(async_accept.prefer) {
                    async_accept.check_ttl(route.ttl_seconds.map_or(ttl_ms, |s| s * 1_000))?;
                }
            }
            if async_accept.prefer {
                async_accept.check_ttl(ttl_ms)?;
            }
        }
        Ok(Config {
            origin_url,
            timing: Timing {
                ttl_ms: ttl * 1_000,
                duplicate_wait_ms: wait * 1_000,
                origin_timeout_ms: timeout * 1_000,
            },
            max_body_bytes,
            scope,
            routes,
            admin_prefix,
            jurisdiction,
            limits: WaiterLimits { max_waiters: max_waiters as usize, max_waiting_bytes },
            max_stored_response_bytes,
            origin_deduplicates,
            max_origin_attempts,
            mode,
            origin_service,
            async_accept,
            async_deadline_set,
        })
    }

    /// Whether some policy accepts requests asynchronously (then stored requests must be
    /// sealed: `STORAGE_ENCRYPTION_KEYS` is required).
    pub fn accepts_async(&self) -> bool {
        self.async_accept.prefer || self.routes.iter().any(|route| route.async_accept == Some(true))
    }

    /// Whether any route looks up unknown outcomes (which stores the lookup, credentials
    /// included, sealed).
    pub fn reconciles(&self) -> bool {
        self.routes.iter().any(|route| route.reconcile.is_some())
    }

    /// The policy for a request to `path`.
    pub fn policy_for(&self, path: &str) -> PathConfig<'_> {
        let route = self.routes.iter().find(|route| pattern_matches(&route.pattern, path));
        let origin_service =
            route.and_then(|r| r.origin_service.as_deref()).or(self.origin_service.as_deref());
        let seconds = |pick: fn(&Route) -> Option<u64>, default_ms: u64| {
            route.and_then(pick).map_or(default_ms, |s| s * 1_000)
        };
        let timing = Timing {
            ttl_ms: seconds(|r| r.ttl_seconds, self.timing.ttl_ms),
            duplicate_wait_ms: seconds(|r| r.duplicate_wait_seconds, self.timing.duplicate_wait_ms),
            origin_timeout_ms: seconds(|r| r.origin_timeout_seconds, self.timing.origin_timeout_ms),
        };
        let unknown = route.and_then(|r| r.unknown_statuses).unwrap_or_default();
        PathConfig {
            route: route.map(|r| r.pattern.as_str()),
            methods: route.and_then(|r| r.methods.as_deref()),
            key_required: route.and_then(|r| r.key_required).unwrap_or(true),
            timing,
            on_unavailable: route.and_then(|r| r.on_unavailable).unwrap_or(Unavailable::FailClosed),
            fingerprint_headers: route.and_then(|r| r.fingerprint_headers.as_deref()).unwrap_or(&[]),
            body_shape: route.and_then(|r| r.body_shape.as_ref()),
            key_header: route
                .and_then(|r| r.key_header.as_ref())
                .map_or(IDEMPOTENCY_KEY, RouteKeyHeader::as_key_header),
            scope: ScopeRule {
                claim: match route.and_then(|r| r.scope_claim.as_ref()) {
                    // A route's `scope_claim` wins, `""` (None) meaning the credential hash.
                    Some(claim) => claim.as_ref(),
                    None => self.scope.claim.as_ref(),
                },
                anonymous_allowed: route
                    .and_then(|r| r.anonymous_allowed)
                    .unwrap_or(self.scope.allow_anonymous),
            },
            outcome: OutcomeTable {
                // The default release statuses are those the route does not call unknown.
                release: route
                    .and_then(|r| r.release_statuses)
                    .unwrap_or_else(|| OutcomeTable::default().release.without(&unknown)),
                unknown,
                release_requires_header: route.and_then(|r| r.release_requires_header).unwrap_or(false),
                // Route mode: the fetch goes through Cloudflare to the origin. A service
                // binding reaches another Worker directly: no Cloudflare 52x on the way.
                via_cloudflare: self.origin_url.is_none() && origin_service.is_none(),
            },
            allow_method_override: route.and_then(|r| r.allow_method_override).unwrap_or(false),
            max_origin_attempts: route
                .and_then(|r| r.origin_deduplicates)
                .unwrap_or(self.origin_deduplicates)
                .then_some(self.max_origin_attempts),
            mode: route.and_then(|r| r.mode).unwrap_or(self.mode),
            origin_service,
            rate_limiter: match route.and_then(|r| r.rate_limit.as_ref()) {
                None => Some(RateLimiterChoice::Default),
                Some(RouteRateLimit::Off) => None,
                Some(RouteRateLimit::Binding(name)) => Some(RateLimiterChoice::Named(name)),
            },
            async_accept: route.and_then(|r| r.async_accept).unwrap_or(self.async_accept.prefer).then_some(
                if self.async_deadline_set {
                    self.async_accept
                } else {
                    self.async_accept.with_default_deadline(timing.ttl_ms)
                },
            ),
            reconcile: route.and_then(|r| r.reconcile.as_ref()),
        }
    }

    /// Whether some policy (a route, or the default) covers `method` on some path: where a
    /// method may be covered, a path that an origin may read as another path is refused.
    pub fn may_cover(&self, method: &str) -> bool {
        let default = PathConfig::default_covers(method);
        let routed = self.routes.iter().any(|route| match &route.methods {
            Some(methods) => methods.iter().any(|m| m.eq_ignore_ascii_case(method)),
            None => default,
        });
        default || routed
    }

    /// What the key's object needs of the configuration for a request under `policy`.
    pub fn key_terms(&self, policy: &PathConfig<'_>) -> KeyTerms {
        KeyTerms {
            timing: policy.timing,
            limits: self.limits,
            outcome: policy.outcome,
            max_stored_response_bytes: self.max_stored_response_bytes,
            max_origin_attempts: policy.max_origin_attempts,
            mode: policy.mode,
            origin_service: policy.origin_service.map(str::to_owned),
            key_header: (!policy.key_header.is_default()).then(|| policy.key_header.lowercase.to_owned()),
        }
    }

    /// The URL the first attempt goes to: the origin base plus the request's path and
    /// query, or the request's own URL in route mode.
    pub fn origin_target(&self, request_url: &str, path_and_query: &str) -> String {
        match &self.origin_url {
            Some(base) => format!("{base}{path_and_query}"),
            None => request_url.to_owned(),
        }
    }

    /// [`Config::origin_target`] for a request under `policy`: through a service binding,
    /// the request's own URL (the binding, not the host, says where it goes).
    pub fn target_for(&self, policy: &PathConfig<'_>, request_url: &str, path_and_query: &str) -> String {
        match policy.origin_service {
            Some(_) => request_url.to_owned(),
            None => self.origin_target(request_url, path_and_query),
        }
    }

    /// Whether the object should probe the origin with a TCP connect before sending (only
    /// a configured `ORIGIN_URL` can be probed; a service binding cannot refuse a connect).
    pub fn probes_origin(&self, policy: &PathConfig<'_>) -> bool {
        self.origin_url.is_some() && policy.origin_service.is_none()
    }
}

fn parse_number(
    variable: &'static str,
    raw: Option<&str>,
    default: u64,
    min: u64,
    max: u64,
) -> Result<u64, ConfigError> {
    let Some(raw) = raw else { return Ok(default) };
    let text = raw.trim();
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ConfigError::new(variable, format!("expected a whole number from {min} to {max}")));
    }
    match text.parse::<u64>() {
        Ok(value) if (min..=max).contains(&value) => Ok(value),
        _ => Err(ConfigError::new(variable, format!("expected a whole number from {min} to {max}"))),
    }
}

fn parse_origin_url(raw: &str) -> Result<Option<String>, ConfigError> {
    let url = raw.trim();
    if url.is_empty() {
        return Ok(None);
    }
    let invalid = |why: &str| Err(ConfigError::new(VAR_ORIGIN_URL, why));
    let rest = if let Some(rest) = url.strip_prefix("https://") {
        rest
    } else if let Some(rest) = url.strip_prefix("http://") {
        rest
    } else {
        return invalid("expected an http:// or https:// URL, or empty for route mode");
    };
    if url.bytes().any(|b| b <= b' ' || b >= 0x7f) {
        return invalid("the URL contains whitespace, control or non-ASCII characters");
    }
    if url.contains(['?', '#']) {
        return invalid("the base URL must not have a query or fragment; the request's own are appended");
    }
    let host = rest.split('/').next().unwrap_or("");
    if host.is_empty() || host.contains('@') {
        return invalid("the URL needs a host (and no user info)");
    }
    Ok(Some(url.trim_end_matches('/').to_owned()))
}

fn parse_admin_prefix(raw: Option<&str>) -> Result<String, ConfigError> {
    let prefix = raw.map(str::trim).filter(|p| !p.is_empty()).unwrap_or(DEFAULT_ADMIN_PREFIX);
    let valid = prefix.len() > 2
        && prefix.starts_with('/')
        && prefix.ends_with('/')
        && prefix.bytes().all(|b| b.is_ascii_graphic() && b != b'?' && b != b'#' && b != b'*');
    if valid {
        Ok(prefix.to_owned())
    } else {
        Err(ConfigError::new(
            VAR_ADMIN_PATH_PREFIX,
            "expected a path that starts and ends with \"/\", like /__idempotency/",
        ))
    }
}

/// `ALARM_FAULT_INJECTION`: how many alarm runs of each object instance fail on purpose.
/// Test-only, like every `*_FAULT_INJECTION`: never for production.
pub const VAR_ALARM_FAULT_INJECTION: &str = "ALARM_FAULT_INJECTION";
/// `DELETE_FAULT_INJECTION`: how many record deletions of each object instance fail on
/// purpose. Test-only.
pub const VAR_DELETE_FAULT_INJECTION: &str = "DELETE_FAULT_INJECTION";
/// `CHUNK_WRITE_FAULT_INJECTION`: how many writes of a large answer's chunk rows of each
/// object instance fail on purpose, half-way through their transaction. Test-only.
pub const VAR_CHUNK_WRITE_FAULT_INJECTION: &str = "CHUNK_WRITE_FAULT_INJECTION";
/// `PANIC_FAULT_INJECTION`: above 0, a request carrying [`PANIC_TEST_HEADER`] panics in the
/// Worker (`worker`) or in the key's object (`object`), so that the tests can prove the
/// Wasm instance recovers from a trap (src/entry.mjs). Test-only.
pub const VAR_PANIC_FAULT_INJECTION: &str = "PANIC_FAULT_INJECTION";
/// The request header that asks for a panic while `PANIC_FAULT_INJECTION` is set.
pub const PANIC_TEST_HEADER: &str = "x-test-panic";

/// Parses a fault-injection variable: a whole number of failures (unset or empty: none).
/// Anything else is an error naming the variable, never a silent zero.
pub fn parse_fault_injection(variable: &'static str, raw: Option<&str>) -> Result<u32, ConfigError> {
    match raw.map(str::trim) {
        None | Some("") => Ok(0),
        Some(text) => text
            .parse::<u32>()
            .ok()
            .filter(|_| text.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(|| ConfigError::new(variable, "expected a whole number of failures (test-only)")),
    }
}

/// The test-only failures a worker injects into itself: how many alarm runs, record
/// deletions and chunk writes of each object instance fail on purpose, and whether a
/// request may ask for a panic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultInjection {
    pub alarm_failures: u32,
    pub delete_failures: u32,
    pub chunk_write_failures: u32,
    pub panics_on_request: u32,
}

/// Where a request asked to panic (`PANIC_TEST_HEADER`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PanicSite {
    Worker,
    Object,
}

impl FaultInjection {
    /// Parses the `*_FAULT_INJECTION` variables; `lookup` as in [`Config::from_vars`].
    pub fn from_vars<'a>(
        lookup: impl Fn(&'static str) -> Option<&'a str>,
    ) -> Result<FaultInjection, ConfigError> {
        Ok(FaultInjection {
            alarm_failures: parse_fault_injection(
                VAR_ALARM_FAULT_INJECTION,
                lookup(VAR_ALARM_FAULT_INJECTION),
            )?,
            delete_failures: parse_fault_injection(
                VAR_DELETE_FAULT_INJECTION,
                lookup(VAR_DELETE_FAULT_INJECTION),
            )?,
            chunk_write_failures: parse_fault_injection(
                VAR_CHUNK_WRITE_FAULT_INJECTION,
                lookup(VAR_CHUNK_WRITE_FAULT_INJECTION),
            )?,
            panics_on_request: parse_fault_injection(
                VAR_PANIC_FAULT_INJECTION,
                lookup(VAR_PANIC_FAULT_INJECTION),
            )?,
        })
    }

    /// Why the alarm's `run` (0 for an instance's first) fails on purpose: the first
    /// `ALARM_FAULT_INJECTION` runs of each instance do, so that the platform's retries of
    /// a failed alarm are exercised. `None` for a run that goes ahead.
    pub fn alarm_run_fails(&self, run: u32) -> Option<String> {
        (run < self.alarm_failures)
            .then(|| format!("{VAR_ALARM_FAULT_INJECTION}: run {} fails on purpose", run.saturating_add(1)))
    }

    /// Why an instance's record `deletion` (0 for its first) fails on purpose, as a
    /// `deleteAll()` that deletes nothing: the first `DELETE_FAULT_INJECTION` do. `None` for
    /// one that goes ahead.
    pub fn deletion_fails(&self, deletion: u32) -> Option<String> {
        (deletion < self.delete_failures).then(|| {
            format!("{VAR_DELETE_FAULT_INJECTION}: deletion {} fails on purpose", deletion.saturating_add(1))
        })
    }

    /// Whether an instance's chunked answer `write` (0 for its first) fails half-way on
    /// purpose: the first `CHUNK_WRITE_FAULT_INJECTION` do.
    pub fn chunk_write_fails(&self, write: u32) -> bool {
        write < self.chunk_write_failures
    }

    /// Whether a request whose `PANIC_TEST_HEADER` value `header` gives panics at `site`:
    /// only while `PANIC_FAULT_INJECTION` is set, never otherwise, whatever the header says.
    /// The header is read only then, so that no request pays for reading it otherwise.
    pub fn panics_at<S: AsRef<str>>(&self, header: impl FnOnce() -> Option<S>, site: PanicSite) -> bool {
        if self.panics_on_request == 0 {
            return false;
        }
        let header = header();
        let asked = match header.as_ref().map(|value| value.as_ref().trim()) {
            Some("worker") => PanicSite::Worker,
            Some("object") => PanicSite::Object,
            _ => return false,
        };
        asked == site
    }

    pub fn is_set(&self) -> bool {
        *self != FaultInjection::default()
    }

    /// The error line a worker logs on every isolate start while any is set, so that one
    /// left in a production deploy degrades nothing unseen. `None` when none is set.
    pub fn line(&self) -> Option<String> {
        let FaultInjection { alarm_failures, delete_failures, chunk_write_failures, panics_on_request } =
            self;
        self.is_set().then(|| {
            format!(
                "{{\"event\":\"fault-injection\",\"alarm_failures\":{alarm_failures},\"delete_failures\":{delete_failures},\"chunk_write_failures\":{chunk_write_failures},\"panics_on_request\":{panics_on_request},\"detail\":\"A *_FAULT_INJECTION variable is set: alarms, deletions or chunk writes fail, or requests may panic, on purpose. These variables are for tests only; remove them from production.\"}}"
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::edge_rules::scope::VAR_SCOPE_HEADER;
    use crate::core::formats::stored_terms::{decode_text, encode_text};
    use crate::core::vocabulary::outcome_table::StatusSet;

    fn parse(vars: &[(&'static str, &'static str)]) -> Result<Config, ConfigError> {
        Config::from_vars(|name| vars.iter().find(|(n, _)| *n == name).map(|(_, v)| *v))
    }

    #[test]
    fn only_the_first_injected_alarm_runs_fail() {
        let none = FaultInjection::default();
        assert_eq!(none.alarm_run_fails(0), None);
        let two = FaultInjection { alarm_failures: 2, ..FaultInjection::default() };
        assert_eq!(two.alarm_run_fails(0).as_deref(), Some("ALARM_FAULT_INJECTION: run 1 fails on purpose"));
        assert_eq!(two.alarm_run_fails(1).as_deref(), Some("ALARM_FAULT_INJECTION: run 2 fails on purpose"));
        assert_eq!(two.alarm_run_fails(2), None);
        assert_eq!(two.alarm_run_fails(u32::MAX), None);
    }

    #[test]
    fn only_the_first_injected_deletions_and_chunk_writes_fail() {
        let none = FaultInjection::default();
        assert_eq!((none.deletion_fails(0), none.chunk_write_fails(0)), (None, false));
        let one = FaultInjection { delete_failures: 1, chunk_write_failures: 2, ..FaultInjection::default() };
        assert_eq!(
            one.deletion_fails(0).as_deref(),
            Some("DELETE_FAULT_INJECTION: deletion 1 fails on purpose")
        );
        assert_eq!(one.deletion_fails(1), None);
        assert!(one.chunk_write_fails(0) && one.chunk_write_fails(1));
        assert!(!one.chunk_write_fails(2));
    }

    #[test]
    fn defaults_apply_when_unset() {
        let config = parse(&[]).unwrap();
        assert_eq!(config.origin_url, None);
        assert_eq!(
            config.timing,
            Timing { ttl_ms: 86_400_000, duplicate_wait_ms: 10_000, origin_timeout_ms: 30_000 }
        );
        assert_eq!(config.max_body_bytes, 1_048_576);
        assert_eq!(config.scope.headers, ["authorization"]);
        assert!(!config.scope.allow_anonymous && config.scope.claim.is_none() && !config.scope.required);
    }

    #[test]
    fn values_are_parsed() {
        let config = parse(&[
            (VAR_ORIGIN_URL, "http://127.0.0.1:8080/base/"),
            (VAR_TTL_SECONDS, "60"),
            (VAR_DUPLICATE_WAIT_SECONDS, "0"),
            (VAR_ORIGIN_TIMEOUT_SECONDS, " 5 "),
            (VAR_MAX_BODY_BYTES, "4096"),
            (VAR_SCOPE_HEADER, "X-Api-Key"),
        ])
        .unwrap();
        assert_eq!(config.origin_url.as_deref(), Some("http://127.0.0.1:8080/base"));
        assert_eq!(
            config.origin_target("https://edge.example/v1/pay?x=1", "/v1/pay?x=1"),
            "http://127.0.0.1:8080/base/v1/pay?x=1"
        );
        assert_eq!(config.timing.ttl_ms, 60_000);
        assert_eq!(config.timing.origin_timeout_ms, 5_000);
        assert_eq!(config.max_body_bytes, 4096);
        assert_eq!(config.scope.headers, ["x-api-key"]);
    }

    #[test]
    fn the_object_policy_round_trips_through_its_header() {
        let config = parse(&[(
            VAR_ROUTES,
            r#"[{"pattern":"/a","release_statuses":[429],"unknown_statuses":[502,504],"release_requires_header":true}]"#,
        )])
        .unwrap();
        for path in ["/a", "/b"] {
            let policy = config.key_terms(&config.policy_for(path));
            assert_eq!(decode_text(&encode_text(&policy)), Some(policy), "{path}");
        }
        let routed = config.key_terms(&config.policy_for("/a"));
        assert_eq!(routed.outcome.release, StatusSet::of(&[429]).unwrap());
        assert!(routed.outcome.via_cloudflare, "no ORIGIN_URL: route mode");
        assert!(routed.outcome.release_requires_header);
        let empty = KeyTerms {
            outcome: OutcomeTable { release: StatusSet::default(), ..OutcomeTable::default() },
            ..routed.clone()
        };
        assert_eq!(decode_text(&encode_text(&empty)), Some(empty));
        let deduplicating = KeyTerms { max_origin_attempts: Some(5), ..routed.clone() };
        assert_eq!(decode_text(&encode_text(&deduplicating)), Some(deduplicating));
        let observing = KeyTerms {
            mode: Mode::Observe,
            origin_service: Some("PAYMENTS_API".to_owned()),
            ..routed.clone()
        };
        assert_eq!(decode_text(&encode_text(&observing)), Some(observing));
        for bad in [
            "",
            "1,2,3",
            "1,2,3,4,5,6,0,503,",
            "1,2,3,4,5,6,0,503,,x",
            "1,2,3,4,5,6,9,503,,0",
            "1,2,3,4,5,6,0,200,,0",
            "1,2,3,4,5,6,0,503,,0",
            "1,2,3,4,5,6,0,503,,0,1",
            "1,2,3,4,5,6,0,503,,0,pay-api",
            "1,2,3,4,5,6,8,503,,0,",
            "1,2,3,4,5,6,0,503,,0,,",
        ] {
            assert_eq!(decode_text(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn limits_have_defaults_and_bounds() {
        let config = parse(&[]).unwrap();
        assert_eq!(config.limits, WaiterLimits::default());
        assert_eq!(config.max_stored_response_bytes, 16 * 1024 * 1024, "16 MiB by default");
        assert_eq!(MAX_MAX_STORED_RESPONSE_BYTES, 64 * 1024 * 1024);
        let most = parse(&[(VAR_MAX_STORED_RESPONSE_BYTES, "67108864")]).unwrap();
        assert_eq!(most.max_stored_response_bytes, 64 * 1024 * 1024, "at most 64 MiB");
        let set = parse(&[
            (VAR_MAX_WAITERS_PER_KEY, "10"),
            (VAR_MAX_WAITING_BYTES, "1024"),
            (VAR_MAX_STORED_RESPONSE_BYTES, "4096"),
        ])
        .unwrap();
        assert_eq!(set.limits, WaiterLimits { max_waiters: 10, max_waiting_bytes: 1024 });
        assert_eq!(set.max_stored_response_bytes, 4096);
        for (variable, value) in [
            (VAR_MAX_WAITERS_PER_KEY, "1001"),
            (VAR_MAX_WAITING_BYTES, "x"),
            (VAR_MAX_STORED_RESPONSE_BYTES, "67108865"),
        ] {
            assert_eq!(parse(&[(variable, value)]).unwrap_err().variable, variable);
        }
    }

    #[test]
    fn an_origin_that_deduplicates_is_named_per_deployment_or_route() {
        let off = parse(&[]).unwrap();
        assert_eq!(off.policy_for("/x").max_origin_attempts, None, "off by default");
        let on = parse(&[(VAR_ORIGIN_DEDUPLICATES, "true"), (VAR_MAX_ORIGIN_ATTEMPTS, "3")]).unwrap();
        assert_eq!(on.policy_for("/x").max_origin_attempts, Some(3));
        let routed = parse(&[(
            VAR_ROUTES,
            r#"[{"pattern":"/a","origin_deduplicates":true},{"pattern":"/b","origin_deduplicates":false}]"#,
        )])
        .unwrap();
        assert_eq!(routed.policy_for("/a").max_origin_attempts, Some(5));
        assert_eq!(routed.policy_for("/b").max_origin_attempts, None);
        // A shaped fingerprint and re-sends do not mix, whichever names the deduplication.
        let shaped = r#"[{"pattern":"/v1/refunds","fingerprint_ignore":["/ts"]},{"pattern":"/v1/charges","fingerprint_only":["/amount"],"origin_deduplicates":true}]"#;
        let error = parse(&[(VAR_ROUTES, shaped)]).unwrap_err();
        assert_eq!(error.variable, VAR_ROUTES);
        assert!(
            error.reason.starts_with("[1] (/v1/charges): fingerprint_ignore or fingerprint_only"),
            "{error:?}"
        );
        let error = parse(&[(VAR_ROUTES, shaped), (VAR_ORIGIN_DEDUPLICATES, "true")]).unwrap_err();
        assert!(error.reason.starts_with("[0] (/v1/refunds)"), "the flat variable applies: {error:?}");
        let apart = r#"[{"pattern":"/v1/refunds","fingerprint_ignore":["/ts"],"origin_deduplicates":false}]"#;
        assert!(
            parse(&[(VAR_ROUTES, apart), (VAR_ORIGIN_DEDUPLICATES, "true")]).is_ok(),
            "a route may opt out"
        );
        for (variable, value) in [
            (VAR_ORIGIN_DEDUPLICATES, "yes"),
            (VAR_MAX_ORIGIN_ATTEMPTS, "0"),
            (VAR_MAX_ORIGIN_ATTEMPTS, "101"),
        ] {
            assert_eq!(parse(&[(variable, value)]).unwrap_err().variable, variable);
        }
    }

    #[test]
    fn mode_and_origin_service_per_deployment_or_route() {
        let plain = parse(&[]).unwrap();
        assert_eq!(plain.policy_for("/x").mode, Mode::Enforce, "enforce by default");
        assert_eq!(plain.policy_for("/x").origin_service, None);
        let routed = parse(&[
            (VAR_MODE, "observe"),
            (VAR_ORIGIN_SERVICE, "PAYMENTS"),
            (VAR_ROUTES, r#"[{"pattern":"/a","mode":"enforce","origin_service":"LEDGER"}]"#),
        ])
        .unwrap();
        let a = routed.policy_for("/a");
        assert_eq!((a.mode, a.origin_service), (Mode::Enforce, Some("LEDGER")));
        assert!(!a.outcome.via_cloudflare, "a service binding is not a Cloudflare route");
        assert!(!routed.probes_origin(&a));
        assert_eq!(
            routed.target_for(&a, "https://edge.example/a?q=1", "/a?q=1"),
            "https://edge.example/a?q=1"
        );
        let b = routed.policy_for("/b");
        assert_eq!((b.mode, b.origin_service), (Mode::Observe, Some("PAYMENTS")));
        let policy = routed.key_terms(&a);
        assert_eq!(policy.origin_service.as_deref(), Some("LEDGER"));
        let url = parse(&[(VAR_ORIGIN_URL, "http://127.0.0.1:1")]).unwrap();
        assert!(url.probes_origin(&url.policy_for("/x")));
        for (variable, value) in
            [(VAR_MODE, "report-only"), (VAR_ORIGIN_SERVICE, "pay-api"), (VAR_ORIGIN_SERVICE, "9")]
        {
            assert_eq!(parse(&[(variable, value)]).unwrap_err().variable, variable);
        }
        let both = parse(&[(VAR_ORIGIN_URL, "http://127.0.0.1:1"), (VAR_ORIGIN_SERVICE, "API")]);
        assert_eq!(both.unwrap_err().variable, VAR_ORIGIN_SERVICE);
    }

    #[test]
    fn methods_that_some_route_may_cover() {
        let config = parse(&[(VAR_ROUTES, r#"[{"pattern":"/v1/refunds*","methods":["PUT"]}]"#)]).unwrap();
        assert!(config.may_cover("POST") && config.may_cover("patch") && config.may_cover("PUT"));
        assert!(!config.may_cover("DELETE") && !config.may_cover("GET"));
        let plain = parse(&[]).unwrap();
        assert!(plain.may_cover("POST") && !plain.may_cover("PUT"));
    }

    #[test]
    fn routes_override_the_flat_variables() {
        let config = parse(&[
            (VAR_TTL_SECONDS, "600"),
            (
                VAR_ROUTES,
                r#"[{"pattern":"/v1/refunds*","methods":["POST","PUT"],"ttl_seconds":60,"fingerprint_headers":["X-Api-Version"]},
                    {"pattern":"/v1/*","key":"optional","on_object_unavailable":"fail-open"}]"#,
            ),
        ])
        .unwrap();
        let refunds = config.policy_for("/v1/refunds/r_1");
        assert!(refunds.covers("PUT") && refunds.covers("post") && !refunds.covers("PATCH"));
        assert_eq!(refunds.timing.ttl_ms, 60_000);
        assert_eq!(refunds.timing.duplicate_wait_ms, 10_000);
        assert!(refunds.key_required);
        assert_eq!(refunds.fingerprint_headers, &["x-api-version".to_owned()]);
        let other = config.policy_for("/v1/charges");
        assert!(other.covers("POST") && other.covers("PATCH") && !other.covers("PUT"));
        assert!(!other.key_required);
        assert_eq!(other.on_unavailable, Unavailable::FailOpen);
        assert_eq!(other.timing.ttl_ms, 600_000);
        assert_eq!(refunds.body_shape, None);
        let shaped = parse(&[(VAR_ROUTES, r#"[{"pattern":"/v1/*","fingerprint_ignore":["/ts"]}]"#)]).unwrap();
        assert!(matches!(shaped.policy_for("/v1/charges").body_shape, Some(BodyShape::Ignore(_))));
        assert_eq!(shaped.policy_for("/v2/charges").body_shape, None);
        let unrouted = config.policy_for("/health");
        assert!(unrouted.key_required);
        assert_eq!(unrouted.on_unavailable, Unavailable::FailClosed);
        assert!(unrouted.fingerprint_headers.is_empty());
    }

    /// A route that calls a default release status unknown (a gateway's 503 after the
    /// application ran) needs no release_statuses of its own: the defaults give way.
    #[test]
    fn default_release_statuses_give_way_to_a_routes_unknown_ones() {
        let config = parse(&[(VAR_ROUTES, r#"[{"pattern":"/gw/*","unknown_statuses":[503,504]}]"#)]).unwrap();
        let outcome = config.policy_for("/gw/1").outcome;
        assert_eq!(outcome.unknown, StatusSet::of(&[503, 504]).unwrap());
        assert_eq!(outcome.release, StatusSet::of(&[408, 409, 425, 429]).unwrap());
        assert_eq!(config.policy_for("/other").outcome.release, OutcomeTable::default().release);
    }

    #[test]
    fn a_route_names_its_key_header() {
        let config =
            parse(&[(VAR_ROUTES, r#"[{"pattern":"/paypal/*","key_header":"PayPal-Request-Id"}]"#)]).unwrap();
        let routed = config.policy_for("/paypal/orders");
        assert_eq!(
            routed.key_header,
            KeyHeader { name: "PayPal-Request-Id", lowercase: "paypal-request-id" }
        );
        assert_eq!(config.key_terms(&routed).key_header(), "paypal-request-id");
        let plain = config.policy_for("/v1/charges");
        assert_eq!(plain.key_header, IDEMPOTENCY_KEY);
        assert_eq!(config.key_terms(&plain).key_header, None, "the default is not written");
        assert_eq!(config.key_terms(&plain).key_header(), "idempotency-key");
        // Naming the default explicitly is the default.
        let explicit = parse(&[(VAR_ROUTES, r#"[{"pattern":"*","key_header":"idempotency-key"}]"#)]).unwrap();
        assert_eq!(explicit.key_terms(&explicit.policy_for("/x")).key_header, None);
        // A header that identifies the caller cannot carry the key.
        for (scope, header) in [("", "Authorization"), ("X-Api-Key", "x-api-key")] {
            let routes = format!(r#"[{{"pattern":"*","key_header":"{header}"}}]"#);
            let vars: Vec<(&'static str, &str)> = if scope.is_empty() {
                vec![(VAR_ROUTES, &routes)]
            } else {
                vec![(VAR_ROUTES, &routes), (VAR_SCOPE_HEADER, scope)]
            };
            let error =
                Config::from_vars(|name| vars.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)).unwrap_err();
            assert_eq!(error.variable, VAR_ROUTES);
            assert!(error.reason.contains("[0].key_header"), "{}", error.detail());
        }
    }

    #[test]
    fn invalid_routes_name_the_variable_and_the_member() {
        let err = parse(&[(VAR_ROUTES, r#"[{"pattern":"/a","ttl_seconds":-1}]"#)]).unwrap_err();
        assert_eq!(err.variable, VAR_ROUTES);
        assert!(err.detail().contains("[0].ttl_seconds"), "{}", err.detail());
    }

    #[test]
    fn route_mode_forwards_to_the_request_url() {
        let config = parse(&[(VAR_ORIGIN_URL, "")]).unwrap();
        assert_eq!(
            config.origin_target("https://api.example/v1/pay", "/v1/pay"),
            "https://api.example/v1/pay"
        );
    }

    #[test]
    fn invalid_values_name_their_variable() {
        let cases: &[(&'static str, &'static str)] = &[
            (VAR_ORIGIN_URL, "ftp://x"),
            (VAR_ORIGIN_URL, "http://"),
            (VAR_ORIGIN_URL, "http://a b"),
            (VAR_ORIGIN_URL, "http://a/?q=1"),
            (VAR_TTL_SECONDS, "0"),
            (VAR_TTL_SECONDS, "1d"),
            (VAR_TTL_SECONDS, "-5"),
            (VAR_TTL_SECONDS, "99999999999999999999999"),
            (VAR_DUPLICATE_WAIT_SECONDS, ""),
            (VAR_ORIGIN_TIMEOUT_SECONDS, "0"),
            (VAR_MAX_BODY_BYTES, "1e6"),
            (VAR_SCOPE_HEADER, "Bad Header"),
            (VAR_SCOPE_HEADER, ""),
            (VAR_ADMIN_PATH_PREFIX, "admin"),
            (VAR_ADMIN_PATH_PREFIX, "/"),
            (VAR_JURISDICTION, "mars"),
        ];
        for &(variable, value) in cases {
            let err = parse(&[(variable, value)]).expect_err(value);
            assert_eq!(err.variable, variable, "{value:?}");
            assert!(err.detail().starts_with(variable));
        }
    }

    #[test]
    fn fault_injection_is_parsed_strictly_and_announced() {
        assert_eq!(parse_fault_injection(VAR_ALARM_FAULT_INJECTION, None), Ok(0));
        assert_eq!(parse_fault_injection(VAR_ALARM_FAULT_INJECTION, Some(" 3 ")), Ok(3));
        for bad in ["-1", "1.5", "yes", "+2"] {
            let error = parse_fault_injection(VAR_DELETE_FAULT_INJECTION, Some(bad)).unwrap_err();
            assert_eq!(error.variable, VAR_DELETE_FAULT_INJECTION, "{bad}");
        }
        let none = FaultInjection::from_vars(|_| None).unwrap();
        assert!(!none.is_set());
        assert_eq!(none.line(), None);
        let chunks =
            FaultInjection::from_vars(|name| (name == VAR_CHUNK_WRITE_FAULT_INJECTION).then_some("2"))
                .unwrap();
        assert_eq!(chunks.chunk_write_failures, 2);
        let value: serde_json::Value = serde_json::from_str(&chunks.line().unwrap()).unwrap();
        assert_eq!(value["event"], "fault-injection");
        assert_eq!(value["chunk_write_failures"], 2);
        assert!(value["detail"].as_str().unwrap().contains("tests only"));
        let bad = FaultInjection::from_vars(|name| (name == VAR_ALARM_FAULT_INJECTION).then_some("x"));
        assert_eq!(bad.unwrap_err().variable, VAR_ALARM_FAULT_INJECTION);
    }

    #[test]
    fn a_request_panics_only_while_panic_injection_is_set_and_only_where_it_asks() {
        let off = FaultInjection::default();
        let on =
            FaultInjection::from_vars(|name| (name == VAR_PANIC_FAULT_INJECTION).then_some("1")).unwrap();
        assert!(on.is_set());
        let line: serde_json::Value = serde_json::from_str(&on.line().unwrap()).unwrap();
        assert_eq!(line["panics_on_request"], 1);
        for site in [PanicSite::Worker, PanicSite::Object] {
            for header in [None, Some(""), Some("worker"), Some("object"), Some("both")] {
                assert!(!off.panics_at(|| header, site), "{header:?} {site:?}");
            }
        }
        assert!(on.panics_at(|| Some("worker"), PanicSite::Worker));
        assert!(on.panics_at(|| Some(" object "), PanicSite::Object));
        assert!(!on.panics_at(|| Some("worker"), PanicSite::Object));
        assert!(!on.panics_at(|| Some("object"), PanicSite::Worker));
        assert!(!on.panics_at(|| None::<&str>, PanicSite::Worker));
        assert!(!on.panics_at(|| Some("Worker"), PanicSite::Worker));
    }
}
