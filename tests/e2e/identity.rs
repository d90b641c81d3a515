//! End-to-end tests of the caller's scope: keys scoped by a verified JWT claim,
//! tokens that cannot be verified refused (401, or 503 while the keys cannot be had: issue
//! 20.3), opaque credentials scoped by their hash, anonymous callers and on-behalf-of
//! headers, in real workerd in
//! front of a real loopback origin. Tokens are minted here with real keys (RSA 2048, P-256,
//! Ed25519, an HMAC secret); the worker checks them with WebCrypto.
//!
//! Instances (shared by the tests of this binary):
//! - `jwt_worker()`: `SCOPE_JWT_CLAIM=sub`, an inline JWKS with one key of each type, an
//!   HS256 secret, issuer and audience, `SCOPE_HEADER: Authorization, Stripe-Account`;
//!   routes `/v1/opaque/*` (`scope_claim: ""`), `/v1/open/*` (`anonymous: "allow"`), and
//!   `/v1/org/*`, `/v1/org-pointer/*`, `/v1/org-named/*` (`scope_claim` `org.id`, `/org/id`,
//!   `/org.id`);
//! - `required_worker()`: the same keys with `SCOPE_JWT_REQUIRED=true` and no leeway;
//! - `url_worker()`: keys from `SCOPE_JWKS_URL`, served by [`JwksServer`] on loopback;
//! - `down_worker()`: `SCOPE_JWKS_URL` where nothing listens, and `ALLOW_ANONYMOUS=true`;
//! - one instance of its own that is restarted with the JWKS URL reachable.
//!
//! Prerequisites: `./scripts/test.sh` (installs the toolchain and builds the worker).

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use rsa::pkcs8::{EncodePublicKey, LineEnding};
use rsa::signature::{SignatureEncoding, Signer};
use rsa::traits::PublicKeyParts;
use serde_json::{json, Value};
use sha2::Sha256;

use crate::support::assert::{assert_limited_on_the_third, assert_problem};
use crate::support::http::{Request, Response};
use crate::support::logs::sentinel;
use crate::support::origin::Origin;
use crate::support::requests::unique;
use crate::support::worker::{
    free_port, key_object_toml, rate_limit_toml, shared, within_one_rate_limit_period, Readiness, Worker,
    WorkerConfig,
};

const ISSUER: &str = "https://idp.e2e.test";
const AUDIENCE: &str = "payments";
const BODY: &str = r#"{"amount":1000,"currency":"eur"}"#;

// ---------------------------------------------------------------------------------------
// Keys and tokens

/// One key of each kind the worker verifies, generated once per test run.
struct Keys {
    rsa: rsa::RsaPrivateKey,
    ec: p256::ecdsa::SigningKey,
    /// A second P-256 key, published only after a rotation (url_worker).
    ec_rotated: p256::ecdsa::SigningKey,
    /// A P-256 key that no JWKS holds.
    ec_foreign: p256::ecdsa::SigningKey,
    ed: ed25519_dalek::SigningKey,
    hs256: String,
}

fn keys() -> &'static Keys {
    static KEYS: OnceLock<Keys> = OnceLock::new();
    KEYS.get_or_init(|| {
        let mut rng = rand_core::OsRng;
        Keys {
            rsa: rsa::RsaPrivateKey::new(&mut rng, 2048).expect("an RSA key"),
            ec: p256::ecdsa::SigningKey::random(&mut rng),
            ec_rotated: p256::ecdsa::SigningKey::random(&mut rng),
            ec_foreign: p256::ecdsa::SigningKey::random(&mut rng),
            ed: ed25519_dalek::SigningKey::generate(&mut rng),
            hs256: unique("hs256-secret-for-e2e-tests"),
        }
    })
}

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

fn rsa_jwk(kid: &str) -> Value {
    let public = keys().rsa.to_public_key();
    json!({"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256",
           "n": b64(&public.n().to_bytes_be()), "e": b64(&public.e().to_bytes_be())})
}

fn ec_jwk(kid: &str, key: &p256::ecdsa::SigningKey) -> Value {
    let point = key.verifying_key().to_encoded_point(false);
    json!({"kty": "EC", "crv": "P-256", "kid": kid,
           "x": b64(point.x().expect("x")), "y": b64(point.y().expect("y"))})
}

fn ed_jwk(kid: &str) -> Value {
    json!({"kty": "OKP", "crv": "Ed25519", "kid": kid, "x": b64(keys().ed.verifying_key().as_bytes())})
}

fn inline_jwks() -> String {
    json!({"keys": [rsa_jwk("rsa-1"), ec_jwk("ec-1", &keys().ec), ed_jwk("ed-1")]}).to_string()
}

/// How a test token is signed.
#[derive(Clone, Copy, Debug)]
enum Signing {
    Rs256,
    Es256,
    EdDsa,
    Hs256,
    /// ES256 under `kid: ec-1`, but signed with a key no JWKS holds.
    Es256Forged,
    /// ES256 with the key published only after the rotation, `kid: ec-2`.
    Es256Rotated,
    /// ES256 with a key nobody published, under a `kid` nobody knows.
    Es256UnknownKid,
    /// `alg: none`, empty signature.
    None,
    /// HS256 with the RSA public key (PEM) as the HMAC secret: algorithm confusion.
    Hs256WithPublicKey,
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("a clock after 1970").as_secs()
}

/// Claims for `sub`, valid for five minutes, with a unique `jti` so every token differs.
fn claims(sub: &str) -> Value {
    crate::support::requests::register_secret(sub);
    json!({"iss": ISSUER, "aud": [AUDIENCE, "other"], "sub": sub, "iat": now(), "exp": now() + 300,
           "jti": unique("jti")})
}

