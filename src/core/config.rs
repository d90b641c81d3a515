//! Configuration: the wrangler `[vars]`, parsed and validated.
//!
//! Owns the variable names, their defaults and their limits. It sees only strings; the
//! runtime looks the variables up and passes them in.
//!
//! An invalid value is a [`ConfigError`] naming the variable. The worker then answers 500
//! problem+json and forwards nothing: a typo must never turn protection off silently.

use super::machine::Timing;
use super::routes::{parse_routes, pattern_matches, Route, Unavailable};
use super::scope::{ScopeConfig, ScopePolicy};

/// The variables, as the runtime should look them up.
pub const VAR_ORIGIN_URL: &str = "ORIGIN_URL";
pub const VAR_TTL_SECONDS: &str = "IDEMPOTENCY_TTL_SECONDS";
pub const VAR_DUPLICATE_WAIT_SECONDS: &str = "DUPLICATE_WAIT_SECONDS";
pub const VAR_ORIGIN_TIMEOUT_SECONDS: &str = "ORIGIN_TIMEOUT_SECONDS";
pub const VAR_MAX_BODY_BYTES: &str = "MAX_BODY_BYTES";
pub const VAR_SCOPE_HEADER: &str = "SCOPE_HEADER";
pub const VAR_ROUTES: &str = "IDEMPOTENCY_ROUTES";
pub const VAR_ADMIN_PATH_PREFIX: &str = "ADMIN_PATH_PREFIX";
pub const VAR_JURISDICTION: &str = "DURABLE_OBJECT_JURISDICTION";

pub const ALL_VARS: [&str; 9] = [
    VAR_ORIGIN_URL,
    VAR_TTL_SECONDS,
    VAR_DUPLICATE_WAIT_SECONDS,
    VAR_ORIGIN_TIMEOUT_SECONDS,
    VAR_MAX_BODY_BYTES,
    VAR_SCOPE_HEADER,
    VAR_ROUTES,
    VAR_ADMIN_PATH_PREFIX,
    VAR_JURISDICTION,
];

/// Thirty days: longer retention is allowed by nothing in the product, and a typo of
/// several extra digits should fail loudly rather than keep records for years.
pub(crate) const MAX_TTL_SECONDS: u64 = 30 * 24 * 3600;
/// A duplicate holds a connection open while it waits; more than five minutes is a mistake.
pub(crate) const MAX_DUPLICATE_WAIT_SECONDS: u64 = 300;
/// Workers' own subrequest limits make longer origin calls pointless.
pub(crate) const MAX_ORIGIN_TIMEOUT_SECONDS: u64 = 600;
/// The Worker buffers the body in memory (128 MB per isolate); keep well below that.
const MAX_MAX_BODY_BYTES: u64 = 32 * 1024 * 1024;

/// The validated configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Base URL without a trailing slash; `None` forwards to the request's own URL.
    pub origin_url: Option<String>,
    pub timing: Timing,
    pub max_body_bytes: u64,
    /// Who a key belongs to: the scope headers, claim and keys (`core::scope`).
    pub scope: ScopeConfig,
    /// Per-route overrides, tried in order (`IDEMPOTENCY_ROUTES`).
    pub routes: Vec<Route>,
    /// Where the admin API lives (when `ADMIN_TOKEN` is set); starts and ends with `/`.
    pub admin_prefix: String,
    /// Where the key objects (and so the stored responses) must live, e.g. `eu` for EU
    /// data residency; `None`: anywhere.
    pub jurisdiction: Option<String>,
}

/// The policy that applies to one request path: the flat variables, overridden by the
/// first matching route.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy<'a> {
    /// Covered methods; `None` means the default, `POST` and `PATCH`.
    pub methods: Option<&'a [String]>,
    pub key_required: bool,
    pub timing: Timing,
    pub on_unavailable: Unavailable,
    /// Lowercase names of request headers that are part of the payload.
    pub fingerprint_headers: &'a [String],
    /// The claim that names the caller, and whether anonymous callers are let in.
    pub scope: ScopePolicy<'a>,
}

impl Policy<'_> {
    /// Whether requests with this method are deduplicated.
    pub fn covers(&self, method: &str) -> bool {
        match self.methods {
            Some(methods) => methods.iter().any(|m| m.eq_ignore_ascii_case(method)),
            None => method.eq_ignore_ascii_case("POST") || method.eq_ignore_ascii_case("PATCH"),
        }
    }
}

