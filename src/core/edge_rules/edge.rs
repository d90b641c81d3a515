//! The Worker's first decision about a request, made from its head alone: where it goes.
//!
//! Owns the routing of a request before any body is read or any object is called: the
//! admin API, a path no route can be chosen for, a missing service binding, the method
//! override headers, the key (from `Idempotency-Key`, or the header the route names in
//! `key_header`, and a key the route's lookup could not ask for, `core::key_rules::reconcile` rule 6),
//! and whether the route covers the method. Observe mode is the same decision, forwarded and logged instead of enforced
//! ([`Edge::PassObserved`]), so the two modes cannot drift apart.
//!
//! It also owns the texts of the refusals the Worker gives later on its own (a body over
//! the limit, an unbound binding, the rate limit, an origin that cannot be reached), so
//! that every problem the runtime sends is written here and tested natively.

use super::config::{Config, PathConfig};
use super::headers::METHOD_OVERRIDE_HEADERS;
use super::routes::Unavailable;
use super::wire::ReconcileCall;
use crate::core::key_rules::machine::async_job::{prefers_respond_async, AsyncConfig};
use crate::core::primitives::key::{parse_key_fields, IdempotencyKey, KeyError, IDEMPOTENCY_KEY};
use crate::core::primitives::url::normalised_path;
use crate::core::vocabulary::key_terms::Mode;
use crate::core::vocabulary::problem::{Problem, ProblemKind};

/// Seconds a limited caller is told to wait: the shortest period a binding can have.
pub const RATE_LIMIT_RETRY_AFTER_SECONDS: u64 = 10;

/// What the Worker knows of a request before reading its body.
pub struct RequestHead<'a> {
    pub method: &'a str,
    /// The URL's path, as it came (not yet normalised).
    pub path: &'a str,
    /// Whether the admin API exists (`ADMIN_TOKEN` is set).
    pub admin_enabled: bool,
    /// Reads a header by its lowercase name (repeated lines joined with ", "): `Ok(None)`
    /// when absent, `Err` when it cannot be read as text. Only the headers a decision
    /// needs are read: each read crosses into the runtime.
    pub header: &'a dyn Fn(&str) -> Result<Option<String>, ()>,
}

/// Where a request goes.
#[derive(Debug)]
pub enum Edge<'c> {
    /// The admin API (which checks the token itself).
    Admin,
    /// Refused before anything is read or forwarded.
    Refuse(Problem),
    /// Not covered: to the origin as it came.
    PassThrough(PathConfig<'c>),
    /// Observe mode: what enforcing would refuse, forwarded as it came and logged as that
    /// refusal.
    PassObserved(PathConfig<'c>, ProblemKind),
    /// Covered, with a valid key: enforced or observed as `policy.mode` says, as `plan` says.
    Covered { policy: PathConfig<'c>, key: IdempotencyKey, plan: CoveredPlan },
}

impl Edge<'_> {
    /// The pattern of the route the request matched, for its trace (log lines and problems
    /// name it); `None` for the admin API, a refusal before any route, or no route.
    pub fn route(&self) -> Option<&str> {
        match self {
            Edge::PassThrough(policy) | Edge::PassObserved(policy, _) | Edge::Covered { policy, .. } => {
                policy.route
            }
            Edge::Admin | Edge::Refuse(_) => None,
        }
    }
}

/// What the Worker does with a covered request, decided from its head before it acts: the
/// body's limit, and, enforcing, the asynchronous acceptance it asks of the object, whether
/// it keeps the request for a fail-open forward, and the lookup the object may make. The
/// object's call is built from it (`core::edge_rules::identify::key_call`); observing, only
/// the limit applies (the Worker forwards the request as it came).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoveredPlan {
    /// `MAX_BODY_BYTES`: a body over it is refused with 413 ([`body_too_large`]).
    pub max_body_bytes: u64,
    /// The asynchronous settings (`core::key_rules::machine::async_job`), when the route
    /// accepts asynchronous execution and the request prefers `respond-async`.
    pub accept_async: Option<AsyncConfig>,
    /// Whether the Worker keeps the forward's headers and body, for a fail-open forward
    /// when the object cannot be reached (`on_object_unavailable: "fail-open"`).
    pub keep_for_fail_open: bool,
    /// The route's lookup for unknown outcomes, filled for this key
    /// (`core::key_rules::reconcile`).
    pub reconcile: Option<ReconcileCall>,
}