fn mint(signing: Signing, claims: &Value) -> String {
    mint_text(signing, &claims.to_string())
}

/// [`mint`] over claims written as JSON text, so that a number keeps every digit.
fn mint_text(signing: Signing, claims: &str) -> String {
    let k = keys();
    let (alg, kid) = match signing {
        Signing::Rs256 => ("RS256", Some("rsa-1")),
        Signing::Es256 | Signing::Es256Forged => ("ES256", Some("ec-1")),
        Signing::Es256Rotated => ("ES256", Some("ec-2")),
        Signing::Es256UnknownKid => ("ES256", Some("ec-unknown")),
        Signing::EdDsa => ("EdDSA", Some("ed-1")),
        Signing::Hs256 => ("HS256", None),
        Signing::Hs256WithPublicKey => ("HS256", Some("rsa-1")),
        Signing::None => ("none", None),
    };
    let mut header = json!({"alg": alg, "typ": "JWT"});
    if let Some(kid) = kid {
        header["kid"] = json!(kid);
    }
    let input = format!("{}.{}", b64(header.to_string().as_bytes()), b64(claims.as_bytes()));
    let es256 = |key: &p256::ecdsa::SigningKey| {
        let signature: p256::ecdsa::Signature = key.sign(input.as_bytes());
        signature.to_bytes().to_vec()
    };
    let hmac = |secret: &[u8]| {
        let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("any key length");
        mac.update(input.as_bytes());
        mac.finalize().into_bytes().to_vec()
    };
    let signature = match signing {
        Signing::Rs256 => {
            rsa::pkcs1v15::SigningKey::<Sha256>::new(k.rsa.clone()).sign(input.as_bytes()).to_vec()
        }
        Signing::Es256 => es256(&k.ec),
        Signing::Es256Rotated => es256(&k.ec_rotated),
        Signing::Es256Forged | Signing::Es256UnknownKid => es256(&k.ec_foreign),
        Signing::EdDsa => ed25519_dalek::Signer::sign(&k.ed, input.as_bytes()).to_bytes().to_vec(),
        Signing::Hs256 => hmac(k.hs256.as_bytes()),
        Signing::Hs256WithPublicKey => {
            let pem = k.rsa.to_public_key().to_public_key_pem(LineEnding::LF).expect("a PEM");
            hmac(pem.as_bytes())
        }
        Signing::None => Vec::new(),
    };
    let token = format!("{input}.{}", b64(&signature));
    crate::support::requests::register_secret(&token);
    token
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

// ---------------------------------------------------------------------------------------
// Shared instances

fn origin() -> &'static Origin {
    static ORIGIN: OnceLock<Origin> = OnceLock::new();
    ORIGIN.get_or_init(Origin::start)
}

fn base_vars() -> Vec<(String, String)> {
    [
        ("ORIGIN_URL", origin().url()),
        ("IDEMPOTENCY_TTL_SECONDS", "600".to_string()),
        ("DUPLICATE_WAIT_SECONDS", "5".to_string()),
        ("ORIGIN_TIMEOUT_SECONDS", "12".to_string()),
        ("SCOPE_JWT_CLAIM", "sub".to_string()),
        ("SCOPE_JWT_ISSUER", ISSUER.to_string()),
        ("SCOPE_JWT_AUDIENCE", AUDIENCE.to_string()),
    ]
    .into_iter()
    .map(|(n, v)| (n.to_string(), v))
    .collect()
}

fn start(name: &str, extra: &[(&str, String)]) -> Result<Worker, String> {
    let mut vars = base_vars();
    vars.extend(extra.iter().map(|(n, v)| (n.to_string(), v.clone())));
    Worker::start(WorkerConfig { name: name.into(), vars, readiness: Readiness::OriginAnswers })
}

fn jwt_worker() -> &'static Worker {
    static CELL: OnceLock<Result<Worker, String>> = OnceLock::new();
    shared(&CELL, || {
        start(
            "jwt",
            &[
                ("SCOPE_JWKS", inline_jwks()),
                ("SCOPE_JWT_HS256_SECRET", keys().hs256.clone()),
                ("SCOPE_HEADER", "Authorization, Stripe-Account".to_string()),
                (
                    "IDEMPOTENCY_ROUTES",
                    r#"[{"pattern":"/v1/opaque/*","scope_claim":""},{"pattern":"/v1/open/*","anonymous":"allow"},
                        {"pattern":"/v1/org/*","scope_claim":"org.id"},
                        {"pattern":"/v1/org-pointer/*","scope_claim":"/org/id"},
                        {"pattern":"/v1/org-named/*","scope_claim":"/org.id"}]"#
                        .to_string(),
                ),
            ],
        )
    })
}

fn required_worker() -> &'static Worker {
    static CELL: OnceLock<Result<Worker, String>> = OnceLock::new();
    shared(&CELL, || {
        start(
            "jwt-required",
            &[
                ("SCOPE_JWKS", inline_jwks()),
                ("SCOPE_JWT_HS256_SECRET", keys().hs256.clone()),
                ("SCOPE_JWT_REQUIRED", "true".to_string()),
                // No leeway, so a token's expiry comes within the test's patience.
                ("SCOPE_JWT_LEEWAY_SECONDS", "0".to_string()),
            ],
        )
    })
}

