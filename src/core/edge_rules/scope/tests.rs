use serde_json::json;

use super::*;
use crate::core::edge_rules::config::Config;
use crate::core::edge_rules::routes::VAR_ROUTES;
use crate::core::formats::fingerprint::object_name;
use crate::core::primitives::jwt::{base64url_encode, ClaimValue};

const SECRET: &str = "0123456789abcdef0123456789abcdef";

fn jwks() -> String {
    json!({"keys": [{"kty": "OKP", "crv": "Ed25519", "kid": "k", "x": base64url_encode(&[3; 32])}]})
        .to_string()
}

fn parse(vars: &[(&'static str, &str)]) -> Result<Config, ConfigError> {
    Config::from_vars(|name| vars.iter().find(|(n, _)| *n == name).map(|(_, v)| *v))
}

fn scope_config(vars: &[(&'static str, &str)]) -> ScopeConfig {
    parse(vars).unwrap().scope
}

#[test]
fn defaults_keep_todays_credential_scope_and_refuse_anonymous() {
    let config = scope_config(&[]);
    assert_eq!(config.headers, ["authorization"]);
    assert!(!config.allow_anonymous && !config.required && config.claim.is_none() && !config.has_keys());
    assert_eq!(config.validation, Validation { issuer: None, audience: None, leeway_seconds: 60 });
}

#[test]
fn values_are_parsed() {
    let jwks = jwks();
    let config = scope_config(&[
        (VAR_SCOPE_HEADER, " Authorization , Stripe-Account"),
        (VAR_ALLOW_ANONYMOUS, "TRUE"),
        (VAR_JWT_CLAIM, "org.id"),
        (VAR_JWKS, &jwks),
        (VAR_JWKS_URL, "https://idp.example/.well-known/jwks.json"),
        (VAR_JWT_HS256_SECRET, SECRET),
        (VAR_JWT_ISSUER, " https://idp.example "),
        (VAR_JWT_AUDIENCE, "payments"),
        (VAR_JWT_LEEWAY_SECONDS, "0"),
        (VAR_JWT_REQUIRED, "true"),
    ]);
    assert_eq!(config.headers, ["authorization", "stripe-account"]);
    assert!(config.allow_anonymous && config.required);
    assert_eq!(config.claim.as_ref().map(ClaimPath::as_str), Some("org.id"));
    assert_eq!(config.jwks.as_ref().map(|set| set.keys.len()), Some(1));
    assert_eq!(config.hs256_secret.as_ref().map(Secret::bytes), Some(SECRET.as_bytes()));
    assert!(!format!("{config:?}").contains(SECRET), "Debug must not show the secret");
    assert_eq!(config.validation.issuer.as_deref(), Some("https://idp.example"));
    assert_eq!(config.validation.audience.as_deref(), Some("payments"));
    assert_eq!(config.validation.leeway_seconds, 0);
    for url in ["http://127.0.0.1:9999/jwks", "http://localhost/jwks", "http://[::1]:80/j"] {
        assert_eq!(scope_config(&[(VAR_JWKS_URL, url)]).jwks_url.as_deref(), Some(url));
    }
}

#[test]
fn every_invalid_value_names_its_variable() {
    let jwks = jwks();
    let cases: Vec<(&'static str, Vec<(&'static str, &str)>)> = vec![
        (VAR_SCOPE_HEADER, vec![(VAR_SCOPE_HEADER, "Authorization,,X")]),
        (VAR_SCOPE_HEADER, vec![(VAR_SCOPE_HEADER, "Authorization, authorization")]),
        (VAR_SCOPE_HEADER, vec![(VAR_SCOPE_HEADER, "Bad Header")]),
        (VAR_SCOPE_HEADER, vec![(VAR_SCOPE_HEADER, "")]),
        (VAR_SCOPE_HEADER, vec![(VAR_SCOPE_HEADER, "a,b,c,d,e,f,g,h,i")]),
        (VAR_ALLOW_ANONYMOUS, vec![(VAR_ALLOW_ANONYMOUS, "yes")]),
        (VAR_JWT_REQUIRED, vec![(VAR_JWT_REQUIRED, "1")]),
        (VAR_JWT_REQUIRED, vec![(VAR_JWT_REQUIRED, "true")]),
        (VAR_JWT_CLAIM, vec![(VAR_JWT_CLAIM, "sub")]),
        (VAR_JWT_CLAIM, vec![(VAR_JWT_CLAIM, "org..id"), (VAR_JWKS, &jwks)]),
        (VAR_JWKS, vec![(VAR_JWKS, "{\"keys\":[]}")]),
        (VAR_JWKS, vec![(VAR_JWKS, "not json")]),
        (VAR_JWKS_URL, vec![(VAR_JWKS_URL, "http://idp.example/jwks")]),
        (VAR_JWKS_URL, vec![(VAR_JWKS_URL, "ftp://idp.example/jwks")]),
        (VAR_JWKS_URL, vec![(VAR_JWKS_URL, "https://")]),
        (VAR_JWKS_URL, vec![(VAR_JWKS_URL, "https://user@idp.example/")]),
        (VAR_JWKS_URL, vec![(VAR_JWKS_URL, "https://idp.example/a b")]),
        (VAR_JWKS_URL, vec![(VAR_JWKS_URL, "http://127.0.0.1.evil.example/")]),
        (VAR_JWT_HS256_SECRET, vec![(VAR_JWT_HS256_SECRET, "short")]),
        (VAR_JWT_LEEWAY_SECONDS, vec![(VAR_JWT_LEEWAY_SECONDS, "-1")]),
        (VAR_JWT_LEEWAY_SECONDS, vec![(VAR_JWT_LEEWAY_SECONDS, "3601")]),
        (VAR_JWT_LEEWAY_SECONDS, vec![(VAR_JWT_LEEWAY_SECONDS, "1m")]),
        (VAR_ROUTES, vec![(VAR_ROUTES, r#"[{"pattern":"/a","scope_claim":"sub"}]"#)]),
    ];
    for (variable, vars) in cases {
        let err = parse(&vars).expect_err(&format!("{vars:?}"));
        assert_eq!(err.variable, variable, "{vars:?}: {}", err.detail());
        assert!(!err.detail().contains(SECRET));
    }
}

#[test]
fn routes_may_name_a_claim_or_fall_back_to_the_credential() {
    let jwks = jwks();
    let routes = r#"[{"pattern":"/v1/opaque/*","scope_claim":""},
                     {"pattern":"/v1/org/*","scope_claim":"org.id","anonymous":"allow"},
                     {"pattern":"/v1/closed/*","anonymous":"deny"}]"#;
    let config = parse(&[
        (VAR_JWT_CLAIM, "sub"),
        (VAR_JWKS, &jwks),
        (VAR_ROUTES, routes),
        (VAR_ALLOW_ANONYMOUS, "true"),
    ])
    .unwrap();
    let claim = |path: &str| config.policy_for(path).scope.claim.map(|c| c.as_str().to_owned());
    assert_eq!(claim("/v1/charges"), Some("sub".into()));
    assert_eq!(claim("/v1/opaque/x"), None);
    assert_eq!(claim("/v1/org/x"), Some("org.id".into()));
    assert!(config.policy_for("/v1/charges").scope.anonymous_allowed);
    assert!(config.policy_for("/v1/org/x").scope.anonymous_allowed);
    assert!(!config.policy_for("/v1/closed/x").scope.anonymous_allowed);
    // SCOPE_JWT_REQUIRED with a claim on a route only is fine.
    assert!(parse(&[
        (VAR_JWKS, &jwks),
        (VAR_JWT_REQUIRED, "true"),
        (VAR_ROUTES, r#"[{"pattern":"/a","scope_claim":"sub"}]"#)
    ])
    .is_ok());
}

fn claim_config(required: bool) -> ScopeConfig {
    let jwks = jwks();
    scope_config(&[
        (VAR_SCOPE_HEADER, "Authorization, Stripe-Account"),
        (VAR_JWT_CLAIM, "sub"),
        (VAR_JWKS, &jwks),
        (VAR_JWT_REQUIRED, if required { "true" } else { "false" }),
    ])
}

fn policy(config: &ScopeConfig, anonymous_allowed: bool) -> ScopeRule<'_> {
    ScopeRule { claim: config.claim.as_ref(), anonymous_allowed }
}

fn identity(sub: &str) -> Identity {
    Identity {
        issuer: Some("https://idp".into()),
        claim_path: ClaimPath::parse("sub").unwrap(),
        value: ClaimValue::String(sub.into()),
    }
}

#[test]
fn without_a_claim_the_scope_is_todays_credential_hash() {
    let config = scope_config(&[]);
    let p = ScopeRule { claim: None, anonymous_allowed: false };
    let headers = [("authorization", Some(&b"Bearer sk_live_1"[..]))];
    let Start::Decided(scope, log) = start(&config, &p, &headers) else { panic!() };
    assert_eq!(scope, Scope::from_header(Some(b"Bearer sk_live_1")));
    assert_eq!(log, ScopeLog { kind: ScopeKind::Credential, unverified: None });
}

#[test]
fn absent_or_empty_credentials_are_refused_unless_anonymous_is_allowed() {
    let config = claim_config(false);
    for value in [None, Some(&b""[..]), Some(&b"  "[..])] {
        let headers = [("authorization", value), ("stripe-account", None)];
        let Start::Refused(problem) = start(&config, &policy(&config, false), &headers) else { panic!() };
        assert_eq!(problem.kind, ProblemKind::MissingCredential);
        assert!(problem.detail.contains("authorization"));
        let Start::Decided(scope, log) = start(&config, &policy(&config, true), &headers) else { panic!() };
        assert_eq!(scope, Scope::anonymous(&[ScopeField { name: "stripe-account", value: None }]));
        assert_eq!(log.kind, ScopeKind::Anonymous);
    }
    // Required verification outranks anonymous access.
    let required = claim_config(true);
    let headers = [("authorization", None), ("stripe-account", None)];
    let Start::Refused(problem) = start(&required, &policy(&required, true), &headers) else { panic!() };
    assert_eq!(problem.kind, ProblemKind::UnverifiedCredential);
}

#[test]
fn a_token_verifies_into_its_claim_scope_or_is_refused() {
    let config = claim_config(false);
    let p = policy(&config, false);
    let headers =
        [("authorization", Some(&b"bEaReR  eyJ.token.x "[..])), ("stripe-account", Some(&b"acct_A"[..]))];
    assert_eq!(start(&config, &p, &headers), Start::Verify("eyJ.token.x", config.claim.as_ref().unwrap()));
    // Verified for the route's own claim, when it names another than SCOPE_JWT_CLAIM.
    let account_claim = ClaimPath::parse("account").unwrap();
    let route = ScopeRule { claim: Some(&account_claim), anonymous_allowed: false };
    assert_eq!(start(&config, &route, &headers), Start::Verify("eyJ.token.x", &account_claim));
    let (verified, log) = finish(&config, &headers, Ok(identity("acct_1"))).unwrap();
    assert_eq!(log, ScopeLog { kind: ScopeKind::Claim, unverified: None });
    let account = [ScopeField { name: "stripe-account", value: Some(b"acct_A") }];
    assert_eq!(verified, Scope::claim(&identity("acct_1"), &account));
    // Another account under the same subject is another scope.
    let other = [("authorization", headers[0].1), ("stripe-account", Some(&b"acct_B"[..]))];
    assert_ne!(finish(&config, &other, Ok(identity("acct_1"))).unwrap().0, verified);

    // A token that cannot be verified has no scope at all: never its credential hash,
    // which another isolate (with the keys) would not give the same retry.
    for reason in Unverified::ALL {
        let outcome = finish(&config, &headers, Err(reason));
        match reason {
            // Not a token at all: an opaque API key keeps its credential hash.
            Unverified::Malformed => {
                let (fallback, log) = outcome.unwrap();
                assert_eq!(log, ScopeLog { kind: ScopeKind::Credential, unverified: Some(reason) });
                assert_eq!(fallback, Scope::credential(b"bEaReR  eyJ.token.x ", &account));
                assert_ne!(object_name(fallback, "k"), object_name(verified, "k"));
            }
            Unverified::KeysUnavailable => {
                let problem = outcome.unwrap_err();
                assert_eq!(problem.kind, ProblemKind::IdentityUnavailable);
                assert_eq!(problem.status(), 503);
                assert_eq!(problem.retry_after, Some(JWKS_RETRY_SECONDS));
                assert!(problem.detail.contains("keys-unavailable"));
            }
            _ => {
                let problem = outcome.unwrap_err();
                assert_eq!(problem.kind, ProblemKind::UnverifiedCredential, "{reason:?}");
                assert_eq!(problem.status(), 401);
                assert!(problem.detail.contains(reason.slug()) && !problem.detail.contains("token.x"));
            }
        }
        assert_eq!(reason.is_transient(), reason == Unverified::KeysUnavailable);
    }
    // Not UTF-8: not a token, so its credential hash.
    let binary = [("authorization", Some(&b"Bearer \xff"[..])), ("stripe-account", None)];
    let Start::Decided(_, log) = start(&config, &p, &binary) else { panic!() };
    assert_eq!(log.unverified, Some(Unverified::Malformed));
}

#[test]
fn required_verification_refuses_unverified_tokens() {
    let config = claim_config(true);
    let headers = [("authorization", Some(&b"Bearer x.y.z"[..])), ("stripe-account", None)];
    let problem = finish(&config, &headers, Err(Unverified::Expired)).unwrap_err();
    assert_eq!(problem.kind, ProblemKind::UnverifiedCredential);
    assert_eq!(problem.status(), 401);
    assert!(problem.detail.contains("expired") && !problem.detail.contains("x.y.z"));
    assert!(finish(&config, &headers, Ok(identity("a"))).is_ok());
    // Required: an opaque credential is refused too; keys that cannot be had are still 503.
    let opaque = finish(&config, &headers, Err(Unverified::Malformed)).unwrap_err();
    assert_eq!(opaque.kind, ProblemKind::UnverifiedCredential);
    let transient = finish(&config, &headers, Err(Unverified::KeysUnavailable)).unwrap_err();
    assert_eq!(transient.kind, ProblemKind::IdentityUnavailable);
}

#[test]
fn bearer_tokens() {
    assert_eq!(bearer_token(b"Bearer abc"), Some("abc"));
    assert_eq!(bearer_token(b"BEARER   abc "), Some("abc"));
    assert_eq!(bearer_token(b"abc.def.ghi"), Some("abc.def.ghi"));
    assert_eq!(bearer_token(b"Basic dXNlcg=="), Some("Basic dXNlcg=="));
    assert_eq!(bearer_token(b"Bearer "), Some("Bearer"));
    assert_eq!(bearer_token(b"   "), None);
    assert_eq!(bearer_token(b"\xff"), None);
}

#[test]
fn scope_logs_round_trip() {
    let mut logs = vec![
        ScopeLog { kind: ScopeKind::Claim, unverified: None },
        ScopeLog { kind: ScopeKind::Credential, unverified: None },
        ScopeLog { kind: ScopeKind::Anonymous, unverified: None },
    ];
    logs.extend(
        Unverified::ALL.map(|reason| ScopeLog { kind: ScopeKind::Credential, unverified: Some(reason) }),
    );
    for log in logs {
        assert_eq!(ScopeLog::decode(&log.encode()), Some(log), "{}", log.encode());
    }
    for bad in ["", "claims", "credential unverified=", "credential x=expired", "credential unverified=nope"]
    {
        assert_eq!(ScopeLog::decode(bad), None, "{bad}");
    }
}

#[test]
fn a_key_within_the_limit_goes_on_one_over_refuses_and_a_failed_limiter_lets_through() {
    assert_eq!(after_limit(Ok(true)), AfterLimit::Next);
    assert_eq!(after_limit(Ok(false)), AfterLimit::Over);
    assert_eq!(
        after_limit(Err("binding threw".to_owned())),
        AfterLimit::LetThrough("rate limiter failed, request let through: binding threw".to_owned())
    );
}

#[test]
fn unverified_scopes_are_rate_limited_per_ip_too() {
    use crate::core::formats::fingerprint::Digest256;
    let ip = Some("203.0.113.7");
    let salt = Digest256([0xab; 32]);
    let scope_key = format!("scope:{}", salt.to_hex());
    assert_eq!(rate_limit_keys(ScopeKind::Claim, &salt, None, ip), vec![scope_key.clone()]);
    assert_eq!(
        rate_limit_keys(ScopeKind::Credential, &salt, None, ip),
        vec!["ip:203.0.113.7".to_owned(), scope_key],
        "the IP is asked first"
    );
    assert_eq!(rate_limit_keys(ScopeKind::Anonymous, &salt, None, ip), vec!["ip:203.0.113.7".to_owned()]);
    // Two random credentials from one IP share its key.
    let one = rate_limit_keys(ScopeKind::Credential, &Digest256([1; 32]), None, ip);
    let two = rate_limit_keys(ScopeKind::Credential, &Digest256([2; 32]), None, ip);
    assert_eq!(one[0], two[0]);
    assert_ne!(one[1], two[1]);
}

/// One IP cannot hold another caller at the limit: the limiter is asked in order and stops
/// at the first key over (`runtime::rate_limit`), so the IP's count comes first;
/// and where the scope is a key id that anyone may send (it binds replays), a stranger's
/// requests under the victim's key id count under the stranger's own credential.
#[test]
fn one_ip_cannot_spend_the_count_of_a_scope_it_does_not_hold() {
    let by_key_id = scope_config(&[(VAR_SCOPE_HEADER, "X-Api-Key-Id")]);
    let victim_id = [("x-api-key-id", Some(&b"kid_victim"[..]))];
    let Start::Decided(scope, log) = start(&by_key_id, &policy(&by_key_id, false), &victim_id) else {
        panic!("a key id decides the scope")
    };
    let salt = scope.key_salt();
    let binding = |credential: &'static [u8]| {
        caller_binding(&by_key_id, log.kind, &[("authorization", Some(credential))]).expect("a binding")
    };
    let (victim, stranger) = (binding(b"Signature victim"), binding(b"Signature stranger"));
    let victims = rate_limit_keys(log.kind, &salt, Some(&victim), Some("198.51.100.1"));
    let strangers = rate_limit_keys(log.kind, &salt, Some(&stranger), Some("203.0.113.9"));
    assert_eq!(strangers[0], "ip:203.0.113.9", "the stranger's own IP is asked first");
    assert_ne!(victims[1], strangers[1], "the stranger counts apart from the victim");
    assert_eq!(victims, rate_limit_keys(log.kind, &salt, Some(&victim), Some("198.51.100.1")));
    assert!(victims[1].starts_with("scope:") && victims[1].len() == "scope:".len() + 64);
    assert_ne!(victims[1], format!("scope:{}", salt.to_hex()), "the bound key is not the bare scope's");
    // Neither the salt nor the binding can be read in the key.
    assert!(!victims[1].contains(&salt.to_hex()) && !victims[1].contains(&victim.to_hex()));
    // Without a binding (the default scope is the secret itself) nothing changes.
    let default = scope_config(&[]);
    let auth = [("authorization", Some(&b"Bearer a"[..]))];
    assert_eq!(caller_binding(&default, ScopeKind::Credential, &auth), None);
}

#[test]
fn a_scope_from_a_non_secret_header_binds_each_key_to_the_replay_credential() {
    use crate::core::formats::fingerprint::bound_to_caller;
    // The default: the scope is the credential itself, so nothing is bound and every
    // fingerprint stays as it was.
    let default = scope_config(&[]);
    assert!(!default.binds_replays());
    let auth = [("authorization", Some(&b"Bearer a"[..]))];
    assert_eq!(caller_binding(&default, ScopeKind::Credential, &auth), None);
    let fp = crate::core::formats::fingerprint::Digest256([5; 32]);
    assert_eq!(bound_to_caller(fp, None), fp);

    // A signature scheme scoped by its key id: the Authorization value binds the key.
    let by_key_id = scope_config(&[(VAR_SCOPE_HEADER, "X-Api-Key-Id")]);
    assert!(by_key_id.binds_replays());
    let victim =
        caller_binding(&by_key_id, ScopeKind::Credential, &[("authorization", Some(b"Signature v"))]);
    let stranger =
        caller_binding(&by_key_id, ScopeKind::Credential, &[("authorization", Some(b"Signature s"))]);
    let absent = caller_binding(&by_key_id, ScopeKind::Credential, &[("authorization", None)]);
    let empty = caller_binding(&by_key_id, ScopeKind::Credential, &[("authorization", Some(b""))]);
    assert!(victim.is_some());
    for other in [stranger, absent, empty] {
        assert_ne!(
            bound_to_caller(fp, victim),
            bound_to_caller(fp, other),
            "another credential, another request"
        );
    }
    assert_ne!(absent, empty, "absent and empty differ");
    assert_ne!(bound_to_caller(fp, victim), fp);
    // Anonymous scopes are bound too; a verified claim is the caller itself.
    assert!(caller_binding(&by_key_id, ScopeKind::Anonymous, &[("authorization", None)]).is_some());
    assert_eq!(caller_binding(&by_key_id, ScopeKind::Claim, &[("authorization", Some(b"Bearer t"))]), None);

    // Headers of the operator's choosing; the scope's own headers never need binding.
    let signed = scope_config(&[
        (VAR_SCOPE_HEADER, "X-Api-Key-Id"),
        (VAR_REPLAY_CREDENTIAL_HEADERS, "Signature, Signature-Input"),
    ]);
    assert_eq!(signed.replay_headers, vec!["signature".to_owned(), "signature-input".to_owned()]);
    assert!(signed.binds_replays());
    let covered =
        scope_config(&[(VAR_SCOPE_HEADER, "X-Api-Key"), (VAR_REPLAY_CREDENTIAL_HEADERS, "x-api-key")]);
    assert!(!covered.binds_replays());
    let bad = ScopeConfig::from_vars(&|name| (name == VAR_REPLAY_CREDENTIAL_HEADERS).then_some("a b"));
    assert_eq!(bad.unwrap_err().variable, VAR_REPLAY_CREDENTIAL_HEADERS);
}

#[test]
fn a_loopback_address_is_what_the_standard_parser_calls_one() {
    let std_reads = |host: &str| host.parse::<std::net::Ipv4Addr>().is_ok_and(|ip| ip.is_loopback());
    for host in [
        "127.0.0.1",
        "127.255.255.255",
        "127.1.2.3",
        "126.0.0.1",
        "128.0.0.1",
        "127.0.0",
        "127.0.0.1.",
        "127.0.0.1.1",
        "127.0.0.01",
        "0127.0.0.1",
        "127.0.0.256",
        "127.0.0.+1",
        "127.0.0. 1",
        "127..0.1",
        "1.2.3.4",
        "",
        "127",
        "127.000.0.1",
        "127.0.0.1000",
        "localhost",
        "::1",
        "127.0.0.1:80",
    ] {
        assert_eq!(is_loopback_ipv4(host), std_reads(host), "{host:?}");
    }
}

proptest::proptest! {
    #[test]
    fn any_dotted_text_is_judged_as_the_standard_parser_judges_it(host in "(12[6-8]|0|00|1|[0-9]{1,4})(\\.[0-9+ ]{0,4}){0,5}") {
        let std_reads = host.parse::<std::net::Ipv4Addr>().is_ok_and(|ip| ip.is_loopback());
        proptest::prop_assert_eq!(is_loopback_ipv4(&host), std_reads, "{:?}", host);
    }
}