/// Decides where a request goes. `service_bound` says whether a service binding exists.
pub fn decide<'c>(
    head: &RequestHead<'_>,
    config: &'c Config,
    service_bound: impl Fn(&str) -> bool,
) -> Edge<'c> {
    if head.admin_enabled && super::admin::is_admin_path(&config.admin_prefix, head.path) {
        return Edge::Admin;
    }
    let routed_path = match normalised_path(head.path) {
        Ok(normalised) => normalised,
        // No route can be chosen for such a path: the flat MODE says whether to refuse it.
        Err(_) if config.may_cover(head.method) && config.mode == Mode::Observe => {
            return Edge::PassObserved(config.policy_for(head.path), ProblemKind::InvalidPath);
        }
        Err(ambiguous) if config.may_cover(head.method) => {
            return Edge::Refuse(Problem::new(ProblemKind::InvalidPath, ambiguous.detail()));
        }
        // No route covers this method anywhere: the origin gets the path as it came.
        Err(_) => head.path.to_owned(),
    };
    let policy = config.policy_for(&routed_path);
    if let Some(name) = policy.origin_service.filter(|name| !service_bound(name)) {
        return Edge::Refuse(Problem::new(
            ProblemKind::InvalidConfig,
            format!("The origin service binding {name} is missing, so nothing can be forwarded. Add it as a [[services]] binding."),
        ));
    }
    let observe = policy.mode == Mode::Observe;
    if !policy.covers(head.method) {
        let method_override = || {
            // A header that cannot be read counts as present: refused rather than guessed.
            METHOD_OVERRIDE_HEADERS.into_iter().find(|name| !matches!((head.header)(name), Ok(None)))
        };
        return match (!policy.allow_method_override).then(method_override).flatten() {
            None => Edge::PassThrough(policy),
            Some(_) if observe => Edge::PassObserved(policy, ProblemKind::MethodOverride),
            Some(name) => Edge::Refuse(Problem::new(
                ProblemKind::MethodOverride,
                format!("{name} is not accepted on {} here: the origin might execute the request as another method, without idempotency protection. Send the method itself.", head.method),
            )),
        };
    }
    // Only the route's key header is read (`core::primitives::key`, rule 5): on a route that names
    // another, `Idempotency-Key` is an ordinary header, neither a key nor a conflict, and a
    // request that carries both is keyed by the route's alone.
    let key = match (head.header)(policy.key_header.lowercase) {
        // workerd joins repeated header lines with ", "; the parser treats a top-level
        // comma as a second value.
        Ok(value) => parse_key_fields(value.as_deref().map(str::as_bytes)),
        Err(()) => Err(KeyError::NotPrintableAscii),
    };
    match key {
        // A key that would make the route's lookup another URL (`core::key_rules::reconcile` rule 6).
        Ok(key) => match policy.reconcile.map(|route| (route, route.lookup_url(&key))) {
            Some((_, Err(_))) if observe => Edge::PassObserved(policy, ProblemKind::InvalidKey),
            Some((_, Err(refused))) => Edge::Refuse(Problem::new(
                refused.kind,
                refused.detail.replace(IDEMPOTENCY_KEY.name, policy.key_header.name),
            )),
            lookup => {
                let enforce = !observe;
                // A `Prefer` that cannot be read prefers nothing.
                let prefer = (head.header)("prefer").ok().flatten();
                let plan = CoveredPlan {
                    max_body_bytes: config.max_body_bytes,
                    accept_async: policy
                        .async_accept
                        .filter(|_| enforce && prefers_respond_async(prefer.as_deref())),
                    keep_for_fail_open: enforce && policy.on_unavailable == Unavailable::FailOpen,
                    reconcile: lookup.filter(|_| enforce).and_then(|(route, url)| {
                        Some(ReconcileCall {
                            url: url.ok()?,
                            not_found: route.not_found,
                            scope_headers: config.scope.lookup_headers(),
                        })
                    }),
                };
                Edge::Covered { policy, key, plan }
            }
        },
        // A route may make the key optional: without one, the request is not protected
        // (and observe mode, as enforce mode, logs nothing for it).
        Err(KeyError::Missing) if !policy.key_required => Edge::PassThrough(policy),
        Err(error) => {
            let kind =
                if error == KeyError::Missing { ProblemKind::MissingKey } else { ProblemKind::InvalidKey };
            if observe {
                Edge::PassObserved(policy, kind)
            } else {
                Edge::Refuse(Problem::new(kind, error.detail_for(policy.key_header)))
            }
        }
    }
}