/// Verified claims with a rate limit of two calls a minute on `/v1/limited/*`.
fn limited_worker() -> &'static Worker {
    static CELL: OnceLock<Result<Worker, String>> = OnceLock::new();
    shared(&CELL, || {
        let mut vars = base_vars();
        vars.extend([
            ("SCOPE_JWT_HS256_SECRET".to_string(), keys().hs256.clone()),
            (
                "IDEMPOTENCY_ROUTES".to_string(),
                r#"[{"pattern":"/v1/limited/*","rate_limit":"RATE_LIMITER"},{"pattern":"/*","rate_limit":false}]"#
                    .to_string(),
            ),
        ]);
        Worker::start_with_config(
            WorkerConfig { name: "jwt-limited".into(), vars, readiness: Readiness::OriginAnswers },
            &key_object_toml("jwt-limited", &rate_limit_toml("RATE_LIMITER", 1101, 2)),
        )
    })
}

fn jwks_server() -> &'static JwksServer {
    static SERVER: OnceLock<JwksServer> = OnceLock::new();
    SERVER.get_or_init(|| JwksServer::start(json!({"keys": [ec_jwk("ec-1", &keys().ec)]}).to_string()))
}

fn url_worker() -> &'static Worker {
    static CELL: OnceLock<Result<Worker, String>> = OnceLock::new();
    shared(&CELL, || start("jwks-url", &[("SCOPE_JWKS_URL", jwks_server().url())]))
}

fn down_worker() -> &'static Worker {
    static CELL: OnceLock<Result<Worker, String>> = OnceLock::new();
    shared(&CELL, || {
        let nothing_listens = format!("http://127.0.0.1:{}/jwks.json", free_port());
        start("jwks-down", &[("SCOPE_JWKS_URL", nothing_listens), ("ALLOW_ANONYMOUS", "true".to_string())])
    })
}

/// A JWKS on loopback: serves the current document with `Cache-Control: max-age=600`, each
/// answer after `delay`, one connection at a time, and counts fetches.
struct JwksServer {
    port: u16,
    document: Arc<Mutex<String>>,
    fetches: Arc<AtomicUsize>,
}

impl JwksServer {
    fn start(document: String) -> JwksServer {
        JwksServer::start_slow(document, Duration::ZERO)
    }

    fn start_slow(document: String, delay: Duration) -> JwksServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the JWKS server");
        let port = listener.local_addr().expect("its address").port();
        let server = JwksServer { port, document: Arc::new(Mutex::new(document)), fetches: Arc::default() };
        let (document, fetches) = (server.document.clone(), server.fetches.clone());
        thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let mut stream = stream;
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).is_ok_and(|n| n == 1) {
                    head.push(byte[0]);
                }
                fetches.fetch_add(1, Ordering::SeqCst);
                thread::sleep(delay);
                let body = document.lock().expect("the document").clone();
                let reply = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nCache-Control: public, max-age=600\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(reply.as_bytes());
            }
        });
        server
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/.well-known/jwks.json", self.port)
    }

    fn publish(&self, document: String) {
        *self.document.lock().expect("the document") = document;
    }

    fn fetches(&self) -> usize {
        self.fetches.load(Ordering::SeqCst)
    }
}

// ---------------------------------------------------------------------------------------
// Helpers

fn new_path(prefix: &str) -> String {
    format!("{prefix}{}", unique("p"))
}

fn charge(path: &str, key: &str, authorization: &str) -> Request {
    Request::post(path).header("Idempotency-Key", key).header("Authorization", authorization).json(BODY)
}

/// The origin's execution serial of a response it produced.
fn executed(r: &Response) -> String {
    assert_eq!(r.status, 201, "expected 201 from the origin, got {r:?}");
    assert!(r.has_header("x-origin-execution"), "expected an answer from the origin: {r:?}");
    r.header("x-origin-execution").unwrap_or_default().to_owned()
}

/// A fresh first attempt: executed at the origin, not replayed.
fn assert_executed(r: &Response) -> String {
    assert!(!r.is_replayed(), "expected a first execution, got a replay: {r:?}");
    executed(r)
}

fn assert_replay_of(replay: &Response, execution: &str) {
    assert!(replay.is_replayed(), "expected a replay, got {replay:?}");
    assert_eq!(executed(replay), execution, "the replay carries the original execution");
}

/// Sends `request` (a new key, from the caller under test) with a marker status no other
/// request to `w` gets, and checks that its own decision line names `scope`: never a line
/// another test's request could have written.
fn assert_scope_logged(w: &Worker, request: Request, scope: &str) {
    let marker = w.next_marker_status();
    let r = w.send(&request.header("x-test-status", marker.to_string()));
    assert_eq!(r.status, marker, "{r:?}");
    let what = format!("of the marked request (origin status {marker})");
    let line = crate::support::logs::wait_for_line(w, &what, |l| l["origin_status"] == marker);
    assert_eq!(line["scope"], scope, "{line}");
}

// ---------------------------------------------------------------------------------------
// Verified claims

/// A client's token expires, it refreshes and retries with the same key: a token for the
/// same subject is the same caller, so the retry replays and the origin executes once.
#[test]
fn a_refreshed_token_for_the_same_subject_replays_for_every_algorithm() {
    let w = jwt_worker();
    let o = origin();
    for signing in [Signing::Hs256, Signing::Rs256, Signing::Es256, Signing::EdDsa] {
        let subject = unique("acct");
        let (key, path) = (unique("refresh"), new_path("/v1/charges/"));
        let (first_token, refreshed) = (mint(signing, &claims(&subject)), mint(signing, &claims(&subject)));
        assert_ne!(first_token, refreshed);
        let first = w.send(&charge(&path, &key, &bearer(&first_token)));
        let execution = assert_executed(&first);
        let retry = w.send(&charge(&path, &key, &bearer(&refreshed)));
        assert_replay_of(&retry, &execution);
        assert_eq!(o.executions(&key), 1, "{signing:?}: one execution across the refresh");
    }
    let token = bearer(&mint(Signing::Es256, &claims(&unique("acct"))));
    assert_scope_logged(w, charge(&new_path("/v1/charges/"), &unique("logged"), &token), "claim");
}

