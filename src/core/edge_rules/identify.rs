//! A covered request identified, once its caller's scope is known: its payload fingerprint,
//! its object's name, the keys the rate limit counts it by, and the call its object gets.
//!
//! Enforce and observe mode identify the same way, so that both reach the same object with
//! the same fingerprint, and build the object's call (`core::edge_rules::wire::KeyCall`) in one place
//! ([`key_call`]), each with what its mode asks: the Worker's complete plan for the request
//! (`core::edge_rules::edge::CoveredPlan`) says what enforcing adds (asynchronous acceptance, the
//! lookup). The scope itself is `core::edge_rules::scope`'s (after a token's check, which the runtime
//! makes).

use super::config::{Config, PathConfig};
use super::edge::CoveredPlan;
use super::headers::HeaderLines;
use super::scope::{caller_binding, rate_limit_keys, ScopeLog};
use super::wire::{KeyCall, KeyStep};
use crate::core::formats::fingerprint::{
    bound_to_caller, fingerprint, object_name, Digest256, Payload, Scope,
};
use crate::core::formats::keyed_name::keyed_object_name;
use crate::core::primitives::key::IdempotencyKey;
use crate::core::vocabulary::key_terms::Mode;
use crate::core::vocabulary::trace::Trace;

/// What [`identified`] reads of a covered request besides its scope.
pub struct Arrived<'a> {
    pub headers: &'a HeaderLines,
    pub method: &'a str,
    pub path_and_query: &'a str,
    pub key: &'a IdempotencyKey,
    pub config: &'a Config,
    pub policy: &'a PathConfig<'a>,
    pub body: &'a [u8],
    /// `OBJECT_NAME_KEY`, when set: the object's name is then keyed (`core::formats::keyed_name`).
    pub name_key: Option<&'a [u8]>,
}

/// Who a covered request belongs to and what it asks for: its fingerprint, its object's
/// name, the scope's key salt, the scope for the log line, and the key's binding to the
/// caller's replay credential (`core::edge_rules::scope`, rule 5), which the rate limit counts by.
#[derive(Clone, PartialEq, Eq)]
pub struct Identified {
    pub fingerprint: Digest256,
    pub name: String,
    pub scope_salt: Digest256,
    pub scope_log: ScopeLog,
    pub binding: Option<Digest256>,
}

/// The values of the headers `names` (lowercase), in that order.
pub fn header_values(headers: &HeaderLines, names: &[String]) -> Vec<Option<String>> {
    names.iter().map(|name| headers.get(name)).collect()
}

/// `names` beside their `values` as the core reads headers: (lowercase name, bytes if present).
pub fn named_values<'a>(
    names: &'a [String],
    values: &'a [Option<String>],
) -> Vec<(&'a str, Option<&'a [u8]>)> {
    names
        .iter()
        .map(String::as_str)
        .zip(values.iter().map(|value| value.as_deref().map(str::as_bytes)))
        .collect()
}

/// A covered request identified once its scope is known: the fingerprint and the object's name.
pub fn identified(request: &Arrived<'_>, scope: Scope, scope_log: ScopeLog) -> Identified {
    let Arrived { headers, method, path_and_query, key, config, policy, body, name_key } = *request;
    let scope_salt = scope.key_salt();
    let content_type = headers.get("content-type");
    let extra_values = header_values(headers, policy.fingerprint_headers);
    let extra_headers: Vec<(&str, Option<&str>)> = policy
        .fingerprint_headers
        .iter()
        .map(String::as_str)
        .zip(extra_values.iter().map(Option::as_deref))
        .collect();
    let payload = Payload {
        method,
        path_and_query,
        content_type: content_type.as_deref(),
        extra_headers: &extra_headers,
        body,
        body_shape: policy.body_shape,
    };
    // Rule 5 of `core::edge_rules::scope`: a replay goes only to the original's credential. The values
    // are read only where a binding can apply (never with the default scope).
    let binding = if config.scope.binds_replays() {
        let values = header_values(headers, &config.scope.replay_headers);
        let replay = named_values(&config.scope.replay_headers, &values);
        caller_binding(&config.scope, scope_log.kind, &replay)
    } else {
        None
    };
    Identified {
        fingerprint: bound_to_caller(fingerprint(&payload), binding),
        name: keyed_object_name(name_key, object_name(scope, key.as_str())),
        scope_salt,
        scope_log,
        binding,
    }
}

impl Identified {
    /// The keys the rate limit counts this request by, in the order they are asked
    /// (`core::edge_rules::scope::rate_limit_keys`); `client_ip` is the connecting IP.
    pub fn rate_limit_keys(&self, client_ip: Option<&str>) -> Vec<String> {
        rate_limit_keys(self.scope_log.kind, &self.scope_salt, self.binding.as_ref(), client_ip)
    }
}