/// What a request's `Content-Length` says of its body against a limit. It can only make a
/// refusal come sooner: a body is counted as it arrives whatever the header says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeclaredBody {
    /// A length over the limit: refused (or, observing, forwarded as it came) unread.
    OverLimit,
    /// A length within the limit: HTTP framing holds the body to it, so it is read in one
    /// piece.
    Within,
    /// No length, or one that is not a number: the body is counted as it streams in.
    Undeclared,
}

/// What `content_length` declares against `limit` ([`DeclaredBody`]).
pub fn declared_body(content_length: Option<&str>, limit: u64) -> DeclaredBody {
    match content_length.and_then(|value| value.trim().parse::<u64>().ok()) {
        Some(length) if length > limit => DeclaredBody::OverLimit,
        Some(_) => DeclaredBody::Within,
        None => DeclaredBody::Undeclared,
    }
}

/// Most bytes of a refused request's body read and thrown away, beyond the `read` bytes
/// already read. Answering before the request body is consumed makes workerd drop the
/// connection (a proxy in front then fails the next request on it), so the rest is read, but
/// not without end.
pub fn drain_limit(read: u64) -> u64 {
    read.saturating_add(8 * 1024 * 1024)
}

/// Whether a body waiting on a key's object, whose length the Worker declared
/// (`KeyCall::body_bytes`), is read and dropped with one `arrayBuffer()` rather than a reader,
/// a read per chunk and a release: at most 64 KiB, so a large body never sits whole in a
/// waiter. `None`: not declared, read chunk by chunk.
pub fn drains_whole(declared_bytes: Option<u64>) -> bool {
    declared_bytes.is_some_and(|bytes| bytes <= 64 * 1024)
}

/// A body over `MAX_BODY_BYTES`, found while reading it.
pub fn body_too_large(limit: u64) -> Problem {
    Problem::new(ProblemKind::BodyTooLarge, format!("The request body is larger than {limit} bytes."))
}

/// A route names a rate-limiting binding that is not bound.
pub fn rate_limiter_unbound(name: &str) -> Problem {
    Problem::new(
        ProblemKind::InvalidConfig,
        format!("IDEMPOTENCY_ROUTES names the rate-limiting binding {name}, which is not bound. Nothing was forwarded."),
    )
}

/// The caller is over its rate limit.
pub fn rate_limited() -> Problem {
    Problem::new(
        ProblemKind::RateLimited,
        "Too many requests from this caller. Nothing was stored or forwarded; retry with the same key after Retry-After seconds.",
    )
    .with_retry_after(RATE_LIMIT_RETRY_AFTER_SECONDS)
}

/// A passed-through request whose origin could not be reached.
pub fn pass_through_unreachable() -> Problem {
    Problem::new(
        ProblemKind::OriginUnreachable,
        "The origin could not be reached. This method is passed through without idempotency protection.",
    )
}