#[test]
fn two_subjects_using_one_key_get_two_executions() {
    let w = jwt_worker();
    let o = origin();
    let (key, path) = (unique("two-subjects"), new_path("/v1/charges/"));
    let alice = w.send(&charge(&path, &key, &bearer(&mint(Signing::Es256, &claims(&unique("alice"))))));
    let bob = w.send(&charge(&path, &key, &bearer(&mint(Signing::Es256, &claims(&unique("bob"))))));
    assert_ne!(assert_executed(&alice), assert_executed(&bob));
    assert_eq!(o.executions(&key), 2);
}

/// A claim path walks one way only. A token that holds a top-level member
/// literally named `org.id` beside its own nested `org.id` is scoped by the nested one where
/// the route's claim is `org.id`: it cannot take another organisation's scope, and gets its
/// own execution, not the other's answer. A JSON pointer names either: `/org/id` the nested
/// member, `/org.id` the member named with a dot.
#[test]
fn a_claim_named_with_dots_never_stands_in_for_the_nested_path() {
    let w = jwt_worker();
    let o = origin();
    let (victim_org, own_org) = (unique("victim-org"), unique("own-org"));
    let token = |claims: Value| bearer(&mint(Signing::Es256, &claims));
    let member_of = |org: &str| {
        let mut claims = claims(&unique("acct"));
        claims["org"] = json!({ "id": org });
        claims
    };
    let impostor = || {
        let mut claims = member_of(&own_org);
        claims["org.id"] = json!(victim_org);
        claims
    };
    for prefix in ["/v1/org/", "/v1/org-pointer/"] {
        let (key, path) = (unique("org"), new_path(prefix));
        let victims = assert_executed(&w.send(&charge(&path, &key, &token(member_of(&victim_org)))));
        // Another member of the victim's organisation shares its scope: a replay.
        assert_replay_of(&w.send(&charge(&path, &key, &token(member_of(&victim_org)))), &victims);
        let impostors = w.send(&charge(&path, &key, &token(impostor())));
        assert_ne!(assert_executed(&impostors), victims, "{prefix}: the impostor's own execution");
        assert_eq!(o.executions(&key), 2, "{prefix}");
        // A token with only the member named with a dot has no nested claim: refused.
        let mut dotted_only = claims(&unique("acct"));
        dotted_only["org.id"] = json!(victim_org);
        let refused = w.send(&charge(&new_path(prefix), &unique("org"), &token(dotted_only)));
        assert_problem(&refused, 401, "unverified-credential");
    }
    // `/org.id` is the member named with a dot, and only it.
    let (key, path) = (unique("org"), new_path("/v1/org-named/"));
    let mut dotted_only = claims(&unique("acct"));
    dotted_only["org.id"] = json!(own_org);
    let named = assert_executed(&w.send(&charge(&path, &key, &token(dotted_only))));
    let mut both = member_of(&victim_org);
    both["org.id"] = json!(own_org);
    assert_replay_of(&w.send(&charge(&path, &key, &token(both))), &named);
    assert_eq!(o.executions(&key), 1);
    let nested_only =
        w.send(&charge(&new_path("/v1/org-named/"), &unique("org"), &token(member_of(&own_org))));
    assert_problem(&nested_only, 401, "unverified-credential");
}

/// A verified claim is the caller, wherever it calls from: one subject over the limit does
/// not limit another subject calling from the same address.
#[test]
fn one_verified_subject_over_the_limit_does_not_limit_another_at_the_same_ip() {
    let w = limited_worker();
    within_one_rate_limit_period();
    let send = |subject: &str| {
        let key = unique("limited-claim");
        let token = bearer(&mint(Signing::Hs256, &claims(subject)));
        w.send(&charge(&format!("/v1/limited/{key}"), &key, &token).header("CF-Connecting-IP", "127.0.0.7"))
    };
    let (alice, bob) = (unique("alice"), unique("bob"));
    let answers: Vec<Response> = (0..3).map(|_| send(&alice)).collect();
    assert_limited_on_the_third(&answers);
    let other = send(&bob);
    assert_eq!(other.status, 201, "bob at alice's IP is not limited by alice: {other:?}");
    assert_problem(&send(&alice), 429, "rate-limited");
}