/// A variable with an invalid value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    pub variable: &'static str,
    pub reason: String,
}

impl ConfigError {
    pub(crate) fn new(variable: &'static str, reason: impl Into<String>) -> Self {
        ConfigError { variable, reason: reason.into() }
    }

    /// A sentence for the problem's `detail`.
    pub fn detail(&self) -> String {
        format!("{} is invalid: {}", self.variable, self.reason)
    }
}

impl Config {
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
        let admin_prefix = parse_admin_prefix(lookup(VAR_ADMIN_PATH_PREFIX))?;
        let jurisdiction = match lookup(VAR_JURISDICTION).map(str::trim).unwrap_or("") {
            "" => None,
            known @ ("eu" | "fedramp") => Some(known.to_owned()),
            _ => return Err(ConfigError::new(VAR_JURISDICTION, "expected eu, fedramp or empty")),
        };
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
        })
    }

    /// The policy for a request to `path`.
    pub fn policy_for(&self, path: &str) -> Policy<'_> {
        let route = self.routes.iter().find(|route| pattern_matches(&route.pattern, path));
        let seconds = |pick: fn(&Route) -> Option<u64>, default_ms: u64| {
            route.and_then(pick).map_or(default_ms, |s| s * 1_000)
        };
        Policy {
            methods: route.and_then(|r| r.methods.as_deref()),
            key_required: route.and_then(|r| r.key_required).unwrap_or(true),
            timing: Timing {
                ttl_ms: seconds(|r| r.ttl_seconds, self.timing.ttl_ms),
                duplicate_wait_ms: seconds(|r| r.duplicate_wait_seconds, self.timing.duplicate_wait_ms),
                origin_timeout_ms: seconds(|r| r.origin_timeout_seconds, self.timing.origin_timeout_ms),
            },
            on_unavailable: route.and_then(|r| r.on_unavailable).unwrap_or(Unavailable::FailClosed),
            fingerprint_headers: route.and_then(|r| r.fingerprint_headers.as_deref()).unwrap_or(&[]),
            scope: ScopePolicy {
                claim: match route.and_then(|r| r.scope_claim.as_ref()) {
                    // A route's `scope_claim` wins, `""` (None) meaning the credential hash.
                    Some(claim) => claim.as_ref(),
                    None => self.scope.claim.as_ref(),
                },
                anonymous_allowed: route
                    .and_then(|r| r.anonymous_allowed)
                    .unwrap_or(self.scope.allow_anonymous),
            },
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
}

/// The timing as the Worker hands it to the key's object in one header value
/// (`ttl_ms,wait_ms,timeout_ms`), so the object does not parse configuration again.
pub fn encode_timing(timing: &Timing) -> String {
    format!("{},{},{}", timing.ttl_ms, timing.duplicate_wait_ms, timing.origin_timeout_ms)
}

/// The inverse of [`encode_timing`].
pub fn decode_timing(value: &str) -> Option<Timing> {
    let mut parts = value.split(',').map(|part| part.trim().parse::<u64>().ok());
    let timing = Timing {
        ttl_ms: parts.next()??,
        duplicate_wait_ms: parts.next()??,
        origin_timeout_ms: parts.next()??,
    };
    parts.next().is_none().then_some(timing)
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
    let prefix = raw.map(str::trim).filter(|p| !p.is_empty()).unwrap_or(super::admin::DEFAULT_PREFIX);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(vars: &[(&'static str, &'static str)]) -> Result<Config, ConfigError> {
        Config::from_vars(|name| vars.iter().find(|(n, _)| *n == name).map(|(_, v)| *v))
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
    fn timing_round_trips_through_its_header() {
        let timing = Timing { ttl_ms: 1, duplicate_wait_ms: 0, origin_timeout_ms: 30_000 };
        assert_eq!(decode_timing(&encode_timing(&timing)), Some(timing));
        assert_eq!(decode_timing("1,2"), None);
        assert_eq!(decode_timing("1,2,3,4"), None);
        assert_eq!(decode_timing("1,x,3"), None);
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
        let unrouted = config.policy_for("/health");
        assert!(unrouted.key_required);
        assert_eq!(unrouted.on_unavailable, Unavailable::FailClosed);
        assert!(unrouted.fingerprint_headers.is_empty());
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
}