/// The key objects' namespace binding is missing or unusable.
pub fn namespace_unusable(binding: &str) -> Problem {
    Problem::new(
        ProblemKind::InvalidConfig,
        format!("The Durable Object binding {binding} is missing, or its jurisdiction is not supported, so no request can be protected. Nothing was forwarded."),
    )
}

/// The method a covered request is sent to its object with: the method's standard
/// spelling in capitals, and `GET` for a method outside that list, as the `worker` crate's
/// `Method` spelled it (which this worker used until it bound the runtime itself).
pub fn method_on_the_wire(method: &str) -> &'static str {
    const KNOWN: [&str; 10] =
        ["HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE", "REPORT", "GET"];
    KNOWN.into_iter().find(|known| known.eq_ignore_ascii_case(method)).unwrap_or("GET")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_body_is_drained_8_mib_past_what_was_read() {
        assert_eq!(drain_limit(0), 8 << 20);
        assert_eq!(drain_limit(10), (8 << 20) + 10);
        assert_eq!(drain_limit(u64::MAX), u64::MAX);
    }

    #[test]
    fn only_a_small_declared_body_is_drained_whole() {
        assert!(drains_whole(Some(0)));
        assert!(drains_whole(Some(64 * 1024)));
        assert!(!drains_whole(Some(64 * 1024 + 1)));
        assert!(!drains_whole(None));
    }

    #[test]
    fn a_declared_length_only_makes_a_refusal_come_sooner() {
        assert_eq!(declared_body(Some("11"), 10), DeclaredBody::OverLimit);
        assert_eq!(declared_body(Some(" 10 "), 10), DeclaredBody::Within);
        assert_eq!(declared_body(Some("0"), 10), DeclaredBody::Within);
        for unread in [None, Some(""), Some("-1"), Some("ten"), Some("1e3")] {
            assert_eq!(declared_body(unread, 10), DeclaredBody::Undeclared, "{unread:?}");
        }
    }

    fn config(routes: &str, mode: &str) -> Config {
        let vars = [("IDEMPOTENCY_ROUTES", routes), ("MODE", mode), ("ORIGIN_SERVICE", "")];
        Config::from_vars(|name| vars.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)).unwrap()
    }

    /// A request head whose headers are `headers` (lowercase names).
    fn head<'a>(method: &'a str, path: &'a str, headers: &'a HeaderList) -> RequestHead<'a> {
        RequestHead { method, path, admin_enabled: true, header: headers }
    }

    type HeaderList = dyn Fn(&str) -> Result<Option<String>, ()>;

    fn with(pairs: &'static [(&'static str, &'static str)]) -> Box<HeaderList> {
        Box::new(move |name| Ok(pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| (*v).to_owned())))
    }

    fn kind(edge: &Edge<'_>) -> String {
        match edge {
            Edge::Admin => "admin".into(),
            Edge::Refuse(problem) => format!("refuse {}", problem.kind.slug()),
            Edge::PassThrough(_) => "pass".into(),
            Edge::PassObserved(_, kind) => format!("observed {}", kind.slug()),
            Edge::Covered { policy, .. } => format!("covered {:?}", policy.mode),
        }
    }

    #[test]
    fn requests_are_routed_by_their_head() {
        let c = config(
            r#"[{"pattern":"/opt/*","key":"optional"},{"pattern":"/ovr/*","allow_method_override":true}]"#,
            "",
        );
        let bound = |_: &str| true;
        let (keyed, none, empty) =
            (with(&[("idempotency-key", "k")]), with(&[]), with(&[("idempotency-key", "")]));
        let unreadable: Box<HeaderList> = Box::new(|_| Err(()));
        let overriding = with(&[("x-http-method", "POST")]);
        let cases = [
            (head("POST", "/v1/charges", &keyed), "covered Enforce"),
            (head("POST", "/v1/charges", &none), "refuse missing-key"),
            (head("POST", "/v1/charges", &empty), "refuse invalid-key"),
            (head("POST", "/v1/charges", &unreadable), "refuse invalid-key"),
            (head("POST", "/opt/x", &none), "pass"),
            (head("GET", "/v1/charges", &none), "pass"),
            (head("GET", "/v1/x", &overriding), "refuse method-override"),
            (head("GET", "/v1/x", &unreadable), "refuse method-override"),
            (head("GET", "/ovr/x", &overriding), "pass"),
            (head("GET", "/__idempotency/records/ab", &none), "admin"),
            (head("POST", "/v1/%2e%2e/x", &keyed), "refuse invalid-path"),
            // An ambiguous path on a method no route covers goes through as it came.
            (head("GET", "/v1/%2e%2e/x", &none), "pass"),
        ];
        for (request, expected) in cases {
            assert_eq!(kind(&decide(&request, &c, bound)), expected, "{} {}", request.method, request.path);
        }
        // Without the admin API, its prefix is an ordinary path.
        let no_admin =
            RequestHead { admin_enabled: false, ..head("GET", "/__idempotency/records/ab", &none) };
        assert_eq!(kind(&decide(&no_admin, &c, bound)), "pass");
    }

    #[test]
    fn the_trace_names_the_route_a_request_matched() {
        let c = config(r#"[{"pattern":"/v1/*"},{"pattern":"/obs/*","mode":"observe"}]"#, "");
        let bound = |_: &str| true;
        let (keyed, none) = (with(&[("idempotency-key", "k")]), with(&[]));
        let route = |request: RequestHead<'_>| decide(&request, &c, bound).route().map(str::to_owned);
        assert_eq!(route(head("POST", "/v1/charges", &keyed)), Some("/v1/*".to_owned()));
        assert_eq!(route(head("GET", "/v1/charges", &none)), Some("/v1/*".to_owned()));
        assert_eq!(route(head("POST", "/obs/x", &none)), Some("/obs/*".to_owned()));
        assert_eq!(route(head("POST", "/other", &keyed)), None);
        assert_eq!(route(head("POST", "/v1/charges", &none)), None, "refused before any route");
        assert_eq!(route(head("GET", "/__idempotency/records/ab", &none)), None);
    }

    /// A key whose lookup would ask another URL is refused on a route that looks up by
    /// path, and nowhere else.
    #[test]
    fn a_key_that_would_collapse_the_lookup_url_is_refused() {
        let c = config(
            r#"[{"pattern":"/ops/*","reconcile_url":"https://o.example/v1/operations/{key}"},
                {"pattern":"/obs/*","mode":"observe","reconcile_url":"https://o.example/v1/operations/{key}"},
                {"pattern":"/rid/*","key_header":"X-Request-Id","reconcile_url":"https://o.example/v1/ops/{key}"},
                {"pattern":"/q/*","reconcile_url":"https://o.example/v1/ops?key={key}"}]"#,
            "",
        );
        let bound = |_: &str| true;
        let dot = with(&[("idempotency-key", "."), ("x-request-id", "..")]);
        let dots = with(&[("idempotency-key", "\"..\"")]);
        let encoded = with(&[("idempotency-key", "%2e%2E")]);
        let three = with(&[("idempotency-key", "...")]);
        for (request, expected) in [
            (head("POST", "/ops/x", &dot), "refuse invalid-key"),
            (head("POST", "/ops/x", &dots), "refuse invalid-key"),
            (head("POST", "/ops/x", &encoded), "covered Enforce"),
            (head("POST", "/ops/x", &three), "covered Enforce"),
            (head("POST", "/obs/x", &dot), "observed invalid-key"),
            (head("POST", "/rid/x", &dot), "refuse invalid-key"),
            (head("POST", "/q/x", &dots), "covered Enforce"),
            (head("POST", "/v1/charges", &dot), "covered Enforce"),
        ] {
            assert_eq!(kind(&decide(&request, &c, bound)), expected, "{} {}", request.method, request.path);
        }
        let Edge::Refuse(problem) = decide(&head("POST", "/rid/x", &dot), &c, bound) else { panic!() };
        assert!(problem.detail.contains("X-Request-Id") && !problem.detail.contains("Idempotency-Key"));
    }

    /// Observe mode decides the same, and forwards what enforce mode would refuse.
    #[test]
    fn observe_mode_forwards_what_enforce_mode_refuses() {
        let c = config("", "observe");
        let bound = |_: &str| true;
        let (keyed, none, empty) =
            (with(&[("idempotency-key", "k")]), with(&[]), with(&[("idempotency-key", "")]));
        let overriding = with(&[("x-http-method-override", "POST")]);
        assert_eq!(kind(&decide(&head("POST", "/v1/charges", &keyed), &c, bound)), "covered Observe");
        assert_eq!(kind(&decide(&head("POST", "/v1/charges", &none), &c, bound)), "observed missing-key");
        assert_eq!(kind(&decide(&head("POST", "/v1/charges", &empty), &c, bound)), "observed invalid-key");
        assert_eq!(kind(&decide(&head("POST", "/v1/%2e%2e/x", &keyed), &c, bound)), "observed invalid-path");
        assert_eq!(kind(&decide(&head("GET", "/x", &overriding), &c, bound)), "observed method-override");
    }

    /// A route's key header is the only one read there; elsewhere `Idempotency-Key` is.
    #[test]
    fn a_route_reads_the_key_from_its_own_header() {
        let c = config(
            r#"[{"pattern":"/rid/*","key_header":"X-Request-Id"},{"pattern":"/opt/*","key":"optional","key_header":"X-Request-Id"}]"#,
            "",
        );
        let bound = |_: &str| true;
        let (rid, idem, both) = (
            with(&[("x-request-id", "k1")]),
            with(&[("idempotency-key", "k2")]),
            with(&[("idempotency-key", "k2"), ("x-request-id", "k1")]),
        );
        let key = |request: &RequestHead<'_>| match decide(request, &c, bound) {
            Edge::Covered { key, .. } => key.as_str().to_owned(),
            other => kind(&other),
        };
        assert_eq!(key(&head("POST", "/rid/x", &rid)), "k1");
        assert_eq!(key(&head("POST", "/rid/x", &both)), "k1", "the route's header alone");
        assert_eq!(key(&head("POST", "/rid/x", &idem)), "refuse missing-key", "an ordinary header here");
        assert_eq!(key(&head("POST", "/opt/x", &idem)), "pass", "without the route's key: unprotected");
        assert_eq!(key(&head("POST", "/v1/charges", &idem)), "k2");
        assert_eq!(key(&head("POST", "/v1/charges", &rid)), "refuse missing-key");
        // Refusals name the route's header; its value has the key's grammar and limits.
        let refusal = |value: Option<String>| {
            let headers: Box<HeaderList> =
                Box::new(move |name| Ok(value.clone().filter(|_| name == "x-request-id")));
            match decide(&head("POST", "/rid/x", &headers), &c, bound) {
                Edge::Refuse(problem) => (problem.kind.slug().to_owned(), problem.detail),
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(
            refusal(None),
            ("missing-key".to_owned(), "This method requires the X-Request-Id header.".to_owned())
        );
        for bad in ["".to_owned(), "a, b".to_owned(), "caf\u{e9}".to_owned(), "k".repeat(256)] {
            let (slug, text) = refusal(Some(bad.clone()));
            assert_eq!(slug, "invalid-key", "{bad:?}");
            assert!(text.contains("X-Request-Id") && !text.contains("Idempotency-Key"), "{text}");
        }
    }

    /// The plan says everything the Worker does with a covered request before it acts:
    /// enforcing, the asynchronous acceptance asked for, the fail-open forward kept, the
    /// lookup filled for the key; observing, none of these (only the body's limit).
    #[test]
    fn a_covered_request_comes_with_its_complete_plan() {
        let routes = r#"[{"pattern":"/open/*","on_object_unavailable":"fail-open"},{"pattern":"/rc/*","reconcile_url":"https://origin.example/lookup/{key}"}]"#;
        let vars = [("IDEMPOTENCY_ROUTES", routes), ("ASYNC_ACCEPT", "prefer"), ("MAX_BODY_BYTES", "1000")];
        let c = Config::from_vars(|name| vars.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)).unwrap();
        let plan_of = |config: &Config, path: &str, headers: &HeaderList| match decide(
            &head("POST", path, headers),
            config,
            |_| true,
        ) {
            Edge::Covered { plan, .. } => plan,
            other => panic!("{other:?}"),
        };
        let (plain, preferring) = (
            with(&[("idempotency-key", "k1")]),
            with(&[("idempotency-key", "k1"), ("prefer", "respond-async")]),
        );
        let plan = plan_of(&c, "/v1/x", &plain);
        assert_eq!(
            plan,
            CoveredPlan {
                max_body_bytes: 1000,
                accept_async: None,
                keep_for_fail_open: false,
                reconcile: None
            }
        );
        assert!(plan_of(&c, "/v1/x", &preferring).accept_async.is_some());
        assert!(plan_of(&c, "/open/x", &plain).keep_for_fail_open);
        let lookup = plan_of(&c, "/rc/x", &plain).reconcile.expect("the lookup");
        assert_eq!(lookup.url, "https://origin.example/lookup/k1");
        assert_eq!(lookup.scope_headers, c.scope.lookup_headers());
        // Observing: the Worker forwards as the request came, and the object never sends.
        let observing = {
            let vars = [("IDEMPOTENCY_ROUTES", routes), ("ASYNC_ACCEPT", "prefer"), ("MODE", "observe")];
            Config::from_vars(|name| vars.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)).unwrap()
        };
        for path in ["/v1/x", "/open/x", "/rc/x"] {
            let plan = plan_of(&observing, path, &preferring);
            assert_eq!(
                (plan.accept_async, plan.keep_for_fail_open, plan.reconcile),
                (None, false, None),
                "{path}"
            );
        }
    }

    #[test]
    fn a_missing_service_binding_refuses_before_anything_else() {
        let c = config(r#"[{"pattern":"/svc/*","origin_service":"PAYMENTS"}]"#, "");
        let none = with(&[]);
        let edge = decide(&head("GET", "/svc/x", &none), &c, |name| name != "PAYMENTS");
        let Edge::Refuse(problem) = edge else { panic!("{edge:?}") };
        assert_eq!(problem.status(), 500);
        assert!(problem.detail.contains("PAYMENTS"));
        assert_eq!(kind(&decide(&head("GET", "/svc/x", &none), &c, |_| true)), "pass");
    }

    #[test]
    fn later_refusals_say_what_happened() {
        assert_eq!(body_too_large(10).status(), 413);
        assert_eq!(
            (rate_limited().status(), rate_limited().retry_after),
            (429, Some(RATE_LIMIT_RETRY_AFTER_SECONDS))
        );
        assert!(rate_limiter_unbound("LIMITER").detail.contains("LIMITER"));
        assert_eq!(pass_through_unreachable().status(), 502);
        assert_eq!(namespace_unusable("IDEMPOTENCY_KEYS").status(), 500);
    }

    #[test]
    fn the_method_on_the_wire_is_spelt_in_capitals_and_an_unknown_one_is_get() {
        assert_eq!(method_on_the_wire("POST"), "POST");
        assert_eq!(method_on_the_wire("patch"), "PATCH");
        assert_eq!(method_on_the_wire("Report"), "REPORT");
        assert_eq!(method_on_the_wire("PROPFIND"), "GET");
        assert_eq!(method_on_the_wire(""), "GET");
    }
}