/// A token that does not verify is refused (401, the reason named) and forwards nothing:
/// whatever it claims, it never reaches the victim's records, and it never becomes a scope
/// of its own.
#[test]
fn unverified_tokens_never_get_another_callers_answer() {
    let w = jwt_worker();
    let o = origin();
    let victim = unique("victim");
    let (key, path) = (unique("attacked"), new_path("/v1/charges/"));
    let original = w.send(&charge(&path, &key, &bearer(&mint(Signing::Es256, &claims(&victim)))));
    let victims_execution = assert_executed(&original);

    let mut expired = claims(&victim);
    expired["exp"] = json!(now() - 3_600);
    let mut wrong_issuer = claims(&victim);
    wrong_issuer["iss"] = json!("https://evil.e2e.test");
    let mut wrong_audience = claims(&victim);
    wrong_audience["aud"] = json!("someone-else");
    let attacks = [
        ("a forged signature", mint(Signing::Es256Forged, &claims(&victim)), "signature"),
        ("alg: none", mint(Signing::None, &claims(&victim)), "algorithm"),
        (
            "HS256 signed with the RSA public key",
            mint(Signing::Hs256WithPublicKey, &claims(&victim)),
            "signature",
        ),
        ("an expired token", mint(Signing::Es256, &expired), "expired"),
        ("the wrong issuer", mint(Signing::Es256, &wrong_issuer), "issuer"),
        ("the wrong audience", mint(Signing::Es256, &wrong_audience), "audience"),
        // Only inline keys here: nothing to refetch, so an unknown kid is final.
        ("an unknown kid", mint(Signing::Es256UnknownKid, &claims(&victim)), "unknown-kid"),
    ];
    for (label, token, reason) in &attacks {
        let r = w.send(&charge(&path, &key, &bearer(token)));
        assert_problem(&r, 401, "unverified-credential");
        assert!(r.text().contains(&format!("({reason})")), "{label}: the reason is named: {r:?}");
        // No origin answer at all: neither the origin's execution header nor its body (an
        // execution's serial number alone is a few digits, which a problem's random
        // `instance` may contain by chance).
        let from_origin = r.has_header("x-origin-execution") || r.text().contains("\"execution\"");
        assert!(!from_origin, "{label}: got another caller's answer ({victims_execution}): {r:?}");
    }
    assert_eq!(o.executions(&key), 1, "no unverified token reached the origin");
    // The victim still gets its own answer.
    let retry = w.send(&charge(&path, &key, &bearer(&mint(Signing::Es256, &claims(&victim)))));
    assert_replay_of(&retry, &victims_execution);
}

/// Two numeric subjects that one `f64` cannot tell apart: both refused,
/// neither sharing the other's scope; a whole number within 64 bits still verifies.
#[test]
fn numeric_subjects_past_64_bits_are_refused_not_merged() {
    let w = jwt_worker();
    let o = origin();
    let claims_with = |sub: &str| {
        format!(
            r#"{{"iss":"{ISSUER}","aud":"{AUDIENCE}","sub":{sub},"exp":{},"jti":"{}"}}"#,
            now() + 300,
            unique("jti")
        )
    };
    let (key, path) = (unique("numeric"), new_path("/v1/charges/"));
    for sub in ["12345678901234567890123", "12345678901234567890124"] {
        let r = w.send(&charge(&path, &key, &bearer(&mint_text(Signing::Es256, &claims_with(sub)))));
        assert_problem(&r, 401, "unverified-credential");
        assert!(r.text().contains("(claim)"), "{r:?}");
    }
    assert_eq!(o.executions(&key), 0);
    let within = bearer(&mint_text(Signing::Es256, &claims_with("18446744073709551615")));
    let execution = assert_executed(&w.send(&charge(&path, &key, &within)));
    let refreshed = bearer(&mint_text(Signing::Es256, &claims_with("18446744073709551615")));
    assert_replay_of(&w.send(&charge(&path, &key, &refreshed)), &execution);
    let neighbour = bearer(&mint_text(Signing::Es256, &claims_with("18446744073709551614")));
    assert_ne!(assert_executed(&w.send(&charge(&path, &key, &neighbour))), execution, "another subject");
}

// ---------------------------------------------------------------------------------------
// The credential scope, as before

#[test]
fn opaque_api_keys_scope_exactly_as_before() {
    let w = jwt_worker();
    let o = origin();
    let api_key = format!("Bearer sk_test_{}", unique("opaque"));
    let other_key = format!("Bearer sk_test_{}", unique("opaque"));
    for prefix in ["/v1/opaque/", "/v1/charges/"] {
        // On the claim route an opaque key is an unverified token: the same credential hash.
        let (key, path) = (unique("opaque"), new_path(prefix));
        let first = w.send(&charge(&path, &key, &api_key));
        let execution = assert_executed(&first);
        assert_replay_of(&w.send(&charge(&path, &key, &api_key)), &execution);
        let other = w.send(&charge(&path, &key, &other_key));
        assert_ne!(assert_executed(&other), execution, "{prefix}: another API key is another caller");
        assert_eq!(o.executions(&key), 2);
    }
    // The pitfall of the credential scope: on a route that hashes the credential, a
    // refreshed token is another caller, and the retry executes again.
    let subject = unique("acct");
    let (key, path) = (unique("pitfall"), new_path("/v1/opaque/"));
    let first = w.send(&charge(&path, &key, &bearer(&mint(Signing::Es256, &claims(&subject)))));
    let refreshed = w.send(&charge(&path, &key, &bearer(&mint(Signing::Es256, &claims(&subject)))));
    assert_ne!(assert_executed(&first), assert_executed(&refreshed));
    assert_eq!(o.executions(&key), 2);
    let token = bearer(&mint(Signing::Es256, &claims(&subject)));
    assert_scope_logged(w, charge(&new_path("/v1/opaque/"), &unique("logged"), &token), "credential");
}

// ---------------------------------------------------------------------------------------
// Anonymous callers

#[test]
fn an_absent_or_empty_scope_header_is_refused_by_default() {
    let w = jwt_worker();
    let o = origin();
    for (label, request) in [
        ("absent", Request::post(&new_path("/v1/charges/")).anonymous()),
        ("empty", Request::post(&new_path("/v1/charges/")).header("Authorization", "")),
        ("on the opaque route", Request::post(&new_path("/v1/opaque/")).anonymous()),
    ] {
        let path = request.path.clone();
        let r = w.send(&request.header("Idempotency-Key", unique("anon")).json(BODY));
        assert_problem(&r, 401, "missing-credential");
        assert_eq!(r.header("www-authenticate"), Some("Bearer"), "{label}: {r:?}");
        assert_eq!(o.executions_at(&path), 0, "{label}: nothing forwarded");
    }
    // A route may let anonymous callers in: they share one scope.
    let (key, path) = (unique("open"), new_path("/v1/open/"));
    let first = w.send(&Request::post(&path).anonymous().header("Idempotency-Key", &key).json(BODY));
    let execution = assert_executed(&first);
    let other =
        w.send(&Request::post(&path).header("Authorization", "").header("Idempotency-Key", &key).json(BODY));
    assert_replay_of(&other, &execution);
}