/// The call a covered request's object gets, in either mode: enforcing, the step with the
/// plan's asynchronous acceptance, the origin probe and the plan's lookup; observing, the
/// arrival, which neither forwards nor looks up (the Worker forwards).
pub fn key_call(
    config: &Config,
    policy: &PathConfig<'_>,
    plan: &CoveredPlan,
    identified: &Identified,
    body_bytes: u64,
    trace: Trace,
) -> KeyCall {
    let enforce = policy.mode == Mode::Enforce;
    KeyCall {
        fingerprint: identified.fingerprint,
        scope_salt: identified.scope_salt,
        scope: identified.scope_log,
        policy: config.key_terms(policy),
        body_bytes,
        probe_origin: enforce && config.probes_origin(policy),
        step: match policy.mode {
            Mode::Enforce => KeyStep::Enforce { accept_async: plan.accept_async },
            Mode::Observe => KeyStep::ObserveArrival,
        },
        trace,
        reconcile: plan.reconcile.clone().filter(|_| enforce),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::edge_rules::edge::{decide, Edge, RequestHead};
    use crate::core::edge_rules::scope::{start, Start};

    const ROUTES: &str = r#"[{"pattern":"/rc/*","reconcile_url":"https://origin.example/lookup/{key}"}]"#;

    fn config(mode: &str) -> Config {
        let vars = [("IDEMPOTENCY_ROUTES", ROUTES), ("MODE", mode), ("ASYNC_ACCEPT", "prefer")];
        Config::from_vars(|name| vars.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)).unwrap()
    }

    /// Identifies `body` POSTed to `path` under `config`, and builds its object's call.
    fn call_for(config: &Config, path: &str, body: &[u8]) -> (Identified, KeyCall) {
        let headers = HeaderLines::new(
            "authorization\nBearer abc\ncontent-type\napplication/json\nidempotency-key\nk1\nprefer\nrespond-async\n"
                .to_owned(),
        );
        let read = |name: &str| Ok(headers.get(name));
        let head = RequestHead { method: "POST", path, admin_enabled: false, header: &read };
        let Edge::Covered { policy, key, plan } = decide(&head, config, |_| true) else {
            panic!("not covered")
        };
        let values = header_values(&headers, &config.scope.headers);
        let pairs = named_values(&config.scope.headers, &values);
        let Start::Decided(scope, scope_log) = start(&config.scope, &policy.scope, &pairs) else {
            panic!("the scope needs no token here")
        };
        let arrived = Arrived {
            headers: &headers,
            method: "POST",
            path_and_query: path,
            key: &key,
            config,
            policy: &policy,
            body,
            name_key: None,
        };
        let identified = identified(&arrived, scope, scope_log);
        let call = key_call(config, &policy, &plan, &identified, body.len() as u64, Trace::default());
        (identified, call)
    }

    /// Both modes reach the same object with the same fingerprint; only the call's step,
    /// probe and lookup differ, as the plan and the mode say.
    #[test]
    fn enforce_and_observe_identify_alike_and_build_their_call_in_one_place() {
        let (enforce, observe) = (config("enforce"), config("observe"));
        let (enforced, call) = call_for(&enforce, "/rc/x", br#"{"a":1}"#);
        let (observed, observed_call) = call_for(&observe, "/rc/x", br#"{"a":1}"#);
        assert!(enforced == observed, "the same identity in both modes");
        assert_eq!(
            (call.fingerprint, call.scope_salt, call.body_bytes),
            (enforced.fingerprint, enforced.scope_salt, 7)
        );
        assert!(matches!(call.step, KeyStep::Enforce { accept_async: Some(_) }));
        assert_eq!(
            call.reconcile.map(|lookup| lookup.url),
            Some("https://origin.example/lookup/k1".to_owned())
        );
        assert_eq!(observed_call.step, KeyStep::ObserveArrival);
        assert_eq!((observed_call.probe_origin, observed_call.reconcile), (false, None));
        // Another payload, another fingerprint; the same key, the same object.
        let (other, _) = call_for(&enforce, "/rc/x", br#"{"a":2}"#);
        assert!(other.fingerprint != enforced.fingerprint && other.name == enforced.name);
        // The rate limit counts a credential's caller by its scope, never by the IP alone.
        let keys = enforced.rate_limit_keys(Some("192.0.2.1"));
        assert!(!keys.is_empty() && keys.iter().all(|key| !key.contains("abc")), "{keys:?}");
    }
}