#[test]
fn allow_anonymous_keeps_one_shared_scope() {
    let w = down_worker();
    let o = origin();
    let (key, path) = (unique("anonymous"), new_path("/v1/charges/"));
    let first = w.send(&Request::post(&path).anonymous().header("Idempotency-Key", &key).json(BODY));
    let execution = assert_executed(&first);
    let second =
        w.send(&Request::post(&path).header("Authorization", "").header("Idempotency-Key", &key).json(BODY));
    assert_replay_of(&second, &execution);
    assert_eq!(o.executions(&key), 1);
    let anonymous =
        Request::post(&new_path("/v1/charges/")).anonymous().header("Idempotency-Key", unique("logged"));
    assert_scope_logged(w, anonymous.json(BODY), "anonymous");
}

// ---------------------------------------------------------------------------------------
// On-behalf-of headers

#[test]
fn stripe_account_separates_connected_accounts_under_one_platform_token() {
    let w = jwt_worker();
    let o = origin();
    let platform = unique("platform");
    let (key, path) = (unique("connect"), new_path("/v1/charges/"));
    let on_behalf = |account: Option<&str>| {
        let request = charge(&path, &key, &bearer(&mint(Signing::Rs256, &claims(&platform))));
        match account {
            Some(account) => request.header("Stripe-Account", account),
            None => request,
        }
    };
    let a = assert_executed(&w.send(&on_behalf(Some("acct_A"))));
    let b = assert_executed(&w.send(&on_behalf(Some("acct_B"))));
    let none = assert_executed(&w.send(&on_behalf(None)));
    assert!(a != b && b != none && a != none);
    assert_replay_of(&w.send(&on_behalf(Some("acct_A"))), &a);
    assert_replay_of(&w.send(&on_behalf(Some("acct_B"))), &b);
    assert_eq!(o.executions(&key), 3);
    // Opaque keys too.
    let (key, path) = (unique("connect-opaque"), new_path("/v1/opaque/"));
    let send =
        |account: &str| w.send(&charge(&path, &key, "Bearer sk_platform").header("Stripe-Account", account));
    assert_ne!(assert_executed(&send("acct_A")), assert_executed(&send("acct_B")));
}

// ---------------------------------------------------------------------------------------
// Required verification

#[test]
fn required_verification_answers_401_and_forwards_nothing() {
    let w = required_worker();
    let o = origin();
    let subject = unique("acct");
    let mut expired = claims(&subject);
    expired["exp"] = json!(now() - 3_600);
    for (label, authorization) in [
        ("a forged signature", bearer(&mint(Signing::Es256Forged, &claims(&subject)))),
        ("an expired token", bearer(&mint(Signing::Es256, &expired))),
        ("alg: none", bearer(&mint(Signing::None, &claims(&subject)))),
        ("an opaque API key", "Bearer sk_test_opaque".to_owned()),
    ] {
        let path = new_path("/v1/charges/");
        let r = w.send(&charge(&path, &unique("required"), &authorization));
        assert_problem(&r, 401, "unverified-credential");
        assert_eq!(o.executions_at(&path), 0, "{label}: nothing forwarded");
    }
    let path = new_path("/v1/charges/");
    let r =
        w.send(&Request::post(&path).anonymous().header("Idempotency-Key", unique("required")).json(BODY));
    assert_problem(&r, 401, "missing-credential");
    assert_eq!(o.executions_at(&path), 0);
    let (key, path) = (unique("required"), new_path("/v1/charges/"));
    let ok = w.send(&charge(&path, &key, &bearer(&mint(Signing::EdDsa, &claims(&subject)))));
    let execution = assert_executed(&ok);
    let retry = w.send(&charge(&path, &key, &bearer(&mint(Signing::Hs256, &claims(&subject)))));
    assert_replay_of(&retry, &execution);
}

/// The worker remembers tokens that verified; a remembered token still expires at its `exp`.
#[test]
fn a_token_that_verified_before_is_refused_once_it_expires() {
    let w = required_worker();
    let o = origin();
    let mut short_lived = claims(&unique("acct"));
    // Long enough for two requests on a loaded machine (no window under 10 s).
    let exp = now() + 12;
    short_lived["exp"] = json!(exp);
    let token = bearer(&mint(Signing::Es256, &short_lived));
    let (key, path) = (unique("expiring"), new_path("/v1/charges/"));
    let execution = assert_executed(&w.send(&charge(&path, &key, &token)));
    assert_replay_of(&w.send(&charge(&path, &key, &token)), &execution);
    // Wait for the clock, not for the worker: the token's `exp` must be in the past.
    while now() <= exp + 1 {
        thread::sleep(Duration::from_millis(200));
    }
    let late = w.send(&charge(&path, &key, &token));
    assert_problem(&late, 401, "unverified-credential");
    assert!(late.text().contains("expired"), "{late:?}");
    assert_eq!(o.executions(&key), 1);
}

// ---------------------------------------------------------------------------------------
// JWKS URL

/// Keys come from the URL; a token under a new `kid` fetches the rotated JWKS (and still
/// replays: same subject), and a second unknown `kid` within 30 s fetches nothing.
#[test]
fn key_rotation_through_the_jwks_url_fetches_the_new_kid() {
    let w = url_worker();
    let o = origin();
    let server = jwks_server();
    let subject = unique("acct");
    let (key, path) = (unique("rotation"), new_path("/v1/charges/"));
    let first = w.send(&charge(&path, &key, &bearer(&mint(Signing::Es256, &claims(&subject)))));
    let execution = assert_executed(&first);
    assert_eq!(server.fetches(), 1, "the first token fetched the JWKS");
    assert_replay_of(
        &w.send(&charge(&path, &key, &bearer(&mint(Signing::Es256, &claims(&subject))))),
        &execution,
    );
    assert_eq!(server.fetches(), 1, "the JWKS is cached");

    server.publish(
        json!({"keys": [ec_jwk("ec-1", &keys().ec), ec_jwk("ec-2", &keys().ec_rotated)]}).to_string(),
    );
    let rotated = w.send(&charge(&path, &key, &bearer(&mint(Signing::Es256Rotated, &claims(&subject)))));
    assert_replay_of(&rotated, &execution);
    assert_eq!(server.fetches(), 2, "an unknown kid refetched the JWKS once");
    assert_eq!(o.executions(&key), 1);

    // Another unknown kid within 30 s cannot be refetched yet: it may be a key the JWKS
    // is about to publish, so the token is not refused as unknown, nor scoped otherwise.
    let unknown_path = new_path("/v1/charges/");
    let unknown = w.send(&charge(
        &unknown_path,
        &unique("rotation"),
        &bearer(&mint(Signing::Es256UnknownKid, &claims(&subject))),
    ));
    assert_problem(&unknown, 503, "identity-unavailable");
    assert_eq!(unknown.header("retry-after"), Some("30"), "{unknown:?}");
    assert_eq!(o.executions_at(&unknown_path), 0, "nothing forwarded");
    assert_eq!(server.fetches(), 2, "at most one refetch per 30 s");
}

/// Tokens that arrive while the JWKS is being fetched wait for that one fetch: eight at once
/// on a new isolate's empty cache make one fetch (held 2 s at the server, so every one of
/// them arrives during it), and every one is verified and executed once. A fetch per
/// request would count eight; a waiter never woken would leave its request unanswered.
#[test]
fn tokens_arriving_during_the_jwks_fetch_all_wait_for_that_one_fetch() {
    let server = JwksServer::start_slow(
        json!({"keys": [ec_jwk("ec-1", &keys().ec)]}).to_string(),
        Duration::from_secs(2),
    );
    let w = start("jwks-url-slow", &[("SCOPE_JWKS_URL", server.url())]).unwrap_or_else(|e| panic!("{e}"));
    let o = origin();
    let requests: Vec<(String, Request)> = (0..8)
        .map(|_| {
            let key = unique("shared-fetch");
            let token = bearer(&mint(Signing::Es256, &claims(&unique("acct"))));
            let request = charge(&new_path("/v1/charges/"), &key, &token).timeout(Duration::from_secs(60));
            (key, request)
        })
        .collect();
    let in_flight: Vec<_> =
        requests.iter().map(|(_, request)| request.start(w.addr).expect("send a request")).collect();
    for ((key, _), sent) in requests.iter().zip(in_flight) {
        let answer = sent.finish().expect("an answer");
        assert_executed(&answer);
        assert_eq!(o.executions(key), 1);
    }
    assert_eq!(server.fetches(), 1, "one fetch served every request that waited for it");
}

/// A JWKS URL that is down: a token cannot be verified, so it is refused with 503 and
/// `Retry-After` (never scoped by its credential hash, which another isolate with the keys
/// would not share), and nothing is forwarded. Callers without a token are unaffected.
#[test]
fn a_jwks_url_that_is_down_refuses_tokens_with_503_and_forwards_nothing() {
    let w = down_worker();
    let o = origin();
    let token = bearer(&mint(Signing::Es256, &claims(&unique("acct"))));
    let (key, path) = (unique("down"), new_path("/v1/charges/"));
    for _ in 0..2 {
        let refused = w.send(&charge(&path, &key, &token));
        assert_problem(&refused, 503, "identity-unavailable");
        assert_eq!(refused.header("retry-after"), Some("30"), "{refused:?}");
    }
    assert_eq!(o.executions(&key), 0);
    // An opaque API key is no token: its credential hash, as ever.
    let (key, path) = (unique("down"), new_path("/v1/charges/"));
    let opaque = format!("Bearer sk_test_{}", unique("opaque"));
    let execution = assert_executed(&w.send(&charge(&path, &key, &opaque)));
    assert_replay_of(&w.send(&charge(&path, &key, &opaque)), &execution);
    assert_eq!(o.executions(&key), 1);
}

/// A JWKS URL that answers with a redirect: the redirect is not followed, even
/// to a server that holds the keys, so the fetch failed: tokens are 503
/// `identity-unavailable` and nothing is forwarded. (An https URL redirected to plain http is
/// the case this closes; local workerd serves no https, so any redirect stands for it.)
#[test]
fn a_jwks_url_that_redirects_is_a_failed_fetch_and_is_not_followed() {
    // Its own JWKS server, which holds the token's key: the shared one counts fetches.
    let keys_elsewhere = JwksServer::start(json!({"keys": [ec_jwk("ec-1", &keys().ec)]}).to_string());
    let redirects = Arc::new(AtomicUsize::new(0));
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind the redirecting JWKS URL");
    let redirecting_url =
        format!("http://{}/.well-known/jwks.json", listener.local_addr().expect("its address"));
    {
        let (redirects, location) = (redirects.clone(), keys_elsewhere.url());
        thread::spawn(move || {
            for mut stream in listener.incoming().flatten() {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).is_ok_and(|n| n == 1) {
                    head.push(byte[0]);
                }
                redirects.fetch_add(1, Ordering::SeqCst);
                let reply = format!(
                    "HTTP/1.1 302 Found\r\nLocation: {location}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                );
                let _ = stream.write_all(reply.as_bytes());
            }
        });
    }
    let w = start("jwks-redirect", &[("SCOPE_JWKS_URL", redirecting_url)]).unwrap_or_else(|e| panic!("{e}"));
    let o = origin();
    let token = bearer(&mint(Signing::Es256, &claims(&unique("acct"))));
    let (key, path) = (unique("redirected"), new_path("/v1/charges/"));
    let refused = w.send(&charge(&path, &key, &token));
    assert_problem(&refused, 503, "identity-unavailable");
    assert!(redirects.load(Ordering::SeqCst) >= 1, "the JWKS URL was asked");
    assert_eq!(keys_elsewhere.fetches(), 0, "the redirect was not followed");
    assert_eq!(o.executions(&key), 0, "nothing was forwarded");
    crate::support::logs::wait_for_text(&w, "a redirect, not followed");
}

/// Two isolates that disagree about the keys, one after the other on one persist folder:
/// the first cannot reach the JWKS, the second can. One key sent to each is executed once
/// (were the first to put it in the credential's scope and the second in the claim's, it
/// would execute twice).
#[test]
fn isolates_that_disagree_about_the_keys_execute_a_key_once() {
    let nothing_listens = format!("http://127.0.0.1:{}/jwks.json", free_port());
    let w = start("jwks-disagree", &[("SCOPE_JWKS_URL", nothing_listens)]).unwrap_or_else(|e| panic!("{e}"));
    // Its own JWKS server: the shared one counts the fetches of another test.
    let server = JwksServer::start(json!({"keys": [ec_jwk("ec-1", &keys().ec)]}).to_string());
    let o = origin();
    let token = bearer(&mint(Signing::Es256, &claims(&unique("acct"))));
    let (key, path) = (unique("disagree"), new_path("/v1/charges/"));
    assert_problem(&w.send(&charge(&path, &key, &token)), 503, "identity-unavailable");
    assert_eq!(o.executions(&key), 0);
    w.crash();
    w.restart_with_vars(Readiness::OriginAnswers, &[("SCOPE_JWKS_URL", &server.url())])
        .unwrap_or_else(|e| panic!("restart: {e}"));
    let execution = assert_executed(&w.send(&charge(&path, &key, &token)));
    assert_replay_of(&w.send(&charge(&path, &key, &token)), &execution);
    assert_eq!(o.executions(&key), 1, "one key, one execution, whichever isolate saw it first");
}

// ---------------------------------------------------------------------------------------
// Logs

#[test]
fn logs_hold_no_token_claim_value_or_key() {
    let w = jwt_worker();
    let subject = unique("secret-subject");
    let token = mint(Signing::Rs256, &claims(&subject));
    let (key, path) = (unique("logged"), new_path("/v1/charges/"));
    assert_executed(&w.send(&charge(&path, &key, &bearer(&token))));
    let forged = mint(Signing::Es256Forged, &claims(&subject));
    assert_problem(&w.send(&charge(&path, &key, &bearer(&forged))), 401, "unverified-credential");
    // Every line of both requests is in the log once a later request's line is.
    sentinel(w, origin());
    let log = w.log_contents();
    let signature = |t: &str| t.rsplit('.').next().unwrap_or_default().to_owned();
    for (what, value) in [
        ("a token", token.clone()),
        ("a token's signature", signature(&token)),
        ("a forged token", forged.clone()),
        ("a claim value", subject.clone()),
        ("the key", key.clone()),
        ("the HS256 secret", keys().hs256.clone()),
    ] {
        assert!(!log.contains(&value), "the log holds {what}");
    }
}

/// `SCOPE_JWT_REQUIRED` with a JWKS URL that is down, or that accepts the connection and
/// never answers: a token is refused 503 `identity-unavailable` (the worker gives up on
/// the fetch after its own timeout, well within the client's patience) and nothing is
/// forwarded.
#[test]
fn required_tokens_with_the_jwks_down_or_hanging_are_503_and_forward_nothing() {
    // A JWKS server that takes connections and never answers (held until the test ends).
    let hanging = TcpListener::bind("127.0.0.1:0").expect("bind the hanging JWKS");
    let hanging_url = format!("http://{}/jwks.json", hanging.local_addr().expect("its address"));
    let held = Arc::new(Mutex::new(Vec::new()));
    {
        let held = held.clone();
        thread::spawn(move || {
            for stream in hanging.incoming().flatten() {
                held.lock().expect("the held connections").push(stream);
            }
        });
    }
    let down_url = format!("http://127.0.0.1:{}/jwks.json", free_port());
    let o = origin();
    for (name, url) in [("jwks-required-hanging", hanging_url), ("jwks-required-down", down_url)] {
        let w = start(name, &[("SCOPE_JWKS_URL", url), ("SCOPE_JWT_REQUIRED", "true".to_string())])
            .unwrap_or_else(|e| panic!("{e}"));
        let token = bearer(&mint(Signing::Es256, &claims(&unique("acct"))));
        let (key, path) = (unique("required-down"), new_path("/v1/charges/"));
        let refused = w.send(&charge(&path, &key, &token).timeout(Duration::from_secs(60)));
        assert_problem(&refused, 503, "identity-unavailable");
        assert_eq!(o.executions(&key), 0, "{name}: nothing forwarded");
        // An opaque credential is refused too (required), without waiting for any key.
        let opaque = w.send(&charge(&path, &unique("required-down"), "Bearer sk_test_opaque"));
        assert_problem(&opaque, 401, "unverified-credential");
        assert_eq!(o.executions_at(&path), 0, "{name}: nothing forwarded at all");
    }
}
